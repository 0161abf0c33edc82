//! Reporting to stderr. By default a start writes one summary line (the interface and the variables set, in
//! brief, at most [`SUMMARY_MAX_CHARS`] characters) and one line per warning (what, why, what to do, and its
//! `[code]`); the reasons behind every variable are debug lines (`NCCLENV_LOG=debug`) and `ncclenv doctor`.
//!
//! Two formats (`NCCLENV_LOG_FORMAT`): `text` (`ncclenv: …` lines for people) and `json` (one JSON object per
//! line for log pipelines; every line a [`Record`], fields documented in `docs/logging.md`). Lines from other
//! modules go through `tracing` and are rendered by the same code, as records of kind `log`.
//!
//! `NCCLENV_LOG` sets the level; `NO_COLOR` (or a stderr that is not a terminal) turns colour off. Only
//! ncclenv's own variables are ever printed: the rest of the environment holds secrets. Nothing here can fail:
//! every write ignores errors (see [`QuietStderr`]).
//!
//! Text from the world (interface names, values of variables, NCCL's messages) can hold control characters:
//! an ESC sequence that rewrites the terminal, a `\r` that hides what came before. Every record is rendered by
//! one function, `Record::render`, which escapes the text line with [`crate::text::escape`] and the JSON line
//! with [`crate::text::escape_json`]; `doctor`, `check` and `env` use the same functions.

use crate::config::{LogFormat, LogLevel};
use crate::plan::{Action, Change, Note, Plan, Severity, Verdict};
use crate::snapshot::{Family, Snapshot};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::io::{IsTerminal, Write};
use std::net::IpAddr;
use std::path::Path;
use std::sync::OnceLock;
use tracing::level_filters::LevelFilter;
use tracing::span;
use tracing::{Event, Level, Metadata};

/// Longest summary line, in characters, `ncclenv: ` included. Variables that do not fit are counted at the
/// end (`+N more`), least important (framework companions) first.
pub const SUMMARY_MAX_CHARS: usize = 200;

/// Where Kubernetes reads a container's termination message by default (`terminationMessagePath`).
pub const DEFAULT_TERMINATION_LOG: &str = "/dev/termination-log";

/// Kubernetes keeps at most 4096 bytes of a container's termination message.
pub const TERMINATION_LOG_MAX_BYTES: usize = 4096;

/// The `program` field of every JSON record: tells ncclenv's lines from the job's own on a shared stderr.
const PROGRAM: &str = "ncclenv";

/// The log settings of this process, set once by [`init`].
#[derive(Debug, Clone, Copy)]
struct Settings {
    level: LogLevel,
    format: LogFormat,
    color: bool,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// The settings given to [`init`], or the defaults (info, text, no colour) before it.
fn settings() -> Settings {
    SETTINGS.get().copied().unwrap_or(Settings {
        level: LogLevel::Info,
        format: LogFormat::Text,
        color: false,
    })
}

/// Severity of one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lvl {
    /// A refusal or a failure that stops ncclenv.
    Error,
    /// NCCL may fail or run slowly; the job still runs.
    Warn,
    /// The summary and informational findings.
    Info,
    /// Probed facts and the reason of every change.
    Debug,
}

impl Lvl {
    fn name(self) -> &'static str {
        match self {
            Lvl::Error => "error",
            Lvl::Warn => "warn",
            Lvl::Info => "info",
            Lvl::Debug => "debug",
        }
    }
    /// Cloud Logging's `LogSeverity` name of this level.
    fn severity(self) -> &'static str {
        match self {
            Lvl::Error => "ERROR",
            Lvl::Warn => "WARNING",
            Lvl::Info => "INFO",
            Lvl::Debug => "DEBUG",
        }
    }
    fn needs(self) -> LogLevel {
        match self {
            Lvl::Error => LogLevel::Error,
            Lvl::Warn => LogLevel::Warn,
            Lvl::Info => LogLevel::Info,
            Lvl::Debug => LogLevel::Debug,
        }
    }
    fn of(level: &Level) -> Lvl {
        match *level {
            Level::ERROR => Lvl::Error,
            Level::WARN => Lvl::Warn,
            Level::INFO => Lvl::Info,
            Level::DEBUG | Level::TRACE => Lvl::Debug,
        }
    }
}

/// One line of ncclenv's log. In JSON: `{"program": "ncclenv", "level": …, "message": …, "kind": …, …}` with
/// the fields of its [`Kind`] beside them.
#[derive(Debug, Clone, Serialize)]
pub struct Record<'a> {
    /// When the line was written: RFC 3339 in UTC with milliseconds, `2026-12-02T18:52:34.123Z` (the
    /// `time` field Fluent Bit's JSON parsers, Loki's `json` stage and Cloud Logging read without
    /// configuration). A clock reading, formatted only when the line is serialized ([`Now`]): the text
    /// format, the default, never formats it.
    pub time: Now,
    /// Always `ncclenv`.
    pub program: &'static str,
    /// `error`, `warn`, `info` or `debug`.
    pub level: &'static str,
    /// The level in Cloud Logging's `LogSeverity` words: `ERROR`, `WARNING`, `INFO`, `DEBUG` (the
    /// `severity` field it maps without configuration; Loki detects it too).
    pub severity: &'static str,
    /// The line for people (in text format, what follows `ncclenv: `).
    pub message: String,
    /// What the line is, with its machine-readable fields.
    #[serde(flatten)]
    pub kind: Kind<'a>,
    /// Text format only: fit the line in [`LINE_MAX_CHARS`] (a finding below `NCCLENV_LOG=debug`; the long
    /// text is in `ncclenv doctor` and the debug level). JSON lines always carry the whole text.
    #[serde(skip)]
    pub brief: bool,
}

/// Longest line at the default level (`NCCLENV_LOG=info` or `warn`), in characters, `ncclenv: ` and the level
/// tag included: the summary ([`SUMMARY_MAX_CHARS`]) and each finding. Longer findings lose their remedy, then
/// are cut at a clause boundary, and point to `ncclenv doctor` ([`brief_finding`]).
pub const LINE_MAX_CHARS: usize = 200;

