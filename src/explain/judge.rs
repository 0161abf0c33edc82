//! Judging the report: per process and across ranks (the job-wide checks of [`analyse`], each one
//! [`Code`]), and against this node's decision ([`compare_local`]).

use super::{Code, Diagnosis, Endpoint, Explanation, Local, LocalView, Process, Warn};
use crate::cross_node::Rule;
use crate::nccl_errors;
use crate::nccl_log;
use crate::plan::Severity;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

impl Process {
    /// True when this process logged with the ≥ 2.24 format (from its version or the bootstrap spelling).
    fn new_era(&self) -> Option<bool> {
        match (&self.nccl_version, self.bootstrap_spaced) {
            (Some(v), _) => {
                nccl_log::version_code(v).map(|c| c >= nccl_log::BOOTSTRAP_NO_SPACE_SINCE)
            }
            (None, Some(s)) => Some(!s),
            (None, None) => None,
        }
    }
}

/// space, public; ULA and global IPv6. `None` for loopback and link-local (judged separately).
fn block(a: &IpAddr) -> Option<&'static str> {
    match a {
        IpAddr::V4(v) => {
            let o = v.octets();
            if v.is_loopback() || v.is_link_local() {
                None
            } else if o[0] == 10 {
                Some("10.0.0.0/8")
            } else if o[0] == 172 && (16..32).contains(&o[1]) {
                Some("172.16.0.0/12 (Docker's and compose's bridges live here)")
            } else if o[0] == 192 && o[1] == 168 {
                Some("192.168.0.0/16 (libvirt's virbr0 lives here)")
            } else if o[0] == 100 && (64..128).contains(&o[1]) {
                Some("100.64.0.0/10")
            } else {
                Some("public")
            }
        }
        IpAddr::V6(v) => {
            let s = v.segments();
            if v.is_loopback() || (s[0] & 0xffc0) == 0xfe80 {
                None
            } else if (s[0] & 0xfe00) == 0xfc00 {
                Some("fc00::/7 (unique local)")
            } else {
                Some("global IPv6")
            }
        }
    }
}

fn names(ps: &[&Process]) -> Vec<String> {
    ps.iter().map(|p| p.name()).collect()
}

/// What the job-wide checks of [`analyse`] share: the report, its processes, and the facts several checks
/// use.
struct Job<'a> {
    /// The report the checks read.
    r: &'a Explanation,
    /// Its processes, in order of their first line.
    ps: Vec<&'a Process>,
    /// More than one host, or NCCL counted more than one node (`nNodes` of the communicator line).
    multi_host: bool,
    /// The processes that logged a bootstrap socket (interface and address).
    with_boot: Vec<&'a Process>,
}

impl<'a> Job<'a> {
    fn new(r: &'a Explanation) -> Self {
        let ps: Vec<&Process> = r.processes.iter().collect();
        let hosts: BTreeSet<&str> = ps.iter().map(|p| p.host.as_str()).collect();
        let multi_host = hosts.len() > 1 || ps.iter().any(|p| p.nnodes.is_some_and(|n| n > 1));
        let with_boot = ps
            .iter()
            .copied()
            .filter(|p| p.bootstrap.is_some())
            .collect();
        Job {
            r,
            ps,
            multi_host,
            with_boot,
        }
    }

    /// The processes whose bootstrap address satisfies `pred`.
    fn booting_on(&self, pred: impl Fn(&IpAddr) -> bool) -> Vec<&'a Process> {
        self.with_boot
            .iter()
            .copied()
            .filter(|p| p.bootstrap.as_ref().is_some_and(|b| pred(&b.addr)))
            .collect()
    }
}

/// `host:pid on IFACE ADDR` (just `host:pid` without a bootstrap line).
fn desc(process: &Process) -> String {
    process
        .bootstrap
        .as_ref()
        .map(|b| format!("{} on {} {}", process.name(), b.interface, b.addr))
        .unwrap_or_else(|| process.name())
}

