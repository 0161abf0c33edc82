//! The decision core with plain data: the field cases F1–F13 and F16–F21, F26–F29 (docs/field-cases.md) as
//! snapshots, no kernel involved; F1–F13, F16, F18–F20 and F26–F29 are rows of the one table in
//! `tests/it/common/layouts.rs` ([`decided`]), F17 and the checks a row cannot hold hand-written. The same
//! cases run against real namespaces in `tests/it/field_cases.rs`.

use crate::common::layouts::{self, Case};
use crate::common::snapshot::{has_warning, ip, warning, warnings, SnapshotBuilder as Lay};
use ncclenv::config::Config;
use ncclenv::decide::decide;
use ncclenv::plan::{Action, Plan, Severity, Verdict};
use ncclenv::snapshot::*;

fn val<'a>(p: &'a Plan, k: &str) -> Option<&'a str> {
    p.value_of(k)
}
fn refused(p: &Plan) -> bool {
    matches!(p.verdict, Verdict::Refuse { .. })
}

/// Decides the field case `c` (a row of `tests/it/common/layouts.rs`, which `field_cases` runs through the
/// binary too) and checks what the row says: each expected value as the command would see it (the change,
/// else the inherited value; an inherited one it expects, unchanged; the defaults of [`Case::expected`]),
/// the findings present and absent, the infos, quiet, and strict mode. Returns the machine and the plan for
/// the test's own checks.
fn decided(c: &Case) -> (Lay, Plan) {
    let l = c.lay();
    let p = l.decide();
    for (k, want) in c.expected() {
        // What the command sees: the change, else the inherited value.
        let change = p.changes.iter().find(|ch| ch.name == k);
        let seen = match change.map(|ch| &ch.action) {
            Some(Action::Set { value }) => Some(value.as_str()),
            Some(Action::Unset) => None,
            None => c.inherited(k),
        };
        assert_eq!(seen, want, "{k}: {:?}", p.changes);
        if want.is_some() && want == c.inherited(k) {
            assert!(change.is_none(), "{k} kept: no change {:?}", p.changes);
        }
    }
    for code in c.warns {
        assert_eq!(warning(&p, code).severity, Severity::Warn, "{code}");
    }
    for code in c.infos {
        assert_eq!(warning(&p, code).severity, Severity::Info, "{code}");
    }
    for code in c.not {
        assert!(!has_warning(&p, code), "{code}: {:?}", p.warnings);
    }
    if c.quiet {
        assert!(!p.has_warnings(), "{:?}", p.warnings);
    }
    assert_eq!(
        refused(&l.strict()),
        c.strict_refuses,
        "strict: {:?}",
        p.warnings
    );
    (l, p)
}

#[test]
fn f1_docker_bridge() {
    decided(&layouts::CASE_F1);
}

#[test]
fn f2_deep_learning_containers_6469_baked_name_missing_on_host() {
    decided(&layouts::CASE_F2);
    let (_, p) = decided(&layouts::CASE_F2_BAKED);
    let c = p
        .changes
        .iter()
        .find(|c| c.name == "NCCL_SOCKET_IFNAME")
        .expect("change");
    assert_eq!(c.replaced.as_deref(), Some("eth0"));
}

#[test]
fn f3_nccl_697_compose_bridges_and_veths() {
    let (_, p) = decided(&layouts::CASE_F3);
    for c in &p.changes {
        if let Action::Set { value } = &c.action {
            assert!(!value.contains("br-") && !value.contains("veth"), "{c:?}");
        }
    }
}

#[test]
fn f4_pytorch_68893_fe80_veth_beside_uplink() {
    decided(&layouts::CASE_F4);
}

fn f5() -> Lay {
    layouts::F5.lay()
}

#[test]
fn f5_nccl_1837_missing_name_is_repaired_listing_usable() {
    let (_, p) = decided(&layouts::CASE_F5_MISSING);
    let w = warning(&p, "inherited-ifname-repaired");
    for n in ["eth0", "eth1", "eth10"] {
        assert!(w.message.contains(n), "{}", w.message);
    }
}

#[test]
fn f5_nccl_1837_prefix_matching_two_is_kept_with_warning() {
    let (_, p) = decided(&layouts::CASE_F5_PREFIX);
    let w = warning(&p, "inherited-ifname-prefix");
    assert!(
        w.message.contains("eth10") && w.remedy.contains("=eth1"),
        "{w:?}"
    );
    // Nothing inherited: eth0, and the plain name since nothing else starts with eth0.
    decided(&layouts::CASE_F5);
}

#[test]
fn f6_aws_do_eks_51_gloo_given_nccl_syntax() {
    decided(&layouts::CASE_F6);
}

#[test]
fn f7_nccl_177_prefix_catches_vlan_children() {
    decided(&layouts::CASE_F7);
    let (_, p) = decided(&layouts::CASE_F7_PREFIX);
    let w = warning(&p, "inherited-ifname-prefix");
    assert!(
        w.message.contains("bond0.2973.1") && w.message.contains("link-local"),
        "{}",
        w.message
    );
}

#[test]
fn f8_ray_30333_wifi_uplink_and_whitelist_missing_it() {
    decided(&layouts::CASE_F8);
    decided(&layouts::CASE_F8_LIST);
}

#[test]
fn f9_nccl_529_ipv6_only_with_link_local_tunnel_first() {
    decided(&layouts::CASE_F9);
}

#[test]
fn f10_no_network() {
    let (_, p) = decided(&layouts::CASE_F10);
    assert!(!refused(&p));
    let mut l = Lay::new();
    l.nnodes(2);
    let p = l.decide();
    let Verdict::Refuse {
        reason,
        remedy,
        code,
    } = &p.verdict
    else {
        panic!("a 2-node job with only lo must be refused: {:?}", p.verdict)
    };
    assert!(
        reason.contains("lo") && remedy.contains("network"),
        "{reason} / {remedy}"
    );
    assert_eq!(code, "no-interface-multi-node");
}

#[test]
fn f11_default_route_over_dead_link() {
    let (_, p) = decided(&layouts::CASE_F11);
    let w = warning(&p, "default-route-down");
    assert!(
        w.message.contains("eth0") && w.message.contains("eth1"),
        "{}",
        w.message
    );
}

#[test]
fn f12_peer_on_secondary_network() {
    decided(&layouts::CASE_F12);
    decided(&layouts::CASE_F12_PEER);
    // This pod is the master: the route is local, the owner of the address wins.
    decided(&layouts::CASE_F12_LOCAL);
}

/// F13, NVIDIA/nccl#342 and PaddlePaddle/Paddle#29331: Docker's 64 MiB `/dev/shm` with 4 GPUs.
#[test]
fn f13_nccl_342_docker_64m_dev_shm() {
    let (_, p) = decided(&layouts::CASE_F13);
    let w = warning(&p, "shm-too-small");
    assert!(
        w.remedy.contains("--shm-size") && w.remedy.contains("--ipc=host"),
        "{w:?}"
    );
    decided(&layouts::CASE_F13_KEPT);
    decided(&layouts::CASE_F13_KEPT_ON);
    decided(&layouts::CASE_F13_ROOM);
}

#[test]
fn no_route_and_several_candidates_warns_and_ranks() {
    let mut l = Lay::new();
    let b = l.link("docker0", true, Some("bridge"));
    l.addr(b, "172.17.0.1/16");
    l.plug("vethx", &["10.5.0.2/24"]);
    let n = l.link("ens3", true, None);
    l.addr(n, "10.6.0.2/24");
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("ens3"));
    assert!(has_warning(&p, "no-route-decided"));
    assert!(refused(&l.strict()));
}

#[test]
fn comm_id_changes_nothing() {
    let mut l = f5();
    l.env("NCCL_COMM_ID", "10.0.0.1:1234");
    let p = l.decide();
    assert!(p.hands_off && p.changes.is_empty());
    // Even with a vendor profile: NCCL_COMM_ID stays fully hands off.
    l.env("FI_PROVIDER", "efa");
    let p = l.decide();
    assert!(p.hands_off && p.changes.is_empty());
}

