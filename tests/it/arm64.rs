//! Issue 5 part 5: the static entrypoint for arm64 nodes (GH200/GB200), `aarch64-unknown-linux-musl`, run
//! under qemu-user on this host.
//!
//! Needs the binary from `scripts/build-arm64.sh` (`target/aarch64-unknown-linux-musl/release/ncclenv`),
//! `qemu-aarch64` (Debian package qemu-user), `file`, and root for the namespace part. Missing: skipped with a
//! message, a failure under `CI=true` (scripts/test.sh installs and builds them).
//!
//! Checks: `file` says ARM aarch64 and statically linked, and the binary is under 1.5 MiB; `--version` is
//! the x86_64 binary's; in network namespaces `ncclenv env` prints exactly what the x86_64 binary prints
//! (the same NCCL_SOCKET_IFNAME decision, by the route to a peer and by the default route, among decoys);
//! `doctor --json` gives the same decision and exit code; `ncclenv -- COMMAND` execs (a host shell, which
//! sees the variables, its exit code passed through; 127 for a missing command) and execs the arm64
//! ncclenv itself again through qemu.

use crate::common;

use common::Netns;
use std::path::PathBuf;
use std::process::{Command, Output};

/// The x86_64 (host) binary, for comparison.
const HOST_BIN: &str = env!("CARGO_BIN_EXE_ncclenv");
const TARGET: &str = "aarch64-unknown-linux-musl";
/// Size budget of the stripped static arm64 binary, bytes (1.5 MiB; x86_64's is 1.6 MiB, tests/it/static_binary.rs).
const MAX_BYTES: u64 = 1536 * 1024;
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Finds `program` on PATH.
fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// (the arm64 binary, qemu-aarch64), or None (skip; panic under CI=true).
fn arm64() -> Option<(PathBuf, PathBuf)> {
    let bin = common::needs::built(
        common::target_dir().join(TARGET).join("release/ncclenv"),
        "an arm64 test: run scripts/build-arm64.sh",
    )?;
    let Some(qemu) = which("qemu-aarch64").or_else(|| which("qemu-aarch64-static")) else {
        return common::needs::missing(
            "an arm64 test: qemu-aarch64 is not installed (apt-get install qemu-user)",
        );
    };
    Some((bin, qemu))
}

fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn arm64_binary_is_static_aarch64() {
    let Some((bin, _)) = arm64() else { return };
    let Some(file) = which("file") else {
        common::skip("an arm64 test: `file` is not installed (apt-get install file)");
        return;
    };
    let o = run(Command::new(file).arg("-b").arg(&bin));
    let desc = text(&o.stdout);
    assert!(desc.contains("ARM aarch64"), "{}: {desc}", bin.display());
    assert!(
        desc.contains("statically linked"),
        "{}: {desc}",
        bin.display()
    );
    let size = std::fs::metadata(&bin).unwrap().len();
    eprintln!(
        "arm64 ncclenv: {size} bytes ({:.2} MiB)",
        size as f64 / 1048576.0
    );
    assert!(
        size < MAX_BYTES,
        "{} is {size} bytes, over the 1.5 MiB budget",
        bin.display()
    );
    // rust-lld reads build.rs's linker script for this target too.
    crate::static_binary::assert_no_unwind_tables(&bin);
}

#[test]
fn arm64_version_under_qemu() {
    let Some((bin, qemu)) = arm64() else { return };
    let arm = run(Command::new(&qemu).arg(&bin).arg("--version"));
    let host = run(Command::new(HOST_BIN).arg("--version"));
    assert!(arm.status.success(), "{arm:?}");
    assert_eq!(text(&arm.stdout), text(&host.stdout));
    assert!(text(&arm.stdout).starts_with("ncclenv "), "{arm:?}");
}

/// A node with decoys: eth0 (default route), net1 (a Multus-like secondary network), docker0 (a bridge
/// with an address) and an fe80-only veth.
fn node() -> Netns {
    let ns = Netns::new("arm64");
    ns.plug("eth0");
    ns.addr("eth0", "10.1.0.2/24");
    ns.route("default via 10.1.0.1 dev eth0");
    ns.plug("net1");
    ns.addr("net1", "192.168.50.2/24");
    ns.bridge("docker0");
    ns.addr("docker0", "172.17.0.1/16");
    ns.plug("veth3c1d");
    ns.wait_link_local("veth3c1d");
    ns
}

