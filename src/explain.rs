//! `ncclenv explain`: read NCCL debug output (per-rank files, or a job's combined log with other lines mixed in)
//! and say, per process (`host:pid` from NCCL's line prefix), what NCCL did: its version, the bootstrap
//! interface and address, the interfaces NET/Socket uses, NET/IB's devices, the network and plugin, the
//! transports, the settings NCCL read, and every WARN line with its cause and remedy from
//! [`crate::nccl_errors`]; then what breaks jobs between processes (bootstraps in different families or
//! networks, loopback or link-local bootstraps in a multi-host log, the same address on two hosts, different
//! NCCL versions, IB on some ranks and sockets on others); and, run on a node of the job, how NCCL's choice there
//! compares with ncclenv's ([`compare_local`]). The JSON shape is documented in `docs/explain.md`.
//!
//! [`Explainer`] and [`analyse`] are pure: fed lines, they build the [`Report`]. The shell around them,
//! [`main_in_helper`], reads the inputs (bounded per line by [`read_lines`]), probes and decides for this node,
//! and prints. It runs in the glibc helper `ncclenv-check`, which `ncclenv explain` execs: the log reader is not
//! linked into the static entrypoint. Line formats: [`crate::nccl_log`].

use crate::nccl_errors::{self, KnownError};
use crate::nccl_log::{self, Bootstrap, Level};
use crate::plan::Severity;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::BufRead;
use std::net::IpAddr;

/// Longest line kept (bytes); the rest of a longer line is skipped. NCCL's own lines are at most 1 KiB
/// (`ncclDebugLog`'s buffer), plus a launcher's prefix.
pub const MAX_LINE: usize = 64 * 1024;

/// WARN lines kept per process (distinct texts; repeats are counted).
pub const MAX_WARNINGS: usize = 100;

/// Most processes a report holds, lists and analyses; the lines of more are counted, and so are the
/// processes (distinct, up to [`MAX_COUNTED`]): whatever the log, the memory of `explain` stays bounded
/// (issue 22: 100,000 processes took 1.1 GB with `--json`).
pub const MAX_PROCESSES: usize = 2048;

/// Most WARN texts kept over all processes (beyond them, new texts are counted, not kept).
pub const MAX_WARNINGS_KEPT: usize = 8192;

/// Longest text kept from a log (a WARN text, a host name, a setting's value), in bytes; NCCL's own lines
/// are at most 1 KiB (`ncclDebugLog`'s buffer).
pub const MAX_TEXT: usize = 1024;

/// Most items kept per process in each of its lists and sets (settings, transports, NET/Socket
/// interfaces, NET/IB devices, ranks); more are counted.
pub const MAX_ITEMS: usize = 256;

/// Distinct processes beyond [`MAX_PROCESSES`] counted exactly up to this many (8 bytes each); beyond,
/// "at least".
pub const MAX_COUNTED: usize = 1 << 20;

/// What a report left out to stay bounded ([`MAX_PROCESSES`], [`MAX_WARNINGS_KEPT`], [`MAX_ITEMS`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeftOut {
    /// Processes not held (distinct `host:pid`, exact up to [`MAX_COUNTED`]).
    pub processes: usize,
    /// True when more processes than [`MAX_COUNTED`] were left out: `processes` is a lower bound.
    pub processes_at_least: bool,
    /// NCCL lines of the processes not held.
    pub lines: usize,
    /// WARN texts not kept (new texts past a process's [`MAX_WARNINGS`] or past [`MAX_WARNINGS_KEPT`]).
    pub warnings: usize,
    /// Items not kept in a process's lists and sets (past [`MAX_ITEMS`]).
    pub items: usize,
}

impl LeftOut {
    /// True when nothing was left out.
    pub fn is_empty(&self) -> bool {
        *self == LeftOut::default()
    }
}

/// `s` cut to at most `max` bytes, on a character boundary.
fn cut(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// An interface and its address, as NCCL logged them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Interface name.
    pub interface: String,
    /// Address.
    pub addr: IpAddr,
}

impl Endpoint {
    fn json(&self) -> Value {
        json!({"interface": self.interface, "addr": self.addr.to_string(), "family": family(&self.addr)})
    }
}

fn family(a: &IpAddr) -> &'static str {
    match a {
        IpAddr::V4(_) => "AF_INET",
        IpAddr::V6(_) => "AF_INET6",
    }
}

/// One distinct WARN (or quoted error) text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warn {
    /// The message after `NCCL WARN `.
    pub text: String,
    /// `file.cc:line` in NCCL.
    pub source: Option<String>,
    /// The input (file name, `-` for stdin) and 1-based line of its first occurrence.
    pub input: String,
    /// 1-based line number of the first occurrence.
    pub line: usize,
    /// How often it occurred.
    pub count: usize,
    /// The knowledge-base entry it matches.
    pub known: Option<&'static KnownError>,
}

/// Everything one process logged.
#[derive(Debug, Clone, Default)]
pub struct Process {
    /// Host name (NCCL's, up to the first `.`).
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Inputs it appears in.
    pub inputs: BTreeSet<String>,
    /// NCCL lines.
    pub lines: usize,
    /// `NCCL version X.Y.Z` when logged.
    pub nccl_version: Option<String>,
    /// The CUDA version NCCL was built for (`+cudaA.B`).
    pub cuda_version: Option<String>,
    /// The bootstrap socket interface and address.
    pub bootstrap: Option<Endpoint>,
    /// `Some(true)` for the `Bootstrap : Using` spelling (NCCL ≤ 2.23), `Some(false)` for `Bootstrap: Using`.
    pub bootstrap_spaced: Option<bool>,
    /// The out-of-band network device of bootstrap (`NCCL_OOB_NET_ENABLE=1`).
    pub bootstrap_device: Option<String>,
    /// NET/Socket's interfaces, in order.
    pub net_socket: Vec<Endpoint>,
    /// NET/IB's devices (`mlx5_0:1/IB`).
    pub net_ib: Vec<String>,
    /// NET/IB's out-of-band interface.
    pub ib_oob: Option<Endpoint>,
    /// `NET/IB : No device found.` was logged.
    pub ib_none: bool,
    /// The network plugin: `internal`, or the external plugin's name.
    pub plugin: Option<String>,
    /// The network NCCL uses (`Using network X`, `Assigned NET plugin X`): `IB`, `Socket` or a plugin's name.
    pub network: Option<String>,
    /// Transports of the channels (`NET/Socket`, `NET/IB`, `P2P/IPC`, `SHM`, …).
    pub transports: BTreeSet<String>,
    /// Settings NCCL read (`X set by environment to Y`).
    pub env: BTreeMap<String, String>,
    /// Ranks of this process's communicators.
    pub ranks: BTreeSet<u32>,
    /// Communicator size.
    pub nranks: Option<u32>,
    /// Number of nodes NCCL counted.
    pub nnodes: Option<u32>,
    /// `Init COMPLETE` was logged.
    pub init_complete: bool,
    /// The result code at the end of NCCL's error trail (`file.cc:line -> code` INFO lines, `NCCLCHECK` in
    /// src/include/checks.h): what the failing call returned.
    pub returned: Option<i32>,
    /// Distinct WARN texts, in order of first occurrence.
    pub warnings: Vec<Warn>,
    /// INFO lines that explain a fallback (knowledge-base entries of level INFO), by id.
    pub notes: BTreeSet<&'static str>,
    /// Items of its lists and sets not kept (past [`MAX_ITEMS`]).
    pub items_left_out: usize,
}

