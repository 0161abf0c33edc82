//! The check's orchestration against a fake libnccl.so.2 and libcuda.so.1 (tests/fake/*.c, built here with
//! `cc -shared -fPIC`): success, wrong sums, NCCL errors, hangs, crashes, a signal to the parent, repair, and that
//! no process outlives a check.

use crate::common;

use ncclenv::check::protocol::Step;
use ncclenv::check::{render_check, run_check, CheckReport, ErrorDetail};
use ncclenv::config::{CheckMode, Config};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Build the fake libraries once per test process; returns their folder.
pub(crate) fn fakes() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("fake-nccl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create fake dir");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake");
        for (c, so) in [
            ("fake_nccl.c", "libnccl.so.2"),
            ("fake_cuda.c", "libcuda.so.1"),
        ] {
            let st = Command::new("cc")
                .args(["-shared", "-fPIC", "-O1", "-o"])
                .arg(dir.join(so))
                .arg(src.join(c))
                .status()
                .expect("run cc");
            assert!(st.success(), "cc {c} failed");
        }
        dir
    })
}

/// A unique marker put into every helper's environment, to find leftover processes in /proc.
fn marker(name: &str) -> String {
    format!("ncclenv-test-{name}-{}", std::process::id())
}

fn setup(name: &str, mode: &str, gpus: u32) -> (Config, Vec<(OsString, OsString)>, PathBuf) {
    let dir = fakes();
    let xdir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("xchg-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&xdir);
    std::fs::create_dir_all(&xdir).expect("exchange dir");
    let cfg = Config {
        check_helper: Some(PathBuf::from(env!("CARGO_BIN_EXE_ncclenv-check"))),
        nccl_lib: Some(dir.join("libnccl.so.2")),
        check_mib: 1,
        check_timeout_s: 20,
        ..Config::default()
    };
    let mut env: Vec<(OsString, OsString)> = vec![
        ("PATH".into(), std::env::var_os("PATH").unwrap_or_default()),
        ("NCCLENV_CUDA_LIB".into(), dir.join("libcuda.so.1").into()),
        ("FAKE_NCCL_MODE".into(), mode.into()),
        ("FAKE_NCCL_GPUS".into(), gpus.to_string().into()),
        ("FAKE_NCCL_DIR".into(), xdir.clone().into()),
        ("NCCLENV_TEST_MARKER".into(), marker(name).into()),
    ];
    env.push(("NCCL_COMM_ID".into(), "10.255.255.1:1234".into()));
    (cfg, env, xdir)
}

/// Pids whose environment holds the marker, or whose process group is `pgid`.
fn leftovers(marker: &str, pgid: Option<i64>) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(env) = std::fs::read(e.path().join("environ")) {
            if env.windows(marker.len()).any(|w| w == marker.as_bytes()) {
                out.push(format!("{name} (marker)"));
                continue;
            }
        }
        if let (Some(pg), Ok(stat)) = (pgid, std::fs::read_to_string(e.path().join("stat"))) {
            // pid (comm) state ppid pgrp ...
            if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
                let f: Vec<&str> = rest.split_whitespace().collect();
                if f.get(2).and_then(|s| s.parse::<i64>().ok()) == Some(pg) {
                    out.push(format!(
                        "{name} (group {pg}, state {})",
                        f.first().unwrap_or(&"?")
                    ));
                }
            }
        }
    }
    out
}

fn assert_clean(name: &str, r: &CheckReport) {
    let pgid = r.detail.helper_pid.map(i64::from).filter(|p| *p > 1);
    let left = leftovers(&marker(name), pgid);
    assert!(
        left.is_empty(),
        "processes left behind: {left:?}\n{}",
        render_check(r)
    );
    assert_eq!(r.detail.processes_left, Some(false));
}

fn error(r: &CheckReport) -> Option<&ErrorDetail> {
    r.detail.error.as_ref()
}

