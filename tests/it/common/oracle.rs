//! The `ip -j` oracle for `probe::net`: a layout's snapshot compared, as whole lists, with what `ip -j`
//! reports there (`ip -j -d link show`, `ip -j addr show`, `ip -j [-6] route show table main`,
//! `ip -j route get ADDR`), translated into the same types. Used by `tests/it/probe_net.rs` and, on every
//! field-case layout, by `tests/it/field_cases.rs`.

use super::Netns;
use ncclenv::probe::net::{probe_full as probe, probe_start, StartNeeds};
use ncclenv::snapshot::{Addr, Family, Link, Network, NextHop, Route, RouteLookup};
use serde_json::Value;
use std::collections::HashMap;
use std::net::IpAddr;
use std::process::Command;

/// What `ip -j` says, in the snapshot's types.
#[derive(Debug, PartialEq)]
struct IpView {
    links: Vec<Link>,
    /// Sorted by (family, link index), the order `ip addr show` groups them in.
    addrs: Vec<Addr>,
    routes: Vec<Route>,
    peer_routes: Vec<RouteLookup>,
    default_lookups: Vec<RouteLookup>,
}

/// Runs `ip -j ARGS` in `ns` (or the host's namespace); `Err(stderr)` when ip fails.
pub fn ip_j(ns: Option<&Netns>, args: &[&str]) -> Result<Value, String> {
    let mut c = Command::new("ip");
    if let Some(ns) = ns {
        c.arg("-n").arg(&ns.name);
    }
    let out = c.arg("-j").args(args).output().expect("run ip");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    if text.trim().is_empty() {
        return Ok(Value::Array(vec![]));
    }
    Ok(serde_json::from_str(&text).unwrap_or_else(|e| panic!("ip -j {args:?}: {e}: {text}")))
}

pub fn arr(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or(&[])
}

fn strs(v: &Value) -> Vec<&str> {
    arr(v).iter().filter_map(Value::as_str).collect()
}

fn ip_addr(v: &Value) -> Option<IpAddr> {
    v.as_str()
        .map(|s| s.parse().unwrap_or_else(|e| panic!("address {s}: {e}")))
}

/// iproute2's link-type names (lib/ll_types.c) → ARPHRD numbers, for the types these layouts use.
fn arphrd(name: &str) -> u16 {
    match name {
        "ether" => 1,
        "infiniband" => 32,
        "ipip" => 768,
        "tunnel6" => 769,
        "loopback" => 772,
        "sit" => 776,
        "gre" => 778,
        "ip6gre" => 823,
        "none" => 65534,
        "void" => 65535,
        other => panic!("link_type {other} not mapped in the oracle"),
    }
}

fn scope_num(v: &Value) -> u8 {
    match v.as_str() {
        None | Some("global") | Some("universe") => 0,
        Some("site") => 200,
        Some("link") => 253,
        Some("host") => 254,
        Some("nowhere") => 255,
        Some(n) => n.parse().unwrap_or_else(|_| panic!("scope {n}")),
    }
}

fn route_type(v: &Value) -> u8 {
    match v.as_str() {
        None | Some("unicast") => 1,
        Some("local") => 2,
        Some("broadcast") => 3,
        Some("anycast") => 4,
        Some("multicast") => 5,
        Some("blackhole") => 6,
        Some("unreachable") => 7,
        Some("prohibit") => 8,
        Some("throw") => 9,
        Some("nat") => 10,
        Some(n) => panic!("route type {n}"),
    }
}

/// The description part of an error: ip's "RTNETLINK answers: Network is unreachable" and the probe's
/// "ENETUNREACH: Network is unreachable" both become "Network is unreachable".
fn error_text(s: &str) -> String {
    s.lines()
        .last()
        .unwrap_or("")
        .rsplit_once(": ")
        .map_or(s, |(_, d)| d)
        .trim()
        .to_string()
}

/// iproute2's table names (lib/rt_names.c) → numbers.
fn table_num(v: &Value) -> Option<u32> {
    match v.as_str()? {
        "main" => Some(254),
        "local" => Some(255),
        "default" => Some(253),
        n => Some(n.parse().unwrap_or_else(|_| panic!("table {n}"))),
    }
}

