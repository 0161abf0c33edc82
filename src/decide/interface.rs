//! Choosing and validating the socket interface: `NCCL_SOCKET_IFNAME`, `NCCL_SOCKET_FAMILY` and the framework
//! companions `GLOO_SOCKET_IFNAME`, `TP_SOCKET_IFNAME`, `POD_IP`. Pure: reads the snapshot, writes the plan.
//!
//! [`decide_interface`] runs small steps with typed results: the inherited family (`InheritedFamily`);
//! ncclenv's own choice (`choose`, one function per step of the order below); the inherited interface list
//! (`InheritedList`: absent, ignored, kept or fatal); the interface used (kept, own, or the loopback
//! fallback or a refusal); the family export; the companions; warnings about the network's layout.
//!
//! The order of the own choice (`docs/policy.md`): the interface the platform names outright (SageMaker's
//! `SM_NETWORK_INTERFACE_NAME`) when it is a candidate here; else the kernel's route to the peer (an IPv4
//! link-local address counts when the peer is on that link); else the interface owning the address this node
//! declares (`VLLM_HOST_IP`, Ray's `--node-ip-address`, …); else the kernel's route to an off-link
//! destination when an `ip rule` takes it out of table main; else the IPv4 default route of table main with
//! the lowest metric whose interface is a candidate; else the same for IPv6; else the only candidate; else
//! the best-ranked candidate (with a warning); else `lo` for a single-node job. What NCCL itself does with an
//! inherited value is asked of `crate::nccl_rules` (`docs/nccl-rules.md`); the field cases cited as `F<n>`
//! are in `docs/field-cases.md`.

use crate::config::Config;
use crate::findings::Finding;
use crate::nccl_rules::{self, nccl_target, Era, Found, NcclTarget, PickSource};
use crate::nccl_rules::{effective, Origin};
use crate::plan::{Choice, Plan};
use crate::snapshot::{
    is_link_local_ip, prefix_contains, Addr, Family, Launcher, Link, Network, Peer, RdzvProtocol,
    RouteLookup, Snapshot,
};
use std::collections::HashMap;
use std::net::IpAddr;

/// Read-only helpers over the network snapshot, with links and usable addresses indexed once (the cost
/// stays linear in interfaces and addresses: a host can have thousands of veths).
struct NetworkView<'a> {
    net: &'a Network,
    exclude: &'a [String],
    links: HashMap<u32, &'a Link>,
    /// Usable addresses per link index, IPv4 before IPv6, kernel order within a family.
    usable: HashMap<u32, Vec<&'a Addr>>,
    /// The first IPv4 link-local address per link index (not tentative or DAD-failed).
    ll4: HashMap<u32, &'a Addr>,
    /// Links on which an IPv4 link-local address is usable: the kernel's route to a link-local (169.254/16)
    /// peer leaves through them with no gateway (the peer is on that link, F16), or the peer is this host's
    /// own link-local address there. Filled by [`NetworkView::for_job`].
    ll_ok: Vec<u32>,
    /// Output interfaces of the default routes of table main and of the kernel's off-link lookups: the
    /// uplinks (a bridge among them carries the host's own traffic; it is no container bridge).
    uplinks: Vec<u32>,
    /// Output interfaces of the kernel's routes to the peer (lookups that succeeded, not `local`): an
    /// interface the master is reached through is never one "another node cannot reach" (#26, item 8).
    peer_links: Vec<u32>,
}

impl<'a> NetworkView<'a> {
    fn new(net: &'a Network, exclude: &'a [String]) -> NetworkView<'a> {
        let links = net.links.iter().map(|l| (l.index, l)).collect();
        let mut usable: HashMap<u32, Vec<&'a Addr>> = HashMap::new();
        for a in net.addrs.iter().filter(|a| a.usable()) {
            usable.entry(a.index).or_default().push(a);
        }
        // A deprecated address is usable but ranks after a preferred one of its family on the same link
        // (the kernel's source selection prefers a preferred address, RFC 6724 rule 3; #26, item 7).
        for v in usable.values_mut() {
            v.sort_by_key(|a| (a.family(), a.deprecated));
        }
        let mut ll4: HashMap<u32, &'a Addr> = HashMap::new();
        for a in net.addrs.iter().filter(|a| a.usable_link_local_v4()) {
            ll4.entry(a.index).or_insert(a);
        }
        let uplinks = net
            .routes
            .iter()
            .filter(|r| r.is_default())
            .flat_map(|r| r.paths())
            .map(|p| p.oif)
            .chain(
                net.default_lookups
                    .iter()
                    .filter(|l| l.error.is_none() && !l.local)
                    .filter_map(|l| l.oif),
            )
            .collect();
        NetworkView {
            net,
            exclude,
            links,
            usable,
            ll4,
            ll_ok: Vec::new(),
            uplinks,
            peer_links: Vec::new(),
        }
    }
    /// The links where the job's peer makes an IPv4 link-local address usable (see [`NetworkView::ll_ok`]).
    fn for_job(mut self, snap: &Snapshot) -> NetworkView<'a> {
        if snap.peer.as_ref().is_some_and(|p| !p.addrs.is_empty()) {
            for l in self.net.peer_routes.iter().filter(|l| l.error.is_none()) {
                if let (false, Some(oif)) = (l.local, l.oif) {
                    self.peer_links.push(oif);
                }
                // Only a link-local master makes a link-local address usable (F16): a master at a routable
                // address on the same link cannot be answered from 169.254/16 (a label such as
                // `eno1:avahi` beside `eno1`'s own address, #26).
                if !(l.dest.is_ipv4() && is_link_local_ip(&l.dest)) {
                    continue;
                }
                if l.local {
                    if let Some(a) = self.net.addrs.iter().find(|a| a.addr == l.dest) {
                        self.ll_ok.push(a.index);
                    }
                } else if let (Some(oif), None) = (l.oif, l.gateway) {
                    self.ll_ok.push(oif);
                }
            }
        }
        self
    }
    /// A candidate for the route to the peer: [`NetworkView::candidate`], or, on a link where the peer makes it
    /// usable ([`NetworkView::ll_ok`]), a RUNNING, non-loopback, non-excluded link's IPv4 link-local address.
    fn candidate_for_peer(&self, link: &Link, family: Option<Family>) -> Option<&'a Addr> {
        self.candidate(link, family).or_else(|| {
            if family == Some(Family::Inet6)
                || !self.ll_ok.contains(&link.index)
                || !link.is_candidate(self.exclude)
            {
                return None;
            }
            self.ll4.get(&link.index).copied()
        })
    }
    /// True when an address NCCL would use on the link `index` is fine although link-local: IPv4 on a link
    /// where the peer is ([`NetworkView::ll_ok`]). By index: NCCL's name for an address may be a label.
    fn link_local_ok(&self, index: u32, addr: &IpAddr) -> bool {
        addr.is_ipv4() && self.ll_ok.contains(&index)
    }
    /// A container or virtualisation bridge that is not an uplink ([`NetworkView::uplinks`]) and that the
    /// route to the master does not leave through ([`NetworkView::peer_links`]): a host's `br0` that carries
    /// the default route is the host's own network, and an overlay (`flannel.1`) that reaches the master
    /// reaches it.
    fn container_bridge(&self, link: &Link) -> bool {
        link.is_bridge_like()
            && !self.uplinks.contains(&link.index)
            && !self.peer_links.contains(&link.index)
    }
    fn link(&self, index: u32) -> Option<&'a Link> {
        self.links.get(&index).copied()
    }
    fn link_by_name(&self, name: &str) -> Option<&'a Link> {
        self.net.links.iter().find(|l| l.name == name)
    }
    /// The first usable address of `link` in the allowed family (IPv4 before IPv6 when `family` is `None`).
    fn usable_addr(&self, link: &Link, family: Option<Family>) -> Option<&'a Addr> {
        self.usable
            .get(&link.index)?
            .iter()
            .find(|a| family.is_none_or(|f| a.family() == f))
            .copied()
    }
    /// A candidate: [`Link::is_candidate`] with a usable address ([`Addr::usable`]) of the family.
    fn candidate(&self, link: &Link, family: Option<Family>) -> Option<&'a Addr> {
        if !link.is_candidate(self.exclude) {
            return None;
        }
        self.usable_addr(link, family)
    }
    /// Why `link` is not a candidate, in words.
    fn why_not(&self, link: &Link, family: Option<Family>) -> String {
        if self.exclude.iter().any(|e| e == &link.name) {
            "it is in NCCLENV_EXCLUDE".into()
        } else if link.loopback {
            "it is the loopback interface".into()
        } else if !link.running {
            format!("it is not RUNNING (state {}, no carrier)", link.oper_state)
        } else if self.usable_addr(link, family).is_none() {
            "it has no usable address (only link-local, tentative or none)".into()
        } else {
            "unknown".into()
        }
    }
    fn candidates(&self, family: Option<Family>) -> Vec<(&'a Link, &'a Addr)> {
        self.net
            .links
            .iter()
            .filter_map(|l| self.candidate(l, family).map(|a| (l, a)))
            .collect()
    }
    /// `NCCL_SOCKET_IFNAME` for `name`: the plain name, or `=name` when the plain name would also
    /// prefix-match another interface present (`matchIf`, src/misc/utils.cc).
    fn nccl_value(&self, name: &str) -> String {
        if self
            .net
            .links
            .iter()
            .any(|l| l.name != name && l.name.starts_with(name))
        {
            format!("={name}")
        } else {
            name.to_string()
        }
    }
    /// The `NCCL_SOCKET_IFNAME` that makes NCCL bootstrap on `addr` of `link` (#26): NCCL's name for the
    /// address is its label when it has one ([`Addr::label`], `nccl_rules::ifaddrs`), and a plain prefix
    /// may match a label first (`eno1` matches `eno1:avahi`). Tried in order, each checked with NCCL's own
    /// model (`nccl_rules::nccl_pick` with `family`, the family the command will have, and `era`): the
    /// plain name when nothing else starts with it, `=name`; for a label (a name with `:`, which NCCL's
    /// list syntax reads as a port, `parseStringList` in src/misc/utils.cc, so it cannot be written) `^=`
    /// and every other NCCL name, then the link's name as a prefix. The first value whose first match is
    /// that name and address wins; when none does (or without an address), [`NetworkView::nccl_value`].
    fn nccl_value_for(
        &self,
        link: &Link,
        addr: Option<&Addr>,
        family: Option<Family>,
        era: Era,
    ) -> String {
        let Some(a) = addr else {
            return self.nccl_value(&link.name);
        };
        let entries = nccl_rules::ifaddrs(self.net);
        let name = a.label.clone().unwrap_or_else(|| link.name.clone());
        let mut names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        names.extend(self.net.links.iter().map(|l| l.name.as_str()));
        names.sort_unstable();
        names.dedup();
        let mut tries: Vec<String> = Vec::new();
        if !name.contains(':') {
            if !names
                .iter()
                .any(|n| *n != name && n.starts_with(name.as_str()))
            {
                tries.push(name.clone());
            }
            tries.push(format!("={name}"));
        } else {
            let others: Vec<&str> = entries
                .iter()
                .map(|e| e.name.as_str())
                .filter(|n| *n != name)
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            if !others.is_empty()
                && others.len() <= nccl_rules::MAX_IFS
                && others.iter().all(|n| !n.contains(':') && !n.contains(','))
            {
                tries.push(format!("^={}", others.join(",")));
            }
            tries.push(link.name.clone());
        }
        let fam = family.or(Some(a.family()));
        tries
            .into_iter()
            .find(|t| {
                nccl_rules::nccl_pick(self.net, Some(t), fam, era)
                    .found
                    .first()
                    .is_some_and(|f| f.name == name && f.addr == a.addr)
            })
            .unwrap_or_else(|| self.nccl_value(&link.name))
    }
    fn usable_list(&self, family: Option<Family>) -> String {
        let c = self.candidates(family);
        if c.is_empty() {
            "none but lo".into()
        } else {
            c.iter()
                .map(|(l, a)| format!("{} ({})", l.name, a.addr))
                .collect::<Vec<_>>()
                .join(", ")
        }
    }
}

