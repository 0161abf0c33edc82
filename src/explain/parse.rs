//! Reading NCCL's lines into processes: the [`Explainer`] fed line by line ([`read_lines`] for a reader),
//! and one reader per kind of INFO message (`INFO_READERS`). Everything kept is bounded
//! ([`super::MAX_PROCESSES`] and the other `MAX_*`).

use super::{
    cut, Endpoint, Explanation, Input, Process, Warn, MAX_COUNTED, MAX_ITEMS, MAX_LINE,
    MAX_PROCESSES, MAX_TEXT, MAX_WARNINGS, MAX_WARNINGS_KEPT,
};
use crate::nccl_errors;
use crate::nccl_log::{self, Bootstrap, Level};
use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;

impl Process {
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

/// Feeds lines, builds the [`Explanation`].
#[derive(Debug, Default)]
pub struct Explainer {
    report: Explanation,
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
        let held = self.index.get(&key).copied();
        let pi = match held {
            Some(i) if !(l.level == Level::Info && self.starts_another(i, l.message)) => i,
            _ if self.report.processes.len() >= MAX_PROCESSES => {
                self.leave_out(&key);
                return;
            }
            _ => {
                let again = held.map_or(0, |i| self.report.processes[i].again + 1);
                self.report.processes.push(Process {
                    host: key.0.clone(),
                    pid: l.pid,
                    again,
                    ..Process::default()
                });
                let i = self.report.processes.len() - 1;
                self.index.insert(key, i);
                i
            }
        };
        self.input_procs.entry(ii).or_default().insert(pi);
        let process = &mut self.report.processes[pi];
        process.lines += 1;
        process.inputs.insert(iname.clone());
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
                match process.add_warning(w, self.warnings_kept < MAX_WARNINGS_KEPT) {
                    Some(true) => self.warnings_kept += 1,
                    Some(false) => {}
                    None => self.report.left_out.warnings += 1,
                }
            }
            Level::Info => info_line(process, l.message),
            Level::Trace | Level::Call => {}
        }
    }

    /// Whether the INFO `message`, logged under the `host:pid` of process `i`, starts another process: it is
    /// an `NCCL version` line and `i` logged one already (NCCL logs it once per process, [`Process::again`]).
    fn starts_another(&self, i: usize, message: &str) -> bool {
        self.report.processes[i].nccl_version.is_some()
            && nccl_log::parse_version(message).is_some()
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
    pub fn finish(mut self) -> Explanation {
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
        r.findings = super::judge::analyse(&r);
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
fn info_line(process: &mut Process, msg: &str) {
    for read in INFO_READERS {
        if read(process, msg) {
            return;
        }
    }
}

/// The bootstrap socket or network device ([`nccl_log::parse_bootstrap`]).
fn read_bootstrap(process: &mut Process, msg: &str) -> bool {
    let Some(b) = nccl_log::parse_bootstrap(msg) else {
        return false;
    };
    match b {
        Bootstrap::Socket {
            ifname,
            addr,
            spaced,
        } => {
            process.bootstrap = Some(Endpoint {
                interface: cut(&ifname, MAX_TEXT),
                addr,
            });
            process.bootstrap_spaced = Some(spaced);
        }
        Bootstrap::Device(d) => process.bootstrap_device = Some(cut(&d, MAX_TEXT)),
    }
    true
}

/// `NCCL version X.Y.Z+cudaA.B` ([`nccl_log::parse_version`]).
fn read_version(process: &mut Process, msg: &str) -> bool {
    let Some((v, cuda)) = nccl_log::parse_version(msg) else {
        return false;
    };
    process.nccl_version = Some(cut(&v, MAX_TEXT));
    process.cuda_version = cuda.map(|c| cut(&c, MAX_TEXT));
    true
}

/// NET/Socket's interfaces ([`nccl_log::parse_net_socket`]), at most [`MAX_ITEMS`].
fn read_net_socket(process: &mut Process, msg: &str) -> bool {
    let Some(list) = nccl_log::parse_net_socket(msg) else {
        return false;
    };
    let n = list.len();
    process.net_socket = list
        .into_iter()
        .take(MAX_ITEMS)
        .map(|(interface, addr)| Endpoint {
            interface: cut(&interface, MAX_TEXT),
            addr,
        })
        .collect();
    process.items_left_out += n.saturating_sub(MAX_ITEMS);
    true
}

/// NET/IB's devices and out-of-band interface ([`nccl_log::parse_net_ib`]), at most [`MAX_ITEMS`] devices.
fn read_net_ib(process: &mut Process, msg: &str) -> bool {
    let Some(ib) = nccl_log::parse_net_ib(msg) else {
        return false;
    };
    process.items_left_out += ib.devices.len().saturating_sub(MAX_ITEMS);
    process.net_ib = ib
        .devices
        .iter()
        .take(MAX_ITEMS)
        .map(|d| cut(d, MAX_TEXT))
        .collect();
    process.ib_oob = ib.oob.map(|(interface, addr)| Endpoint { interface, addr });
    true
}

/// A fallback NCCL logs at INFO (a knowledge-base entry of level INFO; `ib-no-device` also sets
/// [`Process::ib_none`]).
fn read_fallback_note(process: &mut Process, msg: &str) -> bool {
    let Some(k) = nccl_errors::lookup(msg).filter(|k| k.level == nccl_errors::Level::Info) else {
        return false;
    };
    if k.id == "ib-no-device" {
        process.ib_none = true;
    }
    process.notes.insert(k.id);
    true
}

/// The network NCCL uses (src/init.cc "Using network %s"; 2.27.7 src/plugin/net.cc "Assigned NET plugin %s
/// to comm").
fn read_network(process: &mut Process, msg: &str) -> bool {
    let name = msg.strip_prefix("Using network ").or_else(|| {
        msg.strip_prefix("Assigned NET plugin ")
            .and_then(|r| r.strip_suffix(" to comm"))
    });
    let Some(n) = name else {
        return false;
    };
    process.network = Some(cut(n.trim(), MAX_TEXT));
    true
}

/// The network plugin (2.21.5 src/net.cc "NET/Plugin: Loaded net plugin %s (v%d)" / "Using internal
/// network plugin."; 2.27.7 "Successfully loaded external plugin %s").
fn read_plugin(process: &mut Process, msg: &str) -> bool {
    if let Some(rest) = msg.strip_prefix("NET/Plugin: Loaded net plugin ") {
        let name = rest.rsplit_once(" (v").map(|(n, _)| n).unwrap_or(rest);
        process.plugin = Some(cut(name.trim(), MAX_TEXT));
        return true;
    }
    if let Some(rest) = msg.strip_prefix("Successfully loaded external plugin ") {
        process.plugin = Some(cut(rest.trim(), MAX_TEXT));
        return true;
    }
    if msg.starts_with("NET/Plugin: Using internal net")
        || msg.contains("Using internal net plugin")
        || msg.contains("Using internal network plugin")
    {
        process.plugin.get_or_insert_with(|| "internal".to_string());
        return true;
    }
    false
}

/// A channel's transport (src/transport/net.cc, p2p.cc, shm.cc: "Channel %02d… via NET/%s/%d…", "via
/// P2P/…", "via SHM/…"): `NET/IB`, `P2P/IPC`, `SHM`, at most [`MAX_ITEMS`].
fn read_channel(process: &mut Process, msg: &str) -> bool {
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
        if !t.is_empty()
            && !process.transports.contains(&t)
            && process.room(process.transports.len())
        {
            process.transports.insert(cut(&t, MAX_TEXT));
        }
    }
    true
}

/// A communicator (src/init.cc: "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d";
/// "… Init COMPLETE"): its rank, size and node count.
fn read_communicator(process: &mut Process, msg: &str) -> bool {
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
        if process.ranks.contains(&r) || process.room(process.ranks.len()) {
            process.ranks.insert(r);
        }
    }
    if let Some(n) = after("nRanks").or_else(|| after("nranks")) {
        process.nranks = Some(n);
    }
    if let Some(n) = after("nNodes") {
        process.nnodes = Some(n);
    }
    if msg.contains("Init COMPLETE") {
        process.init_complete = true;
    }
    true
}

/// The error trail (src/include/checks.h, NCCLCHECK: "%s:%d -> %d"; from 2.30 "%s:%d (%s) -> %d", the
/// function named, measured with the 2.30.7 wheel): the last one is what the call returned.
fn read_error_trail(process: &mut Process, msg: &str) -> bool {
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
            process.returned = Some(code);
            return true;
        }
    }
    false
}

/// A setting NCCL read (src/misc/param.cc and callers: "%s set by environment to %s", ints with a final
/// '.'), at most [`MAX_ITEMS`].
fn read_setting(process: &mut Process, msg: &str) -> bool {
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
    if process.env.contains_key(name) || process.room(process.env.len()) {
        process.env.insert(cut(name, MAX_TEXT), cut(v, MAX_TEXT));
    }
    true
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
