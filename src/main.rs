//! `ncclenv`: parse → probe → decide → report → exec. See README.md. `main` parses the command line and hands
//! over to one function per mode: [`entrypoint`], [`env`], [`doctor`], [`check`], [`install`],
//! [`explain_in_helper`], [`help`], [`version`].
//!
//! Exit codes are named in `ncclenv::exit`: 2 usage error; 78 refused (`EX_CONFIG`: NCCL would certainly fail,
//! or strict mode; also `ncclenv check` where the entrypoint would refuse; the reason also goes to the
//! termination log for Kubernetes); 126 the command cannot be executed; 127 the command was not found; 128+N
//! interrupted by signal N during a check (the entrypoint's or `ncclenv check`'s); otherwise the command's own
//! (ncclenv is replaced by it). `install`: 0 copied, 1 failed.
//!
//! Nothing here may abort on a failed write: a full, closed or broken stdout/stderr must never keep the job
//! from running, so every write goes through [`out`] and `report`, which ignore errors (the logger's writer
//! swallows them too, see `report::init`). Every line is escaped (`text::escape`).
//!
//! A panic must not lose the job either: the release build aborts on panic (`panic = "abort"`), so the
//! first thing `main` does is install [`on_panic`], which prints one line and, for the entrypoint, execs the
//! command with the environment exactly as ncclenv received it. Debug builds (the ones `cargo test` runs)
//! honour `NCCLENV_TEST_PANIC=1`, which panics after the decision, to test that path; release builds have
//! no such switch (`cfg(debug_assertions)`).

use ncclenv::cli::{self, Mode};
use ncclenv::config::{CheckMode, Config};
use ncclenv::environ::Environ;
use ncclenv::findings::Finding;
use ncclenv::plan::{Plan, Verdict};
use ncclenv::probe::{self, Depth};
use ncclenv::snapshot::Snapshot;
use ncclenv::{decide, doctor, exec, exit, plan, report};
use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::sync::OnceLock;

/// The global allocator of the static musl build (see Cargo.toml): dlmalloc instead of musl's mallocng.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

/// What ncclenv received, kept for [`on_panic`]: its arguments (without argv\[0\]) and its environment.
static RECEIVED: OnceLock<(Vec<OsString>, Environ)> = OnceLock::new();
/// The command of the entrypoint mode, once the command line is parsed.
static COMMAND: OnceLock<Vec<OsString>> = OnceLock::new();

/// The panic hook: one line on stderr (plain text whatever `NCCLENV_LOG_FORMAT` says: the logger may be what
/// failed), then, when ncclenv runs as the entrypoint, the command with the environment ncclenv received
/// (its additions dropped), so that an ncclenv bug never costs the job. The command is the parsed one, or
/// before parsing the words after the first `--` when no subcommand (`env`, `doctor`, `check`, `install`)
/// comes before it. Otherwise (or when exec fails) it exits 70 (or the exec error's 126/127).
fn on_panic(info: &std::panic::PanicHookInfo<'_>) {
    let what = info
        .payload()
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| info.payload().downcast_ref::<String>().cloned())
        .unwrap_or_default();
    let at = info
        .location()
        .map(|l| format!(" at {}:{}", l.file(), l.line()))
        .unwrap_or_default();
    let received = RECEIVED.get();
    let cmd: Option<Vec<OsString>> = COMMAND
        .get()
        .cloned()
        .or_else(|| entrypoint_command(&received?.0));
    match (cmd, received) {
        (Some(cmd), Some((_, env))) => {
            err_line(&format!(
                "ncclenv: error: internal error (panic{at}: {what}); running the command with the environment \
                 untouched [{}] (what to do: report this bug)",
                Finding::Panic.code()
            ));
            let e = exec::exec(&cmd, env);
            err_line(&e.message);
            std::process::exit(e.code);
        }
        _ => {
            err_line(&format!(
                "ncclenv: error: internal error (panic{at}: {what}) [{}] (what to do: report this bug)",
                Finding::Panic.code()
            ));
            std::process::exit(i32::from(exit::SOFTWARE));
        }
    }
}