#[test]
fn allreduce_two_ranks_passes_and_reports_bandwidth() {
    let (cfg, env, _) = setup("ok", "ok", 2);
    let ip: std::net::IpAddr = "127.0.0.1".parse().expect("ip");
    let r = run_check(&cfg, CheckMode::Allreduce, &env, Some(("lo", ip)), &[]);
    assert!(r.passed, "{}", render_check(&r));
    assert_eq!(r.mode, CheckMode::Allreduce);
    // As `ncclenv check --json` shows it.
    let json = r.to_json();
    let res = &json["result"];
    assert_eq!(res["nranks"], 2);
    assert_eq!(res["bytes"], 1 << 20);
    let alg = res["algbw_gbps"].as_f64().expect("algbw");
    let bus = res["busbw_gbps"].as_f64().expect("busbw");
    assert!(
        (bus - alg).abs() < 1e-9,
        "busbw = algbw·2(n−1)/n = algbw for n=2"
    );
    assert!(r.summary.contains("busbw"), "{}", r.summary);
    assert!(r.extra_env.is_empty());
    assert!(render_check(&r).contains("PASSED"));
    assert_clean("ok", &r);
}

#[test]
fn allreduce_is_capped_by_visible_gpus_and_one_gpu_is_noted() {
    let (mut cfg, env, _) = setup("one", "ok", 1);
    cfg.check_gpus = 4;
    let r = run_check(&cfg, CheckMode::Allreduce, &env, None, &[]);
    assert!(r.passed, "{}", render_check(&r));
    assert_eq!(r.detail.result.as_ref().and_then(|r| r.nranks), Some(1));
    assert!(
        r.summary.contains("nothing crossed between GPUs"),
        "{}",
        r.summary
    );
}

#[test]
fn three_ranks_sum_exactly() {
    let (mut cfg, env, _) = setup("three", "ok", 8);
    cfg.check_gpus = 3;
    let r = run_check(&cfg, CheckMode::Allreduce, &env, None, &[]);
    assert!(r.passed, "{}", render_check(&r));
    assert_eq!(r.detail.result.as_ref().and_then(|r| r.nranks), Some(3));
}

#[test]
fn no_gpu_falls_back_to_bootstrap() {
    let (cfg, env, _) = setup("nogpu", "ok", 0);
    let r = run_check(&cfg, CheckMode::Allreduce, &env, None, &[]);
    assert!(r.passed, "{}", render_check(&r));
    assert_eq!(r.mode, CheckMode::Bootstrap);
    assert!(r.summary.contains("fell back"), "{}", r.summary);
}

#[test]
fn wrong_sum_is_detected() {
    let (cfg, env, _) = setup("wrong", "wrong_sum", 2);
    let r = run_check(&cfg, CheckMode::Allreduce, &env, None, &[]);
    assert!(!r.passed);
    assert_eq!(error(&r).map(|e| e.stage()), Some("verify"));
    assert!(
        r.summary.contains("wrong allreduce result"),
        "{}",
        r.summary
    );
    assert!(r.summary.contains("1 of 262144"), "{}", r.summary);
    assert_clean("wrong", &r);
}

#[test]
fn init_error_reports_code_and_text() {
    let (cfg, env, _) = setup("initerr", "init_error", 2);
    let r = run_check(&cfg, CheckMode::Allreduce, &env, None, &[]);
    assert!(!r.passed);
    assert_eq!(error(&r).and_then(|e| e.code()), Some(2));
    assert!(r.summary.contains("ncclSystemError"), "{}", r.summary);
    assert!(
        r.summary.contains("unhandled system error"),
        "{}",
        r.summary
    );
    assert!(r.summary.contains("fake: socket connect"), "{}", r.summary);
    assert_clean("initerr", &r);
}