/// `NCCL_COMM_ID` stays hands off, but an inherited `NCCL_SOCKET_IFNAME` that matches nothing still breaks
/// NCCL's network transports: warned (`comm-id-ifname-unmatched`, strict), nothing changed.
#[test]
fn comm_id_still_warns_about_an_unmatched_ifname() {
    let mut l = f5();
    l.env("NCCL_COMM_ID", "10.0.0.1:1234");
    l.env("NCCL_SOCKET_IFNAME", "eth1");
    let p = l.decide();
    assert!(p.hands_off && p.changes.is_empty());
    assert!(!has_warning(&p, "comm-id-ifname-unmatched"), "{p:?}");
    l.env("NCCL_SOCKET_IFNAME", "ens9");
    let p = l.decide();
    assert!(p.hands_off && p.changes.is_empty(), "{:?}", p.changes);
    let w = warning(&p, "comm-id-ifname-unmatched");
    assert!(w.message.contains("\"ens9\""), "{}", w.message);
    assert!(w.remedy.contains("eth0"), "{}", w.remedy);
    assert!(refused(&l.strict()));
    // A vendor plugin carries the traffic: NCCL's own transports never read it.
    l.env("FI_PROVIDER", "efa");
    assert!(!has_warning(&l.decide(), "comm-id-ifname-unmatched"));
}

/// F23: `/dev/shm` is decided under a vendor profile and with `NCCL_COMM_ID` too; NCCL's transport variables
/// stay untouched (and with `NCCL_COMM_ID` the network too).
#[test]
fn f23_shared_memory_decided_under_vendor_profile_and_comm_id() {
    for (k, v) in [
        ("NCCL_FASTRAK_IFNAME", "eth1"),
        ("NCCL_COMM_ID", "10.0.0.1:1234"),
    ] {
        let mut l = f5();
        l.env(k, v);
        let snap = Snapshot {
            net: Ok(l.net.clone()),
            env: l.env.clone(),
            shm: Some(ShmInfo {
                path: "/dev/shm".into(),
                total_bytes: Some(64 << 20),
                free_bytes: Some(64 << 20),
                writable: Some(true),
                ..ShmInfo::default()
            }),
            gpus: Some(GpuInfo {
                count: Some(8),
                source: "CUDA_VISIBLE_DEVICES".into(),
                warning: None,
            }),
            ..Snapshot::default()
        };
        let p = decide(&snap, &Config::default());
        assert_eq!(val(&p, "NCCL_SHM_DISABLE"), Some("1"), "{k}");
        assert!(has_warning(&p, "shm-too-small"), "{k}");
        for name in ["NCCL_IB_DISABLE", "NCCL_IB_HCA", "NCCL_FASTRAK_IFNAME"] {
            assert_eq!(val(&p, name), None, "{k}: {name}");
        }
        if k == "NCCL_COMM_ID" {
            // Hands off the network: the shared-memory variable is the only change.
            assert!(p.hands_off);
            assert_eq!(p.changes.len(), 1, "{k}: {:?}", p.changes);
        }
        // With room enough, nothing changes at all.
        let mut big = snap.clone();
        if let Some(s) = big.shm.as_mut() {
            s.free_bytes = Some(1 << 30);
        }
        assert_eq!(
            val(&decide(&big, &Config::default()), "NCCL_SHM_DISABLE"),
            None,
            "{k}"
        );
    }
}

#[test]
fn failed_probe_fails_open_or_refuses_strictly() {
    let snap = Snapshot {
        net: Err("netlink refused".into()),
        ..Snapshot::default()
    };
    let p = decide(&snap, &Config::default());
    assert!(p.hands_off && p.changes.is_empty() && !refused(&p));
    assert!(has_warning(&p, "probe-failed"));
    let p = decide(
        &snap,
        &Config {
            strict: true,
            ..Config::default()
        },
    );
    assert!(refused(&p));
}

#[test]
fn proxy_without_no_proxy_warns_for_an_http_rendezvous() {
    let mut l = f5();
    l.peer("--master", "10.0.0.9", Some(2), false);
    l.rendezvous(
        RdzvProtocol::Http,
        "Paddle's HTTP master",
        "--master",
        "10.0.0.9",
    );
    l.env("HTTP_PROXY", "http://proxy:3128");
    assert!(has_warning(&l.decide(), "proxy-catches-peer"));
    l.env("NO_PROXY", "10.0.0.0/8");
    assert!(!has_warning(&l.decide(), "proxy-catches-peer"));
}

#[test]
fn overlapping_prefixes_warn() {
    let mut l = Lay::new();
    let a = l.plug("eth0", &["10.0.0.2/16"]);
    l.plug("eth1", &["10.0.5.2/24"]);
    l.default_via("10.0.0.1", a, 0, false);
    assert!(has_warning(&l.decide(), "overlapping-prefixes"));
}

#[test]
fn loopback_inherited_in_multi_node_job_is_repaired() {
    let mut l = f5();
    l.nnodes(2);
    l.env("NCCL_SOCKET_IFNAME", "lo");
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("eth0"));
    // Unknown shape: kept with a risk warning.
    let mut l = f5();
    l.env("NCCL_SOCKET_IFNAME", "lo");
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), None);
    assert!(has_warning(&p, "inherited-ifname-risky"));
}

/// A host like the reviewer's: eth0 with IPv4 and the default route, docker0 with one fe80-only veth port.
fn host_with_docker() -> Lay {
    let mut l = Lay::new();
    let e = l.plug("eth0", &["10.1.0.5/24", "fe80::5/64"]);
    l.default_via("10.1.0.1", e, 0, false);
    let d = l.link("docker0", true, Some("bridge"));
    l.addr(d, "172.17.0.1/16");
    l.plug("vethd1p", &["fe80::d1/64"]);
    l
}

#[test]
fn inherited_ipv6_family_without_ipv6_is_repaired_not_blamed_on_the_network() {
    let mut l = host_with_docker();
    l.env("NCCL_SOCKET_FAMILY", "AF_INET6");
    l.nnodes(2);
    let p = l.decide();
    assert!(!refused(&p), "{:?}", p.verdict);
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("eth0"));
    assert_eq!(val(&p, "NCCL_SOCKET_FAMILY"), Some("AF_INET"));
    let c = p
        .changes
        .iter()
        .find(|c| c.name == "NCCL_SOCKET_FAMILY")
        .expect("change");
    assert_eq!(c.replaced.as_deref(), Some("AF_INET6"));
    assert!(has_warning(&p, "inherited-family-repaired"));
    assert!(!has_warning(&p, "loopback-only"));
    assert!(refused(&l.strict()));
}

#[test]
fn risk_is_judged_with_the_family_ncclenv_exports() {
    // `^docker,lo` matches eth0 and the fe80-only veth; with NCCL_SOCKET_FAMILY=AF_INET (exported by
    // ncclenv) NCCL never selects the veth, so there is nothing risky to refuse.
    let mut l = host_with_docker();
    l.env("NCCL_SOCKET_IFNAME", "^docker,lo");
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), None, "kept");
    assert_eq!(val(&p, "NCCL_SOCKET_FAMILY"), Some("AF_INET"));
    assert!(
        !has_warning(&p, "inherited-ifname-risky"),
        "{:?}",
        p.warnings
    );
    assert!(!refused(&l.strict()));
    // With AF_INET6 inherited the veth stays in NCCL's list: the risk is real.
    let mut l = host_with_docker();
    l.net.addrs.push(Addr {
        index: 2,
        addr: ip("fd00::5"),
        prefix_len: 64,
        scope: 0,
        tentative: false,
        deprecated: false,
        dad_failed: false,
        label: None,
    });
    l.env("NCCL_SOCKET_IFNAME", "^docker,lo");
    l.env("NCCL_SOCKET_FAMILY", "AF_INET6");
    assert!(has_warning(&l.decide(), "inherited-ifname-risky"));
}

