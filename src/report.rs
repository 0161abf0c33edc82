//! Reporting to stderr through `tracing`: one info line summarising every variable set and why, one line per
//! warning with its remedy, debug lines with the probed facts. `NCCLENV_LOG` sets the level; `NO_COLOR` (or a
//! stderr that is not a terminal) turns colour off. Only ncclenv's own variables are ever printed: the rest of
//! the environment holds secrets.

use crate::config::LogLevel;
use crate::plan::{Action, Plan, Severity, Verdict};
use crate::snapshot::Snapshot;
use std::fmt;
use std::io::IsTerminal;
use tracing::Level;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Lines look like `ncclenv: …`, `ncclenv: warning: …`, `ncclenv: error: …`.
struct Format {
    color: bool,
}

impl<S, N> FormatEvent<S, N> for Format
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        let level = *event.metadata().level();
        let (tag, color) = match level {
            Level::ERROR => ("error: ", "\x1b[31m"),
            Level::WARN => ("warning: ", "\x1b[33m"),
            Level::DEBUG | Level::TRACE => ("debug: ", "\x1b[2m"),
            Level::INFO => ("", ""),
        };
        if self.color && !color.is_empty() {
            write!(writer, "ncclenv: {color}{tag}\x1b[0m")?;
        } else {
            write!(writer, "ncclenv: {tag}")?;
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// Install the stderr logger at `level`. Colour when stderr is a terminal and `NO_COLOR` is unset or empty
/// (no-color.org).
pub fn init(level: LogLevel, no_color: bool) {
    let max = match level {
        LogLevel::Off => return,
        LogLevel::Error => Level::ERROR,
        LogLevel::Warn => Level::WARN,
        LogLevel::Info => Level::INFO,
        LogLevel::Debug => Level::DEBUG,
    };
    let color = !no_color && std::io::stderr().is_terminal();
    // tracing-subscriber reports a failed write with `eprintln!` when `log_internal_errors` is on (the
    // builder's default), and `eprintln!` panics when stderr fails too: a job started with `2>/dev/full` or a
    // closed stderr would never run. Both are shut off: the writer swallows errors and internal errors are not
    // logged.
    let _ = tracing_subscriber::fmt()
        .with_max_level(max)
        .with_writer(|| QuietStderr)
        .log_internal_errors(false)
        .event_format(Format { color })
        .try_init();
}

/// stderr that never fails: every error (`ENOSPC` on `/dev/full`, `EPIPE`, `EBADF` on a closed fd) is
/// swallowed and the write counts as done. A log line lost is better than a job lost.
pub struct QuietStderr;

impl std::io::Write for QuietStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().lock().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().lock().flush();
        Ok(())
    }
}

/// The one summary line: the interface and how it was chosen, then every variable set or unset with its
/// reason.
pub fn summary(plan: &Plan) -> String {
    let mut s = String::new();
    if plan.hands_off {
        if plan.changes.is_empty() {
            s.push_str("environment left untouched");
        } else {
            // Only the debug variables of NCCLENV_DEBUG=1 are set in a hands-off case.
            s.push_str("network settings left untouched; set ");
            s.push_str(&change_list(plan).join("; "));
        }
        push_debug_files(&mut s, plan);
        return s;
    }
    if let Some(c) = &plan.choice {
        s.push_str(&format!("interface {}", c.ifname));
        if let Some(a) = c.addr {
            s.push_str(&format!(" {a}"));
        }
        s.push_str(&format!(" ({})", c.how));
    }
    let changes = change_list(plan);
    if changes.is_empty() {
        s.push_str("; nothing to set");
    } else {
        if !s.is_empty() {
            s.push_str("; ");
        }
        s.push_str("set ");
        s.push_str(&changes.join("; "));
    }
    push_debug_files(&mut s, plan);
    s
}

/// `NAME=value (reason)` / `unset NAME (reason)` for every change.
fn change_list(plan: &Plan) -> Vec<String> {
    plan.changes
        .iter()
        .map(|c| match &c.action {
            Action::Set { value } => format!("{}={} ({})", c.name, value, c.reason),
            Action::Unset => format!("unset {} ({})", c.name, c.reason),
        })
        .collect()
}

