//! Warnings about the network's layout around the bound interface ([`layout_warnings`]): overlapping
//! prefixes, failed or tentative duplicate-address detection, a container bridge behind NAT, proxies in the
//! way of the rendezvous.

use super::view::NetworkView;
use super::{is_multi, Bound};
use crate::findings::Finding;
use crate::plan::Plan;
use crate::snapshot::{prefix_contains, Addr, Link, Network, RdzvProtocol, Snapshot};
use std::net::IpAddr;

/// Warnings about the network's layout around the bound interface: overlapping prefixes, a container bridge
/// behind NAT (multi-node jobs), proxies in the way of the rendezvous.
pub(super) fn layout_warnings(view: &NetworkView, snap: &Snapshot, bound: &Bound, plan: &mut Plan) {
    overlapping_prefixes(view, plan);
    dad_findings(view, plan);
    if is_multi(snap) {
        container_bridge_nat(view, snap, &bound.ifname, bound.addr, plan);
    }
    proxy_warning(snap, plan);
}

/// A multi-node job whose address sits on a container bridge behind NAT cannot be connected back to by the
/// other nodes (they would need this container's address, which only its host can reach): warn
/// `container-bridge-nat`. Seen from inside the container (the NAT itself lives in the host's namespace):
/// the chosen interface is a veth, its IPv4 address lies in a container engine's default bridge pool
/// (`crate::snapshot::NAT_BRIDGE_POOLS`), and the route to the master leaves through it via a gateway (the master is on
/// another host). A heuristic: a warning, never a refusal.
fn container_bridge_nat(
    view: &NetworkView,
    snap: &Snapshot,
    ifname: &str,
    addr: Option<IpAddr>,
    plan: &mut Plan,
) {
    let Some(IpAddr::V4(a)) = addr else { return };
    let Some(link) = view.link_by_name(ifname) else {
        return;
    };
    if link.kind.as_deref() != Some("veth") {
        return;
    }
    let in_pool = crate::snapshot::in_nat_bridge_pool(&IpAddr::V4(a));
    let Some(peer) = snap.peer.as_ref() else {
        return;
    };
    let via = view.net.peer_routes.iter().find_map(|l| {
        (l.error.is_none() && !l.local && l.oif == Some(link.index))
            .then_some(l.gateway)
            .flatten()
    });
    let (true, Some(gw)) = (in_pool, via) else {
        return;
    };
    plan.finding(
        Finding::ContainerBridgeNat,
        format!(
            "this node's address {a} on {ifname} looks like a container bridge behind NAT (a veth in a Docker/Podman default address pool; the master {} is reached through {gw}): the other nodes cannot connect back to {a}",
            peer.host
        ),
        // The same NAT the preflight and explain find between the nodes: one remedy (crate::cross_node).
        crate::cross_node::Rule::NatAddress.remedy(),
    );
}

/// Two candidate interfaces whose connected prefixes overlap: the kernel sources traffic from the first
/// matching route whatever NCCL binds. Judged from the connected routes the kernel really has
/// ([`connected_prefix`]): an address that adds none (`flannel.1`'s 10.244.0.0/32, `noprefixroute`) overlaps
/// nothing (#26, item 6).
fn overlapping_prefixes(view: &NetworkView, plan: &mut Plan) {
    let c: Vec<(&Link, &Addr)> = view
        .candidates(None)
        .into_iter()
        .filter(|(_, a)| connected_prefix(view.net, a))
        .collect();
    for (i, (l1, a1)) in c.iter().enumerate() {
        for (l2, a2) in c.iter().skip(i + 1) {
            if l1.index == l2.index || a1.family() != a2.family() {
                continue;
            }
            let p = a1.prefix_len.min(a2.prefix_len);
            if crate::snapshot::prefix_contains(&a1.addr, p, &a2.addr) && p > 0 {
                plan.finding(
                    Finding::OverlappingPrefixes,
                    format!(
                        "{} ({}/{}) and {} ({}/{}) have overlapping connected prefixes: the kernel sends traffic for that range through one of them whatever NCCL binds",
                        l1.name, a1.addr, a1.prefix_len, l2.name, a2.addr, a2.prefix_len
                    ),
                    "give the interfaces disjoint subnets, or exclude one with NCCLENV_EXCLUDE",
                );
            }
        }
    }
}

/// `address-dad-failed` for each address whose duplicate-address detection failed (`IFA_F_DADFAILED`: a
/// neighbour answered for it, RFC 4862 §5.4.5), and `address-tentative` for each non-link-local address
/// still tentative at decision time (the start probe has already waited for the interface's own DAD time,
/// `probe::net::probe_start`): the kernel cannot bind either, so the decision goes on without them.
fn dad_findings(view: &NetworkView, plan: &mut Plan) {
    for a in &view.net.addrs {
        let name = view.link(a.index).map_or("?", |l| l.name.as_str());
        if a.dad_failed {
            plan.finding(
                Finding::AddressDadFailed,
                format!(
                    "{}/{} on {name} failed duplicate-address detection: another host on that network has the same address, and the kernel will not use it",
                    a.addr, a.prefix_len
                ),
                "give this node a unique address (check the IPAM or static configuration for a duplicate), then remove and re-add it",
            );
        } else if a.tentative && !a.is_link_local() {
            plan.finding(
                Finding::AddressTentative,
                format!(
                    "{}/{} on {name} is still in duplicate-address detection (tentative): it cannot be bound yet, so it was left out",
                    a.addr, a.prefix_len
                ),
                "start the job once the address is ready (a readiness check on the address), or add it with nodad",
            );
        }
    }
}