/// `ip -d -j route get DEST` (details: the table is always printed) in the snapshot's shape.
fn route_get(ns: Option<&Netns>, dev: &dyn Fn(&Value) -> Option<u32>, p: IpAddr) -> RouteLookup {
    match ip_j(ns, &["-d", "route", "get", &p.to_string()]) {
        Ok(v) => {
            let r = &arr(&v)[0];
            RouteLookup {
                dest: p,
                oif: dev(&r["dev"]),
                prefsrc: ip_addr(&r["prefsrc"]),
                gateway: ip_addr(&r["gateway"]).or_else(|| ip_addr(&r["via"]["host"])),
                local: r["type"].as_str() == Some("local"),
                error: None,
                table: table_num(&r["table"]),
            }
        }
        Err(e) => RouteLookup {
            dest: p,
            oif: None,
            prefsrc: None,
            gateway: None,
            local: false,
            error: Some(error_text(&e)),
            table: None,
        },
    }
}

/// What `ip -j` reports (in `ns`, or here) in the snapshot's shape: links, addresses, main-table routes, and
/// `ip route get` for each of `peers` and for each of `offlink` (the default-route lookups).
fn ip_view(ns: Option<&Netns>, peers: &[IpAddr], offlink: &[IpAddr]) -> IpView {
    let links_j = ip_j(ns, &["-d", "link", "show"]).expect("ip link");
    let index: HashMap<&str, u32> = arr(&links_j)
        .iter()
        .map(|l| {
            (
                l["ifname"].as_str().unwrap(),
                l["ifindex"].as_u64().unwrap() as u32,
            )
        })
        .collect();
    let dev = |v: &Value| {
        v.as_str()
            .map(|n| *index.get(n).unwrap_or_else(|| panic!("dev {n}")))
    };
    let links = ip_links(&links_j, &dev);
    let addrs = ip_addrs(ns);
    let routes = ip_routes(ns, &dev);
    let peer_routes = peers.iter().map(|p| route_get(ns, &dev, *p)).collect();
    let default_lookups = offlink.iter().map(|p| route_get(ns, &dev, *p)).collect();

    IpView {
        links,
        addrs,
        routes,
        peer_routes,
        default_lookups,
    }
}

/// `ip -j -d link show`'s output `links_j` in the snapshot's shape; `dev` maps a device name to its index.
fn ip_links(links_j: &Value, dev: &dyn Fn(&Value) -> Option<u32>) -> Vec<Link> {
    arr(links_j)
        .iter()
        .map(|l| {
            let flags = strs(&l["flags"]);
            Link {
                index: l["ifindex"].as_u64().unwrap() as u32,
                name: l["ifname"].as_str().unwrap().to_string(),
                name_escaped: false,
                up: flags.contains(&"UP"),
                // ip prints NO-CARRIER for an UP interface without IFF_RUNNING, and never prints RUNNING.
                running: flags.contains(&"UP") && !flags.contains(&"NO-CARRIER"),
                lower_up: flags.contains(&"LOWER_UP"),
                loopback: flags.contains(&"LOOPBACK"),
                oper_state: l["operstate"].as_str().unwrap().to_lowercase(),
                mtu: l["mtu"].as_u64().map(|m| m as u32),
                kind: l["linkinfo"]["info_kind"].as_str().map(str::to_string),
                master: dev(&l["master"]),
                link_type: arphrd(l["link_type"].as_str().unwrap()),
                mac: l["address"].as_str().map(str::to_string),
            }
        })
        .collect()
}

/// `ip -j addr show` (in `ns`, or here) in the snapshot's shape, IPv4 first, by link index.
fn ip_addrs(ns: Option<&Netns>) -> Vec<Addr> {
    let addrs_j = ip_j(ns, &["addr", "show"]).expect("ip addr");
    let mut addrs: Vec<Addr> = arr(&addrs_j)
        .iter()
        .flat_map(|l| {
            let idx = l["ifindex"].as_u64().unwrap() as u32;
            let ifname = l["ifname"].as_str().unwrap_or("").to_string();
            arr(&l["addr_info"]).iter().map(move |a| Addr {
                index: idx,
                addr: ip_addr(&a["local"]).unwrap(),
                prefix_len: a["prefixlen"].as_u64().unwrap() as u8,
                scope: scope_num(&a["scope"]),
                tentative: a["tentative"].as_bool().unwrap_or(false),
                deprecated: a["deprecated"].as_bool().unwrap_or(false),
                dad_failed: a["dadfailed"].as_bool().unwrap_or(false),
                // `ip -j` prints every IPv4 address's label (the link's name when none was given).
                label: a["label"]
                    .as_str()
                    .filter(|s| *s != ifname)
                    .map(String::from),
            })
        })
        .collect();
    addrs.sort_by_key(|a| (a.family(), a.index));
    addrs
}

