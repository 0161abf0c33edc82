//! The agreement: one pure function from the nodes' reports and probe results to the fleet's verdict
//! ([`agree`]). The master runs it once and sends its result to every node, so that every node refuses,
//! repairs and warns alike. No I/O here: it is tested with plain values.
//!
//! The rules (see `docs/preflight.md` for the NCCL behaviour behind each):
//!
//! | kind | finding | why NCCL cannot survive it |
//! |---|---|---|
//! | refuse | `preflight-node-refused` | a node refuses on its own: the others would wait for it forever |
//! | refuse | `preflight-duplicate-address` | two nodes advertise one address: a peer connects to the wrong node |
//! | refuse | `preflight-family-differs` | `NCCL_SOCKET_FAMILY` differs: IPv4 and IPv6 nodes cannot connect |
//! | refuse | `preflight-nccl-version-differs` | NCCL refuses mismatched versions after init (NVIDIA/nccl#1267) |
//! | refuse | `preflight-unreachable` | a node's ephemeral-port listener cannot be reached: NCCL listens there |
//! | repair | `preflight-ib-disabled` | IB off on some nodes: every node must use the same transport |
//! | warn (strict) | `preflight-absent` | fewer nodes met than the job has (fail open: a pod may be late) |
//! | warn | `preflight-nat`, `preflight-mtu-differs`, `preflight-nccl-env-differs`, `preflight-ncclenv-version-differs` | risky |
//! | info | `preflight-passed` | every node met and the fleet agrees |
//!
//! The remedies of the disagreements `ncclenv explain` also judges from NCCL's logs (NAT'd addresses,
//! families, NCCL versions, IB on some nodes) are [`crate::cross_node`]'s, one text for both.

use super::protocol::{
    FleetRepair, FleetVerdict, NodeReport, ProbeOutcome, ProbeReport, MAX_LISTED,
};
use crate::cross_node::Rule;
use crate::findings::Finding;
use crate::plan::{Note, Plan, Severity, Verdict};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// One node as the master saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// What the node said about itself.
    pub report: NodeReport,
    /// The source address of its connection to the master port (`None` for the master itself).
    pub seen_from: Option<IpAddr>,
    /// The outcome of its probe of its ring successor; `None` when it never reported one (it was lost after
    /// arriving, or it had nobody to probe).
    pub probe: Option<ProbeReport>,
}

/// A node of this job's master endpoint that says the job has another node count (`--nnodes`): it cannot
/// meet the others, but it is named and gets the verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Misfit {
    /// What the node said about itself.
    pub report: NodeReport,
    /// The source address of its connection to the master port.
    pub seen_from: IpAddr,
    /// The node count it says.
    pub nnodes: u32,
}

/// Everything the master knows when the meeting is over.
#[derive(Debug, Clone, PartialEq)]
pub struct Meeting {
    /// Nodes the job has (`--nnodes`).
    pub expected: u32,
    /// Nodes that arrived, the master first, then in order of arrival; the ring is this order.
    pub members: Vec<Member>,
    /// Indices of members that arrived but were lost before reporting their probe (connection closed or
    /// timed out), each once, in ascending order.
    pub lost: Vec<usize>,
    /// How long the master waited for the nodes, in seconds (for messages).
    pub waited_s: u64,
    /// Nodes of this master endpoint that say another node count, in order of arrival.
    pub misfits: Vec<Misfit>,
    /// When nobody came and the master's own connections to the master endpoint never reached it: that, in
    /// words (`node … listens as the master (…), but its own connection … did not reach it (…)`).
    pub not_reached: Option<String>,
    /// What else came to the master port, so that a node is called "missing: nothing came from it" only when
    /// nothing did.
    pub heard: Heard,
}

/// What came to the master port besides the members present: nodes that said hello and left, connections
/// that never sent a whole hello, and preflights of another master endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Heard {
    /// Nodes that said hello and left before the meeting ended and did not come back, each by name and how it
    /// left (`n3 (10.0.0.3) (connection closed)`), in order of arrival.
    pub left: Vec<String>,
    /// Connections that never sent a whole, valid hello (silent, closed, pushed out, cut at the end): a
    /// stranger, or a node whose hello a lossy link held back.
    pub unheard: u32,
    /// Connections that spoke the preflight with another master endpoint in the job key, or another protocol
    /// version: another job on this port, or a node of this job whose master address resolves differently.
    pub foreign: u32,
}

/// The ring successor of node `i` among `n` nodes: node `i` probes `(i + 1) % n`, so every node opens one
/// connection and accepts one. `None` when `n < 2`.
pub fn ring_target(i: usize, n: usize) -> Option<usize> {
    (n >= 2).then(|| (i + 1) % n)
}

