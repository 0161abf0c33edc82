//! The operating system's side of running the helper: signal handlers and the child subreaper while a check
//! runs, starting the helper with `posix_spawn`, and leaving no process behind (its process group, and what
//! escaped it with `setsid`). The signal handlers themselves are `crate::signals`'.

use crate::environ::Environ;
use crate::probe::read;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long killing a process group, or the adopted escapees, may take before giving up.
const KILL_WAIT: Duration = Duration::from_secs(3);
/// Pause between two rounds of killing and reaping.
const KILL_POLL: Duration = Duration::from_millis(10);

// ---------------------------------------------------------------------------------------------------------
// Signals and subreaper while a check runs
// ---------------------------------------------------------------------------------------------------------

/// SIGHUP, SIGINT, SIGQUIT or SIGTERM, when one reached this process since the first [`Guard`] was taken
/// (`crate::signals` owns the handlers).
pub(super) fn pending_signal() -> Option<i32> {
    crate::signals::pending()
}

/// Process-wide state installed while at least one check runs, refcounted.
struct Installed {
    users: u32,
    old_subreaper: bool,
}

static INSTALLED: Mutex<Installed> = Mutex::new(Installed {
    users: 0,
    old_subreaper: false,
});

fn installed() -> std::sync::MutexGuard<'static, Installed> {
    match INSTALLED.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// While one lives: the ending signals are only recorded (see [`pending_signal`], `crate::signals::supervise`)
/// and this process is a child subreaper (`PR_SET_CHILD_SUBREAPER`), so that rank processes orphaned by a
/// kill are re-parented to it and reaped. The first one sets the subreaper, the last one dropped restores
/// what was there before.
pub(super) struct Guard {
    _signals: crate::signals::Supervising,
    _wait: crate::signals::Waiting,
}

impl Guard {
    /// Take the guard (record signals; set the subreaper when it is the first).
    pub fn acquire() -> Guard {
        let signals = crate::signals::supervise();
        let wait = crate::signals::waiting(crate::signals::Wait::Check);
        let mut g = installed();
        if g.users == 0 {
            g.old_subreaper = nix::sys::prctl::get_child_subreaper().unwrap_or(false);
            let _ = nix::sys::prctl::set_child_subreaper(true);
        }
        g.users += 1;
        Guard {
            _signals: signals,
            _wait: wait,
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let mut g = installed();
        g.users = g.users.saturating_sub(1);
        if g.users == 0 {
            let _ = nix::sys::prctl::set_child_subreaper(g.old_subreaper);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Starting the helper
// ---------------------------------------------------------------------------------------------------------

/// The helper, started: its pid (= its process group) and the read ends of its stdout and stderr.
pub(super) struct Spawned {
    /// The helper's pid, also its process group.
    pub pid: Pid,
    /// Its standard output (the protocol).
    pub stdout: OwnedFd,
    /// Its standard error (NCCL's own output).
    pub stderr: OwnedFd,
}

/// A descriptor above 2: when ncclenv runs with stdin, stdout or stderr closed, `pipe2` can return 0–2, and
/// the child's `dup2(fd, 1)` onto the same number would keep its close-on-exec flag. The copy is
/// close-on-exec (`F_DUPFD_CLOEXEC` from 3, as `try_clone_to_owned` does).
fn above_stdio(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    fd.as_fd().try_clone_to_owned()
}

/// A close-on-exec pipe, both ends above 2: `(read, write)`.
fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| e.to_string())?;
    let io = |e: std::io::Error| e.to_string();
    Ok((above_stdio(r).map_err(io)?, above_stdio(w).map_err(io)?))
}

/// Start the helper with exactly `env` (its entries as they are, duplicates and entries without `=`
/// included; `std::process::Command` would keep one value per name) in its own process group, stdin from
/// `/dev/null`, stdout and stderr into new pipes, SIGPIPE at its default and an empty signal mask
/// (`posix_spawn`, which also reports a failed exec).
pub(super) fn spawn_helper(
    helper: &Path,
    args: &[String],
    env: &Environ,
) -> Result<Spawned, String> {
    use nix::spawn::{posix_spawn, PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags};
    use nix::sys::signal::SigSet;
    use std::ffi::CString;
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
    attr.set_pgroup(Pid::from_raw(0)).map_err(nix_err)?;
    let mut dfl = SigSet::empty();
    dfl.add(Signal::SIGPIPE);
    attr.set_sigdefault(&dfl).map_err(nix_err)?;
    attr.set_sigmask(&SigSet::empty()).map_err(nix_err)?;
    let pid = posix_spawn(path.as_c_str(), &fa, &attr, &argv, &envp).map_err(|e| e.to_string())?;
    drop((out_w, err_w, null));
    Ok(Spawned {
        pid,
        stdout: out_r,
        stderr: err_r,
    })
}

// ---------------------------------------------------------------------------------------------------------
// Exit status and signals in words
// ---------------------------------------------------------------------------------------------------------

/// The helper's exit status, without waiting: `None` while it runs, else its description ([`describe_wait`]).
pub(super) fn try_wait(pid: Pid) -> Option<String> {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::StillAlive) => None,
        Ok(st) => Some(describe_wait(st)),
        Err(e) => Some(format!("wait failed: {e}")),
    }
}