impl Process {
    /// `host:pid`.
    pub fn name(&self) -> String {
        format!("{}:{}", self.host, self.pid)
    }

    /// The network kind: `IB`, `Socket`, a plugin's name, or `None` when the log does not say.
    pub fn net_kind(&self) -> Option<String> {
        if let Some(n) = &self.network {
            if n.contains("IB") {
                return Some("IB".into());
            }
            return Some(n.clone());
        }
        if !self.net_ib.is_empty() {
            Some("IB".into())
        } else if self.ib_none || !self.net_socket.is_empty() {
            Some("Socket".into())
        } else {
            None
        }
    }

    /// The NCCL version as far as the log tells: the logged version, else the era the bootstrap line's
    /// spelling shows (`≤ 2.23`, `≥ 2.24`).
    pub fn version_label(&self) -> Option<String> {
        match (&self.nccl_version, self.bootstrap_spaced) {
            (Some(v), _) => Some(v.clone()),
            (None, Some(true)) => Some("≤ 2.23".into()),
            (None, Some(false)) => Some("≥ 2.24".into()),
            (None, None) => None,
        }
    }

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

    /// Count a repeat, or keep a new text while `room` (and the process's own bound) allows; true when a new
    /// text was kept, false when it was a repeat; `None` when it was left out.
    fn add_warning(&mut self, w: Warn, room: bool) -> Option<bool> {
        if let Some(e) = self.warnings.iter_mut().find(|e| e.text == w.text) {
            e.count += 1;
            Some(false)
        } else if room && self.warnings.len() < MAX_WARNINGS {
            self.warnings.push(w);
            Some(true)
        } else {
            None
        }
    }

    /// True when one more item fits in a list or set of `len` items; else it is counted as left out.
    fn room(&mut self, len: usize) -> bool {
        if len < MAX_ITEMS {
            return true;
        }
        self.items_left_out += 1;
        false
    }
}

/// One finding of `explain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Stable code (`docs/explain.md`).
    pub code: &'static str,
    /// Info or warn (warn makes the exit status 1).
    pub severity: Severity,
    /// What was found.
    pub message: String,
    /// What to do.
    pub remedy: String,
    /// The processes concerned (`host:pid`).
    pub processes: Vec<String>,
    /// The knowledge-base entry, for NCCL errors.
    pub known: Option<&'static str>,
}

/// One input read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    /// File name, `-` for standard input.
    pub name: String,
    /// Lines read.
    pub lines: usize,
    /// Lines with NCCL's prefix.
    pub nccl_lines: usize,
    /// Why it could not be read, if it could not.
    pub error: Option<String>,
}

/// What ncclenv decides on this node now, for [`compare_local`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Local {
    /// This host's name as NCCL writes it (up to the first `.`).
    pub host: String,
    /// ncclenv's choice: interface, address, how it was chosen; `None` when ncclenv would set nothing.
    pub choice: Option<(String, Option<IpAddr>, String)>,
    /// Why there is no choice (hands off, no candidate), when there is none.
    pub no_choice: Option<String>,
    /// The peer the comparison used (`--peer`, the launcher's master, or another host's bootstrap address).
    pub peer: Option<String>,
}

/// The result of reading the inputs.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The inputs, in order.
    pub inputs: Vec<Input>,
    /// Processes, in order of their first line.
    pub processes: Vec<Process>,
    /// Known errors found outside NCCL's lines (Gloo's, or NCCL's text quoted by a framework's exception).
    pub quoted: Vec<Warn>,
    /// `NCCL version …` lines that could not be tied to one process.
    pub versions_unattributed: BTreeSet<String>,
    /// Findings, job-wide first.
    pub findings: Vec<Finding>,
    /// What the report left out to stay bounded.
    pub left_out: LeftOut,
    /// The comparison with this node's decision, when run on a node of the job.
    pub local: Option<LocalView>,
}

/// The comparison with this node's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalView {
    /// This node's decision.
    pub local: Local,
    /// The processes of the log on this host.
    pub processes: Vec<String>,
    /// Where NCCL bootstrapped here (interface, address), one entry per distinct interface.
    pub nccl: Vec<Endpoint>,
    /// True when every process here bootstrapped on ncclenv's interface.
    pub agrees: Option<bool>,
}

/// Feeds lines, builds the [`Report`].
#[derive(Debug, Default)]
pub struct Explainer {
    report: Report,
    index: BTreeMap<(String, u32), usize>,
    /// Bare `NCCL version` lines per input index.
    bare_versions: Vec<(usize, String, Option<String>)>,
    /// Processes per input index.
    input_procs: BTreeMap<usize, BTreeSet<usize>>,
    /// Hashes of the processes left out, to count them ([`MAX_COUNTED`]).
    left_out_seen: std::collections::HashSet<u64>,
    /// WARN texts kept over all processes.
    warnings_kept: usize,
}

impl Explainer {
    /// An empty explainer.
    pub fn new() -> Explainer {
        Explainer::default()
    }

    /// Start reading the input `name` (a file name, `-` for stdin).
    pub fn start_input(&mut self, name: &str) {
        self.report.inputs.push(Input {
            name: name.to_string(),
            lines: 0,
            nccl_lines: 0,
            error: None,
        });
    }

    /// Record that the current input could not be read (or not to the end).
    pub fn input_error(&mut self, error: String) {
        if let Some(i) = self.report.inputs.last_mut() {
            i.error = Some(error);
        }
    }

