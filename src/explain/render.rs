//! Rendering the report: one JSON object ([`render_json`], shape in `docs/explain.md`) or text for a
//! terminal or an issue ([`render_text`], one function per section).

use super::{
    exit_code, Endpoint, Explanation, LeftOut, LocalView, Process, Warn, MAX_ITEMS, MAX_PROCESSES,
    MAX_WARNINGS, MAX_WARNINGS_KEPT,
};
use crate::nccl_errors;
use crate::plan::Severity;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::net::IpAddr;

impl Endpoint {
    /// `{"interface", "addr", "family"}`.
    fn json(&self) -> Value {
        json!({"interface": self.interface, "addr": self.addr.to_string(), "family": family(&self.addr)})
    }
}

/// `AF_INET` or `AF_INET6`, as NCCL_SOCKET_FAMILY spells them.
fn family(a: &IpAddr) -> &'static str {
    match a {
        IpAddr::V4(_) => "AF_INET",
        IpAddr::V6(_) => "AF_INET6",
    }
}

fn endpoint_opt(e: &Option<Endpoint>) -> Value {
    e.as_ref().map(Endpoint::json).unwrap_or(Value::Null)
}

fn warn_json(w: &Warn) -> Value {
    json!({
        "text": w.text,
        "source": w.source,
        "input": w.input,
        "line": w.line,
        "count": w.count,
        "known": w.known.map(|k| json!({
            "id": k.id,
            "cause": k.cause,
            "remedy": k.remedy,
            "ncclenv": k.ncclenv,
            "codes": k.codes.iter().map(|c| json!({"code": c.code, "name": nccl_errors::result_name(c.code)})).collect::<Vec<_>>(),
        })),
    })
}