/// [`desc`] of each process, joined with `, `.
fn descs(ps: &[&Process]) -> String {
    ps.iter().map(|p| desc(p)).collect::<Vec<_>>().join(", ")
}

/// One job-wide check of [`analyse`]: it appends its findings.
type Check = fn(&Job, &mut Vec<Diagnosis>);

/// The job-wide checks, in the order their findings are reported: NCCL's own messages first, then the
/// bootstrap, then what differs between processes.
const CHECKS: &[Check] = &[
    no_nccl_lines,
    nccl_warnings,
    errors_quoted,
    info_fallbacks,
    bootstrap_not_logged,
    bootstrap_family_mixed,
    bootstrap_loopback,
    bootstrap_link_local,
    bootstrap_address_shared,
    bootstrap_networks_differ,
    nccl_versions_differ,
    net_transport_mixed,
];

/// The job-wide findings (see `docs/explain.md` for each code): those of each of `CHECKS`, in order.
pub fn analyse(explanation: &Explanation) -> Vec<Diagnosis> {
    let job = Job::new(explanation);
    let mut out: Vec<Diagnosis> = Vec::new();
    for check in CHECKS {
        check(&job, &mut out);
    }
    out
}

/// `no-nccl-lines`: the input holds no line with NCCL's prefix.
fn no_nccl_lines(job: &Job, out: &mut Vec<Diagnosis>) {
    if job.ps.is_empty() {
        out.push(Diagnosis {
            code: Code::NoNcclLines,
            message: "no line with NCCL's prefix (host:pid:tid [dev] NCCL INFO|WARN) in the input".into(),
            remedy: "rerun the job with NCCLENV_DEBUG=1 (or NCCL_DEBUG=INFO) and give ncclenv explain NCCL's files or the job's log".into(),
            processes: vec![],
            known: None,
        });
    }
}

/// `nccl-warn`: NCCL's own errors, one finding per known entry (or distinct unknown text), naming the
/// processes that logged it.
fn nccl_warnings(job: &Job, out: &mut Vec<Diagnosis>) {
    let mut groups: Vec<(String, Vec<String>, &Warn)> = Vec::new();
    for p in &job.ps {
        for w in &p.warnings {
            let key = w
                .known
                .map(|k| k.id.to_string())
                .unwrap_or_else(|| w.text.clone());
            match groups.iter_mut().find(|g| g.0 == key) {
                Some(g) => g.1.push(p.name()),
                None => groups.push((key, vec![p.name()], w)),
            }
        }
    }
    for (_, procs, w) in groups {
        let (cause, remedy) = match w.known {
            Some(k) => (
                format!(": {}", nccl_errors::cause_for(k, 0)),
                k.remedy.to_string(),
            ),
            None => (
                String::new(),
                "read the lines before it in that process's log; rerun with NCCLENV_DEBUG=1 for more".to_string(),
            ),
        };
        let at = w
            .source
            .as_deref()
            .map(|s| format!(" ({s})"))
            .unwrap_or_default();
        out.push(Diagnosis {
            code: Code::NcclWarn,
            message: format!("{}: NCCL WARN {}{at}{cause}", procs.join(", "), w.text),
            remedy,
            processes: procs,
            known: w.known.map(|k| k.id),
        });
    }
}

/// `error-quoted`: known errors found outside NCCL's lines (Gloo's, or NCCL's text quoted by a framework).
fn errors_quoted(job: &Job, out: &mut Vec<Diagnosis>) {
    for q in &job.r.quoted {
        let Some(k) = q.known else { continue };
        out.push(Diagnosis {
            code: Code::ErrorQuoted,
            message: format!(
                "{} line {}: {}: {}",
                q.input,
                q.line,
                q.text,
                nccl_errors::cause_for(k, 0)
            ),
            remedy: k.remedy.to_string(),
            processes: vec![],
            known: Some(k.id),
        });
    }
}

