//! The job's facts however it is started (#21): shell-wrapped commands (`sh -c "cd /w && torchrun …"`),
//! Slurm's variables, an Open MPI rank's variables and DeepSpeed's multinode runner, through the real binary in
//! network namespaces. Each case has a control that shows the
//! form matters: the same layout with a command that names no master takes the default route, and a
//! single-node job on a host with only `lo` runs where the 2-node one is refused (78).

use crate::common;

use common::{exe, Netns, TempDir};
use std::collections::BTreeMap;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_ncclenv");
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What one run gave: exit status, the interface the job was given (`GLOO_SOCKET_IFNAME`), stderr.
struct Run {
    code: Option<i32>,
    ifname: Option<String>,
    stderr: String,
}

/// A job directory: `bin/torchrun` and `bin/python` stand-ins that print `GLOO_SOCKET_IFNAME=…`, an empty
/// sysfs and devfs.
fn job_dir() -> TempDir {
    let tmp = TempDir::new("lforms");
    for d in ["bin", "sys", "dev"] {
        std::fs::create_dir_all(tmp.join(d)).unwrap_or_else(|e| panic!("mkdir {d}: {e}"));
    }
    for name in ["torchrun", "python", "mpirun", "accelerate"] {
        exe::write(
            &tmp.join(&format!("bin/{name}")),
            "#!/bin/sh\necho \"GLOO_SOCKET_IFNAME=$GLOO_SOCKET_IFNAME\"\n",
            0o755,
        );
    }
    tmp
}

/// `ncclenv -- ARGV…` in `ns` with a cleared environment plus `vars`.
fn run(ns: &Netns, tmp: &TempDir, argv: &[&str], vars: &[(&str, &str)]) -> Run {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    env.insert(
        "PATH".into(),
        format!("{}:{PATH}", tmp.join("bin").display()),
    );
    env.insert(
        "NCCLENV_SYSFS".into(),
        tmp.join("sys").display().to_string(),
    );
    env.insert(
        "NCCLENV_DEVFS".into(),
        tmp.join("dev").display().to_string(),
    );
    env.insert("NCCLENV_SHM_MIN".into(), "0".into());
    for (k, v) in vars {
        env.insert(k.to_string(), v.to_string());
    }
    let mut c: Command = ns.command(BIN);
    c.env_clear().envs(&env).arg("--").args(argv);
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "ncclenv panicked:\n{stderr}");
    Run {
        code: out.status.code(),
        ifname: stdout
            .lines()
            .find_map(|l| l.strip_prefix("GLOO_SOCKET_IFNAME="))
            .map(str::to_string),
        stderr,
    }
}

/// Two NICs: `eth0` carries the default route (10.61.0.0/24), `eth1` is the job's network (10.62.0.0/24)
/// where the master 10.62.0.9 is.
fn two_nics() -> Netns {
    let ns = Netns::new("lforms");
    ns.plug("eth0");
    ns.addr("eth0", "10.61.0.2/24");
    ns.route("default via 10.61.0.1 dev eth0");
    ns.plug("eth1");
    ns.addr("eth1", "10.62.0.2/24");
    ns
}