/// `ip -j [-6] route show table main` (in `ns`, or here) in the snapshot's shape, IPv4 first; `dev` maps a
/// device name to its index.
fn ip_routes(ns: Option<&Netns>, dev: &dyn Fn(&Value) -> Option<u32>) -> Vec<Route> {
    let mut routes = Vec::new();
    for (fam, args) in [
        (Family::Inet, &["route", "show", "table", "main"][..]),
        (Family::Inet6, &["-6", "route", "show", "table", "main"][..]),
    ] {
        let host_len = if fam == Family::Inet { 32 } else { 128 };
        for r in arr(&ip_j(ns, args).expect("ip route")) {
            let dst = match r["dst"].as_str().unwrap() {
                "default" => None,
                d => Some(match d.split_once('/') {
                    Some((a, l)) => (a.parse().unwrap(), l.parse().unwrap()),
                    None => (d.parse().unwrap(), host_len),
                }),
            };
            let gw = |h: &Value| ip_addr(&h["gateway"]).or_else(|| ip_addr(&h["via"]["host"]));
            let down = |h: &Value| {
                strs(&h["flags"])
                    .iter()
                    .any(|f| *f == "linkdown" || *f == "dead")
            };
            let nexthops: Vec<NextHop> = arr(&r["nexthops"])
                .iter()
                .map(|h| NextHop {
                    oif: dev(&h["dev"]).unwrap(),
                    gateway: gw(h),
                    linkdown: down(h),
                })
                .collect();
            let multi = !nexthops.is_empty();
            routes.push(Route {
                family: fam,
                dst,
                metric: r["metric"].as_u64().unwrap_or(0) as u32,
                oif: if multi { None } else { dev(&r["dev"]) },
                gateway: if multi { None } else { gw(r) },
                linkdown: down(r),
                nexthops,
                kind: route_type(&r["type"]),
                scope: scope_num(&r["scope"]),
                prefsrc: ip_addr(&r["prefsrc"]),
            });
        }
    }
    routes
}

/// The probe's snapshot in the oracle's shape (addresses grouped like `ip`, error texts reduced to their
/// description), after checking the orders the snapshot promises.
fn probe_view(snap: &Network) -> IpView {
    let idx: Vec<u32> = snap.links.iter().map(|l| l.index).collect();
    assert!(
        idx.windows(2).all(|w| w[0] < w[1]),
        "links not in ascending index order: {idx:?}"
    );
    let fams: Vec<Family> = snap.addrs.iter().map(Addr::family).collect();
    assert!(
        fams.windows(2).all(|w| w[0] <= w[1]),
        "an IPv6 address before an IPv4 one: {:?}",
        snap.addrs
    );
    let rfams: Vec<Family> = snap.routes.iter().map(|r| r.family).collect();
    assert!(
        rfams.windows(2).all(|w| w[0] <= w[1]),
        "IPv6 route before an IPv4 one"
    );
    let mut addrs = snap.addrs.clone();
    addrs.sort_by_key(|a| (a.family(), a.index));
    IpView {
        links: snap.links.clone(),
        addrs,
        routes: snap.routes.clone(),
        peer_routes: snap
            .peer_routes
            .iter()
            .map(|r| RouteLookup {
                error: r.error.as_deref().map(error_text),
                ..r.clone()
            })
            .collect(),
        default_lookups: snap
            .default_lookups
            .iter()
            .map(|r| RouteLookup {
                error: r.error.as_deref().map(error_text),
                ..r.clone()
            })
            .collect(),
    }
}

/// Probes inside `ns` (or the host) and asserts that the result equals `ip -j`'s view, taken just before and
/// just after (retried while those two differ: a link state or address lifetime changed meanwhile).
pub fn check(ns: Option<&Netns>, peers: &[IpAddr]) -> Network {
    for _ in 0..5 {
        let snap = match ns {
            Some(ns) => ns.in_netns(|| probe(peers)),
            None => probe(peers),
        }
        .expect("probe");
        // The off-link destinations the probe chose: they must avoid every local prefix and route.
        let offlink: Vec<IpAddr> = snap.default_lookups.iter().map(|l| l.dest).collect();
        assert_eq!(
            offlink.iter().map(|d| d.is_ipv4()).collect::<Vec<_>>(),
            vec![true, false],
            "one IPv4, then one IPv6 off-link lookup"
        );
        for d in &offlink {
            assert!(
                !snap.addrs.iter().any(|a| a.covers(d)),
                "off-link destination {d} is on a local prefix"
            );
        }
        let before = ip_view(ns, peers, &offlink);
        let snap = match ns {
            Some(ns) => ns.in_netns(|| probe(peers)),
            None => probe(peers),
        }
        .expect("probe");
        let after = ip_view(ns, peers, &offlink);
        if before != after {
            std::thread::sleep(std::time::Duration::from_millis(200));
            continue;
        }
        let got = probe_view(&snap);
        assert_eq!(
            got.links, before.links,
            "links differ from `ip -j -d link show`"
        );
        assert_eq!(
            got.addrs, before.addrs,
            "addresses differ from `ip -j addr show`"
        );
        assert_eq!(
            got.routes, before.routes,
            "routes differ from `ip -j route show table main`"
        );
        assert_eq!(
            got.peer_routes, before.peer_routes,
            "lookups differ from `ip -j route get`"
        );
        assert_eq!(
            got.default_lookups, before.default_lookups,
            "off-link lookups differ from `ip -d -j route get`"
        );
        return snap;
    }
    panic!("`ip -j` kept changing between two reads");
}

