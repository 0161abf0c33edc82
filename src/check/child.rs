//! One run of the helper as a child process: start it, read its stdout (protocol lines) and stderr (a tail) on
//! two threads, watch signals, the deadline and its exit in one loop, then leave nothing behind.

use super::attempt::{Attempt, Ending};
use super::lines::{Line, LineSplitter, MAX_LINE};
use super::process::{self, Spawned};
use crate::environ::Environ;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Lines read but not yet handled: the reader waits (and the helper blocks on its pipe) beyond this many
/// (at most 16 MiB queued with [`MAX_LINE`]).
const LINE_QUEUE: usize = 16;
/// Bytes read from the helper's stdout at once.
const READ_CHUNK: usize = 64 << 10;
/// Bytes of the helper's stderr kept for the report (the last ones).
const STDERR_TAIL: usize = 8192;
/// After the helper exited without its stdout closing (a child of it still holds the pipe), how long lines
/// already written may take to arrive before the attempt is judged on what came.
const EXIT_GRACE: Duration = Duration::from_millis(200);
/// The longest wait for a line before signals, the deadline and the helper's exit are looked at again.
const LINE_POLL: Duration = Duration::from_millis(20);
/// The pause between two looks once stdout is closed (only the exit is awaited then).
const EOF_POLL: Duration = Duration::from_millis(5);
/// How long the stderr tail may take to arrive once the helper is gone.
const STDERR_WAIT: Duration = Duration::from_millis(500);

/// Why the watch over a running helper ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// The helper exited, and its verdict (or its EOF, or the grace period) came.
    Done,
    /// The deadline passed.
    Deadline,
    /// SIGINT or SIGTERM reached ncclenv.
    Signal(i32),
}

/// Run the helper once with `args` and exactly `env`, for at most `timeout`; never panics on its output and
/// leaves no process behind. The caller holds a [`process::Guard`].
pub(super) fn run_helper(
    helper: &Path,
    args: &[String],
    env: &Environ,
    timeout: Duration,
) -> Attempt {
    let start = Instant::now();
    // Escapees adopted before this attempt (none in the entrypoint) are not this attempt's.
    let before = process::adopted_escapees();
    let Spawned {
        pid,
        stdout,
        stderr,
    } = match process::spawn_helper(helper, args, env) {
        Ok(s) => s,
        Err(e) => {
            // ENOENT for a file that is there: its glibc loader is missing (a musl, distroless or scratch image).
            let why = crate::exec::missing_interpreter(helper)
                .map(|w| format!("{w}; ncclenv-check needs glibc: run the check in a glibc image"))
                .unwrap_or(e);
            return Attempt::not_started(format!("cannot run {}: {why}", helper.display()));
        }
    };
    let mut att = Attempt::started(pid.as_raw());
    let lines = read_lines(stdout);
    let tail = read_tail(stderr);
    let mut exited_at = None;
    let stop = watch(
        &mut att,
        &lines,
        pid,
        start,
        start + timeout,
        &mut exited_at,
    );
    match stop {
        Stop::Signal(sig) => att.ending = Ending::Interrupted(sig),
        // A verdict that came in time is judged; only its absence is a hang.
        Stop::Deadline if att.result.is_none() => att.ending = Ending::Hung,
        Stop::Deadline | Stop::Done => {}
    }
    let killed = stop != Stop::Done;
    if killed {
        process::kill_group(pid);
    }
    if exited_at.is_none() {
        att.exit = process::wait(pid);
    }
    // Always empty the group and what escaped it: nothing the check started may outlive it.
    let group = process::kill_and_reap_group(att.pid);
    let adopted = process::kill_adopted(&before);
    att.group_gone = group && adopted;
    if att.elapsed_ms == 0 {
        att.elapsed_ms = start.elapsed().as_millis() as u64;
    }
    att.stderr_tail = tail.recv_timeout(STDERR_WAIT).unwrap_or_default();
    if !killed {
        take_queued(&mut att, &lines, start);
    }
    att
}

/// The one loop over a running helper: between every two lines it looks at a signal, then the deadline, then
/// the helper's exit. Ends when a signal came, the deadline passed, or the helper exited and its verdict is
/// in (a child of it may still hold stdout open, so EOF is not waited for then), its stdout closed, or
/// [`EXIT_GRACE`] passed for lines still in the pipe. `exited_at` records when the helper was seen gone
/// (and [`Attempt::exit`] how).
fn watch(
    att: &mut Attempt,
    lines: &Receiver<Line>,
    pid: nix::unistd::Pid,
    start: Instant,
    deadline: Instant,
    exited_at: &mut Option<Instant>,
) -> Stop {
    let mut eof = false;
    loop {
        if let Some(sig) = process::pending_signal() {
            return Stop::Signal(sig);
        }
        let now = Instant::now();
        if now >= deadline {
            return Stop::Deadline;
        }
        if exited_at.is_none() {
            if let Some(how) = process::try_wait(pid) {
                att.exit = how;
                *exited_at = Some(now);
            }
        }
        if let Some(t) = *exited_at {
            if eof || att.result.is_some() || now.duration_since(t) >= EXIT_GRACE {
                return Stop::Done;
            }
        }
        let left = deadline - now;
        if eof {
            std::thread::sleep(left.min(EOF_POLL));
            continue;
        }
        match lines.recv_timeout(left.min(LINE_POLL)) {
            Ok(Line::Out(s)) => att.take_line(&s, start),
            Ok(Line::TooLong(_)) => att.lines_too_long += 1,
            Ok(Line::Eof) | Err(RecvTimeoutError::Disconnected) => eof = true,
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// Lines that arrived before the watch stopped (not when the helper was killed), bounded by the queue.
fn take_queued(att: &mut Attempt, lines: &Receiver<Line>, start: Instant) {
    while let Ok(line) = lines.try_recv() {
        match line {
            Line::Out(s) => att.take_line(&s, start),
            Line::TooLong(_) => att.lines_too_long += 1,
            Line::Eof => break,
        }
    }
}

/// Read the helper's stdout on a thread, cut into lines of at most [`MAX_LINE`] bytes; at most
/// [`LINE_QUEUE`] wait in the channel (the reader then blocks, and the helper on its pipe). The thread ends
/// at EOF, or when the receiver is gone and the pipe is closed.
fn read_lines(out: OwnedFd) -> Receiver<Line> {
    let (tx, rx) = mpsc::sync_channel::<Line>(LINE_QUEUE);
    std::thread::spawn(move || {
        let mut r = std::fs::File::from(out);
        let mut split = LineSplitter::new(MAX_LINE);
        let mut chunk = vec![0u8; READ_CHUNK];
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
    rx
}

/// Read the helper's stderr on a thread to its end, keeping the last [`STDERR_TAIL`] bytes; the tail
/// (invalid UTF-8 replaced) is sent once the pipe closes.
fn read_tail(err: OwnedFd) -> Receiver<String> {
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut err = std::fs::File::from(err);
        let mut tail: Vec<u8> = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            match err.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    tail.extend_from_slice(&chunk[..n]);
                    if tail.len() > 2 * STDERR_TAIL {
                        let cut = tail.len() - STDERR_TAIL;
                        tail.drain(..cut);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        if tail.len() > STDERR_TAIL {
            let cut = tail.len() - STDERR_TAIL;
            tail.drain(..cut);
        }
        let _ = tx.send(String::from_utf8_lossy(&tail).into_owned());
    });
    rx
}
