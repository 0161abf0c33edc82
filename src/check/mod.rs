//! The check: prove the environment with the real NCCL library before the command runs.
//!
//! # Why a helper process
//! The entrypoint is fully static (musl) and cannot `dlopen`. The check therefore runs in a second, dynamically
//! linked binary of this crate, `ncclenv-check` (`src/bin/ncclenv-check.rs`), which loads libnccl and CUDA with
//! `libloading`. This module is the entrypoint side: std + nix only, no CUDA or NCCL is ever loaded into the
//! entrypoint's own process. It finds the helper (`cfg.check_helper`, else `NCCLENV_CHECK_HELPER`, else
//! `ncclenv-check` beside the running executable), runs it as a child in its own process group with the
//! command's final environment (`NCCL_COMM_ID` removed), reads its progress, and enforces the deadline.
//!
//! # Deadline and cleanup
//! `cfg.check_timeout_s` (default 60 s) bounds the whole check (with `NCCLENV_CHECK_REPAIR=1` on an allreduce,
//! the first attempt gets half of it and the retries share the rest, so that a hang still leaves time to
//! retry). On expiry, or when SIGINT/SIGTERM reaches the entrypoint meanwhile, the whole
//! process group (helper and rank processes) is killed with SIGKILL and reaped. While the check runs, the
//! entrypoint is a child subreaper (`PR_SET_CHILD_SUBREAPER`), so rank processes orphaned by the kill are
//! re-parented to it and reaped too; the previous setting is restored afterwards. A hang is reported as a hang,
//! with the step each rank was in and its likely causes.
//!
//! # Helper command line
//! ```text
//! ncclenv-check bootstrap                       ncclGetVersion + ncclGetUniqueId in this (throwaway) process
//! ncclenv-check allreduce [--gpus N] [--mib M]  one rank process per GPU, verified allreduce (default 2, 64)
//! ncclenv-check rank --rank R --gpus N --mib M [--nranks N]   internal: one rank (R>0 reads the id on stdin)
//! ncclenv-check --version | --help
//! ```
//! Variables read by the helper: `NCCLENV_NCCL_LIB` (path of libnccl to load first), `NCCLENV_CUDA_LIB`
//! (path of libcuda.so.1 or libcudart to load first), plus everything NCCL reads itself.
//!
//! # Helper ↔ entrypoint protocol
//! The helper writes one JSON object per line on its standard output ([`HelperMsg`], `ev` says which kind).
//! Anything NCCL prints itself (`NCCL_DEBUG=INFO` writes to stdout) is redirected to the helper's standard error,
//! so stdout carries only protocol lines; the entrypoint keeps the last 8 KiB of stderr for the report.
//! - `{"ev":"step","rank":R,"step":S,"t_ms":T}`: rank R (absent for the orchestrator) entered step S, T ms after
//!   the process started. Steps in order: `load` (dlopen libnccl/CUDA), `cuda` (device selection and buffers),
//!   `id` (`ncclGetUniqueId`), `init` (`ncclCommInitRank`), `collective` (`ncclAllReduce` and stream sync),
//!   `verify` (copy back and compare every element).
//! - `{"ev":"lib","what":"nccl"|"cuda","path":P,"nccl_version":V}`: which library was loaded.
//! - `{"ev":"id","nranks":N,"addr":A,"port":P,"family":F,"id":HEX}`: rank 0 made the unique id (rank 0 → orchestrator).
//! - `{"ev":"nogpu","note":TEXT}`: rank 0 found no usable GPU; the orchestrator falls back to the bootstrap check.
//! - `{"ev":"rank_result","rank":R,"ok":B,...}`: one rank's verdict (orchestrator forwards it).
//! - `{"ev":"result","mode":"bootstrap"|"allreduce","ok":B,...}`: the final verdict, last line. Failures carry
//!   `error` ([`HelperError`]: stage, NCCL code, `ncclGetErrorString`, `ncclGetLastError(NULL)`, places looked).
//!
//! Exit status of the helper: 0 when a result line was written (whatever its verdict), 2 on bad usage.

use crate::config::{CheckMode, Config};
use crate::environ::Environ;
use crate::probe::read;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What the check found, for `main.rs` to print and act on.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckReport {
    /// The check that actually ran (an allreduce on a machine without GPU falls back to `Bootstrap`).
    pub mode: CheckMode,
    /// True when NCCL accepted the environment (and, for allreduce, every element of the result was right).
    pub passed: bool,
    /// One line: the verdict and its main number or reason.
    pub summary: String,
    /// Everything known, for `--json` (serialize this value as is).
    pub detail: serde_json::Value,
    /// `(name, value, reason)` to add to the command's environment: set when `NCCLENV_CHECK_REPAIR=1` found a
    /// setting with which a failed allreduce passes.
    pub extra_env: Vec<(String, String, String)>,
}

impl CheckReport {
    /// The signal number (SIGINT 2, SIGTERM 15) that interrupted the check, if one did. The caller should then
    /// stop instead of running the command (conventionally exit 128 + signal).
    pub fn interrupted_by(&self) -> Option<i32> {
        self.detail
            .get("interrupted_by")
            .and_then(|v| v.as_i64())
            .and_then(|v| i32::try_from(v).ok())
    }
}

/// An error reported by the helper (protocol field `error`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HelperError {
    /// Where it failed: `load`, `symbol`, `cuda`, `id`, `init`, `collective`, `verify`, `usage`, `spawn`, `crash`.
    pub stage: String,
    /// NCCL result code (`ncclResult_t`), or the CUDA error number for stage `cuda`.
    pub code: Option<i32>,
    /// `ncclGetErrorString(code)` (or `cuGetErrorString`/`cudaGetErrorString`).
    pub error_string: Option<String>,
    /// `ncclGetLastError(NULL)`: NCCL's last warning text, also without `NCCL_DEBUG`.
    pub last_error: Option<String>,
    /// Human message from the helper.
    pub message: String,
    /// Places looked for a library (stage `load`), each `path: why not`.
    pub looked: Vec<String>,
    /// The rank it happened on, when it is a rank's error.
    pub rank: Option<u32>,
}

/// One protocol line from the helper (see the module documentation). Every field but `ev` is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HelperMsg {
    /// `step`, `lib`, `id`, `nogpu`, `rank_result`, `result`.
    pub ev: String,
    /// `bootstrap` or `allreduce` (on `result`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Rank number (absent: the orchestrator or the bootstrap check).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// Step name (on `step`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// Milliseconds since the reporting process started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_ms: Option<u64>,
    /// Verdict (on `rank_result`, `result`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// `nccl` or `cuda` (on `lib`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what: Option<String>,
    /// Path of the loaded library.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `ncclGetVersion`: X·10000+Y·100+Z (X·1000+Y·100+Z before 2.9).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl_version: Option<i32>,
    /// CUDA flavour used by the ranks: `driver` (libcuda.so.1) or `runtime` (libcudart).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda: Option<String>,
    /// Bootstrap address decoded from the unique id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    /// Bootstrap port decoded from the unique id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// `AF_INET`, `AF_INET6` or `family N`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// The 128-byte unique id in hex (on `id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Ranks in the communicator.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nranks: Option<u32>,
    /// GPUs visible to CUDA (`cuDeviceGetCount` / `cudaGetDeviceCount`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus_visible: Option<u32>,
    /// Bytes per rank reduced (float32 count × 4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Seconds the timed allreduce took (slowest rank).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// Algorithm bandwidth in GB/s (10^9 bytes/s): bytes / seconds, as nccl-tests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub algbw_gbps: Option<f64>,
    /// Bus bandwidth in GB/s: algbw · 2(n−1)/n, as nccl-tests for allreduce.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busbw_gbps: Option<f64>,
    /// Elements whose value was wrong after the allreduce.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mismatches: Option<u64>,
    /// First wrong element: index, expected, got.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_mismatch: Option<(u64, f64, f64)>,
    /// A remark (one-rank communicator, fallback, device name…).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The failure, when `ok` is false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<HelperError>,
    /// Per-rank results (on the allreduce `result`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<HelperMsg>,
}

