//! The decision core with plain data: every field case F1–F12 (shared/FIELD-CASES.md) as a hand-written
//! snapshot, no kernel involved. The same cases run against real namespaces in `tests/field_cases.rs`.

use ncclenv::config::Config;
use ncclenv::decide::decide;
use ncclenv::plan::{Plan, Verdict};
use ncclenv::snapshot::*;
use std::collections::BTreeMap;
use std::net::IpAddr;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("test address")
}

/// A hand-built network: links get indices in creation order, like the kernel.
struct Lay {
    net: NetSnapshot,
    env: BTreeMap<String, String>,
    peer: Option<Peer>,
    job: JobShape,
    /// The NCCL installations found (empty: none, so the version is unknown).
    nccl: Vec<NcclInstall>,
}

impl Lay {
    fn new() -> Lay {
        let mut l = Lay {
            net: NetSnapshot::default(),
            env: BTreeMap::new(),
            peer: None,
            job: JobShape::default(),
            nccl: Vec::new(),
        };
        let i = l.link("lo", true, None);
        l.net.links[0].loopback = true;
        l.addr(i, "127.0.0.1/8");
        l.addr(i, "::1/128");
        l
    }
    fn link(&mut self, name: &str, running: bool, kind: Option<&str>) -> u32 {
        let index = self.net.links.len() as u32 + 1;
        self.net.links.push(Link {
            index,
            name: name.into(),
            up: true,
            running,
            lower_up: running,
            oper_state: if running { "up" } else { "down" }.into(),
            kind: kind.map(String::from),
            mtu: Some(1500),
            link_type: 1,
            ..Default::default()
        });
        index
    }
    fn addr(&mut self, index: u32, cidr: &str) {
        let (a, p) = cidr.split_once('/').expect("cidr");
        let addr = ip(a);
        let scope = if addr.is_loopback() { 254 } else { 0 };
        self.net.addrs.push(Addr {
            index,
            addr,
            prefix_len: p.parse().expect("prefix"),
            scope,
            tentative: false,
            deprecated: false,
            dad_failed: false,
        });
        self.net.addrs.sort_by_key(|a| (a.family(), a.index));
    }
    fn plug(&mut self, name: &str, cidrs: &[&str]) -> u32 {
        let i = self.link(name, true, Some("veth"));
        for c in cidrs {
            self.addr(i, c);
        }
        i
    }
    fn stub(&mut self, name: &str, cidrs: &[&str]) -> u32 {
        let i = self.link(name, false, Some("veth"));
        for c in cidrs {
            self.addr(i, c);
        }
        i
    }
    fn default_via(&mut self, gw: &str, oif: u32, metric: u32, linkdown: bool) {
        self.net.routes.push(Route {
            family: Family::of(&ip(gw)),
            dst: None,
            metric,
            oif: Some(oif),
            gateway: Some(ip(gw)),
            linkdown,
            nexthops: vec![],
            kind: 1,
            scope: 0,
            prefsrc: None,
        });
    }
    fn peer(&mut self, source: &str, dest: &str, oif: Option<u32>, local: bool) {
        self.peer = Some(Peer {
            source: source.into(),
            host: dest.into(),
            addrs: vec![ip(dest)],
            error: None,
        });
        self.net.peer_routes.push(RouteLookup {
            dest: ip(dest),
            oif,
            prefsrc: None,
            gateway: None,
            local,
            error: None,
        });
    }
    fn env(&mut self, k: &str, v: &str) {
        self.env.insert(k.into(), v.into());
    }
    /// The command will load this NCCL (`NCCLENV_NCCL_LIB`, so it alone counts).
    fn nccl(&mut self, version: &str) {
        self.nccl = vec![NcclInstall {
            path: format!("/opt/nccl/libnccl.so.{version}"),
            version: Some(version.into()),
            source: ncclenv::probe::nccl::EXPLICIT_SOURCE.into(),
        }];
    }
    fn nnodes(&mut self, n: u32) {
        self.job.nnodes = Some(n);
        self.job.source = Some("--nnodes".into());
    }
    fn decide_with(&self, cfg: &Config) -> Plan {
        let snap = Snapshot {
            net: Ok(self.net.clone()),
            peer: self.peer.clone(),
            job: self.job.clone(),
            env: self.env.clone(),
            nccl_installs: self.nccl.clone(),
            ..Snapshot::default()
        };
        decide(&snap, cfg)
    }
    fn decide(&self) -> Plan {
        self.decide_with(&Config::default())
    }
    fn strict(&self) -> Plan {
        self.decide_with(&Config {
            strict: true,
            ..Config::default()
        })
    }
}