/// True when the address `a` has a connected route: a route of table main to its prefix out of its link
/// with no gateway (the kernel adds one for every address but a host prefix, /32 or /128, or one added with
/// `noprefixroute`; `fib_add_ifaddr`, net/ipv4/fib_frontend.c; `addrconf_prefix_route`, net/ipv6/addrconf.c).
/// Where the routes of the address's family were not probed ([`Network::ipv6_routes_probed`]) a prefix
/// shorter than a host prefix counts as connected.
fn connected_prefix(net: &Network, a: &Addr) -> bool {
    let host = if a.addr.is_ipv4() { 32 } else { 128 };
    if a.prefix_len >= host {
        return false;
    }
    if a.addr.is_ipv6() && !net.ipv6_routes_probed {
        return true;
    }
    net.routes.iter().any(|r| {
        r.oif == Some(a.index)
            && r.gateway.is_none()
            && r.dst
                .is_some_and(|(n, l)| l == a.prefix_len && prefix_contains(&n, l, &a.addr))
    })
}

/// A proxy variable that the launcher's HTTP rendezvous would use and `NO_PROXY` does not exempt its host:
/// the rendezvous (Paddle's HTTP master, an etcd endpoint) goes to the proxy (F20). Only HTTP rendezvous
/// count: torchrun's static/c10d rendezvous, `env://`, SGLang and DeepSpeed speak raw TCP to a `TCPStore`.
/// An `http://` endpoint uses `HTTP_PROXY`/`http_proxy`, an `https://` one `HTTPS_PROXY`/`https_proxy`,
/// both `ALL_PROXY`/`all_proxy`; variables the launcher clears itself (Paddle: `http_proxy`, `https_proxy`)
/// are no risk.
fn proxy_warning(snap: &Snapshot, plan: &mut Plan) {
    let Some(r) = snap.job.rendezvous.as_ref() else {
        return;
    };
    if r.protocol != RdzvProtocol::Http {
        return;
    }
    let names: [&str; 4] = if r.tls {
        ["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"]
    } else {
        ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"]
    };
    let set: Vec<&str> = names
        .into_iter()
        .filter(|k| !r.clears.iter().any(|c| c == k))
        .filter(|k| snap.env.get(*k).is_some_and(|value| !value.is_empty()))
        .collect();
    if set.is_empty() {
        return;
    }
    let no_proxy: Vec<String> = ["NO_PROXY", "no_proxy"]
        .iter()
        .filter_map(|k| snap.env.get(*k))
        .flat_map(|value| value.split(',').map(|s| s.trim().to_string()))
        .filter(|s| !s.is_empty())
        .collect();
    let addrs: Vec<IpAddr> = match &snap.peer {
        Some(p) if p.host == r.host => p.addrs.clone(),
        _ => r.host.parse().into_iter().collect(),
    };
    if no_proxy_exempts(&no_proxy, &r.host, &addrs) {
        return;
    }
    plan.finding(
        Finding::ProxyCatchesPeer,
        format!(
            "{} is set and NO_PROXY does not exempt {}: {} ({}) would be reached through the proxy",
            set.join(", "),
            r.host,
            r.owner,
            r.source
        ),
        format!("add {} to NO_PROXY and no_proxy", r.host),
    );
}

/// True when a `NO_PROXY` list exempts `host` (or one of its addresses): `*`, the exact host or address, a
/// domain suffix (`.example.com` or `example.com`), or a CIDR block.
pub fn no_proxy_exempts(list: &[String], host: &str, addrs: &[IpAddr]) -> bool {
    let host = host.to_ascii_lowercase();
    list.iter().any(|e| {
        let e = e.to_ascii_lowercase();
        if e == "*" || e == host {
            return true;
        }
        if let Some((net, len)) = e.split_once('/') {
            if let (Ok(net), Ok(len)) = (net.parse::<IpAddr>(), len.parse::<u8>()) {
                return addrs
                    .iter()
                    .any(|a| crate::snapshot::prefix_contains(&net, len, a));
            }
        }
        if let Ok(ip) = e.parse::<IpAddr>() {
            return addrs.contains(&ip);
        }
        let suffix = e.trim_start_matches('.');
        !suffix.is_empty() && host.ends_with(&format!(".{suffix}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_proxy_rules() {
        let l = |s: &str| s.split(',').map(String::from).collect::<Vec<_>>();
        let ip: IpAddr = "10.0.0.5".parse().expect("ip");
        assert!(no_proxy_exempts(&l("10.0.0.5"), "10.0.0.5", &[ip]));
        assert!(no_proxy_exempts(&l("10.0.0.0/8"), "m", &[ip]));
        assert!(no_proxy_exempts(&l(".svc.local"), "m.svc.local", &[]));
        assert!(no_proxy_exempts(&l("svc.local"), "m.svc.local", &[]));
        assert!(no_proxy_exempts(&l("*"), "x", &[]));
        assert!(!no_proxy_exempts(
            &l("localhost,127.0.0.1"),
            "10.0.0.5",
            &[ip]
        ));
        assert!(!no_proxy_exempts(&l("cal"), "m.svc.local", &[]));
    }
}