impl HelperMsg {
    /// A message of kind `ev` with nothing else set.
    pub fn new(ev: &str) -> Self {
        HelperMsg {
            ev: ev.to_string(),
            ..Default::default()
        }
    }
}

/// Size of `ncclUniqueId` in bytes (`NCCL_UNIQUE_ID_BYTES`, src/nccl.h.in).
pub const UNIQUE_ID_BYTES: usize = 128;

/// Decode the bootstrap address from a unique id: bytes 0–7 are the magic, bytes 8… a `sockaddr_in` or
/// `sockaddr_in6` (`struct ncclBootstrapHandle { uint64_t magic; union ncclSocketAddress addr; }`,
/// src/include/bootstrap.h, unchanged 2.18–2.32). Family is a little-endian u16 (x86-64/aarch64 hosts), the
/// port is big-endian. Returns `(address, port)`, or the family number when it is neither AF_INET (2) nor
/// AF_INET6 (10).
pub fn decode_unique_id(id: &[u8]) -> Result<(IpAddr, u16), u16> {
    if id.len() < 8 + 28 {
        return Err(0);
    }
    let family = u16::from_le_bytes([id[8], id[9]]);
    let port = u16::from_be_bytes([id[10], id[11]]);
    match family {
        2 => {
            let a = Ipv4Addr::new(id[12], id[13], id[14], id[15]);
            Ok((IpAddr::V4(a), port))
        }
        10 => {
            let mut b = [0u8; 16];
            b.copy_from_slice(&id[16..32]);
            Ok((IpAddr::V6(Ipv6Addr::from(b)), port))
        }
        other => Err(other),
    }
}

/// Name of an NCCL result code (`ncclResult_t`, src/nccl.h.in; 8 `ncclTimeout` since 2.30): see
/// [`crate::nccl_errors::result_name`].
pub fn nccl_result_name(code: i32) -> &'static str {
    crate::nccl_errors::result_name(code)
}

/// ncclenv's explanation and remedy for an NCCL failure, from the result code, the library version and
/// `ncclGetLastError` text: a lookup in the knowledge base of NCCL's errors ([`crate::nccl_errors`], which also
/// renders the README's table). Returns `(explanation, remedy)`.
///
/// "Bootstrap : no socket interface found" comes from `bootstrapNetInit` (src/bootstrap.cc): code 3
/// (`ncclInternalError`) up to 2.23 and 5 (`ncclInvalidUsage`) from 2.24 on; both are matched by the text.
pub fn explain_nccl_error(code: i32, version: Option<i32>, last_error: &str) -> (String, String) {
    let v = version.and_then(|v| u32::try_from(v).ok()).unwrap_or(0);
    crate::nccl_errors::explain_failure(code, v, last_error)
}

/// `22105` → `2.21.5` (`ncclGetVersion` encoding: X·10000+Y·100+Z since 2.9, X·1000+Y·100+Z before).
pub fn version_string(v: i32) -> String {
    crate::nccl_errors::version_string(v)
}

/// Likely causes of a hang in a given step (protocol step names).
pub fn hang_causes(step: &str) -> &'static str {
    match step {
        "load" => "loading libnccl or CUDA blocked: a hung network filesystem, or a stuck CUDA driver (check nvidia-smi)",
        "cuda" => "CUDA initialisation or allocation blocked: a GPU in a bad state (Xid errors in dmesg), or a busy/locked device (check nvidia-smi)",
        "id" => "ncclGetUniqueId blocked in NCCL's interface search or bind",
        "init" => "ncclCommInitRank waits for the other ranks: a firewall on the chosen interface, a wrong \
                   NCCL_SOCKET_IFNAME (exists but does not route between the ranks), or a blocked bootstrap port",
        "collective" => "the allreduce does not complete: PCIe P2P through a switch with ACS/IOMMU enabled (retry with \
                         NCCL_P2P_DISABLE=1 to confirm), a broken NVLink, or a network transport blocked by a firewall",
        "verify" => "copying the result back blocked: a GPU fault (check dmesg for Xid errors)",
        _ => "the helper did not start its work: an overloaded machine, or a hang before NCCL was loaded",
    }
}

// ---------------------------------------------------------------------------------------------------------
// Process management (entrypoint side)
// ---------------------------------------------------------------------------------------------------------

/// Signal that arrived while a check ran (0: none).
static SIGNAL_SEEN: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: nix::libc::c_int) {
    SIGNAL_SEEN.store(sig, Ordering::SeqCst);
}

/// Process-wide state installed while at least one check runs: signal handlers and subreaper, refcounted.
struct Guards {
    users: u32,
    old_int: Option<nix::sys::signal::SigAction>,
    old_term: Option<nix::sys::signal::SigAction>,
    old_subreaper: bool,
}

static GUARDS: Mutex<Guards> = Mutex::new(Guards {
    users: 0,
    old_int: None,
    old_term: None,
    old_subreaper: false,
});

struct GuardHandle;

impl GuardHandle {
    fn acquire() -> GuardHandle {
        use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
        let mut g = match GUARDS.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if g.users == 0 {
            SIGNAL_SEEN.store(0, Ordering::SeqCst);
            let act = SigAction::new(
                SigHandler::Handler(on_signal),
                SaFlags::SA_RESTART,
                SigSet::empty(),
            );
            // SAFETY: the handler only stores into an atomic (async-signal-safe).
            g.old_int = unsafe { sigaction(Signal::SIGINT, &act) }.ok();
            g.old_term = unsafe { sigaction(Signal::SIGTERM, &act) }.ok();
            g.old_subreaper = get_subreaper();
            set_subreaper(true);
        }
        g.users += 1;
        GuardHandle
    }
}

impl Drop for GuardHandle {
    fn drop(&mut self) {
        use nix::sys::signal::{sigaction, Signal};
        let mut g = match GUARDS.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        g.users = g.users.saturating_sub(1);
        if g.users == 0 {
            if let Some(old) = g.old_int.take() {
                // SAFETY: restoring the disposition that was in place before.
                let _ = unsafe { sigaction(Signal::SIGINT, &old) };
            }
            if let Some(old) = g.old_term.take() {
                // SAFETY: as above.
                let _ = unsafe { sigaction(Signal::SIGTERM, &old) };
            }
            let old = g.old_subreaper;
            set_subreaper(old);
        }
    }
}

fn get_subreaper() -> bool {
    let mut v: nix::libc::c_int = 0;
    // SAFETY: PR_GET_CHILD_SUBREAPER writes one int to the pointer given.
    let r = unsafe {
        nix::libc::prctl(
            nix::libc::PR_GET_CHILD_SUBREAPER,
            &mut v as *mut nix::libc::c_int,
            0,
            0,
            0,
        )
    };
    r == 0 && v != 0
}

fn set_subreaper(on: bool) {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer flag.
    let _ = unsafe {
        nix::libc::prctl(
            nix::libc::PR_SET_CHILD_SUBREAPER,
            nix::libc::c_ulong::from(on),
            0,
            0,
            0,
        )
    };
}

