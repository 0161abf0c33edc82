//! ncclenv's own choice of the interface ([`choose`], one function per step of the order in the parent
//! module's docs, `docs/policy.md`), before any inherited value is looked at; the preflight's given
//! interface ([`given`]) and the ranking of candidates ([`rank`]).

use super::view::NetworkView;
use crate::findings::Finding;
use crate::plan::Plan;
use crate::snapshot::{is_link_local_ip, Addr, Family, Link, Peer, RouteLookup, Snapshot};
use std::net::IpAddr;

/// The interface ncclenv picks on its own, before looking at inherited values.
pub(super) struct Pick<'a> {
    pub(super) link: &'a Link,
    pub(super) addr: Option<&'a Addr>,
    pub(super) how: String,
    /// False when no route supported the choice (ranking or loopback fallback).
    pub(super) routed: bool,
}

/// Rank candidates when no route decides: IPv4 first; physical NICs, bonds, macvlan/ipvlan before veths and
/// tunnels; bridges last; then the lowest index.
pub(super) fn rank(link: &Link, addr: &Addr) -> (u8, u8, u32) {
    let class = if link.is_bridge_like() {
        3
    } else {
        match link.kind.as_deref() {
            None | Some("bond") | Some("macvlan") | Some("ipvlan") | Some("team") => 0,
            Some("veth") => 1,
            _ => 2,
        }
    };
    (u8::from(addr.family() == Family::Inet6), class, link.index)
}

/// ncclenv's own choice, one function per step of the order in the module docs; the first step that names
/// a candidate decides. Warnings about the peer's route and dead default routes are added to `plan` on the
/// way.
pub(super) fn choose<'a>(
    snap: &Snapshot,
    view: &NetworkView<'a>,
    family: Option<Family>,
    plan: &mut Plan,
) -> Option<Pick<'a>> {
    if let Some(p) = platform_interface(snap, view, family, plan) {
        return Some(p);
    }
    if let Some(p) = peer_route(snap, view, family, plan) {
        return Some(p);
    }
    if let Some(p) = declared_address(snap, view, family) {
        return Some(p);
    }
    if let Some(p) = default_routes(view, family, plan) {
        return Some(p);
    }
    ranked_candidate(snap, view, family)
}

/// Step 0, the interface the platform names outright (`JobShape::platform_interface`, read from the job's
/// environment by `crate::orchestrator::named_interface`: SageMaker's `SM_NETWORK_INTERFACE_NAME`,
/// aws/sagemaker-training-toolkit `src/sagemaker_training/environment.py`): it
/// decides when this host has it as a candidate (RUNNING, not excluded, a usable address of the family).
/// Absent or unusable, a `launcher-argument` warning names the variable and the next step decides.
fn platform_interface<'a>(
    snap: &Snapshot,
    view: &NetworkView<'a>,
    family: Option<Family>,
    plan: &mut Plan,
) -> Option<Pick<'a>> {
    let (var, name, row) = snap.job.platform_interface.as_ref()?;
    let why = match view.link_by_name(name) {
        Some(link) => match view.candidate(link, family) {
            Some(addr) => {
                return Some(Pick {
                    link,
                    addr: Some(addr),
                    how: format!("{var}={name} ({row} names the job's interface)"),
                    routed: true,
                })
            }
            None => view.why_not(link, family),
        },
        None => "this host has no interface of that name".to_string(),
    };
    plan.finding(
        Finding::LauncherArgument,
        format!("{var}={name:?} ({row}) names the job's interface, but {why}; not used"),
        format!(
            "check the platform's network configuration; meanwhile ncclenv decides as without {var} (usable here: {})",
            view.usable_list(family)
        ),
    );
    None
}

/// The interface the preflight gives ([`crate::config::Config::interface_override`]: the network every node
/// shares that it measured fastest), when this host has it with that address.
pub(super) fn given<'a>(
    view: &NetworkView<'a>,
    o: &crate::config::InterfaceOverride,
) -> Option<Pick<'a>> {
    let link = view.net.links.iter().find(|l| l.name == o.ifname)?;
    let addr = view
        .net
        .addrs
        .iter()
        .find(|a| a.index == link.index && a.addr == o.addr)?;
    Some(Pick {
        link,
        addr: Some(addr),
        how: o.how.clone(),
        routed: true,
    })
}

