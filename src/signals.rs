//! Every signal disposition ncclenv sets, in one place: SIGHUP, SIGINT, SIGQUIT and SIGTERM end ncclenv at
//! once with 128 + N while it works or waits (resolving the master, the fleet preflight, anything before the
//! command), so that the command never starts in a pod that is being deleted; while a child runs (the check's
//! helper) they are only recorded ([`pending`]), and the check ends its child's process group first.
//!
//! Why handlers at all: as PID 1 of a PID namespace (`ENTRYPOINT ["ncclenv","--"]`, a container without an
//! init) the kernel delivers no signal for which the process has no handler (`kill(2)`, `pid_namespaces(7)`:
//! "the only signals that can be sent to the init process are those for which it has established a signal
//! handler"), so without one SIGTERM is ignored and the pod runs until its grace period ends in SIGKILL.
//!
//! - [`install`] (first thing `main` does) catches the four signals, except those the parent set to `SIG_IGN`
//!   (`nohup`'s SIGHUP, the SIGINT/SIGQUIT of a shell's background job), which stay ignored, as shells do.
//! - The handler stores the signal, and unless a child is supervised ([`supervise`]) writes one prepared line
//!   ([`set_lines`]: ncclenv's log format, saying what it was waiting for, [`waiting`]) and `_exit`s with 128 +
//!   N: only `write(2)` and `_exit(2)`, both async-signal-safe. No child exists then, so none is left behind.
//! - Before the command: `execve` itself resets every caught signal to `SIG_DFL` in the new image and keeps
//!   the ignored ones ignored (POSIX `execve`, "Signals set to be caught by the calling process image shall be
//!   set to the default action in the new process image"), atomically: a signal before the exec ends ncclenv
//!   (the command does not start), one after reaches the command with its default action. Restoring the
//!   dispositions by hand before `execve` would open a window in which PID 1 drops a SIGTERM and the command
//!   starts anyway; so the handlers stay until the exec (tested: the command sees no caught signal).
//!
//! This module holds the program's only `unsafe` for signals (installing dispositions, the handler's two
//! system calls).

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};

/// The signals that end ncclenv while it waits, in the order of [`set_lines`]' table.
pub const ENDING: [Signal; 4] = [
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTERM,
];

/// What ncclenv is doing, for the line a signal prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Wait {
    /// Probing and deciding (before the command).
    Starting = 0,
    /// Resolving the master's name.
    Resolving = 1,
    /// Waiting in the fleet preflight.
    Preflight = 2,
    /// Running the check.
    Check = 3,
}

impl Wait {
    const ALL: [Wait; 4] = [
        Wait::Starting,
        Wait::Resolving,
        Wait::Preflight,
        Wait::Check,
    ];

    /// In words, after "while".
    pub fn words(self) -> &'static str {
        match self {
            Wait::Starting => "preparing the command's environment",
            Wait::Resolving => "resolving the master's name",
            Wait::Preflight => "waiting in the fleet preflight",
            Wait::Check => "the check ran",
        }
    }
}

/// The last signal caught (0: none since [`supervise`] began).
static SEEN: AtomicI32 = AtomicI32::new(0);
/// [`Wait`] as a number.
static WAITING: AtomicU8 = AtomicU8::new(0);
/// Number of live [`Supervising`] guards: while above 0 the handler only records.
static SUPERVISORS: AtomicU32 = AtomicU32::new(0);
/// The prepared lines, `Wait as usize * 4 + index in ENDING`.
static LINES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();

/// What was installed, and what was there before.
struct State {
    /// True once the handlers are installed.
    caught: bool,
    /// True when [`install`] did it (for the whole run): never restored then.
    permanent: bool,
    /// The dispositions found, per [`ENDING`] entry (`None`: left alone, it was ignored).
    saved: [Option<SigAction>; 4],
}

static STATE: Mutex<State> = Mutex::new(State {
    caught: false,
    permanent: false,
    saved: [None, None, None, None],
});

fn state() -> std::sync::MutexGuard<'static, State> {
    match STATE.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

fn index(sig: i32) -> usize {
    ENDING
        .iter()
        .position(|s| *s as i32 == sig)
        .unwrap_or(ENDING.len() - 1)
}

extern "C" fn on_signal(sig: nix::libc::c_int) {
    SEEN.store(sig, Ordering::SeqCst);
    if SUPERVISORS.load(Ordering::SeqCst) > 0 {
        return;
    }
    let at = usize::from(WAITING.load(Ordering::SeqCst)) * ENDING.len() + index(sig);
    if let Some(line) = LINES.get().and_then(|l| l.get(at)) {
        // SAFETY: write(2) on a valid buffer is async-signal-safe; its result does not matter.
        let _ = unsafe { nix::libc::write(2, line.as_ptr().cast(), line.len()) };
    }
    // SAFETY: _exit(2) is async-signal-safe and ends every thread at once.
    unsafe { nix::libc::_exit(128 + sig) }
}