/// Kill process group `pgid` with SIGKILL and reap what we can (our children, and orphans re-parented to us
/// as subreaper) until the group is empty or 3 s passed. Returns true when the group is gone.
fn kill_and_reap_group(pgid: i32) -> bool {
    use nix::errno::Errno;
    use nix::sys::signal::{killpg, Signal};
    use nix::sys::wait::{waitpid, WaitPidFlag};
    use nix::unistd::Pid;
    if pgid <= 1 {
        return true;
    }
    let group = Pid::from_raw(pgid);
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        if let Err(Errno::ESRCH) = killpg(group, Signal::SIGKILL) {
            return true;
        }
        // Reap every exited member of the group that is our child.
        loop {
            match waitpid(Pid::from_raw(-pgid), Some(WaitPidFlag::WNOHANG)) {
                Ok(nix::sys::wait::WaitStatus::StillAlive) => break,
                Ok(_) => continue,
                Err(_) => break,
            }
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How to get the helper, for the message when [`find_helper`] finds none.
pub const HELPER_HOWTO: &str = "build both binaries side by side with scripts/build.sh (dist/ncclenv and \
dist/ncclenv-check), or `cargo build --release --bin ncclenv-check` and copy target/release/ncclenv-check \
beside ncclenv; in an image, COPY /ncclenv-check from the carrier next to ncclenv; or set \
NCCLENV_CHECK_HELPER=PATH";

/// The helper to run: `cfg.check_helper`, else `NCCLENV_CHECK_HELPER`, else `ncclenv-check` beside the
/// running executable. Returns the path and the places looked.
pub fn find_helper(cfg: &Config) -> (Option<PathBuf>, Vec<String>) {
    let mut looked = Vec::new();
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = &cfg.check_helper {
        candidates.push(p.clone());
    }
    if let Some(p) = std::env::var_os("NCCLENV_CHECK_HELPER") {
        if !p.is_empty() {
            candidates.push(PathBuf::from(p));
        }
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            candidates.push(dir.join("ncclenv-check"));
        }
    }
    for c in candidates {
        if is_executable(&c) {
            return (Some(c), looked);
        }
        looked.push(format!("{}: not an executable file", c.display()));
    }
    (None, looked)
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Longest helper stdout line kept, in bytes (1 MiB: an allreduce result of 1024 ranks is about 300 KiB).
/// A longer line is dropped whole and counted (`lines_too_long`); `cat /dev/zero` is one endless line.
pub const MAX_LINE: usize = 1 << 20;
/// Lines read but not yet handled: the reader waits (and the helper blocks on its pipe) beyond this many
/// (at most 16 MiB queued with [`MAX_LINE`]).
const LINE_QUEUE: usize = 16;
/// Protocol events kept per attempt, and the bytes of their lines: the latest ones within both bounds
/// (older ones are counted in `events_dropped`).
const MAX_EVENTS: usize = 4096;
/// See [`MAX_EVENTS`] (16 MiB).
const MAX_EVENT_BYTES: usize = 16 << 20;
/// Events written into a report (`events`), the latest ones; the rest are counted in `events_not_shown`.
const REPORTED_EVENTS: usize = 256;
/// Stray (non-protocol) lines kept, each cut to 300 characters.
const MAX_JUNK: usize = 50;
/// After the helper exited without its stdout closing (a child of it still holds the pipe), how long lines
/// already written may take to arrive before the attempt is judged on what came.
const EXIT_GRACE: Duration = Duration::from_millis(200);

/// What one run of the helper produced.
#[derive(Debug, Default)]
struct Attempt {
    /// The final `result` line, if one came.
    result: Option<HelperMsg>,
    /// Protocol lines, in order (`result` included): the latest [`MAX_EVENTS`].
    events: VecDeque<HelperMsg>,
    /// The length in bytes of each line in [`Attempt::events`], and their sum.
    event_sizes: VecDeque<usize>,
    /// Sum of [`Attempt::event_sizes`], at most [`MAX_EVENT_BYTES`].
    event_bytes: usize,
    /// Protocol lines dropped to keep [`Attempt::events`] bounded.
    events_dropped: u64,
    /// Lines on stdout that were not protocol (should not happen), the first [`MAX_JUNK`], cut.
    junk: Vec<String>,
    /// Lines longer than [`MAX_LINE`], dropped.
    lines_too_long: u64,
    /// Last 8 KiB of the helper's stderr (NCCL's own output goes there).
    stderr_tail: String,
    /// Deadline expired.
    timed_out: bool,
    /// Signal received meanwhile.
    interrupted_by: Option<i32>,
    /// Exit description of the helper (`exit 0`, `signal 9`…).
    exit: String,
    /// Could not start it.
    spawn_error: Option<String>,
    /// Milliseconds from spawn to verdict.
    elapsed_ms: u64,
    /// The helper's pid (= its process group).
    pid: i32,
    /// True when every process the attempt started was gone at the end: the helper's process group, and the
    /// processes that left the group (`setsid`) and were adopted by ncclenv as subreaper.
    group_gone: bool,
}

/// One item from the stdout reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A complete line (without its `\n`, trailing whitespace trimmed, invalid UTF-8 replaced), at most
    /// [`MAX_LINE`] bytes.
    Out(String),
    /// A line longer than the bound was dropped; its length so far in bytes.
    TooLong(usize),
    /// End of file.
    Eof,
}

/// Splits a byte stream into lines of at most `max` bytes, whatever the chunks it arrives in: memory stays
/// within `max` bytes however long a line is (a longer line is reported as [`Line::TooLong`] once, and its
/// bytes are skipped up to the next `\n`). The helper's stdout goes through it.
#[derive(Debug)]
pub struct LineSplitter {
    max: usize,
    cur: Vec<u8>,
    /// Bytes of the current line beyond the bound, when it is being skipped.
    skipping: Option<usize>,
}

impl LineSplitter {
    /// A splitter for lines of at most `max` bytes.
    pub fn new(max: usize) -> LineSplitter {
        LineSplitter {
            max,
            cur: Vec::new(),
            skipping: None,
        }
    }

    /// Feed the next bytes; each complete line (or dropped one) goes to `out`, in order.
    pub fn push(&mut self, mut chunk: &[u8], out: &mut dyn FnMut(Line)) {
        while !chunk.is_empty() {
            let nl = chunk.iter().position(|b| *b == b'\n');
            let (part, rest) = match nl {
                Some(i) => (&chunk[..i], Some(&chunk[i + 1..])),
                None => (chunk, None),
            };
            match self.skipping.as_mut() {
                Some(n) => *n = n.saturating_add(part.len()),
                None if self.cur.len() + part.len() > self.max => {
                    self.skipping = Some(self.cur.len() + part.len());
                    self.cur = Vec::new();
                }
                None => self.cur.extend_from_slice(part),
            }
            match rest {
                Some(r) => {
                    self.end_line(out);
                    chunk = r;
                }
                None => chunk = &[],
            }
        }
    }

    /// End of the stream: a last line without `\n` is delivered, then [`Line::Eof`].
    pub fn finish(&mut self, out: &mut dyn FnMut(Line)) {
        if !self.cur.is_empty() || self.skipping.is_some() {
            self.end_line(out);
        }
        out(Line::Eof);
    }

    fn end_line(&mut self, out: &mut dyn FnMut(Line)) {
        match self.skipping.take() {
            Some(n) => out(Line::TooLong(n)),
            None => {
                let s = String::from_utf8_lossy(&self.cur).trim_end().to_string();
                self.cur.clear();
                out(Line::Out(s));
            }
        }
    }
}

/// Handle one protocol line of an attempt: a [`HelperMsg`] becomes an event (the `result` also its verdict),
/// anything else stray output. Bounded: see [`MAX_EVENTS`], [`MAX_EVENT_BYTES`], [`MAX_JUNK`].
fn take_line(att: &mut Attempt, s: &str, start: Instant) {
    if s.is_empty() {
        return;
    }
    match serde_json::from_str::<HelperMsg>(s) {
        Ok(m) if !m.ev.is_empty() => {
            if m.ev == "result" {
                att.result = Some(m.clone());
                att.elapsed_ms = start.elapsed().as_millis() as u64;
            }
            while !att.events.is_empty()
                && (att.events.len() >= MAX_EVENTS || att.event_bytes + s.len() > MAX_EVENT_BYTES)
            {
                att.events.pop_front();
                att.event_bytes -= att.event_sizes.pop_front().unwrap_or(0);
                att.events_dropped += 1;
            }
            att.events.push_back(m);
            att.event_sizes.push_back(s.len());
            att.event_bytes += s.len();
        }
        _ => {
            if att.junk.len() < MAX_JUNK {
                att.junk.push(s.chars().take(300).collect());
            }
        }
    }
}

/// A pipe end as a descriptor above 2: when ncclenv runs with stdin, stdout or stderr closed, `pipe2` can
/// return 0–2, and the child's `dup2(fd, 1)` onto the same number would keep its close-on-exec flag.
fn above_stdio(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    let new = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3))?;
    // SAFETY: F_DUPFD_CLOEXEC returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Start the helper with exactly `env` (its entries as they are, duplicates and entries without `=`