#[test]
fn a_refusal_caused_by_the_exclude_list_says_so() {
    let mut l = f5();
    l.nnodes(2);
    let cfg = Config {
        exclude: vec!["eth0".into(), "eth1".into(), "eth10".into()],
        ..Config::default()
    };
    let p = l.decide_with(&cfg);
    match &p.verdict {
        Verdict::Refuse { reason, .. } => {
            assert!(
                reason.contains("NCCLENV_EXCLUDE=eth0,eth1,eth10"),
                "{reason}"
            );
            assert!(!reason.contains("--network=none"), "{reason}");
        }
        v => panic!("{v:?}"),
    }
}

#[test]
fn a_loopback_master_in_a_multi_node_job_warns() {
    let mut l = f5();
    l.nnodes(2);
    l.peer("MASTER_ADDR", "127.0.0.1", Some(1), true);
    assert!(has_warning(&l.decide(), "peer-is-loopback"));
    let mut l = f5();
    l.peer("MASTER_ADDR", "127.0.0.1", Some(1), true);
    assert!(
        !has_warning(&l.decide(), "peer-is-loopback"),
        "unknown shape: fine"
    );
    // On the master itself (node rank 0) nothing is wrong here: an info that says so and names the address
    // the other nodes need.
    let mut l = f5();
    l.nnodes(2);
    l.job.node_rank = Some(0);
    l.job.node_rank_source = Some("NODE_RANK".into());
    l.peer("MASTER_ADDR", "127.0.0.1", Some(1), true);
    let p = l.decide();
    let f = warning(&p, "peer-is-loopback");
    assert_eq!(f.severity, ncclenv::plan::Severity::Info, "{f:?}");
    assert!(
        f.message.contains("node rank 0 (NODE_RANK), the master"),
        "{}",
        f.message
    );
    assert!(!f.message.contains("cannot reach"), "{}", f.message);
    assert!(f.remedy.contains("10.0.0.5"), "{}", f.remedy);
    // A host name that resolves to loopback here (the master's own /etc/hosts entry): said as such.
    let mut l = f5();
    l.nnodes(2);
    l.peer("MASTER_ADDR", "127.0.1.1", Some(1), true);
    if let Some(p) = &mut l.peer {
        p.host = "job-master-0".into();
    }
    let p = l.decide();
    let f = warning(&p, "peer-is-loopback");
    assert!(
        f.message.contains("job-master-0")
            && f.message
                .contains("resolves to a loopback address here (127.0.1.1)")
            && f.message.contains("if this node is the master"),
        "{}",
        f.message
    );
    // The name also resolves to an address this node owns: this node is the master, said as an info.
    if let Some(p) = &mut l.peer {
        p.addrs.push(ip("10.0.0.5"));
    }
    let p = l.decide();
    let f = warning(&p, "peer-is-loopback");
    assert_eq!(f.severity, ncclenv::plan::Severity::Info, "{f:?}");
    assert!(
        f.message.contains("other address 10.0.0.5"),
        "{}",
        f.message
    );
}

/// #21 item 5: a cross-node list (`enp179s0f0,enp1s0`, each node's NIC) is kept without a warning where one
/// entry matches here; only a list of which no entry matches is a problem (repaired).
#[test]
fn cross_node_list_is_kept_quietly_when_one_entry_matches() {
    let mut l = Lay::new();
    let e = l.plug("enp1s0", &["10.7.0.5/24"]);
    l.default_via("10.7.0.1", e, 0, false);
    l.env("NCCL_SOCKET_IFNAME", "=enp179s0f0,enp1s0");
    let p = l.decide();
    assert_eq!(
        val(&p, "NCCL_SOCKET_IFNAME"),
        None,
        "kept: enp1s0 matches: {:?}",
        p.warnings
    );
    assert!(
        !p.warnings
            .iter()
            .any(|w| w.code == "inherited-ifname-entry-unmatched"
                || w.remedy.contains("remove those entries")),
        "{:?}",
        p.warnings
    );
    let mut l = Lay::new();
    let e = l.plug("enp1s0", &["10.7.0.5/24"]);
    l.default_via("10.7.0.1", e, 0, false);
    l.env("NCCL_SOCKET_IFNAME", "enp179s0f0,ens5");
    let p = l.decide();
    assert_eq!(
        val(&p, "NCCL_SOCKET_IFNAME"),
        Some("enp1s0"),
        "no entry matches here: repaired"
    );
}

#[test]
fn entries_that_match_nothing_are_pointed_out_with_the_space() {
    let mut l = f5();
    l.env("NCCL_SOCKET_IFNAME", "eth0, eth1");
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), None, "kept: eth0 works");
    let w = warning(&p, "inherited-ifname-entry-unmatched");
    assert!(
        w.message.contains("\" eth1\"") && w.message.contains("whitespace"),
        "{}",
        w.message
    );
    let mut l = f5();
    l.env("NCCL_SOCKET_IFNAME", "eth0 ");
    let p = l.decide();
    let w = warning(&p, "inherited-ifname-repaired");
    assert!(w.message.contains("whitespace"), "{}", w.message);
}

/// `eth0` has an address but no carrier and comes first; `eth1` carries the default route; `ens3` is a
/// third interface.
fn dead_first() -> Lay {
    let mut l = Lay::new();
    l.stub("eth0", &["10.0.0.2/24"]);
    let e1 = l.plug("eth1", &["10.0.1.2/24"]);
    l.default_via("10.0.1.1", e1, 0, false);
    l.plug("ens3", &["10.0.3.2/24"]);
    l
}

/// An inherited prefix whose first match has no carrier: NCCL before 2.28 bootstraps on it (a certain
/// failure: repaired), 2.28+ skips it (kept). The version is the one the command will load; unknown or
/// several versions mean the rules before 2.28.
#[test]
fn a_dead_first_match_fails_before_nccl_2_28_only() {
    for (versions, fails) in [
        (vec!["2.21.5"], true),
        (vec!["2.27.7"], true),
        (vec![], true),
        (vec!["2.28.3"], false),
        (vec!["2.30.7"], false),
    ] {
        let mut l = dead_first();
        if let Some(v) = versions.first() {
            l.nccl(v);
        }
        l.env("NCCL_SOCKET_IFNAME", "eth");
        let p = l.decide();
        if fails {
            assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("eth1"), "{versions:?}");
            let w = warning(&p, "inherited-ifname-repaired");
            assert!(
                w.message.contains("eth0") && w.message.contains("no carrier"),
                "{versions:?}: {}",
                w.message
            );
            assert!(refused(&l.strict()), "{versions:?}");
        } else {
            assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), None, "kept: {versions:?}");
            assert_eq!(val(&p, "GLOO_SOCKET_IFNAME"), Some("eth1"));
            assert!(
                !has_warning(&p, "inherited-ifname-repaired"),
                "{:?}",
                p.warnings
            );
        }
    }
    // Several installations, one of them older than 2.28 (none named explicitly): the older rules.
    let mut l = dead_first();
    l.env("NCCL_SOCKET_IFNAME", "eth");
    for (v, src) in [("2.28.3", "ld.so.cache"), ("2.21.5", "site-packages")] {
        l.nccl.push(NcclInstall {
            path: format!("/x/libnccl.so.{v}"),
            version: Some(v.into()),
            source: src.into(),
        });
    }
    assert!(has_warning(&l.decide(), "inherited-ifname-repaired"));
    // A dead interface matched after a live one: kept, but NET/Socket before 2.28 would stripe over it.
    let mut l = Lay::new();
    let e0 = l.plug("eth0", &["10.0.0.2/24"]);
    l.default_via("10.0.0.1", e0, 0, false);
    l.stub("eth9", &["10.0.9.2/24"]);
    l.nccl("2.21.5");
    l.env("NCCL_SOCKET_IFNAME", "eth");
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), None);
    assert!(warning(&p, "inherited-ifname-risky")
        .message
        .contains("eth9"));
    l.nccl("2.28.3");
    assert!(!has_warning(&l.decide(), "inherited-ifname-risky"));
}