/// The report as one JSON object (shape: `docs/explain.md`).
pub fn render_json(r: &Explanation) -> Value {
    let processes: Vec<Value> = r
        .processes
        .iter()
        .map(|p| {
            json!({
                "process": p.name(),
                "host": p.host,
                "pid": p.pid,
                "inputs": p.inputs,
                "lines": p.lines,
                "nccl_version": p.nccl_version,
                "nccl_version_hint": p.version_label(),
                "cuda_version": p.cuda_version,
                "bootstrap": endpoint_opt(&p.bootstrap),
                "bootstrap_device": p.bootstrap_device,
                "net_socket": p.net_socket.iter().map(Endpoint::json).collect::<Vec<_>>(),
                "net_ib": {"devices": p.net_ib, "oob": endpoint_opt(&p.ib_oob), "no_device": p.ib_none},
                "network": p.net_kind(),
                "network_logged": p.network,
                "plugin": p.plugin,
                "transports": p.transports,
                "settings": p.env,
                "ranks": p.ranks,
                "nranks": p.nranks,
                "nnodes": p.nnodes,
                "init_complete": p.init_complete,
                "returned": p.returned.map(|c| json!({"code": c, "name": nccl_errors::result_name(c)})),
                "warnings": p.warnings.iter().map(warn_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    let findings: Vec<Value> = r
        .findings
        .iter()
        .map(|f| {
            json!({
                "code": f.code.code(),
                "severity": match f.severity() { Severity::Info => "info", Severity::Warn => "warn" },
                "message": f.message,
                "remedy": f.remedy,
                "processes": f.processes,
                "known": f.known,
            })
        })
        .collect();
    let local = r.local.as_ref().map(|l| {
        json!({
            "host": l.local.host,
            "processes": l.processes,
            "nccl_bootstrap": l.nccl.iter().map(Endpoint::json).collect::<Vec<_>>(),
            "ncclenv_choice": l.local.choice.as_ref().map(|(i, a, how)| json!({
                "interface": i, "addr": a.map(|a| a.to_string()), "how": how,
            })),
            "no_choice": l.local.no_choice,
            "peer": l.local.peer,
            "agrees": l.agrees,
        })
    });
    let code = exit_code(r);
    json!({
        "inputs": r.inputs.iter().map(|i| json!({"name": i.name, "lines": i.lines, "nccl_lines": i.nccl_lines, "error": i.error})).collect::<Vec<_>>(),
        "hosts": r.processes.iter().map(|p| p.host.clone()).collect::<BTreeSet<_>>(),
        "processes": processes,
        "quoted_errors": r.quoted.iter().map(warn_json).collect::<Vec<_>>(),
        "versions_unattributed": r.versions_unattributed,
        "left_out": {
            "processes": r.left_out.processes,
            "processes_at_least": r.left_out.processes_at_least,
            "lines": r.left_out.lines,
            "warnings": r.left_out.warnings,
            "items": r.left_out.items,
        },
        "findings": findings,
        "local": local,
        "verdict": if code == 0 { "nothing wrong found" } else { "something is wrong" },
        "exit": code,
    })
}

/// What a report left out to stay bounded, in one line, or `None` when nothing was.
pub fn left_out_text(l: &LeftOut) -> Option<String> {
    if l.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    if l.processes > 0 {
        parts.push(format!(
            "{}{} more process(es) ({} NCCL line(s)) beyond the first {MAX_PROCESSES}, counted, not listed or \
             compared",
            if l.processes_at_least { "at least " } else { "" },
            l.processes,
            l.lines
        ));
    }
    if l.warnings > 0 {
        parts.push(format!(
            "{} more distinct WARN text(s) (at most {MAX_WARNINGS} per process, {MAX_WARNINGS_KEPT} in all)",
            l.warnings
        ));
    }
    if l.items > 0 {
        parts.push(format!(
            "{} more setting(s), transport(s), interface(s), device(s) or rank(s) (at most {MAX_ITEMS} of each \
             per process)",
            l.items
        ));
    }
    Some(format!("left out to stay bounded: {}", parts.join("; ")))
}

/// The report as text for a terminal or an issue: the summary, each process, this node, the findings and
/// the verdict.
pub fn render_text(r: &Explanation) -> String {
    let mut o = String::new();
    text_summary(&mut o, r);
    for p in &r.processes {
        text_process(&mut o, p);
    }
    if let Some(l) = &r.local {
        text_local(&mut o, l);
    }
    text_findings(&mut o, r);
    o
}

/// The first lines: how many processes, hosts, inputs and lines; the inputs that could not be read; what
/// was left out.
fn text_summary(o: &mut String, r: &Explanation) {
    use std::fmt::Write as _;
    let lines: usize = r.inputs.iter().map(|i| i.lines).sum();
    let nccl: usize = r.inputs.iter().map(|i| i.nccl_lines).sum();
    let hosts: BTreeSet<&str> = r.processes.iter().map(|p| p.host.as_str()).collect();
    let _ = writeln!(
        o,
        "ncclenv explain: {} process(es) on {} host(s), from {} input(s) ({lines} line{}, {nccl} from NCCL)",
        r.processes.len(),
        hosts.len(),
        r.inputs.len(),
        if lines == 1 { "" } else { "s" }
    );
    for i in r.inputs.iter().filter(|i| i.error.is_some()) {
        let _ = writeln!(o, "  {}: {}", i.name, i.error.as_deref().unwrap_or(""));
    }
    if let Some(line) = left_out_text(&r.left_out) {
        let _ = writeln!(o, "  {line}");
    }
}

/// One row of a process's section: the key in a column of 11, then the value.
fn text_row(o: &mut String, k: &str, v: String) {
    use std::fmt::Write as _;
    let _ = writeln!(o, "  {k:<11}{v}");
}

/// A process's section: a blank line, its head line ([`text_process_head`]), its rows
/// ([`text_process_rows`]) and its WARN lines ([`text_process_warnings`]).
fn text_process(o: &mut String, p: &Process) {
    o.push('\n');
    o.push_str(&text_process_head(p));
    o.push('\n');
    text_process_rows(o, p);
    text_process_warnings(o, p);
}

/// `host:pid  NCCL version (CUDA c)  rank r,… of n`, as far as the log tells.
fn text_process_head(p: &Process) -> String {
    use std::fmt::Write as _;
    let mut head = p.name();
    if let Some(v) = p.version_label() {
        let how = if p.nccl_version.is_none() {
            " (by the log's format)"
        } else {
            ""
        };
        let _ = write!(head, "  NCCL {v}{how}");
        if let Some(c) = &p.cuda_version {
            let _ = write!(head, " (CUDA {c})");
        }
    }
    if !p.ranks.is_empty() {
        let rk: Vec<String> = p.ranks.iter().map(|r| r.to_string()).collect();
        let _ = write!(head, "  rank {}", rk.join(","));
        if let Some(n) = p.nranks {
            let _ = write!(head, " of {n}");
        }
    }
    head
}

/// A process's rows: bootstrap, NET/Socket, NET/IB, network, net plugin, returned, transports, settings
/// (each when the log tells it; bootstrap always).
fn text_process_rows(o: &mut String, p: &Process) {
    match (&p.bootstrap, &p.bootstrap_device) {
        (Some(b), _) => text_row(
            o,
            "bootstrap",
            format!(
                "{} {} ({})",
                b.interface,
                b.addr,
                if b.addr.is_ipv4() { "IPv4" } else { "IPv6" }
            ),
        ),
        (None, Some(d)) => text_row(o, "bootstrap", format!("network device {d}")),
        (None, None) => text_row(o, "bootstrap", "not logged".into()),
    }
    if !p.net_socket.is_empty() {
        let v: Vec<String> = p
            .net_socket
            .iter()
            .map(|e| format!("{} {}", e.interface, e.addr))
            .collect();
        text_row(o, "NET/Socket", v.join(", "));
    }
    if !p.net_ib.is_empty() {
        let oob = p
            .ib_oob
            .as_ref()
            .map(|e| format!("; OOB {} {}", e.interface, e.addr))
            .unwrap_or_default();
        text_row(o, "NET/IB", format!("{}{oob}", p.net_ib.join(", ")));
    } else if p.ib_none {
        text_row(o, "NET/IB", "no device found (sockets are used)".into());
    }
    if let Some(k) = p.net_kind() {
        text_row(o, "network", k);
    }
    if let Some(pl) = &p.plugin {
        text_row(o, "net plugin", pl.clone());
    }
    if let Some(c) = p.returned {
        text_row(
            o,
            "returned",
            format!("{c} ({})", nccl_errors::result_name(c)),
        );
    }
    if !p.transports.is_empty() {
        text_row(
            o,
            "transports",
            p.transports.iter().cloned().collect::<Vec<_>>().join(", "),
        );
    }
    if !p.env.is_empty() {
        let v: Vec<String> = p.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        text_row(o, "settings", v.join(" "));
    }
}

/// A process's WARN lines, each with its count, and the cause and fix of a known one.
fn text_process_warnings(o: &mut String, p: &Process) {
    use std::fmt::Write as _;
    for w in &p.warnings {
        let n = if w.count > 1 {
            format!(" (×{})", w.count)
        } else {
            String::new()
        };
        let src = w
            .source
            .as_deref()
            .map(|s| format!("{s} "))
            .unwrap_or_default();
        text_row(o, "WARN", format!("{src}{}{n}", w.text));
        if let Some(k) = w.known {
            let _ = writeln!(o, "  {:<11}cause: {}", "", nccl_errors::cause_for(k, 0));
            let _ = writeln!(o, "  {:<11}fix:   {}", "", k.remedy);
        }
    }
}

/// This node's section: ncclenv's choice here (or why none) and the peer it used.
fn text_local(o: &mut String, l: &LocalView) {
    use std::fmt::Write as _;
    let _ = writeln!(o);
    let _ = writeln!(o, "This node ({})", l.local.host);
    match &l.local.choice {
        Some((i, a, how)) => {
            let a = a.map(|a| format!(" {a}")).unwrap_or_default();
            let _ = writeln!(o, "  ncclenv would choose {i}{a} ({how})");
        }
        None => {
            let _ = writeln!(
                o,
                "  ncclenv would set no interface: {}",
                l.local.no_choice.as_deref().unwrap_or("no choice")
            );
        }
    }
    if let Some(p) = &l.local.peer {
        let _ = writeln!(o, "  peer: {p}");
    }
}

/// The findings, each with what to do, and the verdict with the exit status ([`exit_code`]).
fn text_findings(o: &mut String, r: &Explanation) {
    use std::fmt::Write as _;
    let _ = writeln!(o);
    let _ = writeln!(o, "Findings");
    if r.findings.is_empty() {
        let _ = writeln!(o, "  none");
    }
    for f in &r.findings {
        let sev = match f.severity() {
            Severity::Info => "info",
            Severity::Warn => "warn",
        };
        let _ = writeln!(o, "  [{sev}] {}: {}", f.code, f.message);
        let _ = writeln!(o, "         what to do: {}", f.remedy);
    }
    let code = exit_code(r);
    let _ = writeln!(
        o,
        "\n{} (exit {code})",
        if code == 0 {
            "Nothing wrong found"
        } else {
            "Something is wrong"
        }
    );
}
