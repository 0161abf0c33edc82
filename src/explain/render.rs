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
pub fn render_json(explanation: &Explanation) -> Value {
    let processes: Vec<Value> = explanation
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
    let findings: Vec<Value> = explanation
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
    let local = explanation.local.as_ref().map(|l| {
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
    let code = exit_code(explanation);
    json!({
        "inputs": explanation.inputs.iter().map(|i| json!({"name": i.name, "lines": i.lines, "nccl_lines": i.nccl_lines, "error": i.error})).collect::<Vec<_>>(),
        "hosts": explanation.processes.iter().map(|p| p.host.clone()).collect::<BTreeSet<_>>(),
        "processes": processes,
        "quoted_errors": explanation.quoted.iter().map(warn_json).collect::<Vec<_>>(),
        "versions_unattributed": explanation.versions_unattributed,
        "left_out": {
            "processes": explanation.left_out.processes,
            "processes_at_least": explanation.left_out.processes_at_least,
            "lines": explanation.left_out.lines,
            "warnings": explanation.left_out.warnings,
            "items": explanation.left_out.items,
        },
        "findings": findings,
        "local": local,
        "verdict": if code == 0 { "nothing wrong found" } else { "something is wrong" },
        "exit": code,
    })
}

/// What a report left out to stay bounded, in one line, or `None` when nothing was.
pub fn left_out_text(left_out: &LeftOut) -> Option<String> {
    if left_out.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    if left_out.processes > 0 {
        parts.push(format!(
            "{}{} more process(es) ({} NCCL line(s)) beyond the first {MAX_PROCESSES}, counted, not listed or \
             compared",
            if left_out.processes_at_least { "at least " } else { "" },
            left_out.processes,
            left_out.lines
        ));
    }
    if left_out.warnings > 0 {
        parts.push(format!(
            "{} more distinct WARN text(s) (at most {MAX_WARNINGS} per process, {MAX_WARNINGS_KEPT} in all)",
            left_out.warnings
        ));
    }
    if left_out.items > 0 {
        parts.push(format!(
            "{} more setting(s), transport(s), interface(s), device(s) or rank(s) (at most {MAX_ITEMS} of each \
             per process)",
            left_out.items
        ));
    }
    Some(format!("left out to stay bounded: {}", parts.join("; ")))
}

/// The report as text for a terminal or an issue: the summary, each process, this node, the findings and
/// the verdict.
pub fn render_text(explanation: &Explanation) -> String {
    let mut out = String::new();
    text_summary(&mut out, explanation);
    for p in &explanation.processes {
        text_process(&mut out, p);
    }
    if let Some(l) = &explanation.local {
        text_local(&mut out, l);
    }
    text_findings(&mut out, explanation);
    out
}

/// The first lines: how many processes, hosts, inputs and lines; the inputs that could not be read; what
/// was left out.
fn text_summary(out: &mut String, explanation: &Explanation) {
    use std::fmt::Write as _;
    let lines: usize = explanation.inputs.iter().map(|i| i.lines).sum();
    let nccl: usize = explanation.inputs.iter().map(|i| i.nccl_lines).sum();
    let hosts: BTreeSet<&str> = explanation
        .processes
        .iter()
        .map(|p| p.host.as_str())
        .collect();
    let _ = writeln!(
        out,
        "ncclenv explain: {} process(es) on {} host(s), from {} input(s) ({lines} line{}, {nccl} from NCCL)",
        explanation.processes.len(),
        hosts.len(),
        explanation.inputs.len(),
        if lines == 1 { "" } else { "s" }
    );
    for i in explanation.inputs.iter().filter(|i| i.error.is_some()) {
        let _ = writeln!(out, "  {}: {}", i.name, i.error.as_deref().unwrap_or(""));
    }
    if let Some(line) = left_out_text(&explanation.left_out) {
        let _ = writeln!(out, "  {line}");
    }
}

/// One row of a process's section: the key in a column of 11, then the value.
fn text_row(out: &mut String, k: &str, v: String) {
    use std::fmt::Write as _;
    let _ = writeln!(out, "  {k:<11}{v}");
}

/// A process's section: a blank line, its head line ([`text_process_head`]), its rows
/// ([`text_process_rows`]) and its WARN lines ([`text_process_warnings`]).
fn text_process(out: &mut String, process: &Process) {
    out.push('\n');
    out.push_str(&text_process_head(process));
    out.push('\n');
    text_process_rows(out, process);
    text_process_warnings(out, process);
}

/// `host:pid  NCCL version (CUDA c)  rank r,… of n`, as far as the log tells.
fn text_process_head(process: &Process) -> String {
    use std::fmt::Write as _;
    let mut head = process.name();
    if let Some(v) = process.version_label() {
        let how = if process.nccl_version.is_none() {
            " (by the log's format)"
        } else {
            ""
        };
        let _ = write!(head, "  NCCL {v}{how}");
        if let Some(c) = &process.cuda_version {
            let _ = write!(head, " (CUDA {c})");
        }
    }
    if !process.ranks.is_empty() {
        let rk: Vec<String> = process.ranks.iter().map(|r| r.to_string()).collect();
        let _ = write!(head, "  rank {}", rk.join(","));
        if let Some(n) = process.nranks {
            let _ = write!(head, " of {n}");
        }
    }
    head
}

/// A process's rows: bootstrap, NET/Socket, NET/IB, network, net plugin, returned, transports, settings
/// (each when the log tells it; bootstrap always).
fn text_process_rows(out: &mut String, process: &Process) {
    match (&process.bootstrap, &process.bootstrap_device) {
        (Some(b), _) => text_row(
            out,
            "bootstrap",
            format!(
                "{} {} ({})",
                b.interface,
                b.addr,
                if b.addr.is_ipv4() { "IPv4" } else { "IPv6" }
            ),
        ),
        (None, Some(d)) => text_row(out, "bootstrap", format!("network device {d}")),
        (None, None) => text_row(out, "bootstrap", "not logged".into()),
    }
    if !process.net_socket.is_empty() {
        let v: Vec<String> = process
            .net_socket
            .iter()
            .map(|e| format!("{} {}", e.interface, e.addr))
            .collect();
        text_row(out, "NET/Socket", v.join(", "));
    }
    if !process.net_ib.is_empty() {
        let oob = process
            .ib_oob
            .as_ref()
            .map(|e| format!("; OOB {} {}", e.interface, e.addr))
            .unwrap_or_default();
        text_row(out, "NET/IB", format!("{}{oob}", process.net_ib.join(", ")));
    } else if process.ib_none {
        text_row(out, "NET/IB", "no device found (sockets are used)".into());
    }
    if let Some(kind) = process.net_kind() {
        text_row(out, "network", kind);
    }
    if let Some(pl) = &process.plugin {
        text_row(out, "net plugin", pl.clone());
    }
    if let Some(c) = process.returned {
        text_row(
            out,
            "returned",
            format!("{c} ({})", nccl_errors::result_name(c)),
        );
    }
    if !process.transports.is_empty() {
        text_row(
            out,
            "transports",
            process
                .transports
                .iter()
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    if !process.env.is_empty() {
        let v: Vec<String> = process
            .env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        text_row(out, "settings", v.join(" "));
    }
}

/// A process's WARN lines, each with its count, and the cause and fix of a known one.
fn text_process_warnings(out: &mut String, process: &Process) {
    use std::fmt::Write as _;
    for w in &process.warnings {
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
        text_row(out, "WARN", format!("{src}{}{n}", w.text));
        if let Some(k) = w.known {
            let _ = writeln!(out, "  {:<11}cause: {}", "", nccl_errors::cause_for(k, 0));
            let _ = writeln!(out, "  {:<11}fix:   {}", "", k.remedy);
        }
    }
}

/// This node's section: ncclenv's choice here (or why none) and the peer it used.
fn text_local(out: &mut String, view: &LocalView) {
    use std::fmt::Write as _;
    let _ = writeln!(out);
    let _ = writeln!(out, "This node ({})", view.local.host);
    match &view.local.choice {
        Some((i, a, how)) => {
            let a = a.map(|a| format!(" {a}")).unwrap_or_default();
            let _ = writeln!(out, "  ncclenv would choose {i}{a} ({how})");
        }
        None => {
            let _ = writeln!(
                out,
                "  ncclenv would set no interface: {}",
                view.local.no_choice.as_deref().unwrap_or("no choice")
            );
        }
    }
    if let Some(p) = &view.local.peer {
        let _ = writeln!(out, "  peer: {p}");
    }
}

/// The findings, each with what to do, and the verdict with the exit status ([`exit_code`]).
fn text_findings(out: &mut String, explanation: &Explanation) {
    use std::fmt::Write as _;
    let _ = writeln!(out);
    let _ = writeln!(out, "Findings");
    if explanation.findings.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for f in &explanation.findings {
        let sev = match f.severity() {
            Severity::Info => "info",
            Severity::Warn => "warn",
        };
        let _ = writeln!(out, "  [{sev}] {}: {}", f.code, f.message);
        let _ = writeln!(out, "         what to do: {}", f.remedy);
    }
    let code = exit_code(explanation);
    let _ = writeln!(
        out,
        "\n{} (exit {code})",
        if code == 0 {
            "Nothing wrong found"
        } else {
            "Something is wrong"
        }
    );
}
