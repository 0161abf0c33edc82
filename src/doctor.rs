//! `ncclenv doctor`: one typed [`Report`] built from a [`Snapshot`] and the [`Plan`] decided from it, rendered
//! as aligned plain text for people ([`Report::text`], one function per section) or as JSON for tools
//! ([`Report::json`], the serde form of the same struct; shape in `docs/doctor.schema.json`).
//!
//! Rendering only: the caller probes (at doctor depth, which also reads the link speeds into
//! [`Snapshot::link_speeds`]), decides, and passes the preflight outlook. Nothing here does I/O.

use crate::decide::interface::NcclModel;
use crate::decide::rdma::HcaReport;
use crate::decide::shm::ShmNeed;
use crate::exit;
use crate::plan::{Action, Change, Choice, Note, Plan, Severity, Verdict};
use crate::preflight::Outlook;
use crate::snapshot::{
    distinct_versions, Addr, ConfFile, GpuInfo, JobShape, Link, NcclInstall, NetPlugin, Network,
    Peer, RdmaSnapshot, Route, RouteLookup, ShmInfo, Snapshot,
};
use serde::Serialize;
use serde_json::Value;
use std::fmt::Write as _;

/// The `schema` value of [`Report::json`]'s output. Bumped only on an incompatible change of the shape.
pub const JSON_SCHEMA_ID: &str = "ncclenv-doctor/1";

/// Exit code for a plan: [`exit::OK`] (0) when NCCL should work as planned, [`exit::FAILED`] (1) when at
/// least one warning (severity warn, not info) applies, [`exit::REFUSED`] (78) when the verdict is refuse.
pub fn exit_code(plan: &Plan) -> u8 {
    match plan.verdict {
        Verdict::Refuse { .. } => exit::REFUSED,
        Verdict::Proceed if plan.has_warnings() => exit::FAILED,
        Verdict::Proceed => exit::OK,
    }
}

/// The line under "NCCL alone" in the text report: where that answer comes from.
pub const NCCL_ALONE_NOTE: &str =
    "              (ncclenv's model of NCCL's rules, not a run of NCCL: `ncclenv check` runs the real one)\n";

/// Everything `doctor` shows. Its fields are the top-level keys of `doctor --json` (described by
/// `docs/doctor.schema.json`); the text report reads the same fields.
///
/// ```text
/// { "schema": "ncclenv-doctor/1",
///   "interfaces": [Interface], "net_error": null | "text", "routes": Routes, "peer": null | PeerReport,
///   "job": JobShape, "rdma": null | RdmaSnapshot,  "shm": null | ShmInfo,  "gpus": null | GpuInfo,
///   "nccl_installs": [NcclInstall],  "nccl_versions": ["2.21.5", …],  "net_plugins": [NetPlugin],
///   "conf_files": [ConfFile], "preflight": Outlook::json, "decision": Decision }
/// ```
///
/// `Route`, `RdmaSnapshot`, … are the serde forms of the `crate::snapshot` types; sizes are in bytes,
/// speeds in Mb/s, memlock `null` = unlimited. The JSON's keys are written in alphabetical order.
#[derive(Debug, Serialize)]
pub struct Report<'a> {
    /// [`JSON_SCHEMA_ID`].
    pub schema: &'static str,
    /// Every link, with its addresses and the routes that use it (empty when the network probe failed).
    pub interfaces: Vec<Interface<'a>>,
    /// Why the network probe failed.
    pub net_error: Option<&'a str>,
    /// Default routes, every route, and the kernel's answers for off-link destinations.
    pub routes: Routes<'a>,
    /// The job's master and the kernel's route to it.
    pub peer: Option<PeerReport<'a>>,
    /// What the launcher says about the job.
    pub job: &'a JobShape,
    /// RDMA devices, verbs nodes, memlock.
    pub rdma: Option<&'a RdmaSnapshot>,
    /// The shared-memory mount.
    pub shm: Option<&'a ShmInfo>,
    /// Visible GPUs.
    pub gpus: Option<&'a GpuInfo>,
    /// NCCL libraries found.
    pub nccl_installs: &'a [NcclInstall],
    /// Their distinct versions.
    pub nccl_versions: Vec<String>,
    /// The rows of the known-defects table that apply here (`crate::nccl_defects::applying`), one line each;
    /// text only (a row that needs a warning is also a finding).
    #[serde(skip)]
    pub nccl_defects: Vec<String>,
    /// NCCL net plugins found.
    pub net_plugins: &'a [NetPlugin],
    /// NCCL config files and their values.
    pub conf_files: &'a [ConfFile],
    /// Whether the fleet preflight would run, and how.
    #[serde(serialize_with = "outlook_json")]
    pub preflight: &'a Outlook,
    /// What ncclenv decided.
    pub decision: Decision<'a>,
    /// The network snapshot, for the text's route lines (`None` when the probe failed).
    #[serde(skip)]
    net: Option<&'a Network>,
    /// The inherited `NCCL_IB_GID_INDEX` NCCL would read (environment over config file), for the GID table.
    #[serde(skip)]
    gid_index: Option<u32>,
}

/// One interface of [`Report::interfaces`].
#[derive(Debug, Serialize)]
pub struct Interface<'a> {
    /// Interface index.
    pub index: u32,
    /// Name.
    pub name: &'a str,
    /// Operational state (`up`, `down`, `unknown`, …).
    pub state: &'a str,
    /// Administratively up.
    pub up: bool,
    /// Running (carrier).
    pub running: bool,
    /// Link kind (`veth`, `bridge`, …), else from the ARPHRD type.
    pub kind: String,
    /// ARPHRD type.
    pub link_type: u16,
    /// MTU.
    pub mtu: Option<u32>,
    /// Speed in Mb/s, when sysfs says.
    pub speed_mbps: Option<u64>,
    /// MAC address.
    pub mac: Option<&'a str>,
    /// Its addresses.
    pub addresses: Vec<&'a Addr>,
    /// Which routes use it: `default`, `default6`, `peer <addr>`, `N other route(s)`.
    pub used_by: Vec<String>,
}

/// [`Report::routes`].
#[derive(Debug, Default, Serialize)]
pub struct Routes<'a> {
    /// Default routes.
    pub default: Vec<&'a Route>,
    /// Every route.
    pub all: &'a [Route],
    /// The kernel's route to an off-link destination through every ip rule.
    pub lookups: &'a [RouteLookup],
}

/// [`Report::peer`]: the master as probed, and the kernel's routes to its addresses.
#[derive(Debug, Serialize)]
pub struct PeerReport<'a> {
    /// Where the master was named (flag, variable, launcher argument).
    pub source: &'a str,
    /// The host as written.
    pub host: &'a str,
    /// Its port, when given.
    pub port: Option<u16>,
    /// Its addresses.
    pub addrs: &'a [std::net::IpAddr],
    /// The last resolution error.
    pub error: Option<&'a str>,
    /// How long resolution was tried, ms.
    pub resolve_ms: u64,
    /// Resolution attempts.
    pub resolve_attempts: u32,
    /// The kernel's route to each address.
    pub routes: &'a [RouteLookup],
    /// The probed peer, for the text.
    #[serde(skip)]
    peer: &'a Peer,
}