/// Up to [`MAX_LISTED`] names joined with `, `, then `and N more`.
pub fn list(names: &[String]) -> String {
    let mut s = names
        .iter()
        .take(MAX_LISTED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > MAX_LISTED {
        s.push_str(&format!(" and {} more", names.len() - MAX_LISTED));
    }
    s
}

/// Remedy for a node behind NAT: the cross-node rule's, shared with `explain` ([`Rule::NatAddress`]).
const REMEDY_NAT: &str = Rule::NatAddress.remedy();
/// Remedy for a firewall on ephemeral ports.
const REMEDY_FIREWALL: &str = "allow inbound TCP between the nodes on the ephemeral port range \
    (net.ipv4.ip_local_port_range, 32768-60999 by default), not only on the master port: NCCL listens on \
    ephemeral ports";

/// The fleet's verdict. Certain failures refuse (the first one found is the reason every node prints; all
/// are findings); repairable differences become repairs every node applies; risky ones warnings. When any
/// node runs with `NCCLENV_STRICT=1`, a finding marked strict refuses too. See the module table.
pub fn agree(meeting: &Meeting) -> FleetVerdict {
    let mut plan = Plan::default();
    let mut repairs = Vec::new();
    let names: Vec<String> = meeting.members.iter().map(|x| x.report.name()).collect();
    let present = meeting.members.len().saturating_sub(meeting.lost.len()) as u32;

    // Certain failures: each a finding, the first also the refusal.
    let certain = cap_per_code(certain_failures(meeting, &names));
    for (code, message, remedy) in &certain {
        plan.finding(*code, message.clone(), remedy.clone());
    }
    if let Some((code, message, remedy)) = certain.first() {
        plan.refuse(
            code.code(),
            format!("preflight [{code}]: {message}"),
            remedy.clone(),
        );
    }

    let disputed = shape_findings(&mut plan, meeting, &names, present);
    absence(&mut plan, meeting, &names, present);
    ib_repair(&mut plan, &mut repairs, meeting, &names);
    risky(&mut plan, meeting, &names);

    // Strict: any node strict makes the fleet strict, so every node gets the same verdict.
    let strict = meeting.members.iter().any(|x| x.report.strict)
        || meeting.misfits.iter().any(|x| x.report.strict);
    if strict {
        if let Some(w) = plan.warnings.iter().find(|w| w.strict_refuses).cloned() {
            plan.refuse(
                &w.code,
                format!(
                    "preflight [{}]: NCCLENV_STRICT=1 (on at least one node) refuses: {}",
                    w.code, w.message
                ),
                w.remedy,
            );
        }
    }
    // Passed only when every node met: with nodes absent, `preflight-absent` says how many did.
    // Not while the nodes disagree about the job's shape: they do not "agree".
    if plan.verdict == Verdict::Proceed && present >= meeting.expected && !disputed {
        let probes = meeting
            .members
            .iter()
            .filter(|x| {
                x.probe
                    .as_ref()
                    .is_some_and(|p| p.outcome == ProbeOutcome::Connected)
            })
            .count();
        plan.finding(
            Finding::PreflightPassed,
            format!(
                "{present} of {} nodes met and agree; {probes} path(s) to the nodes' ephemeral ports proven",
                meeting.expected
            ),
            "nothing to do",
        );
    }
    FleetVerdict {
        present,
        expected: meeting.expected,
        refuse: match plan.verdict {
            Verdict::Refuse {
                reason,
                remedy,
                code,
            } => Some(Note {
                code,
                severity: Severity::Warn,
                message: reason,
                remedy,
                strict_refuses: false,
            }),
            Verdict::Proceed => None,
        },
        repairs,
        findings: plan.warnings,
        network: None,
    }
}

/// The certain failures, each a finding (code, message, remedy): a node refusing on its own, one address
/// on two nodes, two families, two NCCL versions, a probe that failed.
fn certain_failures(meeting: &Meeting, names: &[String]) -> Vec<(Finding, String, String)> {
    let mut certain: Vec<(Finding, String, String)> = Vec::new();
    for (i, x) in meeting.members.iter().enumerate() {
        if let Some(r) = &x.report.refused {
            certain.push((
                Finding::PreflightNodeRefused,
                format!("node {} refuses on its own: {r}", names[i]),
                format!("fix {} (its own log says what it lacks)", names[i]),
            ));
        }
    }
    let by_addr = group(meeting, |x| Some(x.report.addr.to_string()));
    for (addr, nodes) in by_addr.iter().filter(|(_, v)| v.len() > 1) {
        certain.push((
            Finding::PreflightDuplicateAddress,
            format!(
                "{} nodes advertise the same address {addr}: {}; NCCL's peers would connect to the wrong node",
                nodes.len(),
                list(nodes)
            ),
            REMEDY_NAT.to_string(),
        ));
    }
    let families = group(meeting, |x| Some(x.report.family.nccl_name().to_string()));
    if families.len() > 1 {
        certain.push((
            Finding::PreflightFamilyDiffers,
            format!(
                "the nodes bootstrap on different address families ({}); NCCL cannot connect an IPv4 node to an IPv6 one",
                describe_groups(&families)
            ),
            Rule::FamiliesDiffer.remedy().into(),
        ));
    }
    let versions = group(meeting, |x| x.report.nccl_version.clone());
    if versions.len() > 1 {
        certain.push((
            Finding::PreflightNcclVersionDiffers,
            format!(
                "the nodes load different NCCL versions ({}); NCCL refuses mismatched versions only after init (NVIDIA/nccl#1267)",
                describe_groups(&versions)
            ),
            Rule::NcclVersionsDiffer.remedy().into(),
        ));
    }
    let n = meeting.members.len();
    for (i, x) in meeting.members.iter().enumerate() {
        let (Some(p), Some(j)) = (&x.probe, ring_target(i, n)) else {
            continue;
        };
        // Unanswered: the connection was made (the path NCCL needs is open), nothing failed.
        if matches!(
            p.outcome,
            ProbeOutcome::Connected | ProbeOutcome::Unanswered
        ) {
            continue;
        }
        let t = &meeting.members[j];
        let (cause, remedy) = likely_cause(p.outcome, t, &names[j], &names[i]);
        let at = match t.report.probe_port {
            Some(port) => format!("{}:{port}", fmt_addr(t.report.addr)),
            None => t.report.addr.to_string(),
        };
        certain.push((
            Finding::PreflightUnreachable,
            format!(
                "node {} cannot be reached at {at} ({}, where NCCL will listen) from {}: {}; likely cause: {cause}",
                names[j],
                t.report.ifname,
                names[i],
                outcome_text(p)
            ),
            remedy.to_string(),
        ));
    }
    certain
}

/// The nodes disagree about the job: another node count (`preflight-nnodes-differs`), node ranks that
/// conflict (`preflight-node-ranks`), a master the endpoint does not lead to (`preflight-master-unreachable`).
/// True when the shape is in dispute (then the fleet did not "agree").
fn shape_findings(plan: &mut Plan, meeting: &Meeting, names: &[String], present: u32) -> bool {
    // Disagreement about the job: named, strict refuses.
    if !meeting.misfits.is_empty() {
        plan.finding(
            Finding::PreflightNnodesDiffers,
            format!(
                "{}: the nodes of the master endpoint disagree about the job's node count (--nnodes); they cannot \
                 all meet, and the launcher's rendezvous waits for nodes that never come",
                nnodes_text(meeting, names)
            ),
            "give every node the same node count (the launcher's --nnodes, PET_NNODES, NCCLENV_NNODES) in the \
             job spec",
        );
    }
    let ranks = rank_conflicts(meeting, names, present);
    let disputed = !meeting.misfits.is_empty() || ranks.is_some();
    if let Some(text) = ranks {
        plan.finding(
            Finding::PreflightNodeRanks,
            format!("the nodes' ranks conflict: {text}; torchrun's static rendezvous cannot start such a job"),
            "give each node its own node rank from 0 to the node count - 1 (--node-rank, PET_NODE_RANK, \
             NODE_RANK; a copy-pasted replica spec?)",
        );
    }

    if let Some(text) = &meeting.not_reached {
        plan.finding(
            Finding::PreflightMasterUnreachable,
            format!(
                "{text}, and no other node said hello here: the master endpoint leads elsewhere or nowhere (another node that says \
                 node rank 0, a Service without this node as its endpoint, or a network that does not let a pod \
                 reach itself through its Service)"
            ),
            "make the master address lead to the node of rank 0 (the Service's selector, the node ranks), or \
             name the master by this node's own address",
        );
    }

    disputed
}

/// Absence: fail open, strict refuses.
fn absence(plan: &mut Plan, meeting: &Meeting, names: &[String], present: u32) {
    // Nodes that say another count are not missing: the node count is in dispute once they reach the smallest
    // count any node says.
    let least = meeting
        .misfits
        .iter()
        .map(|x| x.nnodes)
        .fold(meeting.expected, u32::min);
    let misfits = meeting.misfits.len() as u32;
    if present + misfits < least {
        let lost: Vec<String> = meeting
            .lost
            .iter()
            .filter_map(|&i| names.get(i).cloned())
            .collect();
        plan.finding(
            Finding::PreflightAbsent,
            format!(
                "{present} of {} nodes met within {} s ({}); running anyway: a node may start late, but NCCL \
                 waits for every rank",
                meeting.expected,
                meeting.waited_s,
                absence_parts(meeting, &lost, present + misfits)
            ),
            "look at the missing nodes (scheduled? started? can they reach the master port?); \
             NCCLENV_STRICT=1 refuses instead",
        );
    }
}

/// What became of the nodes that did not meet, in words, each part said only as observed: `2 missing: nothing
/// came from them` only when nothing else came to the master port; else what did (nodes that said hello and
/// left, lost after arriving, connections without a whole hello, another master endpoint's preflight, nodes
/// that say another node count). `counted`: the members present and the misfits.
fn absence_parts(meeting: &Meeting, lost: &[String], counted: u32) -> String {
    let heard = &meeting.heard;
    let known = (lost.len() + heard.left.len()) as u32;
    let missing = meeting.expected.saturating_sub(counted + known);
    let mut parts = Vec::new();
    if missing > 0 {
        let them = if missing == 1 { "it" } else { "them" };
        parts.push(if heard.unheard == 0 && heard.foreign == 0 {
            format!("{missing} missing: nothing came from {them}")
        } else {
            format!("{missing} missing: no hello came from {them}")
        });
    }
    if !heard.left.is_empty() {
        parts.push(format!(
            "said hello and left before the meeting ended: {}",
            list(&heard.left)
        ));
    }
    if !lost.is_empty() {
        parts.push(format!("lost after arriving: {}", list(lost)));
    }
    if heard.unheard > 0 {
        parts.push(format!(
            "{} connection(s) to the master port sent no whole hello (strangers, or a node on a link that lost \
             it)",
            heard.unheard
        ));
    }
    if heard.foreign > 0 {
        parts.push(format!(
            "{} connection(s) spoke the preflight of another master endpoint or version (another job on this \
             port, or this job's master address resolving differently on that node)",
            heard.foreign
        ));
    }
    if !meeting.misfits.is_empty() {
        parts.push(format!(
            "{} more came that say another node count",
            meeting.misfits.len()
        ));
    }
    parts.join("; ")
}

/// IB disabled on some nodes: disabled on all (a repair every node applies).
fn ib_repair(plan: &mut Plan, repairs: &mut Vec<FleetRepair>, meeting: &Meeting, names: &[String]) {
    let member_count = meeting.members.len();
    // Repair: IB disabled on some nodes → on all.
    let ib_off: Vec<usize> = (0..member_count)
        .filter(|&i| ib_disabled(&meeting.members[i].report))
        .collect();
    if !ib_off.is_empty() && ib_off.len() < member_count {
        let why: Vec<String> = ib_off
            .iter()
            .map(|&i| {
                let r = &meeting.members[i].report;
                let reason = r
                    .decided
                    .get("NCCL_IB_DISABLE")
                    .cloned()
                    .unwrap_or_else(|| {
                        format!(
                            "inherited NCCL_IB_DISABLE={}",
                            r.nccl_env.get("NCCL_IB_DISABLE").map_or("", |v| v.as_str())
                        )
                    });
                format!("{}: {reason}", names[i])
            })
            .collect();
        let reason = format!(
            "InfiniBand is disabled on {} of {member_count} nodes ({}); every node must use the same NCCL network transport, so it is disabled on all",
            ib_off.len(),
            list(&why)
        );
        plan.finding(
            Finding::PreflightIbDisabled,
            reason.clone(),
            Rule::IbMixed.remedy(),
        );
        repairs.push(FleetRepair {
            name: "NCCL_IB_DISABLE".to_string(),
            value: "1".to_string(),
            reason,
        });
    }
}

/// Risky differences: NAT that a neighbour got through, MTUs, `NCCL_*` values, ncclenv versions.
fn risky(plan: &mut Plan, meeting: &Meeting, names: &[String]) {
    let n = meeting.members.len();
    // Risky differences. A node behind NAT whose ring neighbour reached it anyway (a routed bridge that also
    // masquerades): the predecessor's probe is the proof.
    let natted: Vec<String> = (0..n)
        .filter_map(|i| {
            let x = &meeting.members[i];
            let seen = x.seen_from.filter(|s| *s != x.report.addr)?;
            let k = (i + n - 1) % n;
            let reached = n >= 2
                && meeting.members[k]
                    .probe
                    .as_ref()
                    .is_some_and(|p| p.outcome == ProbeOutcome::Connected);
            reached.then(|| format!("{} (seen from {seen})", names[i]))
        })
        .collect();
    if !natted.is_empty() {
        plan.finding(
            Finding::PreflightNat,
            format!(
                "{} node(s) advertise another address than their connection to the master came from: {}; they sit \
                 behind NAT or route to the master over another interface; their ring neighbour reached them, other \
                 nodes may not",
                natted.len(),
                list(&natted)
            ),
            REMEDY_NAT,
        );
    }
    let mtus = group(meeting, |x| x.report.mtu.map(|v| v.to_string()));
    if mtus.len() > 1 {
        plan.finding(
            Finding::PreflightMtuDiffers,
            format!(
                "the bootstrap interfaces have different MTUs ({}); large transfers may stall where a path drops the larger frames",
                describe_groups(&mtus)
            ),
            "set one MTU on every node's NCCL interface",
        );
    }
    let reports: Vec<&NodeReport> = meeting.members.iter().map(|x| &x.report).collect();
    for d in super::mtu::differences(&reports) {
        plan.finding(
            Finding::PreflightMtuDiffers,
            format!("a network NCCL uses has different MTUs across the nodes: {d}; RDMA and NET/Socket transfers stall where the larger frames are dropped (NVIDIA/nccl#1524)"),
            "set one MTU on that network's interface on every node",
        );
    }
    let env_diffs = nccl_env_differences(meeting);
    if !env_diffs.is_empty() {
        plan.finding(
            Finding::PreflightNcclEnvDiffers,
            format!(
                "NCCL variables differ across the nodes: {}",
                env_diffs
                    .iter()
                    .take(MAX_LISTED)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            "give every node the same NCCL_* settings (image, job spec, /etc/nccl.conf)",
        );
    }
    let own = group(meeting, |x| Some(x.report.ncclenv_version.clone()));
    if own.len() > 1 {
        plan.finding(
            Finding::PreflightNcclenvVersionDiffers,
            format!(
                "the nodes run different ncclenv versions ({}); they may decide differently",
                describe_groups(&own)
            ),
            "use one ncclenv version in every node's image",
        );
    }
}

/// `node c (10.0.0.3) says 4 nodes, the others 3 (a (10.0.0.1), b (10.0.0.2))`: the nodes present grouped by
/// the node count they say (the members say the master's), the largest group (on a tie, the master's) as
/// "the others".
fn nnodes_text(meeting: &Meeting, names: &[String]) -> String {
    let lost = lost_flags(meeting);
    let mut groups: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (i, n) in names.iter().enumerate() {
        if !lost[i] {
            groups.entry(meeting.expected).or_default().push(n.clone());
        }
    }
    for x in &meeting.misfits {
        groups.entry(x.nnodes).or_default().push(x.report.name());
    }
    let major = groups
        .iter()
        .max_by_key(|(n, v)| (v.len(), **n == meeting.expected))
        .map_or(meeting.expected, |(n, _)| *n);
    let others: Vec<String> = groups
        .iter()
        .filter(|(n, _)| **n != major)
        .map(|(n, v)| {
            let (noun, verb) = if v.len() == 1 {
                ("node", "says")
            } else {
                ("nodes", "say")
            };
            format!("{noun} {} {verb} {n} nodes", list(v))
        })
        .collect();
    let rest = groups.get(&major).map(|v| list(v)).unwrap_or_default();
    format!("{}, the others {major} ({rest})", others.join("; "))
}

/// The node ranks of the members present that conflict, in words: a rank two nodes say (with the nodes), a
/// rank out of range, and, when every node of the job is present and says its rank, the ranks nobody says;
/// `None` when they agree (or no node says a rank).
fn rank_conflicts(meeting: &Meeting, names: &[String], present: u32) -> Option<String> {
    let lost = lost_flags(meeting);
    let mut by: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    let mut unknown = 0;
    for (i, x) in meeting.members.iter().enumerate() {
        if lost[i] {
            continue;
        }
        match x.report.node_rank {
            Some(r) => by.entry(r).or_default().push(names[i].clone()),
            None => unknown += 1,
        }
    }
    let twice: Vec<String> = by
        .iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(r, v)| format!("node rank {r} is said by {}", list(v)))
        .collect();
    let outside: Vec<String> = by
        .range(meeting.expected..)
        .map(|(r, v)| {
            format!(
                "node rank {r} of {} is out of range for {} nodes",
                list(v),
                meeting.expected
            )
        })
        .collect();
    let mut parts = Vec::new();
    for (all, what) in [(twice, "ranks said twice"), (outside, "ranks out of range")] {
        parts.extend(all.iter().take(MAX_LISTED).cloned());
        if all.len() > MAX_LISTED {
            parts.push(format!("{} more {what}", all.len() - MAX_LISTED));
        }
    }
    if unknown == 0 && present >= meeting.expected {
        let missing: Vec<String> = (0..meeting.expected)
            .filter(|r| !by.contains_key(r))
            .map(|r| r.to_string())
            .collect();
        if !missing.is_empty() {
            parts.push(format!("no node says node rank {}", list(&missing)));
        }
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// For each member, whether it was lost after arriving.
fn lost_flags(meeting: &Meeting) -> Vec<bool> {
    let mut lost = vec![false; meeting.members.len()];
    for &i in &meeting.lost {
        if let Some(f) = lost.get_mut(i) {
            *f = true;
        }
    }
    lost
}

/// At most [`MAX_LISTED`] findings per code, then one that counts the rest, so that a verdict for 10,000
/// nodes behind one broken switch still fits in one frame.
fn cap_per_code(all: Vec<(Finding, String, String)>) -> Vec<(Finding, String, String)> {
    let total = |code: Finding| all.iter().filter(|f| f.0 == code).count();
    let mut out: Vec<(Finding, String, String)> = Vec::new();
    for f in &all {
        let kept = out.iter().filter(|o| o.0 == f.0).count();
        if kept < MAX_LISTED {
            out.push(f.clone());
        } else if kept == MAX_LISTED {
            let total = total(f.0);
            out.push((
                f.0,
                format!(
                    "{} more finding(s) like these ({total} in all)",
                    total - MAX_LISTED
                ),
                f.2.clone(),
            ));
        }
    }
    out
}

/// True when the node's command gets `NCCL_IB_DISABLE` set to a value NCCL reads as turning IB off: any
/// non-zero integer in any base (`ncclParamIbDisable`, src/transport/net_ib.cc; read as `decide` reads it,
/// `decide::switches::IB`).
pub fn ib_disabled(r: &NodeReport) -> bool {
    ib_disabled_env(&r.nccl_env)
}

/// [`ib_disabled`] of a node's `NCCL_*` variables.
pub fn ib_disabled_env(env: &BTreeMap<String, String>) -> bool {
    let ib = crate::decide::switches::IB;
    env.get(ib.var).is_some_and(|v| (ib.reads)(v))
}

/// Members grouped by a value (those without one left out): value → node names.
fn group(
    meeting: &Meeting,
    key: impl Fn(&Member) -> Option<String>,
) -> BTreeMap<String, Vec<String>> {
    let mut g: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for x in &meeting.members {
        if let Some(k) = key(x) {
            g.entry(k).or_default().push(x.report.name());
        }
    }
    g
}

/// `2.21.5 on a (10.0.0.1), b (10.0.0.2); 2.27.7 on c (10.0.0.3)`.
fn describe_groups(g: &BTreeMap<String, Vec<String>>) -> String {
    g.iter()
        .map(|(v, nodes)| format!("{v} on {}", list(nodes)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// `NCCL_*` variables whose value (or being unset) differs between nodes, one description each. Variables
/// that legitimately differ (`NCCL_SOCKET_IFNAME`: interface names are per node) or that have their own rule
/// (`NCCL_IB_DISABLE`, `NCCL_SOCKET_FAMILY`) are left out.
fn nccl_env_differences(meeting: &Meeting) -> Vec<String> {
    const OWN_RULE: &[&str] = &[
        "NCCL_SOCKET_IFNAME",
        "NCCL_IB_DISABLE",
        "NCCL_SOCKET_FAMILY",
    ];
    // The names any node has (the map is used as an ordered set).
    let mut names: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for x in &meeting.members {
        for k in x.report.nccl_env.keys() {
            if !OWN_RULE.contains(&k.as_str()) && !names.contains_key(k) {
                names.insert(k.clone(), Vec::new());
            }
        }
    }
    let mut out = Vec::new();
    for name in names.keys() {
        // `=value`, or `unset`: no value starts with `unset` after an `=`.
        let g = group(meeting, |x| {
            Some(match x.report.nccl_env.get(name) {
                Some(v) => format!("={v:?}"),
                None => "unset".to_string(),
            })
        });
        if g.len() > 1 {
            let parts: Vec<String> = g
                .iter()
                .map(|(v, nodes)| match v.strip_prefix('=') {
                    Some(v) => format!("{v} on {}", list(nodes)),
                    None => format!("unset on {}", list(nodes)),
                })
                .collect();
            out.push(format!("{name}: {}", parts.join(", ")));
        }
    }
    out
}

/// `[fd00::1]` for IPv6 (so that `:port` can follow), the plain address for IPv4.
pub fn fmt_addr(a: IpAddr) -> String {
    match a {
        IpAddr::V4(v) => v.to_string(),
        IpAddr::V6(v) => format!("[{v}]"),
    }
}

/// What happened, in words.
pub fn outcome_text(p: &ProbeReport) -> String {
    let e = p.error.as_deref().unwrap_or("");
    match p.outcome {
        ProbeOutcome::Connected => "connected".into(),
        ProbeOutcome::Refused => "connection refused".into(),
        ProbeOutcome::TimedOut => "no answer (connection timed out)".into(),
        // The connect error in words (`net::connect_words`: `no route to host`, `network unreachable`).
        ProbeOutcome::NoRoute if e.is_empty() => "no route".into(),
        ProbeOutcome::NoRoute => e.to_string(),
        ProbeOutcome::WrongNode => "another node or process answered".into(),
        ProbeOutcome::NoListener => "the node could not listen on its bootstrap address".into(),
        ProbeOutcome::Failed => format!("connection failed ({e})"),
        ProbeOutcome::Unanswered => {
            "connected, but no answer came (a busy node or a lossy link)".into()
        }
    }
}

/// The likely cause of a failed probe of `target` (named `tname`) by `pname`, and the remedy. A node whose
/// connection to the master came from another address than the one it advertises is behind NAT: that is the
/// first explanation whatever the error; else a timeout is a firewall that drops new inbound connections to
/// ephemeral ports (the node's own connection to the master port worked).
fn likely_cause(
    outcome: ProbeOutcome,
    target: &Member,
    tname: &str,
    pname: &str,
) -> (String, &'static str) {
    let report = &target.report;
    if let ProbeOutcome::NoListener = outcome {
        return (
            format!(
                "{tname} cannot listen on its own bootstrap address ({}); NCCL's bootstrap would fail the same way",
                report.listen_error.as_deref().unwrap_or("bind failed")
            ),
            "check the node's address (a tentative IPv6 address, an address removed after ncclenv chose it)",
        );
    }
    if let Some(seen) = target.seen_from.filter(|s| *s != report.addr) {
        return (
            format!(
                "a NAT'd bridge: the node advertises {} but its connection to the master came from {seen}, so it sits \
                 behind NAT (a bridged container) and no other node can connect back to it",
                report.addr
            ),
            REMEDY_NAT,
        );
    }
    // The master holds the meeting (it reached no master port); every other member said hello on it.
    let up = if target.seen_from.is_none() {
        "the node is up: it is the preflight master"
    } else {
        "the node is up: it reached the master port"
    };
    match outcome {
        ProbeOutcome::TimedOut => (
            format!(
                "a firewall on {tname} drops new inbound connections to ephemeral ports, where NCCL listens ({up})"
            ),
            REMEDY_FIREWALL,
        ),
        ProbeOutcome::Refused => (
            format!(
                "nothing listens there as seen from {pname}: the address belongs to another host (a duplicate or \
                 NAT'd address), or a firewall rejects the connection"
            ),
            REMEDY_FIREWALL,
        ),
        ProbeOutcome::NoRoute => (
            format!(
                "no route back: {pname} has no route to {} (a private or container address, or a missing route)",
                report.addr
            ),
            REMEDY_NAT,
        ),
        ProbeOutcome::WrongNode => (
            format!(
                "the address {} is not unique: another listener answered there (NAT'd containers, duplicate \
                 addresses)",
                report.addr
            ),
            REMEDY_NAT,
        ),
        _ => (
            "the path between the nodes fails".to_string(),
            REMEDY_FIREWALL,
        ),
    }
}

/// Apply a fleet verdict to this node's plan: each repair (unless this node has a vendor profile, which owns
/// NCCL's transport variables: then a warning), each finding, and a refusal, which replaces any local one so
/// that every node prints the same reason. `current` is the value this node's command would get for a
/// repaired variable without the repair.
pub fn apply(
    plan: &mut Plan,
    verdict: &FleetVerdict,
    current: impl Fn(&str) -> Option<String>,
    vendor_profile: bool,
) {
    for w in &verdict.findings {
        plan.warnings.push(Note {
            strict_refuses: false,
            ..w.clone()
        });
    }
    for FleetRepair {
        name,
        value,
        reason,
    } in &verdict.repairs
    {
        let now = current(name);
        if now.as_deref() == Some(value.as_str()) {
            continue;
        }
        if vendor_profile {
            plan.finding(
                Finding::PreflightIbDisabled,
                format!("the fleet repairs {name}={value} ({reason}), but a vendor network profile owns it here: left as is"),
                "align the vendor profile's transport settings across the nodes",
            );
            // The fleet judged strict mode once, for every node (as for its findings above).
            if let Some(w) = plan.warnings.last_mut() {
                w.strict_refuses = false;
            }
            continue;
        }
        match now {
            Some(old) => plan.repair(name, &old, value.clone(), format!("preflight: {reason}")),
            None => plan.set(name, value.clone(), format!("preflight: {reason}")),
        }
    }
    if let Some(r) = &verdict.refuse {
        plan.verdict = Verdict::Refuse {
            reason: r.message.clone(),
            remedy: r.remedy.clone(),
            code: r.code.clone(),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Family;
    use crate::test_machine::{codes, has_warning, warning, warnings};

    fn node(i: u8) -> Member {
        let addr: IpAddr = format!("10.0.0.{i}").parse().expect("ip");
        Member {
            report: NodeReport {
                hostname: format!("n{i}"),
                ifname: "eth0".into(),
                addr,
                family: Family::Inet,
                mtu: Some(1500),
                data_mtus: Vec::new(),
                probe_port: Some(40000 + u16::from(i)),
                listen_error: None,
                nonce: u64::from(i),
                nccl_version: Some("2.21.5".into()),
                ncclenv_version: "0.1.0".into(),
                nccl_env: [
                    ("NCCL_SOCKET_IFNAME".to_string(), format!("eth{i}")),
                    ("NCCL_SOCKET_FAMILY".to_string(), "AF_INET".to_string()),
                ]
                .into(),
                decided: BTreeMap::new(),
                vendor_profile: false,
                strict: false,
                refused: None,
                node_rank: Some(u32::from(i) - 1),
                ifaces: Vec::new(),
                sink_ports: (None, None),
                measure: true,
                ib_usable: false,
                own_ifname: true,
            },
            seen_from: (i != 1).then_some(addr),
            probe: Some(ProbeReport {
                target: 0,
                outcome: ProbeOutcome::Connected,
                error: None,
                ms: 1,
            }),
        }
    }

    fn fleet(n: u8) -> Meeting {
        Meeting {
            expected: u32::from(n),
            members: (1..=n).map(node).collect(),
            lost: vec![],
            waited_s: 60,
            misfits: vec![],
            not_reached: None,
            heard: Heard::default(),
        }
    }

    fn refused(v: &FleetVerdict) -> Option<&str> {
        v.refuse.as_ref().map(|r| r.message.as_str())
    }

    #[test]
    fn a_healthy_fleet_passes_with_nothing_else() {
        let v = agree(&fleet(3));
        assert_eq!(codes(&v), vec!["preflight-passed"]);
        assert_eq!(v.refuse, None);
        assert!(v.repairs.is_empty());
        assert_eq!((v.present, v.expected), (3, 3));
        assert!(v.findings[0].message.contains("3 path(s)"), "{v:?}");
    }

    #[test]
    fn ring_every_node_probes_one_and_is_probed_by_one() {
        assert_eq!(ring_target(0, 1), None);
        assert_eq!(ring_target(0, 2), Some(1));
        assert_eq!(ring_target(1, 2), Some(0));
        let n = 1000;
        let mut probed = vec![0; n];
        for i in 0..n {
            probed[ring_target(i, n).expect("target")] += 1;
        }
        assert!(probed.iter().all(|&c| c == 1));
    }

    #[test]
    fn unreachable_behind_nat_refuses_naming_the_node_and_the_cause() {
        let mut m = fleet(3);
        // n3 advertises 172.17.0.2, its connection came from 10.0.0.3 (masquerade); n2 cannot reach it.
        m.members[2].report.addr = "172.17.0.2".parse().expect("ip");
        m.members[1].probe = Some(ProbeReport {
            target: 2,
            outcome: ProbeOutcome::NoRoute,
            error: Some("Network is unreachable".into()),
            ms: 0,
        });
        let v = agree(&m);
        assert!(codes(&v).contains(&"preflight-unreachable"), "{v:?}");
        assert!(!codes(&v).contains(&"preflight-passed"));
        let r = refused(&v).expect("refused");
        assert!(
            r.contains("[preflight-unreachable]")
                && r.contains("n3 (172.17.0.2)")
                && r.contains("NAT"),
            "{r}"
        );
        assert!(r.contains("from n2 (10.0.0.2)"), "{r}");
        // It was not reached, so no separate NAT warning.
        assert!(!codes(&v).contains(&"preflight-nat"));
    }

    #[test]
    fn timeout_without_nat_is_a_firewall_on_ephemeral_ports() {
        let mut m = fleet(3);
        m.members[0].probe = Some(ProbeReport {
            target: 1,
            outcome: ProbeOutcome::TimedOut,
            error: None,
            ms: 5000,
        });
        let v = agree(&m);
        let r = refused(&v).expect("refused");
        assert!(
            r.contains("firewall on n2 (10.0.0.2)") && r.contains("10.0.0.2:40002"),
            "{r}"
        );
        let remedy = v
            .refuse
            .as_ref()
            .map(|r| r.remedy.clone())
            .unwrap_or_default();
        assert!(remedy.contains("ip_local_port_range"), "{remedy}");
        assert!(r.contains("it reached the master port"), "{r}");
        // The master timed out on: it holds the meeting, it reached no master port.
        let mut m = fleet(3);
        m.members[2].probe = Some(ProbeReport {
            target: 0,
            outcome: ProbeOutcome::TimedOut,
            error: None,
            ms: 5000,
        });
        let r = refused(&agree(&m)).expect("refused").to_string();
        assert!(
            r.contains("firewall on n1 (10.0.0.1)")
                && r.contains("(the node is up: it is the preflight master)")
                && !r.contains("reached the master port"),
            "{r}"
        );
        // Other outcomes name other causes.
        for (o, want) in [
            (ProbeOutcome::Refused, "nothing listens"),
            (ProbeOutcome::WrongNode, "not unique"),
            (ProbeOutcome::NoListener, "cannot listen"),
            (ProbeOutcome::Failed, "fails"),
        ] {
            let mut m = fleet(2);
            m.members[1].probe = Some(ProbeReport {
                target: 0,
                outcome: o,
                error: None,
                ms: 1,
            });
            let r = refused(&agree(&m)).expect("refused").to_string();
            assert!(r.contains(want), "{o:?}: {r}");
        }
    }

    /// A probe's connect error is said as observed (`net::connect_words`), once.
    #[test]
    fn probe_outcomes_are_said_as_observed() {
        let p = |outcome, error: Option<&str>| ProbeReport {
            target: 1,
            outcome,
            error: error.map(String::from),
            ms: 1,
        };
        assert_eq!(
            outcome_text(&p(ProbeOutcome::NoRoute, Some("no route to host"))),
            "no route to host"
        );
        assert_eq!(outcome_text(&p(ProbeOutcome::NoRoute, None)), "no route");
        assert_eq!(
            outcome_text(&p(ProbeOutcome::Refused, None)),
            "connection refused"
        );
        assert_eq!(
            outcome_text(&p(ProbeOutcome::TimedOut, None)),
            "no answer (connection timed out)"
        );
    }

    #[test]
    fn duplicate_addresses_refuse() {
        let mut m = fleet(3);
        for i in [1, 2] {
            m.members[i].report.addr = "172.17.0.2".parse().expect("ip");
        }
        let v = agree(&m);
        assert!(codes(&v).contains(&"preflight-duplicate-address"));
        assert!(refused(&v).expect("refused").contains("172.17.0.2"));
        assert!(!codes(&agree(&fleet(3))).contains(&"preflight-duplicate-address"));
    }

    #[test]
    fn different_families_and_nccl_versions_refuse() {
        let mut m = fleet(3);
        m.members[2].report.family = Family::Inet6;
        let v = agree(&m);
        assert!(codes(&v).contains(&"preflight-family-differs"));
        assert!(refused(&v).expect("refused").contains("AF_INET6 on n3"));

        let mut m = fleet(3);
        m.members[2].report.nccl_version = Some("2.27.7".into());
        let v = agree(&m);
        assert!(
            codes(&v).contains(&"preflight-nccl-version-differs"),
            "{v:?}"
        );
        let r = refused(&v).expect("refused");
        assert!(
            r.contains("2.21.5 on n1 (10.0.0.1), n2 (10.0.0.2); 2.27.7 on n3"),
            "{r}"
        );
        // A node that sees no single version does not count.
        let mut m = fleet(3);
        m.members[2].report.nccl_version = None;
        let v = agree(&m);
        assert!(!codes(&v).contains(&"preflight-nccl-version-differs"));
        assert!(!codes(&v).contains(&"preflight-family-differs"));
    }

    #[test]
    fn a_node_that_refuses_alone_refuses_the_fleet() {
        let mut m = fleet(2);
        m.members[1].report.refused = Some("no usable network interface".into());
        let v = agree(&m);
        assert!(codes(&v).contains(&"preflight-node-refused"));
        assert!(refused(&v)
            .expect("refused")
            .contains("n2 (10.0.0.2) refuses on its own"));
        assert!(!codes(&agree(&fleet(2))).contains(&"preflight-node-refused"));
    }

    #[test]
    fn absence_fails_open_and_strict_refuses() {
        let mut m = fleet(2);
        m.expected = 3;
        let v = agree(&m);
        assert_eq!(v.refuse, None);
        assert!(codes(&v).contains(&"preflight-absent"));
        let w = warning(&v, "preflight-absent");
        assert!(w.message.starts_with("2 of 3 nodes"), "{}", w.message);
        assert!(w.strict_refuses);
        // The nodes that met agree, but the fleet did not pass: no `preflight-passed`.
        assert!(!codes(&v).contains(&"preflight-passed"), "{:?}", codes(&v));
        // Strict on one node: the fleet refuses.
        m.members[1].report.strict = true;
        let v = agree(&m);
        assert!(refused(&v).expect("strict").contains("[preflight-absent]"));
        // A node lost after arriving counts as absent and is named.
        let mut m = fleet(3);
        m.lost = vec![2];
        m.members[2].probe = None;
        let v = agree(&m);
        let w = warning(&v, "preflight-absent");
        assert!(
            w.message.contains("lost after arriving: n3"),
            "{}",
            w.message
        );
        assert!(!codes(&v).contains(&"preflight-passed"), "{:?}", codes(&v));
        assert!(!codes(&agree(&fleet(3))).contains(&"preflight-absent"));
    }

    /// Issue 22 item 5: "missing: nothing came from it" only when nothing came; a node that said hello and
    /// left, connections without a whole hello and another master endpoint's preflight are said apart.
    #[test]
    fn absence_says_what_came_and_calls_missing_only_what_sent_nothing() {
        let absent = |m: &Meeting| {
            warnings(&agree(m), "preflight-absent")
                .next()
                .map(|w| w.message.clone())
                .expect("absent")
        };
        let mut m = fleet(2);
        m.expected = 3;
        let w = absent(&m);
        assert!(
            w.starts_with(
                "2 of 3 nodes met within 60 s (1 missing: nothing came from it); running anyway"
            ),
            "{w}"
        );
        // Strangers or a node whose hello was held back: not "nothing came".
        m.heard.unheard = 2;
        let w = absent(&m);
        assert!(
            w.contains("(1 missing: no hello came from it; 2 connection(s) to the master port sent no whole hello")
                && !w.contains("nothing came"),
            "{w}"
        );
        m.heard.unheard = 0;
        m.heard.foreign = 1;
        let w = absent(&m);
        assert!(
            w.contains("1 missing: no hello came from it; 1 connection(s) spoke the preflight of another master \
                        endpoint or version (another job on this port, or this job's master address resolving \
                        differently")
                && !w.contains("nothing came"),
            "{w}"
        );
        // The node that is not there said hello and left: it is named, and nobody is "missing".
        m.heard.foreign = 0;
        m.heard.left = vec!["n3 (10.0.0.3) (connection closed)".into()];
        let w = absent(&m);
        assert!(
            w.contains(
                "(said hello and left before the meeting ended: n3 (10.0.0.3) (connection closed))"
            ) && !w.contains("missing"),
            "{w}"
        );
        // One left, one never came.
        m.expected = 4;
        let w = absent(&m);
        assert!(
            w.contains("(1 missing: nothing came from it; said hello and left"),
            "{w}"
        );
        // Two never came.
        let mut m = fleet(1);
        m.expected = 3;
        assert!(
            absent(&m).contains("(2 missing: nothing came from them)"),
            "{}",
            absent(&m)
        );
    }

    /// Issue 22 item 3: a node of this master endpoint that says 4 nodes in a 3-node job is named with its
    /// count; the meeting of the others is complete (nobody is "missing"), it did not pass, and strict refuses.
    #[test]
    fn a_node_with_another_node_count_is_named_and_strict_refuses() {
        let mut m = fleet(2);
        m.expected = 3;
        let x = node(3);
        m.misfits.push(Misfit {
            report: x.report,
            seen_from: "10.0.0.3".parse().expect("ip"),
            nnodes: 4,
        });
        let v = agree(&m);
        assert_eq!(v.refuse, None);
        assert_eq!(codes(&v), vec!["preflight-nnodes-differs"], "{v:?}");
        let w = &v.findings[0];
        assert!(
            w.message.starts_with(
                "node n3 (10.0.0.3) says 4 nodes, the others 3 (n1 (10.0.0.1), n2 (10.0.0.2))"
            ),
            "{}",
            w.message
        );
        assert!(w.strict_refuses);
        m.misfits[0].report.strict = true;
        let r = refused(&agree(&m)).expect("strict").to_string();
        assert!(
            r.contains("[preflight-nnodes-differs]") && r.contains("n3 (10.0.0.3) says 4"),
            "{r}"
        );
        // The master alone says another count than the two others: it is the one named.
        let mut m = fleet(1);
        m.expected = 4;
        for i in [2, 3] {
            m.misfits.push(Misfit {
                report: node(i).report,
                seen_from: format!("10.0.0.{i}").parse().expect("ip"),
                nnodes: 3,
            });
        }
        let v = agree(&m);
        assert!(!codes(&v).contains(&"preflight-absent"), "{v:?}");
        let w = warning(&v, "preflight-nnodes-differs");
        assert!(
            w.message.starts_with(
                "node n1 (10.0.0.1) says 4 nodes, the others 3 (n2 (10.0.0.2), n3 (10.0.0.3))"
            ),
            "{}",
            w.message
        );
        // Short of the smallest count: the rest are missing, and the misfit is not one of them.
        let mut m = fleet(1);
        m.expected = 3;
        m.misfits.push(Misfit {
            report: node(2).report,
            seen_from: "10.0.0.2".parse().expect("ip"),
            nnodes: 4,
        });
        let w = agree(&m);
        let w = warning(&w, "preflight-absent");
        assert!(
            w.message.contains("1 of 3 nodes met")
                && w.message.contains(
                    "(1 missing: nothing came from it; 1 more came that say another node count)"
                ),
            "{}",
            w.message
        );
    }

    /// Issue 22 item 3: two nodes say node rank 1 and none says 2 (a copy-pasted replica spec).
    #[test]
    fn duplicate_and_missing_node_ranks_are_named() {
        let mut m = fleet(3);
        m.members[2].report.node_rank = Some(1);
        let v = agree(&m);
        assert_eq!(v.refuse, None);
        assert!(!codes(&v).contains(&"preflight-passed"), "{v:?}");
        let w = warning(&v, "preflight-node-ranks");
        assert!(
            w.message.contains(
                "node rank 1 is said by n2 (10.0.0.2), n3 (10.0.0.3); no node says node rank 2"
            ),
            "{}",
            w.message
        );
        m.members[0].report.strict = true;
        assert!(refused(&agree(&m))
            .expect("strict")
            .contains("[preflight-node-ranks]"));
        // Out of range; and ranks of absent nodes are not called missing.
        let mut m = fleet(2);
        m.expected = 3;
        m.members[1].report.node_rank = Some(7);
        let w = agree(&m);
        let w = warning(&w, "preflight-node-ranks");
        assert!(
            w.message
                .contains("node rank 7 of n2 (10.0.0.2) is out of range for 3 nodes"),
            "{}",
            w.message
        );
        assert!(!w.message.contains("no node says"), "{}", w.message);
        // No rank known, or ranks that agree: nothing.
        let mut m = fleet(3);
        for x in &mut m.members {
            x.report.node_rank = None;
        }
        assert!(!codes(&agree(&m)).contains(&"preflight-node-ranks"));
        assert!(!codes(&agree(&fleet(3))).contains(&"preflight-node-ranks"));
    }

    /// A node's `NCCL_IB_DISABLE` is read as NCCL and `decide` read it: `0x1` and `1abc` turn IB off, `0`,
    /// `0x0` and `yes` do not.
    #[test]
    fn ib_disabled_is_read_as_nccl_reads_it() {
        for (v, off) in [
            ("1", true),
            ("0x1", true),
            ("1abc", true),
            (" 2", true),
            ("0", false),
            ("0x0", false),
            ("yes", false),
            ("", false),
        ] {
            let env = BTreeMap::from([("NCCL_IB_DISABLE".to_string(), v.to_string())]);
            assert_eq!(ib_disabled_env(&env), off, "NCCL_IB_DISABLE={v:?}");
        }
        assert!(!ib_disabled_env(&BTreeMap::new()));
    }

    #[test]
    fn ib_disabled_on_one_node_is_repaired_on_all() {
        let mut m = fleet(3);
        m.members[2]
            .report
            .nccl_env
            .insert("NCCL_IB_DISABLE".into(), "1".into());
        m.members[2].report.decided.insert(
            "NCCL_IB_DISABLE".into(),
            "memlock 8 MiB is below 1 GiB".into(),
        );
        m.members[0]
            .report
            .nccl_env
            .insert("NCCL_IB_DISABLE".into(), "0".into());
        let v = agree(&m);
        assert_eq!(v.refuse, None);
        assert!(codes(&v).contains(&"preflight-ib-disabled"));
        assert_eq!(v.repairs.len(), 1);
        assert_eq!(
            (v.repairs[0].name.as_str(), v.repairs[0].value.as_str()),
            ("NCCL_IB_DISABLE", "1")
        );
        assert!(
            v.repairs[0].reason.contains("n3 (10.0.0.3): memlock 8 MiB"),
            "{:?}",
            v.repairs
        );
        // NCCL_IB_DISABLE has its own rule: not also an "env differs" warning.
        assert!(!codes(&v).contains(&"preflight-nccl-env-differs"));
        // Applied on a node: a repair of the inherited 0, a set where unset, nothing where already 1.
        let mut p = Plan::default();
        apply(&mut p, &v, |_| Some("0".into()), false);
        assert_eq!(p.value_of("NCCL_IB_DISABLE"), Some("1"));
        assert_eq!(p.changes[0].replaced.as_deref(), Some("0"));
        let mut p = Plan::default();
        apply(&mut p, &v, |_| None, false);
        assert_eq!(p.value_of("NCCL_IB_DISABLE"), Some("1"));
        let mut p = Plan::default();
        apply(&mut p, &v, |_| Some("1".into()), false);
        assert!(p.changes.is_empty());
        // A vendor profile owns the variable: warned, not changed.
        let mut p = Plan::default();
        apply(&mut p, &v, |_| None, true);
        assert!(p.changes.is_empty());
        // Strict refuses the repair.
        m.members[0].report.strict = true;
        assert!(refused(&agree(&m))
            .expect("strict")
            .contains("preflight-ib-disabled"));
        // All disabled, or all enabled: nothing to repair.
        let mut m = fleet(2);
        for x in &mut m.members {
            x.report
                .nccl_env
                .insert("NCCL_IB_DISABLE".into(), "1".into());
        }
        assert!(agree(&m).repairs.is_empty());
        assert!(agree(&fleet(2)).repairs.is_empty());
    }

    /// #26 item 5: the RoCE netdev's MTU differs (NVIDIA/nccl#1524) while the bootstrap interfaces agree:
    /// the warning names the network, each MTU with its nodes and their interfaces.
    #[test]
    fn data_network_mtus_are_compared_naming_node_and_interface() {
        let mut m = fleet(3);
        for (i, mtu) in [(0, 9000), (1, 9000), (2, 1500)] {
            m.members[i].report.data_mtus = vec![
                super::super::mtu::NetMtu {
                    network: "rdma mlx5_0:1".into(),
                    ifname: "eth2".into(),
                    mtu,
                }
                .wire(),
                super::super::mtu::NetMtu {
                    network: "socket eth0".into(),
                    ifname: "eth0".into(),
                    mtu: 1500,
                }
                .wire(),
            ];
        }
        let v = agree(&m);
        let w: Vec<&str> = warnings(&v, "preflight-mtu-differs")
            .map(|w| w.message.as_str())
            .collect();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("rdma mlx5_0:1: 1500 on n3 (10.0.0.3) (eth2); 9000 on n1 (10.0.0.1) (eth2), n2 (10.0.0.2) (eth2)"),
            "{}",
            w[0]
        );
        assert!(!has_warning(&agree(&fleet(3)), "preflight-mtu-differs"));
    }

    #[test]
    fn risky_differences_warn() {
        let mut m = fleet(3);
        m.members[1].report.mtu = Some(9000);
        m.members[1]
            .report
            .nccl_env
            .insert("NCCL_BUFFSIZE".into(), "8388608".into());
        m.members[2].report.ncclenv_version = "0.2.0".into();
        m.members[2].seen_from = Some("192.168.0.9".parse().expect("ip"));
        let v = agree(&m);
        assert_eq!(v.refuse, None);
        let c = codes(&v);
        for code in [
            "preflight-mtu-differs",
            "preflight-nccl-env-differs",
            "preflight-ncclenv-version-differs",
            "preflight-nat",
            "preflight-passed",
        ] {
            assert!(c.contains(&code), "{code}: {c:?}");
        }
        let w = |code: &str| {
            warnings(&v, code)
                .next()
                .map(|w| w.message.clone())
                .unwrap_or_default()
        };
        let env = w("preflight-nccl-env-differs");
        assert!(
            env.contains("NCCL_BUFFSIZE: \"8388608\" on n2 (10.0.0.2), unset on n1 (10.0.0.1), n3 (10.0.0.3)"),
            "{env}"
        );
        // Interface names differ on every node: never a warning.
        assert!(!w("preflight-nccl-env-differs").contains("NCCL_SOCKET_IFNAME"));
        assert!(w("preflight-mtu-differs").contains("9000 on n2"));
        assert!(
            w("preflight-nat").contains("n3 (10.0.0.3) (seen from 192.168.0.9)"),
            "{}",
            w("preflight-nat")
        );
        assert!(v
            .findings
            .iter()
            .all(|f| f.severity == Severity::Warn || f.code == "preflight-passed"));
        // None of them on a healthy fleet.
        let c = codes(&agree(&fleet(3))).join(" ");
        for code in ["mtu", "env-differs", "ncclenv-version", "nat"] {
            assert!(!c.contains(code), "{code}: {c}");
        }
    }

    #[test]
    fn lists_are_bounded() {
        let names: Vec<String> = (0..20).map(|i| format!("n{i}")).collect();
        let s = list(&names);
        assert!(s.ends_with("n7 and 12 more"), "{s}");
        let mut m = Meeting {
            expected: 10_000,
            members: (1..=200).map(|i| node((i % 250) as u8 + 1)).collect(),
            lost: vec![],
            waited_s: 1,
            misfits: vec![],
            not_reached: None,
            heard: Heard::default(),
        };
        for x in &mut m.members {
            x.report.addr = "10.9.9.9".parse().expect("ip");
        }
        let v = agree(&m);
        let total: usize = v.findings.iter().map(|w| w.message.len()).sum();
        assert!(total < 8 * 1024, "{total}");
        // 10,000 nodes, every probe failed: the verdict still fits in one frame.
        let mut m = Meeting {
            expected: 10_000,
            members: (0..10_000u32).map(|i| node((i % 250) as u8 + 1)).collect(),
            lost: vec![],
            waited_s: 1,
            misfits: vec![],
            not_reached: None,
            heard: Heard::default(),
        };
        for x in &mut m.members {
            x.probe = Some(ProbeReport {
                target: 0,
                outcome: ProbeOutcome::TimedOut,
                error: None,
                ms: 5000,
            });
        }
        let v = agree(&m);
        let frame =
            super::super::protocol::encode("k", &super::super::protocol::Msg::Verdict(v.clone()));
        assert!(
            frame.len() < super::super::protocol::MAX_FRAME,
            "{}",
            frame.len()
        );
        let n = warnings(&v, "preflight-unreachable").count();
        assert_eq!(n, MAX_LISTED + 1);
        assert!(v
            .findings
            .iter()
            .any(|w| w.message.contains("(10000 in all)")));
        assert!(warnings(&v, "preflight-duplicate-address").count() <= MAX_LISTED + 1);
    }
}
