//! The helper's protocol output: one [`HelperMsg`] per line on the original standard output, which is kept
//! for the protocol alone (fd 1 is pointed at stderr, so that NCCL's own prints stay out of it).

use ncclenv::check::protocol::{HelperMsg, Step, StepMsg};
use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// Protocol output: a duplicate of the original stdout.
static PROTO: OnceLock<Mutex<File>> = OnceLock::new();
/// When the process started (for `t_ms`).
static START: OnceLock<Instant> = OnceLock::new();

/// Milliseconds since [`setup`].
fn t_ms() -> u64 {
    START
        .get()
        .map(|s| s.elapsed().as_millis() as u64)
        .unwrap_or(0)
}

/// Keep the original stdout for the protocol (a close-on-exec duplicate above 2) and point fd 1 at stderr.
pub fn setup() {
    let _ = START.set(Instant::now());
    if let Ok(fd) = std::io::stdout().as_fd().try_clone_to_owned() {
        let _ = nix::unistd::dup2_stdout(std::io::stderr());
        let _ = PROTO.set(Mutex::new(File::from(fd)));
    }
}

/// Write one protocol line (a single write, so lines from several writers never interleave).
pub fn emit(m: &HelperMsg) {
    let Some(line) = m.to_line() else {
        return;
    };
    if let Some(p) = PROTO.get() {
        let mut f = match p.lock() {
            Ok(f) => f,
            Err(e) => e.into_inner(),
        };
        let _ = f.write_all(&line);
    } else {
        let _ = std::io::stdout().write_all(&line);
    }
}

/// Report that `rank` (`None`: the orchestrator or the bootstrap check) entered `step`.
pub fn step(rank: Option<u32>, step: Step) {
    emit(&HelperMsg::Step(StepMsg {
        rank,
        step,
        t_ms: t_ms(),
    }));
}

/// End the process with `code` (see [`crate::ffi::exit_now`]).
pub fn finish(code: i32) -> ! {
    crate::ffi::exit_now(code)
}
