//! `ncclenv doctor`: render a [`Snapshot`] and the [`Plan`] decided from it, as aligned plain text for people
//! ([`render_text`]) or as JSON for tools ([`render_json`], shape in `docs/doctor.schema.json`).
//!
//! Rendering only: the caller probes, decides, and passes the interface speeds it read with
//! [`crate::probe::host::link_speeds`]. Nothing here does I/O.

use crate::plan::{Action, Plan, Severity, Verdict};
use crate::preflight::Outlook;
use crate::probe::nccl::distinct_versions;
use crate::snapshot::{Addr, Link, NetSnapshot, Route, Snapshot};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The `schema` value of [`render_json`]'s output. Bumped only on an incompatible change of the shape.
pub const JSON_SCHEMA_ID: &str = "ncclenv-doctor/1";

/// Exit code of `doctor` (and of a refusal): `EX_CONFIG`.
pub const EXIT_REFUSE: i32 = 78;

/// Exit code for a plan: 0 when NCCL should work as planned, 1 when at least one warning (severity warn, not
/// info) applies, [`EXIT_REFUSE`] (78) when the verdict is refuse.
pub fn exit_code(plan: &Plan) -> i32 {
    match plan.verdict {
        Verdict::Refuse { .. } => EXIT_REFUSE,
        Verdict::Proceed if plan.has_warnings() => 1,
        Verdict::Proceed => 0,
    }
}

/// The line under "NCCL alone" in the text report: where that answer comes from.
pub const NCCL_ALONE_NOTE: &str =
    "              (ncclenv's model of NCCL's rules, not a run of NCCL: `ncclenv check` runs the real one)\n";