/// [`Report::decision`].
#[derive(Debug, Serialize)]
pub struct Decision<'a> {
    /// Variable changes, in order.
    pub changes: &'a [Change],
    /// Findings, in order.
    pub warnings: &'a [Note],
    /// Proceed or refuse.
    pub verdict: &'a Verdict,
    /// ncclenv's interface.
    pub choice: Option<&'a Choice>,
    /// What NCCL alone would choose (ncclenv's model of NCCL's rules, `decide::interface::nccl_alone`).
    pub nccl_alone: Option<String>,
    /// That model as data (`decide::interface::nccl_model`); `None` when the network probe failed.
    pub nccl_model: Option<NcclModel>,
    /// Raise the soft memlock limit before exec.
    pub raise_memlock: bool,
    /// ncclenv changes nothing.
    pub hands_off: bool,
    /// [`exit_code`] of the plan.
    pub exit_code: u8,
    /// Per-HCA facts.
    pub rdma_hcas: Vec<HcaReport>,
    /// The `/dev/shm` budget judged against.
    pub shm_need: Option<&'a ShmNeed>,
    /// The plan, for the text.
    #[serde(skip)]
    plan: &'a Plan,
}

/// One section of the text report: writes its lines (after its title) to the string.
type Section<'r, 'a> = fn(&'r Report<'a>, &mut String);

fn outlook_json<S: serde::Serializer>(o: &&Outlook, s: S) -> Result<S::Ok, S::Error> {
    o.json().serialize(s)
}