fn val<'a>(p: &'a Plan, k: &str) -> Option<&'a str> {
    p.value_of(k)
}
fn has_warning(p: &Plan, code: &str) -> bool {
    p.warnings.iter().any(|w| w.code == code)
}
fn refused(p: &Plan) -> bool {
    matches!(p.verdict, Verdict::Refuse { .. })
}

#[test]
fn f1_docker_bridge() {
    let mut l = Lay::new();
    let e = l.plug("eth0", &["172.17.0.2/16"]);
    l.default_via("172.17.0.1", e, 0, false);
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("eth0"));
    assert_eq!(val(&p, "GLOO_SOCKET_IFNAME"), Some("eth0"));
    assert_eq!(val(&p, "TP_SOCKET_IFNAME"), Some("eth0"));
    assert_eq!(val(&p, "NCCL_SOCKET_FAMILY"), Some("AF_INET"));
    assert_eq!(val(&p, "POD_IP"), Some("172.17.0.2"));
    assert!(!p.has_warnings(), "{:?}", p.warnings);
    assert!(!refused(&l.strict()));
}

#[test]
fn f2_baked_name_missing_on_host() {
    let mut l = Lay::new();
    let e = l.plug("ens6", &["10.1.0.10/16"]);
    l.default_via("10.1.0.1", e, 0, false);
    assert_eq!(val(&l.decide(), "NCCL_SOCKET_IFNAME"), Some("ens6"));
    l.env("NCCL_SOCKET_IFNAME", "eth0");
    l.nnodes(2);
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("ens6"));
    let c = p
        .changes
        .iter()
        .find(|c| c.name == "NCCL_SOCKET_IFNAME")
        .expect("change");
    assert_eq!(c.replaced.as_deref(), Some("eth0"));
    assert!(has_warning(&p, "inherited-ifname-repaired"));
    assert!(refused(&l.strict()));
}

#[test]
fn f3_compose_bridges_and_veths() {
    let mut l = Lay::new();
    let b = l.plug("bond0", &["10.10.1.11/24"]);
    l.default_via("10.10.1.1", b, 0, false);
    for (n, a) in [
        ("br-1a2b3c", "172.19.0.1/16"),
        ("br-4d5e6f", "172.21.0.1/16"),
        ("br-7a8b9c", "172.30.0.1/16"),
    ] {
        let i = l.link(n, true, Some("bridge"));
        l.addr(i, a);
    }
    for n in ["veth1a", "veth2b", "veth3c", "veth4d"] {
        l.plug(n, &["fe80::1/64"]);
    }
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("bond0"));
    for c in &p.changes {
        if let ncclenv::plan::Action::Set { value } = &c.action {
            assert!(!value.contains("br-") && !value.contains("veth"), "{c:?}");
        }
    }
}

#[test]
fn f4_fe80_veth_beside_uplink() {
    let mut l = Lay::new();
    let e = l.plug("ens5", &["10.31.0.11/20"]);
    l.default_via("10.31.0.1", e, 0, false);
    l.plug("veth3f2a", &["fe80::2/64"]);
    assert_eq!(val(&l.decide(), "NCCL_SOCKET_IFNAME"), Some("ens5"));
}

fn f5() -> Lay {
    let mut l = Lay::new();
    let e = l.plug("eth0", &["10.0.0.5/24"]);
    l.default_via("10.0.0.1", e, 0, false);
    l.plug("eth1", &["10.0.1.5/24"]);
    l.plug("eth10", &["10.0.10.5/24"]);
    l
}

#[test]
fn f5_missing_name_is_repaired_listing_usable() {
    let mut l = f5();
    l.env("NCCL_SOCKET_IFNAME", "eth2");
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("eth0"));
    let w = p
        .warnings
        .iter()
        .find(|w| w.code == "inherited-ifname-repaired")
        .expect("warning");
    for n in ["eth0", "eth1", "eth10"] {
        assert!(w.message.contains(n), "{}", w.message);
    }
}

#[test]
fn f5_prefix_matching_two_is_kept_with_warning() {
    let mut l = f5();
    l.env("NCCL_SOCKET_IFNAME", "eth1");
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), None, "kept: no change");
    assert_eq!(val(&p, "GLOO_SOCKET_IFNAME"), Some("eth1"));
    assert_eq!(val(&p, "POD_IP"), Some("10.0.1.5"));
    let w = p
        .warnings
        .iter()
        .find(|w| w.code == "inherited-ifname-prefix")
        .expect("warning");
    assert!(
        w.message.contains("eth10") && w.remedy.contains("=eth1"),
        "{w:?}"
    );
    // Nothing inherited: eth0, and the plain name since nothing else starts with eth0.
    let p = f5().decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("eth0"));
}

