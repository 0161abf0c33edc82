//! Oracle tests for `probe::net`: each layout is built in a network namespace, then the probe's snapshot is
//! compared, as whole lists, with what `ip -j` reports there (`ip -j -d link show`, `ip -j addr show`,
//! `ip -j [-6] route show table main`, `ip -j route get ADDR`), translated into the same types.

use crate::common;

use common::oracle::{arr, check, check_start};
use common::snapshot::warnings;
use common::Netns;
use ncclenv::probe::net::{probe_full as probe, probe_start, StartNeeds};
use ncclenv::snapshot::{Family, Link, Network, NextHop};
use std::net::IpAddr;
use std::process::Command;

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

fn link<'a>(s: &'a Network, name: &str) -> &'a Link {
    s.links
        .iter()
        .find(|l| l.name == name)
        .unwrap_or_else(|| panic!("no link {name}"))
}

/// F3, F7, F8, F11 in one namespace: plugs, stubs, a bridge with a port, macvlan children named like VLANs,
/// two default routes (metric 100 over a stub: linkdown), an ECMP route, IPv6 with a default via fe80::1,
/// a tentative and a deprecated address, a blackhole route.
#[test]
fn mixed_layout_matches_ip() {
    if !common::require_root() {
        return;
    }
    let (ns, port) = mixed_layout();
    let peers = ips(&[
        "10.0.1.20",
        "10.200.0.1",
        "10.0.106.50",
        "10.42.0.11",
        "10.9.1.1",
        "10.66.1.1",
        "fd00:1::99",
        "2001:db8::1",
    ]);
    let s = check(Some(&ns), &peers);
    start_probe_reads_ipv6_routes_when_needed(&ns, &peers);
    named_roce_netdev_without_address_is_listed(&ns);
    mixed_layout_facts(&s, &port);
}

/// Builds the namespace [`mixed_layout_matches_ip`] describes. Returns it and the name of the bridge's port.
fn mixed_layout() -> (Netns, String) {
    let ns = Netns::new("pn-mixed");
    ns.stub("eth0");
    ns.addr("eth0", "10.0.0.2/24");
    ns.plug("eth1");
    ns.addr("eth1", "10.0.1.2/24");
    ns.addr("eth1", "fd00:1::2/64");
    ns.addr_with("eth1", "fd00:1::3/64", &["nodad", "preferred_lft", "0"]);
    ns.route("default via 10.0.0.1 dev eth0 metric 100");
    ns.route("default via 10.0.1.1 dev eth1 metric 200");
    ns.route("-6 default via fe80::1 dev eth1");
    ns.route("10.9.0.0/16 nexthop via 10.0.0.1 dev eth0 nexthop via 10.0.1.1 dev eth1");
    ns.ip(&["route", "add", "blackhole", "10.66.0.0/16"]);
    ns.plug("bond0");
    ns.addr("bond0", "10.42.0.11/27");
    ns.macvlan("bond0.2973", "bond0");
    ns.addr("bond0.2973", "10.0.106.11/16");
    ns.macvlan("bond0.2973.1", "bond0");
    let port = ns.bridge("br-1a2b3c4d5e6f");
    ns.addr("br-1a2b3c4d5e6f", "172.19.0.1/16");
    ns.stub("enp3s0");
    ns.addr("enp3s0", "10.0.9.19/24");
    ns.sysctl("net/ipv6/conf/enp3s0/accept_dad", "1");
    ns.ip(&["addr", "add", "fd00:9::5/64", "dev", "enp3s0"]); // DAD pending until carrier: tentative
    ns.wait_running("bond0.2973");
    ns.wait_running("bond0.2973.1");
    (ns, port)
}

/// `probe_start` in `ns` (the mixed layout) reads the IPv6 routes only when something needs them: an IPv6
/// peer among `peers` (all of the layout's), NCCL_SOCKET_FAMILY=AF_INET6, or no IPv4 default that decides.
fn start_probe_reads_ipv6_routes_when_needed(ns: &Netns, peers: &[IpAddr]) {
    let none = StartNeeds::default();
    assert!(
        check_start(ns, peers, &none),
        "an IPv6 peer needs the IPv6 routes"
    );
    let v4_peers = ips(&["10.0.1.20", "10.200.0.1"]);
    assert!(
        !check_start(ns, &v4_peers, &none),
        "the IPv4 default over eth1 decides: IPv6 routes skipped"
    );
    assert!(!check_start(ns, &[], &none));
    let v6_family = StartNeeds {
        ipv6_family: true,
        ..StartNeeds::default()
    };
    assert!(
        check_start(ns, &v4_peers, &v6_family),
        "NCCL_SOCKET_FAMILY=AF_INET6 needs the IPv6 routes"
    );
    let exclude = ["eth1".to_string()];
    let no_eth1 = StartNeeds {
        exclude: &exclude,
        ..StartNeeds::default()
    };
    assert!(
        check_start(ns, &[], &no_eth1),
        "eth1 excluded, eth0 without carrier: no IPv4 default decides"
    );
}