#[test]
fn bootstrap_error_is_explained() {
    let (cfg, mut env, _) = setup("booterr", "bootstrap_error", 2);
    env.push(("FAKE_NCCL_VERSION".into(), "22105".into()));
    env.push(("FAKE_NCCL_CODE".into(), "3".into()));
    let r = run_check(&cfg, CheckMode::Bootstrap, &env, None, &[]);
    assert!(!r.passed);
    assert_eq!(error(&r).and_then(|e| e.code()), Some(3));
    let why = error(&r).and_then(|e| e.explanation()).unwrap_or("");
    assert!(why.contains("no socket interface"), "{why}");
    assert!(render_check(&r).contains("remedy"));
}

#[test]
fn bootstrap_address_is_compared_with_the_expected_one() {
    let (cfg, mut env, _) = setup("addr", "ok", 2);
    env.push(("FAKE_NCCL_ADDR".into(), "10.1.2.3".into()));
    let good: std::net::IpAddr = "10.1.2.3".parse().expect("ip");
    let r = run_check(&cfg, CheckMode::Bootstrap, &env, Some(("eth0", good)), &[]);
    assert!(r.passed, "{}", render_check(&r));
    assert!(r.summary.contains("10.1.2.3"), "{}", r.summary);
    let bad: std::net::IpAddr = "10.9.9.9".parse().expect("ip");
    let r = run_check(&cfg, CheckMode::Bootstrap, &env, Some(("eth1", bad)), &[]);
    assert!(!r.passed);
    assert!(r.summary.contains("ncclenv chose eth1"), "{}", r.summary);
}

#[test]
fn hanging_rank_is_killed_at_the_deadline_and_nothing_is_left() {
    let (mut cfg, env, _) = setup("hang", "hang", 2);
    cfg.check_timeout_s = 2;
    let t = Instant::now();
    let r = run_check(&cfg, CheckMode::Allreduce, &env, None, &[]);
    let took = t.elapsed();
    assert!(!r.passed);
    // The fake rank hangs forever: only the deadline ends the check. It must not end before the deadline,
    // and it ends at all (the bound is wide: a loaded machine is slow, not 30 × slow).
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(60),
        "took {took:?}"
    );
    assert!(r.summary.contains("HUNG"), "{}", r.summary);
    let hang = r.detail.hang.as_ref().expect("hang");
    assert_eq!(hang.step, Some(Step::Collective));
    assert!(hang.likely_causes.contains("ACS"));
    assert_clean("hang", &r);
}

#[test]
fn the_deadline_bounds_the_whole_check_with_repair() {
    // Every attempt hangs: without one overall deadline, 1 + 3 retries would take 4 × the timeout.
    let (mut cfg, env, _) = setup("hangrep", "hang", 2);
    cfg.check_timeout_s = 10;
    cfg.check_repair = true;
    let t = Instant::now();
    let r = run_check(&cfg, CheckMode::Allreduce, &env, None, &[]);
    let took = t.elapsed();
    assert!(!r.passed);
    // A deadline per attempt would take at least 5 s + 3 × 10 s (the first attempt gets half); one deadline
    // for the whole check ends it after 10 s. The bound sits between, with room for a loaded machine; the
    // record of the retry the deadline cut off (below) is the event that proves it.
    assert!(
        took >= Duration::from_secs(10) && took < Duration::from_secs(25),
        "took {took:?}: the deadline is for the whole check"
    );
    let attempts = r.detail.repair_attempts.clone().unwrap_or_default();
    assert!(
        !attempts.is_empty(),
        "the first hang left time to retry: {}",
        r.to_json()
    );
    assert!(
        attempts.iter().any(|a| a.summary.contains("deadline")),
        "{}",
        r.to_json()
    );
    assert_clean("hangrep", &r);
}

#[test]
fn crashing_rank_is_reported() {
    let (cfg, env, _) = setup("crash", "crash", 2);
    let r = run_check(&cfg, CheckMode::Allreduce, &env, None, &[]);
    assert!(!r.passed);
    assert!(r.summary.contains("SIGSEGV"), "{}", r.summary);
    assert!(r.summary.contains("rank 1"), "{}", r.summary);
    assert_clean("crash", &r);
}