    /// Feed one line of the current input.
    pub fn feed(&mut self, line: &str) {
        if self.report.inputs.is_empty() {
            self.start_input("-");
        }
        let ii = self.report.inputs.len() - 1;
        let input = &mut self.report.inputs[ii];
        input.lines += 1;
        let lineno = input.lines;
        let iname = input.name.clone();
        let Some(l) = nccl_log::parse_line(line) else {
            self.feed_other(ii, &iname, lineno, line);
            return;
        };
        self.report.inputs[ii].nccl_lines += 1;
        let key = (cut(l.host, MAX_TEXT), l.pid);
        let pi = match self.index.get(&key) {
            Some(i) => *i,
            None if self.report.processes.len() >= MAX_PROCESSES => {
                self.leave_out(&key);
                return;
            }
            None => {
                self.report.processes.push(Process {
                    host: key.0.clone(),
                    pid: l.pid,
                    ..Process::default()
                });
                let i = self.report.processes.len() - 1;
                self.index.insert(key, i);
                i
            }
        };
        self.input_procs.entry(ii).or_default().insert(pi);
        let p = &mut self.report.processes[pi];
        p.lines += 1;
        p.inputs.insert(iname.clone());
        match l.level {
            Level::Warn => {
                let text = cut(l.message.trim(), MAX_TEXT);
                let known = nccl_errors::lookup(&text)
                    .filter(|k| k.level == nccl_errors::Level::Warn && !k.foreign);
                let w = Warn {
                    text,
                    source: l.source.map(|s| cut(s, MAX_TEXT)),
                    input: iname,
                    line: lineno,
                    count: 1,
                    known,
                };
                match p.add_warning(w, self.warnings_kept < MAX_WARNINGS_KEPT) {
                    Some(true) => self.warnings_kept += 1,
                    Some(false) => {}
                    None => self.report.left_out.warnings += 1,
                }
            }
            Level::Info => info_line(p, l.message),
            Level::Trace | Level::Call => {}
        }
    }

    /// Count a line of a process beyond [`MAX_PROCESSES`], and the process once.
    fn leave_out(&mut self, key: &(String, u32)) {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        let lo = &mut self.report.left_out;
        lo.lines += 1;
        // A fixed hasher: the same process hashes alike for the whole run.
        let h = BuildHasherDefault::<DefaultHasher>::default().hash_one(key);
        if self.left_out_seen.contains(&h) {
            return;
        }
        if self.left_out_seen.len() < MAX_COUNTED {
            self.left_out_seen.insert(h);
            lo.processes += 1;
        } else {
            lo.processes_at_least = true;
        }
    }

    fn feed_other(&mut self, ii: usize, iname: &str, lineno: usize, line: &str) {
        if let Some((v, cuda)) = nccl_log::parse_version(line) {
            // Each distinct one once per input: 100 MB of repeated lines keep one entry (issue 22).
            let seen = self
                .bare_versions
                .iter()
                .any(|(i, x, c)| *i == ii && *x == v && *c == cuda);
            // Bounded: a hostile log of distinct version strings keeps at most 256.
            if !seen && self.bare_versions.len() < 256 {
                self.bare_versions.push((ii, v, cuda));
            }
            // A version line quotes no error.
            return;
        }
        let Some(k) = nccl_errors::lookup(line) else {
            return;
        };
        if k.level != nccl_errors::Level::Warn {
            return;
        }
        let text = line.trim();
        let text: String = text.chars().take(300).collect();
        if let Some(e) = self
            .report
            .quoted
            .iter_mut()
            .find(|e| e.known.map(|k| k.id) == Some(k.id))
        {
            e.count += 1;
            return;
        }
        self.report.quoted.push(Warn {
            text,
            source: None,
            input: iname.to_string(),
            line: lineno,
            count: 1,
            known: Some(k),
        });
    }

    /// Finish: tie bare version lines to the only process of their input, and make the job-wide findings.
    pub fn finish(mut self) -> Report {
        for (ii, v, cuda) in std::mem::take(&mut self.bare_versions) {
            let procs = self.input_procs.get(&ii);
            match procs {
                Some(ps) if ps.len() == 1 => {
                    if let Some(pi) = ps.iter().next() {
                        let p = &mut self.report.processes[*pi];
                        p.nccl_version.get_or_insert(v);
                        if p.cuda_version.is_none() {
                            p.cuda_version = cuda;
                        }
                    }
                }
                _ => {
                    self.report.versions_unattributed.insert(v);
                }
            }
        }
        let mut r = self.report;
        r.left_out.items = r.processes.iter().map(|p| p.items_left_out).sum();
        r.findings = analyse(&r);
        r
    }
}

/// One kind of INFO message: true when it recognised `msg` (and read it into the process).
type InfoReader = fn(&mut Process, &str) -> bool;

/// The kinds of INFO message `explain` reads, tried in order: the first that recognises a message reads
/// it.
const INFO_READERS: &[InfoReader] = &[
    read_bootstrap,
    read_version,
    read_net_socket,
    read_net_ib,
    read_fallback_note,
    read_network,
    read_plugin,
    read_channel,
    read_communicator,
    read_error_trail,
    read_setting,
];

/// Read what an INFO message says into the process (the first of [`INFO_READERS`] that recognises it).
fn info_line(p: &mut Process, msg: &str) {
    for read in INFO_READERS {
        if read(p, msg) {
            return;
        }
    }
}

/// The bootstrap socket or network device ([`nccl_log::parse_bootstrap`]).
fn read_bootstrap(p: &mut Process, msg: &str) -> bool {
    let Some(b) = nccl_log::parse_bootstrap(msg) else {
        return false;
    };
    match b {
        Bootstrap::Socket {
            ifname,
            addr,
            spaced,
        } => {
            p.bootstrap = Some(Endpoint {
                interface: cut(&ifname, MAX_TEXT),
                addr,
            });
            p.bootstrap_spaced = Some(spaced);
        }
        Bootstrap::Device(d) => p.bootstrap_device = Some(cut(&d, MAX_TEXT)),
    }
    true
}

/// `NCCL version X.Y.Z+cudaA.B` ([`nccl_log::parse_version`]).
fn read_version(p: &mut Process, msg: &str) -> bool {
    let Some((v, cuda)) = nccl_log::parse_version(msg) else {
        return false;
    };
    p.nccl_version = Some(cut(&v, MAX_TEXT));
    p.cuda_version = cuda.map(|c| cut(&c, MAX_TEXT));
    true
}

/// NET/Socket's interfaces ([`nccl_log::parse_net_socket`]), at most [`MAX_ITEMS`].
fn read_net_socket(p: &mut Process, msg: &str) -> bool {
    let Some(list) = nccl_log::parse_net_socket(msg) else {
        return false;
    };
    let n = list.len();
    p.net_socket = list
        .into_iter()
        .take(MAX_ITEMS)
        .map(|(interface, addr)| Endpoint {
            interface: cut(&interface, MAX_TEXT),
            addr,
        })
        .collect();
    p.items_left_out += n.saturating_sub(MAX_ITEMS);
    true
}

/// NET/IB's devices and out-of-band interface ([`nccl_log::parse_net_ib`]), at most [`MAX_ITEMS`] devices.
fn read_net_ib(p: &mut Process, msg: &str) -> bool {
    let Some(ib) = nccl_log::parse_net_ib(msg) else {
        return false;
    };
    p.items_left_out += ib.devices.len().saturating_sub(MAX_ITEMS);
    p.net_ib = ib
        .devices
        .iter()
        .take(MAX_ITEMS)
        .map(|d| cut(d, MAX_TEXT))
        .collect();
    p.ib_oob = ib.oob.map(|(interface, addr)| Endpoint { interface, addr });
    true
}