/// Every finding code: `ncclenv::findings::Finding::ALL`, from which `docs/findings.md`'s table is generated.
fn readme_codes() -> Vec<String> {
    ncclenv::findings::Finding::ALL
        .iter()
        .map(|f| f.code().to_string())
        .collect()
}

/// Every `.rs` file under `dir`, recursively, as text.
fn sources(dir: &std::path::Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(sources(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push((p.clone(), std::fs::read_to_string(&p).expect("read")));
        }
    }
    out
}

/// Every finding code (`Finding::ALL`, the table of `docs/findings.md`) is asserted by some test (named as
/// `"code"` or `[code]` in tests/ or in a unit-test module). That every code the decision emits is documented
/// holds by construction: rules take a `Finding`, and the table is generated from it (`src/findings.rs`).
#[test]
fn every_finding_code_is_documented_and_tested() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let documented = readme_codes();
    assert!(documented.len() >= 30, "{documented:?}");
    let mut test_text = String::new();
    for (_, t) in sources(&root.join("tests")) {
        test_text.push_str(&t);
    }
    let src = sources(&root.join("src"));
    for (_, t) in &src {
        if let Some((_, tests)) = t.split_once("#[cfg(test)]") {
            test_text.push_str(tests);
        }
    }
    let untested: Vec<&String> = documented
        .iter()
        .filter(|c| {
            !test_text.contains(&format!("\"{c}\"")) && !test_text.contains(&format!("[{c}]"))
        })
        .collect();
    assert!(
        untested.is_empty(),
        "no test names these codes: {untested:?}"
    );
}

// ---------------------------------------------------------------------------------------------------------
// F16–F21, F26–F29: the peer decides (docs/field-cases.md; the policy: docs/policy.md)

/// F16, PaddlePaddle/Paddle#47130: a direct cable with IPv4 link-local addresses. Link-local is usable when
/// the master is on that link, and never taken without it.
#[test]
fn f16_paddle_47130_direct_cable_with_link_local_addresses() {
    for c in [
        &layouts::CASE_F16,
        &layouts::CASE_F16_MASTER,
        &layouts::CASE_F16_KEPT,
        &layouts::CASE_F16_UPLINK,
        &layouts::CASE_F16_UPLINK_KEPT,
        &layouts::CASE_F16_UPLINK_NO_PEER,
        &layouts::CASE_F16_UPLINK_REPAIRED,
    ] {
        decided(c);
    }
    // No default route either: eno1 is the only candidate (the cable is not one).
    let mut l = Lay::new();
    l.plug("eno1", &["10.20.0.5/24"]);
    l.plug("enp3s0", &["169.254.94.75/16"]);
    assert_eq!(val(&l.decide(), "NCCL_SOCKET_IFNAME"), Some("eno1"));
    // A peer reached through a gateway on that link does not make link-local usable.
    let mut l = layouts::F16.lay();
    l.nnodes(2);
    let cable = layouts::index(&l, "enp3s0");
    l.peer_via("MASTER_ADDR", "10.9.0.1", cable, "169.254.0.1");
    let p = l.decide();
    assert!(refused(&p), "{:#?}", p);
}

#[test]
fn an_ipv6_link_local_master_is_warned_and_never_used() {
    let mut l = Lay::new();
    let e = l.plug("eth0", &["10.0.0.5/24", "fd00::5/64", "fe80::5/64"]);
    l.default_via("10.0.0.1", e, 0, false);
    l.peer("MASTER_ADDR", "fe80::9", Some(e), false);
    let p = l.decide();
    let w = warning(&p, "peer-link-local");
    // The text says what ncclenv does (the route to it is not used, zone or not), nothing about NCCL's id.
    assert!(
        w.message.contains("fe80::9")
            && w.message.contains(
                "does not choose the interface by the route to it (with or without a %zone)"
            )
            && !w.message.contains("unique id"),
        "{}",
        w.message
    );
    // The route to a link-local peer decides nothing: the default route does.
    assert!(
        p.choice
            .as_ref()
            .is_some_and(|c| c.how.starts_with("default route")),
        "{:?}",
        p.choice
    );
    let mut l = f5();
    l.peer("MASTER_ADDR", "10.0.0.9", Some(2), false);
    assert!(!has_warning(&l.decide(), "peer-link-local"));
}

/// No route to the peer: the remedy says what ncclenv does instead; "the default route" only where there
/// is one.
#[test]
fn an_unreachable_peer_says_what_ncclenv_falls_back_to() {
    let unreachable = |default: bool| {
        let mut l = Lay::new();
        let e = l.plug("eth0", &["10.0.0.5/24"]);
        if default {
            l.default_via("10.0.0.1", e, 0, false);
        }
        l.peer("MASTER_ADDR", "192.0.2.1", None, false);
        if let Some(r) = l.net.peer_routes.last_mut() {
            r.error = Some("Network is unreachable".into());
        }
        let p = l.decide();
        warning(&p, "peer-unreachable").remedy.clone()
    };
    let r = unreachable(true);
    assert!(r.contains("falls back to the default route"), "{r}");
    let r = unreachable(false);
    assert!(!r.contains("falls back to the default route"), "{r}");
    assert!(r.contains("no default route here"), "{r}");
}

/// F17: the master's name does not resolve (yet): peer-unresolved, then a normal decision.
#[test]
fn f17_an_unresolved_peer_still_leaves_a_decided_environment() {
    let mut l = Lay::new();
    let e = l.plug("eth0", &["10.244.1.7/24"]);
    l.default_via("10.244.1.1", e, 0, false);
    l.nnodes(2);
    l.unresolved("MASTER_ADDR", "job-master-0", 2003);
    let p = l.decide();
    let w = warning(&p, "peer-unresolved");
    assert!(
        w.message.contains("job-master-0")
            && w.message.contains("2003 ms")
            && w.message.contains("MASTER_ADDR"),
        "{}",
        w.message
    );
    assert!(w.strict_refuses);
    assert!(!p.hands_off && !has_warning(&p, "probe-failed"));
    assert!(!has_warning(&p, "peer-unreachable") && !has_warning(&p, "no-route-decided"));
    for k in [
        "NCCL_SOCKET_IFNAME",
        "GLOO_SOCKET_IFNAME",
        "TP_SOCKET_IFNAME",
    ] {
        assert_eq!(val(&p, k), Some("eth0"), "{k}");
    }
    // The image's broken Gloo value is repaired as usual.
    l.env("GLOO_SOCKET_IFNAME", "^lo,docker");
    let p = l.decide();
    assert_eq!(val(&p, "GLOO_SOCKET_IFNAME"), Some("eth0"));
    assert!(has_warning(&p, "gloo-ifname-repaired"));
    assert!(refused(&l.strict()));
    // A resolved peer: no such warning.
    let mut l = f5();
    l.peer("MASTER_ADDR", "10.0.0.9", Some(2), false);
    assert!(!has_warning(&l.decide(), "peer-unresolved"));
}