/// The interface ncclenv picks on its own, before looking at inherited values.
struct Pick<'a> {
    link: &'a Link,
    addr: Option<&'a Addr>,
    how: String,
    /// False when no route supported the choice (ranking or loopback fallback).
    routed: bool,
}

/// Rank candidates when no route decides: IPv4 first; physical NICs, bonds, macvlan/ipvlan before veths and
/// tunnels; bridges last; then the lowest index.
fn rank(link: &Link, addr: &Addr) -> (u8, u8, u32) {
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
fn choose<'a>(
    snap: &Snapshot,
    v: &NetworkView<'a>,
    family: Option<Family>,
    plan: &mut Plan,
) -> Option<Pick<'a>> {
    if let Some(p) = platform_interface(snap, v, family, plan) {
        return Some(p);
    }
    if let Some(p) = peer_route(snap, v, family, plan) {
        return Some(p);
    }
    if let Some(p) = declared_address(snap, v, family) {
        return Some(p);
    }
    if let Some(p) = default_routes(v, family, plan) {
        return Some(p);
    }
    ranked_candidate(snap, v, family)
}

/// Step 0, the interface the platform names outright (`JobShape::platform_interface`, read from the job's
/// environment by `crate::orchestrator::named_interface`: SageMaker's `SM_NETWORK_INTERFACE_NAME`,
/// aws/sagemaker-training-toolkit `src/sagemaker_training/environment.py`): it
/// decides when this host has it as a candidate (RUNNING, not excluded, a usable address of the family).
/// Absent or unusable, a `launcher-argument` warning names the variable and the next step decides.
fn platform_interface<'a>(
    snap: &Snapshot,
    v: &NetworkView<'a>,
    family: Option<Family>,
    plan: &mut Plan,
) -> Option<Pick<'a>> {
    let (var, name, row) = snap.job.platform_interface.as_ref()?;
    let why = match v.link_by_name(name) {
        Some(link) => match v.candidate(link, family) {
            Some(addr) => {
                return Some(Pick {
                    link,
                    addr: Some(addr),
                    how: format!("{var}={name} ({row} names the job's interface)"),
                    routed: true,
                })
            }
            None => v.why_not(link, family),
        },
        None => "this host has no interface of that name".to_string(),
    };
    plan.finding(
        Finding::LauncherArgument,
        format!("{var}={name:?} ({row}) names the job's interface, but {why}; not used"),
        format!(
            "check the platform's network configuration; meanwhile ncclenv decides as without {var} (usable here: {})",
            v.usable_list(family)
        ),
    );
    None
}

/// The interface the preflight gives ([`crate::config::Config::interface_override`]: the network every node
/// shares that it measured fastest), when this host has it with that address.
fn given<'a>(v: &NetworkView<'a>, o: &crate::config::InterfaceOverride) -> Option<Pick<'a>> {
    let link = v.net.links.iter().find(|l| l.name == o.ifname)?;
    let addr = v
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
    v: &NetworkView<'a>,
    family: Option<Family>,
    plan: &mut Plan,
) -> Option<Pick<'a>> {
    let peer = snap.peer.as_ref().filter(|p| !p.addrs.is_empty())?;
    warn_link_local_v6_peer(peer, plan);
    for lookup in &v.net.peer_routes {
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
                    without_peer_route(snap, v, family)
                ),
            );
            continue;
        }
        let pick = if lookup.local {
            peer_is_this_host(v, peer, lookup)
        } else {
            route_to_peer(snap, v, family, peer, lookup, plan)
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
fn without_peer_route(snap: &Snapshot, v: &NetworkView, family: Option<Family>) -> &'static str {
    let fam_ok = |f: Family| family.is_none_or(|want| want == f);
    if snap.job.self_addr.is_some() {
        return "meanwhile ncclenv decides without that route (this node's declared address, else the default \
                route, else its ranking of the interfaces)";
    }
    let default = v
        .net
        .routes
        .iter()
        .any(|r| r.is_default() && r.kind == 1 && fam_ok(r.family))
        || v.net.default_lookups.iter().any(|l| {
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
    v: &NetworkView<'a>,
    peer: &Peer,
    lookup: &RouteLookup,
) -> Option<Pick<'a>> {
    let own = v.net.addrs.iter().find(|a| a.addr == lookup.dest)?;
    let l = v.link(own.index)?;
    let a = v
        .candidate_for_peer(l, Some(Family::of(&lookup.dest)))
        .or_else(|| {
            // The owned address itself, when nothing better on the link is usable.
            (own.usable_link_local_v4() && l.is_candidate(v.exclude)).then_some(own)
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
    v: &NetworkView<'a>,
    family: Option<Family>,
    peer: &Peer,
    lookup: &RouteLookup,
    plan: &mut Plan,
) -> Option<Pick<'a>> {
    let l = lookup.oif.and_then(|i| v.link(i))?;
    let peer_fam = Some(Family::of(&lookup.dest));
    let Some(a) = v.candidate_for_peer(l, peer_fam) else {
        plan.finding(
            Finding::PeerRouteUnusable,
            format!(
                "the route to the peer {} leaves through {}, but {}",
                lookup.dest,
                l.name,
                v.why_not(l, peer_fam)
            ),
            format!(
                "fix that interface or the route; {}",
                without_peer_route(snap, v, family)
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
            v.net
                .addrs
                .iter()
                .find(|x| x.index == l.index && x.addr == src && x.usable())
        })
        .unwrap_or(a);
    Some(Pick {
        link: l,
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
    v: &NetworkView<'a>,
    family: Option<Family>,
) -> Option<Pick<'a>> {
    let text = snap.job.self_addr.as_deref()?;
    let ip = text.parse::<IpAddr>().ok()?;
    if ip.is_loopback() || family.is_some_and(|f| Family::of(&ip) != f) {
        return None;
    }
    let own = v.net.addrs.iter().find(|a| a.addr == ip)?;
    let l = v.link(own.index)?;
    let a = v
        .candidate(l, Some(Family::of(&ip)))
        .or_else(|| (own.usable_link_local_v4() && l.is_candidate(v.exclude)).then_some(own))?;
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
    v: &NetworkView<'a>,
    family: Option<Family>,
    plan: &mut Plan,
) -> Option<Pick<'a>> {
    for fam in [Family::Inet, Family::Inet6] {
        if family.is_some_and(|f| f != fam) {
            continue;
        }
        if let Some(p) = policy_default(v, fam) {
            return Some(p);
        }
        if let Some(p) = main_default(v, fam, plan) {
            return Some(p);
        }
    }
    None
}

/// The unicast default routes of table main in family `fam`, lowest metric first: the first whose interface
/// is a candidate and whose next hop is not link-down. One skipped for a dead link is named in a
/// `default-route-down` warning when a later one is taken (F11).
fn main_default<'a>(v: &NetworkView<'a>, fam: Family, plan: &mut Plan) -> Option<Pick<'a>> {
    let mut defaults: Vec<_> = v
        .net
        .routes
        .iter()
        .filter(|r| r.is_default() && r.family == fam && r.kind == 1)
        .collect();
    defaults.sort_by_key(|r| r.metric);
    let mut skipped: Vec<String> = Vec::new();
    for r in defaults {
        for hop in r.paths() {
            let Some(l) = v.link(hop.oif) else { continue };
            match v.candidate(l, Some(fam)) {
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
                        v.why_not(l, Some(fam))
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
    v: &NetworkView<'a>,
    family: Option<Family>,
) -> Option<Pick<'a>> {
    let mut cands = v.candidates(family);
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

/// The kernel's route to an off-link destination ([`Network::default_lookups`]) when it came from a
/// table other than main: an `ip rule` steers this host's traffic there (cloud images with per-interface
/// tables, Cilium, source routing; F28), so that table's default route is the one in use.
fn policy_default<'a>(v: &NetworkView<'a>, fam: Family) -> Option<Pick<'a>> {
    let main = 254;
    let l = v.net.default_lookups.iter().find(|l| {
        Family::of(&l.dest) == fam
            && l.error.is_none()
            && !l.local
            && l.table.is_some_and(|t| t != main)
    })?;
    let link = v.link(l.oif?)?;
    let a = v.candidate(link, Some(fam))?;
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

fn is_multi(snap: &Snapshot) -> bool {
    snap.job.is_multi_node()
}

/// `NCCL_SOCKET_FAMILY` as inherited and as the choice uses it.
struct InheritedFamily<'s> {
    /// The value NCCL sees and where it came from ([`effective`]).
    value: Option<(&'s str, Origin)>,
    /// The family the choice is restricted to: the inherited one when it counts
    /// ([`nccl_rules::socket_family`]) and some candidate has it; `None` otherwise.
    used: Option<Family>,
    /// The inherited value and its origin when it counts but no candidate has that family (AF_INET6 on an
    /// IPv4-only host: NCCL would bootstrap on a link-local address or find nothing): ncclenv chooses
    /// without it and repairs it ([`export_family`]).
    repair: Option<(String, Origin)>,
}

/// Step "inherited family": read `NCCL_SOCKET_FAMILY`; warn (`family-ignored`) when NCCL ignores its value.
fn inherited_family<'s>(
    snap: &'s Snapshot,
    v: &NetworkView,
    plan: &mut Plan,
) -> InheritedFamily<'s> {
    let value = effective("NCCL_SOCKET_FAMILY", &snap.env, &snap.conf_files);
    let counts = nccl_rules::socket_family(value.as_ref().map(|(v, _)| *v));
    if let (Some((val, origin)), None) = (&value, counts) {
        plan.finding(
            Finding::FamilyIgnored,
            format!("NCCL ignores NCCL_SOCKET_FAMILY={val:?} (from {origin}): only AF_INET and AF_INET6 count"),
            "set NCCL_SOCKET_FAMILY=AF_INET or AF_INET6, or unset it",
        );
    }
    let mut used = counts;
    let mut repair = None;
    if let (Some(f), Some((val, origin))) = (counts, &value) {
        if v.candidates(Some(f)).is_empty() && !v.candidates(None).is_empty() {
            used = None;
            repair = Some((val.to_string(), origin.clone()));
        }
    }
    InheritedFamily {
        value,
        used,
        repair,
    }
}

/// The inherited `NCCL_SOCKET_IFNAME`, evaluated as NCCL would with the NCCL the command loads.
enum InheritedList<'s> {
    /// Not set in the environment or a configuration file.
    Absent,
    /// Set, but NCCL ignores it (one character or less, `ifname_counts`): warned, ncclenv sets its choice.
    Ignored,
    /// NCCL would work with it: kept; `first` is NCCL's first match, the interface it bootstraps on.
    Kept {
        value: &'s str,
        origin: Origin,
        first: Found,
    },
    /// NCCL would fail with it (`why`): repaired with ncclenv's own choice, or with `lo` when there is none.
    Fatal {
        value: &'s str,
        origin: Origin,
        why: String,
    },
}