/// The doctor report as plain text with aligned columns: interfaces (name, state, kind, addresses, MTU,
/// speed in Mb/s from `speeds`, the routes that use it), default routes, the route to the peer, what NCCL
/// alone would choose (`nccl_alone`: ncclenv's model of NCCL's rules, `decide::interface::nccl_alone`) next to
/// ncclenv's choice, RDMA devices and ports, memlock, `/dev/shm`, GPUs, NCCL installations, NCCL config
/// files, every change with its reason, every finding with its remedy (every warning is a finding with a
/// code: the GPU list and several NCCL versions included), and the verdict; after the peer, whether the fleet
/// preflight would run (`preflight`, from [`crate::preflight::outlook`]). Every line is escaped
/// ([`crate::text::escape`]; table cells before they are aligned).
pub fn render_text(
    snap: &Snapshot,
    plan: &Plan,
    nccl_alone: Option<&str>,
    speeds: &BTreeMap<String, u64>,
    preflight: &Outlook,
) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "ncclenv doctor");

    // Interfaces and routes.
    section(&mut o, "Interfaces");
    match &snap.net {
        Ok(net) => {
            let mut rows = vec![row(&[
                "NAME",
                "STATE",
                "KIND",
                "ADDRESSES",
                "MTU",
                "SPEED",
                "USED BY",
            ])];
            for l in &net.links {
                let addrs: Vec<String> = addrs_of(net, l).iter().map(|a| addr_text(a)).collect();
                rows.push(vec![
                    l.name.clone(),
                    state_text(l),
                    kind_text(l),
                    dash(addrs.join(" ")),
                    l.mtu.map_or("-".into(), |m| m.to_string()),
                    speeds.get(&l.name).map_or("-".into(), |s| speed_text(*s)),
                    dash(used_by(net, l).join(", ")),
                ]);
            }
            o.push_str(&table(&rows, "  "));
            section(&mut o, "Default routes");
            let defaults: Vec<&Route> = net.routes.iter().filter(|r| r.is_default()).collect();
            if defaults.is_empty() {
                o.push_str("  none\n");
            }
            for r in defaults {
                let _ = writeln!(o, "  {}", route_text(net, r));
            }
            // The kernel's own answer through every ip rule (a failed lookup, e.g. IPv6 on an IPv4-only
            // host, says nothing the list above does not).
            for lk in net.default_lookups.iter().filter(|l| l.error.is_none()) {
                let _ = writeln!(
                    o,
                    "  {}",
                    lookup_text(net, lk, &format!("kernel's route to off-link {}", lk.dest))
                );
            }
        }
        Err(e) => {
            let _ = writeln!(o, "  network probe failed: {e}");
        }
    }

    section(&mut o, "Peer");
    peer_text(&mut o, snap);

    section(&mut o, "Preflight");
    o.push_str(&preflight.text());

    section(&mut o, "Interface choice");
    let _ = writeln!(
        o,
        "  NCCL alone: {}",
        nccl_alone.unwrap_or("unknown (the network probe failed)")
    );
    o.push_str(NCCL_ALONE_NOTE);
    match &plan.choice {
        Some(c) => {
            let _ = writeln!(
                o,
                "  ncclenv:    {}{} ({})",
                c.ifname,
                c.addr.map_or(String::new(), |a| format!(" {a}")),
                c.how
            );
        }
        None => o.push_str("  ncclenv:    no interface chosen\n"),
    }

    // RDMA.
    section(&mut o, "RDMA");
    match &snap.rdma {
        None => o.push_str("  not probed\n"),
        Some(r) => {
            if r.devices.is_empty() {
                o.push_str("  no device\n");
            } else {
                rdma_tables(&mut o, snap, r);
            }
            let _ = writeln!(
                o,
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
                o,
                "  memlock: soft {}, hard {}{caps}",
                limit_text(r.memlock_soft),
                limit_text(r.memlock_hard)
            );
            if let Some(e) = &r.error {
                let _ = writeln!(o, "  probe error: {e}");
            }
        }
    }

    section(&mut o, "NCCL net plugins");
    if snap.net_plugins.is_empty() {
        o.push_str("  none found\n");
    } else {
        let mut rows = vec![row(&["PATH", "FOUND IN", "LOADS"])];
        for p in &snap.net_plugins {
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
        o.push_str(&table(&rows, "  "));
    }

    section(&mut o, "Shared memory");
    match &snap.shm {
        None => o.push_str("  not probed\n"),
        Some(s) => match &s.error {
            Some(e) => {
                let _ = writeln!(o, "  {}: {e}", s.path);
            }
            None => {
                let _ = writeln!(
                    o,
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
                    let _ = writeln!(o, "  {e}");
                }
                if !s.nccl_segments.is_empty() {
                    let segs: Vec<String> = s
                        .nccl_segments
                        .iter()
                        .map(|g| format!("{} ({})", g.name, mib_text(g.bytes)))
                        .collect();
                    let _ = writeln!(o, "  nccl-* segments: {}", segs.join(", "));
                }
            }
        },
    }
    if let Some(n) = &plan.shm_need {
        let _ = writeln!(o, "  NCCL needs: {}", n.describe());
    }

    section(&mut o, "GPUs");
    match &snap.gpus {
        None => o.push_str("  not probed\n"),
        Some(g) => {
            let _ = writeln!(
                o,
                "  {} ({})",
                g.count.map_or("unknown".into(), |c| c.to_string()),
                g.source
            );
        }
    }
    if let Some(n) = snap.job.local_ranks {
        let _ = writeln!(
            o,
            "  local ranks: {n} ({})",
            snap.job
                .local_ranks_source
                .as_deref()
                .unwrap_or("the launcher")
        );
    }

    section(&mut o, "NCCL installations");
    if snap.nccl_installs.is_empty() {
        o.push_str("  none found\n");
    } else {
        let mut rows = vec![row(&["PATH", "VERSION", "FOUND IN"])];
        for i in &snap.nccl_installs {
            rows.push(vec![
                i.path.clone(),
                i.version.clone().unwrap_or_else(|| "?".into()),
                i.source.clone(),
            ]);
        }
        o.push_str(&table(&rows, "  "));
    }

    section(&mut o, "NCCL config files");
    if snap.conf_files.is_empty() {
        o.push_str("  none\n");
    }
    for f in &snap.conf_files {
        let _ = writeln!(o, "  {}", f.path);
        for (k, v) in &f.values {
            let _ = writeln!(o, "    {k}={v}");
        }
        if let Some(e) = &f.error {
            let _ = writeln!(o, "    error: {e}");
        }
    }

    // Decision.
    section(&mut o, "Changes");
    if plan.changes.is_empty() {
        o.push_str("  none\n");
    } else {
        let mut rows = Vec::new();
        for c in &plan.changes {
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
        o.push_str(&table(&rows, "  "));
    }
    if plan.raise_memlock {
        o.push_str("  raise soft RLIMIT_MEMLOCK to the hard limit before exec\n");
    }
    if plan.hands_off {
        o.push_str("  hands off: ncclenv changes nothing\n");
    }

    section(&mut o, "Findings");
    if plan.warnings.is_empty() {
        o.push_str("  none\n");
    }
    for w in &plan.warnings {
        let sev = match w.severity {
            Severity::Info => "info",
            Severity::Warn => "warn",
        };
        let _ = writeln!(o, "  [{sev}] {}: {}", w.code, w.message);
        let _ = writeln!(o, "         remedy: {}", w.remedy);
    }

    section(&mut o, "Verdict");
    match &plan.verdict {
        Verdict::Proceed if plan.has_warnings() => {
            o.push_str("  proceed, with warnings (exit 1)\n")
        }
        Verdict::Proceed => o.push_str("  proceed: NCCL should work (exit 0)\n"),
        Verdict::Refuse { reason, remedy, .. } => {
            let _ = writeln!(o, "  refuse (exit {EXIT_REFUSE}): {reason}");
            let _ = writeln!(o, "  remedy: {remedy}");
        }
    }
    // Names and values from the world may hold control characters: every line leaves inert.
    crate::text::escape_lines(&o)
}

/// The doctor report as JSON. Top-level shape (stable; described by `docs/doctor.schema.json`):
///
/// ```text
/// { "schema": "ncclenv-doctor/1",
///   "interfaces": [ { "index", "name", "state", "up", "running", "kind", "link_type", "mtu",
///                     "speed_mbps", "mac", "addresses": [ {"addr", "prefix_len", "scope", …} ],
///                     "used_by": ["default", "peer 10.0.0.1", …] } ],
///   "net_error": null | "text",
///   "routes": { "default": [Route], "all": [Route], "lookups": [RouteLookup] },
///   "peer": null | { "source", "host", "port", "addrs", "error", "resolve_ms", "resolve_attempts",
///                    "routes": [RouteLookup] },
///   "job": JobShape (nnodes, source, launcher, master_port(+_source), node_rank(+_source),
///                    self_addr(+_source), rendezvous, local_ranks(+_source), ips, problems),
///   "rdma": null | RdmaSnapshot,  "shm": null | ShmInfo,  "gpus": null | GpuInfo,
///   "nccl_installs": [NcclInstall],  "nccl_versions": ["2.21.5", …],  "net_plugins": [NetPlugin],
///   "conf_files": [ConfFile],
///   "preflight": { "enabled", "timeout_s", "would_run", "reason", "role", "role_reason", "master", "listen",
///                  "port", "port_source", "nnodes", "node_rank", "interface", "address", "key" },
///   "decision": { "changes": [Change], "warnings": [Warning], "verdict": {"verdict": "proceed"|"refuse", …},
///                 "choice": null | Choice, "nccl_alone": null | "text", "raise_memlock", "hands_off",
///                 "exit_code", "rdma_hcas": [HcaReport], "shm_need": null | ShmNeed } }
/// ```
///
/// `Route`, `RdmaSnapshot`, … are the serde forms of the `crate::snapshot` types; sizes are in bytes,
/// speeds in Mb/s, memlock `null` = unlimited.
pub fn render_json(
    snap: &Snapshot,
    plan: &Plan,
    nccl_alone: Option<&str>,
    speeds: &BTreeMap<String, u64>,
    preflight: &Outlook,
) -> Value {
    let (interfaces, routes, net_error) = match &snap.net {
        Ok(net) => {
            let ifs: Vec<Value> = net
                .links
                .iter()
                .map(|l| {
                    json!({
                        "index": l.index,
                        "name": l.name,
                        "state": l.oper_state,
                        "up": l.up,
                        "running": l.running,
                        "kind": kind_text(l),
                        "link_type": l.link_type,
                        "mtu": l.mtu,
                        "speed_mbps": speeds.get(&l.name),
                        "mac": l.mac,
                        "addresses": addrs_of(net, l),
                        "used_by": used_by(net, l),
                    })
                })
                .collect();
            let defaults: Vec<&Route> = net.routes.iter().filter(|r| r.is_default()).collect();
            (
                ifs,
                json!({ "default": defaults, "all": net.routes, "lookups": net.default_lookups }),
                Value::Null,
            )
        }
        Err(e) => (
            Vec::new(),
            json!({ "default": [], "all": [], "lookups": [] }),
            Value::String(e.clone()),
        ),
    };
    let peer = match &snap.peer {
        None => Value::Null,
        Some(p) => {
            let lookups = snap
                .net
                .as_ref()
                .map(|n| n.peer_routes.clone())
                .unwrap_or_default();
            json!({
                "source": p.source,
                "host": p.host,
                "port": p.port,
                "addrs": p.addrs,
                "error": p.error,
                "resolve_ms": p.resolve_ms,
                "resolve_attempts": p.resolve_attempts,
                "routes": lookups,
            })
        }
    };
    json!({
        "schema": JSON_SCHEMA_ID,
        "interfaces": interfaces,
        "net_error": net_error,
        "routes": routes,
        "peer": peer,
        "job": snap.job,
        "rdma": snap.rdma,
        "shm": snap.shm,
        "gpus": snap.gpus,
        "nccl_installs": snap.nccl_installs,
        "nccl_versions": distinct_versions(&snap.nccl_installs),
        "net_plugins": snap.net_plugins,
        "conf_files": snap.conf_files,
        "preflight": preflight.json(),
        "decision": {
            "changes": plan.changes,
            "warnings": plan.warnings,
            "verdict": plan.verdict,
            "choice": plan.choice,
            "nccl_alone": nccl_alone,
            "nccl_model": crate::decide::interface::nccl_model_json(snap),
            "raise_memlock": plan.raise_memlock,
            "hands_off": plan.hands_off,
            "exit_code": exit_code(plan),
            "rdma_hcas": crate::decide::rdma::hca_report(snap),
            "shm_need": plan.shm_need,
        },
    })
}

// ---------------------------------------------------------------------------------------------------------
// Helpers

/// The HCA/port table (with each HCA's verbs node and whether NCCL can use the port) and the GID tables.
fn rdma_tables(o: &mut String, snap: &Snapshot, r: &crate::snapshot::RdmaSnapshot) {
    use crate::decide::gid;
    let report = crate::decide::rdma::hca_report(snap);
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
    for (d, rep) in r.devices.iter().zip(&report) {
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
                crate::decide::rdma::port_state_name(p.state),
                phys_state(p.phys_state),
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
    o.push_str(&table(&rows, "  "));
    let inherited = crate::probe::job::effective("NCCL_IB_GID_INDEX", &snap.env, &snap.conf_files)
        .and_then(|(v, _)| crate::nccl_rules::param_value(v))
        .and_then(|i| u32::try_from(i).ok());
    let links: Option<Vec<&str>> = snap
        .net
        .as_ref()
        .ok()
        .map(|n| n.links.iter().map(|l| l.name.as_str()).collect());
    let mut rows = vec![row(&[
        "DEVICE", "PORT", "INDEX", "GID", "TYPE", "NETDEV", "NOTE",
    ])];
    for (d, rep) in r.devices.iter().zip(&report) {
        for (p, pr) in d.ports.iter().zip(&rep.ports) {
            for g in &p.gids {
                let mut notes = Vec::new();
                if pr.nccl_gid_index == Some(g.index) {
                    notes.push("NCCL's choice");
                }
                if gid::is_roce(p) && pr.working_gid_index == Some(g.index) {
                    notes.push("works here");
                }
                if gid::is_roce(p) && inherited == Some(g.index) {
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
        o.push_str("  GID tables (non-empty entries)\n");
        o.push_str(&table(&rows, "  "));
    }
}

fn section(o: &mut String, title: &str) {
    let _ = writeln!(o, "\n{title}");
}

/// The Peer section: the master, how it was found (flag, `PET_*`, variable), its addresses or how long
/// resolution was tried, the kernel's route to it, the rendezvous, and what the launcher says about the job.
fn peer_text(o: &mut String, snap: &Snapshot) {
    let job = &snap.job;
    match &snap.peer {
        None => o.push_str("  none named (single node, or no launcher variable seen)\n"),
        Some(p) => {
            let addrs: Vec<String> = p.addrs.iter().map(|a| a.to_string()).collect();
            let resolved = if p.resolve_attempts == 0 {
                String::new()
            } else if p.addrs.is_empty() {
                format!(
                    " (not resolved: tried for {} ms, {} attempt(s){})",
                    p.resolve_ms,
                    p.resolve_attempts,
                    p.error
                        .as_ref()
                        .map_or(String::new(), |e| format!("; last: {e}"))
                )
            } else {
                format!(" (resolved in {} ms)", p.resolve_ms)
            };
            let _ = writeln!(
                o,
                "  {}{} from {}{} -> {}{resolved}",
                p.host,
                p.port.map_or(String::new(), |n| format!(" port {n}")),
                p.source,
                job.launcher
                    .map_or(String::new(), |l| format!(" ({})", l.name())),
                dash(addrs.join(", ")),
            );
            if let Ok(net) = &snap.net {
                for lk in &net.peer_routes {
                    let _ = writeln!(
                        o,
                        "  {}",
                        lookup_text(net, lk, &format!("route to {}", lk.dest))
                    );
                }
            }
        }
    }
    if let Some(r) = &job.rendezvous {
        let _ = writeln!(
            o,
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
        let _ = writeln!(o, "  {}", facts.join("; "));
    }
}

fn paren(s: &Option<String>) -> String {
    s.as_ref().map_or(String::new(), |s| format!(" ({s})"))
}

/// One route lookup as `LABEL: dev IF src A via G table T` (or its error).
fn lookup_text(net: &NetSnapshot, lk: &crate::snapshot::RouteLookup, label: &str) -> String {
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

fn addrs_of<'a>(net: &'a NetSnapshot, l: &Link) -> Vec<&'a Addr> {
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

fn state_text(l: &Link) -> String {
    let mut s = if l.oper_state.is_empty() {
        "?".to_string()
    } else {
        l.oper_state.clone()
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

fn link_name(net: &NetSnapshot, index: u32) -> String {
    net.links
        .iter()
        .find(|l| l.index == index)
        .map_or_else(|| format!("#{index}"), |l| l.name.clone())
}

/// Which routes use the link: `default`, `peer <addr>`, and a count of other routes.
fn used_by(net: &NetSnapshot, l: &Link) -> Vec<String> {
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

fn route_text(net: &NetSnapshot, r: &Route) -> String {
    let paths: Vec<String> = r
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
    let fam = if r.family == crate::snapshot::Family::Inet6 {
        "default (IPv6)"
    } else {
        "default"
    };
    format!("{fam} {} metric {}", dash(paths.join(" / ")), r.metric)
}

fn speed_text(mbps: u64) -> String {
    if mbps >= 1000 && mbps % 1000 == 0 {
        format!("{} Gb/s", mbps / 1000)
    } else {
        format!("{mbps} Mb/s")
    }
}

fn mib_text(bytes: u64) -> String {
    crate::decide::rdma::fmt_mib(bytes)
}

fn limit_text(v: Option<u64>) -> String {
    v.map_or("unlimited".into(), mib_text)
}

fn phys_state(s: u32) -> String {
    match s {
        1 => "Sleep".into(),
        2 => "Polling".into(),
        3 => "Disabled".into(),
        4 => "PortConfigurationTraining".into(),
        5 => "LinkUp".into(),
        6 => "LinkErrorRecovery".into(),
        7 => "PhyTest".into(),
        n => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Choice;
    use crate::snapshot::{
        GpuInfo, NcclInstall, Peer, RdmaDevice, RdmaPort, RdmaSnapshot, RouteLookup, ShmInfo,
    };
    use std::net::IpAddr;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))
    }

    fn sample() -> (Snapshot, Plan) {
        let net = NetSnapshot {
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
        };
        let snap = Snapshot {
            net: Ok(net),
            peer: Some(Peer {
                source: "MASTER_ADDR".into(),
                host: "10.0.0.5".into(),
                addrs: vec![ip("10.0.0.5")],
                error: None,
                port: None,
                resolve_ms: 0,
                resolve_attempts: 0,
            }),
            rdma: Some(RdmaSnapshot {
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
            }),
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
        };
        let mut plan = Plan::default();
        let cfg = crate::config::Config::default();
        crate::decide::rdma::decide_rdma(&snap, &cfg, &mut plan);
        crate::decide::shm::decide_shm(&snap, &cfg, &mut plan);
        crate::decide::host::decide_host(&snap, &mut plan);
        plan.choice = Some(Choice {
            ifname: "eth0".into(),
            addr: Some(ip("10.0.0.2")),
            how: "route to peer 10.0.0.5 (MASTER_ADDR)".into(),
        });
        (snap, plan)
    }

    fn no_preflight() -> Outlook {
        Outlook {
            enabled: false,
            timeout_s: 60,
            setup: Err("the job runs on one node".into()),
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
        p.info("x", "m", "r");
        assert_eq!(exit_code(&p), 0);
        p.warn("y", "m", "r");
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
}
