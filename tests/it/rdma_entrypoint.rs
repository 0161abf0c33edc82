//! The RDMA and shared-memory field cases F14, F15, F22–F25, F30 and F31 through the built binary as the
//! entrypoint, in network namespaces: fake sysfs trees (`NCCLENV_SYSFS`), fake dev trees with real character
//! nodes (`NCCLENV_DEVFS`), the memlock limit set with `prlimit`, capabilities and users set with `setpriv`,
//! `/dev/shm` a private tmpfs of the stated size (`unshare -m`), and the command reading what it really
//! received (`ulimit -l`, the environment) while the warnings are found on stderr by their `[code]`.
//!
//! Verbs nodes: a node that must open is created with `/dev/null`'s numbers (1:3), which opens read-write on
//! any machine; the real uverbs major (231) has no driver here, so a node with it fails to open with ENXIO,
//! which is the "exists but cannot be opened" case. "RDMA usable" under this machine's 8 MiB hard memlock
//! limit (no CAP_SYS_RESOURCE to raise it) comes from the real `CAP_IPC_LOCK` of root, which lifts the limit
//! (F31); the cases that need a low limit to bite drop it with `setpriv --bounding-set -ipc_lock`, as Docker's
//! default capability set does.

use crate::common;

use common::fake_rdma::{char_node, gid, hca, uverbs, uverbs_unopenable, verbs_map, write};
use common::{require_root, Netns, TempDir};
use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};

const MIB8: u64 = 8 * 1024 * 1024;

/// `setpriv` arguments that drop `CAP_IPC_LOCK` (Docker's default capability set lacks it).
const NO_IPC_LOCK: &[&str] = &["setpriv", "--bounding-set", "-ipc_lock"];

/// `setpriv` arguments that run as uid/gid 1000 without capabilities.
const AS_UID_1000: &[&str] = &[
    "setpriv",
    "--reuid",
    "1000",
    "--regid",
    "1000",
    "--clear-groups",
];

/// The ncclenv binary copied into `t` (world-readable), so that another user can run it whatever the
/// permissions of the checkout.
fn binary_in(t: &TempDir) -> PathBuf {
    let p = t.join("ncclenv");
    if !p.exists() {
        common::exe::copy(std::path::Path::new(env!("CARGO_BIN_EXE_ncclenv")), &p);
    }
    p
}

/// How one run is set up.
#[derive(Default)]
struct Run<'a> {
    /// `prlimit --memlock=SOFT:HARD` before ncclenv.
    memlock: Option<String>,
    /// `setpriv …` before ncclenv.
    setpriv: &'a [&'a str],
    /// Variables besides PATH, NCCLENV_SYSFS and NCCLENV_DEVFS.
    env: Vec<(&'a str, String)>,
    /// A private tmpfs for `NCCLENV_SHM_PATH`: (size, mode, shell commands run in it after mounting, `$D` =
    /// the mount). Without it `NCCLENV_SHM_MIN=0`.
    shm: Option<(&'a str, &'a str, &'a str)>,
    /// Launcher arguments after the command's script (read by ncclenv as the job's command).
    launcher: &'a [&'a str],
    /// `doctor --json` instead of running a command.
    doctor: bool,
}

/// `[unshare -m + tmpfs] ip netns exec NS [prlimit] [setpriv] ncclenv -- sh -c 'ulimit -l; env' sh LAUNCHER…`
/// at `NCCLENV_LOG=debug`, where each finding's line is whole (unless `r.env` sets `NCCLENV_LOG`). Before it
/// the same run at the default level: each line fits in 200 characters (README, "Output") and every finding
/// of the debug run that is not debug-only is named there by its `[code]`.
fn run(ns: &Netns, t: &TempDir, r: &Run) -> Output {
    if r.doctor || r.env.iter().any(|(k, _)| *k == "NCCLENV_LOG") {
        return run_at(ns, t, r, None);
    }
    let short = run_at(ns, t, r, Some("info"));
    let whole = run_at(ns, t, r, Some("debug"));
    let short_err = String::from_utf8_lossy(&short.stderr);
    // A refusal is one line whatever its length (README, "What you see"): it is why the job stops.
    for line in short_err
        .lines()
        .filter(|l| !l.starts_with("ncclenv: refused"))
    {
        let n = line.chars().count();
        assert!(n <= 200, "{n} characters at the default level: {line}");
    }
    let whole_err = String::from_utf8_lossy(&whole.stderr);
    for line in whole_err
        .lines()
        .filter(|l| !l.starts_with("ncclenv: debug: "))
    {
        if let Some(code) = line.rsplit_once(" [").and_then(|(_, c)| c.split_once(']')) {
            let tag = format!("[{}]", code.0);
            // Nothing wrong, nothing changed: logged at the debug level only (docs/logging.md).
            if ["[shm-no-gpu]", "[shm-single-gpu]"].contains(&tag.as_str()) {
                continue;
            }
            assert!(
                short_err.contains(&tag),
                "the default level lacks {tag}:\n{short_err}\nwhole:\n{whole_err}"
            );
        }
    }
    assert_eq!(
        short.status.code(),
        whole.status.code(),
        "{short_err}\n{whole_err}"
    );
    whole
}