/// Where a shortened finding line points for its whole text.
const FINDING_HINT: &str = "(all of it: ncclenv doctor)";

/// The body of a finding line (after `ncclenv: warning: `, `tag_len` characters) in at most
/// [`LINE_MAX_CHARS`]: `MESSAGE [code] (what to do: REMEDY)` when it fits, else `MESSAGE [code] (all of it:
/// ncclenv doctor)`, the message cut at the last `; `, `: `, `, ` or ` (` that fits (else at a character) and
/// ended with `…`. Info findings (`remedy` `None`) carry none.
pub fn brief_finding(message: &str, code: &str, remedy: Option<&str>, tag_len: usize) -> String {
    let len = |s: &str| s.chars().count();
    let room = LINE_MAX_CHARS.saturating_sub("ncclenv: ".len() + tag_len);
    let full = match remedy {
        Some(r) => format!("{message} [{code}] (what to do: {r})"),
        None => format!("{message} [{code}]"),
    };
    if len(&full) <= room {
        return full;
    }
    let tail = format!(" [{code}] {FINDING_HINT}");
    if len(message) + len(&tail) <= room {
        return format!("{message}{tail}");
    }
    // Room for the message, its `…` included.
    let keep = room.saturating_sub(len(&tail) + 1);
    let cut: String = message.chars().take(keep).collect();
    let at = ["; ", ": ", ", ", " ("]
        .iter()
        .filter_map(|p| cut.rfind(p))
        .max()
        .filter(|i| *i >= keep / 2)
        .unwrap_or(cut.len());
    format!("{}…{tail}", cut[..at].trim_end())
}

/// What a [`Record`] reports (`kind` in JSON).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Kind<'a> {
    /// A plain message.
    Log,
    /// A finding of the decision (`docs/findings.md`): its stable code, what to do, and whether
    /// `NCCLENV_STRICT=1` turns it into a refusal.
    Finding {
        /// Stable code, e.g. `inherited-ifname-repaired`.
        code: &'a str,
        /// What the user can do.
        remedy: &'a str,
        /// True when `NCCLENV_STRICT=1` refuses on it.
        strict: bool,
    },
    /// One variable set or unset, with its reason (debug level).
    Change {
        /// The variable, e.g. `NCCL_SOCKET_IFNAME`.
        variable: &'a str,
        /// `set` or `unset`.
        action: &'static str,
        /// The value set; `null` for `unset`.
        value: Option<&'a str>,
        /// Why.
        reason: &'a str,
        /// The inherited value it replaces (a repair), else `null`.
        replaced: Option<&'a str>,
    },
    /// The decision: the interface NCCL will bootstrap on and every variable set or unset.
    Summary {
        /// The chosen interface, `null` when none (hands off, or nothing usable).
        interface: Option<&'a str>,
        /// Its address NCCL binds.
        address: Option<IpAddr>,
        /// How it was chosen, in full.
        how: Option<&'a str>,
        /// Every variable set, name → value.
        set: BTreeMap<&'a str, &'a str>,
        /// Every variable removed from the command's environment.
        unset: Vec<&'a str>,
        /// True when ncclenv deliberately changes nothing.
        hands_off: bool,
    },
    /// ncclenv stops with this exit code instead of running the command (the command is not found or not
    /// executable, a usage error, an interruption, a failed `install`); `message` says why.
    Exit {
        /// ncclenv's exit code (2, 126, 127, 128+N, 1).
        exit_code: u8,
    },
    /// ncclenv refuses to run the command (exit 78); `message` is the reason.
    Refusal {
        /// The refusal's finding code (`docs/findings.md`).
        code: &'a str,
        /// What the user can do.
        remedy: &'a str,
        /// Always 78 (`EX_CONFIG`).
        exit_code: u8,
    },
}