/// Asserts that `probe_start(peers, needs)` agrees with `probe_full(peers)` in `ns` (retried while two full
/// probes around it differ): the same addresses and peer lookups; the same routes when IPv6 routes were
/// probed, else the same IPv4 routes; every link that owns an address or carries a default or peer route
/// present with the full probe's name and flags; the full probe's whole entry (kind, MTU, MAC, exact
/// state, …) for links with a usable address and for route output interfaces; no link the full probe
/// lacks. Returns whether the IPv6 routes were probed.
pub fn check_start(ns: &Netns, peers: &[IpAddr], needs: &StartNeeds) -> bool {
    for _ in 0..5 {
        let before = ns.in_netns(|| probe(peers)).expect("probe_full");
        let start = ns
            .in_netns(|| probe_start(peers, needs))
            .expect("probe_start");
        let after = ns.in_netns(|| probe(peers)).expect("probe_full");
        if before.links != after.links
            || before.addrs != after.addrs
            || before.routes != after.routes
        {
            std::thread::sleep(std::time::Duration::from_millis(200));
            continue;
        }
        let full = before;
        assert!(full.ipv6_routes_probed);
        assert_eq!(start.addrs, full.addrs, "addresses differ");
        assert_eq!(start.peer_routes, full.peer_routes, "peer lookups differ");
        // The start path looks up the IPv4 off-link destination always, the IPv6 one with the IPv6 routes.
        let want_lookups = if start.ipv6_routes_probed {
            full.default_lookups.clone()
        } else {
            full.default_lookups[..1].to_vec()
        };
        assert_eq!(
            start.default_lookups, want_lookups,
            "off-link lookups differ"
        );
        let want_routes: Vec<Route> = if start.ipv6_routes_probed {
            full.routes.clone()
        } else {
            full.routes
                .iter()
                .filter(|r| r.family == Family::Inet)
                .cloned()
                .collect()
        };
        assert_eq!(start.routes, want_routes, "routes differ");
        let idx: Vec<u32> = start.links.iter().map(|l| l.index).collect();
        assert!(
            idx.windows(2).all(|w| w[0] < w[1]),
            "links not in ascending index order: {idx:?}"
        );
        let full_link = |i: u32| {
            full.links
                .iter()
                .find(|l| l.index == i)
                .unwrap_or_else(|| panic!("probe_start has link {i}, probe_full does not"))
        };
        let owners: Vec<u32> = full.addrs.iter().map(|a| a.index).collect();
        let detailed: Vec<u32> = full
            .addrs
            .iter()
            .filter(|a| !a.is_link_local() && !a.is_loopback())
            .map(|a| a.index)
            .chain(
                start
                    .routes
                    .iter()
                    .filter(|r| r.is_default())
                    .flat_map(|r| r.paths())
                    .map(|p| p.oif),
            )
            .chain(full.peer_routes.iter().filter_map(|r| r.oif))
            .chain(start.default_lookups.iter().filter_map(|r| r.oif))
            .collect();
        for i in owners.iter().chain(&detailed) {
            let f = full_link(*i);
            let s = start
                .links
                .iter()
                .find(|l| l.index == *i)
                .unwrap_or_else(|| panic!("probe_start lacks link {} ({i})", f.name));
            assert_eq!(
                (&s.name, s.up, s.running, s.loopback),
                (&f.name, f.up, f.running, f.loopback),
                "name or flags of link {i} differ"
            );
            if detailed.contains(i) {
                assert_eq!(s, f, "details of link {} differ", f.name);
            }
        }
        for s in &start.links {
            let f = full_link(s.index);
            assert_eq!((&s.name, s.up, s.running), (&f.name, f.up, f.running));
        }
        return start.ipv6_routes_probed;
    }
    panic!("the network kept changing between two probes");
}
