//! Choosing and validating the socket interface: `NCCL_SOCKET_IFNAME`, `NCCL_SOCKET_FAMILY` and the framework
//! companions `GLOO_SOCKET_IFNAME`, `TP_SOCKET_IFNAME`, `POD_IP`. Pure: reads the snapshot, writes the plan.
//!
//! The order (`docs/policy.md`): the kernel's route to the peer; else the IPv4 default
//! route with the lowest metric whose interface is a candidate; else the same for IPv6; else the only
//! candidate; else the best-ranked candidate (with a warning); else `lo` for a single-node job.

use crate::config::Config;
use crate::nccl_rules::{self, Era, Found, PickSource};
use crate::plan::{Choice, Plan};
use crate::probe::job::{effective, PROXY_VARS};
use crate::snapshot::{is_link_local_ip, Addr, Family, Link, NetSnapshot, Snapshot};
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

/// Read-only helpers over the network snapshot, with links and usable addresses indexed once (the cost
/// stays linear in interfaces and addresses: a host can have thousands of veths).
struct Net<'a> {
    net: &'a NetSnapshot,
    exclude: &'a [String],
    links: HashMap<u32, &'a Link>,
    /// Usable addresses per link index, IPv4 before IPv6, kernel order within a family.
    usable: HashMap<u32, Vec<&'a Addr>>,
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
        Net {
            net,
            exclude,
            links,
            usable,
        }
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
        if !link.running || link.loopback || self.exclude.iter().any(|e| e == &link.name) {
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

fn choose<'a>(
    snap: &Snapshot,
    v: &Net<'a>,
    family: Option<Family>,
    plan: &mut Plan,
) -> Option<Pick<'a>> {
    // 1. The kernel's route to the peer.
    if let Some(peer) = &snap.peer {
        for lookup in &v.net.peer_routes {
            if family.is_some_and(|f| Family::of(&lookup.dest) != f) {
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
                    "check the peer address and this container's network; falling back to the default route",
                );
                continue;
            }
            if lookup.local {
                // The peer is this host: the interface owning the address.
                let owner = v
                    .net
                    .addrs
                    .iter()
                    .find(|a| a.addr == lookup.dest)
                    .and_then(|a| v.link(a.index));
                if let Some(l) = owner {
                    if let Some(a) = v.candidate(l, peer_fam) {
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
            match v.candidate(l, peer_fam) {
                Some(a) => {
                    return Some(Pick {
                        link: l,
                        addr: Some(a),
                        how: format!(
                            "route to peer {} ({} from {})",
                            lookup.dest, peer.host, peer.source
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
                    "fix that interface or the route; falling back to the default route",
                ),
            }
        }
    }
    // 2./3. Default routes, IPv4 then IPv6, lowest metric first.
    for fam in [Family::Inet, Family::Inet6] {
        if family.is_some_and(|f| f != fam) {
            continue;
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
        let how = if cands.len() == 1 {
            "the only usable interface (no route to the peer or default route names one)"
                .to_string()
        } else {
            "best ranked of several usable interfaces (no route told)".to_string()
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

fn is_multi(snap: &Snapshot) -> bool {
    snap.job.is_multi_node()
}

/// Decide `NCCL_SOCKET_IFNAME`, `NCCL_SOCKET_FAMILY`, `GLOO_SOCKET_IFNAME`, `TP_SOCKET_IFNAME` and `POD_IP`,
/// and warn about what is visible and dangerous. Requires `snap.net` to be `Ok` (the caller handles a failed
/// probe). Field cases F1–F12 (shared/FIELD-CASES.md).
pub fn decide_interface(snap: &Snapshot, cfg: &Config, plan: &mut Plan) {
    let Ok(net) = &snap.net else { return };
    let v = Net::new(net, &cfg.exclude);
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
                Some(f) if multi && (f.loopback || is_link_local_ip(&f.addr)) => Some(format!(
                    "NCCL would bootstrap on {} ({}), which cannot reach another node of this {}-node job",
                    f.name,
                    f.addr,
                    snap.job.nnodes.unwrap_or(2)
                )),
                _ => None,
            };
            match fatal {
                Some(why) => {
                    if let Some(p) = own.as_ref() {
                        let new = v.nccl_value(&p.link.name);
                        plan.repair(
                            "NCCL_SOCKET_IFNAME",
                            val,
                            new.clone(),
                            format!("inherited value {val:?} (from {origin}) would fail: {why}; chose {} by {}", p.link.name, p.how),
                        );
                        plan.warn_strict(
                            "inherited-ifname-repaired",
                            format!(
                                "NCCL_SOCKET_IFNAME={val:?} (from {origin}) replaced by {new:?}: {why}. Usable interfaces: {}",
                                v.usable_list(fam)
                            ),
                            format!("remove NCCL_SOCKET_IFNAME from the image or config file, or set it to {new}"),
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
            plan.warn_strict(
                "no-route-decided",
                format!(
                    "no route to the peer and no default route named an interface; took {} as the {}. Usable: {}",
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
        let lacks = format!(
            "this container has no usable network interface but lo (usable: {}){}",
            v.usable_list(fam),
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
                format!(
                    "{lacks}, and this is a {}-node job ({}): no interface can reach another node",
                    snap.job.nnodes.unwrap_or(2),
                    snap.job.source.as_deref().unwrap_or("launcher")
                ),
                "run the container on a network that reaches the other nodes (not --network=none): the default bridge, --network=host, or a Kubernetes pod network",
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
        let addr = net
            .addrs
            .iter()
            .filter(|a| a.index == lo.index && fam.is_none_or(|f| a.family() == f))
            .min_by_key(|a| a.family())
            .map(|a| a.addr);
        let value = v.nccl_value(&lo.name);
        match &inherited {
            Some((val, origin)) if nccl_rules::ifname_counts(val) => {
                plan.repair(
                    "NCCL_SOCKET_IFNAME",
                    val,
                    value.clone(),
                    format!("inherited value {val:?} (from {origin}) matches no usable interface; only lo is left"),
                );
                plan.warn_strict(
                    "inherited-ifname-repaired",
                    format!("NCCL_SOCKET_IFNAME={val:?} (from {origin}) replaced by {value:?}: nothing it names is usable"),
                    "remove NCCL_SOCKET_IFNAME from the image or config file",
                );
            }
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

    // A master on loopback in a multi-node job: the other nodes are told to connect to their own loopback.
    if let (true, Some(p)) = (multi, &snap.peer) {
        if p.addrs.iter().any(|a| a.is_loopback()) {
            plan.warn(
                "peer-is-loopback",
                format!(
                    "the master {} (from {}) is a loopback address in a {}-node job: other nodes cannot reach it",
                    p.host,
                    p.source,
                    snap.job.nnodes.unwrap_or(2)
                ),
                "give the launcher the master's routable address or host name",
            );
        }
    }

    plan.choice = Some(Choice {
        ifname: ifname.clone(),
        addr,
        how: how.clone(),
    });

    // NCCL_SOCKET_FAMILY matching the chosen address.
    if let (Some((val, origin)), Some(a)) = (&fam_repair, addr) {
        let new = Family::of(&a).nccl_name();
        plan.repair(
            "NCCL_SOCKET_FAMILY",
            val,
            new,
            format!(
                "inherited {val} (from {origin}) matches no usable address; {ifname}'s address {a}"
            ),
        );
        plan.warn_strict(
            "inherited-family-repaired",
            format!(
                "NCCL_SOCKET_FAMILY={val} (from {origin}) replaced by {new}: no interface has a usable {} address, so NCCL would bootstrap on a link-local one or find none",
                if val == "AF_INET6" { "IPv6" } else { "IPv4" }
            ),
            format!(
                "remove NCCL_SOCKET_FAMILY from the image or config file, or give the interfaces {} addresses",
                if val == "AF_INET6" { "global IPv6" } else { "IPv4" }
            ),
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
        companion(&v, env, var, &ifname, plan);
    }

    // POD_IP: Paddle's node address (IPv4 only).
    match (env.get("POD_IP"), addr) {
        (None, Some(a @ IpAddr::V4(_))) if !a.is_loopback() => plan.set(
            "POD_IP",
            a.to_string(),
            format!("Paddle advertises POD_IP as this node's address: {ifname}'s address"),
        ),
        (Some(p), Some(a)) if p.parse::<IpAddr>().ok() != Some(a) => plan.warn(
            "advertised-address-differs",
            format!("POD_IP={p} is what Paddle advertises, but NCCL binds {a} on {ifname}"),
            "unset POD_IP or make it the address of the chosen interface",
        ),
        _ => {}
    }
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
        } else if is_link_local_ip(&f.addr) {
            Some("has only a link-local address")
        } else if link.is_some_and(is_bridge_like) {
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

/// `GLOO_SOCKET_IFNAME` / `TP_SOCKET_IFNAME`: exact interface names (PyTorch: a comma list; Paddle: one name).
/// Set when unset; repaired when it holds NCCL syntax or a name that does not exist (Gloo then fails with
/// "Unable to find address for: …"); warned when it names another interface than NCCL's.
fn companion(
    v: &Net,
    env: &std::collections::BTreeMap<String, String>,
    var: &str,
    ifname: &str,
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
                plan.repair(
                    var,
                    val,
                    ifname,
                    format!("inherited {var}={val:?} would fail: {why}"),
                );
                plan.warn_strict(
                    "gloo-ifname-repaired",
                    format!("{var}={val:?} replaced by {ifname:?}: {why}; Gloo would fail with \"Unable to find address for\""),
                    format!("set {var} to one plain interface name, e.g. {ifname}"),
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

/// A proxy variable that does not exempt the peer: launchers' HTTP rendezvous (Paddle's master, torchrun's
/// c10d/etcd) would go to the proxy.
fn proxy_warning(snap: &Snapshot, plan: &mut Plan) {
    let Some(peer) = &snap.peer else { return };
    let set: Vec<&str> = PROXY_VARS
        .iter()
        .copied()
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
    if no_proxy_exempts(&no_proxy, &peer.host, &peer.addrs) {
        return;
    }
    plan.warn(
        "proxy-catches-peer",
        format!(
            "{} is set and NO_PROXY does not exempt the peer {}: the launcher's HTTP rendezvous would go to the proxy",
            set.join(", "),
            peer.host
        ),
        format!("add {} to NO_PROXY and no_proxy", peer.host),
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
    c.into_iter().map(|(l, _)| l.name.clone()).collect()
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