impl<'a> Record<'a> {
    fn new(lvl: Lvl, message: String, kind: Kind<'a>) -> Record<'a> {
        Record {
            time: Now::read(),
            program: PROGRAM,
            level: lvl.name(),
            severity: lvl.severity(),
            message,
            kind,
            brief: false,
        }
    }

    /// The line in text format, without the `ncclenv: ` prefix and level tag.
    fn text_body(&self) -> String {
        match &self.kind {
            Kind::Finding { code, remedy, .. } => {
                let warn = self.level == Lvl::Warn.name();
                let remedy = warn.then_some(*remedy);
                if self.brief {
                    let tag = if warn { "warning: ".len() } else { 0 };
                    brief_finding(&self.message, code, remedy, tag)
                } else if let Some(r) = remedy {
                    format!("{} [{code}] (what to do: {r})", self.message)
                } else {
                    format!("{} [{code}]", self.message)
                }
            }
            Kind::Refusal {
                remedy, exit_code, ..
            } => {
                format!(
                    "refused (exit {exit_code}): {}. What to do: {remedy}",
                    self.message
                )
            }
            Kind::Log | Kind::Exit { .. } | Kind::Change { .. } | Kind::Summary { .. } => {
                self.message.clone()
            }
        }
    }

    /// The whole line, newline included, in `format`.
    fn render(&self, format: LogFormat, color: bool) -> String {
        match format {
            LogFormat::Json => {
                let s = serde_json::to_string(self).unwrap_or_else(|_| {
                    // Serialising plain strings and numbers cannot fail; keep a valid line regardless.
                    format!(
                        "{{\"program\":\"{PROGRAM}\",\"level\":\"{}\",\"kind\":\"log\",\"message\":\"unserialisable record\"}}",
                        self.level
                    )
                });
                let mut s = crate::text::escape_json(&s).into_owned();
                s.push('\n');
                s
            }
            LogFormat::Text => {
                let (tag, code) = match self.level {
                    "error" if matches!(self.kind, Kind::Log) => ("error: ", "\x1b[31m"),
                    "warn" => ("warning: ", "\x1b[33m"),
                    "debug" => ("debug: ", "\x1b[2m"),
                    _ => ("", ""),
                };
                let body = self.text_body();
                let body = crate::text::escape(&body);
                if color && !tag.is_empty() {
                    format!("ncclenv: {code}{tag}\x1b[0m{body}\n")
                } else {
                    format!("ncclenv: {tag}{body}\n")
                }
            }
        }
    }
}

/// Write `rec` at `lvl` when the level allows it, or always when `always` (refusals and exec errors: they are
/// the job's exit reason).
fn write(lvl: Lvl, rec: &Record, always: bool) {
    let s = settings();
    if !always && (s.level < lvl.needs() || s.level == LogLevel::Off) {
        return;
    }
    let line = rec.render(s.format, s.color);
    let _ = QuietStderr.write_all(line.as_bytes());
}

/// The `tracing` subscriber of this process: an event from another module (`tracing::warn!` …) becomes a
/// [`Record`] of kind `log`, filtered by `NCCLENV_LOG` and written by [`write`] in the configured format, like
/// every other line. ncclenv opens no spans: a span gets one constant id and is otherwise ignored (the
/// `Subscriber` contract of tracing-core 0.1 asks only for a non-zero id). This replaces tracing-subscriber's
/// `fmt` layer and registry, which ncclenv used for nothing but this (21 KiB of the static binary,
/// docs/performance.md "Size under 1.5 MiB").
struct Logger {
    /// The most verbose level written (`tracing` orders TRACE above ERROR).
    max: Level,
}

impl tracing::Subscriber for Logger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= self.max
    }
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::from_level(self.max))
    }
    fn new_span(&self, _span: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }
    fn record(&self, _span: &span::Id, _values: &span::Record<'_>) {}
    fn record_follows_from(&self, _span: &span::Id, _follows: &span::Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut message = fields.message;
        for extra in fields.extra {
            message.push(' ');
            message.push_str(&extra);
        }
        let lvl = Lvl::of(event.metadata().level());
        write(lvl, &Record::new(lvl, message, Kind::Log), false);
    }
    fn enter(&self, _span: &span::Id) {}
    fn exit(&self, _span: &span::Id) {}
}

/// Collects an event's message and extra fields (`key=value`, appended to the message).
#[derive(Default)]
struct Fields {
    message: String,
    extra: Vec<String>,
}

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.extra.push(format!("{}={value}", field.name()));
        }
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.extra.push(format!("{}={value:?}", field.name()));
        }
    }
}

/// Install the stderr logger: `level` (`NCCLENV_LOG`), `format` (`NCCLENV_LOG_FORMAT`). Colour (text only)
/// when stderr is a terminal and `NO_COLOR` is unset or empty (no-color.org). Later calls change nothing.
pub fn init(level: LogLevel, format: LogFormat, no_color: bool) {
    let color = format == LogFormat::Text && !no_color && std::io::stderr().is_terminal();
    let _ = SETTINGS.set(Settings {
        level,
        format,
        color,
    });
    let max = match level {
        LogLevel::Off => return,
        LogLevel::Error => Level::ERROR,
        LogLevel::Warn => Level::WARN,
        LogLevel::Info => Level::INFO,
        LogLevel::Debug => Level::DEBUG,
    };
    // Every line, this subscriber's too, goes through `write` and `QuietStderr`, which swallows write errors:
    // a job started with `2>/dev/full` or a closed stderr still runs. A second call finds the global
    // subscriber set and changes nothing.
    let _ = tracing::subscriber::set_global_default(Logger { max });
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

/// A reading of the wall clock, kept as read and formatted as RFC 3339 ([`rfc3339`]) only when it is
/// serialized or displayed: every log record takes one, and most are never written as JSON (the text format,
/// the default, has no time; a filtered record is never written). Formatting on every record cost about 12 %
/// of `ncclenv env`'s instructions (docs/performance.md, "Start-up: the log line's time").
#[derive(Debug, Clone, Copy)]
pub struct Now(std::time::SystemTime);

impl Now {
    /// The clock now.
    pub fn read() -> Now {
        Now(std::time::SystemTime::now())
    }
}

impl fmt::Display for Now {
    /// RFC 3339 in UTC with milliseconds (`2026-12-02T18:52:34.123Z`); the epoch when the clock reads before
    /// 1970.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self
            .0
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        f.write_str(&rfc3339(d.as_secs(), d.subsec_millis()))
    }
}