/// A RoCE netdev without an address (a veth left down, added to `ns`) is listed by `probe_start` when
/// named, and only then; a named interface that does not exist is not made up.
fn named_roce_netdev_without_address_is_listed(ns: &Netns) {
    let none = StartNeeds::default();
    ns.ip(&[
        "link", "add", "roce0", "type", "veth", "peer", "name", "roce0p",
    ]);
    assert!(!ns
        .in_netns(|| probe_start(&[], &none))
        .expect("probe_start")
        .links
        .iter()
        .any(|l| l.name == "roce0"));
    let names = ["roce0".to_string(), "nosuch0".to_string()];
    let roce = StartNeeds {
        names: &names,
        ..StartNeeds::default()
    };
    let st = ns
        .in_netns(|| probe_start(&[], &roce))
        .expect("probe_start");
    let roce0 = st.links.iter().find(|l| l.name == "roce0");
    assert!(
        roce0.is_some_and(|l| !l.up && l.oper_state == "down"),
        "{:?}",
        st.links
    );
    assert!(!st.links.iter().any(|l| l.name == "nosuch0"));
}

/// A few facts of the mixed layout's snapshot `s` spelled out (`port`: the bridge's port), so a wrong
/// oracle cannot hide a wrong probe.
fn mixed_layout_facts(s: &Network, port: &str) {
    let (eth0, eth1) = (link(s, "eth0"), link(s, "eth1"));
    assert!(eth0.up && !eth0.running && !eth0.lower_up, "{eth0:?}");
    assert!(eth1.up && eth1.running && eth1.lower_up, "{eth1:?}");
    assert_eq!(eth1.kind.as_deref(), Some("veth"));
    assert_eq!(link(s, "bond0.2973").kind.as_deref(), Some("macvlan"));
    let br = link(s, "br-1a2b3c4d5e6f");
    assert_eq!(br.kind.as_deref(), Some("bridge"));
    assert!(br.running);
    assert_eq!(link(s, port).master, Some(br.index));
    assert!(link(s, "lo").loopback);
    assert_eq!(link(s, "lo").link_type, 772);
    let tentative: Vec<_> = s
        .addrs
        .iter()
        .filter(|a| a.tentative)
        .map(|a| a.addr.to_string())
        .collect();
    assert_eq!(tentative, ["fd00:9::5"]);
    let deprecated: Vec<_> = s
        .addrs
        .iter()
        .filter(|a| a.deprecated)
        .map(|a| a.addr.to_string())
        .collect();
    assert_eq!(deprecated, ["fd00:1::3"]);
    let defaults: Vec<_> = s
        .routes
        .iter()
        .filter(|r| r.is_default() && r.family == Family::Inet)
        .map(|r| (r.metric, r.oif, r.linkdown))
        .collect();
    assert_eq!(
        defaults,
        [
            (100, Some(eth0.index), true),
            (200, Some(eth1.index), false)
        ]
    );
    let ecmp = s
        .routes
        .iter()
        .find(|r| r.dst == Some(("10.9.0.0".parse().unwrap(), 16)))
        .unwrap();
    assert_eq!(
        ecmp.nexthops,
        [
            NextHop {
                oif: eth0.index,
                gateway: Some("10.0.0.1".parse().unwrap()),
                linkdown: true
            },
            NextHop {
                oif: eth1.index,
                gateway: Some("10.0.1.1".parse().unwrap()),
                linkdown: false
            },
        ]
    );
    assert!(
        s.routes.iter().any(|r| r.kind == 6),
        "blackhole route kept with its kind"
    );
    let v6_default = s
        .routes
        .iter()
        .find(|r| r.is_default() && r.family == Family::Inet6)
        .unwrap();
    assert_eq!(v6_default.gateway, Some("fe80::1".parse().unwrap()));
    assert!(s.peer_routes[3].local, "own address is local");
    assert_eq!(s.peer_routes[2].oif, Some(link(s, "bond0.2973").index));
    assert!(
        s.peer_routes[5].error.is_some(),
        "blackhole lookup fails: {:?}",
        s.peer_routes[5]
    );
}