impl InheritedList<'_> {
    /// The value and its origin when NCCL takes it into account (kept or fatal).
    fn counted(&self) -> Option<(&str, &Origin)> {
        match self {
            InheritedList::Kept { value, origin, .. }
            | InheritedList::Fatal { value, origin, .. } => Some((value, origin)),
            InheritedList::Absent | InheritedList::Ignored => None,
        }
    }
}

/// Step "inherited interface list": evaluate `NCCL_SOCKET_IFNAME` with `family` (the inherited one, when
/// used). Warns `ifname-ignored` for a value NCCL ignores; for a kept value, the risks
/// ([`risk_warnings`], unless the job is known to be single-node) and entries matching nothing
/// ([`unmatched_entries`]).
fn inherited_list<'s>(
    snap: &'s Snapshot,
    v: &NetworkView,
    family: Option<Family>,
    target: &NcclTarget,
    plan: &mut Plan,
) -> InheritedList<'s> {
    let Some((val, origin)) = effective("NCCL_SOCKET_IFNAME", &snap.env, &snap.conf_files) else {
        return InheritedList::Absent;
    };
    if !nccl_rules::ifname_counts(val) {
        plan.finding(
            Finding::IfnameIgnored,
            format!("NCCL ignores NCCL_SOCKET_IFNAME={val:?} (from {origin}): a value of one character or less counts as unset"),
            "remove it; ncclenv sets its own choice",
        );
        return InheritedList::Ignored;
    }
    let net = v.net;
    let pick = nccl_rules::nccl_pick(net, Some(val), family, target.era);
    if let Some(why) = fatal_reason(snap, v, val, &pick.found, target) {
        return InheritedList::Fatal {
            value: val,
            origin,
            why,
        };
    }
    let first = pick.found[0].clone();
    // What NCCL will use with the final environment: ncclenv exports NCCL_SOCKET_FAMILY (the first match's)
    // when it is not inherited, which drops the other family's matches.
    let final_fam = family.unwrap_or_else(|| Family::of(&first.addr));
    let final_pick = nccl_rules::nccl_pick(net, Some(val), Some(final_fam), target.era);
    let dropped: Vec<&Found> = pick
        .found
        .iter()
        .filter(|f| !final_pick.found.iter().any(|g| g.name == f.name))
        .collect();
    if !snap.job.is_single_node() {
        risk_warnings(
            v,
            val,
            &origin,
            &final_pick.found,
            &dropped,
            final_fam,
            plan,
        );
    }
    unmatched_entries(v, val, &origin, plan);
    InheritedList::Kept {
        value: val,
        origin,
        first,
    }
}

/// Why NCCL would fail with the inherited list `val` whose matches are `found`: no match (NCCL fails with
/// "Bootstrap : no socket interface found"); a first match without carrier (NCCL before 2.28 bootstraps on it,
/// F8); in a multi-node job a first match on loopback or link-local only. `None` when it works.
fn fatal_reason(
    snap: &Snapshot,
    v: &NetworkView,
    val: &str,
    found: &[Found],
    target: &NcclTarget,
) -> Option<String> {
    match found.first() {
        None => Some(format!(
            "it matches no interface that is RUNNING and has an address, so NCCL fails with \"Bootstrap : no socket interface found\"{}",
            {
                let down: Vec<&str> = v
                    .net
                    .links
                    .iter()
                    .filter(|l| nccl_rules::parse_if_list(val).accepts(&l.name))
                    .map(|l| l.name.as_str())
                    .collect();
                let names = if down.is_empty() { String::new() } else { format!(" (it names only {}, none usable)", down.join(", ")) };
                format!("{names}{}", whitespace_hint(val))
            }
        )),
        // Before 2.28 NCCL takes an interface without carrier (F8, docs/field-cases.md): bootstrap binds to a
        // dead link, and no peer ever connects.
        Some(f) if !f.running => Some(format!(
            "{} would bootstrap on {} ({}), which has no carrier (not RUNNING): no other rank can connect to it",
            target.describe(),
            f.name,
            f.addr
        )),
        Some(f)
            if is_multi(snap)
                && (f.loopback || (is_link_local_ip(&f.addr) && !v.link_local_ok(f.index, &f.addr))) =>
        {
            Some(format!(
                "NCCL would bootstrap on {} ({}), which cannot reach another node of this {}-node job",
                f.name,
                f.addr,
                snap.job.nnodes.unwrap_or(2)
            ))
        }
        _ => None,
    }
}

/// The interface every library of the job will use: its name, its address (when it has one) and how it was
/// chosen.
struct Bound {
    /// The link's name.
    ifname: String,
    /// The name `getifaddrs` gives the bound address (`ifa_name`): its label when it has one
    /// ([`Addr::label`]), else the link's name. Gloo and TensorPipe select by this exact name.
    gname: String,
    addr: Option<IpAddr>,
    how: String,
}

/// Decide `NCCL_SOCKET_IFNAME`, `NCCL_SOCKET_FAMILY`, `GLOO_SOCKET_IFNAME`, `TP_SOCKET_IFNAME` and `POD_IP`,
/// and warn about what is visible and dangerous. Requires `snap.net` to be `Ok` (the caller handles a failed
/// probe). The steps, in order: the inherited family, ncclenv's own choice (`choose`), the inherited
/// interface list (`InheritedList`), the interface used (kept, own, or the loopback fallback or a
/// refusal), the family export, the companions, then warnings about the network's layout. Field cases
/// F1–F12, F16, F26–F29 (`docs/field-cases.md`).
pub fn decide_interface(snap: &Snapshot, cfg: &Config, plan: &mut Plan, vendor: bool) {
    let Ok(net) = &snap.net else { return };
    let v = NetworkView::new(net, &cfg.exclude).for_job(snap);
    let fix = Fix { vendor };
    let target = nccl_target(snap);

    let family = inherited_family(snap, &v, plan);
    let own = match cfg.interface_override.as_ref().and_then(|o| given(&v, o)) {
        Some(p) => Some(p),
        None => choose(snap, &v, family.used, plan),
    };
    let list = inherited_list(snap, &v, family.used, &target, plan);
    let bound = match (&list, &own) {
        (
            InheritedList::Kept {
                value,
                origin,
                first,
            },
            _,
        ) => kept_interface(&v, value, origin, first),
        (_, Some(p)) => own_interface(snap, &v, p, &list, family.used, &fix, plan),
        (_, None) => match loopback_fallback(snap, cfg, &v, &list, family.used, &fix, plan) {
            Some(b) => b,
            None => return,
        },
    };
    if let (true, Some(p)) = (is_multi(snap), &snap.peer) {
        peer_loopback(snap, p, bound.addr, plan);
    }
    plan.choice = Some(Choice {
        ifname: bound.ifname.clone(),
        addr: bound.addr,
        how: bound.how.clone(),
    });
    export_family(&family, &bound, &fix, plan);
    companions(&v, snap, &bound, &fix, plan);
    layout_warnings(&v, snap, &bound, plan);
}