impl Serialize for Now {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// `secs` since the epoch and `millis` as RFC 3339 UTC: the civil date from the day count (the proleptic
/// Gregorian calendar, H. Hinnant's `civil_from_days`).
pub fn rfc3339(secs: u64, millis: u32) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The first clause of a choice's `how` (up to the first ` (`, `; ` or `, `): `default route (metric 0)` →
/// `default route`; `route to peer 10.0.0.1 (m from MASTER_ADDR)` → `route to peer 10.0.0.1`.
pub fn brief_how(how: &str) -> &str {
    let end = [" (", "; ", ", "]
        .iter()
        .filter_map(|p| how.find(p))
        .min()
        .unwrap_or(how.len());
    &how[..end]
}

/// The plan's changes as `NAME=value` / `unset NAME`, NCCL's own variables first (plan order within each
/// group), so that the framework companions are the first left out of a full line.
fn brief_changes(plan: &Plan) -> Vec<String> {
    let item = |c: &Change| match &c.action {
        Action::Set { value } => format!("{}={value}", c.name),
        Action::Unset => format!("unset {}", c.name),
    };
    ordered_changes(plan).into_iter().map(item).collect()
}

/// The plan's changes, NCCL's own variables first (plan order within each group).
fn ordered_changes(plan: &Plan) -> Vec<&Change> {
    let (nccl, other): (Vec<&Change>, Vec<&Change>) = plan
        .changes
        .iter()
        .partition(|c| c.name.starts_with("NCCL_"));
    nccl.into_iter().chain(other).collect()
}

/// [`brief_changes`] with the variables set to one value named together, where the first of them stands:
/// `NCCL_SOCKET_IFNAME,GLOO_SOCKET_IFNAME,TP_SOCKET_IFNAME=eth0` (the summary when the plain list does not
/// fit: a default Docker container sets seven variables, three of them to the interface).
fn grouped_changes(plan: &Plan) -> Vec<String> {
    let mut groups: Vec<(Vec<&str>, Option<&str>)> = Vec::new();
    for c in ordered_changes(plan) {
        match &c.action {
            Action::Set { value } => {
                match groups.iter_mut().find(|(_, v)| *v == Some(value.as_str())) {
                    Some((names, _)) => names.push(&c.name),
                    None => groups.push((vec![&c.name], Some(value.as_str()))),
                }
            }
            Action::Unset => groups.push((vec![&c.name], None)),
        }
    }
    groups
        .into_iter()
        .map(|(names, v)| match v {
            Some(v) => format!("{}={v}", names.join(",")),
            None => format!("unset {}", names.join(",")),
        })
        .collect()
}

/// The summary line (without `ncclenv: `): the interface, its address and how it was chosen in brief, then
/// the variables set, at most [`SUMMARY_MAX_CHARS`] characters with the prefix, e.g.
/// `interface eth0 172.17.0.2 (default route); set NCCL_SOCKET_IFNAME=eth0 NCCL_SOCKET_FAMILY=AF_INET …`.
/// Reasons are not here: they are debug lines ([`emit`]) and in `ncclenv doctor`.
pub fn summary(plan: &Plan) -> String {
    let debug = plan
        .debug_files
        .as_ref()
        .map(|f| format!("; NCCL debug logs: {f}"))
        .unwrap_or_default();
    let max = SUMMARY_MAX_CHARS
        .saturating_sub("ncclenv: ".len() + debug.chars().count())
        .max(40);
    if plan.hands_off {
        let items = brief_changes(plan);
        if items.is_empty() {
            return format!("environment left untouched{debug}");
        }
        // Only the debug variables of NCCLENV_DEBUG=1 are set in a hands-off case.
        return format!(
            "{}{debug}",
            fit("network settings left untouched; set", &items, max)
        );
    }
    let mut head = String::new();
    if plan.hands_off {
        // NCCL_COMM_ID or a vendor profile owns the network; /dev/shm was still decided.
        head = "network left untouched".to_string();
    } else if let Some(c) = &plan.choice {
        head = format!("interface {}", c.ifname);
        if let Some(a) = c.addr {
            head.push_str(&format!(" {a}"));
        }
        head.push_str(&format!(" ({})", brief_how(&c.how)));
    }
    let items = brief_changes(plan);
    if items.is_empty() {
        return if head.is_empty() {
            format!("nothing to set{debug}")
        } else {
            format!("{head}; nothing to set{debug}")
        };
    }
    let lead = if head.is_empty() {
        "set".to_string()
    } else {
        format!("{head}; set")
    };
    let long = lead.chars().count() + items.iter().map(|i| i.chars().count() + 1).sum::<usize>();
    let items = if long > max {
        grouped_changes(plan)
    } else {
        items
    };
    format!("{}{debug}", fit(&lead, &items, max))
}

/// Where the summary points for what it leaves out: `ncclenv doctor` (with the job's command after `--`, as
/// `docs/logging.md` says, to read the launcher's arguments as the start did).
const DOCTOR_HINT: &str = "ncclenv doctor";

/// `lead` followed by as many of `items` (space-separated) as fit in `max` characters, and ` (+N more)` for
/// the rest. `lead` is never cut.
fn fit(lead: &str, items: &[String], max: usize) -> String {
    let len = |s: &str| s.chars().count();
    let all = format!("{lead} {}", items.join(" "));
    if len(&all) <= max {
        return all;
    }
    let mut line = lead.to_string();
    for (i, it) in items.iter().enumerate() {
        let rest = items.len() - i - 1;
        let tail = if rest > 0 {
            format!(" (+{rest} more: {DOCTOR_HINT})")
        } else {
            String::new()
        };
        if len(&line) + 1 + len(it) + len(&tail) > max {
            line.push_str(&format!(" (+{} more: {DOCTOR_HINT})", items.len() - i));
            return line;
        }
        line.push(' ');
        line.push_str(it);
    }
    line
}

/// Emit the plan: one line per finding (what, why, what to do, `[code]`), one debug line per change with its
/// reason, then the summary line, unless the plan refuses (the caller reports the refusal with [`refused`]:
/// nothing is set for a command that does not run).
pub fn emit(plan: &Plan) {
    for w in &plan.warnings {
        finding(w);
    }
    for c in &plan.changes {
        let (action, value) = match &c.action {
            Action::Set { value } => ("set", Some(value.as_str())),
            Action::Unset => ("unset", None),
        };
        let mut message = match value {
            Some(v) => format!("{}={v}: {}", c.name, c.reason),
            None => format!("unset {}: {}", c.name, c.reason),
        };
        if let Some(old) = &c.replaced {
            message.push_str(&format!(" (was {old:?})"));
        }
        let rec = Record::new(
            Lvl::Debug,
            message,
            Kind::Change {
                variable: &c.name,
                action,
                value,
                reason: &c.reason,
                replaced: c.replaced.as_deref(),
            },
        );
        write(Lvl::Debug, &rec, false);
    }
    if matches!(plan.verdict, Verdict::Refuse { .. }) {
        return;
    }
    let choice = plan.choice.as_ref();
    let mut set = BTreeMap::new();
    let mut unset = Vec::new();
    for c in &plan.changes {
        match &c.action {
            Action::Set { value } => {
                set.insert(c.name.as_str(), value.as_str());
            }
            Action::Unset => unset.push(c.name.as_str()),
        }
    }
    let rec = Record::new(
        Lvl::Info,
        summary(plan),
        Kind::Summary {
            interface: choice.map(|c| c.ifname.as_str()),
            address: choice.and_then(|c| c.addr),
            how: choice.map(|c| c.how.as_str()),
            set,
            unset,
            hands_off: plan.hands_off,
        },
    );
    write(Lvl::Info, &rec, false);
}

/// Info findings that say nothing is wrong and nothing is changed: logged at debug level only (they stay
/// `info` in their JSON record and in `ncclenv doctor`).
const QUIET_INFO: &[&str] = &[
    crate::findings::Finding::ShmSingleGpu.code(),
    crate::findings::Finding::ShmNoGpu.code(),
];

/// One finding as a line: warn level for warnings, info for information; [`QUIET_INFO`] at debug level.
fn finding(w: &Note) {
    let lvl = match w.severity {
        Severity::Warn => Lvl::Warn,
        Severity::Info => Lvl::Info,
    };
    let mut rec = Record::new(
        lvl,
        w.message.clone(),
        Kind::Finding {
            code: &w.code,
            remedy: &w.remedy,
            strict: w.strict_refuses,
        },
    );
    rec.brief = settings().level < LogLevel::Debug;
    // Worth knowing only when asked: no local peer, so nothing about /dev/shm matters.
    let lvl = if QUIET_INFO.contains(&w.code.as_str()) {
        Lvl::Debug
    } else {
        lvl
    };
    write(lvl, &rec, false);
}

/// Why ncclenv refuses to run the command, and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Why NCCL would certainly fail (or which strict finding refused).
    pub reason: String,
    /// What the user can do.
    pub remedy: String,
    /// The refusal's finding code (`docs/findings.md`), in the JSON line's `code`.
    pub code: String,
}