/// `nccl-info`: silent fallbacks NCCL logs at INFO, one finding per knowledge-base entry.
fn info_fallbacks(job: &Job, out: &mut Vec<Diagnosis>) {
    let mut notes: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for p in &job.ps {
        for id in &p.notes {
            notes.entry(id).or_default().push(p.name());
        }
    }
    for (id, procs) in notes {
        if let Some(k) = nccl_errors::by_id(id) {
            out.push(Diagnosis {
                code: Code::NcclInfo,
                message: format!("{}: {}: {}", procs.join(", "), k.message, k.cause),
                remedy: k.remedy.to_string(),
                processes: procs,
                known: Some(k.id),
            });
        }
    }
}

/// `bootstrap-not-logged`: processes with neither a bootstrap line nor a WARN.
fn bootstrap_not_logged(job: &Job, out: &mut Vec<Diagnosis>) {
    let silent: Vec<&Process> = job
        .ps
        .iter()
        .copied()
        .filter(|p| p.bootstrap.is_none() && p.bootstrap_device.is_none() && p.warnings.is_empty())
        .collect();
    if !silent.is_empty() {
        out.push(Diagnosis {
            code: Code::BootstrapNotLogged,
            message: format!(
                "{}: no bootstrap line (NCCL 2.23+ logs it under NCCL_DEBUG_SUBSYS=BOOTSTRAP, older versions under INIT; or the process never initialised NCCL's network)",
                names(&silent).join(", ")
            ),
            remedy: "rerun with NCCLENV_DEBUG=1, which picks the subsystems for the NCCL version the command loads".into(),
            processes: names(&silent),
            known: None,
        });
    }
}

/// `bootstrap-family-mixed`: some processes bootstrap over IPv4, others over IPv6.
fn bootstrap_family_mixed(job: &Job, out: &mut Vec<Diagnosis>) {
    let v4 = job.booting_on(IpAddr::is_ipv4);
    let v6 = job.booting_on(IpAddr::is_ipv6);
    if !v4.is_empty() && !v6.is_empty() {
        out.push(Diagnosis {
            code: Code::BootstrapFamilyMixed,
            message: format!(
                "bootstraps in both families: IPv4 ({}), IPv6 ({}); ranks of one job must reach each other in one family",
                descs(&v4),
                descs(&v6)
            ),
            remedy: Rule::FamiliesDiffer.remedy().into(),
            processes: names(&job.with_boot),
            known: None,
        });
    }
}

/// `bootstrap-loopback`: a loopback bootstrap in a multi-host job.
fn bootstrap_loopback(job: &Job, out: &mut Vec<Diagnosis>) {
    if !job.multi_host {
        return;
    }
    let lo = job.booting_on(IpAddr::is_loopback);
    if !lo.is_empty() {
        out.push(Diagnosis {
            code: Code::BootstrapLoopback,
            message: format!(
                "loopback bootstrap in a multi-host job: {}; no other host can reach it",
                descs(&lo)
            ),
            remedy: "give that container a network that reaches the other nodes (not --network=none), or set NCCL_SOCKET_IFNAME to its uplink".into(),
            processes: names(&lo),
            known: None,
        });
    }
}

/// `bootstrap-link-local`: a link-local bootstrap (IPv4 169.254, IPv6 fe80) in a multi-host job.
fn bootstrap_link_local(job: &Job, out: &mut Vec<Diagnosis>) {
    if !job.multi_host {
        return;
    }
    let ll = job.booting_on(crate::snapshot::is_link_local_ip);
    if !ll.is_empty() {
        out.push(Diagnosis {
            code: Code::BootstrapLinkLocal,
            message: format!(
                "link-local bootstrap in a multi-host job: {}; it reaches only hosts on the same link (an IPv6 fe80 address needs its scope, which the other hosts lack)",
                descs(&ll)
            ),
            remedy: "set NCCL_SOCKET_IFNAME to an interface with a routable address (unless all nodes share one cable and use IPv4 169.254 addresses)".into(),
            processes: names(&ll),
            known: None,
        });
    }
}