/// One line on stderr, escaped (`text::escape`), every error ignored: for the panic hook, which cannot rely
/// on the logger.
fn err_line(text: &str) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(ncclenv::text::escape(text).as_bytes());
    let _ = e.write_all(b"\n");
}

/// What every mode gets: the configuration, the environment as the kernel handed it, and its name/value view
/// (entries without `=` are the command's alone).
struct Ctx<'a> {
    cfg: &'a Config,
    environ: &'a Environ,
    vars: &'a [(OsString, OsString)],
}

impl Ctx<'_> {
    /// Probe and decide for the job's command `cmd` (run by the entrypoint, only read by env, doctor and
    /// check: its launcher arguments).
    fn decide(&self, cmd: &[OsString], depth: Depth) -> (Snapshot, Plan) {
        let snap = probe::collect(self.cfg, cmd, self.vars, depth);
        report::debug_snapshot(&snap);
        let plan = decide::decide(&snap, self.cfg);
        #[cfg(debug_assertions)]
        if self
            .environ
            .get("NCCLENV_TEST_PANIC")
            .is_some_and(|v| v == "1")
        {
            panic!("NCCLENV_TEST_PANIC=1 (a debug build's test of the panic path)");
        }
        (snap, plan)
    }
}

/// The command of an entrypoint command line read without parsing it: the words after the first `--`, when
/// no subcommand (`env`, `doctor`, `check`, `install`, `explain`) comes before it.
fn entrypoint_command(args: &[OsString]) -> Option<Vec<OsString>> {
    let dd = args.iter().position(|a| a == "--")?;
    let sub = args[..dd]
        .iter()
        .any(|a| a == "env" || a == "doctor" || a == "check" || a == "install" || a == "explain");
    (!sub && dd + 1 < args.len()).then(|| args[dd + 1..].to_vec())
}

/// True when the command line, read without parsing it, asks for `ncclenv env`: the word `env` before any
/// `--`.
fn is_env_mode(args: &[OsString]) -> bool {
    args.iter().take_while(|a| *a != "--").any(|a| a == "env")
}

/// `NCCLENV_DISABLE=VALUE` as given when it (its first entry, as `getenv`) holds a true switch value.
fn disabled(vars: &[(OsString, OsString)]) -> Option<String> {
    vars.iter()
        .find(|(k, _)| k == "NCCLENV_DISABLE")
        .and_then(|(_, v)| v.to_str())
        .filter(|v| cli::parse_bool("NCCLENV_DISABLE", v) == Ok(true))
        .map(|v| format!("NCCLENV_DISABLE={v}"))
}