/// [`run`] once, with `NCCLENV_LOG=LOG` when given.
fn run_at(ns: &Netns, t: &TempDir, r: &Run, log: Option<&str>) -> Output {
    let mut argv: Vec<String> = Vec::new();
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), "/usr/sbin:/usr/bin:/sbin:/bin".into()),
        ("NCCLENV_SYSFS".into(), t.join("sys").display().to_string()),
        ("NCCLENV_DEVFS".into(), t.join("dev").display().to_string()),
    ];
    if let Some((size, mode, setup)) = r.shm {
        let dir = t.join("shm");
        fs::create_dir_all(&dir).expect("mkdir shm");
        argv.extend(
            [
                "unshare",
                "-m",
                "--propagation",
                "private",
                "/bin/sh",
                "-c",
                "D=\"$3\"; mount -t tmpfs -o size=\"$1\",mode=\"$2\" tmpfs \"$D\" && eval \"$4\" && shift 4 && exec \"$@\"",
                "sh",
                size,
                mode,
                &dir.display().to_string(),
                setup,
            ]
            .map(String::from),
        );
        env.push(("NCCLENV_SHM_PATH".into(), dir.display().to_string()));
    } else {
        env.push(("NCCLENV_SHM_MIN".into(), "0".into()));
    }
    argv.extend(["ip", "netns", "exec", &ns.name].map(String::from));
    if let Some(m) = &r.memlock {
        argv.push("prlimit".into());
        argv.push(format!("--memlock={m}"));
    }
    argv.extend(r.setpriv.iter().map(|s| s.to_string()));
    argv.push(binary_in(t).display().to_string());
    if r.doctor {
        argv.extend(["doctor", "--json", "--"].map(String::from));
    } else {
        argv.push("--".into());
    }
    argv.extend(["/bin/sh", "-c", "echo memlock=$(ulimit -l); env", "sh"].map(String::from));
    argv.extend(r.launcher.iter().map(|s| s.to_string()));
    for (k, v) in &r.env {
        env.push((k.to_string(), v.clone()));
    }
    if let Some(log) = log {
        env.push(("NCCLENV_LOG".into(), log.into()));
    }
    let mut c = Command::new(&argv[0]);
    c.args(&argv[1..]).env_clear().envs(env);
    let o = common::exe::output(&mut c).unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "ncclenv panicked:\n{err}");
    o
}

fn value<'a>(out: &'a str, name: &str) -> Option<&'a str> {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
}

/// stdout, stderr; asserts exit 0.
fn ok(o: &Output) -> (String, String) {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    (out, err)
}

/// The stderr line carrying `[code]`, if any.
fn finding<'a>(err: &'a str, code: &str) -> Option<&'a str> {
    common::finding_line(err, code)
}

/// The current hard RLIMIT_MEMLOCK in bytes (`prlimit` cannot raise it without CAP_SYS_RESOURCE).
fn hard_memlock() -> u64 {
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK)
        .expect("getrlimit");
    hard
}

#[test]
fn f14_roce_visible_without_verbs_nodes_disables_ib_and_says_why() {
    if !require_root() {
        return;
    }
    let ns = Netns::new("rdf14");
    ns.plug("bond0");
    ns.addr("bond0", "10.200.93.11/24");
    ns.route("default via 10.200.93.1 dev bond0");
    let t = TempDir::new("rdf14");
    hca(
        &t.join("sys"),
        "mlx5_bond_0",
        "Ethernet",
        "25 Gb/sec (1X EDR)",
        Some("bond0"),
    );
    fs::create_dir_all(t.join("dev")).expect("mkdir dev");
    let (out, err) = ok(&run(&ns, &t, &Run::default()));
    assert_eq!(value(&out, "NCCL_IB_DISABLE"), Some("1"), "{out}");
    assert_eq!(value(&out, "NCCL_SOCKET_IFNAME"), Some("bond0"));
    assert!(
        err.contains("--device=/dev/infiniband") && err.contains("--cap-add=IPC_LOCK"),
        "{err}"
    );
    // An inherited NCCL_IB_DISABLE=0 is kept, with the same warning.
    let (out, err) = ok(&run(
        &ns,
        &t,
        &Run {
            env: vec![("NCCL_IB_DISABLE", "0".into())],
            ..Run::default()
        },
    ));
    assert_eq!(value(&out, "NCCL_IB_DISABLE"), Some("0"));
    assert!(err.contains("--device=/dev/infiniband"));
}