/// `bootstrap-address-shared`: the same (routable-looking) address on two hosts of a multi-host job, as
/// NAT'd container bridges give.
fn bootstrap_address_shared(job: &Job, out: &mut Vec<Diagnosis>) {
    if !job.multi_host {
        return;
    }
    let mut by_addr: BTreeMap<IpAddr, Vec<&Process>> = BTreeMap::new();
    for p in &job.with_boot {
        if let Some(b) = &p.bootstrap {
            if block(&b.addr).is_some() {
                by_addr.entry(b.addr).or_default().push(p);
            }
        }
    }
    for (addr, owners) in by_addr {
        let hs: BTreeSet<&str> = owners.iter().map(|p| p.host.as_str()).collect();
        if hs.len() > 1 {
            out.push(Diagnosis {
                code: Code::BootstrapAddressShared,
                message: format!(
                    "{} hosts bootstrap on the same address {addr} ({}): each is a private address behind NAT (a container bridge), the others cannot reach it",
                    hs.len(),
                    descs(&owners)
                ),
                remedy: Rule::NatAddress.remedy().into(),
                processes: names(&owners),
                known: None,
            });
        }
    }
}

/// `bootstrap-networks-differ`: the hosts of a multi-host job bootstrap in different address blocks
/// ([`block`]) of one family.
fn bootstrap_networks_differ(job: &Job, out: &mut Vec<Diagnosis>) {
    if !job.multi_host {
        return;
    }
    let mut blocks: BTreeMap<&'static str, Vec<&Process>> = BTreeMap::new();
    for p in &job.with_boot {
        if let Some(b) = &p.bootstrap {
            if let Some(k) = block(&b.addr) {
                blocks.entry(k).or_default().push(p);
            }
        }
    }
    let v4_blocks = blocks
        .keys()
        .filter(|k| !k.contains("IPv6") && !k.contains("::"))
        .count();
    let v6_blocks = blocks.len() - v4_blocks;
    if v4_blocks <= 1 && v6_blocks <= 1 {
        return;
    }
    let hosts_in: BTreeSet<&str> = blocks.values().flatten().map(|p| p.host.as_str()).collect();
    if hosts_in.len() > 1 {
        let parts: Vec<String> = blocks
            .iter()
            .map(|(k, v)| format!("{k}: {}", descs(v)))
            .collect();
        out.push(Diagnosis {
            code: Code::BootstrapNetworksDiffer,
            message: format!(
                "the hosts bootstrap in different address blocks, which do not route to each other unless a router joins them: {}",
                parts.join("; ")
            ),
            remedy: "make every rank bootstrap on the interface of the network the nodes share (ncclenv picks the one that routes to the master)".into(),
            processes: names(&job.with_boot),
            known: None,
        });
    }
}