/// Under `NCCLENV_DEBUG=1`: where NCCL's log lines go.
fn push_debug_files(s: &mut String, plan: &Plan) {
    if let Some(f) = &plan.debug_files {
        s.push_str(&format!("; NCCL debug logs: {f}"));
    }
}

/// Emit the plan: warnings (with remedies) first, then the summary line; a refusal as an error.
pub fn emit(plan: &Plan) {
    for w in &plan.warnings {
        match w.severity {
            Severity::Warn => {
                tracing::warn!("{} [{}] (what to do: {})", w.message, w.code, w.remedy)
            }
            Severity::Info => tracing::info!("{} [{}]", w.message, w.code),
        }
    }
    tracing::info!("{}", summary(plan));
}

/// The refusal message (printed even with `NCCLENV_LOG=off`: it is the job's exit reason).
pub fn refusal(plan: &Plan) -> Option<String> {
    match &plan.verdict {
        Verdict::Refuse { reason, remedy } => Some(format!(
            "ncclenv: refused (exit 78): {reason}. What to do: {remedy}"
        )),
        Verdict::Proceed => None,
    }
}

/// Debug lines with the probed facts (`NCCLENV_LOG=debug`): links with flags and addresses, default routes,
/// the route to the peer, the job's shape, RDMA, `/dev/shm`, GPUs, NCCL config files. Only ncclenv's own
/// variables appear; nothing else of the environment.
pub fn debug_snapshot(snap: &Snapshot) {
    if !tracing::enabled!(Level::DEBUG) {
        return;
    }
    match &snap.net {
        Err(e) => tracing::debug!("network probe failed: {e}"),
        Ok(net) => {
            for l in &net.links {
                let addrs: Vec<String> = net
                    .addrs
                    .iter()
                    .filter(|a| a.index == l.index)
                    .map(|a| format!("{}/{}", a.addr, a.prefix_len))
                    .collect();
                tracing::debug!(
                    "link {} index {} {}{}{} kind {} addrs [{}]",
                    l.name,
                    l.index,
                    if l.up { "UP" } else { "DOWN" },
                    if l.running { ",RUNNING" } else { "" },
                    if l.loopback { ",LOOPBACK" } else { "" },
                    l.kind.as_deref().unwrap_or("-"),
                    addrs.join(" ")
                );
            }
            for r in net.routes.iter().filter(|r| r.is_default()) {
                tracing::debug!(
                    "default route {:?} via {:?} oif {:?} metric {} linkdown {} nexthops {}",
                    r.family,
                    r.gateway,
                    r.oif,
                    r.metric,
                    r.linkdown,
                    r.nexthops.len()
                );
            }
            for p in &net.peer_routes {
                tracing::debug!(
                    "route to {}: oif {:?} src {:?} via {:?} local {} error {:?}",
                    p.dest,
                    p.oif,
                    p.prefsrc,
                    p.gateway,
                    p.local,
                    p.error
                );
            }
        }
    }
    match &snap.peer {
        Some(p) => tracing::debug!(
            "peer {} from {} resolved to {:?} {}",
            p.host,
            p.source,
            p.addrs,
            p.error.as_deref().unwrap_or("")
        ),
        None => tracing::debug!("no peer named"),
    }
    tracing::debug!(
        "job: nnodes {:?} from {:?}; --ips {:?}",
        snap.job.nnodes,
        snap.job.source,
        snap.job.ips
    );
    for f in &snap.conf_files {
        let keys: Vec<&str> = f.values.iter().map(|(k, _)| k.as_str()).collect();
        tracing::debug!("NCCL config file {} sets {:?} {:?}", f.path, keys, f.error);
    }
    if let Some(r) = &snap.rdma {
        tracing::debug!(
            "rdma: {} device(s), verbs nodes {:?}, memlock soft {:?} hard {:?}",
            r.devices.len(),
            r.uverbs,
            r.memlock_soft,
            r.memlock_hard
        );
    }
    if let Some(s) = &snap.shm {
        tracing::debug!(
            "shm {}: free {:?} B of {:?} B, read-only {}, error {:?}",
            s.path,
            s.free_bytes,
            s.total_bytes,
            s.read_only,
            s.error
        );
    }
    if let Some(g) = &snap.gpus {
        tracing::debug!("gpus: {:?} from {}", g.count, g.source);
    }
}
