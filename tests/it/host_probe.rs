//! Host probes against fake sysfs/dev trees (with real character device nodes), real rlimits set in a child
//! process, and real tmpfs mounts in a private mount namespace: field cases F13, F14, F15, a RoCE pod with and
//! without its Multus netdev, and several HCAs of which some are down.
//!
//! Tests that need root (mknod, mount) print why and return when not root, except with `CI=true`, where they
//! fail instead (never skipped in CI).

use crate::common;
use common::snapshot::{codes, SnapshotBuilder};

use ncclenv::config::Config;
use ncclenv::decide::rdma::decide_rdma;
use ncclenv::decide::shm::decide_shm;
use ncclenv::plan::Plan;
use ncclenv::probe::{host, nccl, rdma};
use ncclenv::snapshot::{RdmaSnapshot, ShmInfo, Snapshot};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const MIB: u64 = 1 << 20;
const CHILD_VAR: &str = "NCCLENV_HOST_PROBE_CHILD";
const MARK: &str = "NCCLENV-JSON:";

// ---------------------------------------------------------------------------------------------------------
// Fixtures

/// A temporary directory removed on drop.
struct Tmp(PathBuf);

impl Tmp {
    fn new(name: &str) -> Tmp {
        let p = std::env::temp_dir().join(format!("ncclenv-hp-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).expect("create temp dir");
        Tmp(p)
    }
    fn sys(&self) -> PathBuf {
        self.0.join("sys")
    }
    fn dev(&self) -> PathBuf {
        self.0.join("dev")
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// True when the test may go on. Not root: print why and return false, or panic under `CI=true`.
fn require_root(test: &str) -> bool {
    common::needs::root(&format!("{test} (mknod / mount namespaces)"))
}

fn write(p: &Path, text: &str) {
    if let Some(d) = p.parent() {
        fs::create_dir_all(d).expect("mkdir");
    }
    fs::write(p, text).expect("write fixture");
}

/// One GID: (index, gid, type, ndev).
type Gid<'a> = (u32, &'a str, &'a str, Option<&'a str>);

/// Write `<sys>/class/infiniband/<dev>/ports/<port>/…` as the kernel does (plus the all-zero GID 1).
fn add_port(
    sys: &Path,
    dev: &str,
    port: u32,
    active: bool,
    link_layer: &str,
    rate: &str,
    gids: &[Gid],
) {
    let p = sys.join(format!("class/infiniband/{dev}/ports/{port}"));
    write(
        &p.join("state"),
        if active { "4: ACTIVE\n" } else { "1: DOWN\n" },
    );
    write(
        &p.join("phys_state"),
        if active {
            "5: LinkUp\n"
        } else {
            "3: Disabled\n"
        },
    );
    write(&p.join("link_layer"), &format!("{link_layer}\n"));
    write(&p.join("rate"), &format!("{rate}\n"));
    write(
        &p.join("gids/1"),
        "0000:0000:0000:0000:0000:0000:0000:0000\n",
    );
    for (i, gid, kind, ndev) in gids {
        write(&p.join(format!("gids/{i}")), &format!("{gid}\n"));
        write(
            &p.join(format!("gid_attrs/types/{i}")),
            &format!("{kind}\n"),
        );
        if let Some(n) = ndev {
            write(&p.join(format!("gid_attrs/ndevs/{i}")), &format!("{n}\n"));
        }
    }
}

/// A real character device node (`mknod`), as the container runtime creates it.
fn char_node(p: &Path, major: u64, minor: u64) {
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    if let Some(d) = p.parent() {
        fs::create_dir_all(d).expect("mkdir");
    }
    mknod(
        p,
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        makedev(major, minor),
    )
    .expect("mknod");
}

/// `<dev>/infiniband/uverbsN` that opens read-write: `/dev/null`'s numbers (1:3). The real uverbs major (231)
/// has no driver on a machine without RDMA, and the probe opens every HCA's node (that case, ENXIO, is
/// `f22_each_hca_gets_its_own_verbs_node`'s).
fn uverbs(dev: &Path, n: u64) {
    char_node(&dev.join(format!("infiniband/uverbs{n}")), 1, 3);
}

/// A machine with the running links `links` (indices from 1, no `lo`), the RDMA devices `r` and the
/// environment `env`.
fn snapshot(r: RdmaSnapshot, links: &[&str], env: &[(&str, &str)]) -> Snapshot {
    let mut b = SnapshotBuilder::bare();
    for name in links {
        b.link(name, true, None);
    }
    for (k, v) in env {
        b.env(k, v);
    }
    b.rdma = Some(r);
    b.snapshot()
}

fn cfg(t: &Tmp) -> Config {
    Config {
        sysfs: t.sys(),
        devfs: t.dev(),
        ..Config::default()
    }
}

fn decide(s: &Snapshot, c: &Config) -> Plan {
    let mut p = Plan::default();
    decide_rdma(s, c, &mut p);
    decide_shm(s, c, &mut p);
    p
}

/// Re-run this test binary as a child for one `child_*` test, with `CHILD_VAR` set, through `wrapper` (e.g.
/// `unshare -m`), and `pre` run in the child before exec. Returns the JSON the child printed.
fn run_child(
    test: &str,
    vars: &[(&str, String)],
    wrapper: &[String],
    pre: Option<fn() -> std::io::Result<()>>,
) -> serde_json::Value {
    try_child(test, vars, wrapper, pre).expect("spawn child")
}

/// [`run_child`], returning the spawn error (e.g. EPERM from `pre`).
fn try_child(
    test: &str,
    vars: &[(&str, String)],
    wrapper: &[String],
    pre: Option<fn() -> std::io::Result<()>>,
) -> std::io::Result<serde_json::Value> {
    let exe = std::env::current_exe().expect("current_exe");
    let mut argv: Vec<String> = wrapper.to_vec();
    argv.push(exe.display().to_string());
    let exact = common::test_name(module_path!(), test);
    argv.extend(
        [
            "--ignored",
            "--exact",
            &exact,
            "--nocapture",
            "--test-threads=1",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).env(CHILD_VAR, test);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    if let Some(f) = pre {
        // SAFETY: the closure only calls setrlimit(2), which is async-signal-safe.
        unsafe {
            cmd.pre_exec(f);
        }
    }
    let out = cmd.output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.find(MARK).map(|i| &l[i + MARK.len()..]))
        .unwrap_or_else(|| {
            panic!(
                "child {test} printed no result (status {:?}):\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        });
    Ok(serde_json::from_str(line).expect("child JSON"))
}

fn child_active(test: &str) -> bool {
    std::env::var(CHILD_VAR).as_deref() == Ok(test)
}

// ---------------------------------------------------------------------------------------------------------
// F14: RoCE HCA visible, verbs devices not mounted

#[test]
fn f14_roce_without_verbs_nodes() {
    let t = Tmp::new("f14");
    add_port(
        &t.sys(),
        "mlx5_bond_0",
        1,
        true,
        "Ethernet",
        "25 Gb/sec (1X EDR)",
        &[(
            0,
            "fe80:0000:0000:0000:0a5c:12ff:fe34:5678",
            "IB/RoCE v1",
            Some("bond0"),
        )],
    );
    fs::create_dir_all(t.dev()).expect("mkdir dev");
    let r = rdma::probe(&t.sys(), &t.dev());
    assert_eq!(r.error, None);
    assert_eq!(r.devices.len(), 1);
    let port = &r.devices[0].ports[0];
    assert_eq!((port.port, port.state, port.phys_state), (1, 4, 5));
    assert_eq!(port.link_layer, "Ethernet");
    assert_eq!(port.rate, "25 Gb/sec (1X EDR)");
    assert_eq!(port.gids.len(), 1, "the all-zero GID is skipped");
    assert_eq!(port.gids[0].ndev.as_deref(), Some("bond0"));
    assert!(r.uverbs.is_empty() && !r.rdma_cm);

    let c = cfg(&t);
    let p = decide(&snapshot(r.clone(), &["lo", "bond0"], &[]), &c);
    assert_eq!(p.value_of("NCCL_IB_DISABLE"), Some("1"));
    assert_eq!(codes(&p), vec!["rdma-no-verbs-devices"]);
    assert!(p.warnings[0]
        .remedy
        .contains("--device=/dev/infiniband --cap-add=IPC_LOCK --ulimit memlock=-1"));

    // Inherited NCCL_IB_DISABLE=0: kept, with the same warning.
    let p = decide(
        &snapshot(r, &["lo", "bond0"], &[("NCCL_IB_DISABLE", "0")]),
        &c,
    );
    assert_eq!(p.value_of("NCCL_IB_DISABLE"), None);
    assert!(p.changes.is_empty());
    assert_eq!(codes(&p), vec!["rdma-no-verbs-devices"]);
}

// ---------------------------------------------------------------------------------------------------------
// F15: memlock too low for RDMA

fn f15_tree(t: &Tmp) {
    add_port(
        &t.sys(),
        "mlx5_0",
        1,
        true,
        "InfiniBand",
        "200 Gb/sec (4X HDR)",
        &[(
            0,
            "fe80:0000:0000:0000:b859:9f03:00ab:cdef",
            "IB/RoCE v1",
            None,
        )],
    );
    uverbs(&t.dev(), 0);
    char_node(&t.dev().join("infiniband/rdma_cm"), 10, 58);
}

/// Child half of F15: probes with the rlimits the parent set before exec and prints the snapshot. Not a test:
/// ignored, so that a normal run neither runs nor counts it ([`run_child`] runs it with `--ignored`).
#[test]
#[ignore = "helper entry point of f15_memlock_in_a_child_process, run in a child process"]
fn child_f15_probe() {
    if !child_active("child_f15_probe") {
        return;
    }
    let sys = PathBuf::from(std::env::var("NCCLENV_HP_SYS").unwrap_or_default());
    let dev = PathBuf::from(std::env::var("NCCLENV_HP_DEV").unwrap_or_default());
    let r = rdma::probe(&sys, &dev);
    println!("\n{MARK}{}", serde_json::to_string(&r).unwrap_or_default());
}

fn memlock_8m_8m() -> std::io::Result<()> {
    use nix::sys::resource::{setrlimit, Resource};
    setrlimit(Resource::RLIMIT_MEMLOCK, 8 * MIB, 8 * MIB).map_err(std::io::Error::from)
}

fn memlock_8m_unlimited() -> std::io::Result<()> {
    use nix::sys::resource::{setrlimit, Resource};
    setrlimit(Resource::RLIMIT_MEMLOCK, 8 * MIB, nix::libc::RLIM_INFINITY)
        .map_err(std::io::Error::from)
}

#[test]
fn f15_memlock_in_a_child_process() {
    if !require_root("f15_memlock_in_a_child_process") {
        return;
    }
    let t = Tmp::new("f15");
    f15_tree(&t);
    let vars = [
        ("NCCLENV_HP_SYS", t.sys().display().to_string()),
        ("NCCLENV_HP_DEV", t.dev().display().to_string()),
    ];
    let c = cfg(&t);
    let links = ["lo", "ens1", "ib0"];

    // soft = hard = 8 MiB, without CAP_IPC_LOCK (Docker's default set): disabled, warning names
    // --ulimit memlock=-1.
    let v = run_child(
        "child_f15_probe",
        &vars,
        &no_ipc_lock(),
        Some(memlock_8m_8m),
    );
    let r: RdmaSnapshot = serde_json::from_value(v).expect("snapshot");
    assert_eq!(r.error, None);
    assert_eq!(r.cap_ipc_lock, Some(false));
    assert_eq!(r.uverbs, vec!["uverbs0".to_string()]);
    assert!(r.rdma_cm);
    assert_eq!(r.devices[0].ports[0].rate, "200 Gb/sec (4X HDR)");
    assert_eq!(
        (r.memlock_soft, r.memlock_hard),
        (Some(8 * MIB), Some(8 * MIB))
    );
    let p = decide(&snapshot(r, &links, &[]), &c);
    assert_eq!(p.value_of("NCCL_IB_DISABLE"), Some("1"));
    assert_eq!(codes(&p), vec!["rdma-memlock-low"]);
    assert!(p.warnings[0].message.contains("8 MiB"));
    assert!(p.warnings[0].remedy.contains("--ulimit memlock=-1"));
    assert!(!p.raise_memlock);

    // soft 8 MiB, hard unlimited: raise, IB left on. Raising the hard limit needs CAP_SYS_RESOURCE, which a
    // container's root may lack: then check soft 4 MiB < hard 8 MiB (raised, but the hard limit is still too
    // low) and leave "hard unlimited" to `f15_memlock_plain_values`.
    match try_child(
        "child_f15_probe",
        &vars,
        &no_ipc_lock(),
        Some(memlock_8m_unlimited),
    ) {
        Ok(v) => {
            let r: RdmaSnapshot = serde_json::from_value(v).expect("snapshot");
            assert_eq!((r.memlock_soft, r.memlock_hard), (Some(8 * MIB), None));
            let p = decide(&snapshot(r, &links, &[]), &c);
            assert_eq!(p.value_of("NCCL_IB_DISABLE"), None);
            assert!(p.raise_memlock);
            assert!(!p.has_warnings(), "{:?}", p.warnings);
        }
        Err(e) => {
            eprintln!("NOTE: cannot raise the hard RLIMIT_MEMLOCK here ({e}); checking soft 4 MiB < hard 8 MiB");
            let v = run_child(
                "child_f15_probe",
                &vars,
                &no_ipc_lock(),
                Some(memlock_4m_8m),
            );
            let r: RdmaSnapshot = serde_json::from_value(v).expect("snapshot");
            assert_eq!(
                (r.memlock_soft, r.memlock_hard),
                (Some(4 * MIB), Some(8 * MIB))
            );
            let p = decide(&snapshot(r, &links, &[]), &c);
            assert_eq!(p.value_of("NCCL_IB_DISABLE"), Some("1"));
            assert!(p.warnings[0]
                .message
                .contains("hard RLIMIT_MEMLOCK is 8 MiB"));
        }
    }
}

/// `setpriv --bounding-set -ipc_lock`: the child runs as root without CAP_IPC_LOCK.
fn no_ipc_lock() -> Vec<String> {
    ["setpriv", "--bounding-set", "-ipc_lock"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// F31: the same child as root keeps CAP_IPC_LOCK (this test process has it) and loses it without it in
/// the bounding set; the decision follows.
#[test]
fn f31_capabilities_read_in_a_child_process() {
    if !require_root("f31_capabilities_read_in_a_child_process") {
        return;
    }
    let t = Tmp::new("f31");
    f15_tree(&t);
    let vars = [
        ("NCCLENV_HP_SYS", t.sys().display().to_string()),
        ("NCCLENV_HP_DEV", t.dev().display().to_string()),
    ];
    let here = rdma::ipc_lock_from_status(
        &fs::read_to_string("/proc/self/status").unwrap_or_default(),
        true,
    );
    assert_eq!(here, Some(true), "this test needs root with CAP_IPC_LOCK");
    let c = cfg(&t);
    for (wrapper, has) in [(Vec::new(), true), (no_ipc_lock(), false)] {
        let v = run_child("child_f15_probe", &vars, &wrapper, Some(memlock_8m_8m));
        let r: RdmaSnapshot = serde_json::from_value(v).expect("snapshot");
        assert_eq!(r.cap_ipc_lock, Some(has), "{wrapper:?}");
        assert_eq!(r.memlock_hard, Some(8 * MIB));
        let p = decide(&snapshot(r, &["lo", "eth0"], &[]), &c);
        assert_eq!(p.value_of("NCCL_IB_DISABLE").is_some(), !has, "{wrapper:?}");
        assert_eq!(codes(&p).contains(&"rdma-memlock-low"), !has, "{wrapper:?}");
        assert_eq!(
            codes(&p).contains(&"rdma-memlock-ipc-lock"),
            has,
            "{wrapper:?}"
        );
    }
    // No RDMA device: the capabilities are not read at all.
    let empty = Tmp::new("f31none");
    assert_eq!(rdma::probe(&empty.sys(), &empty.dev()).cap_ipc_lock, None);
}

fn memlock_4m_8m() -> std::io::Result<()> {
    use nix::sys::resource::{setrlimit, Resource};
    setrlimit(Resource::RLIMIT_MEMLOCK, 4 * MIB, 8 * MIB).map_err(std::io::Error::from)
}

#[test]
fn f15_memlock_plain_values() {
    if !require_root("f15_memlock_plain_values") {
        return;
    }
    let t = Tmp::new("f15plain");
    f15_tree(&t);
    let c = cfg(&t);
    let mut r = rdma::probe(&t.sys(), &t.dev());
    // Plain values: the memlock rule as it applies without CAP_IPC_LOCK.
    r.cap_ipc_lock = Some(false);
    for (soft, hard, disabled, raise) in [
        (Some(8 * MIB), Some(8 * MIB), true, false),
        (Some(64 << 10), Some(64 << 10), true, false),
        (Some(8 * MIB), None, false, true),
        (None, None, false, false),
        (Some(1 << 30), Some(1 << 30), false, false),
    ] {
        r.memlock_soft = soft;
        r.memlock_hard = hard;
        let p = decide(&snapshot(r.clone(), &["ens1", "ib0"], &[]), &c);
        assert_eq!(
            p.value_of("NCCL_IB_DISABLE").is_some(),
            disabled,
            "{soft:?}/{hard:?}"
        );
        assert_eq!(p.raise_memlock, raise, "{soft:?}/{hard:?}");
    }
}

// ---------------------------------------------------------------------------------------------------------
// RoCE pod with and without its Multus netdev; several HCAs, some down

#[test]
fn roce_pod_with_and_without_multus_netdev() {
    if !require_root("roce_pod_with_and_without_multus_netdev") {
        return;
    }
    let t = Tmp::new("roce");
    add_port(
        &t.sys(),
        "mlx5_2",
        1,
        true,
        "Ethernet",
        "100 Gb/sec (2X HDR)",
        &[
            (
                0,
                "fe80:0000:0000:0000:1c34:daff:fe5a:0001",
                "IB/RoCE v1",
                Some("net1"),
            ),
            (
                1,
                "fe80:0000:0000:0000:1c34:daff:fe5a:0001",
                "RoCE v2",
                Some("net1"),
            ),
            (
                3,
                "0000:0000:0000:0000:0000:ffff:0a0a:0005",
                "RoCE v2",
                Some("net1"),
            ),
        ],
    );
    uverbs(&t.dev(), 2);
    let mut r = rdma::probe(&t.sys(), &t.dev());
    assert_eq!(r.error, None);
    let gids = &r.devices[0].ports[0].gids;
    assert_eq!(gids.len(), 3, "{gids:?}");
    assert_eq!(gids[1].kind.as_deref(), Some("RoCE v2"));
    r.memlock_soft = None;
    r.memlock_hard = None;
    let c = cfg(&t);

    let p = decide(&snapshot(r.clone(), &["lo", "eth0", "net1"], &[]), &c);
    assert_eq!(p.value_of("NCCL_IB_DISABLE"), None);
    assert!(!p.has_warnings(), "{:?}", p.warnings);

    let p = decide(&snapshot(r, &["lo", "eth0"], &[]), &c);
    assert_eq!(p.value_of("NCCL_IB_DISABLE"), Some("1"));
    assert_eq!(codes(&p), vec!["rdma-roce-netdev-missing"]);
    assert!(p.warnings[0].message.contains("net1"));
}

#[test]
fn several_hcas_some_down_gives_exact_list() {
    if !require_root("several_hcas_some_down_gives_exact_list") {
        return;
    }
    let t = Tmp::new("hcas");
    for (i, active) in [(0, true), (1, false), (2, true), (3, false)] {
        add_port(
            &t.sys(),
            &format!("mlx5_{i}"),
            1,
            active,
            "InfiniBand",
            "400 Gb/sec (4X NDR)",
            &[(
                0,
                "fe80:0000:0000:0000:b859:9f03:0000:0001",
                "IB/RoCE v1",
                None,
            )],
        );
        uverbs(&t.dev(), i);
    }
    // A dangling entry in /dev/infiniband that is not a device node is ignored.
    write(&t.dev().join("infiniband/uverbs9"), "not a node");
    let mut r = rdma::probe(&t.sys(), &t.dev());
    assert_eq!(r.error, None);
    assert_eq!(r.uverbs, vec!["uverbs0", "uverbs1", "uverbs2", "uverbs3"]);
    r.memlock_soft = None;
    r.memlock_hard = None;
    let p = decide(&snapshot(r, &["lo", "eth0", "ib0"], &[]), &cfg(&t));
    assert_eq!(p.value_of("NCCL_IB_HCA"), Some("=mlx5_0,mlx5_2"));
    assert_eq!(p.value_of("NCCL_IB_DISABLE"), None);
}

/// `active` InfiniBand HCAs `mlx5_0…` (port 1 ACTIVE) and then `down` more (port DOWN), each with its verbs
/// node `uverbsI` and `class/infiniband_verbs/uverbsI/ibdev` naming it, probed from the fake tree; memlock
/// unlimited (this machine's limit cannot be raised: the decision is given the value).
fn probed_hcas(t: &Tmp, active: u32, down: u32) -> RdmaSnapshot {
    for i in 0..active + down {
        let name = format!("mlx5_{i}");
        add_port(
            &t.sys(),
            &name,
            1,
            i < active,
            "InfiniBand",
            "400 Gb/sec (4X NDR)",
            &[(
                0,
                "fe80:0000:0000:0000:b859:9f03:0000:0001",
                "IB/RoCE v1",
                None,
            )],
        );
        write(
            &t.sys()
                .join(format!("class/infiniband_verbs/uverbs{i}/ibdev")),
            &format!("{name}\n"),
        );
        uverbs(&t.dev(), u64::from(i));
    }
    let mut r = rdma::probe(&t.sys(), &t.dev());
    assert_eq!(r.error, None);
    assert_eq!(r.devices.len(), (active + down) as usize);
    r.memlock_soft = None;
    r.memlock_hard = None;
    r
}

/// Every ACTIVE HCA usable: info `rdma-usable`, nothing changed; the same HCA with 8 MiB memlock: no
/// `rdma-usable`.
#[test]
fn rdma_usable_is_reported_and_changes_nothing() {
    if !require_root("rdma_usable_is_reported_and_changes_nothing") {
        return;
    }
    let t = Tmp::new("usable");
    let mut r = probed_hcas(&t, 1, 0);
    let p = decide(&snapshot(r.clone(), &["lo", "eth0"], &[]), &cfg(&t));
    assert_eq!(codes(&p), vec!["rdma-usable"]);
    assert!(p.warnings[0].message.contains("mlx5_0"), "{:?}", p.warnings);
    assert!(p.changes.is_empty(), "{:?}", p.changes);
    r.memlock_soft = Some(8 * MIB);
    r.memlock_hard = Some(8 * MIB);
    // Without CAP_IPC_LOCK (this test process has it; the limit would not bind it).
    r.cap_ipc_lock = Some(false);
    let p = decide(&snapshot(r, &["lo", "eth0"], &[]), &cfg(&t));
    assert!(!codes(&p).contains(&"rdma-usable"), "{:?}", codes(&p));
    assert_eq!(p.value_of("NCCL_IB_DISABLE"), Some("1"));
}

/// 17 usable HCAs beside a DOWN one: more than the 16 entries NCCL parses in `NCCL_IB_HCA`, so it is not set
/// (`rdma-hca-too-many`); 16 usable: the exact list, and no such code.
#[test]
fn more_usable_hcas_than_nccl_ib_hca_can_hold() {
    if !require_root("more_usable_hcas_than_nccl_ib_hca_can_hold") {
        return;
    }
    let t = Tmp::new("many");
    let p = decide(
        &snapshot(probed_hcas(&t, 17, 1), &["lo", "eth0"], &[]),
        &cfg(&t),
    );
    assert_eq!(codes(&p), vec!["rdma-hca-too-many"]);
    assert!(
        p.warnings[0].message.contains("mlx5_17"),
        "{:?}",
        p.warnings
    );
    assert_eq!(p.value_of("NCCL_IB_HCA"), None);
    assert_eq!(p.value_of("NCCL_IB_DISABLE"), None);

    let t = Tmp::new("sixteen");
    let p = decide(
        &snapshot(probed_hcas(&t, 16, 1), &["lo", "eth0"], &[]),
        &cfg(&t),
    );
    assert!(!codes(&p).contains(&"rdma-hca-too-many"), "{:?}", codes(&p));
    // Exact names (`=`), each usable HCA once, in any order; not the DOWN one.
    let v = p.value_of("NCCL_IB_HCA").expect("NCCL_IB_HCA set");
    let mut got: Vec<&str> = v
        .strip_prefix('=')
        .expect("exact list")
        .split(',')
        .collect();
    got.sort_unstable();
    let mut want: Vec<String> = (0..16).map(|i| format!("mlx5_{i}")).collect();
    want.sort_unstable();
    assert_eq!(got, want);
}

// ---------------------------------------------------------------------------------------------------------
// F22: one verbs node per HCA

#[test]
fn f22_each_hca_gets_its_own_verbs_node() {
    if !require_root("f22_each_hca_gets_its_own_verbs_node") {
        return;
    }
    let t = Tmp::new("f22");
    for (i, net) in [(0, "net1"), (1, "net2")] {
        let dev = format!("erdma_{i}");
        add_port(
            &t.sys(),
            &dev,
            1,
            true,
            "Ethernet",
            "100 Gb/sec (4X EDR)",
            &[(
                3,
                "0000:0000:0000:0000:0000:ffff:0a0a:0005",
                "RoCE v2",
                Some(net),
            )],
        );
        // The kernel's map, numbered against the HCAs on purpose: uverbs1 is erdma_0.
        write(
            &t.sys()
                .join(format!("class/infiniband_verbs/uverbs{}/ibdev", 1 - i)),
            &format!("{dev}\n"),
        );
    }
    // A node that opens read-write (/dev/null's numbers) for erdma_0 only.
    char_node(&t.dev().join("infiniband/uverbs1"), 1, 3);
    let links = ["lo", "eth0", "net1", "net2"];
    let probe = || {
        let mut r = rdma::probe(&t.sys(), &t.dev());
        (r.memlock_soft, r.memlock_hard) = (None, None);
        r
    };
    let r = probe();
    assert_eq!(r.error, None);
    let v0 = r.devices[0].verbs.clone().expect("erdma_0 mapped");
    assert_eq!(
        (v0.name.as_str(), v0.present, v0.open_error.as_deref()),
        ("uverbs1", true, None)
    );
    let v1 = r.devices[1].verbs.clone().expect("erdma_1 mapped");
    assert_eq!((v1.name.as_str(), v1.present), ("uverbs0", false));
    assert_eq!(
        r.devices[0].ports[0].gid_tbl_len, 4,
        "gids/1 (zero) and gids/3 make a 4-entry table"
    );
    let p = decide(&snapshot(r, &links, &[]), &cfg(&t));
    assert_eq!(p.value_of("NCCL_IB_HCA"), Some("=erdma_0"));
    assert!(codes(&p).contains(&"rdma-hca-unusable"));

    // erdma_1's node exists with the real uverbs major and no driver: it does not open (ENXIO).
    char_node(&t.dev().join("infiniband/uverbs0"), 231, 192);
    let r = probe();
    let v1 = r.devices[1].verbs.clone().expect("mapped");
    assert!(v1.present);
    assert!(
        v1.open_error
            .as_deref()
            .is_some_and(|e| e.contains("No such device")),
        "{v1:?}"
    );
    let p = decide(&snapshot(r, &links, &[]), &cfg(&t));
    assert_eq!(p.value_of("NCCL_IB_HCA"), Some("=erdma_0"));

    // A plain file where the node should be: not a character device.
    fs::remove_file(t.dev().join("infiniband/uverbs0")).expect("rm");
    write(&t.dev().join("infiniband/uverbs0"), "x");
    let v1 = probe().devices[1].verbs.clone().expect("mapped");
    assert_eq!(
        (v1.present, v1.open_error.as_deref()),
        (false, Some("not a character device"))
    );

    // Both open: every HCA used, no list.
    fs::remove_file(t.dev().join("infiniband/uverbs0")).expect("rm");
    char_node(&t.dev().join("infiniband/uverbs0"), 1, 3);
    let p = decide(&snapshot(probe(), &links, &[]), &cfg(&t));
    assert_eq!(p.value_of("NCCL_IB_HCA"), None);
    assert!(!codes(&p).contains(&"rdma-hca-unusable"));
}

// ---------------------------------------------------------------------------------------------------------
// F30: leftover nccl-* segments and writability

#[test]
fn f30_shm_probe_lists_nccl_segments() {
    let t = Tmp::new("f30");
    let dir = t.0.join("shm");
    fs::create_dir_all(&dir).expect("mkdir");
    fs::write(dir.join("nccl-small"), vec![1u8; 8192]).expect("write");
    fs::write(dir.join("nccl-big"), vec![1u8; 65536]).expect("write");
    fs::write(dir.join("other"), vec![1u8; 65536]).expect("write");
    let s = host::probe_shm(&dir);
    assert_eq!(s.error, None);
    assert_eq!(s.writable, Some(true));
    let names: Vec<&str> = s.nccl_segments.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, vec!["nccl-big", "nccl-small"]);
    assert!(s.nccl_segments[0].bytes >= 65536);
    // A missing path: not checked.
    let s = host::probe_shm(&t.0.join("missing"));
    assert_eq!((s.writable, s.nccl_segments.len()), (None, 0));
}

// ---------------------------------------------------------------------------------------------------------
// F13: Docker's 64 MiB /dev/shm (a private tmpfs mount in a new mount namespace)

/// Child half of F13: runs inside `unshare -m` after the tmpfs mount; prints the ShmInfo. Not a test: ignored
/// ([`run_child`] runs it with `--ignored`).
#[test]
#[ignore = "helper entry point of f13_small_dev_shm, run in a child process"]
fn child_f13_shm() {
    if !child_active("child_f13_shm") {
        return;
    }
    let path = PathBuf::from(std::env::var("NCCLENV_HP_SHM").unwrap_or_default());
    let info = host::probe_shm(&path);
    println!(
        "\n{MARK}{}",
        serde_json::to_string(&info).unwrap_or_default()
    );
}

fn shm_in_private_tmpfs(t: &Tmp, size: &str) -> ShmInfo {
    let dir = t.0.join(format!("shm-{size}"));
    fs::create_dir_all(&dir).expect("mkdir shm");
    let wrapper: Vec<String> = [
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        "mount -t tmpfs -o size=\"$1\" ncclenv-test \"$2\" && shift 2 && exec \"$@\"",
        "sh",
        size,
        &dir.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let v = run_child(
        "child_f13_shm",
        &[("NCCLENV_HP_SHM", dir.display().to_string())],
        &wrapper,
        None,
    );
    serde_json::from_value(v).expect("ShmInfo")
}

#[test]
fn f13_small_dev_shm() {
    if !require_root("f13_small_dev_shm") {
        return;
    }
    let t = Tmp::new("f13");
    fs::create_dir_all(t.dev()).expect("mkdir dev");
    let mut env = BTreeMap::new();
    env.insert("CUDA_VISIBLE_DEVICES".to_string(), "0,1,2,3".to_string());
    let gpus = host::gpu_count(&env, &t.dev());
    assert_eq!(gpus.count, Some(4));
    assert_eq!(gpus.source, "CUDA_VISIBLE_DEVICES");
    let c = Config {
        shm_path: t.0.join("shm-64m"),
        ..cfg(&t)
    };

    let small = shm_in_private_tmpfs(&t, "64m");
    assert_eq!(small.error, None);
    assert_eq!(small.total_bytes, Some(64 * MIB));
    assert!(!small.read_only);
    let s = Snapshot {
        shm: Some(small.clone()),
        gpus: Some(gpus.clone()),
        ..Snapshot::default()
    };
    let p = decide(&s, &c);
    assert_eq!(p.value_of("NCCL_SHM_DISABLE"), Some("1"));
    assert_eq!(codes(&p), vec!["shm-too-small"]);
    let w = &p.warnings[0];
    assert!(w.remedy.contains("--shm-size=1g") && w.remedy.contains("--ipc=host"));

    // Inherited NCCL_SHM_DISABLE kept.
    let mut s2 = s.clone();
    s2.env.insert("NCCL_SHM_DISABLE".into(), "1".into());
    assert!(decide(&s2, &c).changes.is_empty());

    let big = shm_in_private_tmpfs(&t, "1g");
    assert_eq!(big.total_bytes, Some(1 << 30));
    let s = Snapshot {
        shm: Some(big),
        gpus: Some(gpus),
        ..Snapshot::default()
    };
    let p = decide(&s, &c);
    assert_eq!(p.value_of("NCCL_SHM_DISABLE"), None);
    assert!(p.warnings.is_empty());

    // The mounts stayed in the child's namespace.
    let here = host::probe_shm(&t.0.join("shm-64m"));
    assert_ne!(here.total_bytes, Some(64 * MIB));
}

#[test]
fn gpu_count_from_device_nodes() {
    if !require_root("gpu_count_from_device_nodes") {
        return;
    }
    let t = Tmp::new("gpus");
    for i in 0..3 {
        char_node(&t.dev().join(format!("nvidia{i}")), 195, i);
    }
    char_node(&t.dev().join("nvidiactl"), 195, 255);
    char_node(&t.dev().join("nvidia-uvm"), 510, 0);
    let g = host::gpu_count(&BTreeMap::new(), &t.dev());
    assert_eq!(g.count, Some(3));
    let mut env = BTreeMap::new();
    env.insert("NVIDIA_VISIBLE_DEVICES".to_string(), "all".to_string());
    assert_eq!(host::gpu_count(&env, &t.dev()).count, Some(3));
    // An index beyond the nodes ends the CUDA list.
    env.insert("CUDA_VISIBLE_DEVICES".to_string(), "0,1,2,3".to_string());
    let g = host::gpu_count(&env, &t.dev());
    assert_eq!(g.count, Some(3));
    assert!(g.warning.is_some());
}

#[test]
fn link_speeds_from_fake_sysfs() {
    let t = Tmp::new("speeds");
    write(&t.sys().join("class/net/eth0/speed"), "25000\n");
    write(&t.sys().join("class/net/veth1/speed"), "-1\n");
    let names: Vec<String> = ["eth0", "veth1", "lo"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let s = host::link_speeds(&t.sys(), &names);
    assert_eq!(s.len(), 1);
    assert_eq!(s.get("eth0"), Some(&25000));
}

// ---------------------------------------------------------------------------------------------------------
// The real machine, whatever is there

#[test]
fn real_machine_probes_without_error() {
    let r = rdma::probe(Path::new("/sys"), Path::new("/dev"));
    assert_eq!(r.error, None, "{r:?}");
    if Path::new("/dev/shm").is_dir() {
        let s = host::probe_shm(Path::new("/dev/shm"));
        assert_eq!(s.error, None, "{s:?}");
        assert!(s.total_bytes.is_some());
    }
    let env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| {
            [
                "CUDA_VISIBLE_DEVICES",
                "NVIDIA_VISIBLE_DEVICES",
                "LD_LIBRARY_PATH",
                "PYTHONPATH",
                "VIRTUAL_ENV",
                "CONDA_PREFIX",
                "HOME",
            ]
            .contains(&k.as_str())
        })
        .collect();
    let g = host::gpu_count(&env, Path::new("/dev"));
    assert!(!g.source.is_empty());
    let names: Vec<String> = fs::read_dir("/sys/class/net")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let speeds = host::link_speeds(Path::new("/sys"), &names);
    assert!(speeds.len() <= names.len());
    let started = std::time::Instant::now();
    let installs = nccl::find_installs(&env);
    let took = started.elapsed();
    for i in &installs {
        assert!(Path::new(&i.path).exists(), "{i:?}");
    }
    eprintln!(
        "real machine: rdma devices {}, uverbs {:?}, memlock {:?}/{:?}, gpus {:?} ({}), {} link speeds, \
         nccl installs {installs:?} in {took:?}",
        r.devices.len(),
        r.uverbs,
        r.memlock_soft,
        r.memlock_hard,
        g.count,
        g.source,
        speeds.len()
    );
}
