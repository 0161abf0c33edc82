//! The check: prove the environment with the real NCCL library before the command runs.
//!
//! # Why a helper process
//! The entrypoint is fully static (musl) and cannot `dlopen`. The check therefore runs in a second, dynamically
//! linked binary of this crate, `ncclenv-check` (`src/bin/ncclenv-check/`), which loads libnccl and CUDA with
//! `libloading`. This module is the entrypoint side: std + nix only, no CUDA or NCCL is ever loaded into the
//! entrypoint's own process. It finds the helper ([`find_helper`]), runs it as a child in its own process
//! group with the command's final environment (`NCCL_COMM_ID` removed), reads its progress, and enforces the
//! deadline.
//!
//! # Deadline and cleanup
//! `cfg.check_timeout_s` (default 60 s) bounds the whole check (with `NCCLENV_CHECK_REPAIR=1` on an allreduce,
//! the first attempt gets half of it and the retries share the rest, so that a hang still leaves time to
//! retry). On expiry, or when SIGINT/SIGTERM reaches the entrypoint meanwhile, the whole process group (helper
//! and rank processes) is killed with SIGKILL and reaped. While the check runs, the entrypoint is a child
//! subreaper (`PR_SET_CHILD_SUBREAPER`), so rank processes orphaned by the kill are re-parented to it and
//! reaped too; the previous setting is restored afterwards. A hang is reported as a hang, with the step each
//! rank was in and its likely causes.
//!
//! # Helper command line
//! ```text
//! ncclenv-check bootstrap                       ncclGetVersion + ncclGetUniqueId in this (throwaway) process
//! ncclenv-check allreduce [--gpus N] [--mib M]  one rank process per GPU, verified allreduce (default 2, 64)
//! ncclenv-check rank --rank R --gpus N --mib M [--nranks N]   internal: one rank (R>0 reads the id on stdin)
//! ncclenv-check --version | --help
//! ```
//! Variables read by the helper: `NCCLENV_NCCL_LIB` (path of libnccl to load first), `NCCLENV_CUDA_LIB`
//! (path of libcuda.so.1 or libcudart to load first), plus everything NCCL reads itself. The helper writes
//! JSON lines on its stdout ([`protocol`]); the entrypoint keeps the last 8 KiB of its stderr for the report.
//!
//! # Files
//! - [`protocol`]: the helper's messages, shared with the helper binary.
//! - `lines.rs` (stdout cut into bounded lines), `attempt.rs` (what one run produced, bounded), `child.rs`
//!   (one run: the reader threads and the one loop that watches signals, the deadline and the exit),
//!   `process.rs` (signals, subreaper, `posix_spawn`, killing what is left; the module's only `unsafe`).
//! - `judge.rs` (one function per outcome), `causes.rs` (hang causes, failure explanations from
//!   [`crate::nccl_errors`]), `repair.rs` (retries with one setting changed).
//! - `outcome.rs` ([`CheckReport`], [`CheckDetail`]: the `--json` object), `render.rs` (the text block).

mod attempt;
mod causes;
mod child;
mod judge;
mod lines;
mod outcome;
mod process;
pub mod protocol;
mod render;
mod repair;

pub use lines::{Line, LineSplitter, MAX_LINE};
pub use outcome::{
    CheckDetail, CheckReport, ErrorDetail, Expected, ExtraVar, Hang, OwnError, OwnStage,
    RepairAttempt, ReportedError, EXIT_CHECK_FAILED, EXIT_CHECK_UNAVAILABLE, EXIT_SIGNAL_BASE,
};
pub use process::signal_name;
pub use render::render_check;

use crate::config::{CheckMode, Config};
use crate::environ::Environ;
use judge::{AttemptVerdict, Chosen};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How to get the helper, for the message when [`find_helper`] finds none.
pub const HELPER_HOWTO: &str = "build both binaries side by side with scripts/build.sh (dist/ncclenv and \
dist/ncclenv-check), or `cargo build --release --bin ncclenv-check` and copy target/release/ncclenv-check \
beside ncclenv; in an image, COPY /ncclenv-check from the carrier next to ncclenv; or set \
NCCLENV_CHECK_HELPER=PATH";

/// The helper to run: `cfg.check_helper` (`--check-helper`), else `NCCLENV_CHECK_HELPER`, else
/// `ncclenv-check` beside the running executable. A helper named explicitly (either way) is the only
/// candidate: when it is not an executable file the result is `None` (an error, as for an explicit
/// `NCCLENV_NCCL_LIB`), never another helper. Returns the path and the places looked.
pub fn find_helper(cfg: &Config) -> (Option<PathBuf>, Vec<String>) {
    if let Some(p) = explicit_helper(cfg) {
        if is_executable(&p) {
            return (Some(p), Vec::new());
        }
        let looked = vec![format!(
            "{}: not an executable file (named by --check-helper or NCCLENV_CHECK_HELPER, so no other \
             helper is tried)",
            p.display()
        )];
        return (None, looked);
    }
    let mut looked = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            let c = dir.join("ncclenv-check");
            if is_executable(&c) {
                return (Some(c), looked);
            }
            looked.push(format!("{}: not an executable file", c.display()));
        }
    }
    (None, looked)
}