impl<'a> Report<'a> {
    /// Build the report (interface speeds from [`Snapshot::link_speeds`], Mb/s by name); `preflight` is the
    /// outlook of the fleet preflight ([`crate::preflight::outlook`]). Pure.
    pub fn new(snap: &'a Snapshot, plan: &'a Plan, preflight: &'a Outlook) -> Report<'a> {
        let net = snap.net.as_ref().ok();
        let interfaces = net.map_or_else(Vec::new, |net| {
            net.links
                .iter()
                .map(|l| Interface {
                    index: l.index,
                    name: &l.name,
                    state: &l.oper_state,
                    up: l.up,
                    running: l.running,
                    kind: kind_text(l),
                    link_type: l.link_type,
                    mtu: l.mtu,
                    speed_mbps: snap.link_speeds.get(&l.name).copied(),
                    mac: l.mac.as_deref(),
                    addresses: addrs_of(net, l),
                    used_by: used_by(net, l),
                })
                .collect()
        });
        let routes = net.map_or_else(Routes::default, |net| Routes {
            default: net.routes.iter().filter(|r| r.is_default()).collect(),
            all: &net.routes,
            lookups: &net.default_lookups,
        });
        let peer = snap.peer.as_ref().map(|p| PeerReport {
            source: &p.source,
            host: &p.host,
            port: p.port,
            addrs: &p.addrs,
            error: p.error.as_deref(),
            resolve_ms: p.resolve_ms,
            resolve_attempts: p.resolve_attempts,
            routes: net.map_or(&[][..], |n| &n.peer_routes),
            peer: p,
        });
        let gid_index =
            crate::nccl_rules::effective("NCCL_IB_GID_INDEX", &snap.env, &snap.conf_files)
                .and_then(|(v, _)| crate::nccl_rules::param_value(v))
                .and_then(|i| u32::try_from(i).ok());
        Report {
            schema: JSON_SCHEMA_ID,
            interfaces,
            net_error: snap.net.as_ref().err().map(String::as_str),
            routes,
            peer,
            job: &snap.job,
            rdma: snap.rdma.as_ref(),
            shm: snap.shm.as_ref(),
            gpus: snap.gpus.as_ref(),
            nccl_installs: &snap.nccl_installs,
            nccl_versions: distinct_versions(&snap.nccl_installs),
            nccl_defects: crate::nccl_defects::applying(snap)
                .into_iter()
                .map(|(d, v)| {
                    format!(
                        "known defect of NCCL {} ({}): {}: {}. ncclenv {}. Remedy: {} [{}; {}]",
                        v.join(", "),
                        d.range_text(),
                        d.condition_text,
                        d.effect,
                        d.ncclenv_does,
                        d.remedy,
                        d.id,
                        d.source
                    )
                })
                .collect(),
            net_plugins: &snap.net_plugins,
            conf_files: &snap.conf_files,
            preflight,
            decision: Decision {
                changes: &plan.changes,
                warnings: &plan.warnings,
                verdict: &plan.verdict,
                choice: plan.choice.as_ref(),
                nccl_alone: crate::decide::interface::nccl_alone(snap),
                nccl_model: crate::decide::interface::nccl_model(snap),
                raise_memlock: plan.raise_memlock,
                hands_off: plan.hands_off,
                exit_code: exit_code(plan),
                rdma_hcas: crate::decide::rdma::hca_report(snap),
                shm_need: plan.shm_need.as_ref(),
                plan,
            },
            net,
            gid_index,
        }
    }

    /// The report as JSON (`docs/doctor.schema.json`), keys in alphabetical order.
    pub fn json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// [`Report::json`] as one line of text.
    pub fn json_text(&self) -> String {
        self.json().to_string()
    }

    /// The report as plain text with aligned columns, one section after another. Every line is escaped
    /// ([`crate::text::escape`]; table cells before they are aligned).
    pub fn text(&self) -> String {
        let mut out = String::from("ncclenv doctor\n");
        let sections: [(&str, Section<'_, 'a>); 13] = [
            ("Interfaces", Report::interfaces_text),
            ("Peer", Report::peer_text),
            ("Preflight", Report::preflight_text),
            ("Interface choice", Report::choice_text),
            ("RDMA", Report::rdma_text),
            ("NCCL net plugins", Report::plugins_text),
            ("Shared memory", Report::shm_text),
            ("GPUs", Report::gpus_text),
            ("NCCL installations", Report::installs_text),
            ("NCCL config files", Report::conf_text),
            ("Changes", Report::changes_text),
            ("Findings", Report::findings_text),
            ("Verdict", Report::verdict_text),
        ];
        for (title, render) in sections {
            let _ = writeln!(out, "\n{title}");
            render(self, &mut out);
        }
        // Names and values from the world may hold control characters: every line leaves inert.
        crate::text::escape_lines(&out)
    }

    /// Interfaces (name, state, kind, addresses, MTU, speed, the routes that use it), then the default
    /// routes and the kernel's own answer for off-link destinations; or the network probe's error.
    fn interfaces_text(&self, out: &mut String) {
        let Some(net) = self.net else {
            let _ = writeln!(
                out,
                "  network probe failed: {}",
                self.net_error.unwrap_or("")
            );
            return;
        };
        let mut rows = vec![row(&[
            "NAME",
            "STATE",
            "KIND",
            "ADDRESSES",
            "MTU",
            "SPEED",
            "USED BY",
        ])];
        for i in &self.interfaces {
            let addrs: Vec<String> = i.addresses.iter().map(|a| addr_text(a)).collect();
            rows.push(vec![
                i.name.to_string(),
                state_text(i),
                i.kind.clone(),
                dash(addrs.join(" ")),
                i.mtu.map_or("-".into(), |m| m.to_string()),
                i.speed_mbps.map_or("-".into(), speed_text),
                dash(i.used_by.join(", ")),
            ]);
        }
        out.push_str(&table(&rows, "  "));
        out.push_str("\nDefault routes\n");
        if self.routes.default.is_empty() {
            out.push_str("  none\n");
        }
        for r in &self.routes.default {
            let _ = writeln!(out, "  {}", route_text(net, r));
        }
        // The kernel's own answer through every ip rule (a failed lookup, e.g. IPv6 on an IPv4-only
        // host, says nothing the list above does not).
        for lk in self.routes.lookups.iter().filter(|l| l.error.is_none()) {
            let _ = writeln!(
                out,
                "  {}",
                lookup_text(net, lk, &format!("kernel's route to off-link {}", lk.dest))
            );
        }
    }

    /// The master, how it was found (flag, `PET_*`, variable), its addresses or how long resolution was
    /// tried, the kernel's route to it, the rendezvous, and what the launcher says about the job.
    fn peer_text(&self, out: &mut String) {
        let job = self.job;
        match &self.peer {
            // Break-it finding 7: "single node" beside "nodes: 2" contradicted the job section.
            None => match job.nnodes {
                Some(n) if n > 1 => {
                    let _ = writeln!(
                        out,
                        "  none named, though the job has {n} nodes: NCCLENV_PEER=HOST (or the launcher's master flag) names it"
                    );
                }
                Some(1) => out.push_str("  none named (a single-node job)\n"),
                _ => out.push_str("  none named (single node, or no launcher variable seen)\n"),
            },
            Some(pr) => {
                let peer = pr.peer;
                let addrs: Vec<String> = peer.addrs.iter().map(|a| a.to_string()).collect();
                let resolved = if peer.resolve_attempts == 0 {
                    String::new()
                } else if peer.addrs.is_empty() {
                    format!(
                        " (not resolved: tried for {} ms, {} attempt(s){})",
                        peer.resolve_ms,
                        peer.resolve_attempts,
                        peer.error
                            .as_ref()
                            .map_or(String::new(), |e| format!("; last: {e}"))
                    )
                } else {
                    format!(" (resolved in {} ms)", peer.resolve_ms)
                };
                let _ = writeln!(
                    out,
                    "  {}{} from {}{} -> {}{resolved}",
                    peer.host,
                    peer.port.map_or(String::new(), |n| format!(" port {n}")),
                    peer.source,
                    job.launcher
                        .map_or(String::new(), |l| format!(" ({})", l.name())),
                    dash(addrs.join(", ")),
                );
                if let Some(net) = self.net {
                    for lk in pr.routes {
                        let _ = writeln!(
                            out,
                            "  {}",
                            lookup_text(net, lk, &format!("route to {}", lk.dest))
                        );
                    }
                }
            }
        }
        if let Some(r) = &job.rendezvous {
            let _ = writeln!(
                out,
                "  rendezvous: {} at {}{} ({}, from {})",
                r.owner,
                r.host,
                r.port.map_or(String::new(), |n| format!(":{n}")),
                match r.protocol {
                    crate::snapshot::RdzvProtocol::Tcp => "TCP",
                    crate::snapshot::RdzvProtocol::Http if r.tls => "HTTPS",
                    crate::snapshot::RdzvProtocol::Http => "HTTP",
                },
                r.source
            );
        }
        self.job_facts_text(out);
    }

    /// What the launcher says about the job: nodes, node rank, master port, this node's address.
    fn job_facts_text(&self, out: &mut String) {
        let job = self.job;
        let mut facts = Vec::new();
        if let Some(n) = job.nnodes {
            facts.push(format!("nodes: {n}{}", paren(&job.source)));
        }
        if let Some(r) = job.node_rank {
            facts.push(format!("node rank: {r}{}", paren(&job.node_rank_source)));
        }
        if let Some(p) = job.master_port {
            facts.push(format!(
                "master port: {p}{}",
                paren(&job.master_port_source)
            ));
        }
        if let Some(a) = &job.self_addr {
            facts.push(format!(
                "this node's address: {a}{}",
                paren(&job.self_addr_source)
            ));
        }
        if !facts.is_empty() {
            let _ = writeln!(out, "  {}", facts.join("; "));
        }
        if let Some(w) = &job.wrapper {
            let _ = writeln!(out, "  read from {w}");
        }
        if let Some(row) = &job.orchestrator {
            let _ = writeln!(
                out,
                "  orchestrator: {row} (its variables named what the launcher left unknown)"
            );
        }
        if let Some(f) = &job.script {
            // Named whenever it runs (break-it finding: it was named only when no master was): a launcher,
            // an `export NCCL_…` or a `cd` inside it is not seen, whoever names the master.
            let advice = if self.peer.is_none() && !job.is_single_node() {
                ", and nothing names the master: set NCCLENV_PEER=<master host> (or MASTER_ADDR) so that \
                 ncclenv takes the route to it"
            } else {
                ": what it sets or starts is not seen here (a variable it exports replaces ncclenv's)"
            };
            let _ = writeln!(
                out,
                "  the command runs the script {f}, which ncclenv does not read{advice}"
            );
        }
    }

    /// Whether the fleet preflight would run ([`Outlook::text`]).
    fn preflight_text(&self, out: &mut String) {
        out.push_str(&self.preflight.text());
    }

    /// What NCCL alone would choose next to ncclenv's choice; a faster interface beside it (`faster-interface`).
    fn choice_text(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "  NCCL alone: {}",
            self.decision
                .nccl_alone
                .as_deref()
                .unwrap_or("unknown (the network probe failed)")
        );
        out.push_str(NCCL_ALONE_NOTE);
        match self.decision.choice {
            Some(c) => {
                let _ = writeln!(
                    out,
                    "  ncclenv:    {}{} ({})",
                    c.ifname,
                    c.addr.map_or(String::new(), |a| format!(" {a}")),
                    c.how
                );
            }
            None => out.push_str("  ncclenv:    no interface chosen\n"),
        }
        // `decide::faster`: a faster interface beside the choice (#23, item 5).
        let code = crate::findings::Finding::FasterInterface.code();
        if let Some(w) = self.decision.warnings.iter().find(|w| w.code == code) {
            let _ = writeln!(out, "  faster:     {}", w.message);
        }
    }

    /// RDMA devices and ports, GID tables, verbs nodes, memlock and `CAP_IPC_LOCK`.
    fn rdma_text(&self, out: &mut String) {
        let Some(r) = self.rdma else {
            out.push_str("  not probed\n");
            return;
        };
        if r.devices.is_empty() {
            out.push_str("  no device\n");
        } else {
            self.rdma_tables(out, r);
        }
        let _ = writeln!(
            out,
            "  verbs nodes: {}; rdma_cm: {}",
            dash(r.uverbs.join(" ")),
            if r.rdma_cm { "yes" } else { "no" }
        );
        let caps = match r.cap_ipc_lock {
            None => String::new(),
            Some(true) => "; CAP_IPC_LOCK: yes (the limit does not bind the command)".into(),
            Some(false) => "; CAP_IPC_LOCK: no".into(),
        };
        let _ = writeln!(
            out,
            "  memlock: soft {}, hard {}{caps}",
            limit_text(r.memlock_soft),
            limit_text(r.memlock_hard)
        );
        if let Some(e) = &r.error {
            let _ = writeln!(out, "  probe error: {e}");
        }
    }