/// Step "inherited list kept": NCCL's first match of the inherited `NCCL_SOCKET_IFNAME` is the interface
/// every library uses; nothing is set for NCCL.
fn kept_interface(v: &NetworkView, value: &str, origin: &Origin, first: &Found) -> Bound {
    Bound {
        ifname: v
            .link(first.index)
            .map_or_else(|| first.name.clone(), |l| l.name.clone()),
        gname: first.name.clone(),
        addr: Some(first.addr),
        how: format!("inherited NCCL_SOCKET_IFNAME={value} (from {origin}), NCCL's first match"),
    }
}

/// Step "own choice used": set `NCCL_SOCKET_IFNAME` to ncclenv's pick `p` (repairing a fatal inherited value,
/// [`Fix`]), and warn `no-route-decided` when no route supported it.
fn own_interface(
    snap: &Snapshot,
    v: &NetworkView,
    p: &Pick,
    list: &InheritedList,
    family: Option<Family>,
    fix: &Fix,
    plan: &mut Plan,
) -> Bound {
    let era = nccl_target(snap).era;
    let value = v.nccl_value_for(p.link, p.addr, family, era);
    match list {
        InheritedList::Fatal { value: val, origin, why } => fix.apply(
            plan,
            Repair {
                name: "NCCL_SOCKET_IFNAME",
                old: val,
                new: Some(value.clone()),
                reason: format!("inherited value {val:?} (from {origin}) would fail: {why}; chose {} by {}", p.link.name, p.how),
                code: Finding::InheritedIfnameRepaired,
                message: format!(
                    "NCCL_SOCKET_IFNAME={val:?} (from {origin}) replaced by {value:?}: {why}. Usable interfaces: {}",
                    v.usable_list(family)
                ),
                remedy: format!("remove NCCL_SOCKET_IFNAME from the image or config file, or set it to {value}"),
            },
        ),
        InheritedList::Absent | InheritedList::Ignored => {
            let why = if value.starts_with('=') {
                "; '=' because the plain name would also match other interfaces (address labels count)"
            } else if value.starts_with('^') {
                "; the address's label cannot be written in NCCL's list syntax (':' starts a port), so every other interface is excluded"
            } else {
                ""
            };
            plan.set(
                "NCCL_SOCKET_IFNAME",
                value,
                format!("{} by {}{why}", p.link.name, p.how),
            );
        }
        InheritedList::Kept { .. } => {}
    }
    if !p.routed {
        let lead = match &snap.peer {
            Some(peer) if !peer.addrs.is_empty() => {
                "no route to the peer and no default route named an interface"
            }
            Some(_) => "the peer did not resolve and no default route named an interface",
            None => "no peer is named and no default route names an interface",
        };
        plan.finding(
            Finding::NoRouteDecided,
            format!(
                "{lead}; took {} as the {}. Usable: {}",
                p.link.name,
                p.how,
                v.usable_list(family)
            ),
            "set NCCLENV_PEER (or MASTER_ADDR) to the master's address, or NCCL_SOCKET_IFNAME yourself",
        );
    }
    Bound {
        ifname: p.link.name.clone(),
        gname: p
            .addr
            .and_then(|a| a.label.clone())
            .unwrap_or_else(|| p.link.name.clone()),
        addr: p.addr.map(|a| a.addr),
        how: p.how.clone(),
    }
}

/// Step "loopback fallback or refusal", no candidate at all: a multi-node job is refused; without `lo`, or
/// with `lo` down, a warning and nothing set (both `None`); otherwise `lo` with a `loopback-only` warning
/// (repairing an inherited value that counts).
fn loopback_fallback(
    snap: &Snapshot,
    cfg: &Config,
    v: &NetworkView,
    list: &InheritedList,
    family: Option<Family>,
    fix: &Fix,
    plan: &mut Plan,
) -> Option<Bound> {
    let net = v.net;
    let lo = net.links.iter().find(|l| l.loopback);
    let lo_down = lo.filter(|l| !l.up || !l.running);
    let lacks = lacks_text(cfg, v, family, lo_down);
    if is_multi(snap) {
        plan.refuse(
            Finding::NoInterfaceMultiNode.code(),
            format!(
                "{lacks}, and this is a {}-node job ({}): no interface can reach another node",
                snap.job.nnodes.unwrap_or(2),
                snap.job.source.as_deref().unwrap_or("launcher")
            ),
            "give the container a network the other nodes can connect back to: --network=host, a routable pod network, or a Multus interface on the nodes' network (not --network=none; Docker's default bridge hides the container behind NAT)",
        );
        return None;
    }
    let Some(lo) = lo else {
        plan.finding(
            Finding::NoInterface,
            format!("{lacks}; not even lo is present"),
            "give the container a network",
        );
        return None;
    };
    if lo_down.is_some() {
        plan.finding(
            Finding::NoInterface,
            lacks,
            "bring loopback up (ip link set lo up; Docker and Kubernetes do it for every container), or give the container a network",
        );
        return None;
    }
    let addr = net
        .addrs
        .iter()
        .filter(|a| a.index == lo.index && family.is_none_or(|f| a.family() == f))
        .min_by_key(|a| a.family())
        .map(|a| a.addr);
    let value = v.nccl_value(&lo.name);
    match list.counted() {
        Some((val, origin)) => fix.apply(
            plan,
            Repair {
                name: "NCCL_SOCKET_IFNAME",
                old: val,
                new: Some(value.clone()),
                reason: format!("inherited value {val:?} (from {origin}) matches no usable interface; only lo is left"),
                code: Finding::InheritedIfnameRepaired,
                message: format!("NCCL_SOCKET_IFNAME={val:?} (from {origin}) replaced by {value:?}: nothing it names is usable"),
                remedy: "remove NCCL_SOCKET_IFNAME from the image or config file".into(),
            },
        ),
        None => plan.set(
            "NCCL_SOCKET_IFNAME",
            value,
            "no usable interface but loopback: single-node only",
        ),
    }
    plan.finding(
        Finding::LoopbackOnly,
        format!("{lacks}; using lo: only a single-node job can work"),
        "for a multi-node job give the container a network (not --network=none); for one node this is fine",
    );
    Some(Bound {
        ifname: lo.name.clone(),
        gname: lo.name.clone(),
        addr,
        how: "loopback fallback".to_string(),
    })
}

/// What the container lacks, in words, when no candidate is left: the usable list, `lo` itself down
/// (`lo_down`), the interfaces only `NCCLENV_EXCLUDE` kept out (the refusal must name the user's own list),
/// or a look of `--network=none`.
fn lacks_text(
    cfg: &Config,
    v: &NetworkView,
    family: Option<Family>,
    lo_down: Option<&Link>,
) -> String {
    let net = v.net;
    let excluded: Vec<String> = NetworkView::new(net, &[])
        .candidates(family)
        .iter()
        .map(|(l, _)| l.name.clone())
        .collect();
    format!(
        "this container has no usable network interface but lo (usable: {}){}{}",
        v.usable_list(family),
        match lo_down {
            Some(l) => format!(
                "; and {} itself is down (state {}), so not even loopback works",
                l.name, l.oper_state
            ),
            None => String::new(),
        },
        if !excluded.is_empty() {
            format!(
                "; NCCLENV_EXCLUDE={} removed {}",
                cfg.exclude.join(","),
                excluded.join(", ")
            )
        } else if net.links.iter().all(|l| l.loopback) {
            "; it looks like --network=none".to_string()
        } else {
            String::new()
        }
    )
}

/// `peer-is-loopback`: the master `p` resolves to a loopback address here in a multi-node job. On node rank 0
/// (the master) an info: it reaches itself there, the other nodes need a routable address (`own`, the address
/// chosen here, is named). Elsewhere a warning that says what is true: a node that is not the master would
/// connect to itself; a host name that resolves to loopback is typically the master's own name in its
/// `/etc/hosts`.
fn peer_loopback(snap: &Snapshot, p: &Peer, own: Option<IpAddr>, plan: &mut Plan) {
    let lo: Vec<String> = p
        .addrs
        .iter()
        .filter(|a| a.is_loopback())
        .map(|a| a.to_string())
        .collect();
    if lo.is_empty() {
        return;
    }
    let nnodes = snap.job.nnodes.unwrap_or(2);
    let literal = p.host.parse::<IpAddr>().is_ok();
    let here = if literal {
        format!(
            "the master {} (from {}) is a loopback address",
            p.host, p.source
        )
    } else {
        format!(
            "the master's name {} (from {}) resolves to a loopback address here ({})",
            p.host,
            p.source,
            lo.join(", ")
        )
    };
    let reach = own.map_or_else(
        || "its routable address".to_string(),
        |a| format!("its routable address ({a})"),
    );
    // This node is the master: node rank 0, or it owns one of the (other) addresses the name resolves to.
    let owned = snap.net.as_ref().ok().and_then(|n| {
        n.addrs
            .iter()
            .find(|a| !a.addr.is_loopback() && p.addrs.contains(&a.addr))
            .map(|a| a.addr)
    });
    let master_here = match (snap.job.node_rank, owned) {
        (Some(0), _) => Some(format!(
            "node rank 0 ({})",
            snap.job
                .node_rank_source
                .as_deref()
                .unwrap_or("the launcher")
        )),
        (_, Some(a)) => Some(format!("the owner of the master's other address {a}")),
        _ => None,
    };
    if let Some(who) = master_here {
        plan.finding_as(
            Finding::PeerIsLoopback,
            crate::plan::Severity::Info,
            format!(
                "{here}; this node is {who}, the master, and reaches itself there; the other nodes of this \
                 {nnodes}-node job must be given {reach}"
            ),
            format!("nothing to do here; give the other nodes {reach} or a name that resolves to it"),
        );
        return;
    }
    plan.finding(
        Finding::PeerIsLoopback,
        if literal {
            format!(
                "{here} in a {nnodes}-node job: a node that is not the master connects to itself there, not to \
                 the master"
            )
        } else {
            format!(
                "{here} in a {nnodes}-node job: if this node is the master (its own name in /etc/hosts), the \
                 other nodes must resolve the name to {reach}; if it is not, it connects to itself, not to the \
                 master"
            )
        },
        "give the launcher the master's routable address or a host name that resolves to it on every node",
    );
}