/// F9: IPv6 only, a vxlan named ip6tnl0 with the lowest index, default via fe80::1; an IPv4 peer is
/// unreachable (the error is recorded, the probe succeeds).
#[test]
fn f9_ipv6_only_layout_matches_ip() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("pn-v6");
    ns.vxlan("ip6tnl0");
    ns.plug("veth0");
    ns.addr("veth0", "fd00:10::5/64");
    ns.route("-6 default via fe80::1 dev veth0");
    let s = check(
        Some(&ns),
        &ips(&["fd00:10::9", "fd00:10::5", "2001:db8::7", "10.1.1.1"]),
    );
    assert!(
        check_start(&ns, &ips(&["10.1.1.1"]), &StartNeeds::default()),
        "no IPv4 default route: IPv6 routes probed"
    );
    let tnl = link(&s, "ip6tnl0");
    assert_eq!(tnl.kind.as_deref(), Some("vxlan"));
    assert!(tnl.index < link(&s, "veth0").index);
    assert!(s
        .addrs
        .iter()
        .all(|a| a.family() == Family::Inet6 || a.is_loopback()));
    assert_eq!(s.peer_routes[0].oif, Some(link(&s, "veth0").index));
    assert!(s.peer_routes[1].local);
    assert_eq!(s.peer_routes[2].gateway, Some("fe80::1".parse().unwrap()));
    let err = s.peer_routes[3].error.as_deref().unwrap_or_default();
    assert!(err.starts_with("ENETUNREACH"), "{err}");
}

/// A Calico-like pod (a /32 address, default via 169.254.1.1 onlink) with a Multus secondary network (F12).
#[test]
fn f12_calico_and_multus_layout_matches_ip() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("pn-cali");
    ns.plug("eth0");
    ns.addr("eth0", "192.168.77.5/32");
    ns.route("default via 169.254.1.1 dev eth0 onlink");
    ns.plug("ext0");
    ns.macvlan("net1", "ext0");
    ns.addr("net1", "10.100.0.11/24");
    ns.wait_running("net1");
    let peers = ips(&["10.100.0.12", "10.100.0.11", "8.8.8.8"]);
    let s = check(Some(&ns), &peers);
    assert!(
        !check_start(&ns, &peers, &StartNeeds::default()),
        "default via eth0 (a /32) decides: IPv6 routes skipped"
    );
    let eth0 = link(&s, "eth0").index;
    let def = s.routes.iter().find(|r| r.is_default()).unwrap();
    assert_eq!(
        (def.oif, def.gateway),
        (Some(eth0), Some("169.254.1.1".parse().unwrap()))
    );
    assert_eq!(s.peer_routes[0].oif, Some(link(&s, "net1").index));
    assert_eq!(
        s.peer_routes[0].prefsrc,
        Some("10.100.0.11".parse().unwrap())
    );
    assert!(s.peer_routes[1].local);
    assert_eq!(
        s.peer_routes[2].prefsrc,
        Some("192.168.77.5".parse().unwrap())
    );
}

/// F10: only lo. The probe succeeds; a lookup of a remote peer records ENETUNREACH.
#[test]
fn f10_loopback_only_layout_matches_ip() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("pn-lo");
    let peers = ips(&["10.0.0.1", "127.0.0.1", "::1"]);
    let s = check(Some(&ns), &peers);
    assert!(check_start(&ns, &peers, &StartNeeds::default()));
    assert!(
        check_start(&ns, &peers[..2], &StartNeeds::default()),
        "no default route at all: IPv6 routes probed"
    );
    assert_eq!(s.links.len(), 1);
    assert!(
        s.routes.iter().all(|r| r.family == Family::Inet6),
        "no IPv4 route in main: {:?}",
        s.routes
    );
    assert!(s.peer_routes[0]
        .error
        .as_deref()
        .unwrap_or_default()
        .starts_with("ENETUNREACH"));
    assert!(s.peer_routes[1].local);
}