impl Refusal {
    /// The one line for people: `ncclenv: refused (exit 78): REASON. What to do: REMEDY`.
    pub fn text(&self) -> String {
        format!(
            "ncclenv: refused (exit {}): {}. What to do: {}",
            crate::exit::REFUSED,
            self.reason,
            self.remedy
        )
    }
}

/// The plan's refusal, if it refuses.
pub fn refusal(plan: &Plan) -> Option<Refusal> {
    match &plan.verdict {
        Verdict::Refuse {
            reason,
            remedy,
            code,
        } => Some(Refusal {
            reason: reason.clone(),
            remedy: remedy.clone(),
            code: code.clone(),
        }),
        Verdict::Proceed => None,
    }
}

/// Report a refusal (exit 78): the line on stderr (printed even with `NCCLENV_LOG=off`: it is the job's exit
/// reason), and the same text in the termination log (`termination_log`, else [`DEFAULT_TERMINATION_LOG`]
/// when it exists and is writable), so that `kubectl describe pod` shows why the container stopped.
pub fn refused(r: &Refusal, termination_log: Option<&Path>) {
    refusal_line(r);
    if let Err(e) = write_termination_log(termination_log, &crate::text::escape(&r.text())) {
        let rec = Record::new(Lvl::Warn, e, Kind::Log);
        write(Lvl::Warn, &rec, false);
    }
}

/// The refusal line alone (no termination log: `ncclenv check` and other diagnostics that refuse where the
/// entrypoint would), printed even with `NCCLENV_LOG=off`.
pub fn refusal_line(r: &Refusal) {
    let rec = Record::new(
        Lvl::Error,
        r.reason.clone(),
        Kind::Refusal {
            code: &r.code,
            remedy: &r.remedy,
            exit_code: crate::exit::REFUSED,
        },
    );
    write(Lvl::Error, &rec, true);
}

/// Write `text` (cut to [`TERMINATION_LOG_MAX_BYTES`] at a character boundary, plus a newline) to `path`,
/// created when missing; with no path, to [`DEFAULT_TERMINATION_LOG`] only when it already exists and opens
/// for writing (Kubernetes creates it; elsewhere it is absent and nothing happens). The file is opened
/// non-blocking, so a FIFO without a reader cannot hold the exit back. Errors: a message naming the path, only
/// for an explicit `path`.
pub fn write_termination_log(path: Option<&Path>, text: &str) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let (p, explicit) = match path {
        Some(p) => (p, true),
        None => (Path::new(DEFAULT_TERMINATION_LOG), false),
    };
    let mut end = text.len().min(TERMINATION_LOG_MAX_BYTES - 1);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let open = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .create(explicit)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(p);
    let result = open.and_then(|mut f| {
        f.write_all(&text.as_bytes()[..end])?;
        f.write_all(b"\n")
    });
    match result {
        Ok(()) => Ok(()),
        Err(_) if !explicit => Ok(()),
        Err(e) => Err(format!(
            "cannot write the termination log {}: {e} (NCCLENV_TERMINATION_LOG)",
            p.display()
        )),
    }
}

/// The line that says why ncclenv exits with `exit_code` instead of running the command (exec failures,
/// usage errors, interruptions, a failed `install`): always printed, it is the job's exit reason. `message`
/// without the `ncclenv: ` prefix.
pub fn exit_error(message: &str, exit_code: u8) {
    let rec = Record::new(Lvl::Error, message.to_string(), Kind::Exit { exit_code });
    write(Lvl::Error, &rec, true);
}

/// The line [`exit_error`] would write for `message` and `exit_code`, rendered now in the configured format
/// (newline included), for writing later where nothing may be formatted (`crate::signals`' handler).
pub fn exit_line(message: &str, exit_code: u8) -> String {
    let s = settings();
    let rec = Record::new(Lvl::Error, message.to_string(), Kind::Exit { exit_code });
    rec.render(s.format, s.color)
}

/// A usage error (exit 2), written before the configuration could be read: JSON when `NCCLENV_LOG_FORMAT`
/// says `json` (whatever else was wrong), else text.
pub fn usage_error(message: &str, vars: &[(std::ffi::OsString, std::ffi::OsString)]) {
    early_line(
        Lvl::Error,
        message,
        Kind::Exit {
            exit_code: crate::exit::USAGE,
        },
        vars,
    );
}