/// Step "family export": `NCCL_SOCKET_FAMILY` matching the bound address. An inherited family no candidate
/// has is repaired ([`InheritedFamily::repair`]); an unset one is set; one that counts is left alone.
fn export_family(family: &InheritedFamily, bound: &Bound, fix: &Fix, plan: &mut Plan) {
    let ifname = &bound.ifname;
    if let (Some((val, origin)), Some(a)) = (&family.repair, bound.addr) {
        let new = Family::of(&a).nccl_name();
        fix.apply(
            plan,
            Repair {
                name: "NCCL_SOCKET_FAMILY",
                old: val,
                new: Some(new.to_string()),
                reason: format!(
                    "inherited {val} (from {origin}) matches no usable address; {ifname}'s address {a}"
                ),
                code: Finding::InheritedFamilyRepaired,
                message: format!(
                    "NCCL_SOCKET_FAMILY={val} (from {origin}) replaced by {new}: no interface has a usable {} address, so NCCL would bootstrap on a link-local one or find none",
                    if val == "AF_INET6" { "IPv6" } else { "IPv4" }
                ),
                remedy: format!(
                    "remove NCCL_SOCKET_FAMILY from the image or config file, or give the interfaces {} addresses",
                    if val == "AF_INET6" { "global IPv6" } else { "IPv4" }
                ),
            },
        );
    } else if family.value.is_none() {
        if let Some(a) = bound.addr {
            plan.set(
                "NCCL_SOCKET_FAMILY",
                Family::of(&a).nccl_name(),
                format!(
                    "{ifname}'s address {a} is {}",
                    if a.is_ipv4() { "IPv4" } else { "IPv6" }
                ),
            );
        }
    }
}

/// Step "companions": the frameworks' and launchers' own interface variables (exact names only), `POD_IP`,
/// and the addresses the launcher declares or advertises, checked against the bound interface.
fn companions(v: &NetworkView, snap: &Snapshot, bound: &Bound, fix: &Fix, plan: &mut Plan) {
    let (ifname, addr) = (bound.ifname.as_str(), bound.addr);
    for var in ["GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"] {
        companion(v, snap, var, bound, fix, plan);
    }
    other_launchers(v, snap, bound, fix, plan);
    pod_ip(snap, ifname, addr, is_multi(snap), fix, plan);
    declared_differs(v, snap, ifname, addr, plan);
    if let (false, Some(a)) = (snap.job.ips.is_empty(), addr) {
        let ips: Vec<IpAddr> = snap.job.ips.iter().filter_map(|h| h.parse().ok()).collect();
        if ips.len() == snap.job.ips.len() && !ips.contains(&a) {
            plan.finding(
                Finding::AdvertisedAddressDiffers,
                format!(
                    "--ips {} does not contain {a}, the address NCCL binds on {ifname}: the launcher will advertise another address",
                    snap.job.ips.join(",")
                ),
                "list this node's address of the chosen interface in --ips",
            );
        }
    }
}

/// Warnings about the network's layout around the bound interface: overlapping prefixes, a container bridge
/// behind NAT (multi-node jobs), proxies in the way of the rendezvous.
fn layout_warnings(v: &NetworkView, snap: &Snapshot, bound: &Bound, plan: &mut Plan) {
    overlapping_prefixes(v, plan);
    dad_findings(v, plan);
    if is_multi(snap) {
        container_bridge_nat(v, snap, &bound.ifname, bound.addr, plan);
    }
    proxy_warning(snap, plan);
}

/// Warnings for an inherited `NCCL_SOCKET_IFNAME` that works but is risky for a job not known to be
/// single-node: a match that is loopback, link-local only, or a container bridge; an entry that
/// prefix-matches several interfaces (NET/Socket stripes over all of them, src/transport/net_socket.cc).
fn risk_warnings(
    v: &NetworkView,
    val: &str,
    origin: &Origin,
    found: &[Found],
    dropped: &[&Found],
    fam: Family,
    plan: &mut Plan,
) {
    for f in found {
        if let Some(why) = risky_match(v, f) {
            plan.finding(
                Finding::InheritedIfnameRisky,
                format!(
                    "NCCL_SOCKET_IFNAME={val:?} (from {origin}) selects {} ({}), which {why}: another node cannot reach it",
                    f.name, f.addr
                ),
                "set NCCL_SOCKET_IFNAME to the interface that routes to the other nodes, or unset it and let ncclenv choose",
            );
        }
    }
    prefix_warnings(val, origin, found, dropped, fam, plan);
}

/// Why another node cannot reach NCCL on the match `f`, when it cannot: loopback, no carrier, link-local only
/// (unless the peer is on that link), a container bridge.
fn risky_match(v: &NetworkView, f: &Found) -> Option<&'static str> {
    if f.loopback {
        Some("is the loopback interface")
    } else if !f.running {
        Some("has no carrier (NCCL before 2.28 still stripes NET/Socket traffic over it)")
    } else if is_link_local_ip(&f.addr) && !v.link_local_ok(f.index, &f.addr) {
        Some("has only a link-local address")
    } else if v.link(f.index).is_some_and(|l| v.container_bridge(l)) {
        Some("is a container or virtualisation bridge")
    } else {
        None
    }
}

/// `inherited-ifname-prefix`: each entry of a prefix list (neither `^` nor `=`) that matches several of the
/// interfaces NCCL keeps (`found`), naming those the exported family leaves out (`dropped`).
fn prefix_warnings(
    val: &str,
    origin: &Origin,
    found: &[Found],
    dropped: &[&Found],
    fam: Family,
    plan: &mut Plan,
) {
    let list = nccl_rules::parse_if_list(val);
    if list.exact || list.exclude {
        return;
    }
    for e in &list.entries {
        let hits: Vec<&Found> = found
            .iter()
            .filter(|f| list.entry_matches(e, &f.name))
            .collect();
        let gone: Vec<String> = dropped
            .iter()
            .filter(|f| list.entry_matches(e, &f.name))
            .map(|f| {
                format!(
                    "{} ({} {} only; NCCL_SOCKET_FAMILY={} leaves it out)",
                    f.name,
                    if is_link_local_ip(&f.addr) {
                        "link-local"
                    } else {
                        "address"
                    },
                    f.addr,
                    fam.nccl_name()
                )
            })
            .collect();
        if hits.len() > 1 {
            let extra: Vec<String> = hits
                .iter()
                .filter(|f| f.name != e.prefix)
                .map(|f| {
                    if is_link_local_ip(&f.addr) {
                        format!("{} (link-local {} only)", f.name, f.addr)
                    } else {
                        format!("{} ({})", f.name, f.addr)
                    }
                })
                .collect();
            plan.finding(
                Finding::InheritedIfnamePrefix,
                format!(
                    "NCCL_SOCKET_IFNAME={val:?} (from {origin}): {:?} is a prefix and also matches {}; NET/Socket would stripe over all of them{}",
                    e.prefix,
                    extra.join(", "),
                    if gone.is_empty() { String::new() } else { format!(" (it also names {})", gone.join(", ")) }
                ),
                format!("write ={} to match that interface exactly", e.prefix),
            );
        }
    }
}

/// " (NCCL does not trim: …)" when a list value holds whitespace (`parseStringList`, src/misc/utils.cc).
fn whitespace_hint(val: &str) -> String {
    if val.chars().any(char::is_whitespace) {
        format!("; the value holds whitespace, which NCCL does not trim ({val:?})")
    } else {
        String::new()
    }
}

/// Entries of a kept `NCCL_SOCKET_IFNAME` (one entry at least matches here) that can match no interface on
/// any node: those holding whitespace, which NCCL does not trim (`"eth0, eth1"`, `parseStringList` in
/// src/misc/utils.cc) and no Linux interface name contains (`dev_valid_name`, net/core/dev.c). An entry
/// that is a plain name matching nothing here is not reported: a list such as `enp179s0f0,enp1s0` names
/// every node's NIC where the nodes' names differ (the form NCCL's maintainers recommend, and what a runner
/// that copies the environment to every node carries), so the other entries may be another node's.
fn unmatched_entries(v: &NetworkView, val: &str, origin: &Origin, plan: &mut Plan) {
    let list = nccl_rules::parse_if_list(val);
    if list.exclude {
        return;
    }
    let dead: Vec<String> = list
        .entries
        .iter()
        .filter(|e| e.prefix.chars().any(char::is_whitespace))
        .filter(|e| !v.net.links.iter().any(|l| list.entry_matches(e, &l.name)))
        .map(|e| format!("{:?}", e.prefix))
        .collect();
    if !dead.is_empty() {
        plan.finding(
            Finding::InheritedIfnameEntryUnmatched,
            format!(
                "NCCL_SOCKET_IFNAME={val:?} (from {origin}): the entries {} can match no interface on any node{}",
                dead.join(", "),
                whitespace_hint(val)
            ),
            "remove the spaces after the commas",
        );
    }
}

/// One replacement of an inherited value (see [`Fix`]).
struct Repair<'a> {
    /// The variable.
    name: &'a str,
    /// Its inherited value.
    old: &'a str,
    /// The new value; `None` unsets the variable.
    new: Option<String>,
    /// The change's reason (the `Changes` line).
    reason: String,
    /// The finding's code.
    code: Finding,
    /// The finding's message.
    message: String,
    /// What the user can do.
    remedy: String,
}

/// Repairs of inherited values. Under a vendor network profile ncclenv repairs nothing (F18: the vendor's
/// variables and the user's are kept, warn only): the finding is then `vendor-value-kept`, naming what
/// ncclenv would have done.
struct Fix {
    vendor: bool,
}