/// included; `std::process::Command` would keep one value per name) in its own process group, stdin from
/// `/dev/null`, stdout and stderr into new pipes, SIGPIPE at its default and an empty signal mask
/// (`posix_spawn`, which also reports a failed exec). Returns the pid and the read ends (stdout, stderr).
fn spawn_helper(
    helper: &Path,
    args: &[String],
    env: &Environ,
) -> Result<(nix::unistd::Pid, OwnedFd, OwnedFd), String> {
    use nix::fcntl::OFlag;
    use nix::spawn::{posix_spawn, PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags};
    use nix::sys::signal::{SigSet, Signal};
    use std::ffi::CString;
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let cs = |b: &[u8]| CString::new(b).map_err(|_| "an argument contains a NUL byte".to_string());
    let path = cs(helper.as_os_str().as_bytes())?;
    let mut argv = vec![path.clone()];
    for a in args {
        argv.push(cs(a.as_bytes())?);
    }
    let envp: Vec<CString> = env
        .entries()
        .iter()
        .filter_map(|e| CString::new(e.as_bytes()).ok())
        .collect();
    let io = |e: std::io::Error| e.to_string();
    let pipe = || -> Result<(OwnedFd, OwnedFd), String> {
        let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| e.to_string())?;
        Ok((above_stdio(r).map_err(io)?, above_stdio(w).map_err(io)?))
    };
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let null = std::fs::File::open("/dev/null")
        .map(OwnedFd::from)
        .and_then(above_stdio)
        .map_err(|e| format!("/dev/null: {e}"))?;
    let nix_err = |e: nix::Error| e.to_string();
    let mut fa = PosixSpawnFileActions::init().map_err(nix_err)?;
    fa.add_dup2(null.as_raw_fd(), 0).map_err(nix_err)?;
    fa.add_dup2(out_w.as_raw_fd(), 1).map_err(nix_err)?;
    fa.add_dup2(err_w.as_raw_fd(), 2).map_err(nix_err)?;
    let mut attr = PosixSpawnAttr::init().map_err(nix_err)?;
    attr.set_flags(
        PosixSpawnFlags::POSIX_SPAWN_SETPGROUP
            | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF
            | PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK,
    )
    .map_err(nix_err)?;
    attr.set_pgroup(nix::unistd::Pid::from_raw(0))
        .map_err(nix_err)?;
    let mut dfl = SigSet::empty();
    dfl.add(Signal::SIGPIPE);
    attr.set_sigdefault(&dfl).map_err(nix_err)?;
    attr.set_sigmask(&SigSet::empty()).map_err(nix_err)?;
    let pid = posix_spawn(path.as_c_str(), &fa, &attr, &argv, &envp).map_err(|e| e.to_string())?;
    drop((out_w, err_w, null));
    Ok((pid, out_r, err_r))
}

/// Pids of the processes that escaped into a session of their own (`setsid`) and, orphaned, were
/// re-parented to this process as child subreaper: their parent is this process and their session is not
/// this process's session. Processes this process starts itself (the helper, and what any other thread of
/// a caller runs) stay in its session, so they are never among them. Read from `/proc/<pid>/stat` (parent
/// and session: fields 4 and 6, after the parenthesised command name) of every process through
/// `probe::read`; empty when `/proc` cannot be read.
fn adopted_escapees() -> Vec<i32> {
    let me = i64::from(std::process::id());
    let my_sid = nix::unistd::getsid(None).map_or(-1, |p| i64::from(p.as_raw()));
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = read::read_file(&e.path().join("stat"), read::ATTR_MAX) else {
            continue;
        };
        let Some(close) = stat.iter().rposition(|b| *b == b')') else {
            continue;
        };
        let rest = String::from_utf8_lossy(&stat[close + 1..]).into_owned();
        let f: Vec<i64> = rest
            .split_whitespace()
            .skip(1)
            .take(4)
            .map(|x| x.parse::<i64>().unwrap_or(-1))
            .collect();
        // f: ppid, pgrp, session, tty_nr
        if f.first() == Some(&me) && f.get(2).is_some_and(|sid| *sid != my_sid) {
            out.push(pid);
        }
    }
    out
}