/// F15's and F31's layout: `mlx5_0` port 1 ACTIVE InfiniBand, `uverbs0` present (mapped, opens).
fn ib_hca(t: &TempDir) {
    hca(
        &t.join("sys"),
        "mlx5_0",
        "InfiniBand",
        "200 Gb/sec (4X HDR)",
        None,
    );
    verbs_map(&t.join("sys"), "uverbs0", "mlx5_0");
    uverbs(&t.join("dev"), 0);
}

#[test]
fn f15_low_memlock_disables_ib_and_a_lower_soft_limit_is_raised() {
    if !require_root() {
        return;
    }
    let ns = Netns::new("rdf15");
    ns.plug("ens1");
    ns.addr("ens1", "10.20.0.5/24");
    ns.route("default via 10.20.0.1 dev ens1");
    ns.plug("ib0");
    ns.addr("ib0", "10.30.0.5/24");
    let t = TempDir::new("rdf15");
    ib_hca(&t);
    // soft = hard = 8 MiB, no CAP_IPC_LOCK (Docker's default): IB off, the socket interface is still the
    // routed one (not NCCL's ib* preference).
    let o = run(
        &ns,
        &t,
        &Run {
            memlock: Some(format!("{MIB8}:{MIB8}")),
            setpriv: NO_IPC_LOCK,
            ..Run::default()
        },
    );
    let (out, err) = ok(&o);
    assert_eq!(value(&out, "NCCL_IB_DISABLE"), Some("1"), "{out}");
    assert_eq!(value(&out, "NCCL_SOCKET_IFNAME"), Some("ens1"));
    assert!(
        finding(&err, "rdma-memlock-low").is_some_and(|l| l.contains("--ulimit memlock=-1")),
        "{err}"
    );
    assert_eq!(value(&out, "memlock"), Some("8192"));
    // A soft limit below the hard one is raised to it: the command sees the hard limit.
    let hard = hard_memlock();
    let (soft, hard_s, want) = if hard == nix::sys::resource::RLIM_INFINITY {
        (
            MIB8.to_string(),
            "unlimited".to_string(),
            "unlimited".to_string(),
        )
    } else {
        (
            (hard / 2).to_string(),
            hard.to_string(),
            (hard / 1024).to_string(),
        )
    };
    let o = run(
        &ns,
        &t,
        &Run {
            memlock: Some(format!("{soft}:{hard_s}")),
            setpriv: NO_IPC_LOCK,
            ..Run::default()
        },
    );
    let (out, err) = ok(&o);
    assert_eq!(value(&out, "memlock"), Some(want.as_str()), "{out}");
    // IB stays on exactly when the raised limit reaches 1 GiB (unlimited included); below, it is disabled
    // and the warning names the hard limit that remains.
    if hard == nix::sys::resource::RLIM_INFINITY || hard >= 1 << 30 {
        assert_eq!(
            value(&out, "NCCL_IB_DISABLE"),
            None,
            "IB stays on with memlock {hard_s}: {err}"
        );
        assert!(!err.contains("[rdma-memlock-low]"), "{err}");
    } else {
        assert_eq!(value(&out, "NCCL_IB_DISABLE"), Some("1"), "{out}");
        assert!(err.contains("[rdma-memlock-low]"), "{err}");
    }
}

#[test]
fn f31_root_with_ipc_lock_keeps_rdma_under_an_8_mib_limit() {
    if !require_root() {
        return;
    }
    // The oracle: this test process (root) holds CAP_IPC_LOCK, and the variants really lose it.
    let caps = |pre: &[&str]| -> String {
        let mut c = Command::new(pre.first().copied().unwrap_or("grep"));
        let mut args: Vec<&str> = pre.iter().skip(1).copied().collect();
        if !pre.is_empty() {
            args.push("grep");
        }
        args.extend(["CapEff", "/proc/self/status"]);
        common::run(c.args(args))
    };
    let bit = |s: &str| {
        let hex = s.split_whitespace().nth(1).unwrap_or("0");
        u64::from_str_radix(hex, 16).unwrap_or(0) & (1 << 14) != 0
    };
    assert!(
        bit(&caps(&[])),
        "root here lacks CAP_IPC_LOCK: {}",
        caps(&[])
    );
    assert!(!bit(&caps(NO_IPC_LOCK)));
    assert!(!bit(&caps(AS_UID_1000)));

    let ns = Netns::new("rdf31");
    ns.plug("eth0");
    ns.addr("eth0", "10.244.1.7/24");
    ns.route("default via 10.244.1.1 dev eth0");
    let t = TempDir::new("rdf31");
    ib_hca(&t);
    let limit = Some(format!("{MIB8}:{MIB8}"));
    // Root with IPC_LOCK: RDMA stays on, the limit is left as it is.
    let (out, err) = ok(&run(
        &ns,
        &t,
        &Run {
            memlock: limit.clone(),
            ..Run::default()
        },
    ));
    assert_eq!(value(&out, "NCCL_IB_DISABLE"), None, "{out}\n{err}");
    assert_eq!(value(&out, "memlock"), Some("8192"));
    assert!(finding(&err, "rdma-memlock-low").is_none(), "{err}");
    assert!(finding(&err, "rdma-memlock-ipc-lock").is_some(), "{err}");
    // Another user keeping IPC_LOCK as an ambient capability: the same.
    let ambient: &[&str] = &[
        "setpriv",
        "--reuid",
        "1000",
        "--regid",
        "1000",
        "--clear-groups",
        "--inh-caps",
        "+ipc_lock",
        "--ambient-caps",
        "+ipc_lock",
    ];
    let (out, err) = ok(&run(
        &ns,
        &t,
        &Run {
            memlock: limit.clone(),
            setpriv: ambient,
            ..Run::default()
        },
    ));
    assert_eq!(value(&out, "NCCL_IB_DISABLE"), None, "{err}");
    // Root without IPC_LOCK, and uid 1000: bound by the limit.
    for who in [NO_IPC_LOCK, AS_UID_1000] {
        let (out, err) = ok(&run(
            &ns,
            &t,
            &Run {
                memlock: limit.clone(),
                setpriv: who,
                ..Run::default()
            },
        ));
        assert_eq!(value(&out, "NCCL_IB_DISABLE"), Some("1"), "{who:?}: {out}");
        assert!(
            finding(&err, "rdma-memlock-low").is_some(),
            "{who:?}: {err}"
        );
        assert!(
            finding(&err, "rdma-memlock-ipc-lock").is_none(),
            "{who:?}: {err}"
        );
    }
}