/// Wait for the helper (killed or about to end) and describe how it ended.
pub(super) fn wait(pid: Pid) -> String {
    match nix::sys::wait::waitpid(pid, None) {
        Ok(st) => describe_wait(st),
        Err(_) => "killed".to_string(),
    }
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
    Signal::try_from(sig)
        .map(|s| s.as_str())
        .unwrap_or("unknown signal")
}

// ---------------------------------------------------------------------------------------------------------
// Leaving no process behind
// ---------------------------------------------------------------------------------------------------------

/// Send SIGKILL to process group `pgid` once (the deadline passed, or a signal came).
pub(super) fn kill_group(pgid: Pid) {
    let _ = nix::sys::signal::killpg(pgid, Signal::SIGKILL);
}

/// Kill process group `pgid` with SIGKILL and reap what we can (our children, and orphans re-parented to us
/// as subreaper) until the group is empty or [`KILL_WAIT`] passed. Returns true when the group is gone.
pub(super) fn kill_and_reap_group(pgid: i32) -> bool {
    use nix::errno::Errno;
    use nix::sys::signal::killpg;
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    if pgid <= 1 {
        return true;
    }
    let group = Pid::from_raw(pgid);
    let deadline = Instant::now() + KILL_WAIT;
    loop {
        if let Err(Errno::ESRCH) = killpg(group, Signal::SIGKILL) {
            return true;
        }
        // Reap every exited member of the group that is our child.
        loop {
            match waitpid(Pid::from_raw(-pgid), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => break,
                Ok(_) => continue,
                Err(_) => break,
            }
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(KILL_POLL);
    }
}

/// Pids of the processes that escaped into a session of their own (`setsid`) and, orphaned, were
/// re-parented to this process as child subreaper: their parent is this process and their session is not
/// this process's session. Processes this process starts itself (the helper, and what any other thread of
/// a caller runs) stay in its session, so they are never among them. Read from `/proc/<pid>/stat` (parent
/// and session: fields 4 and 6, after the parenthesised command name) of every process through
/// `probe::read`; empty when `/proc` cannot be read.
pub(super) fn adopted_escapees() -> Vec<i32> {
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
/// adopted by ncclenv as subreaper ([`adopted_escapees`]), except those in `keep` (already there before the
/// attempt); their own children follow them up to ncclenv as they die and are killed in turn. Repeats until
/// none is left or [`KILL_WAIT`] passed; returns true when none is left.
pub(super) fn kill_adopted(keep: &[i32]) -> bool {
    use nix::sys::signal::kill;
    use nix::sys::wait::{waitpid, WaitPidFlag};
    let deadline = Instant::now() + KILL_WAIT;
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
        std::thread::sleep(KILL_POLL);
    }
}
