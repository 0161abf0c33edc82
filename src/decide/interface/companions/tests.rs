//! The companions' rules and table, against fe80-only links and `docs/policy.md`.

use super::reads::{gloo_name_fails, netdev_unusable, OmpiTarget};
use super::*;
use crate::test_snapshot::SnapshotBuilder;

/// The companions' step with NCCL bound to `eth0` 10.244.1.7 (Open MPI gets 10.244.1.0/24; `mpirun`: ncclenv
/// runs in front of mpirun), repairs allowed.
fn at_eth0<'a, 'n>(
    view: &'a NetworkView<'n>,
    snap: &'a Snapshot,
    multi: bool,
    mpirun: bool,
) -> Companion<'a, 'n> {
    Companion {
        view,
        snap,
        ifname: "eth0",
        gname: "eth0",
        addr: "10.244.1.7".parse().ok(),
        multi,
        fix: Fix { vendor: false },
        ompi: OmpiTarget {
            value: "10.244.1.0/24".into(),
            mpirun,
            rank: false,
        },
    }
}

/// `eth0` 10.244.1.7/24 and `net1` UP with only fe80 (a Multus network whose IPAM has not delivered).
fn fe80_net1() -> Snapshot {
    SnapshotBuilder::new()
        .plug("eth0", &["10.244.1.7/24"])
        .plug("net1", &["fe80::6c:1/64"])
        .plug("net2", &[])
        .build()
}

/// #26 item 4: each companion's own rule on an fe80-only `net1`: unusable in a multi-node job, fine on
/// one node; `eth0` always fine; a link without address and a missing one fail everywhere.
#[test]
fn companion_rules_on_an_fe80_only_link() {
    let snap = fe80_net1();
    let Ok(net) = &snap.net else {
        panic!("no network")
    };
    let view = NetworkView::new(net, &[]);
    for multi in [true, false] {
        assert_eq!(gloo_name_fails(&view, "eth0", multi), None);
        assert_eq!(netdev_unusable(&view, "eth0", multi), None);
        assert!(gloo_name_fails(&view, "net2", multi).is_some());
        assert!(netdev_unusable(&view, "net2", multi).is_some_and(|w| w.contains("no address")));
        assert!(netdev_unusable(&view, "eth9", multi).is_some_and(|w| w.contains("no such")));
    }
    assert!(gloo_name_fails(&view, "net1", true).is_some_and(|w| w.contains("fe80::6c:1")));
    assert!(netdev_unusable(&view, "net1", true).is_some_and(|w| w.contains("link-local")));
    assert_eq!(gloo_name_fails(&view, "net1", false), None);
    assert_eq!(netdev_unusable(&view, "net1", false), None);
}

/// #26 item 4 through each companion's step: `net1` (fe80 only) is repaired in a multi-node job and
/// kept on one node; `eth0` (NCCL's interface) is kept.
#[test]
fn companions_repaired_when_fe80_only_kept_when_they_work() {
    let run = |var: &'static str, val: &str, multi: bool| {
        let snap = SnapshotBuilder::new()
            .plug("eth0", &["10.244.1.7/24"])
            .plug("net1", &["fe80::6c:1/64"])
            .plug("net2", &[])
            .env(var, val)
            .build();
        let Ok(net) = &snap.net else {
            panic!("no network")
        };
        let view = NetworkView::new(net, &[]);
        let c = at_eth0(&view, &snap, multi, false);
        let mut plan = Plan::default();
        let e = COMPANIONS
            .iter()
            .find(|e| e.var == var)
            .expect("in the table");
        c.judge(e, &mut plan);
        plan
    };
    for (var, repaired) in [
        ("HOROVOD_GLOO_IFACE", "eth0"),
        ("OMPI_MCA_btl_tcp_if_include", "10.244.1.0/24"),
        ("OMPI_MCA_oob_tcp_if_include", "10.244.1.0/24"),
        ("UCX_NET_DEVICES", "eth0"),
    ] {
        let p = run(var, "net1", true);
        assert_eq!(p.value_of(var), Some(repaired), "{var}");
        assert!(p
            .warnings
            .iter()
            .any(|w| w.code == "launcher-ifname-repaired" && w.message.contains("link-local")));
        let p = run(var, "net1", false);
        assert_eq!(p.value_of(var), None, "{var} on one node");
        let p = run(var, "eth0", true);
        assert_eq!(p.value_of(var), None, "{var}=eth0");
        assert!(p.warnings.is_empty(), "{var}=eth0: {:?}", p.warnings);
    }
}