/// F22's pod: `eth0` (default route), `net1`, `net2`; `erdma_0`/`erdma_1` RoCE with their GIDs on
/// `net1`/`net2`, mapped to `uverbs0`/`uverbs1`; `uverbs0` and `rdma_cm` present; `uverbs1` as `erdma_1`.
fn f22_layout(tag: &str, erdma_1: Option<bool>) -> (Netns, TempDir) {
    let ns = Netns::new(tag);
    ns.plug("eth0");
    ns.addr("eth0", "10.244.2.5/24");
    ns.route("default via 10.244.2.1 dev eth0");
    ns.plug("net1");
    ns.addr("net1", "10.10.0.5/24");
    ns.plug("net2");
    ns.addr("net2", "10.20.0.5/24");
    let t = TempDir::new(tag);
    let sys = t.join("sys");
    for (i, (dev, net, ip)) in [("erdma_0", "net1", "0a0a"), ("erdma_1", "net2", "0a14")]
        .into_iter()
        .enumerate()
    {
        hca(&sys, dev, "Ethernet", "100 Gb/sec (4X EDR)", Some(net));
        gid(
            &sys,
            dev,
            1,
            &format!("0000:0000:0000:0000:0000:ffff:{ip}:0005"),
            "RoCE v2",
            net,
        );
        // The rest of the table is empty, as the kernel shows unused entries.
        for e in 2..8 {
            write(
                &sys.join(format!("class/infiniband/{dev}/ports/1/gids/{e}")),
                "0000:0000:0000:0000:0000:0000:0000:0000\n",
            );
        }
        verbs_map(&sys, &format!("uverbs{i}"), dev);
    }
    let dev = t.join("dev");
    uverbs(&dev, 0);
    char_node(&dev, "infiniband/rdma_cm", 1, 3);
    match erdma_1 {
        None => {}
        Some(true) => uverbs(&dev, 1),
        Some(false) => uverbs_unopenable(&dev, 1),
    }
    (ns, t)
}

const TORCHRUN_2: &[&str] = &[
    "torchrun",
    "--nnodes=2",
    "--master-addr=10.244.2.1",
    "train.py",
];

#[test]
fn f22_a_device_plugin_admitted_one_of_two_hcas() {
    if !require_root() {
        return;
    }
    // uverbs1 missing: NCCL_IB_HCA==erdma_0, a warning naming erdma_1.
    let (ns, t) = f22_layout("rdf22", None);
    let r = Run {
        launcher: TORCHRUN_2,
        ..Run::default()
    };
    let (out, err) = ok(&run(&ns, &t, &r));
    assert_eq!(value(&out, "NCCL_IB_HCA"), Some("=erdma_0"), "{out}\n{err}");
    assert_eq!(value(&out, "NCCL_IB_DISABLE"), None);
    assert_eq!(value(&out, "NCCL_SOCKET_IFNAME"), Some("eth0"));
    let w = finding(&err, "rdma-hca-unusable").unwrap_or_else(|| panic!("{err}"));
    assert!(
        w.contains("erdma_1") && w.contains("no verbs node") && w.contains("uverbs1"),
        "{w}"
    );

    // Variant: uverbs1 exists but does not open.
    let (ns, t) = f22_layout("rdf22o", Some(false));
    let (out, err) = ok(&run(&ns, &t, &r));
    assert_eq!(value(&out, "NCCL_IB_HCA"), Some("=erdma_0"), "{out}\n{err}");
    let w = finding(&err, "rdma-hca-unusable").unwrap_or_else(|| panic!("{err}"));
    assert!(
        w.contains("erdma_1") && w.contains("No such device or address"),
        "{w}"
    );

    // Both nodes open: no list, no warning.
    let (ns, t) = f22_layout("rdf22b", Some(true));
    let (out, err) = ok(&run(&ns, &t, &r));
    assert_eq!(value(&out, "NCCL_IB_HCA"), None, "{out}");
    assert!(finding(&err, "rdma-hca-unusable").is_none(), "{err}");
}