/// Parse the command line, then hand over to one function per mode.
fn main() -> ExitCode {
    std::panic::set_hook(Box::new(on_panic));
    // SIGTERM and its kin end ncclenv at once while it waits, also as PID 1 (see ncclenv::signals).
    ncclenv::signals::install();
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let environ = Environ::from_process();
    let (args, environ) = RECEIVED.get_or_init(|| (args, environ));
    let vars: Vec<(OsString, OsString)> = environ
        .pairs()
        .map(|(k, v)| (k.to_os_string(), v.to_os_string()))
        .collect();
    let cli = match cli::parse(args, vars.iter().cloned()) {
        Ok(c) => c,
        Err(e) => {
            // NCCLENV_DISABLE=1 asks ncclenv to change nothing: a malformed variable beside it must not stop
            // the job (a malformed flag on the entrypoint's own command line still does).
            if let (Some(cmd), Some(given)) = (entrypoint_command(args), disabled(&vars)) {
                report::usage_ignored(
                    &format!(
                        "{}; {given}: running the command with the environment untouched",
                        e.0
                    ),
                    &vars,
                );
                return exec_or_exit(&cmd, environ, environ);
            }
            report::usage_error(&format!("{} (see ncclenv --help)", e.0), &vars);
            if is_env_mode(args) {
                // `eval "$(ncclenv env)"` stops the script that evals it, as on a refusal.
                out(&format!("exit {}\n", exit::USAGE));
            }
            return ExitCode::from(exit::USAGE);
        }
    };
    if let Mode::Exec(cmd) = &cli.mode {
        let _ = COMMAND.set(cmd.clone());
    }
    let cfg = cli.config;
    match &cli.mode {
        Mode::Help(topic) => return help(*topic),
        Mode::Version => return version(),
        Mode::Completions(shell) => {
            out(&ncclenv::completions::script(*shell));
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    report::init(cfg.log, cfg.log_format, no_color);
    ncclenv::signals::set_lines(report::exit_line);
    let cx = Ctx {
        cfg: &cfg,
        environ,
        vars: &vars,
    };
    match cli.mode {
        Mode::Exec(cmd) => entrypoint(&cx, &cmd),
        Mode::Env(cmd) => env(&cx, &cmd),
        Mode::Doctor { json, cmd } => doctor(&cx, json, &cmd),
        Mode::Check { mode, json, cmd } => {
            check(&cx, mode.unwrap_or(CheckMode::Bootstrap), json, &cmd)
        }
        Mode::Install(dir) => install(&dir),
        Mode::Explain { .. } => explain_in_helper(&cfg, args, environ),
        Mode::Help(_) | Mode::Version | Mode::Completions(_) => ExitCode::SUCCESS,
    }
}

/// `ncclenv --help` (the whole page), `ncclenv SUBCOMMAND --help` and `ncclenv help SUBCOMMAND` (its page).
fn help(topic: Option<&str>) -> ExitCode {
    match topic.and_then(cli::subcommand) {
        Some(sub) => out(&cli::subcommand_help(sub)),
        None => out(&cli::help()),
    }
    ExitCode::SUCCESS
}

/// `ncclenv --version`: the version and the commit it was built from (build.rs; `unknown` outside git).
fn version() -> ExitCode {
    out(&format!(
        "ncclenv {} (commit {})\n",
        env!("CARGO_PKG_VERSION"),
        env!("NCCLENV_GIT_COMMIT")
    ));
    ExitCode::SUCCESS
}

/// `ncclenv [OPTIONS] -- COMMAND`: decide, the fleet preflight and the check when asked, then exec the
/// command (or refuse, exit 78).
fn entrypoint(cx: &Ctx<'_>, cmd: &[OsString]) -> ExitCode {
    let (cfg, environ) = (cx.cfg, cx.environ);
    if cfg.disable {
        for (name, near) in &cfg.unknown_vars {
            tracing::warn!(
                "{} [{}]",
                ncclenv::decide::unknown_variable_text(name, near.as_deref()),
                Finding::UnknownVariable.code()
            );
        }
        tracing::info!("{}: environment left untouched", cfg.disable_words());
        return exec_or_exit(cmd, environ, environ);
    }
    let (snap, mut plan) = cx.decide(cmd, Depth::Start);
    prepare_debug_dir(&mut plan);
    // The fleet preflight sits between the decision and the check/exec: its repairs, findings and
    // refusal go into the plan, so they are logged with the rest and reach the command.
    if cfg.preflight {
        ncclenv::preflight::run(cfg, &snap, &mut plan, environ);
    }
    report::emit(&plan);
    if let Some(r) = report::refusal(&plan) {
        report::refused(&r, cfg.termination_log.as_deref());
        return ExitCode::from(exit::REFUSED);
    }
    if let Err(code) = entrypoint_check(cx, &snap, &mut plan) {
        return code;
    }
    if plan.verdict == Verdict::Proceed && plan.raise_memlock {
        raise_memlock();
    }
    let env = exec::final_env(environ, &plan);
    exec_or_exit(cmd, &env, environ)
}

/// The entrypoint's check (`NCCLENV_CHECK`): skipped when ncclenv is hands off; a pass adds its repairs to
/// the plan; a failure warns, or refuses under `NCCLENV_STRICT=1`. `Err` is the exit code when ncclenv stops
/// (a refusal, or a signal during the check).
fn entrypoint_check(cx: &Ctx<'_>, snap: &Snapshot, plan: &mut Plan) -> Result<(), ExitCode> {
    let cfg = cx.cfg;
    if cfg.check == CheckMode::Off {
        return Ok(());
    }
    if plan.hands_off {
        // Hands off (NCCL_COMM_ID, a vendor profile, a failed probe): ncclenv vouches
        // for nothing it did not decide.
        tracing::warn!(
            "NCCLENV_CHECK skipped: ncclenv is hands off and changed nothing (run `ncclenv check` to prove the environment as it is)"
        );
        return Ok(());
    }
    let env = exec::final_env(cx.environ, plan);
    let report = run_check(cfg, cfg.check, &env, plan, snap);
    if let Some(code) = interrupted(&report) {
        return Err(code);
    }
    if report.passed {
        tracing::info!("check passed: {}", report.summary);
        for e in &report.extra_env {
            plan.set(&e.name, e.value.clone(), e.reason.clone());
            tracing::warn!("check repair: {}={} ({})", e.name, e.value, e.reason);
        }
        return Ok(());
    }
    // A check that could not run (no helper, no libnccl found) asked NCCL nothing: it is said so, not as a
    // failure of NCCL (break-it finding), as `ncclenv check` says COULD NOT RUN.
    let what = if report.could_not_run() {
        "the check could not run"
    } else {
        "the check failed"
    };
    let remedy = report.detail.error.as_ref().and_then(|e| e.remedy());
    if cfg.strict {
        let refusal = report::Refusal {
            code: Finding::CheckFailed.code().into(),
            reason: format!("NCCLENV_STRICT=1 and {what}: {}", report.summary),
            remedy: format!(
                "{}, or unset NCCLENV_STRICT to run with a warning",
                remedy.unwrap_or("fix what the check reports (ncclenv check shows it)")
            ),
        };
        report::refused(&refusal, cfg.termination_log.as_deref());
        return Err(ExitCode::from(exit::REFUSED));
    }
    let remedy = remedy
        .map(|x| format!(" (what to do: {x})"))
        .unwrap_or_default();
    tracing::warn!(
        "{what}, running the command anyway: {}{remedy}",
        report.summary
    );
    Ok(())
}

/// `ncclenv env [-- COMMAND]`: the decisions as shell lines, or on a refusal a line that prints the reason
/// and exits 78 in the shell that evals it.
fn env(cx: &Ctx<'_>, cmd: &[OsString]) -> ExitCode {
    let (_, mut plan) = cx.decide(cmd, Depth::Start);
    prepare_debug_dir(&mut plan);
    report::emit(&plan);
    if let Some(r) = report::refusal(&plan) {
        // The refusal is said once, on stderr (which `eval "$(ncclenv env)"` shows); the script only
        // stops the shell that evals it.
        report::refused(&r, cx.cfg.termination_log.as_deref());
        out(&format!("exit {}\n", exit::REFUSED));
        return ExitCode::from(exit::REFUSED);
    }
    out(&plan::shell_lines(&plan));
    ExitCode::SUCCESS
}

/// `ncclenv doctor [--json] [-- COMMAND]`: one typed report, rendered as text or JSON; exit 0, 1 or 78.
fn doctor(cx: &Ctx<'_>, json: bool, cmd: &[OsString]) -> ExitCode {
    let (snap, plan) = cx.decide(cmd, Depth::Doctor);
    let preflight = ncclenv::preflight::outlook(&snap, cx.cfg, &plan);
    let r = doctor::Report::new(&snap, &plan, &preflight);
    if json {
        out(&format!("{}\n", ncclenv::text::escape_json(&r.json_text())));
    } else {
        out(&r.text());
    }
    ExitCode::from(doctor::exit_code(&plan))
}

/// `ncclenv check [bootstrap|allreduce] [--json] [-- COMMAND]`: prove the environment the entrypoint would
/// give the command; where the entrypoint would refuse there is nothing to prove (exit 78, as the
/// entrypoint).
fn check(cx: &Ctx<'_>, mode: CheckMode, json: bool, cmd: &[OsString]) -> ExitCode {
    let (snap, mut plan) = cx.decide(cmd, Depth::Start);
    if let Some(refusal) = report::refusal(&plan) {
        report::refusal_line(&refusal);
        return ExitCode::from(exit::REFUSED);
    }
    // Under NCCLENV_DEBUG=1 the check's own NCCL writes its file too.
    prepare_debug_dir(&mut plan);
    let env = exec::final_env(cx.environ, &plan);
    let r = run_check(cx.cfg, mode, &env, &plan, &snap);
    if let Some(code) = interrupted(&r) {
        return code;
    }
    if json {
        out(&format!(
            "{}\n",
            ncclenv::text::escape_json(&r.to_json_text())
        ));
    } else {
        out(&ncclenv::check::render_check(&r));
    }
    if r.passed {
        ExitCode::SUCCESS
    } else if r.could_not_run() {
        ExitCode::from(exit::CHECK_UNAVAILABLE)
    } else {
        ExitCode::from(exit::CHECK_FAILED)
    }
}

/// `ncclenv install DIR`: copy this executable (and `ncclenv-check` beside it) into DIR and say what was
/// copied, one line per file on stdout. Exit 0, or 1 with the reason on stderr.
fn install(dir: &std::path::Path) -> ExitCode {
    // /proc/self/exe; without /proc (a bare chroot), argv[0] when it is a path.
    let exe = std::env::current_exe().ok().or_else(|| {
        std::env::args_os()
            .next()
            .map(std::path::PathBuf::from)
            .filter(|p| p.components().count() > 1)
    });
    let Some(exe) = exe else {
        report::exit_error(
            "install: cannot find this executable (no /proc/self/exe; run it by its path)",
            exit::FAILED,
        );
        return ExitCode::from(exit::FAILED);
    };
    match ncclenv::install::install(&exe, dir) {
        Ok(r) => {
            let mut text = String::new();
            for f in &r.files {
                text.push_str(&f.line());
                text.push('\n');
            }
            if let Some(h) = &r.helper_missing {
                text.push_str(&format!(
                    "no ncclenv-check beside {} ({} missing): only ncclenv installed; `ncclenv check` needs the helper beside it\n",
                    exe.display(),
                    h.display()
                ));
            }
            text.push_str(&format!(
                "run: {} -- COMMAND [ARGS...]\n",
                dir.join(ncclenv::install::NAMES[0]).display()
            ));
            out(&text);
            ExitCode::SUCCESS
        }
        Err(e) => {
            report::exit_error(&format!("install: {e}"), exit::FAILED);
            ExitCode::from(exit::FAILED)
        }
    }
}

/// `NCCLENV_DEBUG=1`: create the folder of NCCL's log files (NCCL's `fopen` does not create folders, and falls
/// back to stdout when it fails). When it cannot be created or written, NCCL_DEBUG_FILE is not set and the
/// `debug-dir-unwritable` warning says why; NCCL then logs to the command's stdout.
fn prepare_debug_dir(plan: &mut ncclenv::plan::Plan) {
    let Some(dir) = plan.debug_dir.clone() else {
        return;
    };
    let made = std::fs::create_dir_all(&dir)
        .map_err(|e| e.to_string())
        .and_then(|_| {
            nix::unistd::access(
                dir.as_str(),
                nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
            )
            .map_err(|e| format!("not writable: {e}"))
        });
    if let Err(e) = made {
        plan.changes.retain(|c| c.name != "NCCL_DEBUG_FILE");
        plan.debug_dir = None;
        plan.debug_files = Some("the command's stdout".into());
        plan.finding(
            Finding::DebugDirUnwritable,
            format!("cannot use {dir} for NCCL's log files ({e}); NCCL_DEBUG_FILE is not set, so NCCL logs to the command's stdout"),
            "set NCCLENV_DEBUG_DIR to a writable folder (a mounted volume keeps the files after the container ends)",
        );
    }
}

/// `ncclenv explain`: run in the glibc helper (`ncclenv-check`, found as for the check), which gets this
/// process's arguments and environment unchanged. The log reader is not linked into the static entrypoint,
/// which sits in front of every job and keeps its size budget.
fn explain_in_helper(
    cfg: &ncclenv::config::Config,
    args: &[OsString],
    environ: &Environ,
) -> ExitCode {
    let (helper, looked) = ncclenv::check::find_helper(cfg);
    let Some(helper) = helper else {
        report::exit_error(
            &format!(
                "explain runs in the helper ncclenv-check, which was not found (looked: {}); install it beside ncclenv or set NCCLENV_CHECK_HELPER",
                looked.join("; ")
            ),
            exit::USAGE,
        );
        return ExitCode::from(exit::USAGE);
    };
    let mut cmd: Vec<OsString> = vec![
        helper.clone().into_os_string(),
        OsString::from(ncclenv::explain::HELPER_WORD),
    ];
    cmd.extend(args.iter().cloned());
    let e = exec::exec_or_fallback(&cmd, environ, environ);
    // Only after execve said ENOENT (127) for a helper that is there: on a musl, scratch or distroless image
    // its glibc loader is missing (the message already names it, exec::missing_interpreter). Say what it
    // needs, as `check` does (check::child), and that this is a usage error of explain (2).
    if e.code == i32::from(exit::NOT_FOUND) && helper.is_file() {
        let why = e.message.strip_prefix("ncclenv: ").unwrap_or(&e.message);
        report::exit_error(
            &format!(
                "explain runs in the helper ncclenv-check, which cannot start here ({why}): ncclenv-check needs \
                 glibc; run explain in a glibc image or on a copy of the log"
            ),
            exit::USAGE,
        );
        return ExitCode::from(exit::USAGE);
    }
    exit_with(e, &cmd)
}

/// Run a check with ncclenv's choice as the expected address and the other candidate interfaces as repair
/// options.
fn run_check(
    cfg: &ncclenv::config::Config,
    mode: CheckMode,
    env: &Environ,
    plan: &ncclenv::plan::Plan,
    snap: &ncclenv::snapshot::Snapshot,
) -> ncclenv::check::CheckReport {
    let expected = plan
        .choice
        .as_ref()
        .and_then(|c| c.addr.map(|a| (c.ifname.as_str(), a)));
    let chosen = plan.choice.as_ref().map(|c| c.ifname.as_str());
    let others: Vec<String> = ncclenv::decide::interface::candidate_names(snap, cfg)
        .into_iter()
        .filter(|n| Some(n.as_str()) != chosen)
        .collect();
    ncclenv::check::run_check(cfg, mode, env, expected, &others)
}

/// When a signal interrupted the check: say so and exit 128 + N (the command does not run).
fn interrupted(r: &ncclenv::check::CheckReport) -> Option<ExitCode> {
    let (sig, code) = (r.interrupted_by()?, r.interrupted_exit_code()?);
    report::exit_error(
        &format!("interrupted by signal {sig} during the check"),
        code,
    );
    Some(ExitCode::from(code))
}

/// Raise the soft RLIMIT_MEMLOCK to the hard limit (no privilege needed; the command inherits it).
fn raise_memlock() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_MEMLOCK) {
        Ok((_, hard)) => {
            if let Err(e) = setrlimit(Resource::RLIMIT_MEMLOCK, hard, hard) {
                tracing::warn!("cannot raise RLIMIT_MEMLOCK to the hard limit: {e}");
            }
        }
        Err(e) => tracing::warn!("cannot read RLIMIT_MEMLOCK: {e}"),
    }
}

/// Exec `cmd` with `env` (with `inherited` when `env` is too big for the kernel, see
/// `exec::exec_or_fallback`); on failure report why and return its exit code.
fn exec_or_exit(cmd: &[OsString], env: &Environ, inherited: &Environ) -> ExitCode {
    exit_with(exec::exec_or_fallback(cmd, env, inherited), cmd)
}

/// Report why the exec of `cmd` failed (`e`, with the subcommand hint on a 127) and exit with its code.
fn exit_with(e: exec::ExecError, cmd: &[OsString]) -> ExitCode {
    let mut message = e
        .message
        .strip_prefix("ncclenv: ")
        .unwrap_or(&e.message)
        .to_string();
    if e.code == i32::from(exit::NOT_FOUND) {
        if let Some(hint) = cli::subcommand_as_command_hint(cmd) {
            message = format!("{message} ({hint})");
        }
    }
    report::exit_error(&message, e.code as u8);
    ExitCode::from(e.code as u8)
}

/// Write `text` to stdout and flush it, ignoring every error: a reader that went away (`ncclenv doctor |
/// head -1`) or a full disk must not turn into a panic.
fn out(text: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes());
    let _ = o.flush();
}