    /// NCCL net plugins and whether each loads.
    fn plugins_text(&self, out: &mut String) {
        if self.net_plugins.is_empty() {
            out.push_str("  none found\n");
            return;
        }
        let mut rows = vec![row(&["PATH", "FOUND IN", "LOADS"])];
        for p in self.net_plugins {
            rows.push(vec![
                p.path.clone(),
                p.source.clone(),
                if p.loads {
                    "yes (its IB transport ignores NCCL_IB_DISABLE; NCCL_IBEXT_DISABLE=1 stops it)"
                        .into()
                } else {
                    "no".into()
                },
            ]);
        }
        out.push_str(&table(&rows, "  "));
    }

    /// `/dev/shm`: free and total, read-only, writable, leftover `nccl-*` segments, and what NCCL needs.
    fn shm_text(&self, out: &mut String) {
        match self.shm {
            None => out.push_str("  not probed\n"),
            Some(s) => match &s.error {
                Some(e) => {
                    let _ = writeln!(out, "  {}: {e}", s.path);
                }
                None => {
                    let _ = writeln!(
                        out,
                        "  {}: {} free of {}{}{}",
                        s.path,
                        s.free_bytes.map_or("?".into(), mib_text),
                        s.total_bytes.map_or("?".into(), mib_text),
                        if s.read_only { ", read-only" } else { "" },
                        match s.writable {
                            Some(true) => "; writable",
                            Some(false) => "; NOT writable",
                            None => "",
                        }
                    );
                    if let Some(e) = &s.write_error {
                        let _ = writeln!(out, "  {e}");
                    }
                    if !s.nccl_segments.is_empty() {
                        let segs: Vec<String> = s
                            .nccl_segments
                            .iter()
                            .map(|g| format!("{} ({})", g.name, mib_text(g.bytes)))
                            .collect();
                        let _ = writeln!(out, "  nccl-* segments: {}", segs.join(", "));
                    }
                }
            },
        }
        if let Some(n) = self.decision.shm_need {
            let _ = writeln!(out, "  NCCL needs: {}", n.describe());
        }
    }

    /// Visible GPUs and the launcher's local ranks.
    fn gpus_text(&self, out: &mut String) {
        match self.gpus {
            None => out.push_str("  not probed\n"),
            Some(g) => {
                let _ = writeln!(
                    out,
                    "  {} ({})",
                    g.count.map_or("unknown".into(), |c| c.to_string()),
                    g.source
                );
            }
        }
        if let Some(n) = self.job.local_ranks {
            let _ = writeln!(
                out,
                "  local ranks: {n} ({})",
                self.job
                    .local_ranks_source
                    .as_deref()
                    .unwrap_or("the launcher")
            );
        }
    }

    /// NCCL libraries found, with their versions.
    fn installs_text(&self, out: &mut String) {
        if self.nccl_installs.is_empty() {
            out.push_str("  none found\n");
            return;
        }
        let mut rows = vec![row(&["PATH", "VERSION", "FOUND IN"])];
        for i in self.nccl_installs {
            rows.push(vec![
                i.path.clone(),
                i.version.clone().unwrap_or_else(|| "?".into()),
                i.source.clone(),
            ]);
        }
        out.push_str(&table(&rows, "  "));
        for d in &self.nccl_defects {
            let _ = writeln!(out, "  {d}");
        }
    }

    /// NCCL config files and their values.
    fn conf_text(&self, out: &mut String) {
        if self.conf_files.is_empty() {
            out.push_str("  none\n");
        }
        for f in self.conf_files {
            let _ = writeln!(out, "  {}", f.path);
            for (k, v) in &f.values {
                let _ = writeln!(out, "    {k}={v}");
            }
            if let Some(e) = &f.error {
                let _ = writeln!(out, "    error: {e}");
            }
        }
    }

    /// Every change with its reason (and the value it replaced), memlock, hands off.
    fn changes_text(&self, out: &mut String) {
        let decision = &self.decision;
        if decision.changes.is_empty() {
            out.push_str("  none\n");
        } else {
            let mut rows = Vec::new();
            for c in decision.changes {
                let what = match &c.action {
                    Action::Set { value } => format!("{}={value}", c.name),
                    Action::Unset => format!("unset {}", c.name),
                };
                let mut reason = c.reason.clone();
                if let Some(old) = &c.replaced {
                    let _ = write!(reason, " (was {old:?})");
                }
                rows.push(vec![what, reason]);
            }
            out.push_str(&table(&rows, "  "));
        }
        if decision.raise_memlock {
            out.push_str("  raise soft RLIMIT_MEMLOCK to the hard limit before exec\n");
        }
        if decision.hands_off {
            out.push_str("  hands off: ncclenv changes nothing\n");
        }
    }

    /// Every finding with its severity, code and remedy.
    fn findings_text(&self, out: &mut String) {
        if self.decision.warnings.is_empty() {
            out.push_str("  none\n");
        }
        for w in self.decision.warnings {
            let sev = match w.severity {
                Severity::Info => "info",
                Severity::Warn => "warn",
            };
            let _ = writeln!(out, "  [{sev}] {}: {}", w.code, w.message);
            let _ = writeln!(out, "         remedy: {}", w.remedy);
        }
    }

    /// Proceed or refuse, with the exit code.
    fn verdict_text(&self, out: &mut String) {
        match self.decision.verdict {
            Verdict::Proceed if self.decision.plan.has_warnings() => {
                let _ = writeln!(out, "  proceed, with warnings (exit {})", exit::FAILED);
            }
            Verdict::Proceed => {
                let _ = writeln!(out, "  proceed: NCCL should work (exit {})", exit::OK);
            }
            Verdict::Refuse { reason, remedy, .. } => {
                let _ = writeln!(out, "  refuse (exit {}): {reason}", exit::REFUSED);
                let _ = writeln!(out, "  remedy: {remedy}");
            }
        }
    }