#[test]
fn f22_gid_index_judged_and_shown_per_port() {
    if !require_root() {
        return;
    }
    let (ns, t) = f22_layout("rdgid", Some(true));
    // Index 5 is an empty slot of the 8-entry table: kept, with a warning that names NCCL's own choice
    // (1, the IPv4-mapped RoCE v2 GID on net1).
    let r = Run {
        env: vec![("NCCL_IB_GID_INDEX", "5".into())],
        ..Run::default()
    };
    let (out, err) = ok(&run(&ns, &t, &r));
    assert_eq!(value(&out, "NCCL_IB_GID_INDEX"), Some("5"));
    let w = finding(&err, "rdma-gid-index-unusable").unwrap_or_else(|| panic!("{err}"));
    assert!(
        w.contains("GID slot 5 is empty") && w.contains("unset NCCL_IB_GID_INDEX"),
        "{w}"
    );
    assert!(w.contains("1 (::ffff:10.10.0.5, RoCE v2, net1)"), "{w}");
    // A working index: no warning.
    let r = Run {
        env: vec![("NCCL_IB_GID_INDEX", "1".into())],
        ..Run::default()
    };
    let (_, err) = ok(&run(&ns, &t, &r));
    assert!(finding(&err, "rdma-gid-index-unusable").is_none(), "{err}");
    // Strict mode refuses the broken one.
    let r = Run {
        env: vec![
            ("NCCL_IB_GID_INDEX", "5".into()),
            ("NCCLENV_STRICT", "1".into()),
        ],
        ..Run::default()
    };
    let o = run(&ns, &t, &r);
    assert_eq!(
        o.status.code(),
        Some(78),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A real shared object named `libnccl-net.so` in `<t>/plugin` (what HPC-X ships, minus its code).
fn plugin_lib(t: &TempDir) -> PathBuf {
    let dir = t.join("plugin");
    fs::create_dir_all(&dir).expect("mkdir plugin");
    let src = dir.join("p.c");
    fs::write(&src, "int ncclNetPlugin_v8 = 0;\n").expect("write p.c");
    common::run(
        Command::new("gcc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(dir.join("libnccl-net.so"))
            .arg(&src),
    );
    dir
}

#[test]
fn f25_hpcx_net_plugin_gets_its_own_switch() {
    if !require_root() {
        return;
    }
    let (ns, t, plugin) = f25_pod();
    let ld = ("LD_LIBRARY_PATH", plugin.display().to_string());
    low_memlock_turns_off_the_plugins_switch_too(&ns, &t, &ld);
    a_users_ib_disable_with_the_plugin_warns(&ns, &t, &ld);
}

/// F25's pod: `eth0` with the default route, a RoCE HCA mlx5_0 on it with its uverbs device, and an HPC-X
/// style net plugin. Returns the namespace, the folder holding sysfs and devfs, and the plugin's folder.
fn f25_pod() -> (Netns, TempDir, PathBuf) {
    let ns = Netns::new("rdf25");
    ns.plug("eth0");
    ns.addr("eth0", "10.0.0.5/24");
    ns.route("default via 10.0.0.1 dev eth0");
    let t = TempDir::new("rdf25");
    hca(
        &t.join("sys"),
        "mlx5_0",
        "Ethernet",
        "100 Gb/sec (4X EDR)",
        Some("eth0"),
    );
    verbs_map(&t.join("sys"), "uverbs0", "mlx5_0");
    uverbs(&t.join("dev"), 0);
    let plugin = plugin_lib(&t);
    (ns, t, plugin)
}

/// Memlock 8 MiB (in `ns`, with `t`'s sysfs; `ld`: LD_LIBRARY_PATH to the plugin): IB off, and the
/// plugin's own switch too; doctor lists it as the plugin that loads; without the plugin, no switch.
fn low_memlock_turns_off_the_plugins_switch_too(ns: &Netns, t: &TempDir, ld: &(&str, String)) {
    let base = Run {
        memlock: Some(format!("{MIB8}:{MIB8}")),
        setpriv: NO_IPC_LOCK,
        ..Run::default()
    };
    // Memlock 8 MiB: IB off, and the plugin's own switch too.
    let (out, err) = ok(&run(
        ns,
        t,
        &Run {
            env: vec![ld.clone()],
            ..base
        },
    ));
    assert_eq!(value(&out, "NCCL_IB_DISABLE"), Some("1"), "{out}\n{err}");
    assert_eq!(value(&out, "NCCL_IBEXT_DISABLE"), Some("1"), "{out}\n{err}");
    // doctor lists it as the plugin that loads.
    let o = run(
        ns,
        t,
        &Run {
            env: vec![ld.clone()],
            doctor: true,
            memlock: Some(format!("{MIB8}:{MIB8}")),
            setpriv: NO_IPC_LOCK,
            ..Run::default()
        },
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("doctor JSON");
    let plugins = v["net_plugins"].as_array().cloned().unwrap_or_default();
    assert!(
        plugins.iter().any(|p| p["loads"] == true
            && p["path"]
                .as_str()
                .is_some_and(|s| s.ends_with("plugin/libnccl-net.so"))),
        "{plugins:?}"
    );
    // Without the plugin: no switch.
    let (out, _) = ok(&run(
        ns,
        t,
        &Run {
            memlock: Some(format!("{MIB8}:{MIB8}")),
            setpriv: NO_IPC_LOCK,
            ..Run::default()
        },
    ));
    assert_eq!(value(&out, "NCCL_IB_DISABLE"), Some("1"));
    assert_eq!(value(&out, "NCCL_IBEXT_DISABLE"), None);
}

/// The user disabled IB with the plugin present (in `ns`, with `t`'s sysfs; `ld`: LD_LIBRARY_PATH to the
/// plugin): kept, and a warning naming the plugin's switch; not once the plugin's switch is set too.
fn a_users_ib_disable_with_the_plugin_warns(ns: &Netns, t: &TempDir, ld: &(&str, String)) {
    // Variant: the user disabled IB with the plugin present: kept, and a warning.
    let (out, err) = ok(&run(
        ns,
        t,
        &Run {
            env: vec![ld.clone(), ("NCCL_IB_DISABLE", "1".into())],
            ..Run::default()
        },
    ));
    assert_eq!(value(&out, "NCCL_IB_DISABLE"), Some("1"));
    assert_eq!(value(&out, "NCCL_IBEXT_DISABLE"), None);
    let w = finding(&err, "rdma-plugin-ignores-ib-disable").unwrap_or_else(|| panic!("{err}"));
    assert!(
        w.contains("NCCL_IBEXT_DISABLE=1") && w.contains("NCCL_NET_PLUGIN=none"),
        "{w}"
    );
    // ... not once the plugin's switch is set too.
    let (_, err) = ok(&run(
        ns,
        t,
        &Run {
            env: vec![
                ld.clone(),
                ("NCCL_IB_DISABLE", "1".into()),
                ("NCCL_IBEXT_DISABLE", "1".into()),
            ],
            ..Run::default()
        },
    ));
    assert!(
        finding(&err, "rdma-plugin-ignores-ib-disable").is_none(),
        "{err}"
    );
}

/// A plain F1-like pod for the shared-memory cases: `eth0` with the default route, no RDMA device.
fn shm_pod(tag: &str) -> (Netns, TempDir) {
    let ns = Netns::new(tag);
    ns.plug("eth0");
    ns.addr("eth0", "172.17.0.2/16");
    ns.route("default via 172.17.0.1 dev eth0");
    let t = TempDir::new(tag);
    fs::create_dir_all(t.join("sys")).expect("mkdir sys");
    fs::create_dir_all(t.join("dev")).expect("mkdir dev");
    (ns, t)
}

const GPUS_8: &str = "0,1,2,3,4,5,6,7";

#[test]
fn f23_shared_memory_under_a_vendor_profile_and_with_larger_buffers() {
    if !require_root() {
        return;
    }
    let (ns, t) = shm_pod("rdf23");
    let tcpxo = [
        ("CUDA_VISIBLE_DEVICES", GPUS_8.to_string()),
        ("NCCL_FASTRAK_IFNAME", "eth1".to_string()),
        ("NCCL_FASTRAK_CTRL_DEV", "eth0".to_string()),
        ("NCCL_FASTRAK_NUM_FLOWS", "2".to_string()),
    ];
    for extra in [None, Some(("NCCL_COMM_ID", "172.17.0.2:1234".to_string()))] {
        let mut env: Vec<(&str, String)> = tcpxo.to_vec();
        env.extend(extra.clone());
        let (out, err) = ok(&run(
            &ns,
            &t,
            &Run {
                env,
                shm: Some(("64m", "1777", "true")),
                ..Run::default()
            },
        ));
        assert_eq!(
            value(&out, "NCCL_SHM_DISABLE"),
            Some("1"),
            "{extra:?}: {out}\n{err}"
        );
        assert!(finding(&err, "shm-too-small").is_some(), "{err}");
        // The vendor's transport variables stay untouched (and with NCCL_COMM_ID the network too).
        assert_eq!(value(&out, "NCCL_IB_DISABLE"), None, "{out}");
        assert_eq!(value(&out, "NCCL_FASTRAK_IFNAME"), Some("eth1"));
        if extra.is_some() {
            assert_eq!(value(&out, "NCCL_SOCKET_IFNAME"), None, "{out}");
        }
    }
    // NCCL_COMM_ID alone (no profile): the same shared-memory decision.
    let (out, _) = ok(&run(
        &ns,
        &t,
        &Run {
            env: vec![
                ("CUDA_VISIBLE_DEVICES", GPUS_8.to_string()),
                ("NCCL_COMM_ID", "172.17.0.2:1234".to_string()),
            ],
            shm: Some(("64m", "1777", "true")),
            ..Run::default()
        },
    ));
    assert_eq!(value(&out, "NCCL_SHM_DISABLE"), Some("1"), "{out}");
    assert_eq!(
        value(&out, "NCCL_SOCKET_IFNAME"),
        None,
        "hands off the network: {out}"
    );
    // Variant: 320 MiB holds 8 GPUs with the default buffers, not with NCCL_BUFFSIZE=8 MiB.
    let big = |buff: Option<&str>| {
        let mut env = vec![("CUDA_VISIBLE_DEVICES", GPUS_8.to_string())];
        env.extend(buff.map(|b| ("NCCL_BUFFSIZE", b.to_string())));
        ok(&run(
            &ns,
            &t,
            &Run {
                env,
                shm: Some(("320m", "1777", "true")),
                ..Run::default()
            },
        ))
    };
    let (out, err) = big(None);
    assert_eq!(value(&out, "NCCL_SHM_DISABLE"), None, "{out}\n{err}");
    let (out, err) = big(Some("8388608"));
    assert_eq!(value(&out, "NCCL_SHM_DISABLE"), Some("1"), "{out}\n{err}");
    let w = finding(&err, "shm-too-small").unwrap_or_else(|| panic!("{err}"));
    assert!(
        w.contains("13832192 B") && w.contains("NCCL_BUFFSIZE=8388608"),
        "{w}"
    );
}

/// Issue #24 item 3: local ranks counted only from what is seen. No device node and no visible-devices
/// variable, or `NVIDIA_VISIBLE_DEVICES=all` (every CUDA image sets it) without a device node: the ranks are
/// unknown, doctor says so, and Docker's 64 MiB `/dev/shm` is left alone; torchrun's `--nproc-per-node=4`
/// names them, and the same `/dev/shm` is then too small. `all` with device nodes counts the nodes.
#[test]
fn f24_unknown_local_ranks_leave_dev_shm_alone() {
    if !require_root() {
        return;
    }
    let (ns, t) = shm_pod("rdf24u");
    let docker_shm = Some(("64m", "1777", "true"));
    for env in [vec![], vec![("NVIDIA_VISIBLE_DEVICES", "all".to_string())]] {
        let (out, err) = ok(&run(
            &ns,
            &t,
            &Run {
                env: env.clone(),
                shm: docker_shm,
                ..Run::default()
            },
        ));
        assert_eq!(
            value(&out, "NCCL_SHM_DISABLE"),
            None,
            "{env:?}: {out}\n{err}"
        );
        assert!(finding(&err, "shm-too-small").is_none(), "{err}");
        let o = run(
            &ns,
            &t,
            &Run {
                env: env.clone(),
                shm: docker_shm,
                doctor: true,
                ..Run::default()
            },
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("doctor --json");
        let need = &v["decision"]["shm_need"];
        assert!(need["ranks"].is_null() && need["need_bytes"] == 0, "{need}");
        let source = need["ranks_source"].as_str().unwrap_or_default();
        if env.is_empty() {
            assert!(source.starts_with("no CUDA_VISIBLE_DEVICES"), "{source}");
        } else {
            assert!(
                source.starts_with("NVIDIA_VISIBLE_DEVICES=all "),
                "{source}"
            );
        }
    }
    let torchrun = ["torchrun", "--nproc-per-node=4", "train.py"];
    let (out, err) = ok(&run(
        &ns,
        &t,
        &Run {
            shm: docker_shm,
            launcher: &torchrun,
            ..Run::default()
        },
    ));
    assert_eq!(value(&out, "NCCL_SHM_DISABLE"), Some("1"), "{out}\n{err}");
    assert!(
        finding(&err, "shm-too-small").is_some_and(|w| w.contains("4 local rank(s)")),
        "{err}"
    );
    // `all` and 8 device nodes: 8 ranks.
    for i in 0..8 {
        char_node(&t.join("dev"), &format!("nvidia{i}"), 195, i);
    }
    let (out, err) = ok(&run(
        &ns,
        &t,
        &Run {
            env: vec![("NVIDIA_VISIBLE_DEVICES", "all".to_string())],
            shm: docker_shm,
            ..Run::default()
        },
    ));
    assert_eq!(value(&out, "NCCL_SHM_DISABLE"), Some("1"), "{out}\n{err}");
    assert!(
        finding(&err, "shm-too-small").is_some_and(|w| w.contains("8 local rank(s)")),
        "{err}"
    );
}

#[test]
fn f24_the_launcher_says_how_many_local_ranks() {
    if !require_root() {
        return;
    }
    let (ns, t) = shm_pod("rdf24");
    for i in 0..8 {
        char_node(&t.join("dev"), &format!("nvidia{i}"), 195, i);
    }
    let paddle = |flag: &'static str| -> Vec<&'static str> {
        vec![
            "python",
            "-m",
            "paddle.distributed.launch",
            flag,
            "0,1",
            "train.py",
        ]
    };
    for flag in ["--devices", "--gpus"] {
        let launcher = paddle(flag);
        let (out, err) = ok(&run(
            &ns,
            &t,
            &Run {
                shm: Some(("128m", "1777", "true")),
                launcher: &launcher,
                ..Run::default()
            },
        ));
        assert_eq!(
            value(&out, "NCCL_SHM_DISABLE"),
            None,
            "{flag}: {out}\n{err}"
        );
        assert!(finding(&err, "shm-too-small").is_none(), "{err}");
    }
    // Without the launcher's word the 8 GPU nodes count, and 128 MiB is too small for them.
    let (out, _) = ok(&run(
        &ns,
        &t,
        &Run {
            shm: Some(("128m", "1777", "true")),
            ..Run::default()
        },
    ));
    assert_eq!(value(&out, "NCCL_SHM_DISABLE"), Some("1"), "{out}");
    // torchrun's PET_NPROC_PER_NODE says it too.
    let (out, _) = ok(&run(
        &ns,
        &t,
        &Run {
            env: vec![("PET_NPROC_PER_NODE", "2".into())],
            shm: Some(("128m", "1777", "true")),
            launcher: &["torchrun", "train.py"],
            ..Run::default()
        },
    ));
    assert_eq!(value(&out, "NCCL_SHM_DISABLE"), None, "{out}");

    // NVIDIA_VISIBLE_DEVICES=void, no GPU nodes, 64 MiB: no shared-memory change at all.
    let (ns, t) = shm_pod("rdf24v");
    let (out, err) = ok(&run(
        &ns,
        &t,
        &Run {
            env: vec![("NVIDIA_VISIBLE_DEVICES", "void".into())],
            shm: Some(("64m", "1777", "true")),
            ..Run::default()
        },
    ));
    assert_eq!(value(&out, "NCCL_SHM_DISABLE"), None, "{out}");
    assert!(finding(&err, "shm-no-gpu").is_some(), "{err}");
    assert!(finding(&err, "shm-too-small").is_none(), "{err}");
}

#[test]
fn f30_dev_shm_with_space_the_job_cannot_write() {
    if !require_root() {
        return;
    }
    let (ns, t) = shm_pod("rdf30");
    let gpus = || vec![("CUDA_VISIBLE_DEVICES", "0,1".to_string())];
    // 1 GiB, mode 0755, owned by root; the job runs as uid 1000.
    let (out, err) = ok(&run(
        &ns,
        &t,
        &Run {
            env: gpus(),
            shm: Some(("1g", "0755", "true")),
            setpriv: AS_UID_1000,
            ..Run::default()
        },
    ));
    assert_eq!(value(&out, "NCCL_SHM_DISABLE"), Some("1"), "{out}\n{err}");
    let w = finding(&err, "shm-not-writable").unwrap_or_else(|| panic!("{err}"));
    assert!(w.contains("uid 1000") && w.contains("0755"), "{w}");
    // As root the same mount is writable: nothing to do.
    let (out, err) = ok(&run(
        &ns,
        &t,
        &Run {
            env: gpus(),
            shm: Some(("1g", "0755", "true")),
            ..Run::default()
        },
    ));
    assert_eq!(value(&out, "NCCL_SHM_DISABLE"), None, "{out}");
    assert!(finding(&err, "shm-not-writable").is_none(), "{err}");
    // Variant: 64 MiB with 60 MiB held by leftover nccl-* segments: the remedy names them.
    let stale = "head -c 41943040 /dev/zero > \"$D/nccl-AbC123\" && head -c 20971520 /dev/zero > \"$D/nccl-XyZ789\"";
    let (out, err) = ok(&run(
        &ns,
        &t,
        &Run {
            env: gpus(),
            shm: Some(("64m", "1777", stale)),
            ..Run::default()
        },
    ));
    assert_eq!(value(&out, "NCCL_SHM_DISABLE"), Some("1"), "{out}");
    let w = finding(&err, "shm-too-small").unwrap_or_else(|| panic!("{err}"));
    assert!(
        w.contains("nccl-AbC123 (40 MiB)") && w.contains("nccl-XyZ789 (20 MiB)"),
        "{w}"
    );
    assert!(w.contains("leftover"), "{w}");
}