impl Fix {
    fn apply(&self, plan: &mut Plan, r: Repair) {
        if self.vendor {
            plan.finding(
                Finding::VendorValueKept,
                format!(
                    "{}; a vendor network profile is present, so ncclenv keeps {}={:?}{}",
                    r.message,
                    r.name,
                    r.old,
                    match &r.new {
                        Some(n) => format!(" (it would set {n:?})"),
                        None => " (it would unset it)".to_string(),
                    }
                ),
                r.remedy,
            );
            return;
        }
        match &r.new {
            Some(n) => plan.repair(r.name, r.old, n.clone(), r.reason),
            None => {
                plan.unset(r.name, r.reason);
                if let Some(c) = plan.changes.last_mut() {
                    c.replaced = Some(r.old.to_string());
                }
            }
        }
        plan.finding(r.code, r.message, r.remedy);
    }
}

/// `GLOO_SOCKET_IFNAME` / `TP_SOCKET_IFNAME`: exact interface names only (PyTorch: a comma list; Paddle: one
/// name), each resolved as Gloo resolves it: the first `getifaddrs` entry whose `ifa_name` equals the name
/// (`strcmp`, so an IPv4 address label is a name of its own) and that has an IPv4 or IPv6 address, with no
/// check of its flags, scope or reachability (`lookupAddrForIface`, pytorch/gloo
/// gloo/transport/tcp/device.cc). Set when unset, to the name of the bound address ([`Bound::gname`]);
/// repaired when it holds NCCL syntax, a name with no address (Gloo fails with "Unable to find address
/// for: …"), or, in a multi-node job, a name whose first address is loopback or link-local (not on a
/// link-local master's link): the same grounds as NCCL's (`fatal_reason`; #26 item 4). Warned when it
/// names another interface than NCCL's.
fn companion(
    v: &NetworkView,
    snap: &Snapshot,
    var: &str,
    bound: &Bound,
    fix: &Fix,
    plan: &mut Plan,
) {
    let gname = bound.gname.as_str();
    let Some(val) = snap.env.get(var) else {
        plan.set(
            var,
            gname,
            format!("the same interface as NCCL ({var} takes exact names)"),
        );
        return;
    };
    let names: Vec<&str> = val.split(',').collect();
    if let Some(why) = names
        .iter()
        .find_map(|n| gloo_name_fails(v, n, is_multi(snap)).map(|w| (n, w)))
        .map(|(_, w)| w.replace("{var}", var))
    {
        fix.apply(
            plan,
            Repair {
                name: var,
                old: val,
                new: Some(gname.to_string()),
                reason: format!("inherited {var}={val:?} would fail: {why}"),
                code: Finding::GlooIfnameRepaired,
                message: format!("{var}={val:?} replaced by {gname:?}: {why}"),
                remedy: format!("set {var} to one plain interface name, e.g. {gname}"),
            },
        );
    } else if !names.contains(&gname) && !names.contains(&bound.ifname.as_str()) {
        plan.finding(
            Finding::CompanionDiffers,
            format!("{var}={val} names another interface than NCCL's {gname}"),
            format!("set {var}={gname} so that every library of the job uses one interface"),
        );
    }
}

/// Why Gloo fails, or binds where another node cannot connect, with the interface name `n` (see
/// [`companion`]; `{var}` stands for the variable's name). `None` when it works.
fn gloo_name_fails(v: &NetworkView, n: &str, multi: bool) -> Option<String> {
    let entries = nccl_rules::ifaddrs(v.net);
    let first = entries.iter().find(|e| e.name == n);
    let syntax = n.is_empty() || n.starts_with('^') || n.starts_with('=');
    match first {
        _ if syntax => Some(format!(
            "{{var}} takes exact interface names, not NCCL's list syntax ({n:?}); Gloo would fail with \"Unable to find address for\""
        )),
        None if n.contains(':') => Some(format!(
            "{{var}} takes exact interface names, not NCCL's list syntax ({n:?}), and no address is labelled so; Gloo would fail with \"Unable to find address for\""
        )),
        None if v.link_by_name(n).is_some() => Some(format!(
            "{n:?} has no IPv4 or IPv6 address here; Gloo would fail with \"Unable to find address for\""
        )),
        None => Some(format!(
            "no interface named {n:?} exists here; Gloo would fail with \"Unable to find address for\""
        )),
        Some(e)
            if multi
                && (e.addr.is_loopback()
                    || (is_link_local_ip(&e.addr) && !v.link_local_ok(e.index, &e.addr))) =>
        {
            Some(format!(
                "Gloo binds the first address of {n:?}, {}, which another node cannot reach (only {})",
                e.addr,
                if e.addr.is_loopback() { "loopback" } else { "link-local" }
            ))
        }
        Some(_) => None,
    }
}

/// The other launchers' interface variables, each in its own syntax and by its own library's rule (F26;
/// #26 item 4). An inherited value naming an interface that library cannot use (missing, without an
/// address, or link-local only in a multi-node job: [`gloo_name_fails`] for Horovod's Gloo,
/// [`netdev_unusable`] for Open MPI and UCX) is repaired (`launcher-ifname-repaired`), one that selects
/// another interface than NCCL's is warned (`companion-differs`); an unset one is set only for the launcher
/// that reads it (its command is the job's):
///
/// * `HOROVOD_GLOO_IFACE`: one exact name (horovod/common/utils/env_parser.cc `ParseGlooIface`;
///   horovodrun sets it to the first of its NICs, horovod/runner/gloo_run.py). Set for `horovodrun`.
/// * `OMPI_MCA_btl_tcp_if_include`, `OMPI_MCA_oob_tcp_if_include`: comma-separated exact names or CIDR
///   networks (Open MPI's `btl_tcp_if_include`/`oob_tcp_if_include` MCA parameters). Set for `mpirun`. Open
///   MPI forwards `OMPI_MCA_*` to every node: the name must be the same there.
/// * `UCX_NET_DEVICES`: comma-separated devices: netdev names, RDMA `device:port` entries, or `all`. Only
///   evaluated (never set: it would take UCX off RDMA); a value with RDMA entries is warned, not repaired.
fn other_launchers(v: &NetworkView, snap: &Snapshot, bound: &Bound, fix: &Fix, plan: &mut Plan) {
    let addr = bound.addr;
    let c = Companion {
        v,
        ifname: &bound.ifname,
        gname: &bound.gname,
        multi: is_multi(snap),
        fix,
    };
    let launcher = snap.job.launcher;
    horovod_iface(&c, snap.env.get("HOROVOD_GLOO_IFACE"), launcher, plan);
    let ompi = OmpiTarget::of(&c, snap, addr);
    for var in ["OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include"] {
        ompi_if_include(&c, var, snap.env.get(var), &ompi, addr, plan);
    }
    if let Some(val) = snap.env.get("UCX_NET_DEVICES") {
        ucx_net_devices(&c, val, plan);
    }
}

/// What the launcher variables' checks share: the network, the bound interface and how to repair.
struct Companion<'a, 'n> {
    v: &'a NetworkView<'n>,
    ifname: &'a str,
    /// The bound address's `getifaddrs` name ([`Bound::gname`]), for the variables Gloo resolves.
    gname: &'a str,
    /// The job may span nodes ([`is_multi`]): a loopback or link-local-only interface is a failure.
    multi: bool,
    fix: &'a Fix,
}

impl Companion<'_, '_> {
    /// `companion-differs`: `var` selects another interface than NCCL's.
    fn differs(&self, plan: &mut Plan, var: &str, val: &str) {
        let ifname = self.ifname;
        plan.finding(
            Finding::CompanionDiffers,
            format!("{var}={val} selects another interface than NCCL's {ifname}"),
            format!("set {var} to {ifname} so that every library of the job uses one interface"),
        )
    }
    /// `launcher-ifname-repaired`: `var` would fail (`why`); replaced by the bound interface ([`Fix`]).
    fn repair(&self, plan: &mut Plan, var: &'static str, val: &str, why: String) {
        self.repair_to(plan, var, val, why, self.ifname)
    }
    /// [`Companion::repair`] with `ifname` as the new value (a CIDR network for Open MPI).
    fn repair_to(&self, plan: &mut Plan, var: &'static str, val: &str, why: String, ifname: &str) {
        self.fix.apply(
            plan,
            Repair {
                name: var,
                old: val,
                new: Some(ifname.to_string()),
                reason: format!("inherited {var}={val:?} would fail: {why}"),
                code: Finding::LauncherIfnameRepaired,
                message: format!("{var}={val:?} replaced by {ifname:?}: {why}"),
                remedy: format!("set {var} to an interface that exists here, e.g. {ifname}"),
            },
        )
    }
}

/// `HOROVOD_GLOO_IFACE`: one exact interface name, which Horovod hands to Gloo unchanged (`attr.iface` of
/// `gloo::transport::tcp::CreateDevice`, horovod/common/gloo/gloo_context.cc `GlooContext::Initialize`), so
/// Gloo's own rule judges it ([`gloo_name_fails`]; #26 item 4: a name whose first address is link-local in a
/// multi-node job is repaired like `GLOO_SOCKET_IFNAME`). A list is repaired too (Horovod takes one name).
/// Repaired to the bound address's `getifaddrs` name ([`Bound::gname`]); another interface is warned; unset,
/// it is set for `horovodrun`.
fn horovod_iface(c: &Companion, val: Option<&String>, launcher: Option<Launcher>, plan: &mut Plan) {
    const VAR: &str = "HOROVOD_GLOO_IFACE";
    match val {
        Some(val) => {
            let fails: Vec<String> = val
                .split(',')
                .filter_map(|n| gloo_name_fails(c.v, n, c.multi))
                .map(|w| w.replace("{var}", VAR))
                .collect();
            if val.contains(',') || !fails.is_empty() {
                let why = match (val.contains(','), fails.is_empty()) {
                    (true, true) => format!("{VAR} takes one interface name, not a list"),
                    (true, false) => format!(
                        "{VAR} takes one interface name, not a list (and {})",
                        fails.join("; ")
                    ),
                    _ => fails.join("; "),
                };
                c.repair_to(plan, VAR, val, why, c.gname);
            } else if val != c.ifname && val != c.gname {
                c.differs(plan, VAR, val);
            }
        }
        None if launcher == Some(Launcher::Horovod) => plan.set(
            VAR,
            c.gname,
            "the same interface as NCCL, for horovodrun's Gloo (one exact name)",
        ),
        None => {}
    }
}