/// A fallback NCCL logs at INFO (a knowledge-base entry of level INFO; `ib-no-device` also sets
/// [`Process::ib_none`]).
fn read_fallback_note(p: &mut Process, msg: &str) -> bool {
    let Some(k) = nccl_errors::lookup(msg).filter(|k| k.level == nccl_errors::Level::Info) else {
        return false;
    };
    if k.id == "ib-no-device" {
        p.ib_none = true;
    }
    p.notes.insert(k.id);
    true
}

/// The network NCCL uses (src/init.cc "Using network %s"; 2.27.7 src/plugin/net.cc "Assigned NET plugin %s
/// to comm").
fn read_network(p: &mut Process, msg: &str) -> bool {
    let name = msg.strip_prefix("Using network ").or_else(|| {
        msg.strip_prefix("Assigned NET plugin ")
            .and_then(|r| r.strip_suffix(" to comm"))
    });
    let Some(n) = name else {
        return false;
    };
    p.network = Some(cut(n.trim(), MAX_TEXT));
    true
}

/// The network plugin (2.21.5 src/net.cc "NET/Plugin: Loaded net plugin %s (v%d)" / "Using internal
/// network plugin."; 2.27.7 "Successfully loaded external plugin %s").
fn read_plugin(p: &mut Process, msg: &str) -> bool {
    if let Some(rest) = msg.strip_prefix("NET/Plugin: Loaded net plugin ") {
        let name = rest.rsplit_once(" (v").map(|(n, _)| n).unwrap_or(rest);
        p.plugin = Some(cut(name.trim(), MAX_TEXT));
        return true;
    }
    if let Some(rest) = msg.strip_prefix("Successfully loaded external plugin ") {
        p.plugin = Some(cut(rest.trim(), MAX_TEXT));
        return true;
    }
    if msg.starts_with("NET/Plugin: Using internal net")
        || msg.contains("Using internal net plugin")
        || msg.contains("Using internal network plugin")
    {
        p.plugin.get_or_insert_with(|| "internal".to_string());
        return true;
    }
    false
}

/// A channel's transport (src/transport/net.cc, p2p.cc, shm.cc: "Channel %02d… via NET/%s/%d…", "via
/// P2P/…", "via SHM/…"): `NET/IB`, `P2P/IPC`, `SHM`, at most [`MAX_ITEMS`].
fn read_channel(p: &mut Process, msg: &str) -> bool {
    if !msg.starts_with("Channel ") {
        return false;
    }
    if let Some((_, via)) = msg.split_once(" via ") {
        let tok = via.split_whitespace().next().unwrap_or("");
        let parts: Vec<&str> = tok.split('/').collect();
        let t = match parts.as_slice() {
            ["SHM", ..] => "SHM".to_string(),
            [a, b, ..] => format!("{a}/{b}"),
            [a] => a.to_string(),
            [] => String::new(),
        };
        if !t.is_empty() && !p.transports.contains(&t) && p.room(p.transports.len()) {
            p.transports.insert(cut(&t, MAX_TEXT));
        }
    }
    true
}

/// A communicator (src/init.cc: "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d";
/// "… Init COMPLETE"): its rank, size and node count.
fn read_communicator(p: &mut Process, msg: &str) -> bool {
    if !(msg.starts_with("comm ") || msg.contains("Init COMPLETE")) {
        return false;
    }
    let words: Vec<&str> = msg.split_whitespace().collect();
    let after = |key: &str| -> Option<u32> {
        words
            .iter()
            .position(|w| *w == key)
            .and_then(|i| words.get(i + 1))
            .and_then(|v| v.parse().ok())
    };
    if let Some(r) = after("rank") {
        if p.ranks.contains(&r) || p.room(p.ranks.len()) {
            p.ranks.insert(r);
        }
    }
    if let Some(n) = after("nRanks").or_else(|| after("nranks")) {
        p.nranks = Some(n);
    }
    if let Some(n) = after("nNodes") {
        p.nnodes = Some(n);
    }
    if msg.contains("Init COMPLETE") {
        p.init_complete = true;
    }
    true
}

/// The error trail (src/include/checks.h, NCCLCHECK: "%s:%d -> %d"; from 2.30 "%s:%d (%s) -> %d", the
/// function named, measured with the 2.30.7 wheel): the last one is what the call returned.
fn read_error_trail(p: &mut Process, msg: &str) -> bool {
    let Some((at, code)) = msg.rsplit_once(" -> ") else {
        return false;
    };
    let at = match at.split_once(' ') {
        Some((src, func))
            if func.starts_with('(') && func.ends_with(')') && !func.contains(' ') =>
        {
            src
        }
        _ => at,
    };
    if let (Some((_, line)), Ok(code)) = (at.rsplit_once(':'), code.trim().parse::<i32>()) {
        if !at.contains(' ') && line.bytes().all(|b| b.is_ascii_digit()) {
            p.returned = Some(code);
            return true;
        }
    }
    false
}

/// A setting NCCL read (src/misc/param.cc and callers: "%s set by environment to %s", ints with a final
/// '.'), at most [`MAX_ITEMS`].
fn read_setting(p: &mut Process, msg: &str) -> bool {
    let Some((name, value)) = msg.split_once(" set by environment to ") else {
        return false;
    };
    if !name.starts_with("NCCL_") || name.contains(' ') {
        return false;
    }
    let v = value.trim();
    let v = match v.strip_suffix('.') {
        Some(n) if n.parse::<i64>().is_ok() => n,
        _ => v,
    };
    if p.env.contains_key(name) || p.room(p.env.len()) {
        p.env.insert(cut(name, MAX_TEXT), cut(v, MAX_TEXT));
    }
    true
}

/// Address blocks whose members do not normally route to each other's: RFC 1918 blocks, shared address
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
    r: &'a Report,
    /// Its processes, in order of their first line.
    ps: Vec<&'a Process>,
    /// More than one host, or NCCL counted more than one node (`nNodes` of the communicator line).
    multi_host: bool,
    /// The processes that logged a bootstrap socket (interface and address).
    with_boot: Vec<&'a Process>,
}