/// [`COMPANIONS`] is `docs/policy.md`'s "Companions" table: the same variables in the same order, and each
/// variable's cells (read by, syntax, when unset, repaired when inherited) are its entry's [`Doc`].
#[test]
fn table_is_the_policy_docs_companions_table() {
    let policy = include_str!("../../../../docs/policy.md");
    let section = policy
        .split("\n## Companions\n")
        .nth(1)
        .expect("docs/policy.md has a Companions section");
    let mut vars: Vec<&str> = Vec::new();
    for row in section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
    {
        let cells: Vec<&str> = row
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        assert_eq!(cells.len(), 5, "{row}");
        let doc = Doc {
            read_by: cells[1],
            syntax: cells[2],
            when_unset: cells[3],
            repaired: cells[4],
        };
        for var in cells[0].split(", ").map(|cell| cell.trim_matches('`')) {
            let e = COMPANIONS.iter().find(|e| e.var == var);
            assert_eq!(e.map(|e| e.doc), Some(doc), "{var}");
            vars.push(var);
        }
    }
    let table: Vec<&str> = COMPANIONS.iter().map(|e| e.var).collect();
    assert_eq!(vars, table);
}

/// Every companion goes through the one rule for inherited values: [`COMPANIONS`] is the companions' row of
/// `docs/policy.md`'s "Inherited values: one rule" table (`crate::decide::inherit::ROUTED`).
#[test]
fn every_companion_is_routed_through_the_one_rule() {
    let table: Vec<&str> = COMPANIONS.iter().map(|e| e.var).collect();
    let row = crate::decide::inherit::ROUTED
        .iter()
        .find(|r| r.judged.contains("Companion::judge"))
        .expect("the companions' row");
    assert_eq!(row.vars, table.as_slice());
}

/// Break-it (stop 32): with an Open MPI exclude list given (`OMPI_MCA_btl_tcp_if_exclude`, or `--mca
/// oob_tcp_if_exclude` on mpirun's command line) ncclenv sets no include list beside it (Open MPI refuses
/// both), and says so; without one it sets both for mpirun.
#[test]
fn an_open_mpi_exclude_list_is_kept_and_no_include_list_is_set() {
    let run = |env: &[(&str, &str)], mca: &[&str]| {
        let mut b = SnapshotBuilder::new().plug("eth0", &["10.244.1.7/24"]);
        for (k, v) in env {
            b = b.env(k, v);
        }
        let mut snap = b.build();
        snap.job.spread = Some(crate::snapshot::Spread {
            mca: mca.iter().map(|m| m.to_string()).collect(),
            ..Default::default()
        });
        let Ok(net) = &snap.net else {
            panic!("no network")
        };
        let view = NetworkView::new(net, &[]);
        let c = at_eth0(&view, &snap, true, true);
        let mut plan = Plan::default();
        for e in COMPANIONS.iter().filter(|e| e.var.starts_with("OMPI_MCA_")) {
            c.judge(e, &mut plan);
        }
        plan
    };
    let plan = run(&[], &[]);
    for var in ["OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include"] {
        assert_eq!(plan.value_of(var), Some("10.244.1.0/24"), "{var}");
    }
    let plan = run(
        &[("OMPI_MCA_btl_tcp_if_exclude", "lo,docker0")],
        &["oob_tcp_if_exclude"],
    );
    assert_eq!(plan.value_of("OMPI_MCA_btl_tcp_if_include"), None);
    assert_eq!(plan.value_of("OMPI_MCA_oob_tcp_if_include"), None);
    let kept: Vec<&str> = plan
        .warnings
        .iter()
        .filter(|w| w.code == "ompi-exclude-kept")
        .map(|w| w.message.as_str())
        .collect();
    assert_eq!(kept.len(), 2, "{:?}", plan.warnings);
    assert!(
        kept[0].starts_with("OMPI_MCA_btl_tcp_if_exclude=lo,docker0 is given"),
        "{}",
        kept[0]
    );
    assert!(
        kept[1].starts_with("mpirun --mca oob_tcp_if_exclude is given"),
        "{}",
        kept[1]
    );
}

/// Break-it (stop 32): a Gloo list that names NCCL's interface and a container bridge (`eth0,docker0`) is
/// kept with a warning in a multi-node job (Gloo spreads its pairs over every listed device); on one node,
/// and for a list of two real NICs, it is kept silently.
#[test]
fn a_gloo_list_with_a_container_bridge_warns_across_nodes() {
    let run = |val: &str, multi: bool| {
        let snap = SnapshotBuilder::new()
            .plug("eth0", &["10.244.1.7/24"])
            .plug("eth1", &["10.245.1.7/24"])
            .plug("docker0", &["172.17.0.1/16"])
            .env("GLOO_SOCKET_IFNAME", val)
            .build();
        let Ok(net) = &snap.net else {
            panic!("no network")
        };
        let view = NetworkView::new(net, &[]);
        let c = at_eth0(&view, &snap, multi, false);
        let mut plan = Plan::default();
        let e = COMPANIONS
            .iter()
            .find(|e| e.var == "GLOO_SOCKET_IFNAME")
            .expect("in the table");
        c.judge(e, &mut plan);
        plan.warnings
            .iter()
            .map(|w| w.code.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(run("eth0,docker0", true), ["companion-differs"]);
    assert!(run("eth0,docker0", false).is_empty(), "one node");
    assert!(run("eth0,eth1", true).is_empty(), "two NICs");
    assert!(run("eth0", true).is_empty());
}
