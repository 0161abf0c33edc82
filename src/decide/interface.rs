//! Choosing and validating the socket interface: `NCCL_SOCKET_IFNAME`, `NCCL_SOCKET_FAMILY` and the framework
//! companions `GLOO_SOCKET_IFNAME`, `TP_SOCKET_IFNAME`, `POD_IP`. Pure: reads the snapshot, writes the plan.
//!
//! The order (`docs/policy.md`): the kernel's route to the peer (an IPv4
//! link-local address counts when the peer is on that link); else the interface owning the address this node
//! declares (`VLLM_HOST_IP`, Ray's `--node-ip-address`, …); else the kernel's route to an off-link
//! destination when an `ip rule` takes it out of table main; else the IPv4 default route of table main with
//! the lowest metric whose interface is a candidate; else the same for IPv6; else the only candidate; else
//! the best-ranked candidate (with a warning); else `lo` for a single-node job.

use crate::config::Config;
use crate::nccl_rules::{self, Era, Found, PickSource};
use crate::plan::{Choice, Plan};
use crate::probe::job::effective;
use crate::snapshot::{
    is_link_local_ip, prefix_contains, Addr, Family, Launcher, Link, NetSnapshot, RdzvProtocol,
    Snapshot,
};
use std::collections::HashMap;
use std::net::IpAddr;

/// Link-name prefixes of container and virtualisation bridges: Docker (`docker0`, compose `br-<id>`),
/// libvirt (`virbr`), CNI and Kubernetes overlays. NCCL itself de-prioritises `docker` and `virbr`
/// (`ncclFindInterfaces`, src/misc/socket.cc).
const BRIDGE_PREFIXES: &[&str] = &["docker", "br-", "virbr", "cni", "flannel", "cali", "kube-"];

/// True for an address NCCL can bind and another node can reach by routing: not tentative (IPv6 DAD still
/// running makes the bind fail, NCCL-FACTS §4), not deprecated, not DAD-failed, not link-local, not loopback.
pub fn usable_addr(a: &Addr) -> bool {
    !a.tentative && !a.deprecated && !a.dad_failed && !a.is_link_local() && !a.is_loopback()
}

/// True for a container or virtualisation bridge, by link kind or by name (`docker`, `br-`, `virbr`, `cni`, `flannel`, `cali`, `kube-`).
pub fn is_bridge_like(link: &Link) -> bool {
    link.kind.as_deref() == Some("bridge")
        || BRIDGE_PREFIXES.iter().any(|p| link.name.starts_with(p))
}

/// True for an IPv4 link-local (169.254/16) address that can be bound: not tentative, deprecated or
/// DAD-failed.
fn usable_link_local_v4(a: &Addr) -> bool {
    a.addr.is_ipv4() && a.is_link_local() && !a.tentative && !a.deprecated && !a.dad_failed
}

/// Read-only helpers over the network snapshot, with links and usable addresses indexed once (the cost
/// stays linear in interfaces and addresses: a host can have thousands of veths).
struct Net<'a> {
    net: &'a NetSnapshot,
    exclude: &'a [String],
    links: HashMap<u32, &'a Link>,
    /// Usable addresses per link index, IPv4 before IPv6, kernel order within a family.
    usable: HashMap<u32, Vec<&'a Addr>>,
    /// The first IPv4 link-local address per link index (not tentative, deprecated or DAD-failed).
    ll4: HashMap<u32, &'a Addr>,
    /// Links on which an IPv4 link-local address is usable: the kernel's route to the peer leaves through
    /// them with no gateway (the peer is on that link, F16), or the peer is this host's own link-local
    /// address there. Filled by [`Net::for_job`].
    ll_ok: Vec<u32>,
    /// Output interfaces of the default routes of table main and of the kernel's off-link lookups: the
    /// uplinks (a bridge among them carries the host's own traffic; it is no container bridge).
    uplinks: Vec<u32>,
}