#[test]
fn repair_finds_shm_disable() {
    let (mut cfg, env, _) = setup("repair", "needs_shm_disable", 2);
    cfg.check_repair = true;
    let r = run_check(
        &cfg,
        CheckMode::Allreduce,
        &env,
        None,
        &["eth1".to_string()],
    );
    assert!(r.passed, "{}", render_check(&r));
    assert_eq!(r.extra_env.len(), 1);
    assert_eq!(r.extra_env[0].name, "NCCL_SHM_DISABLE");
    assert_eq!(r.extra_env[0].value, "1");
    assert_eq!(
        r.to_json()["extra_env"][0]["name"],
        "NCCL_SHM_DISABLE",
        "--json shows the repair"
    );
    assert!(render_check(&r).contains("repair:"));
    // Without repair the same failure is explained (/dev/shm), and nothing is proposed.
    cfg.check_repair = false;
    let r = run_check(&cfg, CheckMode::Allreduce, &env, None, &[]);
    assert!(!r.passed);
    assert!(r.extra_env.is_empty());
    let why = error(&r).and_then(|e| e.explanation()).unwrap_or("");
    assert!(why.contains("/dev/shm"), "{why}");
}

#[test]
fn repair_never_proposes_p2p_disable_without_a_pass() {
    let (mut cfg, env, _) = setup("norepair", "init_error", 2);
    cfg.check_repair = true;
    let r = run_check(&cfg, CheckMode::Allreduce, &env, None, &[]);
    assert!(!r.passed);
    assert!(r.extra_env.is_empty());
    assert_eq!(r.detail.repair_attempts.as_ref().map(|a| a.len()), Some(3));
}

#[test]
fn missing_helper_and_missing_library_are_reported() {
    let (mut cfg, env, _) = setup("missing", "ok", 2);
    cfg.check_helper = Some(PathBuf::from("/nonexistent/ncclenv-check"));
    // An explicit helper is the only candidate: nothing else is looked for, so this holds on any machine.
    let r = run_check(&cfg, CheckMode::Bootstrap, &env, None, &[]);
    assert!(!r.passed, "{}", render_check(&r));
    assert!(r.detail.helper.is_none(), "{}", r.to_json());
    assert!(r.summary.contains("not found"), "{}", r.summary);
    assert!(
        r.summary.contains("/nonexistent/ncclenv-check"),
        "the places looked are named: {}",
        r.summary
    );
    let (mut cfg, env, _) = setup("nolib", "ok", 2);
    cfg.nccl_lib = Some(PathBuf::from("/nonexistent/libnccl.so.2"));
    let env: Vec<_> = env.into_iter().filter(|(k, _)| k != "PATH").collect();
    let r = run_check(&cfg, CheckMode::Bootstrap, &env, None, &[]);
    // An explicit NCCLENV_NCCL_LIB is the only candidate: no other library may stand in for it.
    assert!(!r.passed, "{}", render_check(&r));
    {
        let looked = error(&r).map(|e| e.looked().len()).unwrap_or(0);
        assert_eq!(looked, 1, "{}", render_check(&r));
        assert!(
            r.summary.contains("/nonexistent/libnccl.so.2"),
            "{}",
            r.summary
        );
        // The places looked are printed once, and the remedy names NCCLENV_NCCL_LIB.
        let text = render_check(&r);
        assert_eq!(
            text.matches("/nonexistent/libnccl.so.2").count(),
            1,
            "{text}"
        );
        assert!(text.contains("NCCLENV_NCCL_LIB"), "{text}");
    }
}

