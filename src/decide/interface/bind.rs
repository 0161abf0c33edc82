//! The interface used ([`super::Bound`]): ncclenv's own pick ([`own_interface`], repairing a fatal inherited
//! list), the loopback fallback or the refusal when no candidate is left ([`loopback_fallback`]), the master
//! on loopback ([`peer_loopback`]) and the `NCCL_SOCKET_FAMILY` export ([`export_family`]).

use super::choice::Pick;
use super::inherited::{InheritedFamily, InheritedList};
use super::view::NetworkView;
use super::{is_multi, Bound};
use crate::config::Config;
use crate::decide::inherit::{settle, Fix, Repair, Said, Verdict};
use crate::findings::Finding;
use crate::nccl_rules::nccl_target;
use crate::plan::Plan;
use crate::snapshot::{Family, Link, Peer, Snapshot};
use std::net::IpAddr;

/// The verdict on an inherited `NCCL_SOCKET_IFNAME` that would fail, for [`settle`]: repair it to `value`
/// (the change's `reason`), saying `inherited-ifname-repaired` with `message` and `remedy`.
fn ifname_fails(
    value: &str,
    reason: String,
    message: String,
    remedy: impl Into<String>,
) -> Verdict {
    Verdict::Fails(Repair {
        new: Some(value.to_string()),
        reason,
        said: Said::new(Finding::InheritedIfnameRepaired, message, remedy),
    })
}

/// Step "own choice used": set `NCCL_SOCKET_IFNAME` to ncclenv's `pick` (repairing a fatal inherited value
/// through [`settle`]), and warn `no-route-decided` when no route supported it.
pub(super) fn own_interface(
    snap: &Snapshot,
    view: &NetworkView,
    pick: &Pick,
    list: &InheritedList,
    family: Option<Family>,
    fix: Fix,
    plan: &mut Plan,
) -> Bound {
    let era = nccl_target(snap).era;
    let value = view.nccl_value_for(pick.link, pick.addr, family, era);
    match list {
        InheritedList::Fatal { inh, why } => {
            let (val, origin) = (inh.value, &inh.origin);
            let verdict = ifname_fails(
                &value,
                format!("inherited value {val:?} (from {origin}) would fail: {why}; chose {} by {}", pick.link.name, pick.how),
                format!(
                    "NCCL_SOCKET_IFNAME={val:?} (from {origin}) replaced by {value:?}: {why}. Usable interfaces: {}",
                    view.usable_list(family)
                ),
                format!("remove NCCL_SOCKET_IFNAME from the image or config file, or set it to {value}"),
            );
            settle(plan, fix, inh, verdict);
        }
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
                format!("{} by {}{why}", pick.link.name, pick.how),
            );
        }
        InheritedList::Kept { .. } => {}
    }
    if !pick.routed {
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
                pick.link.name,
                pick.how,
                view.usable_list(family)
            ),
            "set NCCLENV_PEER (or MASTER_ADDR) to the master's address, or NCCL_SOCKET_IFNAME yourself",
        );
    }
    Bound {
        ifname: pick.link.name.clone(),
        gname: pick
            .addr
            .and_then(|a| a.label.clone())
            .unwrap_or_else(|| pick.link.name.clone()),
        addr: pick.addr.map(|a| a.addr),
        how: pick.how.clone(),
    }
}

/// Step "loopback fallback or refusal", no candidate at all: a multi-node job is refused; without `lo`, or
/// with `lo` down, a warning and nothing set (both `None`); otherwise `lo` with a `loopback-only` warning
/// (repairing an inherited value that counts).
pub(super) fn loopback_fallback(
    snap: &Snapshot,
    cfg: &Config,
    view: &NetworkView,
    list: &InheritedList,
    family: Option<Family>,
    fix: Fix,
    plan: &mut Plan,
) -> Option<Bound> {
    let net = view.net;
    let lo = net.links.iter().find(|l| l.loopback);
    let lo_down = lo.filter(|l| !l.up || !l.running);
    let lacks = lacks_text(cfg, view, family, lo_down);
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
    let value = view.nccl_value(&lo.name);
    match list.counted() {
        Some(inh) => {
            let (val, origin) = (inh.value, &inh.origin);
            let verdict = ifname_fails(
                &value,
                format!("inherited value {val:?} (from {origin}) matches no usable interface; only lo is left"),
                format!("NCCL_SOCKET_IFNAME={val:?} (from {origin}) replaced by {value:?}: nothing it names is usable"),
                "remove NCCL_SOCKET_IFNAME from the image or config file",
            );
            settle(plan, fix, inh, verdict);
        }
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
    view: &NetworkView,
    family: Option<Family>,
    lo_down: Option<&Link>,
) -> String {
    let net = view.net;
    let excluded: Vec<String> = NetworkView::new(net, &[])
        .candidates(family)
        .iter()
        .map(|(l, _)| l.name.clone())
        .collect();
    format!(
        "this container has no usable network interface but lo (usable: {}){}{}",
        view.usable_list(family),
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
pub(super) fn peer_loopback(snap: &Snapshot, peer: &Peer, own: Option<IpAddr>, plan: &mut Plan) {
    let lo: Vec<String> = peer
        .addrs
        .iter()
        .filter(|a| a.is_loopback())
        .map(|a| a.to_string())
        .collect();
    if lo.is_empty() {
        return;
    }
    let nnodes = snap.job.nnodes.unwrap_or(2);
    let literal = peer.host.parse::<IpAddr>().is_ok();
    let here = if literal {
        format!(
            "the master {} (from {}) is a loopback address",
            peer.host, peer.source
        )
    } else {
        format!(
            "the master's name {} (from {}) resolves to a loopback address here ({})",
            peer.host,
            peer.source,
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
            .find(|a| !a.addr.is_loopback() && peer.addrs.contains(&a.addr))
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
pub(super) fn export_family(family: &InheritedFamily, bound: &Bound, fix: Fix, plan: &mut Plan) {
    let ifname = &bound.ifname;
    if let (Some(inh), Some(a)) = (&family.repair, bound.addr) {
        let (val, origin) = (inh.value, &inh.origin);
        let new = Family::of(&a).nccl_name();
        settle(
            plan,
            fix,
            inh,
            Verdict::Fails(Repair {
                new: Some(new.to_string()),
                reason: format!(
                    "inherited {val} (from {origin}) matches no usable address; {ifname}'s address {a}"
                ),
                said: Said::new(
                    Finding::InheritedFamilyRepaired,
                    format!(
                        "NCCL_SOCKET_FAMILY={val} (from {origin}) replaced by {new}: no interface has a usable {} address, so NCCL would bootstrap on a link-local one or find none",
                        if val == "AF_INET6" { "IPv6" } else { "IPv4" }
                    ),
                    format!(
                        "remove NCCL_SOCKET_FAMILY from the image or config file, or give the interfaces {} addresses",
                        if val == "AF_INET6" { "global IPv6" } else { "IPv4" }
                    ),
                ),
            }),
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