/// What ncclenv gives Open MPI's `*_tcp_if_include` and for which process.
struct OmpiTarget {
    /// The value: the bound interface's network as a CIDR (`10.79.0.0/24`) when the job may span nodes
    /// (another node's NIC on that network may have another name, and Open MPI forwards `OMPI_MCA_*` to every
    /// node; `*_if_include` takes CIDR networks, opal/mca/if `opal_ifmatches`), else the interface's name. A
    /// host address (/32, /128) or an interface without address gives the name.
    value: String,
    /// The command is `mpirun`: both variables are set (its `orted` daemons use `oob`, the ranks `btl`).
    mpirun: bool,
    /// The command is an Open MPI rank (`OMPI_COMM_WORLD_SIZE` set): `btl` only, read by the rank's
    /// `MPI_Init`.
    rank: bool,
}

impl OmpiTarget {
    fn of(c: &Companion, snap: &Snapshot, addr: Option<IpAddr>) -> OmpiTarget {
        let cidr = addr
            .filter(|_| !snap.job.is_single_node())
            .and_then(|a| {
                c.v.net
                    .addrs
                    .iter()
                    .find(|x| x.addr == a)
                    .map(|x| (a, x.prefix_len))
            })
            .filter(|(a, len)| *len < if a.is_ipv4() { 32 } else { 128 })
            .map(|(a, len)| format!("{}/{len}", crate::snapshot::network_of(&a, len)));
        OmpiTarget {
            value: cidr.unwrap_or_else(|| c.ifname.to_string()),
            mpirun: snap.job.launcher == Some(Launcher::Mpi),
            rank: snap.env.contains_key("OMPI_COMM_WORLD_SIZE"),
        }
    }
}

/// Open MPI's `OMPI_MCA_{btl,oob}_tcp_if_include` (`var`): exact names or CIDR networks (no `^` exclusions:
/// those are `*_if_exclude`'s, and `^eth0` here is a name that does not exist). An empty value, a name
/// Open MPI cannot use ([`netdev_unusable`]: missing, without an address, or link-local only in a
/// multi-node job) or a network holding no address here is repaired; one that does not select the bound
/// interface (by name or by its address `addr`) is warned; unset, both are set for `mpirun` and
/// `btl_tcp_if_include` for an Open MPI rank ([`OmpiTarget`]).
fn ompi_if_include(
    c: &Companion,
    var: &'static str,
    val: Option<&String>,
    t: &OmpiTarget,
    addr: Option<IpAddr>,
    plan: &mut Plan,
) {
    let Some(val) = val else {
        let how = if t.value == c.ifname {
            c.ifname.to_string()
        } else {
            format!("{}'s network", c.ifname)
        };
        if t.mpirun {
            plan.set(
                var,
                t.value.clone(),
                format!("the same interface as NCCL ({how}), for Open MPI's TCP transport (Open MPI forwards it to every node)"),
            );
        } else if t.rank && var == "OMPI_MCA_btl_tcp_if_include" {
            plan.set(
                var,
                t.value.clone(),
                format!("the same interface as NCCL ({how}), for this Open MPI rank's TCP transport (read by MPI_Init)"),
            );
        }
        return;
    };
    let entries: Vec<&str> = val.split(',').filter(|e| !e.is_empty()).collect();
    let mut bad: Vec<String> = Vec::new();
    let mut selects = false;
    for e in &entries {
        match e.split_once('/') {
            Some((net, len)) => match (net.parse::<IpAddr>(), len.parse::<u8>()) {
                (Ok(n), Ok(l)) => {
                    if !c
                        .v
                        .net
                        .addrs
                        .iter()
                        .any(|a| prefix_contains(&n, l, &a.addr))
                    {
                        bad.push(format!("{e} (no address here is in it)"));
                    }
                    selects |= addr.is_some_and(|a| prefix_contains(&n, l, &a));
                }
                _ => bad.push(format!("{e} (not a CIDR network)")),
            },
            None => {
                bad.extend(netdev_unusable(c.v, e, c.multi));
                selects |= *e == c.ifname;
            }
        }
    }
    if entries.is_empty() || !bad.is_empty() {
        let why = if entries.is_empty() {
            "it names nothing".to_string()
        } else {
            format!("Open MPI cannot use {}", bad.join(", "))
        };
        c.repair_to(plan, var, val, why, &t.value);
    } else if !selects {
        c.differs(plan, var, val);
    }
}

/// Why the netdev `n`, named in Open MPI's `*_tcp_if_include` or in `UCX_NET_DEVICES`, gives that library's
/// TCP transport no address another node can use, as `"n (why)"`; `None` when it works. No such link, or
/// no address on it (Open MPI lists only interfaces that hold an address, opal/mca/if; UCX's TCP transport
/// binds the netdev's address, uct/tcp): a failure on any job, like a missing name. In a multi-node job also
/// a link whose addresses are all loopback or link-local (the Multus network whose IPAM has not delivered:
/// `net1` UP with only fe80, #26 item 4): the grounds on which NCCL's value is repaired (`fatal_reason`),
/// IPv4 link-local on the master's own link excepted ([`NetworkView::link_local_ok`]).
fn netdev_unusable(v: &NetworkView, n: &str, multi: bool) -> Option<String> {
    let Some(link) = v.link_by_name(n) else {
        return Some(format!("{n} (no such interface)"));
    };
    let addrs: Vec<&IpAddr> = v
        .net
        .addrs
        .iter()
        .filter(|a| a.index == link.index)
        .map(|a| &a.addr)
        .collect();
    let reachable =
        |a: &IpAddr| !a.is_loopback() && (!is_link_local_ip(a) || v.link_local_ok(link.index, a));
    match addrs.first() {
        None => Some(format!("{n} (it has no address)")),
        Some(_) if multi && !addrs.iter().any(|a| reachable(a)) => Some(format!(
            "{n} (only loopback or link-local addresses, which another node cannot reach)"
        )),
        Some(_) => None,
    }
}

/// `UCX_NET_DEVICES`: netdev names and RDMA `device:port` entries, or `all`. Only judged, never set. Netdevs
/// that UCX's TCP transport cannot use ([`netdev_unusable`]: missing, without an address, or link-local only
/// in a multi-node job) are repaired when the value has no RDMA entry, else warned; a value that names
/// netdevs but not the bound interface is warned.
fn ucx_net_devices(c: &Companion, val: &str, plan: &mut Plan) {
    let entries: Vec<&str> = val.split(',').filter(|e| !e.is_empty()).collect();
    if entries.contains(&"all") {
        return;
    }
    let (rdma, netdevs): (Vec<&str>, Vec<&str>) = entries.iter().partition(|e| e.contains(':'));
    let missing: Vec<String> = netdevs
        .iter()
        .filter_map(|n| netdev_unusable(c.v, n, c.multi))
        .collect();
    if !missing.is_empty() && rdma.is_empty() {
        c.repair(
            plan,
            "UCX_NET_DEVICES",
            val,
            format!("UCX's TCP transport cannot use {}", missing.join(", ")),
        );
    } else if !missing.is_empty() {
        plan.finding(
            Finding::CompanionDiffers,
            format!(
                "UCX_NET_DEVICES={val} names {}, which UCX's TCP transport cannot use (its RDMA devices are kept)",
                missing.join(", ")
            ),
            format!("remove those names or use {}", c.ifname),
        );
    } else if rdma.is_empty() && !netdevs.contains(&c.ifname) {
        c.differs(plan, "UCX_NET_DEVICES", val);
    }
}

/// `POD_IP`, Paddle's node address (IPv4 only): set when unset; a loopback value in a multi-node job is a
/// certain failure (Paddle advertises it and the other nodes connect to their own loopback): repaired to the
/// chosen address, or unset when that is not IPv4 (`pod-ip-repaired`); any other difference is warned.
fn pod_ip(
    snap: &Snapshot,
    ifname: &str,
    addr: Option<IpAddr>,
    multi: bool,
    fix: &Fix,
    plan: &mut Plan,
) {
    let inherited = snap.env.get("POD_IP");
    match (inherited, addr) {
        (None, Some(a @ IpAddr::V4(_))) if !a.is_loopback() => plan.set(
            "POD_IP",
            a.to_string(),
            format!("Paddle advertises POD_IP as this node's address: {ifname}'s address"),
        ),
        (Some(p), _) if multi && p.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()) => {
            let new = addr.filter(|a| a.is_ipv4() && !a.is_loopback());
            let nodes = snap.job.nnodes.unwrap_or(2);
            fix.apply(
                plan,
                Repair {
                    name: "POD_IP",
                    old: p,
                    new: new.map(|a| a.to_string()),
                    reason: format!(
                        "inherited POD_IP={p} is a loopback address in a {nodes}-node job: Paddle would advertise it to the other nodes"
                    ),
                    code: Finding::PodIpRepaired,
                    message: format!(
                        "POD_IP={p} is a loopback address, which Paddle advertises as this node's address in a {nodes}-node job: the other nodes would connect to themselves; {}",
                        match new {
                            Some(a) => format!("replaced by {ifname}'s address {a}"),
                            None => "unset (the chosen address is not IPv4)".to_string(),
                        }
                    ),
                    remedy: "do not set POD_IP to a loopback address (Kubernetes: status.podIP; under host networking, give the host name its real address in /etc/hosts)".into(),
                },
            );
        }
        (Some(p), Some(a)) if p.parse::<IpAddr>().ok() != Some(a) => plan.finding(
            Finding::AdvertisedAddressDiffers,
            format!("POD_IP={p} is what Paddle advertises, but NCCL binds {a} on {ifname}"),
            "unset POD_IP or make it the address of the chosen interface",
        ),
        _ => {}
    }
}