    /// The HCA/port table (with each HCA's verbs node and whether NCCL can use the port), then the GID tables.
    fn rdma_tables(&self, out: &mut String, rdma: &RdmaSnapshot) {
        let report = &self.decision.rdma_hcas;
        let mut rows = vec![row(&[
            "DEVICE",
            "PORT",
            "STATE",
            "PHYS",
            "LINK",
            "RATE",
            "VERBS NODE",
            "NCCL",
        ])];
        for (d, rep) in rdma.devices.iter().zip(report) {
            // The full open error is in the NCCL column.
            let state = if rep.verbs.starts_with("open failed") {
                "does not open"
            } else {
                rep.verbs.as_str()
            };
            let verbs = match &rep.verbs_node {
                Some(n) => format!("{n} ({state})"),
                None => state.to_string(),
            };
            if d.ports.is_empty() {
                rows.push(vec![
                    d.name.clone(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    verbs.clone(),
                    "no ports".into(),
                ]);
            }
            for (p, pr) in d.ports.iter().zip(&rep.ports) {
                rows.push(vec![
                    d.name.clone(),
                    p.port.to_string(),
                    p.port_state().to_string(),
                    p.phys_port_state().to_string(),
                    dash(p.link_layer.clone()),
                    dash(p.rate.clone()),
                    verbs.clone(),
                    match &pr.problem {
                        None => "usable".into(),
                        Some(why) => format!("not usable: {why}"),
                    },
                ]);
            }
        }
        out.push_str(&table(&rows, "  "));
        self.gid_tables(out, rdma);
    }

    /// Each port's non-empty GID entries: address, type, netdev, and which index NCCL picks, which works
    /// here and which `NCCL_IB_GID_INDEX` names.
    fn gid_tables(&self, out: &mut String, rdma: &RdmaSnapshot) {
        use crate::decide::gid;
        let report = &self.decision.rdma_hcas;
        let links: Option<Vec<&str>> = self
            .net
            .map(|n| n.links.iter().map(|l| l.name.as_str()).collect());
        let mut rows = vec![row(&[
            "DEVICE", "PORT", "INDEX", "GID", "TYPE", "NETDEV", "NOTE",
        ])];
        for (d, rep) in rdma.devices.iter().zip(report) {
            for (p, pr) in d.ports.iter().zip(&rep.ports) {
                for g in &p.gids {
                    let mut notes = Vec::new();
                    if pr.nccl_gid_index == Some(g.index) {
                        notes.push("NCCL's choice");
                    }
                    if gid::is_roce(p) && pr.working_gid_index == Some(g.index) {
                        notes.push("works here");
                    }
                    if gid::is_roce(p) && self.gid_index == Some(g.index) {
                        notes.push("NCCL_IB_GID_INDEX");
                    }
                    if let (Some(l), Some(n)) = (&links, &g.ndev) {
                        if !l.contains(&n.as_str()) {
                            notes.push("netdev not here");
                        }
                    }
                    rows.push(vec![
                        d.name.clone(),
                        p.port.to_string(),
                        g.index.to_string(),
                        gid::gid_addr(g).map_or_else(|| g.gid.clone(), |a| a.to_string()),
                        g.kind.clone().unwrap_or_else(|| "-".into()),
                        g.ndev.clone().unwrap_or_else(|| "-".into()),
                        notes.join(", "),
                    ]);
                }
            }
        }
        if rows.len() > 1 {
            out.push_str("  GID tables (non-empty entries)\n");
            out.push_str(&table(&rows, "  "));
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Helpers

fn paren(s: &Option<String>) -> String {
    s.as_ref().map_or(String::new(), |s| format!(" ({s})"))
}

/// One route lookup as `LABEL: dev IF src A via G table T` (or its error).
fn lookup_text(net: &Network, lk: &crate::snapshot::RouteLookup, label: &str) -> String {
    let dev = lk.oif.map_or("-".to_string(), |i| link_name(net, i));
    let mut line = format!("{label}: dev {dev}");
    if let Some(s) = lk.prefsrc {
        let _ = write!(line, " src {s}");
    }
    if let Some(g) = lk.gateway {
        let _ = write!(line, " via {g}");
    }
    if let Some(t) = lk.table.filter(|t| *t != 254) {
        let _ = write!(line, " table {t}");
    }
    if lk.local {
        line.push_str(" (local: the peer is this host)");
    }
    if let Some(e) = &lk.error {
        let _ = write!(line, " error: {e}");
    }
    line
}

fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|s| s.to_string()).collect()
}

fn dash(s: String) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s
    }
}