/// Step 1, the kernel's route to the peer: the interface it leaves through (its IPv4 link-local address
/// counts when the peer is on that link, F16), or, when the peer is this host, the interface owning the
/// address (any family; an IPv4 link-local one too). An IPv6 link-local peer is never used (`peer-link-local`):
/// such an address needs a scope (an interface index of one host), which means nothing to the other nodes
/// that NCCL's unique id is handed to. Each lookup is tried in turn; one that fails or leaves through an unusable interface is
/// warned about and the next one (then the next step) decides.
fn peer_route<'a>(
    snap: &Snapshot,
    view: &NetworkView<'a>,
    family: Option<Family>,
    plan: &mut Plan,
) -> Option<Pick<'a>> {
    let peer = snap.peer.as_ref().filter(|p| !p.addrs.is_empty())?;
    warn_link_local_v6_peer(peer, plan);
    for lookup in &view.net.peer_routes {
        if family.is_some_and(|f| Family::of(&lookup.dest) != f)
            || (lookup.dest.is_ipv6() && is_link_local_ip(&lookup.dest))
        {
            continue;
        }
        if let Some(err) = &lookup.error {
            plan.finding(
                Finding::PeerUnreachable,
                format!(
                    "the kernel has no route to the peer {} ({} from {}): {err}",
                    lookup.dest, peer.host, peer.source
                ),
                format!(
                    "check the peer address and this container's network; {}",
                    without_peer_route(snap, view, family)
                ),
            );
            continue;
        }
        let pick = if lookup.local {
            peer_is_this_host(view, peer, lookup)
        } else {
            route_to_peer(snap, view, family, peer, lookup, plan)
        };
        if pick.is_some() {
            return pick;
        }
    }
    None
}

/// What the decision does once the route to the peer is of no use, for the remedies of `peer-unreachable`
/// and `peer-route-unusable`: the declared address (step 1b), else a default route (steps 2/3, policy
/// routing included), else the ranking of the candidates (steps 4/5).
fn without_peer_route(snap: &Snapshot, view: &NetworkView, family: Option<Family>) -> &'static str {
    let fam_ok = |f: Family| family.is_none_or(|want| want == f);
    if snap.job.self_addr.is_some() {
        return "meanwhile ncclenv decides without that route (this node's declared address, else the default \
                route, else its ranking of the interfaces)";
    }
    let default = view
        .net
        .routes
        .iter()
        .any(|r| r.is_default() && r.kind == 1 && fam_ok(r.family))
        || view.net.default_lookups.iter().any(|l| {
            l.error.is_none()
                && !l.local
                && l.oif.is_some()
                && l.table.is_some_and(|t| t != 254)
                && fam_ok(Family::of(&l.dest))
        });
    if default {
        "meanwhile ncclenv falls back to the default route"
    } else {
        "meanwhile ncclenv decides without it: there is no default route here either, so it takes the only or \
         best-ranked interface (no-route-decided names it)"
    }
}

/// `peer-link-local`: each IPv6 link-local address of the peer (NCCL's unique id carries no scope id).
fn warn_link_local_v6_peer(peer: &Peer, plan: &mut Plan) {
    for a in peer
        .addrs
        .iter()
        .filter(|a| a.is_ipv6() && is_link_local_ip(a))
    {
        plan.finding(
            Finding::PeerLinkLocal,
            format!(
                "the master {} (from {}) is the IPv6 link-local address {a}: it is usable only with a scope (an interface index of one host), which means nothing on the other nodes, so ncclenv does not choose the interface by the route to it (with or without a %zone) and decides from the other steps",
                peer.host,
                peer.source,
            ),
            "give the launcher the master's global or unique-local (fd00::/8) address, or an IPv4 address",
        );
    }
}

/// The peer is this host (the kernel answers with a `local` route): the interface owning the address, when it
/// is a candidate for the peer or the owned address is a bindable IPv4 link-local one on a candidate link.
fn peer_is_this_host<'a>(
    view: &NetworkView<'a>,
    peer: &Peer,
    lookup: &RouteLookup,
) -> Option<Pick<'a>> {
    let own = view.net.addrs.iter().find(|a| a.addr == lookup.dest)?;
    let l = view.link(own.index)?;
    let a = view
        .candidate_for_peer(l, Some(Family::of(&lookup.dest)))
        .or_else(|| {
            // The owned address itself, when nothing better on the link is usable.
            (own.usable_link_local_v4() && l.is_candidate(view.exclude)).then_some(own)
        })?;
    Some(Pick {
        link: l,
        addr: Some(a),
        how: format!(
            "this host is the peer {} ({}); the interface owning that address",
            lookup.dest, peer.source
        ),
        routed: true,
    })
}

