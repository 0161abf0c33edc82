//! HuggingFace Accelerate's launcher (#21, item 2) through the real binary in a network namespace with two
//! NICs: `accelerate launch` with its flags, with its config file (named, or the default one under `HOME`,
//! `XDG_CACHE_HOME` or `HF_HOME`), `python -m accelerate.commands.launch`, and inside `sh -c`; each takes the
//! route to the master on the second NIC, and the controls (no master named, `--cpu`, a flag that names
//! another master) take the default route.

use crate::common;

use common::{exe, Netns, TempDir};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_ncclenv");
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A job directory: `bin/accelerate` and `bin/python` stand-ins that print `GLOO_SOCKET_IFNAME=…`, an empty
/// sysfs and devfs, and a `home` folder.
fn job_dir() -> TempDir {
    let tmp = TempDir::new("accel");
    for d in ["bin", "sys", "dev", "home"] {
        std::fs::create_dir_all(tmp.join(d)).unwrap_or_else(|e| panic!("mkdir {d}: {e}"));
    }
    for name in ["accelerate", "python"] {
        exe::write(
            &tmp.join(&format!("bin/{name}")),
            "#!/bin/sh\necho \"GLOO_SOCKET_IFNAME=$GLOO_SOCKET_IFNAME\"\n",
            0o755,
        );
    }
    tmp
}

/// `ncclenv -- ARGV…` in `ns` with a cleared environment plus `HOME` (the job directory's `home`) and
/// `vars`: the interface the command was given (`GLOO_SOCKET_IFNAME`) and stderr.
fn run(
    ns: &Netns,
    tmp: &TempDir,
    argv: &[&str],
    vars: &[(&str, &str)],
) -> (Option<String>, String) {
    let mut c: Command = ns.command(BIN);
    c.env_clear()
        .env("PATH", format!("{}:{PATH}", tmp.join("bin").display()))
        .env("HOME", tmp.join("home"))
        .env("NCCLENV_SYSFS", tmp.join("sys"))
        .env("NCCLENV_DEVFS", tmp.join("dev"))
        .env("NCCLENV_SHM_MIN", "0")
        .envs(vars.iter().copied())
        .arg("--")
        .args(argv);
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "ncclenv panicked:\n{stderr}");
    assert_eq!(out.status.code(), Some(0), "{argv:?}\n{stderr}");
    let ifname = stdout
        .lines()
        .find_map(|l| l.strip_prefix("GLOO_SOCKET_IFNAME="))
        .map(str::to_string);
    (ifname, stderr)
}

/// A config file as `accelerate config` writes it for node 1 of 2 whose master is 10.62.0.9 (with a nested
/// section that names another address, which is not read).
const CONFIG: &str = "compute_environment: LOCAL_MACHINE
debug: false
distributed_type: MULTI_GPU
downcast_bf16: 'no'
fsdp_config:
  main_process_ip: 10.61.0.99
gpu_ids: all
machine_rank: 1
main_process_ip: 10.62.0.9
main_process_port: 29500
main_training_function: main
mixed_precision: bf16
num_machines: 2
num_processes: 16
rdzv_backend: static
same_network: true
tpu_env: []
use_cpu: false
";

fn write(path: &std::path::Path, text: &str) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// eth0 carries the default route (10.61.0.0/24); eth1 is the job's network, where the master 10.62.0.9 is.
fn two_nics() -> Netns {
    let ns = Netns::new("accel");
    ns.plug("eth0");
    ns.addr("eth0", "10.61.0.2/24");
    ns.route("default via 10.61.0.1 dev eth0");
    ns.plug("eth1");
    ns.addr("eth1", "10.62.0.2/24");
    assert!(ns.ip(&["route", "get", "10.62.0.9"]).contains("dev eth1"));
    ns
}

/// The interface (empty when the command printed none), and stderr.
fn eth(r: (Option<String>, String)) -> (String, String) {
    (r.0.unwrap_or_default(), r.1)
}