/// F18, aws-samples/aws-do-eks#69: an EFA profile hands off the transport, not the bootstrap.
#[test]
fn f18_aws_do_eks_69_efa_vendor_profile() {
    decided(&layouts::CASE_F18_NO_PROFILE);
    let (_, p) = decided(&layouts::CASE_F18);
    assert!(!p.hands_off);
    for c in &p.changes {
        assert!(
            !c.name.starts_with("NCCL_IB_") && !c.name.starts_with("NCCL_NET"),
            "a transport variable changed: {c:?}"
        );
    }
    decided(&layouts::CASE_F18_KEPT);
    // Gloo's `^lo` too (a namespace run cannot show it kept: `field_cases` holds every exported Gloo value
    // to one plain name): kept and warned, never repaired.
    let mut l = layouts::CASE_F18_KEPT.lay();
    l.env("GLOO_SOCKET_IFNAME", "^lo");
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), None);
    assert_eq!(val(&p, "GLOO_SOCKET_IFNAME"), None);
    assert!(
        p.changes.iter().all(|c| c.replaced.is_none()),
        "{:?}",
        p.changes
    );
    assert!(
        !has_warning(&p, "inherited-ifname-repaired") && !has_warning(&p, "gloo-ifname-repaired")
    );
    let kept: Vec<&str> = warnings(&p, "vendor-value-kept")
        .map(|w| w.message.as_str())
        .collect();
    assert!(
        kept.iter()
            .any(|m| m.contains("NCCL_SOCKET_IFNAME=\"eth9\""))
            && kept
                .iter()
                .any(|m| m.contains("GLOO_SOCKET_IFNAME=\"^lo\"")),
        "{kept:?}"
    );
    assert!(refused(&l.strict()));
    // NCCL_NET_PLUGIN=none is no profile.
    let mut l = layouts::CASE_F18_NO_PROFILE.lay();
    l.env("NCCL_NET_PLUGIN", "none");
    let p = l.decide();
    assert!(!has_warning(&p, "vendor-profile"));
    assert_eq!(val(&p, "NCCL_IB_DISABLE"), Some("1"));
}

/// F19, a Kubeflow PyTorchJob: the rendezvous endpoint or the master named by `PET_*` variables on the
/// Multus network decides; a flag wins over its variable (the parsing: `launcher` unit tests).
#[test]
fn f19_kubeflow_pytorchjob_pet_variables() {
    decided(&layouts::CASE_F19);
    decided(&layouts::CASE_F19_MASTER_ADDR);
    decided(&layouts::CASE_F19_FLAG_WINS);
}

/// F20: the proxy warning is for HTTP rendezvous only, names whose, and knows what Paddle clears.
#[test]
fn f20_proxies_only_matter_to_http_rendezvous() {
    decided(&layouts::CASE_F20_TORCHRUN);
    let (_, p) = decided(&layouts::CASE_F20_PADDLE);
    let w = warning(&p, "proxy-catches-peer");
    assert!(
        w.message.contains("Paddle's HTTP master") && w.message.contains("HTTP_PROXY"),
        "{}",
        w.message
    );
    decided(&layouts::CASE_F20_NO_PROXY);
    decided(&layouts::CASE_F20_IPS);
    // Lower-case proxies alone: Paddle's launcher clears them. HTTPS_PROXY: not for an http:// master.
    let (mut l, _) = decided(&layouts::CASE_F20_LOWER_CASE);
    l.env("HTTPS_PROXY", "http://proxy.example:3128");
    assert!(!has_warning(&l.decide(), "proxy-catches-peer"));
    // ALL_PROXY counts; NO_PROXY naming the host exempts it.
    l.env("ALL_PROXY", "socks5://proxy.example:1080");
    assert!(has_warning(&l.decide(), "proxy-catches-peer"));
    l.env("NO_PROXY", "10.100.0.5");
    assert!(!has_warning(&l.decide(), "proxy-catches-peer"));
}

/// F26, horovod/horovod#1341: Horovod's own interface variable, and Open MPI's under `mpirun`.
#[test]
fn f26_horovod_1341_horovod_gloo_iface() {
    for c in [
        &layouts::CASE_F26,
        &layouts::CASE_F26_LIST,
        &layouts::CASE_F26_UNSET,
        &layouts::CASE_F26_MPI_UNSET,
        &layouts::CASE_F26_MPI_ONE_NODE,
    ] {
        let (_, p) = decided(c);
        if let Some(bad) = c.inherited("HOROVOD_GLOO_IFACE") {
            let w = warning(&p, "launcher-ifname-repaired");
            assert!(w.message.contains(bad), "{}", w.message);
        }
    }
    let (_, p) = decided(&layouts::CASE_F26_MPI);
    assert!(warning(&p, "launcher-ifname-repaired")
        .message
        .contains("eth9"));
    assert!(warning(&p, "companion-differs")
        .message
        .contains("10.5.2.0/24"));
    let lay = f26_em2;
    // The same without horovodrun: Horovod's variable is repaired whoever reads it.
    for bad in ["eth0", "em1,enp129s0f1"] {
        let mut l = lay();
        l.env("HOROVOD_GLOO_IFACE", bad);
        let p = l.decide();
        assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), None, "NCCL keeps em2");
        assert_eq!(val(&p, "HOROVOD_GLOO_IFACE"), Some("em2"), "{bad}");
        let c = p
            .changes
            .iter()
            .find(|c| c.name == "HOROVOD_GLOO_IFACE")
            .expect("change");
        assert_eq!(c.replaced.as_deref(), Some(bad));
        let w = warning(&p, "launcher-ifname-repaired");
        assert!(w.message.contains(bad) && w.strict_refuses, "{}", w.message);
        assert!(refused(&l.strict()));
    }
    let mut l = lay();
    l.env("HOROVOD_GLOO_IFACE", "em1");
    let p = l.decide();
    assert_eq!(val(&p, "HOROVOD_GLOO_IFACE"), None);
    assert!(warning(&p, "companion-differs")
        .message
        .contains("HOROVOD_GLOO_IFACE"));
    assert!(!has_warning(&p, "launcher-ifname-repaired"));
    // Unset: set only for horovodrun.
    assert_eq!(val(&lay().decide(), "HOROVOD_GLOO_IFACE"), None);
    let mut l = lay();
    l.job.launcher = Some(Launcher::Horovod);
    assert_eq!(val(&l.decide(), "HOROVOD_GLOO_IFACE"), Some("em2"));
}

/// F26's layout with `NCCL_SOCKET_IFNAME=em2` inherited and a plain command (no launcher read).
fn f26_em2() -> Lay {
    let mut l = layouts::F26.lay();
    l.env("NCCL_SOCKET_IFNAME", "em2");
    l
}

/// F26 beyond the report: Open MPI's and UCX's interface variables, each in its own syntax, with a plain
/// command (`mpirun`'s own rows: [`f26_horovod_1341_horovod_gloo_iface`]).
#[test]
fn f26_open_mpi_and_ucx_interface_variables() {
    let lay = f26_em2;
    // Open MPI: names or CIDR networks.
    for (value, repaired, differs) in [
        ("eth9", true, false),
        ("em2,10.99.0.0/16", true, false),
        ("10.5.2.0/24", false, false),
        ("em2", false, false),
        ("em1", false, true),
    ] {
        let mut l = lay();
        l.env("OMPI_MCA_btl_tcp_if_include", value);
        let p = l.decide();
        assert_eq!(
            has_warning(&p, "launcher-ifname-repaired"),
            repaired,
            "{value}: {:#?}",
            p.warnings
        );
        assert_eq!(
            has_warning(&p, "companion-differs"),
            differs,
            "{value}: {:#?}",
            p.warnings
        );
        // The node count is unknown: repaired to em2's network (valid on every node of it, #21).
        assert_eq!(
            val(&p, "OMPI_MCA_btl_tcp_if_include"),
            if repaired { Some("10.5.2.0/24") } else { None },
            "{value}"
        );
    }
    let mut l = lay();
    l.job.launcher = Some(Launcher::Mpi);
    let p = l.decide();
    assert_eq!(val(&p, "OMPI_MCA_btl_tcp_if_include"), Some("10.5.2.0/24"));
    assert_eq!(val(&p, "OMPI_MCA_oob_tcp_if_include"), Some("10.5.2.0/24"));
    // One node: the name.
    let mut l = lay();
    l.job.launcher = Some(Launcher::Mpi);
    l.job.nnodes = Some(1);
    let p = l.decide();
    assert_eq!(val(&p, "OMPI_MCA_btl_tcp_if_include"), Some("em2"));
    assert_eq!(val(&p, "OMPI_MCA_oob_tcp_if_include"), Some("em2"));
    // An Open MPI rank (`mpirun … ncclenv -- prog`): btl only.
    let mut l = lay();
    l.env("OMPI_COMM_WORLD_SIZE", "2");
    l.job.nnodes = Some(2);
    let p = l.decide();
    assert_eq!(val(&p, "OMPI_MCA_btl_tcp_if_include"), Some("10.5.2.0/24"));
    assert_eq!(val(&p, "OMPI_MCA_oob_tcp_if_include"), None);
    // UCX: a missing netdev is repaired; beside RDMA devices it is only warned; never set when unset.
    let mut l = lay();
    l.env("UCX_NET_DEVICES", "eth9");
    assert_eq!(val(&l.decide(), "UCX_NET_DEVICES"), Some("em2"));
    let mut l = lay();
    l.env("UCX_NET_DEVICES", "mlx5_0:1,eth9");
    let p = l.decide();
    assert_eq!(val(&p, "UCX_NET_DEVICES"), None);
    assert!(warning(&p, "companion-differs").message.contains("eth9"));
    let mut l = lay();
    l.env("UCX_NET_DEVICES", "all");
    assert!(!lay().decide().has_warnings() && !l.decide().has_warnings());
    l.job.launcher = Some(Launcher::Mpi);
    assert_eq!(val(&lay().decide(), "UCX_NET_DEVICES"), None);
}