/// Many links (100 veth pairs, an address on one end of each, a route per pair): every dump spans several
/// 32 KiB datagrams, which both probes must read to the end (`NLMSG_DONE`), in kernel order.
#[test]
fn many_links_layout_matches_ip() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("pn-many");
    ns.sh("for i in $(seq 0 99); do \
           echo \"link add m$i type veth peer name n$i\"; \
           echo \"link set m$i up\"; echo \"link set n$i up\"; \
           echo \"addr add 10.200.$i.1/24 dev m$i\"; \
           echo \"addr add fd00:$i::1/64 dev m$i nodad\"; \
           echo \"route add 10.201.$i.0/24 via 10.200.$i.2 dev m$i\"; \
         done | ip -batch -");
    // The kernel settles the operational states asynchronously (linkwatch): wait until every veth is UP.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let links = loop {
        let links = ns.ip_json(&["link", "show"]);
        let settled = arr(&links)
            .iter()
            .all(|l| l["ifname"] == "lo" || l["operstate"] == "UP");
        if settled {
            break links;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "veths not all UP: {links}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    ns.route("default via 10.200.0.2 dev m0");
    let peers = ips(&["10.201.7.9", "fd00:42::2"]);
    let s = check(Some(&ns), &peers);
    assert_eq!(s.links.len(), arr(&links).len());
    assert!(s.links.len() > 200, "{} links", s.links.len());
    assert!(s.addrs.len() >= 200, "{} addresses", s.addrs.len());
    assert!(check_start(&ns, &peers, &StartNeeds::default()));
    assert!(!check_start(&ns, &peers[..1], &StartNeeds::default()));
}

/// The host's own namespace: the probe succeeds and agrees with `ip -j`.
#[test]
fn host_namespace_matches_ip() {
    let peers = ips(&["127.0.0.1", "192.0.2.1"]);
    if Command::new("ip").arg("-V").output().is_err() {
        common::skip("no `ip` command (apt-get install iproute2)");
        return;
    }
    check(None, &peers);
}

/// Timing of `probe_full()` and `probe_start()` in the current namespace (run with `--ignored --nocapture`,
/// ideally `--release`, e.g. under `ip netns exec NS`): prints the fastest and median of 50 runs of each.
#[test]
#[ignore = "a timing to run by hand (--ignored --nocapture), not a test"]
fn probe_timing() {
    let peers = ips(&["192.0.2.1"]);
    let time = |f: &dyn Fn() -> Network| {
        let mut times: Vec<std::time::Duration> = (0..50)
            .map(|_| {
                let t = std::time::Instant::now();
                let s = f();
                let d = t.elapsed();
                assert!(!s.links.is_empty());
                d
            })
            .collect();
        times.sort();
        let s = f();
        format!(
            "{} links, {} addresses, {} routes (IPv6 probed: {}); fastest {:?}, median {:?}",
            s.links.len(),
            s.addrs.len(),
            s.routes.len(),
            s.ipv6_routes_probed,
            times[0],
            times[times.len() / 2]
        )
    };
    println!(
        "probe_full():  {}",
        time(&|| probe(&peers).expect("probe_full"))
    );
    println!(
        "probe_start(): {}",
        time(&|| probe_start(&peers, &StartNeeds::default()).expect("probe_start"))
    );
}

/// `probe_start()` alone, 500 times (for `perf record`; run with `--ignored`): prints the median.
#[test]
#[ignore = "a loop for perf record, run by hand (--ignored), not a test"]
fn probe_start_loop() {
    let peers = ips(&["192.0.2.1"]);
    let mut times: Vec<std::time::Duration> = (0..500)
        .map(|_| {
            let t = std::time::Instant::now();
            let s = probe_start(&peers, &StartNeeds::default()).expect("probe_start");
            let d = t.elapsed();
            assert!(!s.links.is_empty());
            d
        })
        .collect();
    times.sort();
    println!("probe_start(): median {:?}", times[times.len() / 2]);
}

/// #26: IPv4 address labels (`ip addr add … label eno1:avahi`) and a deprecated address, read over netlink
/// as `ip -j` shows them (`check` compares every field, the label included); a label equal to the link's
/// name is not recorded.
#[test]
fn labels_and_deprecated_addresses_match_ip() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("pn-label");
    ns.plug("eno1");
    ns.addr_with(
        "eno1",
        "169.254.8.223/16",
        &["scope", "link", "label", "eno1:avahi"],
    );
    ns.addr("eno1", "10.10.3.5/24");
    ns.addr_with(
        "eno1",
        "10.10.4.5/24",
        &["preferred_lft", "0", "valid_lft", "forever"],
    );
    let s = check(Some(&ns), &[]);
    let eno1 = link(&s, "eno1").index;
    let mine: Vec<(String, Option<&str>, bool)> = s
        .addrs
        .iter()
        .filter(|a| a.index == eno1 && a.addr.is_ipv4())
        .map(|a| (a.addr.to_string(), a.label.as_deref(), a.deprecated))
        .collect();
    assert_eq!(
        mine,
        vec![
            ("169.254.8.223".to_string(), Some("eno1:avahi"), false),
            ("10.10.3.5".to_string(), None, false),
            ("10.10.4.5".to_string(), None, true),
        ]
    );
    // The start path reads the same labels.
    let _ = check_start(&ns, &[], &StartNeeds::default());
}

