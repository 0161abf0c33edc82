//! The switch table against `docs/policy.md`, the one rule's table and the rules that read it.

use super::*;
use crate::config::Config;
use crate::decide::inherit::ROUTED;
use crate::findings::Finding;
use crate::snapshot::{GpuInfo, NetPlugin, RdmaSnapshot, ShmInfo};
use crate::test_snapshot::SnapshotBuilder;

/// The rows of the table under `heading` in `docs/policy.md`, each split into its cells.
fn policy_rows(heading: &str) -> Vec<Vec<String>> {
    let policy = include_str!("../../../docs/policy.md");
    let section = policy
        .split(&format!("\n## {heading}\n"))
        .nth(1)
        .expect("docs/policy.md has the section");
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|row| {
            row.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

/// [`SWITCHES`] is `docs/policy.md`'s "Transport switches" table: the same variables in the same order, each
/// row's cells its entry's [`Doc`], and every code the findings cell names a finding code.
#[test]
fn table_is_the_policy_docs_switches_table() {
    let rows = policy_rows("Transport switches");
    let docs: Vec<Vec<String>> = SWITCHES
        .iter()
        .map(|s| {
            let d = s.doc;
            [
                format!("`{}`", s.var),
                d.turns_off.into(),
                d.nccl_reads.into(),
                d.sets.into(),
                d.findings.into(),
            ]
            .to_vec()
        })
        .collect();
    assert_eq!(rows, docs);
    for s in SWITCHES {
        for code in s.doc.findings.split('`').skip(1).step_by(2) {
            assert!(Finding::from_code(code).is_some(), "{code} in {}", s.var);
        }
    }
}

/// Every switch goes through the one rule for inherited values: each has its row in `docs/policy.md`'s
/// "Inherited values: one rule" table ([`ROUTED`]), judged through [`Switch::decide`].
#[test]
fn every_switch_is_routed_through_the_one_rule() {
    for s in SWITCHES {
        let r = ROUTED.iter().find(|r| r.vars == [s.var]);
        let r = r.unwrap_or_else(|| panic!("{} has no row of its own in ROUTED", s.var));
        assert!(
            r.judged.contains("`Switch::decide`"),
            "{}: {}",
            s.var,
            r.judged
        );
    }
}

/// The named entries are the switches they name.
#[test]
fn the_named_entries_are_their_rows() {
    let named = [
        (SHM, "NCCL_SHM_DISABLE"),
        (P2P, "NCCL_P2P_DISABLE"),
        (IB, "NCCL_IB_DISABLE"),
        (IBEXT, "NCCL_IBEXT_DISABLE"),
    ];
    assert_eq!(named.len(), SWITCHES.len());
    for (s, var) in named {
        assert_eq!(s.var, var);
    }
}

/// A node where every rule turns its transport off: no RDMA device, a net plugin that would load, a 64 MiB
/// `/dev/shm` for 4 GPUs; `env` inherited.
fn every_transport_off(env: &[(&str, &str)]) -> Snapshot {
    let mut s = SnapshotBuilder::new()
        .rdma(RdmaSnapshot::default())
        .shm(ShmInfo {
            path: "/dev/shm".into(),
            total_bytes: Some(64 << 20),
            free_bytes: Some(64 << 20),
            writable: Some(true),
            ..ShmInfo::default()
        })
        .gpus(GpuInfo {
            count: Some(4),
            source: "test".into(),
            warning: None,
        })
        .envs(env)
        .build();
    s.net_plugins = vec![NetPlugin {
        path: "/opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so".into(),
        source: "LD_LIBRARY_PATH".into(),
        loads: true,
    }];
    s
}

/// The RDMA and `/dev/shm` rules, which read the switches.
fn run(s: &Snapshot) -> Plan {
    let cfg = Config::default();
    let mut p = Plan::default();
    crate::decide::rdma::decide_rdma(s, &cfg, &mut p);
    crate::decide::shm::decide_shm(s, &cfg, &mut p);
    p
}

/// Every entry is used: where its rule turns the transport off, an unset switch gets exactly
/// [`Switch::sets`] (nothing where it is `None`), and an inherited one is read: it is kept (not set) and
/// the plan differs from the unset one's.
#[test]
fn every_entry_is_read_and_set_as_the_table_says() {
    let unset = run(&every_transport_off(&[]));
    for s in SWITCHES {
        assert_eq!(unset.value_of(s.var), s.sets, "{}", s.var);
        let kept = run(&every_transport_off(&[(s.var, "1")]));
        assert_eq!(kept.value_of(s.var), None, "{}", s.var);
        assert_ne!(
            format!("{kept:?}"),
            format!("{unset:?}"),
            "{} inherited changes nothing: its entry is not read",
            s.var
        );
    }
}

/// How a switch is read is written once: the rules name a switch only through the table (no `"NCCL_…"`
/// literal of a switch outside the tests), so every read and every set goes through [`Switch`].
#[test]
fn the_rules_name_the_switches_only_through_the_table() {
    let sources = [
        ("decide/mod.rs", include_str!("../mod.rs")),
        ("decide/rdma.rs", include_str!("../rdma.rs")),
        ("decide/shm.rs", include_str!("../shm.rs")),
        ("decide/spread.rs", include_str!("../spread.rs")),
        ("decide/debug.rs", include_str!("../debug.rs")),
        ("decide/gid.rs", include_str!("../gid.rs")),
        ("check/repair.rs", include_str!("../../check/repair.rs")),
    ];
    for (file, text) in sources {
        let code = text
            .split("\n#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or(text);
        for s in SWITCHES {
            let literal = format!("\"{}\"", s.var);
            assert!(!code.contains(&literal), "{file} names {literal}");
        }
    }
}

/// Each switch is read as NCCL reads it ([`Switch::reads`]): 1 in any base turns every switch off, 0 and a
/// non-number none; other integers turn off only the switches NCCL tests against zero (IB, IBext), not those it
/// compares with 1 (SHM, P2P). The docs' cell says which.
#[test]
fn each_switch_is_read_as_nccl_reads_it() {
    for s in SWITCHES {
        for v in ["1", "0x1", "01", " 1", "1abc"] {
            assert!((s.reads)(v), "{}={v:?}", s.var);
        }
        for v in ["0", "", "yes", "0x0"] {
            assert!(!(s.reads)(v), "{}={v:?}", s.var);
        }
        let at_one = s.doc.nccl_reads.contains("only 1 turns it off");
        for v in ["2", "0x2", "-1"] {
            assert_eq!((s.reads)(v), !at_one, "{}={v:?}", s.var);
        }
    }
    assert!(!(SHM.reads)("2") && !(P2P.reads)("2") && (IB.reads)("2") && (IBEXT.reads)("2"));
}

/// [`Outcome::off`]: a kept switch by its value, a set one always, an unset one never.
#[test]
fn outcome_off_is_the_transports_state() {
    assert!(Outcome::Kept { off: true }.off());
    assert!(!Outcome::Kept { off: false }.off());
    assert!(Outcome::Set.off());
    assert!(!Outcome::Unset.off());
}

/// A switch NCCL reads as unset (an empty value: `ncclLoadParam` keeps the default) is decided as an unset
/// one: where its rule turns the transport off, ncclenv sets it (break-it finding: `-e NCCL_SHM_DISABLE=` kept
/// a `/dev/shm` too small in use). A value that is not plainly 0 or 1 is quoted with how NCCL reads it.
#[test]
fn an_empty_switch_is_unset_and_other_values_say_how_nccl_reads_them() {
    let unset = run(&every_transport_off(&[]));
    for s in SWITCHES.iter().filter(|s| s.sets.is_some()) {
        let empty = run(&every_transport_off(&[(s.var, "")]));
        assert_eq!(empty.value_of(s.var), s.sets, "{}=\"\"", s.var);
        assert_eq!(empty.value_of(s.var), unset.value_of(s.var));
    }
    let inh = |v| {
        Inherited::of(
            "NCCL_SHM_DISABLE",
            v,
            crate::nccl_rules::Origin::Environment,
        )
    };
    assert_eq!(SHM.reading(&inh("1")), "");
    assert_eq!(SHM.reading(&inh("0")), "");
    assert_eq!(
        SHM.reading(&inh("2")),
        " (NCCL turns SHM off only at 1: 2 leaves it on)"
    );
    assert_eq!(
        SHM.reading(&inh("yes")),
        " (NCCL reads yes as 0: SHM stays on)"
    );
    assert_eq!(SHM.reading(&inh("0x1")), " (NCCL reads 0x1 as 1: SHM off)");
    let shm2 = run(&every_transport_off(&[("NCCL_SHM_DISABLE", "2")]));
    let w = shm2
        .warnings
        .iter()
        .find(|w| w.code == "shm-too-small")
        .expect("shm-too-small");
    assert!(w.message.contains("2 leaves it on"), "{}", w.message);
    assert!(
        w.remedy.starts_with("set NCCL_SHM_DISABLE=1"),
        "{}",
        w.remedy
    );
}