/// Catch [`ENDING`] (those not ignored) with [`on_signal`]; `State::saved` gets what was there.
fn catch(st: &mut State) {
    if st.caught {
        return;
    }
    let act = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for (i, sig) in ENDING.iter().enumerate() {
        // SAFETY: the handler only does async-signal-safe work (an atomic store, write, _exit).
        let old = unsafe { sigaction(*sig, &act) }.ok();
        if let Some(o) = old.filter(|o| matches!(o.handler(), SigHandler::SigIgn)) {
            // Ignored by the parent (nohup): it stays ignored.
            // SAFETY: reinstating the disposition that was there.
            let _ = unsafe { sigaction(*sig, &o) };
            st.saved[i] = None;
        } else {
            st.saved[i] = old;
        }
    }
    st.caught = true;
}

/// Restore what [`catch`] found.
fn release(st: &mut State) {
    if !st.caught || st.permanent {
        return;
    }
    for (i, sig) in ENDING.iter().enumerate() {
        if let Some(old) = st.saved[i].take() {
            // SAFETY: restoring the disposition that was in place before.
            let _ = unsafe { sigaction(*sig, &old) };
        }
    }
    st.caught = false;
}

/// Catch the four signals for the rest of the run (see the module documentation). Called first in `main`.
pub fn install() {
    let mut st = state();
    catch(&mut st);
    st.permanent = true;
}

/// Prepare the line each signal prints, from `line(message, exit_code)` (the logger's rendering of an exit
/// line, newline included): one per [`Wait`] and signal. Once; later calls change nothing.
pub fn set_lines(line: impl Fn(&str, u8) -> String) {
    let mut all = Vec::with_capacity(Wait::ALL.len() * ENDING.len());
    for w in Wait::ALL {
        for sig in ENDING {
            let code = 128 + sig as i32;
            all.push(line(&message(sig, w), code as u8).into_bytes());
        }
    }
    let _ = LINES.set(all);
}

/// What a signal during `w` says: `interrupted by signal 15 (SIGTERM) while waiting in the fleet preflight:
/// the command was not started`.
pub fn message(sig: Signal, w: Wait) -> String {
    let cmd = if w == Wait::Check {
        "; its processes were ended and the command was not started"
    } else {
        ": the command was not started"
    };
    format!(
        "interrupted by signal {} ({}) while {}{cmd}",
        sig as i32,
        sig.as_str(),
        w.words()
    )
}

/// Say what ncclenv waits for from now on (the line a signal prints names it), until the guard is dropped,
/// which restores the previous value.
pub fn waiting(w: Wait) -> Waiting {
    let before = WAITING.swap(w as u8, Ordering::SeqCst);
    Waiting(before)
}

/// See [`waiting`].
#[must_use = "the wait lasts while the guard lives"]
pub struct Waiting(u8);

impl Drop for Waiting {
    fn drop(&mut self) {
        WAITING.store(self.0, Ordering::SeqCst);
    }
}

/// While the guard lives, a signal is only recorded ([`pending`]): a child runs, and its supervisor ends it
/// and then exits 128 + N itself. Installs the handlers if [`install`] did not (a library caller, the unit
/// tests) and restores what was there when the last guard goes.
pub fn supervise() -> Supervising {
    let mut st = state();
    if SUPERVISORS.fetch_add(1, Ordering::SeqCst) == 0 {
        SEEN.store(0, Ordering::SeqCst);
    }
    catch(&mut st);
    Supervising(())
}

/// See [`supervise`].
#[must_use = "signals are only recorded while the guard lives"]
pub struct Supervising(());

impl Drop for Supervising {
    fn drop(&mut self) {
        let mut st = state();
        if SUPERVISORS.fetch_sub(1, Ordering::SeqCst) == 1 {
            release(&mut st);
        }
    }
}

/// The signal (one of [`ENDING`]) caught since the first live [`supervise`] guard was taken.
pub fn pending() -> Option<i32> {
    match SEEN.load(Ordering::SeqCst) {
        0 => None,
        sig => Some(sig),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_signal_and_wait_has_its_line() {
        assert_eq!(
            message(Signal::SIGTERM, Wait::Preflight),
            "interrupted by signal 15 (SIGTERM) while waiting in the fleet preflight: the command was not started"
        );
        assert!(message(Signal::SIGINT, Wait::Check).contains("its processes were ended"));
        assert_eq!(index(Signal::SIGQUIT as i32), 2);
    }
}