/// A usage error that does not stop the job: `NCCLENV_DISABLE=1` asked ncclenv to change nothing, so a
/// malformed `NCCLENV_*` value is said as a warning and the command runs with the environment untouched.
///
/// Not said when `NCCLENV_LOG` (its first entry, as getenv reads it) asks for less than warnings (`off`,
/// `error`): the job then runs as silently as with the other variables well-formed.
pub fn usage_ignored(message: &str, vars: &[(std::ffi::OsString, std::ffi::OsString)]) {
    let quiet = vars
        .iter()
        .find(|(k, _)| k == "NCCLENV_LOG")
        .and_then(|(_, v)| v.to_str())
        .and_then(|v| crate::cli::parse_log("NCCLENV_LOG", v).ok())
        .is_some_and(|l| l < LogLevel::Warn);
    if !quiet {
        early_line(Lvl::Warn, message, Kind::Log, vars);
    }
}

/// One line written before the configuration could be read: JSON when `NCCLENV_LOG_FORMAT` says `json`
/// (whatever else was wrong), else text.
fn early_line(
    lvl: Lvl,
    message: &str,
    kind: Kind<'_>,
    vars: &[(std::ffi::OsString, std::ffi::OsString)],
) {
    // As getenv reads it: the first entry of the name.
    let json = vars
        .iter()
        .find(|(k, _)| k == "NCCLENV_LOG_FORMAT")
        .is_some_and(|(_, v)| {
            v.to_str()
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("json"))
        });
    let rec = Record::new(lvl, message.to_string(), kind);
    let format = if json {
        LogFormat::Json
    } else {
        LogFormat::Text
    };
    let _ = QuietStderr.write_all(rec.render(format, false).as_bytes());
}

fn opt<T: fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn family_name(f: Family) -> &'static str {
    match f {
        Family::Inet => "IPv4",
        Family::Inet6 => "IPv6",
    }
}

fn bytes_text(v: Option<u64>, none: &str) -> String {
    v.map_or_else(|| none.to_string(), |b| crate::snapshot::Mib(b).to_string())
}