impl<'a> Job<'a> {
    fn new(r: &'a Report) -> Self {
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
fn desc(p: &Process) -> String {
    p.bootstrap
        .as_ref()
        .map(|b| format!("{} on {} {}", p.name(), b.interface, b.addr))
        .unwrap_or_else(|| p.name())
}

/// [`desc`] of each process, joined with `, `.
fn descs(ps: &[&Process]) -> String {
    ps.iter().map(|p| desc(p)).collect::<Vec<_>>().join(", ")
}

/// One job-wide check of [`analyse`]: it appends its findings.
type Check = fn(&Job, &mut Vec<Finding>);

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
pub fn analyse(r: &Report) -> Vec<Finding> {
    let job = Job::new(r);
    let mut out: Vec<Finding> = Vec::new();
    for check in CHECKS {
        check(&job, &mut out);
    }
    out
}

/// `no-nccl-lines`: the input holds no line with NCCL's prefix.
fn no_nccl_lines(job: &Job, out: &mut Vec<Finding>) {
    if job.ps.is_empty() {
        out.push(Finding {
            code: "no-nccl-lines",
            severity: Severity::Warn,
            message: "no line with NCCL's prefix (host:pid:tid [dev] NCCL INFO|WARN) in the input".into(),
            remedy: "rerun the job with NCCLENV_DEBUG=1 (or NCCL_DEBUG=INFO) and give ncclenv explain NCCL's files or the job's log".into(),
            processes: vec![],
            known: None,
        });
    }
}

/// `nccl-warn`: NCCL's own errors, one finding per known entry (or distinct unknown text), naming the
/// processes that logged it.
fn nccl_warnings(job: &Job, out: &mut Vec<Finding>) {
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
        out.push(Finding {
            code: "nccl-warn",
            severity: Severity::Warn,
            message: format!("{}: NCCL WARN {}{at}{cause}", procs.join(", "), w.text),
            remedy,
            processes: procs,
            known: w.known.map(|k| k.id),
        });
    }
}

/// `error-quoted`: known errors found outside NCCL's lines (Gloo's, or NCCL's text quoted by a framework).
fn errors_quoted(job: &Job, out: &mut Vec<Finding>) {
    for q in &job.r.quoted {
        let Some(k) = q.known else { continue };
        out.push(Finding {
            code: "error-quoted",
            severity: Severity::Warn,
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
fn info_fallbacks(job: &Job, out: &mut Vec<Finding>) {
    let mut notes: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for p in &job.ps {
        for id in &p.notes {
            notes.entry(id).or_default().push(p.name());
        }
    }
    for (id, procs) in notes {
        if let Some(k) = nccl_errors::by_id(id) {
            out.push(Finding {
                code: "nccl-info",
                severity: Severity::Info,
                message: format!("{}: {}: {}", procs.join(", "), k.message, k.cause),
                remedy: k.remedy.to_string(),
                processes: procs,
                known: Some(k.id),
            });
        }
    }
}

/// `bootstrap-not-logged`: processes with neither a bootstrap line nor a WARN.
fn bootstrap_not_logged(job: &Job, out: &mut Vec<Finding>) {
    let silent: Vec<&Process> = job
        .ps
        .iter()
        .copied()
        .filter(|p| p.bootstrap.is_none() && p.bootstrap_device.is_none() && p.warnings.is_empty())
        .collect();
    if !silent.is_empty() {
        out.push(Finding {
            code: "bootstrap-not-logged",
            severity: Severity::Info,
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
fn bootstrap_family_mixed(job: &Job, out: &mut Vec<Finding>) {
    let v4 = job.booting_on(IpAddr::is_ipv4);
    let v6 = job.booting_on(IpAddr::is_ipv6);
    if !v4.is_empty() && !v6.is_empty() {
        out.push(Finding {
            code: "bootstrap-family-mixed",
            severity: Severity::Warn,
            message: format!(
                "bootstraps in both families: IPv4 ({}), IPv6 ({}); ranks of one job must reach each other in one family",
                descs(&v4),
                descs(&v6)
            ),
            remedy: "set the same NCCL_SOCKET_FAMILY (AF_INET or AF_INET6) for every rank, or let ncclenv set it from the interface that routes to the master".into(),
            processes: names(&job.with_boot),
            known: None,
        });
    }
}

/// `bootstrap-loopback`: a loopback bootstrap in a multi-host job.
fn bootstrap_loopback(job: &Job, out: &mut Vec<Finding>) {
    if !job.multi_host {
        return;
    }
    let lo = job.booting_on(IpAddr::is_loopback);
    if !lo.is_empty() {
        out.push(Finding {
            code: "bootstrap-loopback",
            severity: Severity::Warn,
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
fn bootstrap_link_local(job: &Job, out: &mut Vec<Finding>) {
    if !job.multi_host {
        return;
    }
    let ll = job.booting_on(crate::snapshot::is_link_local_ip);
    if !ll.is_empty() {
        out.push(Finding {
            code: "bootstrap-link-local",
            severity: Severity::Warn,
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
fn bootstrap_address_shared(job: &Job, out: &mut Vec<Finding>) {
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
            out.push(Finding {
                code: "bootstrap-address-shared",
                severity: Severity::Warn,
                message: format!(
                    "{} hosts bootstrap on the same address {addr} ({}): each is a private address behind NAT (a container bridge), the others cannot reach it",
                    hs.len(),
                    descs(&owners)
                ),
                remedy: "run the containers with --network=host (or a routed pod network) and let ncclenv choose the uplink".into(),
                processes: names(&owners),
                known: None,
            });
        }
    }
}

/// `bootstrap-networks-differ`: the hosts of a multi-host job bootstrap in different address blocks
/// ([`block`]) of one family.
fn bootstrap_networks_differ(job: &Job, out: &mut Vec<Finding>) {
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
        out.push(Finding {
            code: "bootstrap-networks-differ",
            severity: Severity::Warn,
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
fn nccl_versions_differ(job: &Job, out: &mut Vec<Finding>) {
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
        out.push(Finding {
            code: "nccl-versions-differ",
            severity: Severity::Warn,
            message: msg,
            remedy: "use one NCCL version on every node and in every image (ncclenv doctor lists the libnccl files a command can load)".into(),
            processes: names(ps),
            known: None,
        });
    }
}

/// `net-transport-mixed`: InfiniBand/RoCE on some processes, sockets on others ([`Process::net_kind`]).
fn net_transport_mixed(job: &Job, out: &mut Vec<Finding>) {
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
        out.push(Finding {
            code: "net-transport-mixed",
            severity: Severity::Warn,
            message: format!(
                "InfiniBand/RoCE on {} but sockets on {}: the job runs at the sockets' speed, or fails to connect",
                names(&ib).join(", "),
                names(&sock).join(", ")
            ),
            remedy: "give every node the same RDMA access (--device=/dev/infiniband --cap-add=IPC_LOCK --ulimit memlock=-1), or set NCCL_IB_DISABLE=1 everywhere".into(),
            processes: names(ps),
            known: None,
        });
    }
}

/// Compare the processes of this host in the report with ncclenv's decision here (see [`Local`]), adding
/// `local-choice-differs` when NCCL bootstrapped elsewhere. Does nothing when no process ran on this host.
pub fn compare_local(r: &mut Report, local: Local) {
    let here: Vec<&Process> = r
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
            r.findings.push(Finding {
                code: "local-choice-differs",
                severity: Severity::Warn,
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
    r.local = Some(LocalView {
        local,
        processes: procs,
        nccl,
        agrees,
    });
}

/// Exit status: 1 when a finding is a warning, else 0.
pub fn exit_code(r: &Report) -> u8 {
    if r.findings.iter().any(|f| f.severity == Severity::Warn) {
        1
    } else {
        0
    }
}

/// The other hosts' bootstrap addresses (for the comparison's stand-in peer), in order.
pub fn other_bootstraps(r: &Report, host: &str) -> Vec<IpAddr> {
    let mut v: Vec<IpAddr> = Vec::new();
    for p in r.processes.iter().filter(|p| p.host != host) {
        if let Some(b) = &p.bootstrap {
            if !v.contains(&b.addr) {
                v.push(b.addr);
            }
        }
    }
    v
}

/// Read `reader` line by line into `ex`, at most [`MAX_LINE`] bytes per line (the rest of a longer line is
/// skipped), decoding lossily. Returns the I/O error that stopped it, if any.
pub fn read_lines<R: BufRead>(mut reader: R, ex: &mut Explainer) -> Option<std::io::Error> {
    let mut line: Vec<u8> = Vec::new();
    let mut skipping = false;
    loop {
        let buf = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Some(e),
        };
        if buf.is_empty() {
            if !line.is_empty() {
                ex.feed(&String::from_utf8_lossy(&line));
            }
            return None;
        }
        let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !skipping {
            let room = MAX_LINE.saturating_sub(line.len());
            line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if chunk.len() > room {
                skipping = true;
            }
        }
        let used = done.unwrap_or(buf.len());
        reader.consume(used);
        if done.is_some() {
            ex.feed(&String::from_utf8_lossy(&line));
            line.clear();
            skipping = false;
        }
    }
}

/// The word `ncclenv explain` puts before its own arguments when it execs the helper `ncclenv-check`, which
/// then calls [`main_in_helper`].
pub const HELPER_WORD: &str = "__ncclenv-explain";

/// `ncclenv-check __ncclenv-explain ARGS…`: parse ARGS as `ncclenv` does (they are `ncclenv`'s own), run
/// `explain`, return the exit status (0 nothing wrong, 1 something wrong, 2 usage error).
pub fn main_in_helper(args: &[OsString], vars: Vec<(OsString, OsString)>) -> u8 {
    match crate::cli::parse(args, vars.iter().cloned()) {
        Ok(crate::cli::Cli {
            mode: crate::cli::Mode::Explain { json, files },
            config,
        }) => run(&config, json, &files, &vars),
        Ok(_) => {
            err_line("ncclenv-check: __ncclenv-explain is for ncclenv explain only");
            2
        }
        Err(e) => {
            err_line(&format!("ncclenv: {} (see ncclenv --help)", e.0));
            2
        }
    }
}

/// `ncclenv explain`: read the logs (stdin when none, or `-`), compare with this node's decision when the log
/// has processes of this host, print, exit 0 (nothing wrong) or 1. An input that cannot be opened is a usage
/// error (2).
fn run(
    cfg: &crate::config::Config,
    json: bool,
    files: &[std::path::PathBuf],
    vars: &[(OsString, OsString)],
) -> u8 {
    let mut ex = Explainer::new();
    let stdin_only = [std::path::PathBuf::from("-")];
    let files = if files.is_empty() {
        &stdin_only[..]
    } else {
        files
    };
    for f in files {
        let name = f.display().to_string();
        ex.start_input(&name);
        let err = if name == "-" {
            read_lines(std::io::stdin().lock(), &mut ex)
        } else if f.is_dir() {
            // open(2) succeeds on a directory and only the first read fails (EISDIR): say it here, as the
            // usage error it is.
            err_line(&format!(
                "ncclenv: explain: {name} is a directory; give the log files themselves (e.g. {}/*.log) or \
                 - for stdin (see ncclenv --help)",
                name.trim_end_matches('/')
            ));
            return 2;
        } else {
            match std::fs::File::open(f) {
                Ok(file) => read_lines(std::io::BufReader::new(file), &mut ex),
                Err(e) => {
                    err_line(&format!(
                        "ncclenv: explain: cannot open {name}: {e} (see ncclenv --help)"
                    ));
                    return 2;
                }
            }
        };
        if let Some(e) = err {
            ex.input_error(format!("read stopped: {e}"));
        }
    }
    let mut rep = ex.finish();
    // NCCL's host name: gethostname up to the first '.' (getHostName, src/misc/utils.cc).
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = host.trim().split('.').next().unwrap_or("").to_string();
    if !host.is_empty() && rep.processes.iter().any(|p| p.host == host) {
        let mut cfg = cfg.clone();
        cfg.debug = false;
        let mut peer = None;
        if cfg.peer.is_none() {
            // Another host's bootstrap address stands in for the master: the route to it decides.
            if let Some(a) = other_bootstraps(&rep, &host).first() {
                cfg.peer = Some(a.to_string());
                cfg.peer_source = Some("another host's bootstrap address in the log".into());
                peer = Some(format!("{a} (another host's bootstrap address in the log)"));
            }
        } else {
            peer = cfg.peer.clone().map(|p| {
                format!(
                    "{p} ({})",
                    cfg.peer_source.as_deref().unwrap_or("--peer/NCCLENV_PEER")
                )
            });
        }
        let snap = crate::probe::collect(&cfg, &[], vars, crate::probe::Depth::Start);
        let plan = crate::decide::decide(&snap, &cfg);
        let choice = plan
            .choice
            .as_ref()
            .filter(|_| !plan.hands_off)
            .map(|c| (c.ifname.clone(), c.addr, c.how.clone()));
        let no_choice = choice.is_none().then(|| {
            plan.warnings
                .first()
                .map(|w| format!("{} [{}]", w.message, w.code))
                .unwrap_or_else(|| "ncclenv would leave the interface to NCCL here".to_string())
        });
        compare_local(
            &mut rep,
            Local {
                host,
                choice,
                no_choice,
                peer,
            },
        );
    }
    // What the log holds is foreign text: escaped so that it cannot act on a terminal (crate::text).
    if json {
        let j = render_json(&rep).to_string();
        out(&format!("{}\n", crate::text::escape_json(&j)));
    } else {
        out(&crate::text::escape_lines(&render_text(&rep)));
    }
    exit_code(&rep)
}

/// Write to stdout, ignoring errors (a reader that went away must not become a panic).
fn out(text: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes());
    let _ = o.flush();
}

/// One line to stderr, ignoring errors.
fn err_line(text: &str) {
    use std::io::Write;
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(text.as_bytes());
    let _ = e.write_all(b"\n");
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
pub fn render_json(r: &Report) -> Value {
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
                "code": f.code,
                "severity": match f.severity { Severity::Info => "info", Severity::Warn => "warn" },
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
pub fn render_text(r: &Report) -> String {
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
fn text_summary(o: &mut String, r: &Report) {
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
fn text_findings(o: &mut String, r: &Report) {
    use std::fmt::Write as _;
    let _ = writeln!(o);
    let _ = writeln!(o, "Findings");
    if r.findings.is_empty() {
        let _ = writeln!(o, "  none");
    }
    for f in &r.findings {
        let sev = match f.severity {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 22, item 8: what a hostile log makes a process keep is bounded and counted.
    #[test]
    fn what_a_process_keeps_is_bounded_and_counted() {
        let mut ex = Explainer::new();
        for i in 0..MAX_ITEMS + 10 {
            ex.feed(&format!(
                "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via T{i}/x"
            ));
            ex.feed(&format!(
                "h:1:1 [0] NCCL INFO NCCL_X{i} set by environment to {}",
                "v".repeat(5000)
            ));
        }
        for i in 0..MAX_WARNINGS + 5 {
            ex.feed(&format!(
                "h:1:1 [0] a.cc:1 NCCL WARN w{i} {}",
                "x".repeat(5000)
            ));
        }
        ex.feed("h:1:1 [0] a.cc:1 NCCL WARN w0 again");
        let r = ex.finish();
        let p = &r.processes[0];
        assert_eq!(p.transports.len(), MAX_ITEMS);
        assert_eq!(p.env.len(), MAX_ITEMS);
        assert!(p.env.values().all(|v| v.len() <= MAX_TEXT));
        assert_eq!(p.warnings.len(), MAX_WARNINGS);
        assert!(p.warnings.iter().all(|w| w.text.len() <= MAX_TEXT));
        assert_eq!(r.left_out.items, 20);
        assert_eq!(r.left_out.warnings, 6);
        let t = left_out_text(&r.left_out).expect("said");
        assert!(
            t.contains("6 more distinct WARN") && t.contains("20 more setting"),
            "{t}"
        );
        assert_eq!(left_out_text(&LeftOut::default()), None);
    }

    fn report(inputs: &[(&str, &str)]) -> Report {
        let mut ex = Explainer::new();
        for (name, text) in inputs {
            ex.start_input(name);
            for l in text.lines() {
                ex.feed(l);
            }
        }
        ex.finish()
    }

    fn codes(r: &Report) -> Vec<&'static str> {
        r.findings.iter().map(|f| f.code).collect()
    }

    // Lines below are written after NCCL's format strings (v2.27.7-1 unless noted): src/debug.cc prefix,
    // src/init.cc "NCCL version %s" / "Using network %s" / "comm %p rank %d nRanks %d nNodes %d localRanks %d
    // localRank %d MNNVL %d", src/bootstrap.cc "Bootstrap: Using%s" (2.21.5: "Bootstrap : Using%s"),
    // src/transport/net_socket.cc "NET/Socket : Using%s" with " [%d]%s:%s", src/transport/net_ib.cc
    // "NET/IB : Using%s %s; OOB %s:%s" with " [%d]%s:%d/%s" and "NET/IB : No device found.",
    // src/transport/net.cc "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s".
    const NODE_A_IB: &str = "\
a1:10:10 [0] NCCL INFO NCCL version 2.27.7+cuda12.9
a1:10:10 [0] NCCL INFO Bootstrap: Using eth0:10.1.0.11<0>
a1:10:10 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB ib0:10.30.0.11<0>
a1:10:10 [0] NCCL INFO Using network IB
a1:10:10 [0] NCCL INFO comm 0x55d0c8e0 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0
a1:10:10 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0
";
    const NODE_B_SOCKET: &str = "\
b1:20:20 [0] NCCL INFO NCCL version 2.27.7+cuda12.9
b1:20:20 [0] NCCL INFO Bootstrap: Using eth0:10.1.0.12<0>
b1:20:20 [0] NCCL INFO NET/IB : No device found.
b1:20:20 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.0.12<0>
b1:20:20 [0] NCCL INFO Using network Socket
b1:20:20 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/Socket/0
";

    #[test]
    fn ib_on_one_rank_and_sockets_on_the_other() {
        let r = report(&[("a.log", NODE_A_IB), ("b.log", NODE_B_SOCKET)]);
        assert_eq!(r.processes.len(), 2);
        let a = &r.processes[0];
        assert_eq!(a.nccl_version.as_deref(), Some("2.27.7"));
        assert_eq!(a.cuda_version.as_deref(), Some("12.9"));
        assert_eq!(a.net_ib, vec!["mlx5_0:1/IB"]);
        assert_eq!(a.net_kind().as_deref(), Some("IB"));
        assert_eq!(a.nnodes, Some(2));
        assert!(a.transports.contains("NET/IB"));
        assert_eq!(r.processes[1].net_kind().as_deref(), Some("Socket"));
        let c = codes(&r);
        assert!(c.contains(&"net-transport-mixed"), "{c:?}");
        assert!(c.contains(&"nccl-info"), "{c:?}");
        assert!(!c.contains(&"nccl-versions-differ"), "{c:?}");
        assert!(!c.contains(&"bootstrap-networks-differ"), "{c:?}");
        assert_eq!(exit_code(&r), 1);
        // Both on sockets: no mix.
        let r = report(&[
            ("b.log", NODE_B_SOCKET),
            ("c.log", &NODE_B_SOCKET.replace("b1:20:20", "c1:30:30")),
        ]);
        assert!(!codes(&r).contains(&"net-transport-mixed"));
    }

    #[test]
    fn versions_differ_explicitly_or_by_the_bootstrap_spelling() {
        let old = "x1:5:5 [0] NCCL INFO Bootstrap : Using eth0:10.1.0.13<0>\n";
        let r = report(&[("a.log", NODE_A_IB), ("x.log", old)]);
        assert!(
            codes(&r).contains(&"nccl-versions-differ"),
            "{:?}",
            codes(&r)
        );
        let f = r
            .findings
            .iter()
            .find(|f| f.code == "nccl-versions-differ")
            .expect("finding");
        assert!(
            f.message.contains("≤ 2.23") && f.message.contains("2.27.7"),
            "{}",
            f.message
        );
        // A bare version line (2.21.5 prints it without a prefix) belongs to the only process of its input.
        let r = report(&[("x.log", &format!("NCCL version 2.21.5+cuda12.4\n{old}"))]);
        assert_eq!(r.processes[0].nccl_version.as_deref(), Some("2.21.5"));
        assert!(!codes(&r).contains(&"nccl-versions-differ"));
        let r = report(&[("a.log", NODE_A_IB), ("b.log", NODE_B_SOCKET)]);
        assert!(!codes(&r).contains(&"nccl-versions-differ"));
    }

    #[test]
    fn bootstrap_addresses_across_hosts() {
        let line =
            |h: &str, a: &str| format!("{h}:1:1 [0] NCCL INFO Bootstrap: Using eth0:{a}<0>\n");
        let r = report(&[(
            "j.log",
            &(line("n1", "172.17.0.2") + &line("n2", "172.17.0.2")),
        )]);
        let c = codes(&r);
        assert!(c.contains(&"bootstrap-address-shared"), "{c:?}");
        assert!(!c.contains(&"bootstrap-networks-differ"), "{c:?}");
        let r = report(&[(
            "j.log",
            &(line("n1", "10.1.0.11") + &line("n2", "172.18.0.1")),
        )]);
        assert!(codes(&r).contains(&"bootstrap-networks-differ"));
        let r = report(&[(
            "j.log",
            &(line("n1", "10.1.0.11") + &line("n2", "10.2.0.12")),
        )]);
        assert!(codes(&r).is_empty(), "{:?}", codes(&r));
        let r = report(&[(
            "j.log",
            &(line("n1", "10.1.0.11") + &line("n2", "fd00::12")),
        )]);
        assert!(codes(&r).contains(&"bootstrap-family-mixed"));
        let r = report(&[(
            "j.log",
            &(line("n1", "10.1.0.11") + &line("n2", "127.0.0.1")),
        )]);
        assert!(codes(&r).contains(&"bootstrap-loopback"));
        let r = report(&[(
            "j.log",
            &(line("n1", "10.1.0.11") + &line("n2", "169.254.3.4")),
        )]);
        assert!(codes(&r).contains(&"bootstrap-link-local"));
        // One host: loopback is fine (single node).
        let r = report(&[(
            "j.log",
            &(line("n1", "127.0.0.1") + &line("n1", "127.0.0.1")),
        )]);
        assert!(codes(&r).is_empty(), "{:?}", codes(&r));
    }

    #[test]
    fn warnings_are_explained_and_counted_and_combined_logs_work() {
        // A job log: launcher lines, a rank prefix, NCCL's lines and a framework's exception quoting NCCL.
        let log = "\
LAUNCH INFO 2026-11-30 starting 2 workers
[default0]:n1:7:9 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth9
[default0]:

[default0]:[2026-11-30 16:18:07] n1:7:9 [0] bootstrap.cc:115 NCCL WARN Bootstrap : no socket interface found
[default0]:[2026-11-30 16:18:08] n1:7:9 [0] bootstrap.cc:115 NCCL WARN Bootstrap : no socket interface found
[default0]:RuntimeError: ... Last error: Bootstrap : no socket interface found
Traceback: gloo: Unable to find address for: ^lo
";
        let log = format!("{log}[default0]:n1:7:9 [0] NCCL INFO init.cc:84 -> 5\n");
        let r = report(&[("-", &log)]);
        assert_eq!(r.processes[0].returned, Some(5));
        assert_eq!(r.processes.len(), 1);
        let p = &r.processes[0];
        assert_eq!(
            p.env.get("NCCL_SOCKET_IFNAME").map(String::as_str),
            Some("eth9")
        );
        assert_eq!(p.warnings.len(), 1);
        assert_eq!(p.warnings[0].count, 2);
        assert_eq!(
            p.warnings[0].known.map(|k| k.id),
            Some("no-socket-interface")
        );
        assert_eq!(p.warnings[0].source.as_deref(), Some("bootstrap.cc:115"));
        let c = codes(&r);
        assert!(
            c.contains(&"nccl-warn") && c.contains(&"error-quoted"),
            "{c:?}"
        );
        let quoted: Vec<&str> = r
            .quoted
            .iter()
            .filter_map(|q| q.known.map(|k| k.id))
            .collect();
        assert_eq!(quoted, vec!["no-socket-interface", "gloo-no-address"]);
        assert!(!c.contains(&"bootstrap-not-logged"), "{c:?}");
        let text = render_text(&r);
        assert!(text.contains("cause:") && text.contains("(×2)"), "{text}");
        let j = render_json(&r);
        assert_eq!(
            j["processes"][0]["warnings"][0]["known"]["id"],
            "no-socket-interface"
        );
        assert_eq!(j["exit"], 1);
    }

    #[test]
    fn nothing_from_nccl_and_nothing_wrong() {
        let r = report(&[("x", "hello\nworld\n")]);
        assert_eq!(codes(&r), vec!["no-nccl-lines"]);
        let r = report(&[(
            "x",
            "n1:1:1 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.2<0>\n",
        )]);
        assert!(r.findings.is_empty());
        assert_eq!(exit_code(&r), 0);
        let r = report(&[(
            "x",
            "n1:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0\n",
        )]);
        assert_eq!(codes(&r), vec!["bootstrap-not-logged"]);
        assert_eq!(exit_code(&r), 0);
    }

    #[test]
    fn local_comparison() {
        let log = "vm:1:1 [0] NCCL INFO Bootstrap: Using docker0:172.17.0.1<0>\nother:2:2 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.3<0>\n";
        let local = |ifname: &str| Local {
            host: "vm".into(),
            choice: Some((
                ifname.into(),
                "10.0.0.2".parse().ok(),
                "default route (metric 0)".into(),
            )),
            no_choice: None,
            peer: None,
        };
        let mut r = report(&[("x", log)]);
        assert_eq!(
            other_bootstraps(&r, "vm"),
            vec!["10.0.0.3".parse::<IpAddr>().expect("ip")]
        );
        compare_local(&mut r, local("eth0"));
        let f = r
            .findings
            .iter()
            .find(|f| f.code == "local-choice-differs")
            .expect("differs");
        assert!(
            f.message.contains("docker0") && f.message.contains("eth0"),
            "{}",
            f.message
        );
        assert_eq!(r.local.as_ref().and_then(|l| l.agrees), Some(false));
        let mut r = report(&[("x", log)]);
        compare_local(&mut r, local("docker0"));
        assert!(!codes(&r).contains(&"local-choice-differs"));
        let mut r = report(&[("x", log)]);
        compare_local(
            &mut r,
            Local {
                host: "elsewhere".into(),
                ..local("eth0")
            },
        );
        assert!(r.local.is_none());
    }

    #[test]
    fn long_lines_are_cut_and_non_utf8_survives() {
        let mut data = vec![b'x'; MAX_LINE + 10];
        data.push(b'\n');
        data.extend_from_slice(
            b"n1:1:1 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.2<0>\n\xff\xfe\n",
        );
        let mut ex = Explainer::new();
        ex.start_input("bin");
        assert!(read_lines(std::io::Cursor::new(data), &mut ex).is_none());
        let r = ex.finish();
        assert_eq!(r.inputs[0].lines, 3);
        assert_eq!(r.processes.len(), 1);
    }
}
