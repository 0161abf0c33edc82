//! The inherited `NCCL_SOCKET_FAMILY` ([`InheritedFamily`]) and `NCCL_SOCKET_IFNAME` ([`InheritedList`]),
//! evaluated as NCCL would with the NCCL the command loads (`crate::nccl_rules`, `docs/nccl-rules.md`):
//! ignored, kept (with its risks and entries that match nothing warned) or fatal.

use super::view::NetworkView;
use super::{is_multi, Bound};
use crate::decide::inherit::{settle, Fix, Inherited, Said, Verdict};
use crate::findings::Finding;
use crate::nccl_rules::{self, Found, NcclTarget, Origin};
use crate::plan::Plan;
use crate::snapshot::{is_link_local_ip, Family, Snapshot};

/// `NCCL_SOCKET_FAMILY` as inherited and as the choice uses it.
pub(super) struct InheritedFamily<'s> {
    /// The value NCCL sees and where it came from ([`Inherited::nccl`]).
    pub(super) value: Option<Inherited<'s>>,
    /// The family the choice is restricted to: the inherited one when it counts
    /// ([`nccl_rules::socket_family`]) and some candidate has it; `None` otherwise.
    pub(super) used: Option<Family>,
    /// The inherited value and its origin when it counts but no candidate has that family (AF_INET6 on an
    /// IPv4-only host: NCCL would bootstrap on a link-local address or find nothing): ncclenv chooses
    /// without it and repairs it ([`export_family`](super::bind::export_family)).
    pub(super) repair: Option<Inherited<'s>>,
}

/// Step "inherited family": read `NCCL_SOCKET_FAMILY`; warn (`family-ignored`, through [`settle`]) when NCCL
/// ignores its value. A value no candidate has is repaired later, once the interface is bound
/// ([`export_family`](super::bind::export_family)).
pub(super) fn inherited_family<'s>(
    snap: &'s Snapshot,
    view: &NetworkView,
    fix: Fix,
    plan: &mut Plan,
) -> InheritedFamily<'s> {
    let value = Inherited::nccl("NCCL_SOCKET_FAMILY", snap);
    let counts = nccl_rules::socket_family(value.as_ref().map(|i| i.value));
    if let (Some(inh), None) = (&value, counts) {
        let (val, origin) = (inh.value, &inh.origin);
        let ignored = Said::new(
            Finding::FamilyIgnored,
            format!("NCCL ignores NCCL_SOCKET_FAMILY={val:?} (from {origin}): only AF_INET and AF_INET6 count"),
            "set NCCL_SOCKET_FAMILY=AF_INET or AF_INET6, or unset it",
        );
        settle(plan, fix, inh, Verdict::Ignored(ignored));
    }
    let mut used = counts;
    let mut repair = None;
    if let (Some(f), Some(inh)) = (counts, &value) {
        if view.candidates(Some(f)).is_empty() && !view.candidates(None).is_empty() {
            used = None;
            repair = Some(inh.clone());
        }
    }
    InheritedFamily {
        value,
        used,
        repair,
    }
}

/// The inherited `NCCL_SOCKET_IFNAME`, evaluated as NCCL would with the NCCL the command loads.
pub(super) enum InheritedList<'s> {
    /// Not set in the environment or a configuration file.
    Absent,
    /// Set, but NCCL ignores it (one character or less, `ifname_counts`): warned, ncclenv sets its choice.
    Ignored,
    /// NCCL would work with it: kept; `first` is NCCL's first match, the interface it bootstraps on.
    Kept { inh: Inherited<'s>, first: Found },
    /// NCCL would fail with it (`why`): repaired with ncclenv's own choice, or with `lo` when there is none.
    Fatal { inh: Inherited<'s>, why: String },
}

impl<'s> InheritedList<'s> {
    /// The value with its origin when NCCL takes it into account (kept or fatal).
    pub(super) fn counted(&self) -> Option<&Inherited<'s>> {
        match self {
            InheritedList::Kept { inh, .. } | InheritedList::Fatal { inh, .. } => Some(inh),
            InheritedList::Absent | InheritedList::Ignored => None,
        }
    }
}

/// Step "inherited interface list": evaluate `NCCL_SOCKET_IFNAME` with `family` (the inherited one, when
/// used). Through [`settle`]: warns `ifname-ignored` for a value NCCL ignores; keeps a value that works,
/// with its risks ([`risk_warnings`], unless the job is known to be single-node) and entries matching
/// nothing ([`unmatched_entries`]). A fatal value is repaired once ncclenv's own choice is known
/// ([`own_interface`](super::bind::own_interface), [`loopback_fallback`](super::bind::loopback_fallback)).
pub(super) fn inherited_list<'s>(
    snap: &'s Snapshot,
    view: &NetworkView,
    family: Option<Family>,
    target: &NcclTarget,
    fix: Fix,
    plan: &mut Plan,
) -> InheritedList<'s> {
    let Some(inh) = Inherited::nccl("NCCL_SOCKET_IFNAME", snap) else {
        return InheritedList::Absent;
    };
    let (val, origin) = (inh.value, &inh.origin);
    if !nccl_rules::ifname_counts(val) {
        let ignored = Said::new(
            Finding::IfnameIgnored,
            format!("NCCL ignores NCCL_SOCKET_IFNAME={val:?} (from {origin}): a value of one character or less counts as unset"),
            "remove it; ncclenv sets its own choice",
        );
        settle(plan, fix, &inh, Verdict::Ignored(ignored));
        return InheritedList::Ignored;
    }
    let net = view.net;
    let pick = nccl_rules::nccl_pick(net, Some(val), family, target.era);
    if let Some(why) = fatal_reason(snap, view, val, &pick.found, target) {
        return InheritedList::Fatal { inh, why };
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
    let mut said = Vec::new();
    if !snap.job.is_single_node() {
        risk_warnings(
            view,
            val,
            origin,
            &final_pick.found,
            &dropped,
            final_fam,
            &mut said,
        );
    }
    unmatched_entries(view, val, origin, &mut said);
    let verdict = if said.is_empty() {
        Verdict::Works
    } else {
        Verdict::Risky(said)
    };
    settle(plan, fix, &inh, verdict);
    InheritedList::Kept { inh, first }
}