/// The interface the kernel's route to the peer leaves through, when it is a candidate for the peer;
/// otherwise a `peer-route-unusable` warning saying why not.
fn route_to_peer<'a>(
    snap: &Snapshot,
    view: &NetworkView<'a>,
    family: Option<Family>,
    peer: &Peer,
    lookup: &RouteLookup,
    plan: &mut Plan,
) -> Option<Pick<'a>> {
    let link = lookup.oif.and_then(|i| view.link(i))?;
    let peer_fam = Some(Family::of(&lookup.dest));
    let Some(a) = view.candidate_for_peer(link, peer_fam) else {
        plan.finding(
            Finding::PeerRouteUnusable,
            format!(
                "the route to the peer {} leaves through {}, but {}",
                lookup.dest,
                link.name,
                view.why_not(link, peer_fam)
            ),
            format!(
                "fix that interface or the route; {}",
                without_peer_route(snap, view, family)
            ),
        );
        return None;
    };
    // The address the kernel sources connections to the master from (`RTA_PREFSRC` of the lookup), when
    // it is a usable one of that link: on a link with several addresses (an alias label `eth0:1` on the
    // master's network beside another), that is the one the master can answer (#26).
    let a = lookup
        .prefsrc
        .and_then(|src| {
            view.net
                .addrs
                .iter()
                .find(|x| x.index == link.index && x.addr == src && x.usable())
        })
        .unwrap_or(a);
    Some(Pick {
        link,
        addr: Some(a),
        how: format!(
            "route to peer {} ({} from {}){}",
            lookup.dest,
            peer.host,
            peer.source,
            if a.is_link_local() {
                "; the peer is on that link, so its link-local address works"
            } else {
                ""
            }
        ),
        routed: true,
    })
}

/// Step 1b, the address this node declares for itself (`VLLM_HOST_IP`, Ray's `--node-ip-address`, torchrun's
/// `--local-addr`, Paddle's `POD_IP`; F29): the interface that owns it, when it is a candidate (an IPv4
/// link-local address counts: the user named it).
fn declared_address<'a>(
    snap: &Snapshot,
    view: &NetworkView<'a>,
    family: Option<Family>,
) -> Option<Pick<'a>> {
    let text = snap.job.self_addr.as_deref()?;
    let ip = text.parse::<IpAddr>().ok()?;
    if ip.is_loopback() || family.is_some_and(|f| Family::of(&ip) != f) {
        return None;
    }
    let own = view.net.addrs.iter().find(|a| a.addr == ip)?;
    let l = view.link(own.index)?;
    let a = view
        .candidate(l, Some(Family::of(&ip)))
        .or_else(|| (own.usable_link_local_v4() && l.is_candidate(view.exclude)).then_some(own))?;
    Some(Pick {
        link: l,
        addr: Some(a),
        how: format!(
            "{}={ip} names this node's address; the interface owning it",
            snap.job
                .self_addr_source
                .as_deref()
                .unwrap_or("the launcher")
        ),
        routed: true,
    })
}

/// Steps 2 and 3, no peer decided: per family, IPv4 then IPv6 (only the inherited family when one counts),
/// the kernel's route to an off-link destination when an `ip rule` takes it out of table main
/// ([`policy_default`], F28), else the default routes of table main ([`main_default`]).
fn default_routes<'a>(
    view: &NetworkView<'a>,
    family: Option<Family>,
    plan: &mut Plan,
) -> Option<Pick<'a>> {
    for fam in [Family::Inet, Family::Inet6] {
        if family.is_some_and(|f| f != fam) {
            continue;
        }
        if let Some(p) = policy_default(view, fam) {
            return Some(p);
        }
        if let Some(p) = main_default(view, fam, plan) {
            return Some(p);
        }
    }
    None
}

/// The unicast default routes of table main in family `fam`, lowest metric first: the first whose interface
/// is a candidate and whose next hop is not link-down. One skipped for a dead link is named in a
/// `default-route-down` warning when a later one is taken (F11).
fn main_default<'a>(view: &NetworkView<'a>, fam: Family, plan: &mut Plan) -> Option<Pick<'a>> {
    let mut defaults: Vec<_> = view
        .net
        .routes
        .iter()
        .filter(|r| r.is_default() && r.family == fam && r.kind == 1)
        .collect();
    defaults.sort_by_key(|r| r.metric);
    let mut skipped: Vec<String> = Vec::new();
    for r in defaults {
        for hop in r.paths() {
            let Some(l) = view.link(hop.oif) else {
                continue;
            };
            match view.candidate(l, Some(fam)) {
                Some(a) if !hop.linkdown => {
                    if !skipped.is_empty() {
                        plan.finding(
                            Finding::DefaultRouteDown,
                            format!(
                                "the preferred default route is unusable: {}; took {} (metric {}) instead",
                                skipped.join("; "),
                                l.name,
                                r.metric
                            ),
                            "bring that interface up or remove its default route",
                        );
                    }
                    return Some(Pick {
                        link: l,
                        addr: Some(a),
                        how: format!("default route (metric {})", r.metric),
                        routed: true,
                    });
                }
                _ => skipped.push(format!(
                    "default route over {} (metric {}): {}",
                    l.name,
                    r.metric,
                    if hop.linkdown && l.running {
                        "link down".to_string()
                    } else {
                        view.why_not(l, Some(fam))
                    }
                )),
            }
        }
    }
    None
}

