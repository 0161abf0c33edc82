//! `faster-interface` (#23, item 5) end to end: the built binary as the entrypoint in a namespace with two
//! macvlans, `eth0` (the default route, the master's network) and `ens5` (a network of its own).
//!
//! A namespace cannot give an interface a nominal speed of its choosing: a veth reports a constant 10000 Mb/s
//! (`veth_get_link_ksettings`, drivers/net/veth.c) and a macvlan its lower device's
//! (`macvlan_ethtool_get_link_ksettings`, drivers/net/macvlan.c), so both macvlans here read 10000 from the
//! namespace's own `/sys`. The real `/sys`
//! run checks equal speeds stay silent; the other runs give the speeds through `NCCLENV_SYSFS` (a directory
//! with `class/net/<name>/speed`), which is the same read (`probe::host::link_speeds`) from another root.
//! The rule itself is tested with plain values in `src/decide/faster.rs`.
//!
//! Needs root (namespaces); skips without it, fails under `CI=true`.

use crate::common;

use common::{Netns, TempDir};
use serde_json::Value;
use std::process::Output;

const BIN: &str = env!("CARGO_BIN_EXE_ncclenv");
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `eth0` 10.0.0.2/24 with the default route via 10.0.0.1 (the master), `ens5` 192.168.5.2/24; both macvlans
/// on plugs, RUNNING.
fn layout() -> Netns {
    let ns = Netns::new("faster");
    for (parent, name, cidr) in [
        ("v0", "eth0", "10.0.0.2/24"),
        ("v1", "ens5", "192.168.5.2/24"),
    ] {
        ns.plug(parent);
        ns.macvlan(name, parent);
        ns.wait_running(name);
        ns.addr(name, cidr);
    }
    ns.route("default via 10.0.0.1 dev eth0");
    ns
}

/// `ncclenv -- env -0` in `ns` with a cleared environment, JSON logs, MASTER_ADDR=10.0.0.1, an empty devfs
/// root, `sysfs` as `NCCLENV_SYSFS` when given, and `vars`.
fn run(
    ns: &Netns,
    tmp: &TempDir,
    sysfs: Option<&std::path::Path>,
    vars: &[(&str, &str)],
) -> Output {
    let dev = tmp.join("dev");
    let _ = std::fs::create_dir_all(&dev);
    let mut c = ns.command(BIN);
    c.env_clear()
        .env("PATH", PATH)
        .env("NCCLENV_DEVFS", &dev)
        .env("NCCLENV_SHM_MIN", "1")
        .env("NCCLENV_LOG_FORMAT", "json")
        .env("MASTER_ADDR", "10.0.0.1")
        .envs(vars.iter().copied())
        .args(["--", "env", "-0"]);
    if let Some(s) = sysfs {
        c.env("NCCLENV_SYSFS", s);
    }
    c.output()
        .unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"))
}

/// The `faster-interface` lines of the JSON log.
fn faster_lines(o: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["code"] == "faster-interface")
        .collect()
}

/// The `NCCL_SOCKET_IFNAME` the command received.
fn ifname(o: &Output) -> Option<String> {
    o.stdout
        .split(|b| *b == 0)
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .find_map(|e| e.strip_prefix("NCCL_SOCKET_IFNAME=").map(String::from))
}

#[test]
fn a_faster_interface_is_named_once_and_the_route_still_decides() {
    if !common::require_root() {
        return;
    }
    let ns = layout();
    let tmp = TempDir::new("faster");
    let both = ["NCCLENV_NNODES", "2"];

    // The namespace's own sysfs: both macvlans report their plugs' 10000 Mb/s; equal, so silent.
    let real = ns.sh("cat /sys/class/net/eth0/speed /sys/class/net/ens5/speed");
    assert_eq!(
        real.split_whitespace().collect::<Vec<_>>(),
        ["10000", "10000"],
        "{real}"
    );
    let o = run(&ns, &tmp, None, &[(both[0], both[1])]);
    assert_eq!(ifname(&o).as_deref(), Some("eth0"), "{o:?}");
    assert!(faster_lines(&o).is_empty(), "{o:?}");

    // eth0 at 1 GbE, ens5 at 100 GbE: one info line naming both; the command still gets eth0.
    let sys = tmp.join("sys");
    for (name, mbps) in [("eth0", "1000"), ("ens5", "100000")] {
        let d = sys.join("class/net").join(name);
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        std::fs::write(d.join("speed"), mbps).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    }
    let o = run(&ns, &tmp, Some(&sys), &[(both[0], both[1])]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(
        ifname(&o).as_deref(),
        Some("eth0"),
        "the route decides: {o:?}"
    );
    let lines = faster_lines(&o);
    assert_eq!(lines.len(), 1, "{o:?}");
    assert_eq!(lines[0]["level"], "info", "{}", lines[0]);
    let msg = lines[0]["message"].as_str().unwrap_or("");
    assert!(
        msg.starts_with(
            "ens5 (100 Gbit/s) is faster by its nominal link speed than the chosen eth0 (1 Gbit/s, route to peer 10.0.0.1"
        ),
        "{msg}"
    );
    assert!(
        lines[0]["remedy"]
            .as_str()
            .unwrap_or("")
            .contains("NCCLENV_PREFLIGHT=1"),
        "{}",
        lines[0]
    );

    // A single-node job uses SHM/P2P: no line. Unknown node count: the line (it may be multi-node).
    let o = run(&ns, &tmp, Some(&sys), &[("NCCLENV_NNODES", "1")]);
    assert!(faster_lines(&o).is_empty(), "{o:?}");
    let o = run(&ns, &tmp, Some(&sys), &[]);
    assert_eq!(faster_lines(&o).len(), 1, "{o:?}");

    // ens5 in NCCLENV_EXCLUDE: no line.
    let o = run(
        &ns,
        &tmp,
        Some(&sys),
        &[(both[0], both[1]), ("NCCLENV_EXCLUDE", "ens5")],
    );
    assert!(faster_lines(&o).is_empty(), "{o:?}");
}