/// The state `ip -j` gives the address `addr`: `(tentative, dadfailed)`.
fn dad_state(ns: &Netns, ifname: &str, addr: &str) -> (bool, bool) {
    let v = ns.ip_json(&["addr", "show", "dev", ifname]);
    let a = arr(&v[0]["addr_info"])
        .iter()
        .find(|a| a["local"] == addr)
        .cloned()
        .unwrap_or_else(|| panic!("{addr} not on {ifname}: {v}"));
    (
        a["tentative"].as_bool().unwrap_or(false),
        a["dadfailed"].as_bool().unwrap_or(false),
    )
}

/// #26, item 3: the master `fd00:60::11` is on `net1`, whose only global address is still in
/// duplicate-address detection when the job starts (`ip -j` says tentative). The start probe waits for DAD
/// to end (bounded by net1's own DAD time) and sees the address usable; the decision takes net1. A
/// duplicate (the far end holds the same address) ends `dadfailed`: the probe does not wait for it and the
/// decision names it (`address-dad-failed`).
#[test]
fn tentative_address_is_waited_for_and_dadfailed_is_named() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("pn-dad");
    ns.plug("eth0");
    ns.addr("eth0", "10.0.9.2/24");
    ns.route("default via 10.0.9.1 dev eth0");
    let far_name = ns.plug("net1");
    for (k, v) in [
        ("conf/net1/accept_dad", "1"),
        ("conf/net1/dad_transmits", "1"),
        ("neigh/net1/retrans_time_ms", "400"),
        ("conf/net1/router_solicitation_delay", "0"),
    ] {
        ns.sysctl(&format!("net/ipv6/{k}"), v);
    }
    ns.ip(&["addr", "add", "fd00:60::12/64", "dev", "net1"]);
    assert_eq!(
        dad_state(&ns, "net1", "fd00:60::12"),
        (true, false),
        "tentative at start"
    );
    let peers = ips(&["fd00:60::11"]);
    let t = std::time::Instant::now();
    let s = ns
        .in_netns(|| probe_start(&peers, &StartNeeds::default()))
        .expect("probe_start");
    let waited = t.elapsed();
    let a = s
        .addrs
        .iter()
        .find(|a| a.addr == "fd00:60::12".parse::<IpAddr>().unwrap())
        .expect("address");
    assert!(!a.tentative, "DAD over after {waited:?}");
    assert!(waited < ncclenv::probe::net::dad_time("net1") + std::time::Duration::from_secs(1));
    assert_eq!(
        dad_state(&ns, "net1", "fd00:60::12"),
        (false, false),
        "ip -j agrees"
    );
    let snap = ncclenv::snapshot::Snapshot {
        net: Ok(s),
        ..Default::default()
    };
    let mut snap = snap;
    snap.peer = Some(ncclenv::snapshot::Peer {
        source: "MASTER_ADDR".into(),
        host: "fd00:60::11".into(),
        addrs: peers.clone(),
        error: None,
        port: None,
        resolve_ms: 0,
        resolve_attempts: 0,
    });
    let plan = ncclenv::decide::decide(&snap, &ncclenv::config::Config::default());
    assert_eq!(
        plan.value_of("NCCL_SOCKET_IFNAME"),
        Some("net1"),
        "{:?}",
        plan.changes
    );

    // A duplicate: the far end of net1 already holds fd00:60::13.
    ns.peer_ip(&["addr", "add", "fd00:60::13/64", "dev", &far_name, "nodad"]);
    ns.ip(&["addr", "add", "fd00:60::13/64", "dev", "net1"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while dad_state(&ns, "net1", "fd00:60::13") != (true, true) {
        assert!(std::time::Instant::now() < deadline, "DAD never failed");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let s = ns
        .in_netns(|| probe_start(&peers, &StartNeeds::default()))
        .expect("probe_start");
    let a = s
        .addrs
        .iter()
        .find(|a| a.addr == "fd00:60::13".parse::<IpAddr>().unwrap())
        .expect("address");
    assert!(a.dad_failed);
    snap.net = Ok(s);
    let plan = ncclenv::decide::decide(&snap, &ncclenv::config::Config::default());
    assert!(
        warnings(&plan, "address-dad-failed").any(|w| w.message.contains("fd00:60::13")),
        "{:?}",
        plan.warnings
    );
}
