//! The check through the entrypoint, with the real libnccl (the pinned `nvidia-nccl-cu12` wheels installed by
//! `scripts/install-nccl-wheels.sh`): `ncclenv check bootstrap`, and `NCCLENV_CHECK=bootstrap ncclenv --
//! COMMAND`, in a network namespace. The helper `ncclenv-check` is found beside `ncclenv` (cargo builds both
//! into the same folder).

use crate::common;

use common::{require_root, Netns};
use std::path::PathBuf;
use std::process::Output;

/// Every installed wheel's libnccl, oldest first; none (a skip, a failure under CI) when none is installed.
fn libs() -> Vec<PathBuf> {
    common::needs::nccl_wheels()
        .unwrap_or_default()
        .into_iter()
        .map(|w| w.lib)
        .collect()
}

fn layout() -> Netns {
    let ns = Netns::new("chkep");
    ns.plug("eth0");
    ns.addr("eth0", "10.88.0.2/24");
    ns.route("default via 10.88.0.1 dev eth0");
    ns
}

fn run(ns: &Netns, lib: &PathBuf, extra: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = ns.command(env!("CARGO_BIN_EXE_ncclenv"));
    c.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("NCCLENV_NCCL_LIB", lib)
        .env("NCCLENV_SHM_MIN", "0");
    for (k, v) in extra {
        c.env(k, v);
    }
    c.args(args);
    c.output().expect("run ncclenv")
}

#[test]
fn check_subcommand_proves_the_chosen_interface_with_real_nccl() {
    if !require_root() {
        return;
    }
    for lib in libs() {
        let ns = layout();
        let o = run(&ns, &lib, &[], &["check", "bootstrap", "--json"]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{lib:?}\n{out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: serde_json::Value = serde_json::from_str(out.trim()).expect("check --json");
        assert!(
            out.contains("10.88.0.2"),
            "the decoded address is eth0's: {out}"
        );
        assert!(v.is_object());
    }
}

#[test]
fn entrypoint_runs_the_bootstrap_check_before_the_command() {
    if !require_root() {
        return;
    }
    for lib in libs() {
        let ns = layout();
        let o = run(
            &ns,
            &lib,
            &[("NCCLENV_CHECK", "bootstrap")],
            &["--", "sh", "-c", "echo ran:$NCCL_SOCKET_IFNAME"],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{err}");
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "ran:eth0");
        assert!(err.contains("check passed"), "{err}");
    }
}

#[test]
fn a_failed_check_runs_the_command_unless_strict() {
    if !require_root() {
        return;
    }
    for lib in libs() {
        let ns = layout();
        // A check that cannot pass: the libnccl named does not exist (the real-NCCL failures themselves are
        // covered by tests/it/check_real_nccl.rs; here the entrypoint's reaction is what is tested).
        let missing = lib.with_file_name("libnccl-missing.so.2");
        let bad = [
            ("NCCLENV_CHECK", "bootstrap"),
            ("NCCLENV_NCCL_LIB", missing.to_str().expect("utf-8 path")),
        ];
        let o = run(&ns, &lib, &bad, &["--", "sh", "-c", "echo ran"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{err}");
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "ran");
        // NCCL was never asked: the check could not run, as `ncclenv check` heads it (COULD NOT RUN), not failed.
        assert!(
            err.contains("the check could not run, running the command anyway")
                && err.contains("check COULD NOT RUN at load"),
            "{err}"
        );
        // The warning says what to do, naming the variable that points at the library.
        assert!(
            err.contains("what to do:") && err.contains("NCCLENV_NCCL_LIB"),
            "{err}"
        );
        let mut strict = bad.to_vec();
        strict.push(("NCCLENV_STRICT", "1"));
        let o = run(&ns, &lib, &strict, &["--", "sh", "-c", "echo ran"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(78), "{err}");
        assert!(o.stdout.is_empty());
        assert!(
            err.contains("NCCLENV_STRICT=1 and the check could not run")
                && err.contains("NCCLENV_NCCL_LIB"),
            "the refusal says what happened and what to do: {err}"
        );
    }
}