#[test]
fn shell_wrapped_torchrun_routes_to_its_master() {
    if !common::require_root() {
        return;
    }
    let ns = two_nics();
    let tmp = job_dir();
    let vars = [("MASTER_ADDR", "10.62.0.9"), ("MASTER_PORT", "23456")];
    // The oracle: the kernel's route to the master leaves through eth1.
    assert!(ns.ip(&["route", "get", "10.62.0.9"]).contains("dev eth1"));
    for line in [
        "cd / && torchrun --nnodes=2 --rdzv_endpoint=${MASTER_ADDR}:${MASTER_PORT} t.py",
        "set -e; exec env NCCL_DEBUG=WARN nohup torchrun --nnodes 2 --master_addr=\"$MASTER_ADDR\" t.py 2>&1",
    ] {
        let mut argv: Vec<&str> = vec!["/bin/bash", "-ec", line];
        let r = run(&ns, &tmp, &argv, &vars);
        assert_eq!((r.code, r.ifname.as_deref()), (Some(0), Some("eth1")), "{line}\n{}", r.stderr);
        // Control: the same job without the master's name takes the default route.
        argv[2] = "cd / && torchrun --nnodes=2 t.py";
        let r = run(&ns, &tmp, &argv, &[]);
        assert_eq!(r.ifname.as_deref(), Some("eth0"), "{}", r.stderr);
    }
    // A leading assignment counts as the job's environment.
    let r = run(
        &ns,
        &tmp,
        &[
            "sh",
            "-c",
            "MASTER_ADDR=10.62.0.9 python train.py --nnodes=2",
        ],
        &[],
    );
    assert_eq!(r.ifname.as_deref(), Some("eth1"), "{}", r.stderr);
    // A command substitution is not known: a launcher-argument warning naming it, and no master.
    let r = run(
        &ns,
        &tmp,
        &[
            "sh",
            "-c",
            "torchrun --nnodes=2 --master_addr=$(echo 10.62.0.9) t.py",
        ],
        &vars,
    );
    assert_eq!(r.ifname.as_deref(), Some("eth0"), "{}", r.stderr);
    assert!(
        r.stderr
            .lines()
            .any(|l| l.contains("[launcher-argument]") && l.contains("$(echo 10.62.0.9)")),
        "{}",
        r.stderr
    );
    // An unclosed quote: a warning, and the job runs.
    let r = run(
        &ns,
        &tmp,
        &[
            "sh",
            "-c",
            "true; torchrun --master_addr='10.62.0.9 t.py; true '",
        ],
        &[],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    // An empty MASTER_ADDR is named.
    let r = run(&ns, &tmp, &["python", "train.py"], &[("MASTER_ADDR", "")]);
    assert!(
        r.stderr.lines().any(
            |l| l.contains("[launcher-argument]") && l.contains("MASTER_ADDR is set but empty")
        ),
        "{}",
        r.stderr
    );
}

#[test]
fn shell_arithmetic_keeps_the_master_and_a_dropping_wrapper_is_named() {
    if !common::require_root() {
        return;
    }
    let ns = two_nics();
    let tmp = job_dir();
    // Break-it finding: `$((…))` ended the substitution at its first `)`, the master after it was lost and
    // the job took the default route.
    let r = run(
        &ns,
        &tmp,
        &[
            "sh",
            "-c",
            "torchrun --node_rank=$((0)) --nnodes=2 --master_addr=10.62.0.9 t.py",
        ],
        &[],
    );
    assert_eq!(
        (r.code, r.ifname.as_deref()),
        (Some(0), Some("eth1")),
        "{}",
        r.stderr
    );
    assert!(
        !r.stderr.contains("[env-removed-by-wrapper]"),
        "{}",
        r.stderr
    );
    // `env -u` inside the shell removes what ncclenv set: the job sees nothing, and the warning names it.
    let line = "env -u GLOO_SOCKET_IFNAME torchrun --nnodes=2 --master_addr=10.62.0.9 t.py";
    let r = run(&ns, &tmp, &["sh", "-c", line], &[]);
    assert_eq!(
        (r.code, r.ifname.as_deref()),
        (Some(0), Some("")),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .lines()
            .any(|l| l.contains("[env-removed-by-wrapper]")
                && l.contains("env -u in the command drops GLOO_SOCKET_IFNAME,")),
        "{}",
        r.stderr
    );
    // `env -i` (with the PATH it needs): every variable ncclenv set is dropped.
    let line = "env -i PATH=\"$PATH\" torchrun --nnodes=2 --master_addr=10.62.0.9 t.py";
    let r = run(&ns, &tmp, &["sh", "-c", line], &[]);
    assert_eq!(r.ifname.as_deref(), Some(""), "{}", r.stderr);
    assert!(
        r.stderr
            .lines()
            .any(|l| l.contains("[env-removed-by-wrapper]")
                && l.contains("env -i in the command drops")
                && l.contains("never sees NCCL_SOCKET_IFNAME")),
        "{}",
        r.stderr
    );
}

#[test]
fn shell_cd_then_accelerate_reads_its_config_file_there() {
    if !common::require_root() {
        return;
    }
    let ns = two_nics();
    let tmp = job_dir();
    let w = tmp.join("w");
    std::fs::create_dir_all(&w).unwrap_or_else(|e| panic!("mkdir w: {e}"));
    std::fs::write(
        w.join("acc.yaml"),
        "main_process_ip: 10.62.0.9\nnum_machines: 2\n",
    )
    .unwrap_or_else(|e| panic!("acc.yaml: {e}"));
    // Break-it finding: the file was read from ncclenv's own directory, so the master was lost.
    let line = format!(
        "cd {} && accelerate launch --config_file acc.yaml t.py",
        w.display()
    );
    let r = run(&ns, &tmp, &["sh", "-c", &line], &[]);
    assert_eq!(
        (r.code, r.ifname.as_deref()),
        (Some(0), Some("eth1")),
        "{}",
        r.stderr
    );
    // Control: without the cd the named file is not there: a warning, and the default route.
    let r = run(
        &ns,
        &tmp,
        &["sh", "-c", "accelerate launch --config_file acc.yaml t.py"],
        &[],
    );
    assert_eq!(r.ifname.as_deref(), Some("eth0"), "{}", r.stderr);
    assert!(r.stderr.contains("[launcher-argument]"), "{}", r.stderr);
}

#[test]
fn shell_wrapped_two_node_job_is_refused_on_lo_only() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("lformslo");
    let tmp = job_dir();
    let r = run(
        &ns,
        &tmp,
        &[
            "sh",
            "-c",
            "cd / && exec torchrun --nnodes=2 --master_addr=m t.py",
        ],
        // `m` does not resolve here: without a bound a 2-node job would wait 600 s for it (#21, item 7).
        &[("NCCLENV_RESOLVE_TIMEOUT_MS", "300")],
    );
    assert_eq!(r.code, Some(78), "{}", r.stderr);
    assert!(r.ifname.is_none());
    // Control: the single-node form runs on lo.
    let r = run(
        &ns,
        &tmp,
        &["sh", "-c", "cd / && exec torchrun --standalone t.py"],
        &[],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
}

#[test]
fn slurm_nodelist_names_the_master() {
    if !common::require_root() {
        return;
    }
    let ns = two_nics();
    let tmp = job_dir();
    let slurm_ok = [
        ("SLURM_JOB_NODELIST", "10.62.0.[9-10]"),
        ("SLURM_JOB_NUM_NODES", "2"),
        ("SLURM_NODEID", "1"),
    ];
    let r = run(&ns, &tmp, &["python", "train.py"], &slurm_ok);
    assert_eq!(r.ifname.as_deref(), Some("eth1"), "{}", r.stderr);
    // An exported MASTER_ADDR still wins.
    let mut with = slurm_ok.to_vec();
    with.push(("MASTER_ADDR", "10.61.0.7"));
    let r = run(&ns, &tmp, &["python", "train.py"], &with);
    assert_eq!(r.ifname.as_deref(), Some("eth0"), "{}", r.stderr);
    // A hostlist that does not parse is named.
    let r = run(
        &ns,
        &tmp,
        &["python", "train.py"],
        &[("SLURM_NODELIST", "gpu[01-"), ("SLURM_NNODES", "2")],
    );
    assert!(
        r.stderr
            .lines()
            .any(|l| l.contains("[launcher-argument]") && l.contains("SLURM_NODELIST")),
        "{}",
        r.stderr
    );
}

/// #21 item 4, per rank: an Open MPI rank (`mpirun … ncclenv -- python train.py`) names mpirun's address in
/// `OMPI_MCA_orte_hnp_uri`, the peer, and the node count in `OMPI_COMM_WORLD_SIZE/LOCAL_SIZE`; the control
/// without the URI takes the default route. In front of mpirun, a hostfile that cannot be read is named.
#[test]
fn open_mpi_rank_routes_to_mpirun() {
    if !common::require_root() {
        return;
    }
    let ns = two_nics();
    let tmp = job_dir();
    let rank = [
        ("OMPI_COMM_WORLD_SIZE", "2"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "1"),
        ("OMPI_COMM_WORLD_RANK", "1"),
        (
            "OMPI_MCA_orte_hnp_uri",
            "3773956096.0;tcp://10.62.0.9,172.17.0.1:41234;tcp6://[fd00::9]:41235",
        ),
    ];
    let r = run(&ns, &tmp, &["python", "train.py"], &rank);
    assert_eq!(r.ifname.as_deref(), Some("eth1"), "{}", r.stderr);
    assert!(r.stderr.contains("route to peer 10.62.0.9"), "{}", r.stderr);
    let r = run(&ns, &tmp, &["python", "train.py"], &rank[..3]);
    assert_eq!(r.ifname.as_deref(), Some("eth0"), "control: {}", r.stderr);
    let r = run(
        &ns,
        &tmp,
        &[
            "mpirun",
            "--hostfile",
            "/nonexistent/hosts",
            "python",
            "train.py",
        ],
        &[],
    );
    assert!(
        r.stderr.lines().any(|l| l.contains("[launcher-argument]")
            && l.contains("/nonexistent/hosts")
            && l.contains("cannot read")),
        "{}",
        r.stderr
    );
}

/// #21 item 1: a shell's leading assignment of the platform's interface variable counts as the job's
/// environment (`sh -c "SM_NETWORK_INTERFACE_NAME=eth1 …"`): SageMaker's row names `eth1`, which is not the
/// default route's; the control without it takes `eth0`.
#[test]
fn shell_assignment_names_the_platform_interface() {
    if !common::require_root() {
        return;
    }
    let ns = two_nics();
    let tmp = job_dir();
    let line = "SM_NETWORK_INTERFACE_NAME=eth1 python train.py --nnodes=2";
    let r = run(&ns, &tmp, &["sh", "-c", line], &[]);
    assert_eq!(
        (r.code, r.ifname.as_deref()),
        (Some(0), Some("eth1")),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("SM_NETWORK_INTERFACE_NAME=eth1"),
        "{}",
        r.stderr
    );
    let r = run(&ns, &tmp, &["sh", "-c", "python train.py --nnodes=2"], &[]);
    assert_eq!(r.ifname.as_deref(), Some("eth0"), "control: {}", r.stderr);
}

/// #21: the contact URI's addresses are ordered by this host's networks. mpirun's URI lists `docker0`'s
/// 172.17.0.1 first, an address this node owns too (every Docker host has it): read in the URI's order, the
/// peer would be this host and the rank would take `docker0`; ordered, it is mpirun's address on `eth1`'s
/// network (connected). The same for prterun's `PMIX_SERVER_URI41`.
#[test]
fn mpi_rank_takes_the_contact_address_on_this_hosts_network() {
    if !common::require_root() {
        return;
    }
    let ns = two_nics();
    ns.bridge("docker0");
    ns.addr("docker0", "172.17.0.1/16");
    let tmp = job_dir();
    let sizes = [
        ("OMPI_COMM_WORLD_SIZE", "2"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "1"),
    ];
    for (var, uri) in [
        (
            "OMPI_MCA_orte_hnp_uri",
            "3773956096.0;tcp://172.17.0.1,10.62.0.9:41234",
        ),
        (
            "PMIX_SERVER_URI41",
            "prterun-node1-4242@0.0;tcp4://172.17.0.1,10.62.0.9:36017",
        ),
    ] {
        let mut vars = sizes.to_vec();
        vars.push((var, uri));
        let r = run(&ns, &tmp, &["python", "train.py"], &vars);
        assert_eq!(r.ifname.as_deref(), Some("eth1"), "{var}: {}", r.stderr);
        assert!(
            r.stderr.contains("route to peer 10.62.0.9"),
            "{var}: {}",
            r.stderr
        );
    }
    // Control: a URI naming only docker0's address makes this host the master, on docker0.
    let mut vars = sizes.to_vec();
    vars.push((
        "OMPI_MCA_orte_hnp_uri",
        "3773956096.0;tcp://172.17.0.1:41234",
    ));
    let r = run(&ns, &tmp, &["python", "train.py"], &vars);
    assert_ne!(r.ifname.as_deref(), Some("eth1"), "control: {}", r.stderr);
}

/// #21 item 5: DeepSpeed's multinode runner copies every `NCCL*` variable to every node (runner.py
/// `EXPORT_ENVS`; a stand-in here, the real CLI in `deepspeed_real_runner_copies_no_node_local_value`): in front of it, ncclenv leaves
/// `NCCL_SOCKET_IFNAME` to each node and says how to run ncclenv on every node; a one-host hostfile (no
/// copying) gets it as usual.
#[test]
fn deepspeed_multinode_runner_gets_no_node_local_name() {
    if !common::require_root() {
        return;
    }
    let ns = two_nics();
    let tmp = job_dir();
    // The stand-in prints NCCL_SOCKET_IFNAME in the line `run` reads.
    exe::write(
        &tmp.join("bin/deepspeed"),
        "#!/bin/sh\necho \"GLOO_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME-unset}\"\n",
        0o755,
    );
    let hosts = tmp.join("hostfile");
    std::fs::write(&hosts, "w1 slots=8\nw2 slots=8\n").unwrap_or_else(|e| panic!("hostfile: {e}"));
    let h = hosts.display().to_string();
    // The whole line (with the per-node command) is at debug level; the default level cuts it to 200 characters.
    let r = run(
        &ns,
        &tmp,
        &["deepspeed", "--hostfile", &h, "train.py"],
        &[("NCCLENV_LOG", "debug")],
    );
    assert_eq!(r.ifname.as_deref(), Some("unset"), "{}", r.stderr);
    assert!(
        r.stderr.contains("[runner-copies-env]")
            && r.stderr.contains("--no_python --no_local_rank"),
        "{}",
        r.stderr
    );
    std::fs::write(&hosts, "w1 slots=8\n").unwrap_or_else(|e| panic!("hostfile: {e}"));
    let r = run(&ns, &tmp, &["deepspeed", "--hostfile", &h, "train.py"], &[]);
    assert_eq!(r.ifname.as_deref(), Some("eth0"), "one host: {}", r.stderr);
}

/// #21 item 5 with the real DeepSpeed 0.19.8 CLI (torch 2.15.0, scripts/install-deepspeed.sh), no GPU:
/// `DS_ACCELERATOR=cuda` makes it the runner of a GPU node, whose multinode command exports every `NCCL*`
/// variable of this node into every node (runner.py `EXPORT_ENVS` + `CUDA_Accelerator.export_envs()`).
/// Stand-ins only for the other machines: `ssh` (the runner's reachability check and `hostname -I`, which names
/// the master) and `pdsh`, which records the command it would run on each node. The control (the runner
/// without ncclenv) shows that the runner does copy an inherited name; in front of it ncclenv sets neither the
/// node-local name nor an `NCCL_IB_DISABLE=1` that only skips a probe finding no HCA here; with one host the
/// runner starts the rank itself and ncclenv's choice reaches it.
#[test]
fn deepspeed_real_runner_copies_no_node_local_value() {
    if !common::require_root() {
        return;
    }
    let Some(ds_bin) = common::needs::deepspeed("0.19.8") else {
        return;
    };
    let ns = two_nics();
    let tmp = job_dir();
    let pdsh_out = tmp.join("pdsh.out");
    exe::write(
        &tmp.join("bin/ssh"),
        "#!/bin/sh
case \"$*\" in *\"hostname -I\"*) echo 10.62.0.9;; esac\nexit 0\n",
        0o755,
    );
    exe::write(
        &tmp.join("bin/pdsh"),
        format!("#!/bin/sh\necho \"$*\" > {}\n", pdsh_out.display()),
        0o755,
    );
    let script = tmp.join("t.py");
    std::fs::write(
        &script,
        "import os\nprint('GLOO_SOCKET_IFNAME=' + os.environ.get('NCCL_SOCKET_IFNAME', 'unset'))\n",
    )
    .unwrap_or_else(|e| panic!("t.py: {e}"));
    let hosts = tmp.join("hostfile");
    std::fs::write(&hosts, "w1 slots=1\nw2 slots=1\n").unwrap_or_else(|e| panic!("hostfile: {e}"));
    let path = format!("{}:{}:{PATH}", tmp.join("bin").display(), ds_bin.display());
    let home = tmp.path.display().to_string();
    let vars = [
        ("PATH", path.as_str()),
        ("HOME", home.as_str()),
        ("DS_ACCELERATOR", "cuda"),
    ];
    let argv = [
        "deepspeed".to_string(),
        "--hostfile".into(),
        hosts.display().to_string(),
        script.display().to_string(),
    ];
    let recorded = || std::fs::read_to_string(&pdsh_out).unwrap_or_default();
    // Control: the real runner alone copies an inherited NCCL_SOCKET_IFNAME into every node's command.
    let out = ns
        .command(&ds_bin.join("deepspeed").display().to_string())
        .env_clear()
        .envs(vars)
        .env("NCCL_SOCKET_IFNAME", "eth1")
        .args(&argv[1..])
        .output()
        .unwrap_or_else(|e| panic!("deepspeed: {e}"));
    assert!(
        recorded().contains("export NCCL_SOCKET_IFNAME=eth1;"),
        "the control did not copy: {:?}\n{}",
        recorded(),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_file(&pdsh_out).unwrap_or_else(|e| panic!("rm: {e}"));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let r = run(&ns, &tmp, &argv, &vars);
    let cmd = recorded();
    assert!(
        cmd.contains("-w w1,w2")
            && cmd.contains("export NCCL_SOCKET_FAMILY=AF_INET;")
            && !cmd.contains("NCCL_SOCKET_IFNAME")
            && !cmd.contains("NCCL_IB_DISABLE"),
        "{cmd}\n{}",
        r.stderr
    );
    assert!(r.stderr.contains("[runner-copies-env]"), "{}", r.stderr);
    // One host: the runner starts the rank here, as ncclenv's child, with ncclenv's choice.
    std::fs::write(&hosts, "w1 slots=1\n").unwrap_or_else(|e| panic!("hostfile: {e}"));
    let r = run(&ns, &tmp, &argv, &vars);
    assert_eq!(
        (r.code, r.ifname.as_deref()),
        (Some(0), Some("eth0")),
        "{}",
        r.stderr
    );
}

/// Break-it finding 6: a shell script run directly (`./run.sh`) gets doctor's "not read" hint, as `bash
/// run.sh` does; a Python script does not. Only doctor reads the script's `#!` line.
#[test]
fn doctor_names_a_shell_script_run_directly_as_not_read() {
    let tmp = job_dir();
    let script = tmp.join("run.sh");
    exe::write(&script, "#!/bin/bash\ntorchrun --nnodes=2 t.py\n", 0o755);
    let py = tmp.join("run.py");
    exe::write(&py, "#!/usr/bin/env python3\nprint(1)\n", 0o755);
    let doctor_with = |argv: &[&str], env: &[(&str, &str)]| {
        let out = Command::new(BIN)
            .env_clear()
            .env("PATH", PATH)
            .envs(env.iter().copied())
            .env("NCCLENV_SYSFS", tmp.join("sys"))
            .env("NCCLENV_DEVFS", tmp.join("dev"))
            .arg("doctor")
            .arg("--")
            .args(argv)
            .output()
            .unwrap_or_else(|e| panic!("cannot run doctor: {e}"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let doctor = |argv: &[&str]| doctor_with(argv, &[]);
    let hint = "which ncclenv does not read";
    let s = script.display().to_string();
    for argv in [vec![s.as_str()], vec!["bash", s.as_str()]] {
        let text = doctor(&argv);
        assert!(text.contains(hint), "{argv:?}: no hint\n{text}");
    }
    let text = doctor(&[&py.display().to_string()]);
    assert!(
        !text.contains(hint),
        "a Python script is no shell script\n{text}"
    );
    // A master named elsewhere does not make the script read: it is still named, without the master advice.
    let text = doctor_with(&[s.as_str()], &[("MASTER_ADDR", "192.0.2.9")]);
    assert!(
        text.contains(hint)
            && text.contains("not seen here")
            && !text.contains("nothing names the master"),
        "with MASTER_ADDR\n{text}"
    );
}