/// Steps 4 and 5, no route told: the only candidate, or the best ranked of several ([`rank`]; then not
/// `routed`, which the caller warns about).
fn ranked_candidate<'a>(
    snap: &Snapshot,
    view: &NetworkView<'a>,
    family: Option<Family>,
) -> Option<Pick<'a>> {
    let mut cands = view.candidates(family);
    cands.sort_by_key(|(l, a)| rank(l, a));
    let (l, a) = cands.first()?;
    let routes = if snap.peer.as_ref().is_some_and(|p| !p.addrs.is_empty()) {
        "no route to the peer or default route names one"
    } else {
        "no default route names one"
    };
    let how = if cands.len() == 1 {
        format!("the only usable interface ({routes})")
    } else {
        format!("best ranked of several usable interfaces ({routes})")
    };
    Some(Pick {
        link: l,
        addr: Some(a),
        how,
        routed: cands.len() == 1,
    })
}

/// The kernel's route to an off-link destination ([`Network::default_lookups`](crate::snapshot::Network::default_lookups)) when it came from a
/// table other than main: an `ip rule` steers this host's traffic there (cloud images with per-interface
/// tables, Cilium, source routing; F28), so that table's default route is the one in use.
fn policy_default<'a>(view: &NetworkView<'a>, fam: Family) -> Option<Pick<'a>> {
    let main = 254;
    let l = view.net.default_lookups.iter().find(|l| {
        Family::of(&l.dest) == fam
            && l.error.is_none()
            && !l.local
            && l.table.is_some_and(|t| t != main)
    })?;
    let link = view.link(l.oif?)?;
    let a = view.candidate(link, Some(fam))?;
    Some(Pick {
        link,
        addr: Some(a),
        how: format!(
            "default route of table {} (an ip rule sends off-link traffic there{})",
            l.table.unwrap_or(0),
            l.gateway.map_or(String::new(), |g| format!("; via {g}"))
        ),
        routed: true,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::test_snapshot::SnapshotBuilder;

    /// #21 item 6: SageMaker's `SM_NETWORK_INTERFACE_NAME` decides when this host has it usable; absent or
    /// unusable, a warning names it and the normal choice (the first-ranked `eth0` here) decides.
    #[test]
    fn sagemaker_interface_decides_when_usable() {
        let run = |name: &str| {
            let snap = SnapshotBuilder::new()
                .plug("eth0", &["10.244.1.7/24"])
                .plug("eth1", &["10.0.5.7/24"])
                .plug("net1", &["fe80::6c:1/64"])
                .env("SM_NETWORK_INTERFACE_NAME", name)
                .build();
            // As the probe reads it: the job's environment through the launcher and orchestrator readings.
            let mut snap = snap;
            snap.job = crate::launcher::read(&[], &snap.env).shape;
            crate::decide::decide(&snap, &Config::default())
        };
        let p = run("eth1");
        let c = p
            .choice
            .as_ref()
            .map(|c| (c.ifname.as_str(), c.how.as_str()));
        assert_eq!(c.map(|c| c.0), Some("eth1"));
        assert!(
            c.is_some_and(|c| c.1.contains("SM_NETWORK_INTERFACE_NAME")),
            "{c:?}"
        );
        assert_eq!(p.value_of("NCCL_SOCKET_IFNAME"), Some("eth1"));
        assert!(
            !p.warnings.iter().any(|w| w.message.contains("SM_NETWORK")),
            "{:?}",
            p.warnings
        );
        for bad in ["eth9", "net1"] {
            let p = run(bad);
            assert_eq!(
                p.choice.as_ref().map(|c| c.ifname.as_str()),
                Some("eth0"),
                "{bad}"
            );
            assert!(
                p.warnings.iter().any(|w| w.code == "launcher-argument"
                    && w.message.contains("SM_NETWORK_INTERFACE_NAME")),
                "{bad}: {:?}",
                p.warnings
            );
        }
    }
}