/// Why NCCL would fail with the inherited list `val` whose matches are `found`: no match (NCCL fails with
/// "Bootstrap : no socket interface found"); a first match without carrier (NCCL before 2.28 bootstraps on it,
/// F8); in a multi-node job a first match on loopback or link-local only. `None` when it works.
fn fatal_reason(
    snap: &Snapshot,
    view: &NetworkView,
    val: &str,
    found: &[Found],
    target: &NcclTarget,
) -> Option<String> {
    match found.first() {
        None => Some(format!(
            "it matches no interface that is RUNNING and has an address, so NCCL fails with \"Bootstrap : no socket interface found\"{}",
            {
                let down: Vec<&str> = view
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
                && (f.loopback || (is_link_local_ip(&f.addr) && !view.link_local_ok(f.index, &f.addr))) =>
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

/// Step "inherited list kept": NCCL's first match of the inherited `NCCL_SOCKET_IFNAME` is the interface
/// every library uses; nothing is set for NCCL.
pub(super) fn kept_interface(view: &NetworkView, inh: &Inherited, first: &Found) -> Bound {
    let (value, origin) = (inh.value, &inh.origin);
    Bound {
        ifname: view
            .link(first.index)
            .map_or_else(|| first.name.clone(), |l| l.name.clone()),
        gname: first.name.clone(),
        addr: Some(first.addr),
        how: format!("inherited NCCL_SOCKET_IFNAME={value} (from {origin}), NCCL's first match"),
    }
}

/// Warnings for an inherited `NCCL_SOCKET_IFNAME` that works but is risky for a job not known to be
/// single-node: a match that is loopback, link-local only, or a container bridge; an entry that
/// prefix-matches several interfaces (NET/Socket stripes over all of them, src/transport/net_socket.cc).
fn risk_warnings(
    view: &NetworkView,
    val: &str,
    origin: &Origin,
    found: &[Found],
    dropped: &[&Found],
    fam: Family,
    said: &mut Vec<Said>,
) {
    for f in found {
        if let Some(why) = risky_match(view, f) {
            said.push(Said::new(
                Finding::InheritedIfnameRisky,
                format!(
                    "NCCL_SOCKET_IFNAME={val:?} (from {origin}) selects {} ({}), which {why}: another node cannot reach it",
                    f.name, f.addr
                ),
                "set NCCL_SOCKET_IFNAME to the interface that routes to the other nodes, or unset it and let ncclenv choose",
            ));
        }
    }
    prefix_warnings(val, origin, found, dropped, fam, said);
}

/// Why another node cannot reach NCCL on the match `f`, when it cannot: loopback, no carrier, link-local only
/// (unless the peer is on that link), a container bridge.
fn risky_match(view: &NetworkView, f: &Found) -> Option<&'static str> {
    if f.loopback {
        Some("is the loopback interface")
    } else if !f.running {
        Some("has no carrier (NCCL before 2.28 still stripes NET/Socket traffic over it)")
    } else if is_link_local_ip(&f.addr) && !view.link_local_ok(f.index, &f.addr) {
        Some("has only a link-local address")
    } else if view.link(f.index).is_some_and(|l| view.container_bridge(l)) {
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
    said: &mut Vec<Said>,
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
            said.push(Said::new(
                Finding::InheritedIfnamePrefix,
                format!(
                    "NCCL_SOCKET_IFNAME={val:?} (from {origin}): {:?} is a prefix and also matches {}; NET/Socket would stripe over all of them{}",
                    e.prefix,
                    extra.join(", "),
                    if gone.is_empty() { String::new() } else { format!(" (it also names {})", gone.join(", ")) }
                ),
                format!("write ={} to match that interface exactly", e.prefix),
            ));
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
fn unmatched_entries(view: &NetworkView, val: &str, origin: &Origin, said: &mut Vec<Said>) {
    let list = nccl_rules::parse_if_list(val);
    if list.exclude {
        return;
    }
    let dead: Vec<String> = list
        .entries
        .iter()
        .filter(|e| e.prefix.chars().any(char::is_whitespace))
        .filter(|e| {
            !view
                .net
                .links
                .iter()
                .any(|l| list.entry_matches(e, &l.name))
        })
        .map(|e| format!("{:?}", e.prefix))
        .collect();
    if !dead.is_empty() {
        said.push(Said::new(
            Finding::InheritedIfnameEntryUnmatched,
            format!(
                "NCCL_SOCKET_IFNAME={val:?} (from {origin}): the entries {} can match no interface on any node{}",
                dead.join(", "),
                whitespace_hint(val)
            ),
            "remove the spaces after the commas",
        ));
    }
}