#[test]
fn accelerate_launch_flags_route_to_its_master() {
    if !common::require_root() {
        return;
    }
    let ns = two_nics();
    let tmp = job_dir();
    // Flags.
    let flags = [
        "accelerate",
        "launch",
        "--multi_gpu",
        "--num_machines",
        "2",
        "--machine_rank",
        "1",
        "--main_process_ip",
        "10.62.0.9",
        "--main_process_port",
        "29500",
        "train.py",
    ];
    let (i, e) = eth(run(&ns, &tmp, &flags, &[]));
    assert_eq!(i, "eth1", "{e}");
    // Control: the same job naming no master takes the default route.
    let (i, e) = eth(run(
        &ns,
        &tmp,
        &["accelerate", "launch", "--num_machines", "2", "train.py"],
        &[],
    ));
    assert_eq!(i, "eth0", "{e}");

    // Inside sh -c, with the variables the shell expands.
    let (i, e) = eth(run(
        &ns,
        &tmp,
        &[
            "/bin/bash",
            "-ec",
            "cd / && exec accelerate launch --num_machines=2 --main_process_ip=${MASTER_ADDR} --main_process_port=${MASTER_PORT} train.py",
        ],
        &[("MASTER_ADDR", "10.62.0.9"), ("MASTER_PORT", "29500"), ("HF_HOME", "/nonexistent")],
    ));
    assert_eq!(i, "eth1", "{e}");
}

#[test]
fn accelerate_config_files_route_to_its_master() {
    if !common::require_root() {
        return;
    }
    let ns = two_nics();
    let tmp = job_dir();
    // The default config file under ~/.cache, then under XDG_CACHE_HOME, then under HF_HOME.
    let home_cfg = tmp.join("home/.cache/huggingface/accelerate/default_config.yaml");
    write(&home_cfg, CONFIG);
    let plain = ["accelerate", "launch", "train.py"];
    let (i, e) = eth(run(&ns, &tmp, &plain, &[]));
    assert_eq!(i, "eth1", "{e}");
    // Control: with --cpu Accelerate does not read the default file.
    let (i, e) = eth(run(
        &ns,
        &tmp,
        &["accelerate", "launch", "--cpu", "train.py"],
        &[],
    ));
    assert_eq!(i, "eth0", "{e}");
    // A flag wins over the file.
    let (i, e) = eth(run(
        &ns,
        &tmp,
        &[
            "accelerate",
            "launch",
            "--main-process-ip=10.61.0.7",
            "train.py",
        ],
        &[],
    ));
    assert_eq!(i, "eth0", "{e}");
    std::fs::remove_file(&home_cfg).expect("remove");
    let xdg = tmp.join("xdg");
    write(
        &xdg.join("huggingface/accelerate/default_config.yaml"),
        CONFIG,
    );
    let xdg_s = xdg.display().to_string();
    let (i, e) = eth(run(&ns, &tmp, &plain, &[("XDG_CACHE_HOME", &xdg_s)]));
    assert_eq!(i, "eth1", "{e}");
    let hf = tmp.join("hf");
    let hf_s = hf.display().to_string();
    // HF_HOME wins over XDG_CACHE_HOME: an empty folder there means no default file.
    std::fs::create_dir_all(&hf).expect("mkdir hf");
    let (i, e) = eth(run(
        &ns,
        &tmp,
        &plain,
        &[("XDG_CACHE_HOME", &xdg_s), ("HF_HOME", &hf_s)],
    ));
    assert_eq!(i, "eth0", "{e}");
    write(&hf.join("accelerate/default_config.yaml"), CONFIG);
    let (i, e) = eth(run(&ns, &tmp, &plain, &[("HF_HOME", &hf_s)]));
    assert_eq!(i, "eth1", "{e}");

    // A named file, with `python -m accelerate.commands.launch`.
    let named = tmp.join("multi.yaml");
    write(&named, CONFIG);
    let named_s = named.display().to_string();
    let (i, e) = eth(run(
        &ns,
        &tmp,
        &[
            "python",
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            &named_s,
            "train.py",
        ],
        &[("HF_HOME", "/nonexistent")],
    ));
    assert_eq!(i, "eth1", "{e}");
    assert!(e.contains("route to peer 10.62.0.9"), "{e}");
}