fn list<T: fmt::Display>(v: &[T]) -> String {
    if v.is_empty() {
        "-".to_string()
    } else {
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// ` (from SOURCE)`, or nothing.
fn from(source: &Option<String>) -> String {
    source
        .as_ref()
        .map_or(String::new(), |s| format!(" (from {s})"))
}

/// Debug lines with the probed facts (`NCCLENV_LOG=debug`): links with flags and addresses, default routes,
/// the route to the peer, the job's shape, RDMA, `/dev/shm`, GPUs, NCCL config files. Plain words, `-` for
/// what is unknown; only ncclenv's own variables appear, nothing else of the environment.
pub fn debug_snapshot(snap: &Snapshot) {
    if settings().level < LogLevel::Debug {
        return;
    }
    for line in snapshot_lines(snap) {
        write(Lvl::Debug, &Record::new(Lvl::Debug, line, Kind::Log), false);
    }
}

/// The lines of [`debug_snapshot`].
pub fn snapshot_lines(snap: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    match &snap.net {
        Err(e) => out.push(format!("network probe failed: {e}")),
        Ok(net) => network_lines(net, &mut out),
    }
    peer_line(snap, &mut out);
    job_lines(snap, &mut out);
    host_lines(snap, &mut out);
    out
}

/// The links with flags and addresses, the default routes, the routes to the peer and the default lookups.
fn network_lines(net: &crate::snapshot::Network, out: &mut Vec<String>) {
    let name = |i: u32| {
        net.links
            .iter()
            .find(|l| l.index == i)
            .map_or_else(|| format!("#{i}"), |l| l.name.clone())
    };
    for l in &net.links {
        let addrs: Vec<String> = net
            .addrs
            .iter()
            .filter(|a| a.index == l.index)
            .map(|a| format!("{}/{}", a.addr, a.prefix_len))
            .collect();
        let mut flags = vec![if l.up { "UP" } else { "DOWN" }];
        if l.running {
            flags.push("RUNNING");
        }
        if l.loopback {
            flags.push("LOOPBACK");
        }
        out.push(format!(
            "link {} (index {}) {} kind {} addresses {}",
            l.name,
            l.index,
            flags.join(","),
            l.kind.as_deref().unwrap_or("-"),
            list(&addrs)
        ));
    }
    for r in net.routes.iter().filter(|r| r.is_default()) {
        let paths: Vec<String> = r
            .paths()
            .iter()
            .map(|p| {
                let mut s = format!("dev {}", name(p.oif));
                if let Some(g) = p.gateway {
                    s = format!("via {g} {s}");
                }
                if p.linkdown {
                    s.push_str(" linkdown");
                }
                s
            })
            .collect();
        out.push(format!(
            "default route ({}) {} metric {}",
            family_name(r.family),
            if paths.is_empty() {
                "-".to_string()
            } else {
                paths.join(" / ")
            },
            r.metric
        ));
    }
    for p in net.peer_routes.iter().chain(&net.default_lookups) {
        let mut s = format!(
            "route to {}: dev {} src {} via {} table {}",
            p.dest,
            p.oif.map_or_else(|| "-".to_string(), name),
            opt(p.prefsrc),
            opt(p.gateway),
            opt(p.table)
        );
        if p.local {
            s.push_str(" (local)");
        }
        if let Some(e) = &p.error {
            s.push_str(&format!(" error: {e}"));
        }
        out.push(s);
    }
}

/// The peer and what it resolved to, or `no peer named`.
fn peer_line(snap: &Snapshot, out: &mut Vec<String>) {
    match &snap.peer {
        Some(p) => {
            let mut s = format!(
                "peer {}{} (from {}) resolves to {} ({} resolver call(s), {} ms)",
                p.host,
                p.port.map_or(String::new(), |n| format!(" port {n}")),
                p.source,
                list(&p.addrs),
                p.resolve_attempts,
                p.resolve_ms
            );
            if let Some(e) = &p.error {
                s.push_str(&format!(" (error: {e})"));
            }
            out.push(s);
        }
        None => out.push("no peer named".to_string()),
    }
}

/// The job's shape and its rendezvous.
fn job_lines(snap: &Snapshot, out: &mut Vec<String>) {
    let j = &snap.job;
    out.push(format!(
        "job: {} node(s){}; launcher {}; node rank {}{}; master port {}{}; this node's address {}{}; --ips {}",
        opt(j.nnodes),
        from(&j.source),
        j.launcher.map_or("-", |l| l.name()),
        opt(j.node_rank),
        from(&j.node_rank_source),
        opt(j.master_port),
        from(&j.master_port_source),
        j.self_addr.as_deref().unwrap_or("-"),
        from(&j.self_addr_source),
        list(&j.ips)
    ));
    if let Some(r) = &j.rendezvous {
        out.push(format!(
            "rendezvous: {} at {} port {} ({:?}, from {})",
            r.owner,
            r.host,
            opt(r.port),
            r.protocol,
            r.source
        ));
    }
}

/// NCCL's config files, RDMA, `/dev/shm` and the GPUs.
fn host_lines(snap: &Snapshot, out: &mut Vec<String>) {
    for f in &snap.conf_files {
        let keys: Vec<&str> = f.values.iter().map(|(k, _)| k.as_str()).collect();
        let mut s = format!("NCCL config file {} sets {}", f.path, list(&keys));
        if let Some(e) = &f.error {
            s.push_str(&format!(" (error: {e})"));
        }
        out.push(s);
    }
    if let Some(r) = &snap.rdma {
        out.push(format!(
            "rdma: {} device(s), verbs nodes {}, memlock soft {} hard {}",
            r.devices.len(),
            list(&r.uverbs),
            bytes_text(r.memlock_soft, "unlimited"),
            bytes_text(r.memlock_hard, "unlimited")
        ));
    }
    if let Some(s) = &snap.shm {
        let mut line = match &s.error {
            Some(e) => format!("shm {}: {e}", s.path),
            None => format!(
                "shm {}: {} free of {}",
                s.path,
                bytes_text(s.free_bytes, "?"),
                bytes_text(s.total_bytes, "?")
            ),
        };
        if s.read_only {
            line.push_str(", read-only");
        }
        out.push(line);
    }
    if let Some(g) = &snap.gpus {
        out.push(format!(
            "gpus: {} (from {})",
            g.count
                .map_or_else(|| "unknown".to_string(), |c| c.to_string()),
            g.source
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Choice;

    fn plan_with(ifname: &str, how: &str) -> Plan {
        let mut p = Plan {
            choice: Some(Choice {
                ifname: ifname.into(),
                addr: "172.17.0.2".parse().ok(),
                how: how.into(),
            }),
            ..Plan::default()
        };
        p.set("NCCL_SOCKET_IFNAME", ifname, "r1 (metric 0)");
        p.set("NCCL_SOCKET_FAMILY", "AF_INET", "r2");
        p.set("GLOO_SOCKET_IFNAME", ifname, "r3");
        p.set("TP_SOCKET_IFNAME", ifname, "r4");
        p.set("POD_IP", "172.17.0.2", "r5");
        p.set("NCCL_IB_DISABLE", "1", "r6 (net_ib.cc, ncclIbInitDevices)");
        p
    }

    #[test]
    fn brief_how_keeps_the_first_clause() {
        assert_eq!(brief_how("default route (metric 0)"), "default route");
        assert_eq!(
            brief_how("route to peer 10.0.0.1 (m from MASTER_ADDR)"),
            "route to peer 10.0.0.1"
        );
        assert_eq!(
            brief_how("inherited NCCL_SOCKET_IFNAME=bond0 (from environment), NCCL's first match"),
            "inherited NCCL_SOCKET_IFNAME=bond0"
        );
        assert_eq!(brief_how("loopback fallback"), "loopback fallback");
    }

    #[test]
    fn summary_names_every_variable_without_reasons() {
        let s = summary(&plan_with("eth0", "default route (metric 0)"));
        assert_eq!(
            s,
            "interface eth0 172.17.0.2 (default route); set NCCL_SOCKET_IFNAME=eth0 NCCL_SOCKET_FAMILY=AF_INET \
             NCCL_IB_DISABLE=1 GLOO_SOCKET_IFNAME=eth0 TP_SOCKET_IFNAME=eth0 POD_IP=172.17.0.2"
        );
        assert!(!s.contains("metric") && !s.contains("r1"));
    }

    #[test]
    fn summary_never_exceeds_the_limit_and_counts_what_it_leaves_out() {
        for name in ["eth0", "enp94s0f0np0", "a-very-long-nam"] {
            let mut p = plan_with(name, "route to peer 10.200.93.100 (MASTER_ADDR from env)");
            p.set(
                "NCCL_IB_HCA",
                "==mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7",
                "r",
            );
            let s = format!("ncclenv: {}", summary(&p));
            assert!(
                s.chars().count() <= SUMMARY_MAX_CHARS,
                "{} chars: {s}",
                s.chars().count()
            );
            assert!(s.contains("NCCL_SOCKET_IFNAME"), "{s}");
            assert!(s.contains(&format!("={name} ")), "{s}");
            assert!(
                s.contains("more: ncclenv doctor)")
                    || ["POD_IP", "NCCL_IB_HCA", "TP_SOCKET_IFNAME"]
                        .iter()
                        .all(|n| s.contains(n)),
                "{s}"
            );
        }
    }

    #[test]
    fn json_records_carry_kind_and_fields() {
        let w = Note {
            code: "shm-too-small".into(),
            severity: Severity::Warn,
            message: "small".into(),
            remedy: "--shm-size=1g".into(),
            strict_refuses: false,
        };
        let rec = Record::new(
            Lvl::Warn,
            w.message.clone(),
            Kind::Finding {
                code: &w.code,
                remedy: &w.remedy,
                strict: false,
            },
        );
        let line = rec.render(LogFormat::Json, false);
        assert!(line.ends_with('\n') && line.matches('\n').count() == 1);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        assert_eq!(v["program"], "ncclenv");
        assert_eq!(v["level"], "warn");
        assert_eq!(v["kind"], "finding");
        assert_eq!(v["code"], "shm-too-small");
        assert_eq!(v["remedy"], "--shm-size=1g");
        assert_eq!(
            rec.render(LogFormat::Text, false),
            "ncclenv: warning: small [shm-too-small] (what to do: --shm-size=1g)\n"
        );
    }

    /// The JSON refusal line carries the refusal's finding code, like a finding's line.
    #[test]
    fn json_refusal_carries_its_code() {
        let mut p = Plan::default();
        p.refuse("check-failed", "the check failed", "fix it");
        let r = refusal(&p).expect("refuses");
        let rec = Record::new(
            Lvl::Error,
            r.reason.clone(),
            Kind::Refusal {
                code: &r.code,
                remedy: &r.remedy,
                exit_code: 78,
            },
        );
        let v: serde_json::Value =
            serde_json::from_str(&rec.render(LogFormat::Json, false)).unwrap_or_default();
        assert_eq!(
            (&v["kind"], &v["code"], &v["exit_code"]),
            (&"refusal".into(), &"check-failed".into(), &78.into())
        );
        // The text line is unchanged.
        assert_eq!(
            rec.render(LogFormat::Text, false),
            "ncclenv: refused (exit 78): the check failed. What to do: fix it\n"
        );
    }

    #[test]
    fn debug_lines_show_no_rust_internals() {
        let snap = Snapshot::default();
        for l in snapshot_lines(&snap) {
            assert!(!l.contains("Some(") && !l.contains("None"), "{l}");
        }
    }

    #[test]
    fn termination_log_is_cut_at_4096_bytes_and_created_only_when_named() {
        let dir = std::env::temp_dir().join(format!("ncclenv-tl-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let p = dir.join("log");
        let long = "é".repeat(3000);
        assert_eq!(write_termination_log(Some(&p), &long), Ok(()));
        let got = std::fs::read_to_string(&p).unwrap_or_default();
        assert!(got.len() <= TERMINATION_LOG_MAX_BYTES, "{}", got.len());
        assert!(got.ends_with("é\n"));
        let missing = dir.join("no/such/dir/log");
        assert!(write_termination_log(Some(&missing), "x").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn rfc3339_is_utc_with_milliseconds() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day of a century divisible by 400) 23:59:59.
        assert_eq!(rfc3339(951_868_799, 7), "2000-02-29T23:59:59.007Z");
        assert_eq!(rfc3339(4_107_542_400, 999), "2100-03-01T00:00:00.999Z");
        let now = Now::read().to_string();
        assert_eq!(now.len(), 24, "{now}");
        let epoch = std::time::UNIX_EPOCH;
        assert_eq!(Now(epoch).to_string(), "1970-01-01T00:00:00.000Z");
        let before = epoch - std::time::Duration::from_secs(5);
        assert_eq!(Now(before).to_string(), "1970-01-01T00:00:00.000Z");
        let later = epoch + std::time::Duration::from_millis(951_868_799_007);
        assert_eq!(
            serde_json::to_string(&Now(later)).unwrap_or_default(),
            "\"2000-02-29T23:59:59.007Z\""
        );
        assert!(now.ends_with('Z') && now.as_bytes()[19] == b'.', "{now}");
    }

    #[test]
    fn a_long_finding_fits_the_line_and_points_to_doctor() {
        let message = "/dev/shm has 63 MiB free (of 64 MiB), NCCL's SHM transport needs about 294 MiB for 8 local \
                       rank(s) (/dev/nvidia[0-9]+ device nodes): 4 segments of 9637888 B each per rank: segment \
                       creation would fail with ENOSPC; NCCL's SHM transport is disabled (NCCL_SHM_DISABLE=1), which \
                       is slower";
        let body = brief_finding(message, "shm-too-small", Some("run with --shm-size=1g"), 9);
        let line = format!("ncclenv: warning: {body}");
        assert!(
            line.chars().count() <= LINE_MAX_CHARS,
            "{}: {line}",
            line.chars().count()
        );
        assert!(
            line.starts_with("ncclenv: warning: /dev/shm has 63 MiB free"),
            "{line}"
        );
        assert!(
            line.ends_with("… [shm-too-small] (all of it: ncclenv doctor)"),
            "{line}"
        );
        // Short enough: whole, with its remedy.
        assert_eq!(
            brief_finding("small", "c", Some("fix"), 9),
            "small [c] (what to do: fix)"
        );
        // A message without a clause boundary is cut at a character.
        let long = "x".repeat(400);
        let b = brief_finding(&long, "c", None, 0);
        assert!(
            format!("ncclenv: {b}").chars().count() <= LINE_MAX_CHARS,
            "{b}"
        );
    }

    #[test]
    fn json_lines_carry_time_and_cloud_logging_severity() {
        let rec = Record::new(Lvl::Warn, "m".into(), Kind::Log);
        let v: serde_json::Value =
            serde_json::from_str(&rec.render(LogFormat::Json, false)).unwrap_or_default();
        assert_eq!(v["severity"], "WARNING");
        assert_eq!(v["level"], "warn");
        assert_eq!(v["time"].as_str().map(str::len), Some(24), "{v}");
    }

    #[test]
    fn the_default_docker_summary_fits_without_counting() {
        let mut p = plan_with("eth0", "default route (metric 0)");
        p.set("NCCL_SHM_DISABLE", "1", "r7");
        let s = format!("ncclenv: {}", summary(&p));
        assert!(s.chars().count() <= SUMMARY_MAX_CHARS, "{s}");
        assert!(!s.contains("more"), "{s}");
        assert!(
            s.contains("NCCL_SOCKET_IFNAME,GLOO_SOCKET_IFNAME,TP_SOCKET_IFNAME=eth0"),
            "{s}"
        );
        assert!(
            s.contains("NCCL_SHM_DISABLE=1") && s.contains("POD_IP=172.17.0.2"),
            "{s}"
        );
    }
}