/// An explicit `--check-helper PATH` that does not exist is an error naming it, as an explicit
/// `NCCLENV_NCCL_LIB` is: no other helper (here one in `NCCLENV_CHECK_HELPER` that leaves a mark) stands in.
#[test]
fn an_explicit_helper_that_is_missing_is_not_replaced() {
    let tmp = common::TempDir::new("explicit-helper");
    let (helper, mark) = marking_helper(&tmp);
    std::fs::create_dir_all(tmp.join("empty")).expect("mkdir");
    let o = Command::new(env!("CARGO_BIN_EXE_ncclenv"))
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("NCCLENV_CHECK_HELPER", &helper)
        .env("NCCLENV_SYSFS", tmp.join("empty"))
        .env("NCCLENV_DEVFS", tmp.join("empty"))
        .args([
            "check",
            "--check-helper",
            "/nonexistent/ncclenv-check",
            "--check-timeout",
            "10",
        ])
        .output()
        .expect("run ncclenv check");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!mark.exists(), "another helper ran:\n{text}");
    assert!(!o.status.success(), "{text}");
    assert!(text.contains("/nonexistent/ncclenv-check"), "{text}");
    assert!(text.contains("--check-helper"), "{text}");
}

/// `Off` runs nothing: a helper that would leave a mark is never started, and the report says "off" without
/// inventing a result.
#[test]
fn off_does_nothing() {
    let dir = common::TempDir::new("checkoff");
    let mark = dir.join("helper-ran");
    let helper = dir.join("ncclenv-check");
    common::exe::write(
        &helper,
        format!("#!/bin/sh\ntouch '{}'\nexit 0\n", mark.display()),
        0o755,
    );
    let cfg = Config {
        check_helper: Some(helper.clone()),
        ..Config::default()
    };
    let r = run_check(
        &cfg,
        CheckMode::Off,
        ncclenv::environ::Environ::default(),
        None,
        &["eth1".to_string()],
    );
    assert!(r.passed);
    assert_eq!(r.mode, CheckMode::Off);
    assert!(r.extra_env.is_empty());
    assert_eq!(r.to_json(), serde_json::json!({"mode": "off"}));
    assert!(!mark.exists(), "the helper ran for --check off");
    // Control: the same helper does run (and leaves its mark) for a bootstrap check.
    let r = run_check(
        &cfg,
        CheckMode::Bootstrap,
        ncclenv::environ::Environ::default(),
        None,
        &[],
    );
    assert!(mark.exists(), "the marking helper never ran: {}", r.summary);
}

/// Entry point of the driver process of `sigterm_to_parent_kills_the_check`, not a test: ignored, so that a
/// normal run neither runs nor counts it; the parent runs it with `--ignored --exact check_fake::driver_entry`.
#[test]
#[ignore = "helper entry point of sigterm_to_parent_kills_the_check, run in a child process"]
fn driver_entry() {
    if std::env::var_os("NCCLENV_TEST_DRIVER").is_none() {
        return;
    }
    let (mut cfg, env, _) = setup("sigterm", "hang", 2);
    cfg.check_timeout_s = 60;
    let r = run_check(&cfg, CheckMode::Allreduce, &env, None, &[]);
    println!("DRIVER-REPORT {}", r.to_json_text());
    std::process::exit(if r.interrupted_by().is_some() { 0 } else { 1 });
}