/// F27, THUDM/slime#2151: SGLang's IPv6 init address on net1.
#[test]
fn f27_slime_2151_sglang_ipv6_init_address() {
    decided(&layouts::CASE_F27);
}

/// F28, aws/aws-parallelcluster-cookbook#2766: the default route lives in table 300, reached by an ip rule.
#[test]
fn f28_parallelcluster_cookbook_2766_default_route_in_another_table() {
    let (_, p) = decided(&layouts::CASE_F28);
    assert!(
        p.choice
            .as_ref()
            .is_some_and(|c| c.how.contains("table 300")),
        "{:?}",
        p.choice
    );
    // Control: without the rule's answer nothing tells them apart.
    let mut l = layouts::F28.lay();
    l.net.default_lookups.clear();
    let p = l.decide();
    assert!(has_warning(&p, "no-route-decided"));
    // An answer from table main changes nothing: main's default routes (metric, dead links) decide.
    let ens5 = layouts::index(&l, "ens5");
    let ens6 = layouts::index(&l, "ens6");
    l.default_via("10.7.1.1", ens5, 0, false);
    l.offlink(layouts::OFFLINK_PROBE, ens6, "10.7.2.1", 254);
    assert_eq!(val(&l.decide(), "NCCL_SOCKET_IFNAME"), Some("ens5"));
}

/// F29, vllm-project/vllm#15071: vLLM (or Ray) names this node's address; with no peer route it decides.
#[test]
fn f29_vllm_15071_vllm_host_ip_names_this_nodes_address() {
    decided(&layouts::CASE_F29);
    decided(&layouts::CASE_F29_RAY_HEAD);
    decided(&layouts::CASE_F29_NO_ADDRESS);
    // A peer route elsewhere wins, and the disagreement is said.
    let (_, p) = decided(&layouts::CASE_F29_RAY_WORKER);
    let w = warning(&p, "advertised-address-differs");
    assert!(
        w.message.contains("--node-ip-address") && w.message.contains("eth0"),
        "{}",
        w.message
    );
    let mut l = layouts::CASE_F29.lay();
    let eth1 = layouts::index(&l, "eth1");
    l.peer_via("--address", "10.9.0.1", eth1, "10.8.0.1");
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("eth1"));
    let w = warning(&p, "advertised-address-differs");
    assert!(
        w.message.contains("VLLM_HOST_IP") && w.message.contains("eth0"),
        "{}",
        w.message
    );
    // An address no interface has: the default route, and a warning.
    let mut l = layouts::CASE_F29.lay();
    l.job.self_addr = Some("10.0.7.7".into());
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("eth1"));
    assert!(has_warning(&p, "advertised-address-differs"));
}

// ---------------------------------------------------------------------------------------------------------
// Warnings that are true

#[test]
fn a_loopback_pod_ip_in_a_multi_node_job_is_repaired() {
    let mut l = f5();
    l.env("POD_IP", "127.0.1.1");
    l.nnodes(2);
    let p = l.decide();
    assert_eq!(val(&p, "POD_IP"), Some("10.0.0.5"));
    let c = p
        .changes
        .iter()
        .find(|c| c.name == "POD_IP")
        .expect("change");
    assert_eq!(c.replaced.as_deref(), Some("127.0.1.1"));
    assert!(warning(&p, "pod-ip-repaired").strict_refuses);
    assert!(refused(&l.strict()));
    // Single node or unknown shape: only the difference is said.
    let mut l = f5();
    l.env("POD_IP", "127.0.1.1");
    let p = l.decide();
    assert_eq!(val(&p, "POD_IP"), None);
    assert!(!has_warning(&p, "pod-ip-repaired") && has_warning(&p, "advertised-address-differs"));
    // IPv6 only: unset, since Paddle's POD_IP is IPv4.
    let mut l = Lay::new();
    let v = l.plug("veth0", &["fd00:10::5/64"]);
    l.default_via("fe80::1", v, 1024, false);
    l.env("POD_IP", "127.0.0.1");
    l.nnodes(2);
    let p = l.decide();
    assert!(p
        .changes
        .iter()
        .any(|c| c.name == "POD_IP" && c.action == Action::Unset));
    assert!(has_warning(&p, "pod-ip-repaired"));
}

/// A bridged container whose master is on another host: NAT hides it from the other nodes.
#[test]
fn a_container_bridge_behind_nat_is_warned_in_a_multi_node_job() {
    let lay = |addr: &str, gw: &str| {
        let mut l = Lay::new();
        let e = l.plug("eth0", &[addr]);
        l.default_via(gw, e, 0, false);
        l.peer_via("MASTER_ADDR", "10.100.0.5", e, gw);
        l.nnodes(2);
        l
    };
    let l = lay("172.17.0.2/16", "172.17.0.1");
    let p = l.decide();
    let w = warning(&p, "container-bridge-nat");
    assert!(
        w.message.contains("172.17.0.2") && w.remedy.contains("--network=host"),
        "{w:?}"
    );
    assert!(!w.strict_refuses);
    for l in [
        // a routable pod network
        lay("10.244.1.7/24", "10.244.1.1"),
        // single node
        {
            let mut l = lay("172.17.0.2/16", "172.17.0.1");
            l.nnodes(1);
            l
        },
        // the master on the same bridge
        {
            let mut l = lay("172.17.0.2/16", "172.17.0.1");
            if let Some(r) = l.net.peer_routes.last_mut() {
                r.gateway = None;
            }
            l
        },
    ] {
        assert!(!has_warning(&l.decide(), "container-bridge-nat"));
    }
    // A NIC (no link kind) in that range is the host's own network.
    let mut l = Lay::new();
    let e = l.link("ens3", true, None);
    l.addr(e, "192.168.1.5/24");
    l.default_via("192.168.1.1", e, 0, false);
    l.peer_via("MASTER_ADDR", "10.100.0.5", e, "192.168.1.1");
    l.nnodes(2);
    assert!(!has_warning(&l.decide(), "container-bridge-nat"));
}

