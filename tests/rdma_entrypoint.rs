//! F14 and F15 (shared/FIELD-CASES.md) through the built binary as the entrypoint: a fake sysfs tree with an
//! HCA (`NCCLENV_SYSFS`), a fake dev tree with real character nodes (`NCCLENV_DEVFS`), the memlock limit set
//! with `prlimit`, and the command reading what it really received (`ulimit -l`, the environment).

mod common;

use common::{require_root, Netns, TempDir};
use std::fs;
use std::path::Path;
use std::process::Output;

fn write(p: &Path, text: &str) {
    fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    fs::write(p, text).expect("write fixture");
}

/// `<sys>/class/infiniband/<dev>/ports/1/…`, ACTIVE and LinkUp, with GID 0 bound to `ndev` (RoCE).
fn hca(sys: &Path, dev: &str, link_layer: &str, rate: &str, ndev: Option<&str>) {
    let p = sys.join(format!("class/infiniband/{dev}/ports/1"));
    write(&p.join("state"), "4: ACTIVE\n");
    write(&p.join("phys_state"), "5: LinkUp\n");
    write(&p.join("link_layer"), &format!("{link_layer}\n"));
    write(&p.join("rate"), &format!("{rate}\n"));
    write(
        &p.join("gids/0"),
        "fe80:0000:0000:0000:0a5c:12ff:fe34:5678\n",
    );
    if let Some(n) = ndev {
        write(&p.join("gid_attrs/types/0"), "RoCE v2\n");
        write(&p.join("gid_attrs/ndevs/0"), &format!("{n}\n"));
    }
}

fn uverbs(dev: &Path) {
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    fs::create_dir_all(dev.join("infiniband")).expect("mkdir");
    mknod(
        &dev.join("infiniband/uverbs0"),
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        makedev(231, 192),
    )
    .expect("mknod uverbs0");
}

/// Run `[prlimit --memlock=SOFT:HARD] ncclenv -- sh -c 'ulimit -l; env'` in `ns`.
fn run(ns: &Netns, t: &TempDir, memlock: Option<&str>, extra: &[(&str, &str)]) -> Output {
    let mut c = match memlock {
        Some(_) => ns.command("prlimit"),
        None => ns.command(env!("CARGO_BIN_EXE_ncclenv")),
    };
    c.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("NCCLENV_SYSFS", t.join("sys"))
        .env("NCCLENV_DEVFS", t.join("dev"))
        .env("NCCLENV_SHM_MIN", "0");
    for (k, v) in extra {
        c.env(k, v);
    }
    if let Some(m) = memlock {
        c.arg(format!("--memlock={m}"))
            .arg(env!("CARGO_BIN_EXE_ncclenv"));
    }
    c.args(["--", "sh", "-c", "echo memlock=$(ulimit -l); env"]);
    c.output().expect("run prlimit ncclenv")
}

fn value<'a>(out: &'a str, name: &str) -> Option<&'a str> {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
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
    let o = run(&ns, &t, None, &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(value(&out, "NCCL_IB_DISABLE"), Some("1"), "{out}");
    assert_eq!(value(&out, "NCCL_SOCKET_IFNAME"), Some("bond0"));
    assert!(
        err.contains("--device=/dev/infiniband") && err.contains("--cap-add=IPC_LOCK"),
        "{err}"
    );
    // An inherited NCCL_IB_DISABLE=0 is kept, with the same warning.
    let o = run(&ns, &t, None, &[("NCCL_IB_DISABLE", "0")]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(value(&out, "NCCL_IB_DISABLE"), Some("0"));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--device=/dev/infiniband"));
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
    hca(
        &t.join("sys"),
        "mlx5_0",
        "InfiniBand",
        "200 Gb/sec (4X HDR)",
        None,
    );
    uverbs(&t.join("dev"));
    let mib8 = 8 * 1024 * 1024;
    // soft = hard = 8 MiB: IB off, the socket interface is still the routed one (not NCCL's ib* preference).
    let o = run(&ns, &t, Some(&format!("{mib8}:{mib8}")), &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(value(&out, "NCCL_IB_DISABLE"), Some("1"), "{out}");
    assert_eq!(value(&out, "NCCL_SOCKET_IFNAME"), Some("ens1"));
    assert!(err.contains("--ulimit memlock=-1"), "{err}");
    assert_eq!(value(&out, "memlock"), Some("8192"));
    // A soft limit below the hard one is raised to it: the command sees the hard limit.
    let hard = hard_memlock();
    let (soft, hard_s, want) = if hard == nix::sys::resource::RLIM_INFINITY {
        (
            mib8.to_string(),
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
    let o = run(&ns, &t, Some(&format!("{soft}:{hard_s}")), &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
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