/// `nccl-versions-differ`: the processes logged different NCCL versions (or bootstrap spellings of
/// different eras, [`nccl_log::BOOTSTRAP_NO_SPACE_SINCE`]).
fn nccl_versions_differ(job: &Job, out: &mut Vec<Diagnosis>) {
    let (ps, r) = (&job.ps, job.r);
    let explicit: BTreeSet<&str> = ps
        .iter()
        .filter_map(|p| p.nccl_version.as_deref())
        .chain(r.versions_unattributed.iter().map(String::as_str))
        .collect();
    let eras: BTreeSet<bool> = ps.iter().filter_map(|p| p.new_era()).collect();
    if explicit.len() > 1 || eras.len() > 1 {
        let labelled: Vec<String> = ps
            .iter()
            .filter_map(|p| p.version_label().map(|v| format!("{} NCCL {v}", p.name())))
            .collect();
        let mut msg = format!(
            "the processes run different NCCL versions: {}",
            labelled.join(", ")
        );
        if !r.versions_unattributed.is_empty() {
            msg.push_str(&format!(
                "; version lines without a process: {}",
                r.versions_unattributed
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        out.push(Diagnosis {
            code: Code::NcclVersionsDiffer,
            message: msg,
            remedy: Rule::NcclVersionsDiffer.remedy().into(),
            processes: names(ps),
            known: None,
        });
    }
}

/// `net-transport-mixed`: InfiniBand/RoCE on some processes, sockets on others ([`Process::net_kind`]).
fn net_transport_mixed(job: &Job, out: &mut Vec<Diagnosis>) {
    let ps = &job.ps;
    let kinds: Vec<(&Process, String)> = ps
        .iter()
        .filter_map(|p| p.net_kind().map(|k| (*p, k)))
        .collect();
    let of_kind = |kind: &str| -> Vec<&Process> {
        kinds
            .iter()
            .filter(|(_, k)| k == kind)
            .map(|(p, _)| *p)
            .collect()
    };
    let (ib, sock) = (of_kind("IB"), of_kind("Socket"));
    if !ib.is_empty() && !sock.is_empty() {
        out.push(Diagnosis {
            code: Code::NetTransportMixed,
            message: format!(
                "InfiniBand/RoCE on {} but sockets on {}: the job runs at the sockets' speed, or fails to connect",
                names(&ib).join(", "),
                names(&sock).join(", ")
            ),
            remedy: Rule::IbMixed.remedy().into(),
            processes: names(ps),
            known: None,
        });
    }
}

/// Compare the processes of this host in the report with ncclenv's decision here (see [`Local`]), adding
/// `local-choice-differs` when NCCL bootstrapped elsewhere. Does nothing when no process ran on this host.
pub fn compare_local(explanation: &mut Explanation, local: Local) {
    let here: Vec<&Process> = explanation
        .processes
        .iter()
        .filter(|p| p.host == local.host)
        .collect();
    if here.is_empty() {
        return;
    }
    let mut nccl: Vec<Endpoint> = Vec::new();
    for p in &here {
        if let Some(b) = &p.bootstrap {
            if !nccl.contains(b) {
                nccl.push(b.clone());
            }
        }
    }
    let procs: Vec<String> = here.iter().map(|p| p.name()).collect();
    let agrees = match &local.choice {
        Some((ifname, _, _)) if !nccl.is_empty() => {
            Some(nccl.iter().all(|e| &e.interface == ifname))
        }
        _ => None,
    };
    if agrees == Some(false) {
        if let Some((ifname, addr, how)) = &local.choice {
            let got: Vec<String> = nccl
                .iter()
                .filter(|e| &e.interface != ifname)
                .map(|e| format!("{} ({})", e.interface, e.addr))
                .collect();
            let want = match addr {
                Some(a) => format!("{ifname} ({a})"),
                None => ifname.clone(),
            };
            explanation.findings.push(Diagnosis {
                code: Code::LocalChoiceDiffers,
                message: format!(
                    "NCCL bootstrapped on {} here ({}); ncclenv would choose {want}: {how}",
                    got.join(", "),
                    procs.join(", ")
                ),
                remedy: format!(
                    "run the job through ncclenv (ENTRYPOINT [\"ncclenv\", \"--\"], or eval \"$(ncclenv env)\"), or set NCCL_SOCKET_IFNAME={ifname}"
                ),
                processes: procs.clone(),
                known: None,
            });
        }
    }
    explanation.local = Some(LocalView {
        local,
        processes: procs,
        nccl,
        agrees,
    });
}

/// Exit status: 1 when a finding is a warning, else 0.
pub fn exit_code(explanation: &Explanation) -> u8 {
    if explanation
        .findings
        .iter()
        .any(|f| f.severity() == Severity::Warn)
    {
        1
    } else {
        0
    }
}

/// The other hosts' bootstrap addresses (for the comparison's stand-in peer), in order.
pub fn other_bootstraps(explanation: &Explanation, host: &str) -> Vec<IpAddr> {
    let mut v: Vec<IpAddr> = Vec::new();
    for p in explanation.processes.iter().filter(|p| p.host != host) {
        if let Some(b) = &p.bootstrap {
            if !v.contains(&b.addr) {
                v.push(b.addr);
            }
        }
    }
    v
}