impl<'a> Net<'a> {
    fn new(net: &'a NetSnapshot, exclude: &'a [String]) -> Net<'a> {
        let links = net.links.iter().map(|l| (l.index, l)).collect();
        let mut usable: HashMap<u32, Vec<&'a Addr>> = HashMap::new();
        for a in net.addrs.iter().filter(|a| usable_addr(a)) {
            usable.entry(a.index).or_default().push(a);
        }
        for v in usable.values_mut() {
            v.sort_by_key(|a| a.family());
        }
        let mut ll4: HashMap<u32, &'a Addr> = HashMap::new();
        for a in net.addrs.iter().filter(|a| usable_link_local_v4(a)) {
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
        Net {
            net,
            exclude,
            links,
            usable,
            ll4,
            ll_ok: Vec::new(),
            uplinks,
        }
    }
    /// The links where the job's peer makes an IPv4 link-local address usable (see [`Net::ll_ok`]).
    fn for_job(mut self, snap: &Snapshot) -> Net<'a> {
        if snap.peer.as_ref().is_some_and(|p| !p.addrs.is_empty()) {
            for l in self.net.peer_routes.iter().filter(|l| l.error.is_none()) {
                if !l.dest.is_ipv4() {
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
    /// True when `link` is excluded by `NCCLENV_EXCLUDE`.
    fn excluded(&self, link: &Link) -> bool {
        self.exclude.iter().any(|e| e == &link.name)
    }
    /// A candidate for the route to the peer: [`Net::candidate`], or, on a link where the peer makes it
    /// usable ([`Net::ll_ok`]), a RUNNING, non-loopback, non-excluded link's IPv4 link-local address.
    fn candidate_for_peer(&self, link: &Link, family: Option<Family>) -> Option<&'a Addr> {
        self.candidate(link, family).or_else(|| {
            if family == Some(Family::Inet6)
                || !self.ll_ok.contains(&link.index)
                || !link.running
                || link.loopback
                || self.excluded(link)
            {
                return None;
            }
            self.ll4.get(&link.index).copied()
        })
    }
    /// True when an address NCCL would use on `link_name` is fine although link-local: IPv4 on a link
    /// where the peer is ([`Net::ll_ok`]).
    fn link_local_ok(&self, link_name: &str, addr: &IpAddr) -> bool {
        addr.is_ipv4()
            && self
                .link_by_name(link_name)
                .is_some_and(|l| self.ll_ok.contains(&l.index))
    }
    /// A container or virtualisation bridge that is not an uplink ([`Net::uplinks`]): a host's `br0` that
    /// carries the default route is the host's own network.
    fn container_bridge(&self, link: &Link) -> bool {
        is_bridge_like(link) && !self.uplinks.contains(&link.index)
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
    /// A candidate: RUNNING, not loopback, not excluded, with a usable address of the family.
    fn candidate(&self, link: &Link, family: Option<Family>) -> Option<&'a Addr> {
        if !link.running || link.loopback || self.excluded(link) {
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
    let class = if is_bridge_like(link) {
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

/// ncclenv's own choice, in the order of the module docs. Warnings about the peer's route are added to
/// `plan` on the way.
fn choose<'a>(
    snap: &Snapshot,
    v: &Net<'a>,
    family: Option<Family>,
    plan: &mut Plan,
) -> Option<Pick<'a>> {
    if let Some(p) = peer_route(snap, v, family, plan) {
        return Some(p);
    }
    if let Some(p) = declared_address(snap, v, family) {
        return Some(p);
    }
    default_route(snap, v, family, plan)
}

/// Step 1, the kernel's route to the peer: the interface it leaves through (its IPv4 link-local address
/// counts when the peer is on that link, F16), or, when the peer is this host, the interface owning the
/// address (any family; an IPv4 link-local one too). An IPv6 link-local peer is never used (`peer-link-local`):
/// such an address needs a scope (an interface index of one host), which means nothing to the other nodes
/// that NCCL's unique id is handed to.
fn peer_route<'a>(
    snap: &Snapshot,
    v: &Net<'a>,
    family: Option<Family>,
    plan: &mut Plan,
) -> Option<Pick<'a>> {
    let peer = snap.peer.as_ref().filter(|p| !p.addrs.is_empty())?;
    for a in peer
        .addrs
        .iter()
        .filter(|a| a.is_ipv6() && is_link_local_ip(a))
    {
        plan.warn(
            "peer-link-local",
            format!(
                "the master {} (from {}) is the IPv6 link-local address {a}: it is usable only with a scope (an interface index of one host), which means nothing on the other nodes, so ncclenv does not choose the interface by the route to it (with or without a %zone) and decides from the other steps",
                peer.host,
                peer.source,
            ),
            "give the launcher the master's global or unique-local (fd00::/8) address, or an IPv4 address",
        );
    }
    for lookup in &v.net.peer_routes {
        if family.is_some_and(|f| Family::of(&lookup.dest) != f)
            || (lookup.dest.is_ipv6() && is_link_local_ip(&lookup.dest))
        {
            continue;
        }
        let peer_fam = Some(Family::of(&lookup.dest));
        if let Some(err) = &lookup.error {
            plan.warn(
                "peer-unreachable",
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
        if lookup.local {
            // The peer is this host: the interface owning the address.
            let owner = v.net.addrs.iter().find(|a| a.addr == lookup.dest);
            if let Some((l, own)) = owner.and_then(|a| v.link(a.index).map(|l| (l, a))) {
                if let Some(a) = v.candidate_for_peer(l, peer_fam).or_else(|| {
                    // The owned address itself, when nothing better on the link is usable.
                    (usable_link_local_v4(own) && l.running && !l.loopback && !v.excluded(l))
                        .then_some(own)
                }) {
                    return Some(Pick {
                        link: l,
                        addr: Some(a),
                        how: format!(
                            "this host is the peer {} ({}); the interface owning that address",
                            lookup.dest, peer.source
                        ),
                        routed: true,
                    });
                }
            }
            continue;
        }
        let Some(l) = lookup.oif.and_then(|i| v.link(i)) else {
            continue;
        };
        match v.candidate_for_peer(l, peer_fam) {
            Some(a) => {
                return Some(Pick {
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
            None => plan.warn(
                "peer-route-unusable",
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
            ),
        }
    }
    None
}

/// What the decision does once the route to the peer is of no use, for the remedies of `peer-unreachable`
/// and `peer-route-unusable`: the declared address (step 1b), else a default route (steps 2/3, policy
/// routing included), else the ranking of the candidates (steps 4/5).
fn without_peer_route(snap: &Snapshot, v: &Net, family: Option<Family>) -> &'static str {
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

/// Step 1b, the address this node declares for itself (`VLLM_HOST_IP`, Ray's `--node-ip-address`, torchrun's
/// `--local-addr`, Paddle's `POD_IP`; F29): the interface that owns it, when it is a candidate (an IPv4
/// link-local address counts: the user named it).
fn declared_address<'a>(snap: &Snapshot, v: &Net<'a>, family: Option<Family>) -> Option<Pick<'a>> {
    let text = snap.job.self_addr.as_deref()?;
    let ip = text.parse::<IpAddr>().ok()?;
    if ip.is_loopback() || family.is_some_and(|f| Family::of(&ip) != f) {
        return None;
    }
    let own = v.net.addrs.iter().find(|a| a.addr == ip)?;
    let l = v.link(own.index)?;
    let a = v.candidate(l, Some(Family::of(&ip))).or_else(|| {
        (usable_link_local_v4(own) && l.running && !l.loopback && !v.excluded(l)).then_some(own)
    })?;
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

/// Steps 2–5, no peer decided: the kernel's route to an off-link destination when an `ip rule` takes it out of
/// table main (F28), the default routes of table main (IPv4, then IPv6, lowest metric first; one over a dead
/// link is skipped with a warning, F11), the only candidate, the best-ranked candidate.
fn default_route<'a>(
    snap: &Snapshot,
    v: &Net<'a>,
    family: Option<Family>,
    plan: &mut Plan,
) -> Option<Pick<'a>> {
    // 2./3. Default routes, IPv4 then IPv6: policy routing first, then table main by metric.
    for fam in [Family::Inet, Family::Inet6] {
        if family.is_some_and(|f| f != fam) {
            continue;
        }
        if let Some(p) = policy_default(v, fam) {
            return Some(p);
        }
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
                            plan.warn(
                                "default-route-down",
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
    }
    // 4./5. No route told: the only candidate, or the best ranked.
    let mut cands = v.candidates(family);
    cands.sort_by_key(|(l, a)| rank(l, a));
    if let Some((l, a)) = cands.first() {
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
        return Some(Pick {
            link: l,
            addr: Some(a),
            how,
            routed: cands.len() == 1,
        });
    }
    None
}

/// The kernel's route to an off-link destination ([`NetSnapshot::default_lookups`]) when it came from a
/// table other than main: an `ip rule` steers this host's traffic there (cloud images with per-interface
/// tables, Cilium, source routing; F28), so that table's default route is the one in use.
fn policy_default<'a>(v: &Net<'a>, fam: Family) -> Option<Pick<'a>> {
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

/// Decide `NCCL_SOCKET_IFNAME`, `NCCL_SOCKET_FAMILY`, `GLOO_SOCKET_IFNAME`, `TP_SOCKET_IFNAME` and `POD_IP`,
/// and warn about what is visible and dangerous. Requires `snap.net` to be `Ok` (the caller handles a failed
/// probe). Field cases F1–F12 (shared/FIELD-CASES.md).
pub fn decide_interface(snap: &Snapshot, cfg: &Config, plan: &mut Plan, vendor: bool) {
    let Ok(net) = &snap.net else { return };
    let v = Net::new(net, &cfg.exclude).for_job(snap);
    let fix = Fix { vendor };
    let env = &snap.env;
    let conf = &snap.conf_files;
    let multi = is_multi(snap);
    let single = snap.job.is_single_node();
    let target = nccl_target(snap);
    let era = target.era;

    let fam_value = effective("NCCL_SOCKET_FAMILY", env, conf);
    let fam_inherited = nccl_rules::socket_family(fam_value.as_ref().map(|(v, _)| *v));
    if let (Some((val, origin)), None) = (&fam_value, fam_inherited) {
        plan.warn(
            "family-ignored",
            format!("NCCL ignores NCCL_SOCKET_FAMILY={val:?} (from {origin}): only AF_INET and AF_INET6 count"),
            "set NCCL_SOCKET_FAMILY=AF_INET or AF_INET6, or unset it",
        );
    }

    // An inherited family no usable interface has (AF_INET6 on an IPv4-only host): NCCL would bootstrap on a
    // link-local address or find nothing. ncclenv chooses without it and repairs it below.
    let mut fam = fam_inherited;
    let mut fam_repair: Option<(String, String)> = None;
    if let (Some(f), Some((val, origin))) = (fam_inherited, &fam_value) {
        if v.candidates(Some(f)).is_empty() && !v.candidates(None).is_empty() {
            fam = None;
            fam_repair = Some((val.to_string(), origin.clone()));
        }
    }

    // ncclenv's own choice.
    let own = choose(snap, &v, fam, plan);
    let lo = v.net.links.iter().find(|l| l.loopback);

    // The inherited NCCL_SOCKET_IFNAME, evaluated as NCCL would.
    let inherited = effective("NCCL_SOCKET_IFNAME", env, conf);
    let mut kept: Option<Found> = None;
    if let Some((val, origin)) = &inherited {
        if !nccl_rules::ifname_counts(val) {
            plan.warn(
                "ifname-ignored",
                format!("NCCL ignores NCCL_SOCKET_IFNAME={val:?} (from {origin}): a value of one character or less counts as unset"),
                "remove it; ncclenv sets its own choice",
            );
        } else {
            let pick = nccl_rules::nccl_pick(net, Some(val), fam, era);
            let fatal = match pick.found.first() {
                None => Some(format!(
                    "it matches no interface that is RUNNING and has an address, so NCCL fails with \"Bootstrap : no socket interface found\"{}",
                    {
                        let down: Vec<&str> = net
                            .links
                            .iter()
                            .filter(|l| nccl_rules::parse_if_list(val).accepts(&l.name))
                            .map(|l| l.name.as_str())
                            .collect();
                        let names = if down.is_empty() { String::new() } else { format!(" (it names only {}, none usable)", down.join(", ")) };
                        format!("{names}{}", whitespace_hint(val))
                    }
                )),
                // Before 2.28 NCCL takes an interface without carrier (FIELD-CASES F8): bootstrap binds
                // to a dead link, and no peer ever connects.
                Some(f) if !f.running => Some(format!(
                    "{} would bootstrap on {} ({}), which has no carrier (not RUNNING): no other rank can connect to it",
                    target.describe(),
                    f.name,
                    f.addr
                )),
                Some(f)
                    if multi
                        && (f.loopback
                            || (is_link_local_ip(&f.addr) && !v.link_local_ok(&f.name, &f.addr))) =>
                {
                    Some(format!(
                    "NCCL would bootstrap on {} ({}), which cannot reach another node of this {}-node job",
                    f.name,
                    f.addr,
                    snap.job.nnodes.unwrap_or(2)
                ))
                }
                _ => None,
            };
            match fatal {
                Some(why) => {
                    if let Some(p) = own.as_ref() {
                        let new = v.nccl_value(&p.link.name);
                        fix.apply(
                            plan,
                            Repair {
                                name: "NCCL_SOCKET_IFNAME",
                                old: val,
                                new: Some(new.clone()),
                                reason: format!("inherited value {val:?} (from {origin}) would fail: {why}; chose {} by {}", p.link.name, p.how),
                                code: "inherited-ifname-repaired",
                                message: format!(
                                    "NCCL_SOCKET_IFNAME={val:?} (from {origin}) replaced by {new:?}: {why}. Usable interfaces: {}",
                                    v.usable_list(fam)
                                ),
                                remedy: format!("remove NCCL_SOCKET_IFNAME from the image or config file, or set it to {new}"),
                            },
                        );
                    }
                    // No own choice: handled below with the loopback fallback.
                }
                None => {
                    let first = pick.found[0].clone();
                    // What NCCL will use with the final environment: ncclenv exports NCCL_SOCKET_FAMILY
                    // (the first match's) when it is not inherited, which drops the other family's matches.
                    let final_fam = fam.unwrap_or_else(|| Family::of(&first.addr));
                    let final_pick = nccl_rules::nccl_pick(net, Some(val), Some(final_fam), era);
                    let dropped: Vec<&Found> = pick
                        .found
                        .iter()
                        .filter(|f| !final_pick.found.iter().any(|g| g.name == f.name))
                        .collect();
                    if !single {
                        risk_warnings(
                            &v,
                            val,
                            origin,
                            &final_pick.found,
                            &dropped,
                            final_fam,
                            plan,
                        );
                    }
                    unmatched_entries(&v, val, origin, plan);
                    kept = Some(first);
                }
            }
        }
    }

    // The interface every library will use.
    let (ifname, addr, how) = if let Some(f) = &kept {
        let (val, origin) = inherited
            .as_ref()
            .map(|(a, b)| (*a, b.as_str()))
            .unwrap_or(("", ""));
        (
            f.name.clone(),
            Some(f.addr),
            format!("inherited NCCL_SOCKET_IFNAME={val} (from {origin}), NCCL's first match"),
        )
    } else if let Some(p) = &own {
        if inherited
            .as_ref()
            .is_none_or(|(val, _)| !nccl_rules::ifname_counts(val))
        {
            let value = v.nccl_value(&p.link.name);
            let exact = value.starts_with('=');
            plan.set(
                "NCCL_SOCKET_IFNAME",
                value,
                format!(
                    "{} by {}{}",
                    p.link.name,
                    p.how,
                    if exact {
                        "; '=' because the plain name would also match other interfaces"
                    } else {
                        ""
                    }
                ),
            );
        }
        if !p.routed {
            let lead = match &snap.peer {
                Some(peer) if !peer.addrs.is_empty() => {
                    "no route to the peer and no default route named an interface"
                }
                Some(_) => "the peer did not resolve and no default route named an interface",
                None => "no peer is named and no default route names an interface",
            };
            plan.warn_strict(
                "no-route-decided",
                format!(
                    "{lead}; took {} as the {}. Usable: {}",
                    p.link.name,
                    p.how,
                    v.usable_list(fam)
                ),
                "set NCCLENV_PEER (or MASTER_ADDR) to the master's address, or NCCL_SOCKET_IFNAME yourself",
            );
        }
        (p.link.name.clone(), p.addr.map(|a| a.addr), p.how.clone())
    } else {
        // No candidate at all: only loopback is left.
        // Interfaces that only NCCLENV_EXCLUDE kept out: the refusal must name the user's own list.
        let excluded: Vec<String> = Net::new(net, &[])
            .candidates(fam)
            .iter()
            .map(|(l, _)| l.name.clone())
            .collect();
        let lo_down = lo.filter(|l| !l.up || !l.running);
        let lacks = format!(
            "this container has no usable network interface but lo (usable: {}){}{}",
            v.usable_list(fam),
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
        );
        if multi {
            plan.refuse(
                "no-interface-multi-node",
                format!(
                    "{lacks}, and this is a {}-node job ({}): no interface can reach another node",
                    snap.job.nnodes.unwrap_or(2),
                    snap.job.source.as_deref().unwrap_or("launcher")
                ),
                "give the container a network the other nodes can connect back to: --network=host, a routable pod network, or a Multus interface on the nodes' network (not --network=none; Docker's default bridge hides the container behind NAT)",
            );
            return;
        }
        let Some(lo) = lo else {
            plan.warn(
                "no-interface",
                format!("{lacks}; not even lo is present"),
                "give the container a network",
            );
            return;
        };
        if lo_down.is_some() {
            plan.warn(
                "no-interface",
                lacks,
                "bring loopback up (ip link set lo up; Docker and Kubernetes do it for every container), or give the container a network",
            );
            return;
        }
        let addr = net
            .addrs
            .iter()
            .filter(|a| a.index == lo.index && fam.is_none_or(|f| a.family() == f))
            .min_by_key(|a| a.family())
            .map(|a| a.addr);
        let value = v.nccl_value(&lo.name);
        match &inherited {
            Some((val, origin)) if nccl_rules::ifname_counts(val) => fix.apply(
                plan,
                Repair {
                    name: "NCCL_SOCKET_IFNAME",
                    old: val,
                    new: Some(value.clone()),
                    reason: format!("inherited value {val:?} (from {origin}) matches no usable interface; only lo is left"),
                    code: "inherited-ifname-repaired",
                    message: format!("NCCL_SOCKET_IFNAME={val:?} (from {origin}) replaced by {value:?}: nothing it names is usable"),
                    remedy: "remove NCCL_SOCKET_IFNAME from the image or config file".into(),
                },
            ),
            _ => plan.set(
                "NCCL_SOCKET_IFNAME",
                value,
                "no usable interface but loopback: single-node only",
            ),
        }
        plan.warn_strict(
            "loopback-only",
            format!("{lacks}; using lo: only a single-node job can work"),
            "for a multi-node job give the container a network (not --network=none); for one node this is fine",
        );
        (lo.name.clone(), addr, "loopback fallback".to_string())
    };

    // A master on loopback in a multi-node job: fine on the master itself (node rank 0, or a host name that
    // /etc/hosts maps to 127.0.1.1 there), but a node that is not the master connects to itself.
    if let (true, Some(p)) = (multi, &snap.peer) {
        peer_loopback(snap, p, addr, plan);
    }

    plan.choice = Some(Choice {
        ifname: ifname.clone(),
        addr,
        how: how.clone(),
    });

    // NCCL_SOCKET_FAMILY matching the chosen address.
    if let (Some((val, origin)), Some(a)) = (&fam_repair, addr) {
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
                code: "inherited-family-repaired",
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
    } else if fam_value.is_none() {
        if let Some(a) = addr {
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

    // Framework companions: exact interface names only.
    for var in ["GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"] {
        companion(&v, env, var, &ifname, &fix, plan);
    }
    other_launchers(&v, snap, &ifname, addr, &fix, plan);
    pod_ip(snap, &ifname, addr, multi, &fix, plan);
    declared_differs(&v, snap, &ifname, addr, plan);
    if let (false, Some(a)) = (snap.job.ips.is_empty(), addr) {
        let ips: Vec<IpAddr> = snap.job.ips.iter().filter_map(|h| h.parse().ok()).collect();
        if ips.len() == snap.job.ips.len() && !ips.contains(&a) {
            plan.warn(
                "advertised-address-differs",
                format!(
                    "--ips {} does not contain {a}, the address NCCL binds on {ifname}: the launcher will advertise another address",
                    snap.job.ips.join(",")
                ),
                "list this node's address of the chosen interface in --ips",
            );
        }
    }

    overlapping_prefixes(&v, plan);
    if multi {
        container_bridge_nat(&v, snap, &ifname, addr, plan);
    }
    proxy_warning(snap, plan);
}

/// Warnings for an inherited `NCCL_SOCKET_IFNAME` that works but is risky for a job not known to be
/// single-node: a match that is loopback, link-local only, or a container bridge; an entry that
/// prefix-matches several interfaces (NET/Socket stripes over all of them, src/transport/net_socket.cc).
fn risk_warnings(
    v: &Net,
    val: &str,
    origin: &str,
    found: &[Found],
    dropped: &[&Found],
    fam: Family,
    plan: &mut Plan,
) {
    for f in found {
        let link = v.link_by_name(&f.name);
        let why = if f.loopback {
            Some("is the loopback interface")
        } else if !f.running {
            Some("has no carrier (NCCL before 2.28 still stripes NET/Socket traffic over it)")
        } else if is_link_local_ip(&f.addr) && !v.link_local_ok(&f.name, &f.addr) {
            Some("has only a link-local address")
        } else if link.is_some_and(|l| v.container_bridge(l)) {
            Some("is a container or virtualisation bridge")
        } else {
            None
        };
        if let Some(why) = why {
            plan.warn_strict(
                "inherited-ifname-risky",
                format!(
                    "NCCL_SOCKET_IFNAME={val:?} (from {origin}) selects {} ({}), which {why}: another node cannot reach it",
                    f.name, f.addr
                ),
                "set NCCL_SOCKET_IFNAME to the interface that routes to the other nodes, or unset it and let ncclenv choose",
            );
        }
    }
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
            plan.warn_strict(
                "inherited-ifname-prefix",
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
/// `peer-is-loopback`: the master `p` resolves to a loopback address here in a multi-node job. On node rank 0
/// (the master) an info: it reaches itself there, the other nodes need a routable address (`own`, the address
/// chosen here, is named). Elsewhere a warning that says what is true: a node that is not the master would
/// connect to itself; a host name that resolves to loopback is typically the master's own name in its
/// `/etc/hosts`.
fn peer_loopback(snap: &Snapshot, p: &crate::snapshot::Peer, own: Option<IpAddr>, plan: &mut Plan) {
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
        plan.info(
            "peer-is-loopback",
            format!(
                "{here}; this node is {who}, the master, and reaches itself there; the other nodes of this \
                 {nnodes}-node job must be given {reach}"
            ),
            format!("nothing to do here; give the other nodes {reach} or a name that resolves to it"),
        );
        return;
    }
    plan.warn(
        "peer-is-loopback",
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

fn whitespace_hint(val: &str) -> String {
    if val.chars().any(char::is_whitespace) {
        format!("; the value holds whitespace, which NCCL does not trim ({val:?})")
    } else {
        String::new()
    }
}

/// Entries of a kept `NCCL_SOCKET_IFNAME` that match no interface at all (a typo, or a space NCCL does not
/// trim, as in `"eth0, eth1"`): harmless to NCCL, but not what the user meant.
fn unmatched_entries(v: &Net, val: &str, origin: &str, plan: &mut Plan) {
    let list = nccl_rules::parse_if_list(val);
    if list.exclude {
        return;
    }
    let dead: Vec<String> = list
        .entries
        .iter()
        .filter(|e| !v.net.links.iter().any(|l| list.entry_matches(e, &l.name)))
        .map(|e| format!("{:?}", e.prefix))
        .collect();
    if !dead.is_empty() {
        plan.warn(
            "inherited-ifname-entry-unmatched",
            format!(
                "NCCL_SOCKET_IFNAME={val:?} (from {origin}): the entries {} match no interface here{}",
                dead.join(", "),
                whitespace_hint(val)
            ),
            "remove those entries (and any spaces after commas)",
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
    code: &'a str,
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
            plan.warn_strict(
                "vendor-value-kept",
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
        plan.warn_strict(r.code, r.message, r.remedy);
    }
}

/// `GLOO_SOCKET_IFNAME` / `TP_SOCKET_IFNAME`: exact interface names only (PyTorch: a comma list; Paddle: one
/// name). Set when unset; repaired when it holds NCCL syntax or a name that does not exist (Gloo then fails
/// with "Unable to find address for: …"); warned when it names another interface than NCCL's.
fn companion(
    v: &Net,
    env: &std::collections::BTreeMap<String, String>,
    var: &str,
    ifname: &str,
    fix: &Fix,
    plan: &mut Plan,
) {
    match env.get(var) {
        None => plan.set(
            var,
            ifname,
            format!("the same interface as NCCL ({var} takes exact names)"),
        ),
        Some(val) => {
            let names: Vec<&str> = val.split(',').collect();
            let bad = names.iter().find(|n| {
                n.is_empty()
                    || n.starts_with('^')
                    || n.starts_with('=')
                    || n.contains(':')
                    || v.link_by_name(n).is_none()
            });
            if let Some(bad) = bad {
                let why = if bad.starts_with('^')
                    || bad.starts_with('=')
                    || bad.contains(':')
                    || bad.is_empty()
                {
                    format!("{var} takes exact interface names, not NCCL's list syntax ({bad:?})")
                } else {
                    format!("no interface named {bad:?} exists here")
                };
                fix.apply(
                    plan,
                    Repair {
                        name: var,
                        old: val,
                        new: Some(ifname.to_string()),
                        reason: format!("inherited {var}={val:?} would fail: {why}"),
                        code: "gloo-ifname-repaired",
                        message: format!("{var}={val:?} replaced by {ifname:?}: {why}; Gloo would fail with \"Unable to find address for\""),
                        remedy: format!("set {var} to one plain interface name, e.g. {ifname}"),
                    },
                );
            } else if !names.contains(&ifname) {
                plan.warn(
                    "companion-differs",
                    format!("{var}={val} names another interface than NCCL's {ifname}"),
                    format!(
                        "set {var}={ifname} so that every library of the job uses one interface"
                    ),
                );
            }
        }
    }
}

/// The other launchers' interface variables, each in its own syntax (F26). An inherited value naming an
/// interface that does not exist is repaired (`launcher-ifname-repaired`), one that selects another
/// interface than NCCL's is warned (`companion-differs`); an unset one is set only for the launcher that
/// reads it (its command is the job's):
///
/// * `HOROVOD_GLOO_IFACE`: one exact name (horovod/common/utils/env_parser.cc `ParseGlooIface`;
///   horovodrun sets it to the first of its NICs, horovod/runner/gloo_run.py). Set for `horovodrun`.
/// * `OMPI_MCA_btl_tcp_if_include`, `OMPI_MCA_oob_tcp_if_include`: comma-separated exact names or CIDR
///   networks (Open MPI's `btl_tcp_if_include`/`oob_tcp_if_include` MCA parameters). Set for `mpirun`. Open
///   MPI forwards `OMPI_MCA_*` to every node: the name must be the same there.
/// * `UCX_NET_DEVICES`: comma-separated devices: netdev names, RDMA `device:port` entries, or `all`. Only
///   evaluated (never set: it would take UCX off RDMA); a value with RDMA entries is warned, not repaired.
fn other_launchers(
    v: &Net,
    snap: &Snapshot,
    ifname: &str,
    addr: Option<IpAddr>,
    fix: &Fix,
    plan: &mut Plan,
) {
    let env = &snap.env;
    let launcher = snap.job.launcher;
    let differs = |plan: &mut Plan, var: &str, val: &str| {
        plan.warn(
            "companion-differs",
            format!("{var}={val} selects another interface than NCCL's {ifname}"),
            format!("set {var} to {ifname} so that every library of the job uses one interface"),
        )
    };
    let repair = |plan: &mut Plan, var: &'static str, val: &str, why: String| {
        fix.apply(
            plan,
            Repair {
                name: var,
                old: val,
                new: Some(ifname.to_string()),
                reason: format!("inherited {var}={val:?} would fail: {why}"),
                code: "launcher-ifname-repaired",
                message: format!("{var}={val:?} replaced by {ifname:?}: {why}"),
                remedy: format!("set {var} to an interface that exists here, e.g. {ifname}"),
            },
        )
    };

    match env.get("HOROVOD_GLOO_IFACE") {
        Some(val) => {
            let missing: Vec<&str> = val
                .split(',')
                .filter(|n| v.link_by_name(n).is_none())
                .collect();
            if val.contains(',') || !missing.is_empty() {
                let why = if val.contains(',') {
                    format!(
                        "HOROVOD_GLOO_IFACE takes one interface name, not a list{}",
                        if missing.is_empty() {
                            String::new()
                        } else {
                            format!(" (and {} does not exist here)", missing.join(", "))
                        }
                    )
                } else {
                    format!("no interface named {val:?} exists here")
                };
                repair(plan, "HOROVOD_GLOO_IFACE", val, why);
            } else if val != ifname {
                differs(plan, "HOROVOD_GLOO_IFACE", val);
            }
        }
        None if launcher == Some(Launcher::Horovod) => plan.set(
            "HOROVOD_GLOO_IFACE",
            ifname,
            "the same interface as NCCL, for horovodrun's Gloo (one exact name)",
        ),
        None => {}
    }

    for var in ["OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include"] {
        match env.get(var) {
            Some(val) => {
                let entries: Vec<&str> = val.split(',').filter(|e| !e.is_empty()).collect();
                let mut bad: Vec<String> = Vec::new();
                let mut selects = false;
                for e in &entries {
                    match e.split_once('/') {
                        Some((net, len)) => match (net.parse::<IpAddr>(), len.parse::<u8>()) {
                            (Ok(n), Ok(l)) => {
                                if !v.net.addrs.iter().any(|a| prefix_contains(&n, l, &a.addr)) {
                                    bad.push(format!("{e} (no address here is in it)"));
                                }
                                selects |= addr.is_some_and(|a| prefix_contains(&n, l, &a));
                            }
                            _ => bad.push(format!("{e} (not a CIDR network)")),
                        },
                        None => {
                            if v.link_by_name(e).is_none() {
                                bad.push(format!("{e} (no such interface)"));
                            }
                            selects |= *e == ifname;
                        }
                    }
                }
                if entries.is_empty() || !bad.is_empty() {
                    let why = if entries.is_empty() {
                        "it names nothing".to_string()
                    } else {
                        format!("Open MPI cannot use {}", bad.join(", "))
                    };
                    repair(plan, var, val, why);
                } else if !selects {
                    differs(plan, var, val);
                }
            }
            None if launcher == Some(Launcher::Mpi) => plan.set(
                var,
                ifname,
                "the same interface as NCCL, for Open MPI's TCP transport (Open MPI forwards it to every node)",
            ),
            None => {}
        }
    }

    if let Some(val) = env.get("UCX_NET_DEVICES") {
        let entries: Vec<&str> = val.split(',').filter(|e| !e.is_empty()).collect();
        if !entries.contains(&"all") {
            let (rdma, netdevs): (Vec<&str>, Vec<&str>) =
                entries.iter().partition(|e| e.contains(':'));
            let missing: Vec<&str> = netdevs
                .iter()
                .copied()
                .filter(|n| v.link_by_name(n).is_none())
                .collect();
            if !missing.is_empty() && rdma.is_empty() {
                repair(
                    plan,
                    "UCX_NET_DEVICES",
                    val,
                    format!("no interface named {} exists here", missing.join(", ")),
                );
            } else if !missing.is_empty() {
                plan.warn(
                    "companion-differs",
                    format!(
                        "UCX_NET_DEVICES={val} names {}, which does not exist here (its RDMA devices are kept)",
                        missing.join(", ")
                    ),
                    format!("remove the missing names or use {ifname}"),
                );
            } else if rdma.is_empty() && !netdevs.contains(&ifname) {
                differs(plan, "UCX_NET_DEVICES", val);
            }
        }
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
                    code: "pod-ip-repaired",
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
        (Some(p), Some(a)) if p.parse::<IpAddr>().ok() != Some(a) => plan.warn(
            "advertised-address-differs",
            format!("POD_IP={p} is what Paddle advertises, but NCCL binds {a} on {ifname}"),
            "unset POD_IP or make it the address of the chosen interface",
        ),
        _ => {}
    }
}

/// The address this node declares (`VLLM_HOST_IP`, Ray's `--node-ip-address`, torchrun's `--local-addr`;
/// `POD_IP` is [`pod_ip`]'s) disagrees with the interface chosen, or belongs to no interface here:
/// `advertised-address-differs`.
fn declared_differs(v: &Net, snap: &Snapshot, ifname: &str, addr: Option<IpAddr>, plan: &mut Plan) {
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
        None => plan.warn(
            "advertised-address-differs",
            format!("{src}={ip} names this node's address, but no interface here has it: the launcher will advertise an address this node does not own; NCCL binds{bound} on {ifname}"),
            format!("set {src} to this node's address on {ifname}, or unset it"),
        ),
        Some(l) if l.name != ifname => plan.warn(
            "advertised-address-differs",
            format!("{src}={ip} names this node's address, which is on {}, but NCCL binds{bound} on {ifname}: the job would use two networks", l.name),
            format!("set {src} to this node's address on {ifname}, or make the route to the master leave through {}", l.name),
        ),
        _ => {}
    }
}

/// Address blocks container engines hand to their NAT'd bridges by default: Docker's local address pools
/// (moby libnetwork/ipamutils/utils.go `localScopeDefaultNetworks`: 172.17.0.0/16 … 172.28.0.0/14, i.e.
/// 172.17.0.0–172.31.255.255, and 192.168.0.0/16 split into /20s) and Podman's default network
/// (containers/common `default_subnet` 10.88.0.0/16).
const NAT_BRIDGE_POOLS: &[([u8; 4], u8)] = &[
    ([172, 17, 0, 0], 16),
    ([172, 18, 0, 0], 15),
    ([172, 20, 0, 0], 14),
    ([172, 24, 0, 0], 13),
    ([192, 168, 0, 0], 16),
    ([10, 88, 0, 0], 16),
];

/// A multi-node job whose address sits on a container bridge behind NAT cannot be connected back to by the
/// other nodes (they would need this container's address, which only its host can reach): warn
/// `container-bridge-nat`. Seen from inside the container (the NAT itself lives in the host's namespace):
/// the chosen interface is a veth, its IPv4 address lies in a container engine's default bridge pool
/// ([`NAT_BRIDGE_POOLS`]), and the route to the master leaves through it via a gateway (the master is on
/// another host). A heuristic: a warning, never a refusal.
fn container_bridge_nat(
    v: &Net,
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
    let in_pool = NAT_BRIDGE_POOLS
        .iter()
        .any(|(net, len)| prefix_contains(&IpAddr::from(*net), *len, &IpAddr::V4(a)));
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
    plan.warn(
        "container-bridge-nat",
        format!(
            "this node's address {a} on {ifname} looks like a container bridge behind NAT (a veth in a Docker/Podman default address pool; the master {} is reached through {gw}): the other nodes cannot connect back to {a}",
            peer.host
        ),
        "run the container with --network=host, give the pod a routable network, or attach a Multus interface on the nodes' network",
    );
}

/// Two candidate interfaces whose connected prefixes overlap: the kernel sources traffic from the first
/// matching route whatever NCCL binds.
fn overlapping_prefixes(v: &Net, plan: &mut Plan) {
    let c = v.candidates(None);
    for (i, (l1, a1)) in c.iter().enumerate() {
        for (l2, a2) in c.iter().skip(i + 1) {
            if l1.index == l2.index || a1.family() != a2.family() {
                continue;
            }
            let p = a1.prefix_len.min(a2.prefix_len);
            if crate::snapshot::prefix_contains(&a1.addr, p, &a2.addr) && p > 0 {
                plan.warn(
                    "overlapping-prefixes",
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
    plan.warn(
        "proxy-catches-peer",
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
    let v = Net::new(net, &cfg.exclude);
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

/// The NCCL the command will run with, as far as the snapshot tells (`Snapshot::nccl_installs`: the library
/// of `NCCLENV_NCCL_LIB` alone when it is set, else every installation found), and so the rules the model
/// of NCCL applies where versions differ ([`Era`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcclTarget {
    /// The rules applied: [`Era::Current`] only when every version found is 2.28 or later; otherwise (an
    /// older one, or none known) [`Era::Before2_28`], under which more inherited values fail.
    pub era: Era,
    /// The distinct versions found (`X.Y.Z`), sorted; empty when unknown.
    pub versions: Vec<String>,
}

impl NcclTarget {
    /// `NCCL 2.21.5 (before 2.28: …)`, or what was assumed when the version is unknown.
    pub fn describe(&self) -> String {
        if self.versions.is_empty() {
            format!(
                "NCCL (version not found; modelled as {})",
                self.era.describe()
            )
        } else {
            format!(
                "NCCL {} ({})",
                self.versions.join(", "),
                self.era.describe()
            )
        }
    }
}

/// See [`NcclTarget`].
pub fn nccl_target(snap: &Snapshot) -> NcclTarget {
    let installs = match snap.nccl_installs.first() {
        Some(i) if i.source == crate::probe::nccl::EXPLICIT_SOURCE => std::slice::from_ref(i),
        _ => &snap.nccl_installs[..],
    };
    let mut versions: Vec<String> = installs.iter().filter_map(|i| i.version.clone()).collect();
    versions.sort();
    versions.dedup();
    let eras: Vec<Era> = versions.iter().filter_map(|v| Era::of_version(v)).collect();
    let era = if !eras.is_empty() && eras.len() == versions.len() {
        eras.iter().copied().min().unwrap_or(Era::Before2_28)
    } else {
        Era::Before2_28
    };
    NcclTarget { era, versions }
}

/// What NCCL alone (without ncclenv) would do with the inherited environment, following the version the
/// command will load ([`nccl_target`]): the pick and the target.
fn nccl_alone_pick(snap: &Snapshot) -> Option<(nccl_rules::NcclPick, NcclTarget)> {
    let Ok(net) = &snap.net else { return None };
    let ifn = effective("NCCL_SOCKET_IFNAME", &snap.env, &snap.conf_files);
    let fam = effective("NCCL_SOCKET_FAMILY", &snap.env, &snap.conf_files);
    let target = nccl_target(snap);
    let pick = nccl_rules::nccl_pick(
        net,
        ifn.as_ref().map(|(v, _)| *v),
        nccl_rules::socket_family(fam.as_ref().map(|(v, _)| *v)),
        target.era,
    );
    Some((pick, target))
}

/// What NCCL alone (without ncclenv) would choose with the inherited environment, for the report: the
/// bootstrap interface and address, or why it fails, and the NCCL version modelled.
pub fn nccl_alone(snap: &Snapshot) -> Option<String> {
    let (pick, target) = nccl_alone_pick(snap)?;
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
    let Some((pick, target)) = nccl_alone_pick(snap) else {
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