/// The helper named by `--check-helper`, else by a non-empty `NCCLENV_CHECK_HELPER`.
fn explicit_helper(cfg: &Config) -> Option<PathBuf> {
    cfg.check_helper.clone().or_else(|| {
        std::env::var_os("NCCLENV_CHECK_HELPER")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
    })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Run the check with the command's final environment.
///
/// - `mode`: `Bootstrap` runs `ncclGetUniqueId` in a throwaway helper; `Allreduce` runs one process per GPU
///   (`min(cfg.check_gpus, visible GPUs)`, buffer `cfg.check_mib` MiB of float32) and falls back to the
///   bootstrap check when no GPU is visible; `Off` returns a passed report at once.
/// - `env`: the command's final environment, as it will be exec'ed (an [`Environ`], or name/value pairs that
///   become its entries in order). The helper gets exactly these entries (duplicates and entries without `=`
///   included, so that its `getenv` reads what the command's will), except that `NCCL_COMM_ID` is removed for
///   the check and `NCCLENV_NCCL_LIB` is set from `cfg.nccl_lib`.
/// - `expected`: the interface and address ncclenv chose; the address NCCL binds (decoded from the unique id)
///   must equal it.
/// - `other_ifaces`: next candidate interfaces, tried (as `NCCL_SOCKET_IFNAME==name`) by repair.
///
/// Bounded by `cfg.check_timeout_s` as a whole (with repair on, the first attempt gets half and the retries
/// share the rest, so that a hang still leaves time to retry); never panics on the helper's output; leaves no
/// process behind. With `cfg.check_repair`, a failed allreduce is retried with `NCCL_SHM_DISABLE=1`,
/// `NCCL_P2P_DISABLE=1`, `NCCL_IB_DISABLE=1`, then each other interface (at most 3), each alone; the first that
/// passes goes into `extra_env` with its reason.
pub fn run_check(
    cfg: &Config,
    mode: CheckMode,
    env: impl Into<Environ>,
    expected: Option<(&str, IpAddr)>,
    other_ifaces: &[String],
) -> CheckReport {
    let env: Environ = env.into();
    if mode == CheckMode::Off {
        return off();
    }
    let (helper, looked) = find_helper(cfg);
    let Some(helper) = helper else {
        return no_helper(mode, looked, explicit_helper(cfg).is_some());
    };
    let _guard = process::Guard::acquire();
    let check = Check {
        cfg,
        env: &env,
        args: helper_args(cfg, mode),
        helper,
        mode,
        expected,
        started: Instant::now(),
        total: Duration::from_secs(cfg.check_timeout_s.max(1)),
    };
    // With repair on, the first attempt gets half of the deadline so that the retries (which share the rest)
    // can still run after a hang.
    let repairing = cfg.check_repair && mode == CheckMode::Allreduce;
    let first_timeout = if repairing {
        check.total / 2
    } else {
        check.total
    };
    let first = check.attempt(&[], first_timeout, true);
    let retry =
        !first.passed && first.repairable && cfg.check_repair && first.mode == CheckMode::Allreduce;
    let mut report = CheckReport {
        mode: first.mode,
        passed: first.passed,
        summary: first.summary,
        detail: first.detail,
        extra_env: Vec::new(),
    };
    report.detail.helper = Some(check.helper.display().to_string());
    if retry {
        repair::repair(&check, &mut report, other_ifaces);
    }
    report.detail.passed = Some(report.passed);
    report.detail.summary = Some(report.summary.clone());
    report.detail.extra_env = Some(report.extra_env.clone());
    report
}

/// `--check off`: nothing runs.
fn off() -> CheckReport {
    CheckReport {
        mode: CheckMode::Off,
        passed: true,
        summary: "check off".to_string(),
        detail: CheckDetail {
            mode: Some(CheckMode::Off),
            ..CheckDetail::default()
        },
        extra_env: Vec::new(),
    }
}

/// No helper found: the check could not run; the places `looked`.
fn no_helper(mode: CheckMode, looked: Vec<String>, explicit: bool) -> CheckReport {
    let msg = if explicit {
        format!(
            "check helper not found: {}; fix the path, or unset it to use the ncclenv-check beside ncclenv",
            looked.join("; ")
        )
    } else {
        format!(
            "check helper ncclenv-check not found (looked: {}); {HELPER_HOWTO}",
            looked.join("; ")
        )
    };
    let summary = format!("check could not run: {msg}");
    CheckReport {
        mode,
        passed: false,
        detail: CheckDetail {
            mode: Some(mode),
            passed: Some(false),
            error: Some(ErrorDetail::Own(OwnError {
                looked: Some(looked),
                ..OwnError::new(OwnStage::Helper, msg)
            })),
            ..CheckDetail::default()
        },
        summary,
        extra_env: Vec::new(),
    }
}

/// One check in progress: what every attempt shares.
pub(crate) struct Check<'a> {
    cfg: &'a Config,
    /// The command's final environment.
    env: &'a Environ,
    helper: PathBuf,
    args: Vec<String>,
    mode: CheckMode,
    expected: Chosen<'a>,
    started: Instant,
    /// The deadline of the whole check.
    total: Duration,
}

impl Check<'_> {
    /// Time left of the whole check's deadline.
    fn time_left(&self) -> Duration {
        self.total.saturating_sub(self.started.elapsed())
    }

    /// Run the helper once with the `extra` variables set, for at most `timeout`, and judge it (comparing the
    /// bootstrap address with ncclenv's choice when `compare`).
    fn attempt(
        &self,
        extra: &[(String, String)],
        timeout: Duration,
        compare: bool,
    ) -> AttemptVerdict {
        let env = check_env(self.cfg, self.env, extra);
        let att = child::run_helper(&self.helper, &self.args, &env, timeout);
        let expected = if compare { self.expected } else { None };
        judge::judge(&att, self.mode, expected, timeout)
    }
}

/// The helper's arguments for `mode`.
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