#[test]
fn a_host_uplink_bridge_is_not_a_risky_container_bridge() {
    let mut l = Lay::new();
    let b = l.link("br0", true, Some("bridge"));
    l.addr(b, "10.10.1.11/24");
    l.default_via("10.10.1.1", b, 0, false);
    let d = l.link("docker0", true, Some("bridge"));
    l.addr(d, "172.17.0.1/16");
    l.env("NCCL_SOCKET_IFNAME", "br0");
    let p = l.decide();
    assert!(
        !has_warning(&p, "inherited-ifname-risky"),
        "{:#?}",
        p.warnings
    );
    // ncclenv's own pick is the same bridge, without a warning either.
    l.env.clear();
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("br0"));
    assert!(!p.has_warnings());
    // docker0 inherited: risky.
    l.env("NCCL_SOCKET_IFNAME", "docker0");
    assert!(has_warning(&l.decide(), "inherited-ifname-risky"));
}

#[test]
fn no_route_to_the_peer_is_said_only_with_a_peer() {
    let mut l = Lay::new();
    l.plug("vethx", &["10.5.0.2/24"]);
    l.plug("vethy", &["10.6.0.2/24"]);
    let p = l.decide();
    let w = warning(&p, "no-route-decided");
    assert!(!w.message.contains("route to the peer"), "{}", w.message);
    assert!(
        !p.choice.as_ref().is_some_and(|c| c.how.contains("peer")),
        "{:?}",
        p.choice
    );
    l.peer("MASTER_ADDR", "10.9.0.1", None, false);
    let w = warning(&l.decide(), "no-route-decided").message.clone();
    assert!(w.contains("route to the peer"), "{w}");
}

#[test]
fn a_multi_node_refusal_suggests_no_nat_bridge() {
    let mut l = Lay::new();
    l.nnodes(2);
    match &l.decide().verdict {
        Verdict::Refuse { remedy, .. } => {
            assert!(!remedy.contains("the default bridge,"), "{remedy}");
            assert!(
                remedy.contains("--network=host") && remedy.contains("Multus"),
                "{remedy}"
            );
        }
        v => panic!("{v:?}"),
    }
}

// ---------------------------------------------------------------------------------------------------------
// #26: where NCCL surprises. Labels, deprecated addresses, Gloo on fe80 only, overlap from connected
// routes, reachability warnings beside the master's route.
// ---------------------------------------------------------------------------------------------------------

/// `eno1` holding avahi-autoipd's 169.254.8.223 (label `eno1:avahi`, listed first as the kernel lists a
/// link-scope address before a global one) and 10.10.3.5; the master at 10.10.3.1 on that link.
fn eno1_avahi() -> Lay {
    let mut l = Lay::new();
    let e = l.link("eno1", true, None);
    l.labelled(e, "169.254.8.223/16", "eno1:avahi");
    l.addr(e, "10.10.3.5/24");
    l.peer("MASTER_ADDR", "10.10.3.1", Some(e), false);
    l.nnodes(2);
    l
}

#[test]
fn label_matched_first_by_the_plain_name_makes_the_export_exact() {
    let l = eno1_avahi();
    let p = l.decide();
    assert!(!refused(&p), "{:?}", p.verdict);
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("=eno1"));
    assert_eq!(val(&p, "GLOO_SOCKET_IFNAME"), Some("eno1"));
    assert_eq!(val(&p, "POD_IP"), Some("10.10.3.5"));
    // The model agrees: the plain name's first match is the label's link-local address.
    let net = l.net.clone();
    let plain = ncclenv::nccl_rules::nccl_pick(
        &net,
        Some("eno1"),
        Some(Family::Inet),
        ncclenv::nccl_rules::Era::Since2_28,
    );
    assert_eq!(plain.found[0].name, "eno1:avahi");
    assert_eq!(plain.found[0].addr, ip("169.254.8.223"));
}

#[test]
fn inherited_prefix_landing_on_a_labels_link_local_address_is_repaired() {
    let mut l = eno1_avahi();
    l.env("NCCL_SOCKET_IFNAME", "eno1");
    let p = l.decide();
    assert_eq!(
        val(&p, "NCCL_SOCKET_IFNAME"),
        Some("=eno1"),
        "{:?}",
        p.warnings
    );
    assert!(has_warning(&p, "inherited-ifname-repaired"));
    assert!(refused(&l.strict()));
}

#[test]
fn chosen_address_that_is_labelled_is_exported_so_that_nccl_binds_it() {
    // eth0 holds 192.168.50.2 (another network) first and the alias eth0:1 10.20.0.7 the master is on.
    let mut l = Lay::new();
    let e = l.link("eth0", true, None);
    l.addr(e, "192.168.50.2/24");
    l.labelled(e, "10.20.0.7/24", "eth0:1");
    l.peer("MASTER_ADDR", "10.20.0.1", Some(e), false);
    l.nnodes(2);
    // The kernel sources connections to the master from the alias.
    l.net.peer_routes[0].prefsrc = Some(ip("10.20.0.7"));
    let p = l.decide();
    let v = val(&p, "NCCL_SOCKET_IFNAME").expect("set").to_string();
    let pick = ncclenv::nccl_rules::nccl_pick(
        &l.net,
        Some(&v),
        Some(Family::Inet),
        ncclenv::nccl_rules::Era::Since2_28,
    );
    assert_eq!(pick.found[0].name, "eth0:1", "{v}");
    assert_eq!(pick.found[0].addr, ip("10.20.0.7"), "{v}");
    assert_eq!(val(&p, "GLOO_SOCKET_IFNAME"), Some("eth0:1"));
    assert_eq!(val(&p, "POD_IP"), Some("10.20.0.7"));
}

#[test]
fn gloo_pinned_to_an_fe80_only_interface_is_repaired_in_a_multi_node_job() {
    let mut l = Lay::new();
    let e = l.plug("eth0", &["10.244.1.7/24"]);
    l.default_via("10.244.1.1", e, 0, false);
    l.plug("net1", &["fe80::6c:1/64"]);
    l.env("NCCL_SOCKET_IFNAME", "net1");
    l.env("GLOO_SOCKET_IFNAME", "net1");
    l.env("TP_SOCKET_IFNAME", "net1");
    l.nnodes(2);
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("eth0"));
    assert_eq!(val(&p, "GLOO_SOCKET_IFNAME"), Some("eth0"));
    assert_eq!(val(&p, "TP_SOCKET_IFNAME"), Some("eth0"));
    assert!(has_warning(&p, "gloo-ifname-repaired"));
    // One node: Gloo on fe80 works there, kept.
    let mut one = l.clone();
    one.nnodes(1);
    one.env("NCCL_SOCKET_IFNAME", "eth0");
    let p = one.decide();
    assert_eq!(val(&p, "GLOO_SOCKET_IFNAME"), None);
    // A link without any address: Gloo cannot find one (also on one node).
    let mut bare = Lay::new();
    let e = bare.plug("eth0", &["10.244.1.7/24"]);
    bare.default_via("10.244.1.1", e, 0, false);
    bare.link("net1", true, Some("macvlan"));
    bare.env("GLOO_SOCKET_IFNAME", "net1");
    assert_eq!(val(&bare.decide(), "GLOO_SOCKET_IFNAME"), Some("eth0"));
}

