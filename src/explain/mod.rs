//! `ncclenv explain`: read NCCL debug output (per-rank files, or a job's combined log with other lines mixed in)
//! and say, per process (`host:pid` from NCCL's line prefix), what NCCL did: its version, the bootstrap
//! interface and address, the interfaces NET/Socket uses, NET/IB's devices, the network and plugin, the
//! transports, the settings NCCL read, and every WARN line with its cause and remedy from
//! [`crate::nccl_errors`]; then what breaks jobs between processes (bootstraps in different families or
//! networks, loopback or link-local bootstraps in a multi-host log, the same address on two hosts, different
//! NCCL versions, IB on some ranks and sockets on others); and, run on a node of the job, how NCCL's choice there
//! compares with ncclenv's ([`compare_local`]). The JSON shape is documented in `docs/explain.md`.
//!
//! Everything here is pure: fed lines, it builds the [`Explanation`]. One concern per file: `parse.rs` (the
//! [`Explainer`] that reads lines into processes, bounded per line by [`read_lines`]), `judge.rs` (per process
//! and across ranks: [`analyse`], [`compare_local`]), `render.rs` (text and JSON), `codes.rs` (every finding's
//! [`Code`], the table of `docs/explain.md`). The shell that reads the inputs, probes and decides for this node
//! and prints is `src/bin/ncclenv-check/explain.rs`: it runs in the glibc helper `ncclenv-check`, which
//! `ncclenv explain` execs, so the log reader is not linked into the static entrypoint. Line formats:
//! [`crate::nccl_log`].

mod codes;
mod judge;
mod parse;
mod render;
#[cfg(test)]
mod tests;

pub use codes::Code;
pub use judge::{analyse, compare_local, exit_code, other_bootstraps};
pub use parse::{read_lines, Explainer};
pub use render::{left_out_text, render_json, render_text};

use crate::nccl_errors::KnownError;
use crate::plan::Severity;
use std::collections::{BTreeMap, BTreeSet};
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
    /// How many processes logged under the same `host:pid` before this one (0 for the first): NCCL prints
    /// its version once per process (`std::call_once(once, showVersion)` in `ncclCommInitRankDev`, src/init.cc,
    /// 2.30), so a second version line under one `host:pid` is another process, e.g. a second container with
    /// the same `--hostname` and PID 1.
    pub again: u32,
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
    /// `host:pid`, and `#N` after it for the Nth process under the same `host:pid` ([`Process::again`]).
    pub fn name(&self) -> String {
        match self.again {
            0 => format!("{}:{}", self.host, self.pid),
            n => format!("{}:{}#{}", self.host, self.pid, n + 1),
        }
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
}

/// One finding of `explain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnosis {
    /// Stable code, with its severity (`docs/explain.md`).
    pub code: Code,
    /// What was found.
    pub message: String,
    /// What to do.
    pub remedy: String,
    /// The processes concerned (`host:pid`).
    pub processes: Vec<String>,
    /// The knowledge-base entry, for NCCL errors.
    pub known: Option<&'static str>,
}

impl Diagnosis {
    /// Info or warn (warn makes the exit status 1): the severity of its [`Code`].
    pub fn severity(&self) -> Severity {
        self.code.severity()
    }
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
pub struct Explanation {
    /// The inputs, in order.
    pub inputs: Vec<Input>,
    /// Processes, in order of their first line.
    pub processes: Vec<Process>,
    /// Known errors found outside NCCL's lines (Gloo's, or NCCL's text quoted by a framework's exception).
    pub quoted: Vec<Warn>,
    /// `NCCL version …` lines that could not be tied to one process.
    pub versions_unattributed: BTreeSet<String>,
    /// Findings, job-wide first.
    pub findings: Vec<Diagnosis>,
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

/// The word `ncclenv explain` puts before its own arguments when it execs the helper `ncclenv-check`, whose
/// shell (`src/bin/ncclenv-check/explain.rs`) then runs `explain`.
pub const HELPER_WORD: &str = "__ncclenv-explain";