/// `[qemu] BIN ARGS…` in the namespace with a clean environment (PATH and `vars`).
fn in_ns(ns: &Netns, runner: &[&PathBuf], args: &[&str], vars: &[(&str, &str)]) -> Output {
    let (prog, rest) = runner.split_first().unwrap();
    let mut c = ns.command(&prog.to_string_lossy());
    c.args(rest.iter().map(|p| p.as_os_str()))
        .args(args)
        .env_clear()
        .env("PATH", PATH)
        .env("NO_COLOR", "1");
    for (k, v) in vars {
        c.env(k, v);
    }
    run(&mut c)
}

#[test]
fn arm64_decides_like_x86_64_in_a_namespace() {
    let Some((bin, qemu)) = arm64() else { return };
    if !common::require_root() {
        return;
    }
    let host_bin = PathBuf::from(HOST_BIN);
    let arm = [&qemu, &bin];
    let host = [&host_bin];
    let ns = node();

    for (vars, want) in [
        (vec![("NCCLENV_PEER", "192.168.50.7")], "net1"),
        (vec![], "eth0"),
    ] {
        let a = in_ns(&ns, &arm, &["env"], &vars);
        let h = in_ns(&ns, &host, &["env"], &vars);
        assert!(a.status.success(), "arm64 env: {a:?}");
        assert_eq!(a.status.code(), h.status.code());
        assert_eq!(
            text(&a.stdout),
            text(&h.stdout),
            "arm64 and x86_64 `ncclenv env` differ ({vars:?})"
        );
        assert!(
            text(&a.stdout).contains(&format!("export NCCL_SOCKET_IFNAME='{want}'\n")),
            "{vars:?}: {}",
            text(&a.stdout)
        );

        let a = in_ns(&ns, &arm, &["doctor", "--json"], &vars);
        let h = in_ns(&ns, &host, &["doctor", "--json"], &vars);
        assert_eq!(a.status.code(), h.status.code(), "doctor exit codes");
        let aj: serde_json::Value = serde_json::from_slice(&a.stdout)
            .unwrap_or_else(|e| panic!("arm64 doctor --json: {e}: {}", text(&a.stdout)));
        let hj: serde_json::Value = serde_json::from_slice(&h.stdout).unwrap();
        assert_eq!(aj["decision"], hj["decision"], "doctor decisions differ");
    }

    // Exec: the arm64 ncclenv replaces itself with a host program (qemu-user passes execve to the kernel),
    // which sees the variables; the exit code passes through.
    let vars = [("NCCLENV_PEER", "192.168.50.7")];
    let o = in_ns(
        &ns,
        &arm,
        &[
            "--",
            "/bin/sh",
            "-c",
            r#"printf '%s %s %s\n' "$NCCL_SOCKET_IFNAME" "$GLOO_SOCKET_IFNAME" "$POD_IP"; exit 7"#,
        ],
        &vars,
    );
    assert_eq!(o.status.code(), Some(7), "{o:?}");
    assert_eq!(text(&o.stdout), "net1 net1 192.168.50.2\n", "{o:?}");
    assert!(
        text(&o.stderr).contains("ncclenv: interface net1 192.168.50.2"),
        "{}",
        text(&o.stderr)
    );

    // The arm64 ncclenv execs itself again (through qemu): the inner one sees the decisions as inherited
    // values and keeps them (`nothing to set`).
    let o = in_ns(
        &ns,
        &arm,
        &["--", &qemu.to_string_lossy(), &bin.to_string_lossy(), "env"],
        &vars,
    );
    assert!(o.status.success(), "{o:?}");
    let err = text(&o.stderr);
    assert!(
        err.contains("ncclenv: interface net1 192.168.50.2 (inherited NCCL_SOCKET_IFNAME=net1"),
        "the inner arm64 ncclenv did not run or did not keep the decision: {err}"
    );
    assert!(!text(&o.stdout).contains("NCCL_SOCKET_IFNAME"), "{o:?}");

    // A missing command: 127, as on x86_64.
    let o = in_ns(&ns, &arm, &["--", "/nonexistent/cmd"], &[]);
    assert_eq!(o.status.code(), Some(127), "{o:?}");
}