/// Kill with SIGKILL and reap the processes that escaped the helper's process group with `setsid` and were
/// adopted by ncclenv as subreaper (`PR_SET_CHILD_SUBREAPER`, [`adopted_escapees`]), except those in `keep`
/// (already there before the attempt); their own children follow them up to ncclenv as they die and are
/// killed in turn. Repeats until none is left or 3 s passed; returns true when none is left.
fn kill_adopted(keep: &[i32]) -> bool {
    use nix::sys::signal::{kill, Signal};
    use nix::sys::wait::{waitpid, WaitPidFlag};
    use nix::unistd::Pid;
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left: Vec<i32> = adopted_escapees()
            .into_iter()
            .filter(|p| !keep.contains(p))
            .collect();
        if left.is_empty() {
            return true;
        }
        for p in &left {
            let _ = kill(Pid::from_raw(*p), Signal::SIGKILL);
            let _ = waitpid(Pid::from_raw(*p), Some(WaitPidFlag::WNOHANG));
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn run_helper(helper: &Path, args: &[String], env: &Environ, timeout: Duration) -> Attempt {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    let start = Instant::now();
    let mut att = Attempt::default();
    // Escapees adopted before this attempt (none in the entrypoint) are not this attempt's.
    let before = adopted_escapees();
    let (pid, out, err) = match spawn_helper(helper, args, env) {
        Ok(v) => v,
        Err(e) => {
            att.spawn_error = Some(format!("cannot run {}: {e}", helper.display()));
            att.group_gone = true;
            return att;
        }
    };
    att.pid = pid.as_raw();
    let (tx, rx) = mpsc::sync_channel::<Line>(LINE_QUEUE);
    std::thread::spawn(move || {
        let mut r = std::fs::File::from(out);
        let mut split = LineSplitter::new(MAX_LINE);
        let mut chunk = vec![0u8; 64 << 10];
        let mut open = true;
        let mut send = |l: Line| {
            if open && tx.send(l).is_err() {
                open = false;
            }
        };
        loop {
            match r.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => split.push(&chunk[..n], &mut send),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        split.finish(&mut send);
    });
    let (etx, erx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        const KEEP: usize = 8192;
        let mut err = std::fs::File::from(err);
        let mut tail: Vec<u8> = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            match err.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    tail.extend_from_slice(&chunk[..n]);
                    if tail.len() > 2 * KEEP {
                        let cut = tail.len() - KEEP;
                        tail.drain(..cut);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        if tail.len() > KEEP {
            let cut = tail.len() - KEEP;
            tail.drain(..cut);
        }
        let _ = etx.send(String::from_utf8_lossy(&tail).into_owned());
    });
    let deadline = start + timeout;
    let mut eof = false;
    let mut exited_at: Option<Instant> = None;
    let mut kill = false;
    loop {
        let sig = SIGNAL_SEEN.load(Ordering::SeqCst);
        if sig != 0 {
            att.interrupted_by = Some(sig);
            kill = true;
            break;
        }
        let now = Instant::now();
        if now >= deadline {
            // A verdict that came in time is judged; only its absence is a hang.
            att.timed_out = att.result.is_none();
            kill = true;
            break;
        }
        if exited_at.is_none() {
            match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => {}
                Ok(st) => {
                    att.exit = describe_wait(st);
                    exited_at = Some(now);
                }
                Err(e) => {
                    att.exit = format!("wait failed: {e}");
                    exited_at = Some(now);
                }
            }
        }
        match exited_at {
            // The helper is gone: judge what it wrote. A child of it may still hold stdout open, so EOF is
            // not waited for once the verdict is in (or after a short grace for lines still in the pipe).
            Some(t) if eof || att.result.is_some() || now.duration_since(t) >= EXIT_GRACE => break,
            _ => {}
        }
        if eof {
            std::thread::sleep((deadline - now).min(Duration::from_millis(5)));
            continue;
        }
        match rx.recv_timeout((deadline - now).min(Duration::from_millis(20))) {
            Ok(Line::Out(s)) => take_line(&mut att, &s, start),
            Ok(Line::TooLong(_)) => att.lines_too_long += 1,
            Ok(Line::Eof) | Err(mpsc::RecvTimeoutError::Disconnected) => eof = true,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
    if kill {
        let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
    }
    if exited_at.is_none() {
        att.exit = match waitpid(pid, None) {
            Ok(st) => describe_wait(st),
            Err(_) => "killed".to_string(),
        };
    }
    // Always empty the group and what escaped it: nothing the check started may outlive it.
    let group = kill_and_reap_group(att.pid);
    let adopted = kill_adopted(&before);
    att.group_gone = group && adopted;
    if att.elapsed_ms == 0 {
        att.elapsed_ms = start.elapsed().as_millis() as u64;
    }
    att.stderr_tail = erx
        .recv_timeout(Duration::from_millis(500))
        .unwrap_or_default();
    // Lines that arrived before we stopped looking (not when killed), bounded by the queue.
    if !kill {
        while let Ok(line) = rx.try_recv() {
            match line {
                Line::Out(s) => take_line(&mut att, &s, start),
                Line::TooLong(_) => att.lines_too_long += 1,
                Line::Eof => break,
            }
        }
    }
    att
}

/// A `waitpid` status in words (`exit 0`, `killed by signal 9 (SIGKILL)`).
fn describe_wait(st: nix::sys::wait::WaitStatus) -> String {
    use nix::sys::wait::WaitStatus;
    match st {
        WaitStatus::Exited(_, c) => format!("exit {c}"),
        WaitStatus::Signaled(_, s, _) => {
            format!("killed by signal {} ({})", s as i32, s.as_str())
        }
        other => format!("{other:?}"),
    }
}

/// Name of a signal number, e.g. 11 → `SIGSEGV`.
pub fn signal_name(sig: i32) -> &'static str {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str())
        .unwrap_or("unknown signal")
}

/// The last step each rank reported before a hang: `(rank or None for the orchestrator, step)`.
fn last_steps<'a>(events: impl IntoIterator<Item = &'a HelperMsg>) -> Vec<(Option<u32>, String)> {
    let mut out: Vec<(Option<u32>, String)> = Vec::new();
    for e in events {
        if e.ev == "step" {
            if let Some(step) = &e.step {
                match out.iter_mut().find(|(r, _)| *r == e.rank) {
                    Some(slot) => slot.1 = step.clone(),
                    None => out.push((e.rank, step.clone())),
                }
            }
        }
        if e.ev == "rank_result" {
            out.retain(|(r, _)| *r != e.rank);
        }
    }
    out
}

fn mode_name(mode: CheckMode) -> &'static str {
    match mode {
        CheckMode::Off => "off",
        CheckMode::Bootstrap => "bootstrap",
        CheckMode::Allreduce => "allreduce",
    }
}

/// Verdict of one attempt, before repair.
struct Verdict {
    mode: CheckMode,
    passed: bool,
    summary: String,
    detail: serde_json::Map<String, serde_json::Value>,
    /// True when a different environment could make it pass (an NCCL failure, a hang, a wrong sum, a crash).
    repairable: bool,
}

fn judge(
    att: &Attempt,
    mode: CheckMode,
    expected: Option<(&str, IpAddr)>,
    timeout: Duration,
) -> Verdict {
    use serde_json::{json, Value};
    let mut d = serde_json::Map::new();
    d.insert("requested".into(), json!(mode_name(mode)));
    d.insert("elapsed_ms".into(), json!(att.elapsed_ms));
    d.insert("helper_pid".into(), json!(att.pid));
    d.insert("helper_exit".into(), json!(att.exit));
    d.insert("processes_left".into(), json!(!att.group_gone));
    if att.events_dropped > 0 {
        d.insert("events_dropped".into(), json!(att.events_dropped));
    }
    if att.lines_too_long > 0 {
        d.insert("lines_too_long".into(), json!(att.lines_too_long));
    }
    if !att.stderr_tail.is_empty() {
        d.insert("stderr_tail".into(), json!(att.stderr_tail));
    }
    if !att.junk.is_empty() {
        d.insert("stray_output".into(), json!(att.junk));
    }
    // The report keeps the last REPORTED_EVENTS events (a flood must not flood the report either).
    let shown: Vec<&HelperMsg> = att.events.iter().filter(|e| e.ev != "result").collect();
    let skip = shown.len().saturating_sub(REPORTED_EVENTS);
    if skip > 0 || att.events_dropped > 0 {
        d.insert(
            "events_not_shown".into(),
            json!(skip as u64 + att.events_dropped),
        );
    }
    d.insert(
        "events".into(),
        Value::Array(
            shown[skip..]
                .iter()
                .filter_map(|e| serde_json::to_value(e).ok())
                .collect(),
        ),
    );
    for e in &att.events {
        if e.ev == "lib" {
            if e.what.as_deref() == Some("nccl") {
                d.insert("nccl_path".into(), json!(e.path));
                if let Some(v) = e.nccl_version {
                    d.insert("nccl_version".into(), json!(version_string(v)));
                }
            } else if e.what.as_deref() == Some("cuda") {
                d.insert("cuda_path".into(), json!(e.path));
                d.insert("cuda_api".into(), json!(e.cuda));
            }
        }
    }
    let fail = |d: serde_json::Map<String, Value>, summary: String, repairable: bool| Verdict {
        mode,
        passed: false,
        summary,
        detail: d,
        repairable,
    };
    if let Some(e) = &att.spawn_error {
        d.insert("error".into(), json!({"stage": "spawn", "message": e}));
        return fail(d, format!("check could not run: {e}"), false);
    }
    if let Some(sig) = att.interrupted_by {
        d.insert("interrupted_by".into(), json!(sig));
        let summary = format!(
            "check interrupted by {} after {} ms; helper processes killed",
            signal_name(sig),
            att.elapsed_ms
        );
        return fail(d, summary, false);
    }
    if att.timed_out {
        let steps = last_steps(&att.events);
        let (where_, step) = match steps.last() {
            Some((r, s)) => {
                let who = steps
                    .iter()
                    .map(|(r, s)| match r {
                        Some(r) => format!("rank {r} in {s}"),
                        None => format!("helper in {s}"),
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                let _ = r;
                (who, s.clone())
            }
            None => ("helper before its first step".to_string(), String::new()),
        };
        // The most advanced step names the cause.
        let order = ["load", "cuda", "id", "init", "collective", "verify"];
        let worst = steps
            .iter()
            .map(|(_, s)| s.as_str())
            .max_by_key(|s| order.iter().position(|o| o == s).unwrap_or(0))
            .unwrap_or(step.as_str())
            .to_string();
        let causes = hang_causes(&worst);
        d.insert(
            "hang".into(),
            json!({"timeout_s": timeout.as_secs_f64(), "where": where_, "step": worst, "likely_causes": causes}),
        );
        let summary = format!(
            "check HUNG: no verdict within {} s ({where_}); killed. Likely: {causes}",
            timeout.as_secs()
        );
        return fail(d, summary, true);
    }
    let Some(res) = &att.result else {
        let msg = format!(
            "helper ended without a verdict ({}){}",
            att.exit,
            if att.stderr_tail.is_empty() {
                String::new()
            } else {
                format!(": {}", last_line(&att.stderr_tail))
            }
        );
        d.insert("error".into(), json!({"stage": "crash", "message": msg}));
        return fail(d, format!("check FAILED: {msg}"), true);
    };
    let ran = match res.mode.as_deref() {
        Some("allreduce") => CheckMode::Allreduce,
        _ => CheckMode::Bootstrap,
    };
    let mut v = Verdict {
        mode: ran,
        passed: false,
        summary: String::new(),
        detail: d,
        repairable: false,
    };
    v.detail.insert("mode".into(), json!(mode_name(ran)));
    if let Some(n) = &res.note {
        v.detail.insert("note".into(), json!(n));
    }
    if let Ok(r) = serde_json::to_value(res) {
        v.detail.insert("result".into(), r);
    }
    let ver = res.nccl_version;
    let vtxt = ver
        .map(|v| format!("NCCL {}", version_string(v)))
        .unwrap_or_else(|| "NCCL".to_string());
    // Address comparison, both modes.
    let decoded: Option<IpAddr> = res.addr.as_deref().and_then(|a| a.parse().ok());
    let mut addr_problem = None;
    if let (Some(got), Some((ifname, want))) = (decoded, expected) {
        v.detail.insert(
            "expected".into(),
            json!({"interface": ifname, "addr": want.to_string()}),
        );
        if got != want {
            addr_problem = Some(format!(
                "NCCL bootstraps on {got} but ncclenv chose {ifname} ({want}): another NCCL_SOCKET_IFNAME, \
                 NCCL_SOCKET_FAMILY or an NCCL config file decides"
            ));
        }
    }
    if res.ok != Some(true) {
        let e = res.error.clone().unwrap_or_default();
        let (expl, remedy) = match e.stage.as_str() {
            "load" | "symbol" => (
                format!("{} (looked: {})", e.message, e.looked.join("; ")),
                "Install NCCL (pip install nvidia-nccl-cu12, or the image's libnccl2) or point NCCLENV_NCCL_LIB \
                 at libnccl.so.2"
                    .to_string(),
            ),
            "verify" => (
                e.message.clone(),
                "The GPUs or the path between them corrupt data: retry with NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 \
                 separately to find the transport, and check dmesg for Xid errors"
                    .to_string(),
            ),
            "crash" => (
                e.message.clone(),
                "A rank process died: check dmesg and the helper's stderr below".to_string(),
            ),
            _ => match e.code {
                Some(c) => explain_nccl_error(c, ver, e.last_error.as_deref().unwrap_or("")),
                None => (e.message.clone(), "See the helper's stderr below".to_string()),
            },
        };
        let mut parts: Vec<String> = Vec::new();
        if let Some(c) = e.code {
            let quoted = e
                .error_string
                .as_deref()
                .map(|s| format!(" \"{s}\""))
                .unwrap_or_default();
            if e.stage == "cuda" {
                parts.push(format!("CUDA error {c}{quoted}"));
            } else {
                parts.push(format!("code {} ({c}){quoted}", nccl_result_name(c)));
            }
        }
        if let Some(l) = e.last_error.as_deref().filter(|s| !s.is_empty()) {
            parts.push(format!("last error \"{l}\""));
        }
        let rank = e.rank.map(|r| format!(" on rank {r}")).unwrap_or_default();
        let facts = if parts.is_empty() {
            String::new()
        } else {
            format!("{}: ", parts.join(", "))
        };
        v.summary = format!(
            "{} check FAILED at {}{rank}: {facts}{expl}",
            mode_name(ran),
            e.stage
        );
        v.detail.insert(
            "error".into(),
            json!({
                "stage": e.stage, "code": e.code, "name": e.code.map(nccl_result_name),
                "error_string": e.error_string, "last_error": e.last_error, "message": e.message,
                "looked": e.looked, "rank": e.rank, "explanation": expl, "remedy": remedy,
            }),
        );
        // A missing library or an unusable CUDA (NCCL code 1) is not something NCCL variables can fix.
        v.repairable = ran == CheckMode::Allreduce
            && !matches!(
                e.stage.as_str(),
                "load" | "symbol" | "cuda" | "usage" | "spawn"
            )
            && e.code != Some(1);
        return v;
    }
    if let Some(p) = addr_problem {
        v.summary = format!("{} check FAILED: {p}", mode_name(ran));
        v.detail.insert(
            "error".into(),
            json!({"stage": "address", "message": p, "remedy":
                "Set NCCL_SOCKET_IFNAME to the interface ncclenv chose, or remove the setting that overrides it"}),
        );
        return v;
    }
    v.passed = true;
    let at = match (&res.addr, res.port) {
        (Some(a), Some(p)) => format!(" on {a} port {p}"),
        (Some(a), None) => format!(" on {a}"),
        _ => String::new(),
    };
    let at_if = expected.map(|(i, _)| format!(" ({i})")).unwrap_or_default();
    v.summary = match ran {
        CheckMode::Allreduce => {
            let n = res.nranks.unwrap_or(0);
            let mib = res.bytes.unwrap_or(0) as f64 / (1024.0 * 1024.0);
            let one = if n == 1 {
                " (one GPU: one-rank communicator, nothing crossed between GPUs)"
            } else {
                ""
            };
            format!(
                "allreduce check passed: {vtxt}, {n} rank(s), {mib:.0} MiB float32 verified in {:.2} ms, algbw {:.2} GB/s, busbw {:.2} GB/s; bootstrap{at}{at_if}{one}",
                res.seconds.unwrap_or(0.0) * 1e3,
                res.algbw_gbps.unwrap_or(0.0),
                res.busbw_gbps.unwrap_or(0.0),
            )
        }
        _ => {
            let fb = if mode == CheckMode::Allreduce {
                " (no GPU: fell back to the bootstrap check)"
            } else {
                ""
            };
            format!(
                "bootstrap check passed: {vtxt} accepts the environment, bootstraps{at}{at_if}{fb}"
            )
        }
    };
    v
}

fn last_line(s: &str) -> String {
    s.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .chars()
        .take(300)
        .collect()
}

/// Run the check with the command's final environment.
///
/// - `mode`: `Bootstrap` runs `ncclGetUniqueId` in a throwaway helper (NCCL-FACTS §4); `Allreduce` runs one
///   process per GPU (`min(cfg.check_gpus, visible GPUs)`, buffer `cfg.check_mib` MiB of float32) and falls back
///   to the bootstrap check when no GPU is visible; `Off` returns a passed report at once.
/// - `env`: the command's final environment, as it will be exec'ed (an [`Environ`], or name/value pairs that
///   become its entries in order). The helper gets exactly these entries (duplicates and entries without `=`
///   included, so that its `getenv` reads what the command's will), except that `NCCL_COMM_ID` is removed for
///   the check and `NCCLENV_NCCL_LIB` is set from `cfg.nccl_lib`.
/// - `expected`: the interface and address ncclenv chose; the address NCCL binds (decoded from the unique id)
///   must equal it.
/// - `other_ifaces`: next candidate interfaces, tried (as `NCCL_SOCKET_IFNAME==name`) by repair.
///
/// Bounded by `cfg.check_timeout_s` as a whole (with repair on, the first attempt gets half and the retries
/// share the rest, so that a hang still leaves time to retry); never panics on the helper's output; leaves no process
/// behind. With `cfg.check_repair`, a failed allreduce is retried with `NCCL_SHM_DISABLE=1`,
/// `NCCL_P2P_DISABLE=1`, `NCCL_IB_DISABLE=1`, then each other interface (at most 3), each alone; the first that
/// passes goes into `extra_env` with its reason.
pub fn run_check(
    cfg: &Config,
    mode: CheckMode,
    env: impl Into<Environ>,
    expected: Option<(&str, IpAddr)>,
    other_ifaces: &[String],
) -> CheckReport {
    use serde_json::json;
    let env: Environ = env.into();
    let env = &env;
    if mode == CheckMode::Off {
        return CheckReport {
            mode,
            passed: true,
            summary: "check off".to_string(),
            detail: json!({"mode": "off"}),
            extra_env: Vec::new(),
        };
    }
    let (helper, looked) = find_helper(cfg);
    let Some(helper) = helper else {
        let msg = format!(
            "check helper ncclenv-check not found (looked: {}); {HELPER_HOWTO}",
            looked.join("; ")
        );
        return CheckReport {
            mode,
            passed: false,
            summary: format!("check could not run: {msg}"),
            detail: json!({"mode": mode_name(mode), "passed": false, "error": {"stage": "helper", "message": msg, "looked": looked}}),
            extra_env: Vec::new(),
        };
    };
    let _guard = GuardHandle::acquire();
    // The deadline bounds the whole check. With repair on, the first attempt gets half of it so that the
    // retries (which share the rest) can still run after a hang.
    let started = Instant::now();
    let total = Duration::from_secs(cfg.check_timeout_s.max(1));
    let repairing = cfg.check_repair && mode == CheckMode::Allreduce;
    let timeout = if repairing { total / 2 } else { total };
    let base_env = check_env(cfg, env, &[]);
    let args = helper_args(cfg, mode);
    let att = run_helper(&helper, &args, &base_env, timeout);
    let first = judge(&att, mode, expected, timeout);
    let mut detail = first.detail;
    detail.insert("helper".into(), json!(helper.display().to_string()));
    detail.insert("passed".into(), json!(first.passed));
    detail.insert("summary".into(), json!(first.summary));
    let mut report = CheckReport {
        mode: first.mode,
        passed: first.passed,
        summary: first.summary.clone(),
        detail: serde_json::Value::Null,
        extra_env: Vec::new(),
    };
    if !first.passed && first.repairable && cfg.check_repair && first.mode == CheckMode::Allreduce {
        let mut tries: Vec<(String, String, String)> = vec![
            ("NCCL_SHM_DISABLE".into(), "1".into(),
             "the allreduce check failed and passed with the SHM transport off (/dev/shm too small or broken)".into()),
            ("NCCL_P2P_DISABLE".into(), "1".into(),
             "the allreduce check failed and passed with GPU peer-to-peer off (PCIe ACS/IOMMU or a broken P2P path)".into()),
            ("NCCL_IB_DISABLE".into(), "1".into(),
             "the allreduce check failed and passed with InfiniBand/RoCE off (a broken RDMA setup)".into()),
        ];
        for i in other_ifaces.iter().take(3) {
            tries.push((
                "NCCL_SOCKET_IFNAME".into(),
                format!("={i}"),
                format!("the allreduce check failed on the chosen interface and passed on {i}"),
            ));
        }
        let mut attempts = Vec::new();
        for (name, value, reason) in tries {
            let already = env.get(&name) == Some(std::ffi::OsStr::new(&value));
            if already {
                continue;
            }
            let left = total.saturating_sub(started.elapsed());
            if left < Duration::from_secs(1) {
                attempts.push(json!({"set": format!("{name}={value}"), "passed": false,
                    "summary": "not tried: the check's deadline (NCCLENV_CHECK_TIMEOUT) was reached"}));
                break;
            }
            let e = check_env(cfg, env, &[(name.clone(), value.clone())]);
            let exp = if name == "NCCL_SOCKET_IFNAME" {
                None
            } else {
                expected
            };
            let a = run_helper(&helper, &args, &e, left);
            let v = judge(&a, mode, exp, left);
            attempts.push(
                json!({"set": format!("{name}={value}"), "passed": v.passed, "summary": v.summary}),
            );
            if let Some(sig) = a.interrupted_by {
                detail.insert("interrupted_by".into(), json!(sig));
                report.summary = v.summary;
                break;
            }
            if v.passed {
                report.passed = true;
                report.summary = format!(
                    "{} (repaired: {name}={value}; first try: {})",
                    v.summary, first.summary
                );
                report.extra_env.push((name, value, reason));
                detail.insert(
                    "repaired_result".into(),
                    serde_json::Value::Object(v.detail),
                );
                detail.insert("passed".into(), json!(true));
                break;
            }
        }
        detail.insert("repair_attempts".into(), serde_json::Value::Array(attempts));
        detail.insert("summary".into(), json!(report.summary));
    }
    detail.insert(
        "extra_env".into(),
        json!(report
            .extra_env
            .iter()
            .map(|(n, v, r)| json!({"name": n, "value": v, "reason": r}))
            .collect::<Vec<_>>()),
    );
    report.detail = serde_json::Value::Object(detail);
    report
}

fn helper_args(cfg: &Config, mode: CheckMode) -> Vec<String> {
    match mode {
        CheckMode::Allreduce => vec![
            "allreduce".into(),
            "--gpus".into(),
            cfg.check_gpus.max(1).to_string(),
            "--mib".into(),
            cfg.check_mib.max(1).to_string(),
        ],
        _ => vec!["bootstrap".into()],
    }
}

/// The helper's environment: `env` as it is, without `NCCL_COMM_ID` (the check bootstraps alone), with
/// `NCCLENV_NCCL_LIB` from `cfg.nccl_lib` and the `extra` variables of a repair attempt set.
fn check_env(cfg: &Config, env: &Environ, extra: &[(String, String)]) -> Environ {
    let mut out = env.clone();
    out.unset("NCCL_COMM_ID");
    if let Some(lib) = &cfg.nccl_lib {
        out.set("NCCLENV_NCCL_LIB", lib.as_os_str());
    }
    for (n, v) in extra {
        out.set(n, std::ffi::OsStr::new(v));
    }
    out
}

/// The human verdict block for a report: a headline, the numbers, the error with its explanation and remedy,
/// a hang's step and causes, and the repair found. Ends with a newline. Every line is escaped
/// ([`crate::text::escape`]).
pub fn render_check(report: &CheckReport) -> String {
    let d = &report.detail;
    let s = |v: &serde_json::Value| v.as_str().map(str::to_string);
    let mut out = String::new();
    out.push_str(&format!(
        "ncclenv check ({}): {}\n",
        mode_name(report.mode),
        if report.passed { "PASSED" } else { "FAILED" }
    ));
    out.push_str(&format!("  {}\n", report.summary));
    if let Some(v) = d.get("nccl_version").and_then(s) {
        let p = d.get("nccl_path").and_then(s).unwrap_or_default();
        out.push_str(&format!("  library:     NCCL {v} {p}\n"));
    }
    if let Some(r) = d.get("result") {
        if let Some(a) = r.get("addr").and_then(s) {
            let port = r.get("port").and_then(|p| p.as_u64()).unwrap_or(0);
            out.push_str(&format!("  bootstrap:   {a} port {port}\n"));
        }
        if let (Some(n), Some(_)) = (
            r.get("nranks").and_then(|n| n.as_u64()),
            r.get("bytes").and_then(|b| b.as_u64()),
        ) {
            out.push_str(&format!(
                "  allreduce:   {n} rank(s), {} bytes, {:.3} ms, algbw {:.2} GB/s, busbw {:.2} GB/s\n",
                r.get("bytes").and_then(|b| b.as_u64()).unwrap_or(0),
                r.get("seconds").and_then(|b| b.as_f64()).unwrap_or(0.0) * 1e3,
                r.get("algbw_gbps").and_then(|b| b.as_f64()).unwrap_or(0.0),
                r.get("busbw_gbps").and_then(|b| b.as_f64()).unwrap_or(0.0),
            ));
        }
    }
    if let Some(n) = d.get("note").and_then(s) {
        out.push_str(&format!("  note:        {n}\n"));
    }
    if let Some(e) = d.get("error") {
        if let Some(x) = e.get("explanation").and_then(s) {
            out.push_str(&format!("  why:         {x}\n"));
        }
        if let Some(x) = e.get("remedy").and_then(s) {
            out.push_str(&format!("  remedy:      {x}\n"));
        }
    }
    if let Some(h) = d.get("hang") {
        if let Some(x) = h.get("where").and_then(s) {
            out.push_str(&format!("  stuck:       {x}\n"));
        }
        if let Some(x) = h.get("likely_causes").and_then(s) {
            out.push_str(&format!("  likely:      {x}\n"));
        }
    }
    for (n, v, r) in &report.extra_env {
        out.push_str(&format!("  repair:      {n}={v} ({r})\n"));
    }
    if !report.passed {
        if let Some(t) = d.get("stderr_tail").and_then(s) {
            let lines: Vec<&str> = t.lines().filter(|l| !l.trim().is_empty()).collect();
            let start = lines.len().saturating_sub(5);
            for l in &lines[start..] {
                out.push_str(&format!("  stderr:      {l}\n"));
            }
        }
    }
    // NCCL's messages and the helper's stderr may hold control characters: every line leaves inert.
    crate::text::escape_lines(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_ipv4_and_ipv6_ids() {
        let mut id = [0u8; 128];
        id[8..10].copy_from_slice(&2u16.to_le_bytes());
        id[10..12].copy_from_slice(&40000u16.to_be_bytes());
        id[12..16].copy_from_slice(&[10, 0, 0, 2]);
        assert_eq!(
            decode_unique_id(&id),
            Ok((
                "10.0.0.2"
                    .parse()
                    .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
                40000
            ))
        );
        let mut id6 = [0u8; 128];
        id6[8..10].copy_from_slice(&10u16.to_le_bytes());
        id6[10..12].copy_from_slice(&1234u16.to_be_bytes());
        let a: Ipv6Addr = "fd00::2".parse().unwrap_or(Ipv6Addr::UNSPECIFIED);
        id6[16..32].copy_from_slice(&a.octets());
        assert_eq!(decode_unique_id(&id6), Ok((IpAddr::V6(a), 1234)));
        assert_eq!(decode_unique_id(&[0u8; 128]), Err(0));
        assert_eq!(decode_unique_id(&[0u8; 10]), Err(0));
    }

    #[test]
    fn no_interface_explained_for_both_codes() {
        let (e3, _) = explain_nccl_error(3, Some(22105), "Bootstrap : no socket interface found");
        let (e5, _) = explain_nccl_error(5, Some(22707), "Bootstrap : no socket interface found");
        assert!(e3.contains("no socket interface"));
        assert!(e5.contains("no socket interface"));
        assert!(!e3.contains("usually returns"));
        assert!(!e5.contains("usually returns"));
        let (c2, _) = explain_nccl_error(
            2,
            Some(22707),
            "NET/Socket : No usable listening interface found",
        );
        assert!(c2.contains("NCCL_COMM_ID"));
    }

    #[test]
    fn versions_format() {
        assert_eq!(version_string(22105), "2.21.5");
        assert_eq!(version_string(2708), "2.7.8");
    }

    #[test]
    fn last_steps_track_unfinished_ranks() {
        let mut a = HelperMsg::new("step");
        a.rank = Some(0);
        a.step = Some("init".into());
        let mut b = HelperMsg::new("step");
        b.rank = Some(1);
        b.step = Some("collective".into());
        let mut c = HelperMsg::new("rank_result");
        c.rank = Some(0);
        let s = last_steps(&[a, b, c]);
        assert_eq!(s, vec![(Some(1), "collective".to_string())]);
    }

    /// Generated cases of each helper-protocol property test (README "Reliability").
    const PROPTEST_PROTOCOL_CASES: u32 = 2000;

    /// Lines the way a reference splitter cuts them: at each `\n`, the last piece only when not empty.
    fn reference_lines(stream: &[u8], max: usize) -> Vec<Line> {
        let mut out = Vec::new();
        let mut parts: Vec<&[u8]> = stream.split(|b| *b == b'\n').collect();
        if parts.last().is_some_and(|p| p.is_empty()) {
            parts.pop();
        }
        for p in parts {
            if p.len() > max {
                out.push(Line::TooLong(p.len()));
            } else {
                out.push(Line::Out(String::from_utf8_lossy(p).trim_end().to_string()));
            }
        }
        out.push(Line::Eof);
        out
    }

    fn protocol_line() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let value = prop_oneof![
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_map(|f| serde_json::json!(f)),
            ".{0,12}".prop_map(serde_json::Value::from),
            Just(serde_json::Value::Null),
            Just(serde_json::json!([{"ev": "step"}, 1, "x"])),
            Just(serde_json::json!({"stage": 3, "code": "x"})),
        ];
        let key = proptest::sample::select(vec![
            "ev",
            "mode",
            "rank",
            "step",
            "t_ms",
            "ok",
            "what",
            "path",
            "nccl_version",
            "addr",
            "port",
            "family",
            "id",
            "nranks",
            "bytes",
            "seconds",
            "first_mismatch",
            "error",
            "ranks",
            "note",
            "zz",
        ]);
        let ev = proptest::sample::select(vec![
            "step",
            "lib",
            "id",
            "nogpu",
            "rank_result",
            "result",
            "",
            "other",
        ]);
        prop_oneof![
            3 => (ev, proptest::collection::vec((key, value), 0..8)).prop_map(|(ev, kv)| {
                let mut m = serde_json::Map::new();
                m.insert("ev".into(), ev.into());
                for (k, v) in kv {
                    m.insert(k.into(), v);
                }
                serde_json::Value::Object(m).to_string()
            }),
            1 => proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80)
                .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(PROPTEST_PROTOCOL_CASES))]

        /// However the stream is cut into reads, the splitter gives the reference's lines, none longer than
        /// its bound.
        #[test]
        fn lines_are_split_and_bounded_whatever_the_chunks(
            stream in proptest::collection::vec(
                proptest::prop_oneof![4 => proptest::sample::select(b"ab{}\n\r\xff".to_vec()),
                                       1 => proptest::prelude::any::<u8>()], 0..400),
            cuts in proptest::collection::vec(1usize..64, 1..20),
            max in 1usize..40,
        ) {
            let mut got = Vec::new();
            let mut sp = LineSplitter::new(max);
            let mut rest: &[u8] = &stream;
            let mut i = 0;
            while !rest.is_empty() {
                let n = cuts[i % cuts.len()].min(rest.len());
                sp.push(&rest[..n], &mut |l| got.push(l));
                rest = &rest[n..];
                i += 1;
            }
            sp.finish(&mut |l| got.push(l));
            proptest::prop_assert_eq!(&got, &reference_lines(&stream, max));
            for l in &got {
                if let Line::Out(s) = l {
                    proptest::prop_assert!(s.len() <= 3 * max);
                }
            }
        }

        /// Any sequence of protocol lines (valid messages with fields of any type, and garbage): recording
        /// and judging never panic, and the records stay within their bounds.
        #[test]
        fn any_protocol_lines_are_judged(
            lines in proptest::collection::vec(protocol_line(), 0..40),
            timed_out in proptest::prelude::any::<bool>(),
        ) {
            let mut att = Attempt { timed_out, exit: "exit 0".into(), ..Attempt::default() };
            let start = Instant::now();
            for l in &lines {
                take_line(&mut att, l, start);
            }
            proptest::prop_assert!(att.events.len() <= MAX_EVENTS && att.junk.len() <= MAX_JUNK);
            let ip: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
            for mode in [CheckMode::Bootstrap, CheckMode::Allreduce] {
                let v = judge(&att, mode, Some(("eth0", ip)), Duration::from_secs(1));
                proptest::prop_assert!(!v.summary.is_empty());
            }
        }
    }

    #[test]
    fn events_are_bounded_under_a_flood() {
        let mut att = Attempt::default();
        let start = Instant::now();
        let line = r#"{"ev":"step","rank":0,"step":"load"}"#;
        for _ in 0..(MAX_EVENTS + 100) {
            take_line(&mut att, line, start);
        }
        for _ in 0..(MAX_JUNK + 10) {
            take_line(&mut att, &"x".repeat(10_000), start);
        }
        assert_eq!(att.events.len(), MAX_EVENTS);
        assert_eq!(att.events_dropped, 100);
        assert_eq!(att.junk.len(), MAX_JUNK);
        assert!(att.junk.iter().all(|j| j.len() <= 300));
    }
}
