//! What ncclenv writes on stderr, as a user and a log pipeline see it: the built binary as the entrypoint in a
//! throwaway network namespace (a Docker-bridge-like `eth0` with the default route).
//!
//! - Short by default: on a plain host at most two lines of at most 200 characters; reasons appear with
//!   `NCCLENV_LOG=debug`, never Rust's debug forms.
//! - `NCCLENV_LOG_FORMAT=json`: every stderr line parses as one JSON object; the summary object's variables
//!   are exactly what the command received; findings carry `code` and `remedy`; refusals and usage errors are
//!   JSON too.
//! - The termination log: on exit 78 the reason is written to `NCCLENV_TERMINATION_LOG`.
//! - The README's "What you see" samples are this layout's real output, line for line.
//!
//! Needs root (namespaces); skips without it, fails under `CI=true`.

use crate::common;

use common::{Netns, TempDir};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_ncclenv");
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A Docker-bridge-like layout: `eth0` 172.17.0.2/16 with the default route.
fn plain() -> Netns {
    let ns = Netns::new("log");
    ns.plug("eth0");
    ns.addr("eth0", "172.17.0.2/16");
    ns.route("default via 172.17.0.1 dev eth0");
    ns
}

/// `ncclenv ARGS` in `ns` with a cleared environment: PATH, empty sysfs/devfs roots (no RDMA, no GPU from
/// the machine the tests run on), a `/dev/shm` need of 1 MiB (the host's shm size does not matter), and
/// `vars`.
fn run(ns: &Netns, tmp: &TempDir, vars: &[(&str, &str)], args: &[&str]) -> Output {
    let sys = tmp.join("sys");
    let dev = tmp.join("dev");
    let _ = std::fs::create_dir_all(&sys);
    let _ = std::fs::create_dir_all(&dev);
    let mut c = ns.command(BIN);
    c.env_clear()
        .env("PATH", PATH)
        .env("NCCLENV_SYSFS", &sys)
        .env("NCCLENV_DEVFS", &dev)
        .env("NCCLENV_SHM_MIN", "1")
        .envs(vars.iter().copied())
        .args(args);
    c.output()
        .unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `env -0` output → map.
fn env0(out: &[u8]) -> BTreeMap<String, String> {
    out.split(|b| *b == 0)
        .filter_map(|e| {
            let s = String::from_utf8_lossy(e);
            s.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// Every stderr line as JSON; panics naming the first line that is not one JSON object.
fn json_lines(stderr: &str) -> Vec<Value> {
    stderr
        .lines()
        .map(|l| {
            let v: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}"));
            assert!(v.is_object(), "not an object: {l}");
            assert_eq!(v["program"], "ncclenv", "{l}");
            assert!(
                ["error", "warn", "info", "debug"].contains(&v["level"].as_str().unwrap_or("")),
                "{l}"
            );
            assert!(v["message"].is_string(), "{l}");
            // RFC 3339, UTC, milliseconds: 2026-12-02T18:52:34.123Z.
            let t = v["time"].as_str().unwrap_or_default();
            let b = t.as_bytes();
            assert!(
                b.len() == 24
                    && b[4] == b'-'
                    && b[10] == b'T'
                    && b[19] == b'.'
                    && t.ends_with('Z')
                    && t[..4].parse::<u32>().is_ok_and(|y| y >= 2024),
                "time {t:?} in {l}"
            );
            assert!(
                ["ERROR", "WARNING", "INFO", "DEBUG"]
                    .contains(&v["severity"].as_str().unwrap_or("")),
                "{l}"
            );
            assert!(v["kind"].is_string(), "{l}");
            v
        })
        .collect()
}

#[test]
fn a_plain_host_gets_at_most_two_short_lines() {
    if !common::require_root() {
        return;
    }
    let ns = plain();
    let tmp = TempDir::new("logshort");
    let o = run(&ns, &tmp, &[], &["--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let err = text(&o.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert!(!lines.is_empty() && lines.len() <= 2, "{err}");
    for l in &lines {
        assert!(l.chars().count() <= 200, "{} chars: {l}", l.chars().count());
    }
    // The summary names the interface and every variable, in brief: no reasons, no NCCL file names.
    let summary = lines[lines.len() - 1];
    for want in [
        "eth0",
        "172.17.0.2",
        "NCCL_SOCKET_IFNAME=eth0",
        "NCCL_SOCKET_FAMILY=AF_INET",
        "NCCL_IB_DISABLE=1",
    ] {
        assert!(summary.contains(want), "{want} missing: {summary}");
    }
    for reason in [".cc", "metric", "because", "ncclIbInitDevices"] {
        assert!(!summary.contains(reason), "{reason} in {summary}");
    }

    // A repair: the warning (what, why, what to do, [code]) and the summary; still two lines.
    let o = run(
        &ns,
        &tmp,
        &[("NCCL_SOCKET_IFNAME", "ens6")],
        &["--", "true"],
    );
    let err = text(&o.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines[0].starts_with("ncclenv: warning: "), "{err}");
    assert!(lines[0].contains("[inherited-ifname-repaired]"), "{err}");
    for l in &lines {
        assert!(l.chars().count() <= 200, "{} chars: {l}", l.chars().count());
    }
    // The whole finding, its remedy included, at the debug level.
    let o = run(
        &ns,
        &tmp,
        &[("NCCL_SOCKET_IFNAME", "ens6"), ("NCCLENV_LOG", "debug")],
        &["--", "true"],
    );
    assert!(
        text(&o.stderr).contains("[inherited-ifname-repaired] (what to do: "),
        "{}",
        text(&o.stderr)
    );

    // debug: the reason of every variable, and the probed facts in plain words.
    let o = run(&ns, &tmp, &[("NCCLENV_LOG", "debug")], &["--", "true"]);
    let err = text(&o.stderr);
    assert!(
        err.lines().any(
            |l| l.starts_with("ncclenv: debug: NCCL_SOCKET_IFNAME=eth0: ")
                && l.contains("default route")
        ),
        "{err}"
    );
    for rust in ["Some(", "None", "Inet", "[\""] {
        assert!(!err.contains(rust), "{rust} in:\n{err}");
    }
}

#[test]
fn json_lines_parse_one_by_one_and_match_what_the_command_got() {
    if !common::require_root() {
        return;
    }
    let ns = plain();
    let tmp = TempDir::new("logjson");
    let vars = [
        ("NCCLENV_LOG_FORMAT", "json"),
        ("NCCLENV_LOG", "debug"),
        // A repair: one finding.
        ("NCCL_SOCKET_IFNAME", "ens6"),
    ];
    let o = run(&ns, &tmp, &vars, &["--", "env", "-0"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let got = env0(&o.stdout);
    let recs = json_lines(&text(&o.stderr));

    let summaries: Vec<&Value> = recs.iter().filter(|r| r["kind"] == "summary").collect();
    assert_eq!(summaries.len(), 1, "{recs:?}");
    let s = summaries[0];
    assert_eq!(s["level"], "info");
    assert_eq!(s["interface"], "eth0");
    assert_eq!(s["address"], "172.17.0.2");
    assert_eq!(s["hands_off"], false);
    let set = s["set"].as_object().expect("set is an object");
    assert!(!set.is_empty());
    for (k, v) in set {
        assert_eq!(
            got.get(k).map(String::as_str),
            v.as_str(),
            "{k}: the summary says {v}, the command got {:?}",
            got.get(k)
        );
    }
    for k in common::OURS {
        if got.contains_key(*k) {
            assert!(
                set.contains_key(*k),
                "{k} reached the command but is not in the summary"
            );
        }
    }

    let findings: Vec<&Value> = recs.iter().filter(|r| r["kind"] == "finding").collect();
    assert_eq!(findings.len(), 1, "{recs:?}");
    assert_eq!(findings[0]["level"], "warn");
    assert_eq!(findings[0]["code"], "inherited-ifname-repaired");
    assert!(findings[0]["remedy"]
        .as_str()
        .is_some_and(|r| !r.is_empty()));
    assert_eq!(findings[0]["strict"], true);

    // Debug: one change record per variable set, each with its reason.
    let changes: Vec<&Value> = recs.iter().filter(|r| r["kind"] == "change").collect();
    assert_eq!(changes.len(), set.len(), "{changes:?}");
    for c in &changes {
        assert_eq!(c["level"], "debug");
        assert!(c["reason"].as_str().is_some_and(|r| !r.is_empty()), "{c}");
    }
    let repaired = changes
        .iter()
        .find(|c| c["variable"] == "NCCL_SOCKET_IFNAME")
        .expect("NCCL_SOCKET_IFNAME change");
    assert_eq!(repaired["replaced"], "ens6");
    assert_eq!(repaired["value"], "eth0");

    // Without NCCLENV_LOG_FORMAT: text, no JSON.
    let o = run(&ns, &tmp, &[], &["--", "true"]);
    assert!(text(&o.stderr).starts_with("ncclenv: "), "{o:?}");
}

#[test]
fn refusals_and_usage_errors_are_json_too_and_the_refusal_reaches_the_termination_log() {
    if !common::require_root() {
        return;
    }
    // A two-node job in a namespace with only `lo`: NCCL would certainly fail, ncclenv refuses.
    let ns = Netns::new("logrefuse");
    let tmp = TempDir::new("logrefuse");
    let tlog = tmp.join("termination-log");
    let tl = tlog.to_string_lossy().into_owned();
    let vars = [
        ("NCCLENV_LOG_FORMAT", "json"),
        ("NCCLENV_NNODES", "2"),
        ("NCCLENV_TERMINATION_LOG", tl.as_str()),
    ];
    let marker = tmp.join("ran");
    let m = marker.to_string_lossy().into_owned();
    let o = run(&ns, &tmp, &vars, &["--", "touch", &m]);
    assert_eq!(o.status.code(), Some(78), "{o:?}");
    assert!(!marker.exists(), "the command ran");
    let recs = json_lines(&text(&o.stderr));
    let r = recs
        .iter()
        .find(|r| r["kind"] == "refusal")
        .unwrap_or_else(|| panic!("no refusal record: {recs:?}"));
    assert_eq!(r["level"], "error");
    assert_eq!(r["exit_code"], 78);
    assert!(r["remedy"].as_str().is_some_and(|s| !s.is_empty()));
    let reason = r["message"].as_str().unwrap_or_default().to_string();
    // Nothing is reported as set for a command that does not run.
    assert!(!recs.iter().any(|r| r["kind"] == "summary"), "{recs:?}");

    // The termination log holds the same reason, in the text form people read in `kubectl describe pod`.
    let written = std::fs::read_to_string(&tlog).expect("termination log written");
    assert!(
        written.starts_with("ncclenv: refused (exit 78): "),
        "{written}"
    );
    assert!(written.contains(&reason), "{written}");
    assert!(written.len() <= 4096);

    // The same through `ncclenv env` (eval'd by a launch script): exit 78, and the log is rewritten.
    std::fs::write(&tlog, "old").expect("write");
    let o = run(&ns, &tmp, &vars, &["env"]);
    assert_eq!(o.status.code(), Some(78), "{o:?}");
    let written = std::fs::read_to_string(&tlog).expect("termination log written");
    assert!(
        written.starts_with("ncclenv: refused (exit 78): "),
        "{written}"
    );

    // A job that runs leaves an existing termination log alone.
    let ok = plain();
    std::fs::write(&tlog, "untouched").expect("write");
    let mut with_tl = vars.to_vec();
    with_tl.retain(|(k, _)| *k != "NCCLENV_NNODES");
    let o = run(&ok, &tmp, &with_tl, &["--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(
        std::fs::read_to_string(&tlog).ok().as_deref(),
        Some("untouched")
    );

    // A usage error under NCCLENV_LOG_FORMAT=json: one JSON line, exit 2.
    let o = run(
        &ok,
        &tmp,
        &[("NCCLENV_LOG_FORMAT", "json"), ("NCCLENV_LOG", "loud")],
        &["--", "true"],
    );
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let recs = json_lines(&text(&o.stderr));
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0]["kind"], "exit");
    assert_eq!(recs[0]["exit_code"], 2);
    assert!(recs[0]["message"]
        .as_str()
        .unwrap_or_default()
        .contains("NCCLENV_LOG"));

    // A missing command: 127, JSON.
    let o = run(
        &ok,
        &tmp,
        &[("NCCLENV_LOG_FORMAT", "json")],
        &["--", "ncclenv-no-such-command"],
    );
    assert_eq!(o.status.code(), Some(127), "{o:?}");
    let recs = json_lines(&text(&o.stderr));
    let exit = recs
        .iter()
        .find(|r| r["kind"] == "exit")
        .expect("exit record");
    assert_eq!(exit["exit_code"], 127);
}

/// The ```text blocks of the README's "What you see" section.
fn readme_samples() -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let start = readme
        .find("\n## What you see\n")
        .expect("a What you see section");
    let end = readme[start + 1..]
        .find("\n## ")
        .map_or(readme.len(), |e| start + 1 + e);
    readme[start..end]
        .split("```text\n")
        .skip(1)
        .filter_map(|b| b.split("```").next().map(String::from))
        .collect()
}

#[test]
fn the_readme_samples_are_real_output() {
    if !common::require_root() {
        return;
    }
    let ns = plain();
    let tmp = TempDir::new("logreadme");
    let samples = readme_samples();
    assert!(samples.len() >= 2, "{samples:?}");
    let o = run(&ns, &tmp, &[], &["--", "true"]);
    assert_eq!(
        text(&o.stderr),
        samples[0],
        "the README's summary sample drifted"
    );
    let o = run(
        &ns,
        &tmp,
        &[("NCCL_SOCKET_IFNAME", "ens6")],
        &["--", "true"],
    );
    let err = text(&o.stderr);
    let first = err.lines().next().unwrap_or_default();
    assert_eq!(
        format!("{first}\n"),
        samples[1],
        "the README's warning sample drifted"
    );
}

/// A value the log format does not know is a usage error naming the variable.
#[test]
fn unknown_log_format_is_a_usage_error() {
    let o = Command::new(BIN)
        .env_clear()
        .env("PATH", PATH)
        .env("NCCLENV_LOG_FORMAT", "yaml")
        .args(["--", "true"])
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(
        err.contains("NCCLENV_LOG_FORMAT") && err.contains("text or json"),
        "{err}"
    );
}