/// #26 item 4, the other companions: Horovod's Gloo (`HOROVOD_GLOO_IFACE`, Gloo's own rule), Open MPI's
/// `*_tcp_if_include` and `UCX_NET_DEVICES` pinned to `net1`, UP with only fe80 (IPAM not delivered), are
/// repaired in a multi-node job; the same values on one node, or naming an interface that works, are kept.
#[test]
fn companions_pinned_to_an_fe80_only_interface_are_repaired_in_a_multi_node_job() {
    let lay = || {
        let mut l = Lay::new();
        let e = l.plug("eth0", &["10.244.1.7/24"]);
        l.default_via("10.244.1.1", e, 0, false);
        l.plug("net1", &["fe80::6c:1/64"]);
        l.env("NCCL_SOCKET_IFNAME", "net1");
        l.nnodes(2);
        l
    };
    for (var, repaired) in [
        ("HOROVOD_GLOO_IFACE", "eth0"),
        ("OMPI_MCA_btl_tcp_if_include", "10.244.1.0/24"),
        ("OMPI_MCA_oob_tcp_if_include", "10.244.1.0/24"),
        ("UCX_NET_DEVICES", "eth0"),
    ] {
        let mut l = lay();
        l.env(var, "net1");
        let p = l.decide();
        assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("eth0"), "{var}");
        assert_eq!(val(&p, var), Some(repaired), "{var}: {:#?}", p.warnings);
        let w = warning(&p, "launcher-ifname-repaired");
        assert!(
            w.message.contains(var) && w.message.contains("link-local"),
            "{}",
            w.message
        );
        // One node: an fe80 address serves the node itself; kept.
        let mut one = lay();
        one.nnodes(1);
        one.env(var, "net1");
        let p = one.decide();
        assert_eq!(val(&p, var), None, "{var} on one node");
        assert!(!has_warning(&p, "launcher-ifname-repaired"), "{var}");
        // Naming the interface that works: kept, no warning about it.
        let mut ok = lay();
        ok.env(var, "eth0");
        let p = ok.decide();
        assert_eq!(val(&p, var), None, "{var}=eth0");
        assert!(!has_warning(&p, "launcher-ifname-repaired"), "{var}=eth0");
        assert!(!has_warning(&p, "companion-differs"), "{var}=eth0");
    }
    // UCX beside an RDMA device: warned, never rewritten (it would take UCX off RDMA).
    let mut l = lay();
    l.env("UCX_NET_DEVICES", "mlx5_0:1,net1");
    let p = l.decide();
    assert_eq!(val(&p, "UCX_NET_DEVICES"), None);
    assert!(warning(&p, "companion-differs").message.contains("net1"));
    // Open MPI: a list with a good entry and the fe80-only one is repaired as a whole.
    let mut l = lay();
    l.env("OMPI_MCA_btl_tcp_if_include", "eth0,net1");
    assert_eq!(
        val(&l.decide(), "OMPI_MCA_btl_tcp_if_include"),
        Some("10.244.1.0/24")
    );
}

#[test]
fn a_host_prefix_without_a_connected_route_overlaps_nothing() {
    let mut l = Lay::new();
    let e = l.plug("eth0", &["10.0.0.9/24"]);
    l.default_via("10.0.0.1", e, 0, false);
    let f = l.link("flannel.1", true, Some("vxlan"));
    l.addr(f, "10.244.0.0/32");
    let c = l.link("cni0", true, Some("bridge"));
    l.addr(c, "10.244.0.1/24");
    assert!(!has_warning(&l.decide(), "overlapping-prefixes"));
    // With a real overlap of connected routes it still warns.
    let g = l.link("net1", true, Some("macvlan"));
    l.addr(g, "10.244.0.77/16");
    assert!(has_warning(&l.decide(), "overlapping-prefixes"));
}

#[test]
fn deprecated_addresses_are_usable_and_rank_after_preferred_ones() {
    // IPv6-only node whose only global address is deprecated: not refused, eth0 chosen.
    let mut l = Lay::new();
    let e = l.plug("eth0", &["fd00:60::12/64", "fe80::12/64"]);
    l.deprecate("fd00:60::12");
    l.default_via("fd00:60::1", e, 0, false);
    l.nnodes(2);
    let p = l.decide();
    assert!(!refused(&p), "{:?}", p.verdict);
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("eth0"));
    assert_eq!(val(&p, "NCCL_SOCKET_FAMILY"), Some("AF_INET6"));
    // IPv4 the same.
    let mut l = Lay::new();
    let e = l.plug("eth0", &["10.9.0.2/24"]);
    l.deprecate("10.9.0.2");
    l.default_via("10.9.0.1", e, 0, false);
    l.nnodes(2);
    let p = l.decide();
    assert!(!refused(&p), "{:?}", p.verdict);
    assert_eq!(val(&p, "POD_IP"), Some("10.9.0.2"));
    // A preferred address of the same family on the link comes first.
    l.addr(e, "10.9.0.3/24");
    assert_eq!(val(&l.decide(), "POD_IP"), Some("10.9.0.3"));
    // Dual stack, IPv6 cluster: an inherited AF_INET6 that works (deprecated global) is kept.
    let mut l = Lay::new();
    let e = l.plug("eth0", &["10.9.0.2/24", "fd00:60::12/64"]);
    l.deprecate("fd00:60::12");
    l.default_via("10.9.0.1", e, 0, false);
    l.env("NCCL_SOCKET_FAMILY", "AF_INET6");
    l.nnodes(2);
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_FAMILY"), None, "kept");
    assert!(!has_warning(&p, "inherited-family-repaired"));
}

#[test]
fn an_overlay_that_reaches_the_master_is_not_a_bridge_another_node_cannot_reach() {
    let mut l = Lay::new();
    let e = l.plug("eth0", &["10.0.0.9/24"]);
    l.default_via("10.0.0.1", e, 0, false);
    let f = l.link("flannel.1", true, Some("vxlan"));
    l.addr(f, "10.244.3.0/16");
    l.peer_via("MASTER_ADDR", "10.244.0.5", f, "10.244.0.0");
    l.env("NCCL_SOCKET_IFNAME", "flannel.1");
    l.nnodes(2);
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), None, "kept");
    assert!(
        !has_warning(&p, "inherited-ifname-risky"),
        "{:?}",
        p.warnings
    );
    // Without the master's route through it, the same value is warned.
    let mut l2 = l.clone();
    l2.peer = None;
    l2.net.peer_routes.clear();
    assert!(has_warning(&l2.decide(), "inherited-ifname-risky"));
}

#[test]
fn tentative_and_dadfailed_addresses_are_named() {
    let mut l = Lay::new();
    let e = l.plug("eth0", &["10.0.0.9/24"]);
    l.default_via("10.0.0.1", e, 0, false);
    let n = l.plug("net1", &["fd00:60::12/64", "fd00:60::13/64"]);
    let _ = n;
    for a in l.net.addrs.iter_mut() {
        if a.addr == ip("fd00:60::12") {
            a.tentative = true;
        }
        if a.addr == ip("fd00:60::13") {
            a.tentative = true;
            a.dad_failed = true;
        }
    }
    let p = l.decide();
    let has = |code: &str, addr: &str| warnings(&p, code).any(|w| w.message.contains(addr));
    assert!(has("address-tentative", "fd00:60::12"), "{:?}", p.warnings);
    assert!(has("address-dad-failed", "fd00:60::13"), "{:?}", p.warnings);
    assert!(!has("address-tentative", "fd00:60::13"));
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("eth0"));
}

/// #21 item 8: no master is known and the default route overrides NCCL's own pick (NCCL prefers an `ib`
/// interface): `no-master-nccl-differs` names both. A named master, a single-node job, or a choice that is
/// NCCL's own: no such line.
#[test]
fn no_master_says_what_nccl_alone_would_use() {
    let note = |p: &Plan| {
        warnings(p, "no-master-nccl-differs")
            .next()
            .map(|w| w.message.clone())
    };
    let mut l = Lay::new();
    let e = l.plug("eth0", &["10.0.0.2/24"]);
    l.default_via("10.0.0.1", e, 0, false);
    let ib = l.plug("ib0", &["10.1.0.2/24"]);
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("eth0"));
    let m = note(&p).unwrap_or_else(|| panic!("no note: {:?}", p.warnings));
    assert!(
        m.starts_with("no master named; NCCL alone would use ib0 (10.1.0.2), ncclenv chose eth0"),
        "{m}"
    );
    let mut single = Lay::new();
    let e = single.plug("eth0", &["10.0.0.2/24"]);
    single.default_via("10.0.0.1", e, 0, false);
    single.plug("ib0", &["10.1.0.2/24"]);
    single.nnodes(1);
    assert_eq!(note(&single.decide()), None);
    l.peer("MASTER_ADDR", "10.1.0.9", Some(ib), false);
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("ib0"));
    assert_eq!(note(&p), None);
}