/// Rows as columns padded to the widest cell (by characters); the last column is not padded.
fn table(rows: &[Vec<String>], indent: &str) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|c| crate::text::escape(c).into_owned())
                .collect()
        })
        .collect();
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut width = vec![0usize; cols];
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in &rows {
        let mut line = String::from(indent);
        for (i, c) in r.iter().enumerate() {
            line.push_str(c);
            if i + 1 < r.len() {
                let pad = width[i].saturating_sub(c.chars().count()) + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn addrs_of<'a>(net: &'a Network, l: &Link) -> Vec<&'a Addr> {
    net.addrs.iter().filter(|a| a.index == l.index).collect()
}

fn addr_text(a: &Addr) -> String {
    let mut s = format!("{}/{}", a.addr, a.prefix_len);
    if a.tentative {
        s.push_str("(tentative)");
    }
    if a.dad_failed {
        s.push_str("(dadfailed)");
    }
    s
}

fn state_text(l: &Interface<'_>) -> String {
    let mut s = if l.state.is_empty() {
        "?".to_string()
    } else {
        l.state.to_string()
    };
    if l.up && !l.running {
        s.push_str(",no-carrier");
    } else if !l.up {
        s.push_str(",admin-down");
    }
    s
}

fn kind_text(l: &Link) -> String {
    if let Some(k) = &l.kind {
        return k.clone();
    }
    match l.link_type {
        772 => "loopback".into(),
        32 => "ipoib".into(),
        1 => "ether".into(),
        t => format!("arphrd-{t}"),
    }
}

fn link_name(net: &Network, index: u32) -> String {
    net.links
        .iter()
        .find(|l| l.index == index)
        .map_or_else(|| format!("#{index}"), |l| l.name.clone())
}

/// Which routes use the link: `default`, `peer <addr>`, and a count of other routes.
fn used_by(net: &Network, l: &Link) -> Vec<String> {
    let mut out = Vec::new();
    let mut others = 0usize;
    for r in &net.routes {
        if r.paths().iter().any(|p| p.oif == l.index) {
            if r.is_default() {
                out.push(if r.family == crate::snapshot::Family::Inet6 {
                    "default6".to_string()
                } else {
                    "default".to_string()
                });
            } else {
                others += 1;
            }
        }
    }
    for lk in &net.peer_routes {
        if lk.oif == Some(l.index) {
            out.push(format!("peer {}", lk.dest));
        }
    }
    if others > 0 {
        out.push(format!("{others} other route(s)"));
    }
    out
}

fn route_text(net: &Network, route: &Route) -> String {
    let paths: Vec<String> = route
        .paths()
        .iter()
        .map(|p| {
            let mut s = String::new();
            if let Some(g) = p.gateway {
                let _ = write!(s, "via {g} ");
            }
            let _ = write!(s, "dev {}", link_name(net, p.oif));
            if p.linkdown {
                s.push_str(" linkdown");
            }
            s
        })
        .collect();
    let fam = if route.family == crate::snapshot::Family::Inet6 {
        "default (IPv6)"
    } else {
        "default"
    };
    format!("{fam} {} metric {}", dash(paths.join(" / ")), route.metric)
}

fn speed_text(mbps: u64) -> String {
    if mbps >= 1000 && mbps.is_multiple_of(1000) {
        format!("{} Gb/s", mbps / 1000)
    } else {
        format!("{mbps} Mb/s")
    }
}

fn mib_text(bytes: u64) -> String {
    crate::snapshot::Mib(bytes).to_string()
}

fn limit_text(v: Option<u64>) -> String {
    v.map_or("unlimited".into(), mib_text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Choice;
    use crate::snapshot::{
        GpuInfo, NcclInstall, Peer, RdmaDevice, RdmaPort, RdmaSnapshot, RouteLookup, ShmInfo,
    };
    use std::collections::BTreeMap;
    use std::net::IpAddr;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))
    }

    /// The sample node: [`sample_snapshot`] and the plan decided on it ([`sample_plan`]).
    fn sample() -> (Snapshot, Plan) {
        let snap = sample_snapshot();
        let plan = sample_plan(&snap);
        (snap, plan)
    }

    /// The sample's network: loopback and a veth `eth0` with 10.0.0.2/24, a default route via 10.0.0.1, and
    /// the route to the peer 10.0.0.5 out of `eth0`.
    fn sample_network() -> Network {
        Network {
            links: vec![
                Link {
                    index: 1,
                    name: "lo".into(),
                    up: true,
                    running: true,
                    loopback: true,
                    oper_state: "unknown".into(),
                    mtu: Some(65536),
                    link_type: 772,
                    ..Link::default()
                },
                Link {
                    index: 2,
                    name: "eth0".into(),
                    up: true,
                    running: true,
                    oper_state: "up".into(),
                    mtu: Some(1500),
                    kind: Some("veth".into()),
                    link_type: 1,
                    ..Link::default()
                },
            ],
            addrs: vec![Addr {
                index: 2,
                addr: ip("10.0.0.2"),
                prefix_len: 24,
                scope: 0,
                tentative: false,
                deprecated: false,
                dad_failed: false,
                label: None,
            }],
            routes: vec![Route {
                family: crate::snapshot::Family::Inet,
                dst: None,
                metric: 0,
                oif: Some(2),
                gateway: Some(ip("10.0.0.1")),
                linkdown: false,
                nexthops: vec![],
                kind: 1,
                scope: 0,
                prefsrc: None,
            }],
            peer_routes: vec![RouteLookup {
                dest: ip("10.0.0.5"),
                oif: Some(2),
                prefsrc: Some(ip("10.0.0.2")),
                gateway: None,
                local: false,
                error: None,
                table: Some(254),
            }],
            ipv6_routes_probed: true,
            default_lookups: vec![],
        }
    }

    /// The sample's RDMA: one active InfiniBand HDR port (`mlx5_0` port 1, no GIDs), 8 MiB of memlock and no
    /// CAP_IPC_LOCK.
    fn sample_rdma() -> RdmaSnapshot {
        RdmaSnapshot {
            devices: vec![RdmaDevice {
                name: "mlx5_0".into(),
                ports: vec![RdmaPort {
                    port: 1,
                    state: 4,
                    phys_state: 5,
                    link_layer: "InfiniBand".into(),
                    rate: "200 Gb/sec (4X HDR)".into(),
                    gids: vec![],
                    gid_tbl_len: 0,
                }],
                verbs: None,
            }],
            uverbs: vec!["uverbs0".into()],
            rdma_cm: true,
            memlock_soft: Some(8 << 20),
            memlock_hard: Some(8 << 20),
            error: None,
            cap_ipc_lock: Some(false),
        }
    }

    /// The sample node: [`sample_network`], the peer from `MASTER_ADDR`, [`sample_rdma`], a 64 MiB
    /// `/dev/shm`, four GPUs and two libnccl files of different versions.
    fn sample_snapshot() -> Snapshot {
        Snapshot {
            net: Ok(sample_network()),
            peer: Some(Peer {
                source: "MASTER_ADDR".into(),
                host: "10.0.0.5".into(),
                addrs: vec![ip("10.0.0.5")],
                error: None,
                port: None,
                resolve_ms: 0,
                resolve_attempts: 0,
            }),
            rdma: Some(sample_rdma()),
            shm: Some(ShmInfo {
                path: "/dev/shm".into(),
                total_bytes: Some(64 << 20),
                free_bytes: Some(64 << 20),
                read_only: false,
                error: None,
                writable: Some(true),
                ..ShmInfo::default()
            }),
            gpus: Some(GpuInfo {
                count: Some(4),
                source: "CUDA_VISIBLE_DEVICES".into(),
                warning: None,
            }),
            nccl_installs: vec![
                NcclInstall {
                    path: "/usr/lib/x86_64-linux-gnu/libnccl.so.2".into(),
                    version: Some("2.19.3".into()),
                    source: "ld.so.cache".into(),
                },
                NcclInstall {
                    path: "/usr/local/lib/python3.10/dist-packages/nvidia/nccl/lib/libnccl.so.2"
                        .into(),
                    version: Some("2.21.5".into()),
                    source: "dist-packages (nvidia-nccl wheel)".into(),
                },
            ],
            ..Snapshot::default()
        }
    }

    /// What ncclenv decides on `snap` for RDMA, shared memory and the host, with `eth0` chosen by the route
    /// to the peer.
    fn sample_plan(snap: &Snapshot) -> Plan {
        let mut plan = Plan::default();
        let cfg = crate::config::Config::default();
        crate::decide::rdma::decide_rdma(snap, &cfg, &mut plan);
        crate::decide::shm::decide_shm(snap, &cfg, &mut plan);
        crate::decide::host::decide_host(snap, &mut plan);
        plan.choice = Some(Choice {
            ifname: "eth0".into(),
            addr: Some(ip("10.0.0.2")),
            how: "route to peer 10.0.0.5 (MASTER_ADDR)".into(),
        });
        plan
    }

    /// `render` of the report on `snap` with its link speeds set to `speeds` and "NCCL alone" given (the
    /// sample's model answer is not what these tests check).
    fn rendered<T>(
        snap: &Snapshot,
        plan: &Plan,
        alone: Option<&str>,
        speeds: &BTreeMap<String, u64>,
        preflight: &Outlook,
        render: impl Fn(&Report) -> T,
    ) -> T {
        let snap = Snapshot {
            link_speeds: speeds.clone(),
            ..snap.clone()
        };
        let mut r = Report::new(&snap, plan, preflight);
        r.decision.nccl_alone = alone.map(String::from);
        render(&r)
    }

    /// The report's text.
    fn render_text(
        snap: &Snapshot,
        plan: &Plan,
        alone: Option<&str>,
        speeds: &BTreeMap<String, u64>,
        preflight: &Outlook,
    ) -> String {
        rendered(snap, plan, alone, speeds, preflight, |r| r.text())
    }

    /// The report's JSON.
    fn render_json(
        snap: &Snapshot,
        plan: &Plan,
        alone: Option<&str>,
        speeds: &BTreeMap<String, u64>,
        preflight: &Outlook,
    ) -> Value {
        rendered(snap, plan, alone, speeds, preflight, |r| r.json())
    }

    fn no_preflight() -> Outlook {
        Outlook {
            enabled: false,
            timeout_s: 60,
            setup: Err("the job runs on one node".into()),
        }
    }

    /// `faster-interface` shows in the "Interface choice" section, under ncclenv's choice (#23, item 5).
    #[test]
    fn choice_section_names_a_faster_interface() {
        let (snap, mut plan) = sample();
        let speeds = BTreeMap::new();
        let t = render_text(&snap, &plan, None, &speeds, &no_preflight());
        assert!(!t.contains("faster:"), "{t}");
        plan.finding(
            crate::findings::Finding::FasterInterface,
            "ens5 (100 Gbit/s) is faster",
            "r",
        );
        let t = render_text(&snap, &plan, None, &speeds, &no_preflight());
        let section = t.split("\nInterface choice\n").nth(1).unwrap_or("");
        let section = section.split("\nRDMA\n").next().unwrap_or("");
        assert!(
            section.contains("  faster:     ens5 (100 Gbit/s) is faster\n"),
            "{t}"
        );
    }

    /// Break-it finding 7: with no master named, the peer section agrees with the job's node count.
    #[test]
    fn no_peer_says_what_the_node_count_says() {
        let (snap, plan) = sample();
        let speeds = BTreeMap::new();
        let mut snap = Snapshot { peer: None, ..snap };
        for (nnodes, says) in [
            (
                Some(2),
                "none named, though the job has 2 nodes: NCCLENV_PEER=HOST",
            ),
            (Some(1), "none named (a single-node job)"),
            (
                None,
                "none named (single node, or no launcher variable seen)",
            ),
        ] {
            snap.job.nnodes = nnodes;
            let t = render_text(&snap, &plan, None, &speeds, &no_preflight());
            assert!(t.contains(says), "{nnodes:?}: {t}");
            assert_eq!(t.matches("none named").count(), 1, "{t}");
        }
    }

    #[test]
    fn text_has_every_section_and_aligned_columns() {
        let (snap, plan) = sample();
        let mut speeds = BTreeMap::new();
        speeds.insert("eth0".to_string(), 25000u64);
        let t = render_text(
            &snap,
            &plan,
            Some("eth0 10.0.0.2"),
            &speeds,
            &no_preflight(),
        );
        for needle in [
            "Interfaces",
            "25 Gb/s",
            "default via 10.0.0.1 dev eth0 metric 0",
            "route to 10.0.0.5: dev eth0 src 10.0.0.2",
            "NCCL alone: eth0 10.0.0.2",
            "ncclenv:    eth0 10.0.0.2 (route to peer",
            "mlx5_0",
            "memlock: soft 8 MiB, hard 8 MiB",
            "/dev/shm: 64 MiB free of 64 MiB",
            "4 (CUDA_VISIBLE_DEVICES)",
            "model of NCCL's rules, not a run of NCCL",
            "[warn] nccl-several-versions: several NCCL versions are installed (2.19.3 at",
            "NCCL_IB_DISABLE=1",
            "NCCL_SHM_DISABLE=1",
            "[warn] rdma-memlock-low",
            "[warn] shm-too-small",
            "proceed, with warnings (exit 1)",
        ] {
            assert!(t.contains(needle), "missing {needle:?} in\n{t}");
        }
        // Header and eth0 row: the ADDRESSES column starts at the same offset.
        let header = t.lines().find(|l| l.contains("ADDRESSES")).unwrap_or("");
        let eth0 = t.lines().find(|l| l.contains("10.0.0.2/24")).unwrap_or("");
        assert_eq!(header.find("ADDRESSES"), eth0.find("10.0.0.2/24"));
        assert!(eth0.contains("default, peer 10.0.0.5"));
    }

    #[test]
    fn json_shape_is_stable() {
        let (snap, plan) = sample();
        let v = render_json(&snap, &plan, None, &BTreeMap::new(), &no_preflight());
        assert_eq!(v["schema"], JSON_SCHEMA_ID);
        for k in [
            "interfaces",
            "net_error",
            "routes",
            "peer",
            "job",
            "rdma",
            "shm",
            "gpus",
            "nccl_installs",
            "nccl_versions",
            "conf_files",
            "preflight",
            "decision",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert_eq!(v["interfaces"][1]["name"], "eth0");
        assert_eq!(v["interfaces"][1]["addresses"][0]["addr"], "10.0.0.2");
        assert_eq!(v["routes"]["default"].as_array().map(Vec::len), Some(1));
        assert_eq!(v["decision"]["verdict"]["verdict"], "proceed");
        assert_eq!(v["decision"]["exit_code"], 1);
        assert_eq!(v["decision"]["changes"][0]["action"], "set");
        assert_eq!(v["decision"]["choice"]["ifname"], "eth0");
        assert!(v["decision"]["nccl_alone"].is_null());
    }

    #[test]
    fn json_schema_file_names_every_top_level_key() {
        let schema: Value =
            serde_json::from_str(include_str!("../docs/doctor.schema.json")).unwrap_or(Value::Null);
        assert_eq!(
            schema["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        let (snap, plan) = sample();
        let v = render_json(&snap, &plan, None, &BTreeMap::new(), &no_preflight());
        let props = schema["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let keys = v.as_object().cloned().unwrap_or_default();
        for k in keys.keys() {
            assert!(props.contains_key(k), "schema lacks {k}");
        }
        let required = schema["required"].as_array().cloned().unwrap_or_default();
        assert_eq!(required.len(), keys.len());
    }

    /// The text and the JSON of one report say the same: every change (`NAME=value`), every finding code with
    /// its severity, the verdict's exit code, the model of NCCL alone. `NCCLENV_DOCTOR_SAMPLE=dir` also writes
    /// both there (to eyeball or validate).
    #[test]
    fn text_and_json_agree() {
        let (snap, plan) = sample();
        let mut speeds = BTreeMap::new();
        speeds.insert("eth0".to_string(), 25000u64);
        let t = render_text(
            &snap,
            &plan,
            Some("eth0 10.0.0.2"),
            &speeds,
            &no_preflight(),
        );
        let v = render_json(
            &snap,
            &plan,
            Some("eth0 10.0.0.2"),
            &speeds,
            &no_preflight(),
        );
        if let Ok(dir) = std::env::var("NCCLENV_DOCTOR_SAMPLE") {
            let dir = std::path::Path::new(&dir);
            let _ = std::fs::write(dir.join("doctor.txt"), &t);
            let _ = std::fs::write(dir.join("doctor.json"), v.to_string());
        }
        let changes = v["decision"]["changes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(changes.len() >= 2, "{v}");
        for c in &changes {
            let line = format!(
                "{}={}",
                c["name"].as_str().unwrap_or("?"),
                c["value"].as_str().unwrap_or("?")
            );
            assert!(
                t.lines().any(|l| l.trim_start().starts_with(&line)),
                "{line} missing from the text:\n{t}"
            );
        }
        let warnings = v["decision"]["warnings"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(!warnings.is_empty(), "{v}");
        for w in &warnings {
            let tag = format!(
                "[{}] {}:",
                w["severity"].as_str().unwrap_or("?"),
                w["code"].as_str().unwrap_or("?")
            );
            assert!(t.contains(&tag), "{tag} missing from the text:\n{t}");
        }
        let exit = v["decision"]["exit_code"].as_i64().unwrap_or(-1);
        assert!(t.contains(&format!("(exit {exit})")), "{t}");
        assert_eq!(exit, i64::from(exit_code(&plan)));
        assert_eq!(v["decision"]["nccl_alone"], "eth0 10.0.0.2");
        assert!(t.contains("NCCL alone: eth0 10.0.0.2"), "{t}");
        // The model as data follows the sample's NCCL installs (2.19.3 and 2.21.5: before 2.28).
        assert_eq!(v["decision"]["nccl_model"]["era"], "before-2.28", "{v}");
        assert_eq!(
            v["decision"]["nccl_model"]["bootstrap"]["ifname"], "eth0",
            "{v}"
        );
    }

    #[test]
    fn exit_codes() {
        let mut p = Plan::default();
        assert_eq!(exit_code(&p), 0);
        p.finding(crate::findings::Finding::Disabled, "m", "r");
        assert_eq!(exit_code(&p), 0);
        p.finding(crate::findings::Finding::NoInterface, "m", "r");
        assert_eq!(exit_code(&p), 1);
        p.refuse("x", "no", "fix");
        assert_eq!(exit_code(&p), 78);
    }

    #[test]
    fn net_error_renders() {
        let snap = Snapshot::default();
        let plan = Plan::default();
        let t = render_text(&snap, &plan, None, &BTreeMap::new(), &no_preflight());
        assert!(t.contains("network probe failed: not probed"));
        assert!(t.contains("proceed: NCCL should work (exit 0)"));
        let v = render_json(&snap, &plan, None, &BTreeMap::new(), &no_preflight());
        assert_eq!(v["net_error"], "not probed");
        assert_eq!(v["interfaces"].as_array().map(Vec::len), Some(0));
    }

    /// Golden files: `doctor`'s text and JSON on captured snapshots. Each case is a folder of
    /// `tests/golden/doctor/`: `snapshot.json` (`{"snapshot": Snapshot, "speeds": {"eth0": 25000}, "ncclenv":
    /// {…}}`: the serde form of what the probes read, the link speeds in Mb/s, and the `NCCLENV_*` variables
    /// of the capture, which configure the decision), `doctor.txt` (the text report) and
    /// `doctor.json` (the JSON report, pretty-printed). The decision, the preflight outlook and both renderings
    /// run on the snapshot, as `ncclenv doctor` does. `NCCLENV_BLESS=1 cargo
    /// test --lib doctor::tests::golden` rewrites the two outputs; [`capture`] writes a new case from this
    /// machine.
    mod golden {
        use super::super::*;
        use std::collections::BTreeMap;
        use std::path::{Path, PathBuf};

        /// One fixture file.
        #[derive(serde::Serialize, serde::Deserialize)]
        struct Fixture {
            snapshot: Snapshot,
            speeds: BTreeMap<String, u64>,
            /// The `NCCLENV_*` variables of the capture (e.g. a fake sysfs root), read as ncclenv reads them.
            #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
            ncclenv: BTreeMap<String, String>,
        }

        /// The configuration of a fixture: its `NCCLENV_*` variables over the defaults.
        fn config(f: &Fixture) -> crate::config::Config {
            let vars = f.ncclenv.iter().map(|(k, v)| (k.into(), v.into()));
            crate::cli::config_from_env(vars).expect("the fixture's NCCLENV_* variables")
        }

        fn root() -> PathBuf {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/doctor")
        }

        /// The text and pretty JSON of `doctor` on a fixture, and its exit code.
        fn render(f: &Fixture) -> (String, String, u8) {
            let cfg = config(f);
            let snap = Snapshot {
                link_speeds: f.speeds.clone(),
                ..f.snapshot.clone()
            };
            let plan = crate::decide::decide(&snap, &cfg);
            let outlook = crate::preflight::outlook(&snap, &cfg, &plan);
            let r = Report::new(&snap, &plan, &outlook);
            let json = serde_json::to_string_pretty(&r.json()).unwrap_or_default() + "\n";
            (r.text(), json, exit_code(&plan))
        }

        #[test]
        fn doctor_output_matches_the_golden_files() {
            let bless = std::env::var("NCCLENV_BLESS").as_deref() == Ok("1");
            let mut cases: Vec<PathBuf> = std::fs::read_dir(root())
                .expect("tests/golden/doctor")
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.join("snapshot.json").is_file())
                .collect();
            cases.sort();
            assert!(cases.len() >= 3, "golden cases: {cases:?}");
            let mut exits = Vec::new();
            for dir in &cases {
                let text = std::fs::read_to_string(dir.join("snapshot.json")).expect("read");
                let f: Fixture = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
                let (t, j, code) = render(&f);
                exits.push(code);
                for (name, want) in [("doctor.txt", &t), ("doctor.json", &j)] {
                    let path = dir.join(name);
                    let have = std::fs::read_to_string(&path).unwrap_or_default();
                    if have == *want {
                        continue;
                    }
                    if bless {
                        std::fs::write(&path, want).expect("write golden file");
                    } else {
                        panic!(
                            "{} differs from doctor's output (NCCLENV_BLESS=1 cargo test --lib \
                             doctor::tests::golden rewrites it); doctor now says:\n{want}",
                            path.display()
                        );
                    }
                }
            }
            // The cases cover the three verdicts: ok, warnings, refuse.
            for code in [exit::OK, exit::FAILED, exit::REFUSED] {
                assert!(
                    exits.contains(&code),
                    "no golden case exits {code}: {exits:?}"
                );
            }
        }

        /// Capture this machine as a new case: `NCCLENV_CAPTURE=NAME cargo test --lib
        /// doctor::tests::golden::capture -- --ignored`, with `NCCLENV_CAPTURE_CMD='torchrun --nnodes=2 …'`
        /// for a job's command (its launcher arguments are read, as `ncclenv doctor -- CMD` does); the capture's
        /// `NCCLENV_*` variables (a fake `NCCLENV_SYSFS` tree) are kept in the fixture. Then bless.
        /// Review `snapshot.json` before committing it: it records interface names, addresses and the
        /// NCCL-related variables of this machine.
        #[test]
        #[ignore = "writes a fixture from this machine; run by hand"]
        fn capture() {
            let Ok(name) = std::env::var("NCCLENV_CAPTURE") else {
                return;
            };
            let cmd: Vec<std::ffi::OsString> = std::env::var("NCCLENV_CAPTURE_CMD")
                .unwrap_or_default()
                .split_whitespace()
                .map(Into::into)
                .collect();
            let vars: Vec<(std::ffi::OsString, std::ffi::OsString)> = std::env::vars_os().collect();
            let ncclenv: BTreeMap<String, String> = std::env::vars()
                .filter(|(k, _)| k.starts_with("NCCLENV_") && !k.starts_with("NCCLENV_CAPTURE"))
                .collect();
            let cfg =
                crate::cli::config_from_env(ncclenv.iter().map(|(k, v)| (k.into(), v.into())))
                    .expect("NCCLENV_* variables");
            let snapshot = crate::probe::collect(&cfg, &cmd, &vars, crate::probe::Depth::Doctor);
            let speeds = snapshot.link_speeds.clone();
            let dir = root().join(name);
            std::fs::create_dir_all(&dir).expect("mkdir");
            let f = Fixture {
                snapshot,
                speeds,
                ncclenv,
            };
            let text = serde_json::to_string_pretty(&f).expect("json") + "\n";
            std::fs::write(dir.join("snapshot.json"), text).expect("write");
        }
    }
}