/// The address this node declares (`VLLM_HOST_IP`, Ray's `--node-ip-address`, torchrun's `--local-addr`;
/// `POD_IP` is [`pod_ip`]'s) disagrees with the interface chosen, or belongs to no interface here:
/// `advertised-address-differs`.
fn declared_differs(
    v: &NetworkView,
    snap: &Snapshot,
    ifname: &str,
    addr: Option<IpAddr>,
    plan: &mut Plan,
) {
    let (Some(text), Some(src)) = (&snap.job.self_addr, &snap.job.self_addr_source) else {
        return;
    };
    if src == "POD_IP" {
        return;
    }
    let Ok(ip) = text.parse::<IpAddr>() else {
        return;
    };
    let owner = v
        .net
        .addrs
        .iter()
        .find(|a| a.addr == ip)
        .and_then(|a| v.link(a.index));
    let bound = addr.map_or(String::new(), |a| format!(" {a}"));
    match owner {
        None => plan.finding(
            Finding::AdvertisedAddressDiffers,
            format!("{src}={ip} names this node's address, but no interface here has it: the launcher will advertise an address this node does not own; NCCL binds{bound} on {ifname}"),
            format!("set {src} to this node's address on {ifname}, or unset it"),
        ),
        Some(l) if l.name != ifname => plan.finding(
            Finding::AdvertisedAddressDiffers,
            format!("{src}={ip} names this node's address, which is on {}, but NCCL binds{bound} on {ifname}: the job would use two networks", l.name),
            format!("set {src} to this node's address on {ifname}, or make the route to the master leave through {}", l.name),
        ),
        _ => {}
    }
}

/// A multi-node job whose address sits on a container bridge behind NAT cannot be connected back to by the
/// other nodes (they would need this container's address, which only its host can reach): warn
/// `container-bridge-nat`. Seen from inside the container (the NAT itself lives in the host's namespace):
/// the chosen interface is a veth, its IPv4 address lies in a container engine's default bridge pool
/// (`crate::snapshot::NAT_BRIDGE_POOLS`), and the route to the master leaves through it via a gateway (the master is on
/// another host). A heuristic: a warning, never a refusal.
fn container_bridge_nat(
    v: &NetworkView,
    snap: &Snapshot,
    ifname: &str,
    addr: Option<IpAddr>,
    plan: &mut Plan,
) {
    let Some(IpAddr::V4(a)) = addr else { return };
    let Some(link) = v.link_by_name(ifname) else {
        return;
    };
    if link.kind.as_deref() != Some("veth") {
        return;
    }
    let in_pool = crate::snapshot::in_nat_bridge_pool(&IpAddr::V4(a));
    let Some(peer) = snap.peer.as_ref() else {
        return;
    };
    let via = v.net.peer_routes.iter().find_map(|l| {
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
        "run the container with --network=host, give the pod a routable network, or attach a Multus interface on the nodes' network",
    );
}

/// Two candidate interfaces whose connected prefixes overlap: the kernel sources traffic from the first
/// matching route whatever NCCL binds. Judged from the connected routes the kernel really has
/// ([`connected_prefix`]): an address that adds none (`flannel.1`'s 10.244.0.0/32, `noprefixroute`) overlaps
/// nothing (#26, item 6).
fn overlapping_prefixes(v: &NetworkView, plan: &mut Plan) {
    let c: Vec<(&Link, &Addr)> = v
        .candidates(None)
        .into_iter()
        .filter(|(_, a)| connected_prefix(v.net, a))
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
fn dad_findings(v: &NetworkView, plan: &mut Plan) {
    for a in &v.net.addrs {
        let name = v.link(a.index).map_or("?", |l| l.name.as_str());
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
        .filter(|k| snap.env.get(*k).is_some_and(|v| !v.is_empty()))
        .collect();
    if set.is_empty() {
        return;
    }
    let no_proxy: Vec<String> = ["NO_PROXY", "no_proxy"]
        .iter()
        .filter_map(|k| snap.env.get(*k))
        .flat_map(|v| v.split(',').map(|s| s.trim().to_string()))
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

/// Names of every candidate interface (RUNNING, not loopback, not excluded, with a usable address), in
/// ranking order: the fallbacks the check's repair may try.
pub fn candidate_names(snap: &Snapshot, cfg: &Config) -> Vec<String> {
    let Ok(net) = &snap.net else {
        return Vec::new();
    };
    let v = NetworkView::new(net, &cfg.exclude);
    let mut c = v.candidates(None);
    c.sort_by_key(|(l, a)| rank(l, a));
    c.into_iter()
        .filter(|(l, _)| !l.name_escaped)
        .map(|(l, _)| l.name.clone())
        .collect()
}

/// The interface `plan` names (its choice, or a value it sets for `NCCL_SOCKET_IFNAME`,
/// `GLOO_SOCKET_IFNAME` or `TP_SOCKET_IFNAME`) when its name is not UTF-8 ([`Link::name_escaped`]): ncclenv
/// cannot write the real name, so the caller fails open. `None` when every name it would write is real.
pub fn unwritable_choice(snap: &Snapshot, plan: &Plan) -> Option<String> {
    let Ok(net) = &snap.net else { return None };
    let escaped: Vec<&str> = net
        .links
        .iter()
        .filter(|l| l.name_escaped)
        .map(|l| l.name.as_str())
        .collect();
    if escaped.is_empty() {
        return None;
    }
    let set = [
        "NCCL_SOCKET_IFNAME",
        "GLOO_SOCKET_IFNAME",
        "TP_SOCKET_IFNAME",
    ]
    .iter()
    .filter_map(|v| plan.value_of(v))
    .map(|v| v.strip_prefix('=').unwrap_or(v));
    plan.choice
        .iter()
        .map(|c| c.ifname.as_str())
        .chain(set)
        .find(|n| escaped.contains(n))
        .map(str::to_string)
}

/// What NCCL alone (without ncclenv) would choose with the inherited environment, for the report: the
/// bootstrap interface and address, or why it fails, and the NCCL version modelled
/// ([`nccl_rules::nccl_alone`]).
pub fn nccl_alone(snap: &Snapshot) -> Option<String> {
    let (pick, target) = nccl_rules::nccl_alone(snap)?;
    let source = match &pick.source {
        PickSource::User(v) => format!("NCCL_SOCKET_IFNAME={v}"),
        PickSource::Auto(step) => format!("automatic, step {step:?}"),
    };
    let model = target.describe();
    Some(match pick.found.first() {
        Some(f) => format!(
            "{} ({}) [{}; {} interface(s) for NET/Socket: {}; {model}]",
            f.name,
            f.addr,
            source,
            pick.found.len(),
            pick.found
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>()
                .join(",")
        ),
        None => format!("no socket interface found [{source}; {model}]"),
    })
}

/// [`nccl_alone`] as data, for `doctor --json` (`decision.nccl_model`): `{"nccl_versions": [..], "era":
/// "before-2.28" | "2.28+", "source": "NCCL_SOCKET_IFNAME" | "automatic", "step": the automatic step or null,
/// "bootstrap": {"ifname", "addr"} or null ("no socket interface found"), "interfaces": [names NET/Socket
/// would use]}`; `null` when the network probe failed.
pub fn nccl_model_json(snap: &Snapshot) -> serde_json::Value {
    let Some((pick, target)) = nccl_rules::nccl_alone(snap) else {
        return serde_json::Value::Null;
    };
    let (source, step) = match &pick.source {
        PickSource::User(_) => ("NCCL_SOCKET_IFNAME", None),
        PickSource::Auto(step) => ("automatic", Some(*step)),
    };
    serde_json::json!({
        "nccl_versions": target.versions,
        "era": match target.era {
            Era::Before2_28 => "before-2.28",
            Era::Current => "2.28+",
        },
        "source": source,
        "step": step,
        "bootstrap": pick.found.first().map(|f| serde_json::json!({"ifname": f.name, "addr": f.addr})),
        "interfaces": pick.found.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let v = NetworkView::new(net, &[]);
        for multi in [true, false] {
            assert_eq!(gloo_name_fails(&v, "eth0", multi), None);
            assert_eq!(netdev_unusable(&v, "eth0", multi), None);
            assert!(gloo_name_fails(&v, "net2", multi).is_some());
            assert!(netdev_unusable(&v, "net2", multi).is_some_and(|w| w.contains("no address")));
            assert!(netdev_unusable(&v, "eth9", multi).is_some_and(|w| w.contains("no such")));
        }
        assert!(gloo_name_fails(&v, "net1", true).is_some_and(|w| w.contains("fe80::6c:1")));
        assert!(netdev_unusable(&v, "net1", true).is_some_and(|w| w.contains("link-local")));
        assert_eq!(gloo_name_fails(&v, "net1", false), None);
        assert_eq!(netdev_unusable(&v, "net1", false), None);
    }

    /// #26 item 4 through each companion's step: `net1` (fe80 only) is repaired in a multi-node job and
    /// kept on one node; `eth0` (NCCL's interface) is kept.
    #[test]
    fn companions_repaired_when_fe80_only_kept_when_they_work() {
        let snap = fe80_net1();
        let Ok(net) = &snap.net else {
            panic!("no network")
        };
        let v = NetworkView::new(net, &[]);
        let fix = Fix { vendor: false };
        let run = |var: &'static str, val: &str, multi: bool| {
            let c = Companion {
                v: &v,
                ifname: "eth0",
                gname: "eth0",
                multi,
                fix: &fix,
            };
            let mut plan = Plan::default();
            let val = val.to_string();
            let t = OmpiTarget {
                value: "10.244.1.0/24".into(),
                mpirun: false,
                rank: false,
            };
            match var {
                "HOROVOD_GLOO_IFACE" => horovod_iface(&c, Some(&val), None, &mut plan),
                "UCX_NET_DEVICES" => ucx_net_devices(&c, &val, &mut plan),
                _ => ompi_if_include(
                    &c,
                    var,
                    Some(&val),
                    &t,
                    "10.244.1.7".parse().ok(),
                    &mut plan,
                ),
            }
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