#[test]
fn f6_gloo_given_nccl_syntax() {
    let mut l = Lay::new();
    let e = l.plug("ens5", &["10.0.1.10/24"]);
    l.default_via("10.0.1.1", e, 0, false);
    l.plug("eni4c1d", &["fe80::3/64"]);
    l.env("NCCL_SOCKET_IFNAME", "^lo,docker,veth,eni");
    l.env("GLOO_SOCKET_IFNAME", "^lo,docker,veth,eni");
    l.env("MASTER_ADDR", "10.0.1.20");
    l.peer("MASTER_ADDR", "10.0.1.20", Some(e), false);
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), None, "NCCL value kept");
    assert_eq!(val(&p, "GLOO_SOCKET_IFNAME"), Some("ens5"));
    assert_eq!(val(&p, "TP_SOCKET_IFNAME"), Some("ens5"));
    assert!(has_warning(&p, "gloo-ifname-repaired"));
    assert!(!has_warning(&p, "inherited-ifname-prefix"));
}

fn f7() -> Lay {
    let mut l = Lay::new();
    let b = l.plug("bond0", &["10.42.0.11/27"]);
    l.default_via("10.42.0.1", b, 0, false);
    let c = l.link("bond0.2973", true, Some("macvlan"));
    l.addr(c, "10.0.106.11/16");
    let d = l.link("bond0.2973.1", true, Some("macvlan"));
    l.addr(d, "fe80::5/64");
    l
}

#[test]
fn f7_prefix_catches_vlan_children() {
    let p = f7().decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("=bond0"));
    assert_eq!(val(&p, "GLOO_SOCKET_IFNAME"), Some("bond0"));
    let mut l = f7();
    l.env("NCCL_SOCKET_IFNAME", "bond0");
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), None);
    let w = p
        .warnings
        .iter()
        .find(|w| w.code == "inherited-ifname-prefix")
        .expect("warning");
    assert!(
        w.message.contains("bond0.2973.1") && w.message.contains("link-local"),
        "{}",
        w.message
    );
    assert!(refused(&l.strict()));
}

#[test]
fn f8_wifi_uplink_and_whitelist_missing_it() {
    let mut l = Lay::new();
    let w = l.plug("wlp2s0", &["10.0.8.19/24"]);
    l.default_via("10.0.8.1", w, 600, false);
    l.stub("enp3s0", &["10.0.9.19/24"]);
    assert_eq!(val(&l.decide(), "NCCL_SOCKET_IFNAME"), Some("wlp2s0"));
    l.env("NCCL_SOCKET_IFNAME", "en,eth,bond");
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("wlp2s0"));
    assert!(has_warning(&p, "inherited-ifname-repaired"));
}

#[test]
fn f9_ipv6_only_with_link_local_tunnel_first() {
    let mut l = Lay::new();
    l.net.addrs.retain(|a| !a.addr.is_ipv4());
    let t = l.link("ip6tnl0", true, Some("vxlan"));
    l.addr(t, "fe80::9/64");
    let v = l.plug("veth0", &["fd00:10::5/64", "fe80::5/64"]);
    l.default_via("fe80::1", v, 1024, false);
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("veth0"));
    assert_eq!(val(&p, "NCCL_SOCKET_FAMILY"), Some("AF_INET6"));
    assert_eq!(val(&p, "GLOO_SOCKET_IFNAME"), Some("veth0"));
    assert_eq!(val(&p, "POD_IP"), None);
}

#[test]
fn f10_no_network() {
    let l = Lay::new();
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("lo"));
    assert!(has_warning(&p, "loopback-only"));
    assert!(!refused(&p));
    let mut l = Lay::new();
    l.nnodes(2);
    let p = l.decide();
    let Verdict::Refuse { reason, remedy } = &p.verdict else {
        panic!("a 2-node job with only lo must be refused: {:?}", p.verdict)
    };
    assert!(
        reason.contains("lo") && remedy.contains("network"),
        "{reason} / {remedy}"
    );
}

#[test]
fn f11_default_route_over_dead_link() {
    let mut l = Lay::new();
    let e0 = l.stub("eth0", &["10.0.0.2/24"]);
    let e1 = l.plug("eth1", &["10.0.1.2/24"]);
    l.default_via("10.0.0.1", e0, 100, true);
    l.default_via("10.0.1.1", e1, 200, false);
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("eth1"));
    let w = p
        .warnings
        .iter()
        .find(|w| w.code == "default-route-down")
        .expect("warning");
    assert!(
        w.message.contains("eth0") && w.message.contains("eth1"),
        "{}",
        w.message
    );
}