#[test]
fn sigterm_to_parent_kills_the_check() {
    let exe = std::env::current_exe().expect("test exe");
    let child = Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            &common::test_name(module_path!(), "driver_entry"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env("NCCLENV_TEST_DRIVER", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn driver");
    let pid = child.id();
    // The driver runs in a process with another pid; its marker is built from that pid.
    let m = format!("ncclenv-test-sigterm-{pid}");
    let t = Instant::now();
    // Wait until both ranks are running (helper + 2 ranks carry the marker).
    // (The driver installs its signal handlers before it spawns the helper, so once the ranks run, SIGTERM is
    // caught.)
    while leftovers(&m, None).len() < 3 && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(leftovers(&m, None).len() >= 3, "ranks never started");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let out = child.wait_with_output().expect("driver output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "driver: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("DRIVER-REPORT ").map(|(_, j)| j))
        .expect("report line");
    let d: serde_json::Value = serde_json::from_str(line).expect("json");
    // The check's own deadline is 60 s: a report of SIGTERM (not a hang) proves the signal ended it.
    assert_eq!(d["interrupted_by"], 15);
    assert!(
        d["summary"].as_str().unwrap_or("").contains("SIGTERM"),
        "{d}"
    );
    let left = leftovers(&m, d["helper_pid"].as_i64());
    assert!(left.is_empty(), "left behind: {left:?}");
}

// ---------------------------------------------------------------------------------------------------------
// The check through the binary: the entrypoint (`NCCLENV_CHECK=…`) and `ncclenv check`, in a namespace with
// only `lo`, where ncclenv chooses 127.0.0.1: the address the fake library puts into its unique id.

/// `ncclenv ARGS…` in `ns` with the fake libraries and `vars`; its environment carries the marker of `name`.
fn ncclenv_cmd(
    ns: &common::Netns,
    name: &str,
    mode: &str,
    vars: &[(&str, &str)],
    args: &[&str],
) -> (Command, common::TempDir) {
    let dir = fakes();
    let tmp = common::TempDir::new(name);
    std::fs::create_dir_all(tmp.join("empty")).expect("mkdir");
    let mut c = ns.command(env!("CARGO_BIN_EXE_ncclenv"));
    c.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("NCCLENV_NCCL_LIB", dir.join("libnccl.so.2"))
        .env("NCCLENV_CUDA_LIB", dir.join("libcuda.so.1"))
        .env("NCCLENV_CHECK_HELPER", env!("CARGO_BIN_EXE_ncclenv-check"))
        .env("NCCLENV_CHECK_MIB", "1")
        .env("NCCLENV_SYSFS", tmp.join("empty"))
        .env("NCCLENV_DEVFS", tmp.join("empty"))
        .env("NCCLENV_SHM_MIN", "0")
        .env("FAKE_NCCL_MODE", mode)
        .env("FAKE_NCCL_GPUS", "2")
        .env("FAKE_NCCL_DIR", tmp.path.clone())
        .env("NCCLENV_TEST_MARKER", marker(name))
        .args(args);
    for (k, v) in vars {
        c.env(k, v);
    }
    (c, tmp)
}

/// A helper that only leaves a mark (and reports nothing): whether a check was started at all.
fn marking_helper(tmp: &common::TempDir) -> (PathBuf, PathBuf) {
    let mark = tmp.join("helper-ran");
    let helper = tmp.join("marking-helper");
    common::exe::write(
        &helper,
        format!("#!/bin/sh\ntouch '{}'\n", mark.display()),
        0o755,
    );
    (helper, mark)
}

/// SIGTERM (SIGINT) reaching ncclenv while its check runs: exit 128+15 (128+2), the command never runs and
/// no process of the check is left; the same for `ncclenv check`. The signal is sent once the ranks run (an
/// event, not a sleep).
#[test]
fn a_signal_during_the_check_exits_128_plus_n() {
    if !common::require_root() {
        return;
    }
    use nix::sys::signal::Signal;
    for (name, sig, args, want) in [
        (
            "sigep",
            Signal::SIGTERM,
            vec!["--", "sh", "-c", "echo ran"],
            143,
        ),
        (
            "sigint",
            Signal::SIGINT,
            vec!["--", "sh", "-c", "echo ran"],
            130,
        ),
        ("sigchk", Signal::SIGTERM, vec!["check", "allreduce"], 143),
    ] {
        let ns = common::Netns::new("chksig");
        let (mut c, _tmp) = ncclenv_cmd(
            &ns,
            name,
            "hang",
            &[
                ("NCCLENV_CHECK", "allreduce"),
                ("NCCLENV_CHECK_TIMEOUT", "120"),
            ],
            &args,
        );
        let child = c
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn ncclenv");
        let m = marker(name);
        let t = Instant::now();
        // ncclenv itself, the helper and two ranks carry the marker.
        while leftovers(&m, None).len() < 4 && t.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            leftovers(&m, None).len() >= 4,
            "{name}: the ranks never started: {:?}",
            leftovers(&m, None)
        );
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).expect("kill");
        let o = child.wait_with_output().expect("wait ncclenv");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(want), "{name}: {err}");
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains("ran"),
            "{name}: the command ran"
        );
        assert!(err.contains("interrupted by signal"), "{name}: {err}");
        let left = leftovers(&m, None);
        assert!(left.is_empty(), "{name}: left behind: {left:?}");
    }
}