#[test]
fn f12_peer_on_secondary_network() {
    let mut l = Lay::new();
    let e = l.plug("eth0", &["10.244.1.11/24"]);
    l.default_via("10.244.1.1", e, 0, false);
    let n = l.link("net1", true, Some("macvlan"));
    l.addr(n, "10.100.0.11/24");
    let mut remote = Lay {
        net: l.net.clone(),
        env: l.env.clone(),
        peer: None,
        job: l.job.clone(),
        nccl: Vec::new(),
    };
    remote.peer("MASTER_ADDR", "10.100.0.12", Some(n), false);
    let p = remote.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), Some("net1"));
    assert_eq!(val(&p, "POD_IP"), Some("10.100.0.11"));
    // This pod is the master: the route is local, the owner of the address wins.
    l.peer("MASTER_ADDR", "10.100.0.11", Some(1), true);
    assert_eq!(val(&l.decide(), "NCCL_SOCKET_IFNAME"), Some("net1"));
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
fn comm_id_and_vendor_profiles_change_nothing() {
    let mut l = f5();
    l.env("NCCL_COMM_ID", "10.0.0.1:1234");
    let p = l.decide();
    assert!(p.hands_off && p.changes.is_empty());
    let mut l = f5();
    l.env("FI_PROVIDER", "efa");
    let p = l.decide();
    assert!(p.hands_off && p.changes.is_empty());
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
fn proxy_without_no_proxy_warns() {
    let mut l = f5();
    l.peer("MASTER_ADDR", "10.0.0.9", Some(2), false);
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
}

#[test]
fn entries_that_match_nothing_are_pointed_out_with_the_space() {
    let mut l = f5();
    l.env("NCCL_SOCKET_IFNAME", "eth0, eth1");
    let p = l.decide();
    assert_eq!(val(&p, "NCCL_SOCKET_IFNAME"), None, "kept: eth0 works");
    let w = p
        .warnings
        .iter()
        .find(|w| w.code == "inherited-ifname-entry-unmatched")
        .expect("warning");
    assert!(
        w.message.contains("\" eth1\"") && w.message.contains("whitespace"),
        "{}",
        w.message
    );
    let mut l = f5();
    l.env("NCCL_SOCKET_IFNAME", "eth0 ");
    let p = l.decide();
    let w = p
        .warnings
        .iter()
        .find(|w| w.code == "inherited-ifname-repaired")
        .expect("repair");
    assert!(w.message.contains("whitespace"), "{}", w.message);
}

fn warning<'a>(p: &'a Plan, code: &str) -> &'a ncclenv::plan::Warning {
    p.warnings
        .iter()
        .find(|w| w.code == code)
        .unwrap_or_else(|| panic!("no [{code}] in {:?}", p.warnings))
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

/// The codes of the findings table in `docs/findings.md` (first column, every `` `code` `` in it).
fn readme_codes() -> Vec<String> {
    let table = include_str!("../docs/findings.md");
    let mut codes = Vec::new();
    for line in table.lines().filter(|l| l.starts_with("| `")) {
        let first = line.split('|').nth(1).unwrap_or("");
        codes.extend(first.split('`').skip(1).step_by(2).map(String::from));
    }
    codes
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

/// Every finding code `docs/findings.md` lists is asserted by some test (named as `"code"` or `[code]` in
/// tests/ or in a unit-test module), and every code the decision emits literally (`warn`, `warn_strict`,
/// `info` with a string) is in that table.
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
    let mut emitted = Vec::new();
    for (p, t) in &src {
        let code_part = t.split("#[cfg(test)]").next().unwrap_or(t);
        for call in ["warn(", "warn_strict(", "info("] {
            for (i, _) in code_part.match_indices(&format!(".{call}")) {
                let rest = code_part[i + call.len() + 1..].trim_start();
                let Some(lit) = rest.strip_prefix('"') else {
                    continue;
                };
                let code: String = lit.chars().take_while(|c| *c != '"').collect();
                if !code.is_empty()
                    && code
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                {
                    emitted.push((code, p.display().to_string()));
                }
            }
        }
    }
    assert!(emitted.len() >= 20, "{emitted:?}");
    let undocumented: Vec<&(String, String)> = emitted
        .iter()
        .filter(|(c, _)| !documented.contains(c))
        .collect();
    assert!(
        undocumented.is_empty(),
        "emitted but not in docs/findings.md: {undocumented:?}"
    );
}