/// `NCCLENV_CHECK_REPAIR=1`: the setting with which the failed allreduce passed reaches the command's
/// environment; without repair the command runs without it.
#[test]
fn a_check_repair_reaches_the_commands_environment() {
    if !common::require_root() {
        return;
    }
    let ns = common::Netns::new("chkrep");
    let run = |vars: &[(&str, &str)]| {
        let (mut c, _tmp) = ncclenv_cmd(
            &ns,
            "repairep",
            "needs_shm_disable",
            vars,
            &["--", "/usr/bin/env"],
        );
        c.output().expect("run ncclenv")
    };
    let o = run(&[
        ("NCCLENV_CHECK", "allreduce"),
        ("NCCLENV_CHECK_REPAIR", "1"),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        out.lines().any(|l| l == "NCCL_SHM_DISABLE=1"),
        "{out}\n{err}"
    );
    assert!(
        err.contains("NCCL_SHM_DISABLE=1"),
        "the repair is logged: {err}"
    );

    let o = run(&[("NCCLENV_CHECK", "allreduce")]);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!out.contains("NCCL_SHM_DISABLE"), "{out}");
    assert!(err.contains("check failed"), "{err}");
}

/// Hands off (here `NCCL_COMM_ID`): the entrypoint does not start `NCCLENV_CHECK` and says so; the command
/// runs. Control: without it the same helper is started.
#[test]
fn the_entrypoint_says_when_it_skips_the_check() {
    if !common::require_root() {
        return;
    }
    let ns = common::Netns::new("chkoff");
    let tmp = common::TempDir::new("chkoff");
    let (helper, mark) = marking_helper(&tmp);
    let helper = helper.display().to_string();
    let run = |extra: &[(&str, &str)]| {
        let mut vars = vec![
            ("NCCLENV_CHECK", "bootstrap"),
            ("NCCLENV_CHECK_HELPER", helper.as_str()),
        ];
        vars.extend_from_slice(extra);
        let (mut c, _t) = ncclenv_cmd(&ns, "skipep", "ok", &vars, &["--", "sh", "-c", "echo ran"]);
        c.output().expect("run ncclenv")
    };
    let o = run(&[("NCCL_COMM_ID", "127.0.0.1:29500")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "ran");
    assert!(err.contains("NCCLENV_CHECK skipped"), "{err}");
    assert!(
        !mark.exists(),
        "the check ran although ncclenv is hands off"
    );
    let o = run(&[]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "ran");
    assert!(mark.exists(), "control: the helper never ran");
}

/// `ncclenv check` where the entrypoint would refuse (a 2-node job with only `lo`): exit 78 with the refusal,
/// no check started; for one node the check runs.
#[test]
fn ncclenv_check_refuses_where_the_entrypoint_would() {
    if !common::require_root() {
        return;
    }
    let ns = common::Netns::new("chkref");
    let tmp = common::TempDir::new("chkref");
    let (helper, mark) = marking_helper(&tmp);
    let helper = helper.display().to_string();
    let run = |nnodes: &str| {
        let (mut c, _t) = ncclenv_cmd(
            &ns,
            "refchk",
            "ok",
            &[
                ("NCCLENV_CHECK_HELPER", helper.as_str()),
                ("NCCLENV_NNODES", nnodes),
            ],
            &["check", "bootstrap"],
        );
        c.output().expect("run ncclenv check")
    };
    let o = run("2");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(78), "{err}");
    assert!(err.contains("refused (exit 78)"), "{err}");
    assert!(
        !mark.exists(),
        "the check ran although the entrypoint would refuse"
    );
    let o = run("1");
    assert_eq!(
        o.status.code(),
        Some(1),
        "the marking helper reports nothing: a failed check: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(mark.exists(), "control: the helper never ran");
}
