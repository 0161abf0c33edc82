//! What a job's command line and environment say about the job: which launcher runs it, where its master
//! (the peer) listens and over which protocol, how many nodes it spans, which node this is, and the address
//! this node declares for itself. Pure functions over plain data (argv and a map of variables); the probe
//! (`probe::job`), the command line (`cli`) and the decision read the result.
//!
//! Each launcher is read the way its own source reads it:
//!
//! * **torchrun** (`torch/distributed/run.py`, `torch/distributed/argparse_util.py`, PyTorch 2.x): every
//!   option also comes from `PET_<DEST>` (the `env` action takes the variable as the default, so a flag
//!   wins); `--standalone`/`PET_STANDALONE` is one node; the master is `--rdzv-endpoint`, except that the
//!   static backend (the default) without an endpoint uses `--master-addr:--master-port` (`get_rdzv_endpoint`);
//!   `--node-rank`, `--nnodes` (`N` or `N:M`), `--local-addr` (this node's address). static and c10d
//!   rendezvous are PyTorch's `TCPStore` (raw TCP); the etcd backends speak HTTP.
//! * **Paddle** (`python/paddle/distributed/launch/context/args_envs.py`, `context/__init__.py`): the
//!   variables of `env_args_mapping` *override* the flags (`set_env_in_args` runs after `parse_args`):
//!   `PADDLE_MASTER` over `--master`, `PADDLE_NNODES` over `--nnodes`, `PADDLE_IPS` over `--ips`, `POD_IP`
//!   over `--host` (this node's address), `PADDLE_RANK` over `PADDLE_TRAINER_ID` over `--rank` (the node
//!   rank; negative = unset). `--master` is an HTTP store (an `etcd://` master is etcd, also HTTP); with
//!   `--ips` alone there is no rendezvous server. `fetch_envs` removes `http_proxy` and `https_proxy`.
//! * **Kubernetes operators**: Kubeflow's PaddleJob sets `PADDLE_MASTER`, `PADDLE_NNODES`
//!   (training-operator `pkg/controller.v1/paddlepaddle/envvar.go`); PaddleFlow's paddle-operator sets
//!   `POD_IP`, `PADDLE_TRAINER_ID`, `PADDLE_TRAINERS_NUM`, `PADDLE_TRAINERS`, `PADDLE_TRAINER_ENDPOINTS`
//!   (`controllers/paddlejob_helper.go`); PyTorchJob sets `MASTER_ADDR`, `MASTER_PORT` and torchrun's `PET_*`.
//! * **Accelerate** (`accelerate launch`, `python -m accelerate.commands.launch`; see `crate::accelerate`):
//!   `--main_process_ip` (the master only for more than one machine), `--main_process_port` (default 29500),
//!   `--num_machines` (default 1, as Accelerate's), `--machine_rank`, `--num_processes` (the whole job's), each
//!   flag winning over the same key of its config file (`--config_file`, else the default file under
//!   `HF_HOME`/`XDG_CACHE_HOME`); torchrun's rendezvous at it (`--rdzv_backend`, default static).
//! * **DeepSpeed** (`deepspeed/launcher/runner.py`, `launch.py`): `--master_addr`, `--master_port` (default
//!   29500), `--num_nodes`, `--node_rank`; PyTorch's `TCPStore`.
//! * **Local ranks** (the processes started on this node; see [`local_ranks`]): torchrun
//!   `--nproc-per-node`/`PET_NPROC_PER_NODE`, Paddle `--devices`/`--gpus`/`--nproc_per_node`, DeepSpeed
//!   `--num_gpus`/`--include`.
//! * **SGLang** (`python/sglang/srt/server_args.py`): `--dist-init-addr` (alias `--nccl-init-addr`,
//!   `host:port` or `[v6]:port`), `--nnodes`, `--node-rank`.
//! * **Ray** (`python/ray/scripts/scripts.py`, `ray start`): `--address` is the head's GCS (gRPC),
//!   `--node-ip-address` this node's address.
//! * **vLLM** (`vllm/envs.py`): `VLLM_HOST_IP` is this node's address, for any command.
//! * **horovodrun / mpirun**: `-H`/`--host`/`--hosts` lists the hosts (`host[:slots]`): the node count.
//! * Any other command (or one wrapped in a shell): the launcher options above by name, then `PADDLE_MASTER`,
//!   `MASTER_ADDR`, `PADDLE_TRAINER_ENDPOINTS`, `PADDLE_TRAINERS`, then torchrun's `PET_*`.
//!
//! A recognised launcher's options end, as argparse's `REMAINDER` ends them, at its first positional argument:
//! the training script, the module name after torchrun's `-m`, the program after `--no-python`, horovodrun's
//! or mpirun's program; what follows belongs to the program (an option ncclenv does not know takes the next
//! word as its value unless that word is an option). Any other command is read up to the first argument
//! ending in `.py` or `--`. A value given twice counts with its last occurrence (argparse).
//!
//! A rendezvous endpoint may be a URL (`etcd://user:password@host:2379/prefix`): the host is taken after the
//! user information, which is never stored (see [`redact_userinfo`]).

pub use crate::launch_facts::{
    detect, parse_endpoint, parse_host, parse_host_spec, parse_nnodes, parse_port,
    redact_shell_word, redact_userinfo, Endpoint, LaunchInfo, ReadFile, Sourced,
    TORCH_DEFAULT_PORT, VARS,
};
use crate::snapshot::{Framework, Launcher, RdzvProtocol, Rendezvous};
use std::collections::BTreeMap;
use std::ffi::OsString;

/// How far [`scan`] reads a command line.
#[derive(Clone, Copy)]
enum Until {
    /// A recognised launcher, parsed as argparse parses it: its own options end at the first positional
    /// argument (the training script, a `-m` module name, the program after `--no-python`, a horovodrun or
    /// mpirun program), which with everything after it belongs to the program (argparse `REMAINDER`).
    /// `flags` are the launcher's other options that take no value; `pairs` those that take two
    /// (`mpirun --mca NAME VALUE`); any other option not written as `--name=value` takes the next word as
    /// its value unless that word is an option itself.
    Positional {
        flags: &'static [&'static str],
        pairs: &'static [&'static str],
    },
    /// Any other command (or one wrapped in a shell): every word up to a `*.py` argument or `--` is read,
    /// since a wrapper script may pass them on to a launcher.
    Script,
}

/// Options of the command: `--name value`, `--name=value`, `-H value`, and switches (empty value), in order,
/// from `start` to where `until` says the command's own options end, and never past a `*.py` argument or
/// `--`. `valued` are the names that take their value from the next word; `switches` take none. Also returns
/// where the reading stopped: the index of the launcher's program (its first positional argument), a `*.py`
/// argument or `--`, else `argv.len()`.
fn scan(
    argv: &[String],
    start: usize,
    valued: &[&str],
    switches: &[&str],
    until: Until,
) -> (Vec<(String, String)>, usize) {
    let mut out = Vec::new();
    let mut i = start;
    while i < argv.len() {
        let a = &argv[i];
        if a == "--" || (a.ends_with(".py") && !a.starts_with('-')) {
            break;
        }
        if let Some((name, value)) = a.split_once('=').filter(|(n, _)| n.starts_with('-')) {
            if valued.contains(&name) {
                out.push((name.to_string(), value.to_string()));
            }
        } else if valued.contains(&a.as_str()) {
            if let Some(v) = argv.get(i + 1) {
                out.push((a.clone(), v.clone()));
                i += 1;
            }
        } else if switches.contains(&a.as_str()) {
            out.push((a.clone(), String::new()));
        } else if let Until::Positional { flags, pairs } = until {
            if !a.starts_with('-') || a == "-" {
                break;
            }
            if pairs.contains(&a.as_str()) {
                i += 2;
            } else if !flags.contains(&a.as_str())
                && argv.get(i + 1).is_some_and(|n| {
                    !n.starts_with('-') && !n.ends_with(".py") && n.as_str() != "--"
                })
            {
                i += 1;
            }
        }
        i += 1;
    }
    (out, i.min(argv.len()))
}

/// torchrun's options that take no value (torch/distributed/run.py; `--use-env` from launch.py): `-m`
/// makes the first positional a module name, `--no-python` a program.
const TORCHRUN_FLAGS: &[&str] = &[
    "-m",
    "--module",
    "--no-python",
    "--no_python",
    "--run-path",
    "--run_path",
    "--standalone",
    "--virtual-local-rank",
    "--virtual_local_rank",
    "--use-env",
    "--use_env",
];
/// DeepSpeed's runner options that take no value (deepspeed/launcher/runner.py).
const DEEPSPEED_FLAGS: &[&str] = &[
    "--module",
    "--no_python",
    "--no_local_rank",
    "--no_ssh",
    "--no_ssh_check",
    "--force_multi",
    "--save_pid",
    "--elastic_training",
    "--bind_cores_to_rank",
    "--detect_nvlink_pairs",
];
/// horovodrun's options that take no value (horovod/runner/launch.py), the common ones.
const HOROVOD_FLAGS: &[&str] = &[
    "-v",
    "--verbose",
    "--gloo",
    "--mpi",
    "--jsm",
    "-cb",
    "--check-build",
    "--disable-cache",
    "--tcp",
    "--autotune",
    "--no-stall-check",
    "--timeline-mark-cycles",
    "--hierarchical-allreduce",
    "--hierarchical-allgather",
    "--mpi-threads-disable",
    "--log-hide-timestamp",
];
/// mpirun's (Open MPI, MPICH, Intel MPI) options that take no value, the common ones.
const MPI_FLAGS: &[&str] = &[
    "--allow-run-as-root",
    "-allow-run-as-root",
    "--oversubscribe",
    "-oversubscribe",
    "--tag-output",
    "-tag-output",
    "--timestamp-output",
    "--report-bindings",
    "-report-bindings",
    "--display-map",
    "-display-map",
    "--merge-stderr-to-stdout",
    "--nolocal",
    "--noprefix",
    "--use-hwthread-cpus",
    "-v",
    "--verbose",
    "-q",
    "--quiet",
    "-l",
    "-genvall",
    "-print-rank-map",
];
/// mpirun's options that take two values (`--mca NAME VALUE`, MPICH `-genv NAME VALUE`).
const MPI_PAIRS: &[&str] = &[
    "--mca",
    "-mca",
    "--gmca",
    "-gmca",
    "--prtemca",
    "--pmixmca",
    "-genv",
    "-env",
];

/// The last value of any of `names` (argparse: the last occurrence wins), with the name as written.
fn opt<'a>(opts: &'a [(String, String)], names: &[&str]) -> Option<(&'a str, &'a str)> {
    opts.iter()
        .rev()
        .find(|(n, _)| names.contains(&n.as_str()))
        .map(|(n, v)| (n.as_str(), v.as_str()))
}

/// A variable's value, when set and not empty.
fn var<'a>(env: &'a BTreeMap<String, String>, name: &str) -> Option<(&'static str, &'a str)> {
    // The names are the constants of VARS; return them with a static lifetime for `Sourced`.
    let name: &'static str = VARS.iter().copied().find(|v| *v == name)?;
    env.get(name)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .map(|v| (name, v))
}

/// The first of the flag (as `(name, value)`) and the variable that is set: torchrun's `env` action, where a
/// flag wins over `PET_<DEST>`.
fn flag_or_var<'a>(
    flag: Option<(&'a str, &'a str)>,
    v: Option<(&'static str, &'a str)>,
) -> Option<(&'a str, &'a str)> {
    flag.or(v)
}

/// How a candidate value for the master is read.
#[derive(Clone, Copy)]
enum Shape {
    /// One endpoint.
    One,
    /// A comma-separated list whose first entry is the master (`--ips`, `PADDLE_TRAINER_ENDPOINTS`).
    First,
}

/// One place the master may be named, in the order the launcher consults them.
struct Candidate<'a> {
    source: String,
    value: &'a str,
    shape: Shape,
    /// The rendezvous it describes (protocol, owner); `None` for host lists without a rendezvous server.
    rdzv: Option<(RdzvProtocol, String)>,
    /// A port named separately (`--master-port`, `MASTER_PORT`) or the launcher's default.
    port: Option<Sourced<&'a str>>,
    /// Proxy variables the launcher clears (Paddle).
    clears: &'static [&'static str],
}

/// [`read_with`] reading no file (every file missing): a pure function of `argv` and `env`.
pub fn read(argv: &[OsString], env: &BTreeMap<String, String>) -> LaunchInfo {
    read_with(argv, env, &|_, _| Err((true, "not read".into())))
}

/// Read what the command `argv` (program first; empty when there is none), the variables `env` (only
/// those of [`VARS`] are read) and the launcher's own config file (read through `files`: Accelerate's) say
/// about the job, as each launcher reads them (see the module docs). Values that cannot be parsed are
/// skipped and described in `shape.problems`, with user information removed.
pub fn read_with(
    argv: &[OsString],
    env: &BTreeMap<String, String>,
    files: &ReadFile<'_>,
) -> LaunchInfo {
    let args: Vec<String> = argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let detected = detect(&args);
    let mut info = LaunchInfo::default();
    info.shape.launcher = detected.map(|(l, _)| l);
    let opts = options(&args, detected, (env, files), &mut info);
    let (opts, mut master_unknown) = drop_unknown(opts, &mut info);
    for (k, v) in env.iter().filter(|(_, v)| crate::shell::is_unknown(v)) {
        master_unknown |= MASTER_NAMES.contains(&k.as_str());
        problem(&mut info, unknown_text(k, v));
    }
    let known_env;
    let env = if env.values().any(|v| crate::shell::is_unknown(v)) {
        known_env = env
            .iter()
            .filter(|(_, v)| !crate::shell::is_unknown(v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<BTreeMap<_, _>>();
        &known_env
    } else {
        env
    };
    empty_vars(env, &mut info);
    let launcher = info.shape.launcher;
    // Accelerate's config file, and whether Accelerate reads none (`--cpu`, or no default file).
    let (acc_file, acc_no_file) = match launcher {
        Some(Launcher::Accelerate) => match crate::accelerate::which(&opts, env) {
            Some((path, named)) => {
                let f = crate::accelerate::load(&path, named, files);
                let none = f.is_none();
                (f, none)
            }
            None => (None, opts.iter().any(|(n, _)| n == "--cpu")),
        },
        _ => (None, false),
    };
    let mut cands: Vec<Candidate> = Vec::new();
    let mut standalone: Option<String> = None;
    match launcher {
        Some(Launcher::Torchrun) => {
            torchrun(&opts, env, true, &mut cands, &mut info, &mut standalone)
        }
        Some(Launcher::Paddle) => paddle(&opts, env, &mut cands, &mut info),
        Some(Launcher::Deepspeed) => deepspeed(&opts, &mut cands, &mut info),
        Some(Launcher::Accelerate) => {
            accelerate(&opts, acc_file.as_ref(), acc_no_file, &mut cands, &mut info)
        }
        Some(Launcher::Sglang) => sglang(&opts, &mut cands, &mut info),
        Some(Launcher::Ray) => ray(&opts, &mut cands, &mut info),
        Some(Launcher::Horovod) => hosts(&opts, &mut info),
        Some(Launcher::Mpi) => {} // read with the hostfile (`crate::spread`)
        Some(Launcher::Vllm) => {}
        None => {
            // Any other command: every launcher's own option names, in a fixed order (a node count
            // written as such before one counted from --ips).
            if let Some((n, v)) = opt(&opts, &["--nnodes"]) {
                set_nnodes(&mut info, v, n);
            }
            paddle_flags(&opts, &mut cands, &mut info);
            torchrun(&opts, env, false, &mut cands, &mut info, &mut standalone);
            deepspeed(&opts, &mut cands, &mut info);
            sglang(&opts, &mut cands, &mut info);
        }
    }
    generic_env(env, launcher, &mut cands, &mut info);
    if launcher != Some(Launcher::Torchrun) {
        // PET_* only mean torchrun, but a wrapped torchrun (`sh -c "torchrun …"`) still reads them.
        torchrun(&[], env, true, &mut cands, &mut info, &mut standalone);
    }
    if let Some(s) = standalone.clone() {
        info.shape.nnodes = Some(1);
        info.shape.source = Some(s);
        cands.clear();
    }
    let orchestrated = standalone.is_none();
    choose_master(cands, &mut info);
    if master_unknown {
        info.master = None;
        info.shape.rendezvous = None;
    }
    if orchestrated && !master_unknown {
        crate::orchestrator::read(env, &mut info);
    }
    // The platform's interface counts whatever the launcher says (a `--standalone` job too).
    info.shape.platform_interface = crate::orchestrator::named_interface(env)
        .map(|(var, name, row)| (var.to_string(), name.to_string(), row.to_string()));
    this_node(&opts, env, launcher, &mut info);
    info
}

/// What the job says about this node alone: the ranks the launcher starts here ([`local_ranks`]; torchrun's
/// `PET_NPROC_PER_NODE` for torchrun or an unrecognised command) and, when nothing else declared it, this
/// node's address from `VLLM_HOST_IP`.
fn this_node(
    opts: &[(String, String)],
    env: &BTreeMap<String, String>,
    launcher: Option<Launcher>,
    info: &mut LaunchInfo,
) {
    let pet = matches!(launcher, Some(Launcher::Torchrun) | None);
    let (ranks, rank_problems) = local_ranks(
        opts,
        if pet {
            env.get("PET_NPROC_PER_NODE")
        } else {
            None
        },
    );
    if let Some(r) = ranks {
        info.shape.local_ranks = Some(r.value);
        info.shape.local_ranks_source = Some(r.source);
    }
    for p in rank_problems {
        problem(info, p);
    }
    if info.shape.self_addr.is_none() {
        if let Some((name, v)) = var(env, "VLLM_HOST_IP") {
            set_self(info, v, name);
        }
    }
}

/// The command's options as [`scan`] reads them for the launcher `detected` (its name and position), plus, for
/// the runners that copy the environment to every node, what `crate::spread` reads of their command line
/// (mpirun's `-H` first, then its hostfile; the files read through `job`'s reader, `HOME` and `DS_ENV_FILE`
/// from its variables).
fn options(
    args: &[String],
    detected: Option<(Launcher, usize)>,
    job: crate::spread::Job<'_, '_>,
    info: &mut LaunchInfo,
) -> Vec<(String, String)> {
    match detected {
        Some((l, at)) => {
            let g = Grammar::of(l);
            let (opts, stop) = scan(args, at, g.valued, g.switches, g.until());
            if l == Launcher::Mpi {
                hosts(&opts, info);
            }
            crate::spread::read(l, (args, at, stop), &opts, job, info);
            opts
        }
        None if args.is_empty() => Vec::new(),
        None => scan(args, 1, GENERIC_VALUED, &["--standalone"], Until::Script).0,
    }
}

/// Options and variables that name the job's master: when one of them is not known (a shell's `$(…)`), the
/// master is unknown, whatever a later source says.
const MASTER_NAMES: &[&str] = &[
    "--master",
    "--ips",
    "--master-addr",
    "--master_addr",
    "--rdzv-endpoint",
    "--rdzv_endpoint",
    "--dist-init-addr",
    "--nccl-init-addr",
    "--address",
    "--main_process_ip",
    "--main-process-ip",
    "MASTER_ADDR",
    "PADDLE_MASTER",
    "PET_MASTER_ADDR",
    "PET_RDZV_ENDPOINT",
    "PADDLE_IPS",
    "PADDLE_TRAINER_ENDPOINTS",
    "PADDLE_TRAINERS",
];

/// Leave out the options whose value a shell cannot know before it runs (`--master_addr=$(hostname -i)`,
/// `crate::shell::UNKNOWN`), each with a problem; true when one of them names the master.
fn drop_unknown(
    opts: Vec<(String, String)>,
    info: &mut LaunchInfo,
) -> (Vec<(String, String)>, bool) {
    let mut master_unknown = false;
    let mut kept = Vec::with_capacity(opts.len());
    for (n, v) in opts {
        if crate::shell::is_unknown(&v) {
            master_unknown |= MASTER_NAMES.contains(&n.as_str());
            problem(info, unknown_text(&n, &v));
        } else {
            kept.push((n, v));
        }
    }
    (kept, master_unknown)
}

/// `launcher argument --x "$(…)": not known …` for a value that holds `crate::shell::UNKNOWN`.
fn unknown_text(source: &str, value: &str) -> String {
    format!(
        "{}: not known before the shell runs it (a command substitution, or a variable that is not set); not used",
        written(source, value)
    )
}

/// A variable that names the master (or its port) and is set but empty (`MASTER_ADDR=` from a failed
/// `$(scontrol …)`) is a problem naming it; such a value is never used. Shell assignments whose value is not
/// known are problems too.
fn empty_vars(env: &BTreeMap<String, String>, info: &mut LaunchInfo) {
    for name in MASTER_NAMES.iter().chain(&["MASTER_PORT"]) {
        if env.get(*name).is_some_and(|v| v.trim().is_empty()) {
            problem(
                info,
                format!("{name} is set but empty (a command that should have produced it failed?); not used as the job's master"),
            );
        }
    }
}

/// How a launcher's command line is read: one entry of [`GRAMMARS`], read by one scanner ([`scan`]).
struct Grammar {
    /// The launcher.
    launcher: Launcher,
    /// Its options that ncclenv reads and that take a value (`--name value`, `--name=value`).
    valued: &'static [&'static str],
    /// Its options that ncclenv reads and that take none (recorded with an empty value).
    switches: &'static [&'static str],
    /// Its other options that take no value: they do not end its own options ([`Until::Positional`]).
    flags: &'static [&'static str],
    /// Its options that take two values (`mpirun --mca NAME VALUE`).
    pairs: &'static [&'static str],
}

/// The launchers' grammars, one entry per [`Launcher`], each as its own parser reads it (the lists' sources
/// are named where they are defined).
const GRAMMARS: &[Grammar] = &[
    Grammar {
        launcher: Launcher::Torchrun,
        valued: TORCHRUN_VALUED,
        switches: &["--standalone"],
        flags: TORCHRUN_FLAGS,
        pairs: &[],
    },
    Grammar {
        launcher: Launcher::Paddle,
        valued: PADDLE_VALUED,
        switches: &[],
        flags: &[],
        pairs: &[],
    },
    Grammar {
        launcher: Launcher::Deepspeed,
        valued: DEEPSPEED_VALUED,
        switches: &["--no_ssh", "--force_multi", "--no_python"],
        flags: DEEPSPEED_FLAGS,
        pairs: &[],
    },
    Grammar {
        launcher: Launcher::Sglang,
        valued: SGLANG_VALUED,
        switches: &[],
        flags: &[],
        pairs: &[],
    },
    Grammar {
        launcher: Launcher::Ray,
        valued: RAY_VALUED,
        switches: &[],
        flags: &[],
        pairs: &[],
    },
    Grammar {
        launcher: Launcher::Horovod,
        valued: HOSTS_VALUED,
        switches: &[],
        flags: HOROVOD_FLAGS,
        pairs: &[],
    },
    Grammar {
        launcher: Launcher::Mpi,
        valued: MPI_VALUED,
        switches: &[],
        flags: MPI_FLAGS,
        pairs: MPI_PAIRS,
    },
    Grammar {
        launcher: Launcher::Accelerate,
        valued: crate::accelerate::VALUED,
        switches: &["--cpu", "--same_network", "--same-network"],
        flags: crate::accelerate::FLAGS,
        pairs: &[],
    },
    // vLLM's options say nothing ncclenv reads (VLLM_HOST_IP does).
    Grammar {
        launcher: Launcher::Vllm,
        valued: &[],
        switches: &[],
        flags: &[],
        pairs: &[],
    },
];

impl Grammar {
    /// Launcher `l`'s entry of [`GRAMMARS`] (a test holds every launcher to have one; none reads nothing).
    fn of(l: Launcher) -> &'static Grammar {
        const NONE: &Grammar = &GRAMMARS[GRAMMARS.len() - 1];
        GRAMMARS.iter().find(|g| g.launcher == l).unwrap_or(NONE)
    }

    /// Where its own options end (see [`Until::Positional`]).
    fn until(&self) -> Until {
        Until::Positional {
            flags: self.flags,
            pairs: self.pairs,
        }
    }
}

const TORCHRUN_VALUED: &[&str] = &[
    "--nnodes",
    "--node-rank",
    "--node_rank",
    "--master-addr",
    "--master_addr",
    "--master-port",
    "--master_port",
    "--rdzv-endpoint",
    "--rdzv_endpoint",
    "--rdzv-backend",
    "--rdzv_backend",
    "--local-addr",
    "--local_addr",
    "--nproc-per-node",
    "--nproc_per_node",
];
const PADDLE_VALUED: &[&str] = &[
    "--master",
    "--ips",
    "--nnodes",
    "--rank",
    "--host",
    "--devices",
    "--gpus",
    "--nproc_per_node",
];
const DEEPSPEED_VALUED: &[&str] = &[
    "--master_addr",
    "--master_port",
    "--num_nodes",
    "--node_rank",
    "--num_gpus",
    "--num-gpus",
    "--include",
    "--hostfile",
    "-H",
];
const SGLANG_VALUED: &[&str] = &[
    "--dist-init-addr",
    "--nccl-init-addr",
    "--nnodes",
    "--node-rank",
];
const RAY_VALUED: &[&str] = &["--address", "--node-ip-address"];
const HOSTS_VALUED: &[&str] = &["-H", "--host", "--hosts"];
/// mpirun's options read: the hosts, the hostfiles (`crate::spread::MPI_HOSTFILE`) and `-x NAME[=VALUE]`.
const MPI_VALUED: &[&str] = &[
    "-H",
    "--host",
    "--hosts",
    "--hostfile",
    "-hostfile",
    "--machinefile",
    "-machinefile",
    "--default-hostfile",
    "-f",
    "-x",
];
/// Option names read from a command no launcher was recognised in (ray's `--address` and `-H` are too
/// common elsewhere to count).
const GENERIC_VALUED: &[&str] = &[
    "--master",
    "--ips",
    "--nnodes",
    "--master-addr",
    "--master_addr",
    "--master-port",
    "--master_port",
    "--rdzv-endpoint",
    "--rdzv_endpoint",
    "--rdzv-backend",
    "--rdzv_backend",
    "--node-rank",
    "--node_rank",
    "--num_nodes",
    "--dist-init-addr",
    "--nccl-init-addr",
    "--nproc-per-node",
    "--nproc_per_node",
    "--devices",
    "--gpus",
    "--num_gpus",
    "--num-gpus",
    "--include",
];

/// Where torchrun reads a setting: its flag, else (with `with_vars`) its `PET_*` variable
/// (`argparse_util.env`: flags win).
struct TorchrunArgs<'a> {
    opts: &'a [(String, String)],
    env: &'a BTreeMap<String, String>,
    with_vars: bool,
}

impl<'a> TorchrunArgs<'a> {
    /// The `PET_*` variable `name`, unless the variables are not read.
    fn pet(&self, name: &str) -> Option<(&'static str, &'a str)> {
        if self.with_vars {
            var(self.env, name)
        } else {
            None
        }
    }

    /// The last of `flags`, else the variable `pet`: (where it was named, value).
    fn get(&self, flags: &[&str], pet: &str) -> Option<(&'a str, &'a str)> {
        flag_or_var(opt(self.opts, flags), self.pet(pet))
    }
}

/// torchrun: flags win over `PET_*` (`argparse_util.env`). With `with_vars` false, the `PET_*` variables are
/// not read (a command that is not torchrun); with an empty `opts`, only they are (a wrapped torchrun).
fn torchrun<'a>(
    opts: &'a [(String, String)],
    env: &'a BTreeMap<String, String>,
    with_vars: bool,
    cands: &mut Vec<Candidate<'a>>,
    info: &mut LaunchInfo,
    standalone: &mut Option<String>,
) {
    let args = TorchrunArgs {
        opts,
        env,
        with_vars,
    };
    if standalone.is_none() {
        *standalone = torchrun_standalone(&args);
    }
    torchrun_node(&args, info);
    cands.extend(torchrun_rendezvous(&args));
}

/// Where `--standalone` (or a non-zero `PET_STANDALONE`) was named, if it was.
fn torchrun_standalone(args: &TorchrunArgs) -> Option<String> {
    if let Some((n, _)) = opt(args.opts, &["--standalone"]) {
        return Some(n.to_string());
    }
    let (n, v) = args.pet("PET_STANDALONE")?;
    // `check_env`: bool(int(value)).
    v.trim()
        .parse::<i64>()
        .is_ok_and(|x| x != 0)
        .then(|| n.to_string())
}

/// This node in the job: the number of nodes, the node rank and the local address.
fn torchrun_node(args: &TorchrunArgs, info: &mut LaunchInfo) {
    if let Some((n, v)) = args.get(&["--nnodes"], "PET_NNODES") {
        set_nnodes(info, v, n);
    }
    if let Some((n, v)) = args.get(&["--node-rank", "--node_rank"], "PET_NODE_RANK") {
        set_rank(info, v, n, false);
    }
    if let Some((n, v)) = args.get(&["--local-addr", "--local_addr"], "PET_LOCAL_ADDR") {
        set_self(info, v, n);
    }
}

/// The rendezvous torchrun joins: its endpoint with the backend, or (`get_rdzv_endpoint`) the static
/// backend without an endpoint at master_addr:master_port; `None` when neither is named.
fn torchrun_rendezvous<'a>(args: &TorchrunArgs<'a>) -> Option<Candidate<'a>> {
    let backend = args
        .get(&["--rdzv-backend", "--rdzv_backend"], "PET_RDZV_BACKEND")
        .map_or("static", |(_, v)| v);
    match args.get(&["--rdzv-endpoint", "--rdzv_endpoint"], "PET_RDZV_ENDPOINT") {
        None if backend == "static" => {
            let (n, v) = args.get(&["--master-addr", "--master_addr"], "PET_MASTER_ADDR")?;
            let port = args.get(&["--master-port", "--master_port"], "PET_MASTER_PORT");
            Some(torchrun_static(n, v, port))
        }
        None => None,
        Some((n, v)) => Some(torchrun_endpoint(backend, n, v)),
    }
}

/// The static rendezvous (a TCPStore) at master_addr, on master_port or torchrun's default 29500.
fn torchrun_static<'a>(
    source: &str,
    value: &'a str,
    port: Option<(&'a str, &'a str)>,
) -> Candidate<'a> {
    Candidate {
        source: source.to_string(),
        value,
        shape: Shape::One,
        rdzv: Some((
            RdzvProtocol::Tcp,
            "torchrun's static rendezvous (TCPStore)".into(),
        )),
        port: Some(match port {
            Some((pn, pv)) => Sourced {
                value: pv,
                source: pn.to_string(),
            },
            None => Sourced {
                value: "29500",
                source: "torchrun's default".into(),
            },
        }),
        clears: &[],
    }
}

/// The rendezvous at `--rdzv-endpoint`: etcd's over HTTP (the etcd backends, or an etcd/http/https URL),
/// else the backend's TCPStore.
fn torchrun_endpoint<'a>(backend: &str, source: &str, value: &'a str) -> Candidate<'a> {
    let http = matches!(backend, "etcd" | "etcd-v2")
        || parse_endpoint(value)
            .ok()
            .and_then(|e| e.scheme)
            .is_some_and(|s| matches!(s.as_str(), "etcd" | "http" | "https"));
    let owner = if http {
        "torchrun's etcd rendezvous".to_string()
    } else {
        format!("torchrun's {backend} rendezvous (TCPStore)")
    };
    Candidate {
        source: source.to_string(),
        value,
        shape: Shape::One,
        rdzv: Some((
            if http {
                RdzvProtocol::Http
            } else {
                RdzvProtocol::Tcp
            },
            owner,
        )),
        port: None,
        clears: &[],
    }
}

/// Paddle's launcher: variables override flags (`set_env_in_args`).
fn paddle<'a>(
    opts: &'a [(String, String)],
    env: &'a BTreeMap<String, String>,
    cands: &mut Vec<Candidate<'a>>,
    info: &mut LaunchInfo,
) {
    if let Some((n, v)) = var(env, "PADDLE_MASTER").or(opt(opts, &["--master"])) {
        cands.push(paddle_master(n, v));
    }
    if let Some((n, v)) = var(env, "PADDLE_NNODES").or(opt(opts, &["--nnodes"])) {
        set_nnodes(info, v, n);
    }
    if let Some((n, v)) = var(env, "PADDLE_IPS").or(opt(opts, &["--ips"])) {
        set_ips(info, cands, n, v);
    }
    for (n, v) in [
        var(env, "PADDLE_RANK"),
        var(env, "PADDLE_TRAINER_ID"),
        opt(opts, &["--rank"]),
    ]
    .into_iter()
    .flatten()
    {
        // Paddle treats a negative rank as unset (args_envs.py: `env_rank >= 0`, `--rank` default -1).
        if v.trim().starts_with('-') {
            continue;
        }
        set_rank(info, v, n, false);
        break;
    }
    if let Some((n, v)) = var(env, "POD_IP").or(opt(opts, &["--host"])) {
        set_self(info, v, n);
    }
}

/// Paddle's flags alone (a command that is not Paddle's launcher but carries `--master`/`--ips`).
fn paddle_flags<'a>(
    opts: &'a [(String, String)],
    cands: &mut Vec<Candidate<'a>>,
    info: &mut LaunchInfo,
) {
    if let Some((n, v)) = opt(opts, &["--master"]) {
        cands.push(paddle_master(n, v));
    }
    if let Some((n, v)) = opt(opts, &["--ips"]) {
        set_ips(info, cands, n, v);
    }
}

fn paddle_master<'a>(n: &str, v: &'a str) -> Candidate<'a> {
    let etcd = v.trim_start().to_ascii_lowercase().starts_with("etcd://");
    Candidate {
        source: n.to_string(),
        value: v,
        shape: Shape::One,
        rdzv: Some((
            RdzvProtocol::Http,
            if etcd {
                "Paddle's etcd master".into()
            } else {
                "Paddle's HTTP master".into()
            },
        )),
        port: None,
        clears: &["http_proxy", "https_proxy"],
    }
}

fn set_ips<'a>(info: &mut LaunchInfo, cands: &mut Vec<Candidate<'a>>, n: &str, v: &'a str) {
    if info.shape.ips.is_empty() {
        info.shape.ips = v.split(',').filter_map(parse_host).collect();
        if !info.shape.ips.is_empty() {
            set_count(info, count_hosts(&info.shape.ips), n);
        }
    }
    cands.push(Candidate {
        source: n.to_string(),
        value: v,
        shape: Shape::First,
        rdzv: None,
        port: None,
        clears: &[],
    });
}

fn deepspeed<'a>(
    opts: &'a [(String, String)],
    cands: &mut Vec<Candidate<'a>>,
    info: &mut LaunchInfo,
) {
    if let Some((n, v)) = opt(opts, &["--num_nodes"]) {
        // The runner's default is -1 (all hosts of the hostfile).
        if !v.trim().starts_with('-') {
            set_nnodes(info, v, n);
        }
    }
    if let Some((n, v)) = opt(opts, &["--node_rank"]) {
        set_rank(info, v, n, false);
    }
    if let Some((n, v)) = opt(opts, &["--master_addr"]) {
        if cands.iter().any(|c| c.source == "--master_addr") {
            return; // torchrun's alias, already taken.
        }
        let port = opt(opts, &["--master_port"]);
        cands.push(Candidate {
            source: n.to_string(),
            value: v,
            shape: Shape::One,
            rdzv: Some((RdzvProtocol::Tcp, "DeepSpeed's master (TCPStore)".into())),
            port: Some(match port {
                Some((pn, pv)) => Sourced {
                    value: pv,
                    source: pn.to_string(),
                },
                None => Sourced {
                    value: "29500",
                    source: "DeepSpeed's default".into(),
                },
            }),
            clears: &[],
        });
    }
}

/// Accelerate (`crate::accelerate`), as huggingface/accelerate (commit 16cb6eb) resolves the job: each flag
/// wins over the same key of the config file, which counts only for `compute_environment: LOCAL_MACHINE`
/// (src/accelerate/commands/launch.py `_validate_launch_command`, lines 1257-1276). `no_file` is true when
/// Accelerate reads no config file (`--cpu` without `--config_file`, or the default file does not exist).
/// * Machines: `--num_machines`, else the file's `num_machines`, else 1 (`ClusterConfig.num_machines = 1`,
///   config/config_args.py line 182, for a file without the key; launch.py line 1343 without a file).
/// * The master: `main_process_ip`, only for more than one machine: `prepare_multi_gpu_env`
///   (src/accelerate/utils/launch.py lines 216-228) gives torchrun `--rdzv_endpoint IP:PORT`, or `--master_addr
///   IP` with `--same_network`, only when `num_machines > 1`; on one machine torchrun keeps its own
///   127.0.0.1. The port defaults to 29500. Its rendezvous backend is `--rdzv_backend` (default `static`,
///   launch.py line 329; etcd's speak HTTP), `static` with `--same_network`. A file's `rdzv_backend` and
///   `same_network` never count: the flags' defaults (`"static"`, `False`) are not `None`, so the copy of
///   the file's values (launch.py line 1274) skips them.
/// * Ranks on this node: `--num_processes` (else the file's) divided by the machines (`num_processes //
///   num_machines`, utils/launch.py line 217), all of them on one machine (line 226).
fn accelerate<'a>(
    opts: &'a [(String, String)],
    file: Option<&'a crate::accelerate::ConfigFile>,
    no_file: bool,
    cands: &mut Vec<Candidate<'a>>,
    info: &mut LaunchInfo,
) {
    if let Some(p) = file.and_then(|f| f.problem.clone()) {
        problem(info, p);
    }
    let local = file.filter(|f| {
        f.problem.is_none()
            && f.get("compute_environment")
                .is_none_or(|c| c == "LOCAL_MACHINE")
    });
    let get = |flags: &[&str], key: &str| -> Option<(String, &'a str)> {
        opt(opts, flags)
            .map(|(n, v)| (n.to_string(), v))
            .or_else(|| local.and_then(|f| f.get(key).map(|v| (format!("{}: {key}", f.path), v))))
    };
    let machines = match get(&["--num_machines", "--num-machines"], "num_machines") {
        Some((n, v)) => Some((n, v)),
        None if local.is_some() => Some((
            "Accelerate's default num_machines (ClusterConfig)".into(),
            "1",
        )),
        None if no_file => Some((
            "Accelerate's default num_machines (no config file)".into(),
            "1",
        )),
        None => None,
    };
    if let Some((n, v)) = &machines {
        set_nnodes(info, v, n);
    }
    let machines: Option<u32> = machines.and_then(|(_, v)| v.trim().parse().ok());
    if let Some((n, v)) = get(&["--machine_rank", "--machine-rank"], "machine_rank") {
        set_rank(info, v, &n, false);
    }
    if let Some((n, v)) = get(&["--num_processes", "--num-processes"], "num_processes") {
        let per_node = v.trim().parse::<u32>().ok().map(|p| match machines {
            Some(m) if m > 1 => p / m,
            _ => p,
        });
        match per_node {
            Some(r) if r >= 1 && info.shape.local_ranks.is_none() => {
                info.shape.local_ranks = Some(r);
                info.shape.local_ranks_source = Some(match machines {
                    Some(m) if m > 1 => format!("{n} / {m} machines"),
                    _ => n,
                });
            }
            _ => {}
        }
    }
    if machines == Some(1) {
        return;
    }
    if let Some((n, v)) = get(
        &["--main_process_ip", "--main-process-ip"],
        "main_process_ip",
    ) {
        let port = get(
            &["--main_process_port", "--main-process-port"],
            "main_process_port",
        );
        cands.push(Candidate {
            source: n,
            value: v,
            shape: Shape::One,
            rdzv: Some(accelerate_rdzv(opts)),
            port: Some(match port {
                Some((pn, pv)) => Sourced {
                    value: pv,
                    source: pn,
                },
                None => Sourced {
                    value: "29500",
                    source: "Accelerate's default".into(),
                },
            }),
            clears: &[],
        });
    }
}

/// The rendezvous Accelerate gives torchrun at its main process (see [`accelerate`]): `--same_network` is
/// `--master_addr` (static, TCPStore); else `--rdzv_endpoint` with `--rdzv_backend` (default `static`), an
/// etcd backend speaking HTTP.
fn accelerate_rdzv(opts: &[(String, String)]) -> (RdzvProtocol, String) {
    if opts
        .iter()
        .any(|(n, _)| n == "--same_network" || n == "--same-network")
    {
        return (
            RdzvProtocol::Tcp,
            "Accelerate's main process (torchrun's --master_addr, static rendezvous, TCPStore)"
                .into(),
        );
    }
    let backend =
        opt(opts, &["--rdzv_backend", "--rdzv-backend"]).map_or("static", |(_, v)| v.trim());
    if matches!(backend, "etcd" | "etcd-v2") {
        return (
            RdzvProtocol::Http,
            format!(
                "Accelerate's main process (torchrun's {backend} rendezvous at --rdzv_endpoint)"
            ),
        );
    }
    (
        RdzvProtocol::Tcp,
        format!("Accelerate's main process (torchrun's {backend} rendezvous at --rdzv_endpoint, TCPStore)"),
    )
}

fn sglang<'a>(opts: &'a [(String, String)], cands: &mut Vec<Candidate<'a>>, info: &mut LaunchInfo) {
    if let Some((n, v)) = opt(opts, &["--dist-init-addr", "--nccl-init-addr"]) {
        cands.push(Candidate {
            source: n.to_string(),
            value: v,
            shape: Shape::One,
            rdzv: Some((
                RdzvProtocol::Tcp,
                "SGLang's distributed init (TCPStore)".into(),
            )),
            port: None,
            clears: &[],
        });
    }
    if info.shape.launcher == Some(Launcher::Sglang) {
        if let Some((n, v)) = opt(opts, &["--nnodes"]) {
            set_nnodes(info, v, n);
        }
        if let Some((n, v)) = opt(opts, &["--node-rank"]) {
            set_rank(info, v, n, false);
        }
    }
}

/// Ray: `--address` names the head, except `auto`, which makes `ray start` look up the cluster this machine
/// already runs (`services.canonicalize_bootstrap_address` in python/ray/_private/services.py): no master.
fn ray<'a>(opts: &'a [(String, String)], cands: &mut Vec<Candidate<'a>>, info: &mut LaunchInfo) {
    if let Some((n, v)) = opt(opts, &["--address"]).filter(|(_, v)| *v != "auto") {
        cands.push(Candidate {
            source: n.to_string(),
            value: v,
            shape: Shape::One,
            rdzv: Some((RdzvProtocol::Tcp, "Ray's head (GCS, gRPC)".into())),
            port: None,
            clears: &[],
        });
    }
    if let Some((n, v)) = opt(opts, &["--node-ip-address"]) {
        set_self(info, v, n);
    }
}

/// horovodrun/mpirun `-H host[:slots],…`: the node count.
fn hosts(opts: &[(String, String)], info: &mut LaunchInfo) {
    if let Some((n, v)) = opt(opts, HOSTS_VALUED) {
        let hosts: Vec<String> = v
            .split(',')
            .map(|h| h.split(':').next().unwrap_or("").trim().to_string())
            .filter(|h| !h.is_empty())
            .collect();
        if !hosts.is_empty() {
            set_count(info, count_hosts(&hosts), n);
        }
    }
}

/// Variables any command may rely on, after the launcher's own sources.
fn generic_env<'a>(
    env: &'a BTreeMap<String, String>,
    launcher: Option<Launcher>,
    cands: &mut Vec<Candidate<'a>>,
    info: &mut LaunchInfo,
) {
    if launcher != Some(Launcher::Paddle) {
        if let Some((n, v)) = var(env, "PADDLE_MASTER") {
            cands.push(paddle_master(n, v));
        }
    }
    if let Some((n, v)) = var(env, "MASTER_ADDR") {
        cands.push(Candidate {
            source: n.to_string(),
            value: v,
            shape: Shape::One,
            rdzv: Some((
                RdzvProtocol::Tcp,
                "PyTorch's env:// rendezvous (TCPStore)".into(),
            )),
            port: var(env, "MASTER_PORT").map(|(pn, pv)| Sourced {
                value: pv,
                source: pn.to_string(),
            }),
            clears: &[],
        });
    }
    for name in ["PADDLE_TRAINER_ENDPOINTS", "PADDLE_TRAINERS"] {
        if let Some((n, v)) = var(env, name) {
            cands.push(Candidate {
                source: n.to_string(),
                value: v,
                shape: Shape::First,
                rdzv: None,
                port: None,
                clears: &[],
            });
        }
    }
    if launcher != Some(Launcher::Paddle) {
        if let Some((n, v)) = var(env, "PADDLE_NNODES") {
            set_nnodes(info, v, n);
        }
    }
    if let Some((n, v)) = var(env, "PADDLE_TRAINERS_NUM") {
        set_nnodes(info, v, n);
    }
    for name in ["PADDLE_TRAINER_ENDPOINTS", "PADDLE_TRAINERS"] {
        if let Some((n, v)) = var(env, name) {
            let hosts: Vec<String> = v.split(',').filter_map(parse_host).collect();
            if !hosts.is_empty() {
                set_count(info, count_hosts(&hosts), n);
            }
        }
    }
    for name in ["NODE_RANK", "PADDLE_TRAINER_ID"] {
        if let Some((n, v)) = var(env, name) {
            set_rank(info, v, n, name == "PADDLE_TRAINER_ID");
        }
    }
}

fn count_hosts(hosts: &[String]) -> u32 {
    let mut h: Vec<&String> = hosts.iter().collect();
    h.sort();
    h.dedup();
    u32::try_from(h.len()).unwrap_or(u32::MAX)
}

/// The node count from `v` unless one is already known; a value that is not a count is a problem.
fn set_nnodes(info: &mut LaunchInfo, v: &str, source: &str) {
    if info.shape.nnodes.is_some() {
        return;
    }
    match parse_nnodes(v) {
        Ok(n) => set_count(info, n, source),
        Err(e) => problem(info, format!("{}: {e}", what(source))),
    }
}

/// The ranks the launcher starts on this node (the one function that reads them), with where the number came
/// from, or `None` when the launcher does not say (the visible GPUs count then); and one sentence per value
/// that could not be read. `opts` are the launcher's options ([`read`] scans only the recognised launcher's
/// names), `pet` the value of `PET_NPROC_PER_NODE` for torchrun or an unrecognised (wrapped) command. The
/// first of these that is given decides, each the last of its spellings (argparse):
///
/// 1. torchrun `--nproc-per-node`/`--nproc_per_node N` (torch/distributed/run.py; also Paddle's
///    `--nproc_per_node`); torchrun's `gpu`, `auto`, `cpu` and `xpu` mean "as many as there are devices", i.e.
///    not said here;
/// 2. Paddle `--devices`/`--gpus LIST` (`python -m paddle.distributed.launch --devices 0,1`): one rank per
///    distinct entry;
/// 3. DeepSpeed `--num_gpus`/`--num-gpus N`;
/// 4. DeepSpeed `--include NODE_SPEC[@NODE_SPEC…]` with `NODE_SPEC=NAME[:SLOT[,SLOT…]]`: the slots of a host
///    (the largest count when hosts differ; a host without slots means all of its GPUs, not said);
/// 5. `PET_NPROC_PER_NODE` (torchrun's `env` action: the flag wins).
pub fn local_ranks(
    opts: &[(String, String)],
    pet: Option<&String>,
) -> (Option<Sourced<u32>>, Vec<String>) {
    let mut problems = Vec::new();
    let count = |v: &str| -> Result<Option<u32>, String> {
        match v.trim() {
            "gpu" | "auto" | "cpu" | "xpu" => Ok(None),
            t => match t.parse::<u32>() {
                Ok(n) if n >= 1 => Ok(Some(n)),
                _ => Err(format!(
                    "{v:?} is not a number of processes (1 or more, or gpu/auto)"
                )),
            },
        }
    };
    let list = |v: &str| -> Result<Option<u32>, String> {
        let mut ids: Vec<&str> = v
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.is_empty() {
            Err(format!("{v:?} names no device"))
        } else {
            Ok(Some(ids.len() as u32))
        }
    };
    type Parse<'p> = &'p dyn Fn(&str) -> Result<Option<u32>, String>;
    let include = |v: &str| -> Result<Option<u32>, String> { Ok(include_slots(v)) };
    let rules: [(&[&str], Parse); 4] = [
        (&["--nproc-per-node", "--nproc_per_node"], &count),
        (&["--devices", "--gpus"], &list),
        (&["--num_gpus", "--num-gpus"], &count),
        (&["--include"], &include),
    ];
    for (names, parse) in rules {
        let Some((name, value)) = opt(opts, names) else {
            continue;
        };
        match parse(value) {
            Ok(Some(n)) => {
                return (
                    Some(Sourced {
                        value: n,
                        source: name.to_string(),
                    }),
                    problems,
                )
            }
            Ok(None) => return (None, problems),
            Err(e) => problems.push(format!(
                "launcher argument {name}: {e}; not used to count local ranks"
            )),
        }
    }
    if let Some(v) = pet.filter(|v| !v.is_empty()) {
        match count(v) {
            Ok(Some(n)) => {
                return (
                    Some(Sourced {
                        value: n,
                        source: "PET_NPROC_PER_NODE".into(),
                    }),
                    problems,
                )
            }
            Ok(None) => {}
            Err(e) => problems.push(format!(
                "PET_NPROC_PER_NODE: {e}; not used to count local ranks"
            )),
        }
    }
    (None, problems)
}

/// The ranks per host of a DeepSpeed `--include` value (`localhost:0,1`, `w1:0,1@w2:2,3`): the number of
/// distinct slots when every host lists them (the largest when hosts differ), `None` when a host lists none
/// (all of its GPUs).
fn include_slots(value: &str) -> Option<u32> {
    let mut best: Option<u32> = None;
    for spec in value.split('@').filter(|s| !s.trim().is_empty()) {
        let (_, slots) = spec.split_once(':')?;
        let mut ids: Vec<&str> = slots
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.is_empty() {
            return None;
        }
        best = Some(best.unwrap_or(0).max(ids.len() as u32));
    }
    best
}

/// Record a problem once (a value may be looked at by two launchers' rules).
fn problem(info: &mut LaunchInfo, text: String) {
    if !info.shape.problems.contains(&text) {
        info.shape.problems.push(text);
    }
}

fn set_count(info: &mut LaunchInfo, n: u32, source: &str) {
    if info.shape.nnodes.is_none() {
        info.shape.nnodes = Some(n);
        info.shape.source = Some(source.to_string());
    }
}

/// The node rank from `v` unless one is already known. `quiet_negative`: a negative value means unset.
fn set_rank(info: &mut LaunchInfo, v: &str, source: &str, quiet_negative: bool) {
    if info.shape.node_rank.is_some() {
        return;
    }
    match v.trim().parse::<u32>() {
        Ok(r) => {
            info.shape.node_rank = Some(r);
            info.shape.node_rank_source = Some(source.to_string());
        }
        Err(_) if quiet_negative && v.trim().starts_with('-') => {}
        Err(_) => problem(
            info,
            format!(
                "{}: not a node rank (a whole number from 0)",
                written(source, v)
            ),
        ),
    }
}

/// This node's declared address, unless one is known: an address or host as written (brackets removed).
fn set_self(info: &mut LaunchInfo, v: &str, source: &str) {
    if info.shape.self_addr.is_some() {
        return;
    }
    match parse_endpoint(v) {
        Ok(e) => {
            info.shape.self_addr = Some(e.host);
            info.shape.self_addr_source = Some(source.to_string());
        }
        Err(e) => problem(
            info,
            format!(
                "{}: {e}; not used as this node's address",
                written(source, v)
            ),
        ),
    }
}

/// `launcher argument --x "value"` for flags, `NAME="value"` for variables, user information removed.
fn written(source: &str, value: &str) -> String {
    let value = redact_shell_word(value);
    if source.starts_with('-') {
        format!("launcher argument {source} {value:?}")
    } else {
        format!("{source}={value:?}")
    }
}

/// `launcher argument --x` for flags, the variable's name otherwise.
fn what(source: &str) -> String {
    if source.starts_with('-') {
        format!("launcher argument {source}")
    } else {
        source.to_string()
    }
}

/// The first candidate that parses is the master; those before it that do not are problems.
fn choose_master(cands: Vec<Candidate>, info: &mut LaunchInfo) {
    for c in cands {
        let text = match c.shape {
            Shape::One => c.value,
            Shape::First => c.value.split(',').next().unwrap_or(""),
        };
        let e = match parse_endpoint(text) {
            Ok(e) => e,
            Err(e) => {
                problem(
                    info,
                    format!("{}: {e}; not used as the peer", written(&c.source, c.value)),
                );
                continue;
            }
        };
        // The port: written with the host, else named separately (or the launcher's default).
        let mut port = e.port.map(|p| (p, c.source.clone()));
        if port.is_none() {
            if let Some(p) = &c.port {
                match parse_port(p.value.trim()) {
                    Ok(n) => port = Some((n, p.source.clone())),
                    Err(err) => problem(info, format!("{}: {err}", what(&p.source))),
                }
            }
        }
        if let Some((p, s)) = &port {
            info.shape.master_port = Some(*p);
            info.shape.master_port_source = Some(s.clone());
        }
        if let Some((protocol, owner)) = c.rdzv {
            info.shape.rendezvous = Some(Rendezvous {
                protocol,
                owner,
                source: c.source.clone(),
                host: e.host.clone(),
                port: port.map(|(p, _)| p),
                tls: e.scheme.as_deref() == Some("https"),
                clears: c.clears.iter().map(|s| s.to_string()).collect(),
            });
        }
        info.master = Some(Sourced {
            value: e,
            source: c.source,
        });
        return;
    }
}

/// The framework whose launcher the command is: the program's base name (`torchrun`, `deepspeed`,
/// `accelerate` → PyTorch; `fleetrun` → Paddle), or a Python interpreter's `-m` module
/// (`torch.distributed.run`, `torch.distributed.launch` → PyTorch; `paddle.distributed.launch` → Paddle).
/// `None` for anything else (a plain `python train.py` says nothing about its framework).
pub fn framework(argv: &[OsString]) -> Option<Framework> {
    let prog = argv.first()?.to_string_lossy();
    let base = prog.rsplit('/').next().unwrap_or(&prog);
    match base {
        "torchrun" | "deepspeed" | "accelerate" => return Some(Framework::PyTorch),
        "fleetrun" => return Some(Framework::Paddle),
        _ => {}
    }
    if !base.starts_with("python") {
        return None;
    }
    let args: Vec<String> = argv[1..]
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let module = args
        .iter()
        .position(|a| a == "-m")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
        .or_else(|| args.iter().find_map(|a| a.strip_prefix("-m")))?;
    match module {
        "torch.distributed.run" | "torch.distributed.launch" | "accelerate.commands.launch" => {
            Some(Framework::PyTorch)
        }
        "paddle.distributed.launch" => Some(Framework::Paddle),
        _ => None,
    }
}

/// The value of a launcher option (`--name value` or `--name=value`) before the training script, if given:
/// the last one among a recognised launcher's own options (up to its first positional argument), else among the words
/// before a `*.py` argument or `--`.
pub fn launcher_value(argv: &[OsString], name: &str) -> Option<String> {
    let args: Vec<String> = argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let (start, until) = match detect(&args) {
        Some((l, at)) => (at, Grammar::of(l).until()),
        None => (1, Until::Script),
    };
    scan(&args, start, &[name], &[], until)
        .0
        .pop()
        .map(|(_, v)| v)
}

#[cfg(test)]
mod grammar_tests {
    use super::*;

    /// [`GRAMMARS`] has one entry per launcher (the `match` fails to compile when a launcher is added), and
    /// within an entry no option is read both as taking a value and as taking none.
    #[test]
    fn every_launcher_has_one_grammar_and_no_option_is_read_two_ways() {
        let all = [
            Launcher::Torchrun,
            Launcher::Paddle,
            Launcher::Deepspeed,
            Launcher::Sglang,
            Launcher::Vllm,
            Launcher::Ray,
            Launcher::Horovod,
            Launcher::Mpi,
            Launcher::Accelerate,
        ];
        for l in all {
            match l {
                Launcher::Torchrun
                | Launcher::Paddle
                | Launcher::Deepspeed
                | Launcher::Sglang
                | Launcher::Vllm
                | Launcher::Ray
                | Launcher::Horovod
                | Launcher::Mpi
                | Launcher::Accelerate => {}
            }
            let n = GRAMMARS.iter().filter(|g| g.launcher == l).count();
            assert_eq!(n, 1, "{l:?}");
        }
        assert_eq!(GRAMMARS.len(), all.len());
        for g in GRAMMARS {
            for v in g.valued.iter().chain(g.pairs) {
                let two_ways = g.switches.contains(v) || g.flags.contains(v);
                assert!(!two_ways, "{:?}: {v} is valued and a flag", g.launcher);
            }
            for v in g.switches {
                assert!(!g.pairs.contains(v), "{:?}: {v}", g.launcher);
            }
        }
    }

    /// Every option in [`MASTER_NAMES`] is one a launcher's grammar reads with its value: else the scanner
    /// would never collect it, and a master given there that a shell cannot know would go unnoticed. And
    /// [`GENERIC_VALUED`] holds only options some launcher reads.
    #[test]
    fn every_master_option_is_read_by_a_grammar() {
        // A command with no launcher recognised is read with options of the launchers' own.
        for name in GENERIC_VALUED {
            let read = GRAMMARS.iter().any(|g| g.valued.contains(name));
            assert!(read, "{name} is read from any command but by no launcher");
        }
        for name in MASTER_NAMES.iter().filter(|n| n.starts_with('-')) {
            let read = GRAMMARS.iter().any(|g| g.valued.contains(name));
            assert!(
                read,
                "{name} names the master but no launcher's grammar reads it"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::snapshot::Framework;

    fn os_argv(s: &[&str]) -> Vec<OsString> {
        s.iter().map(OsString::from).collect()
    }

    #[test]
    fn frameworks_from_the_launcher() {
        let f = |v: &[&str]| framework(&os_argv(v));
        assert_eq!(
            f(&["torchrun", "--nnodes=2", "t.py"]),
            Some(Framework::PyTorch)
        );
        assert_eq!(
            f(&["/usr/bin/python3", "-m", "torch.distributed.run", "t.py"]),
            Some(Framework::PyTorch)
        );
        assert_eq!(
            f(&[
                "python",
                "-m",
                "paddle.distributed.launch",
                "--log_level=INFO",
                "t.py"
            ]),
            Some(Framework::Paddle)
        );
        assert_eq!(
            f(&["python3", "-mpaddle.distributed.launch"]),
            Some(Framework::Paddle)
        );
        assert_eq!(f(&["python", "train.py"]), None);
        assert_eq!(f(&["sh", "-c", "torchrun t.py"]), None);
        assert_eq!(f(&[]), None);
        let cmd = os_argv(&[
            "python",
            "-m",
            "paddle.distributed.launch",
            "--log_level",
            "WARNING",
            "t.py",
            "--log_level=x",
        ]);
        assert_eq!(
            launcher_value(&cmd, "--log_level").as_deref(),
            Some("WARNING")
        );
        let cmd = os_argv(&[
            "python",
            "-m",
            "paddle.distributed.launch",
            "t.py",
            "--log_level=x",
        ]);
        assert_eq!(launcher_value(&cmd, "--log_level"), None);
    }

    use super::*;
    use proptest::prelude::*;

    /// The local ranks `read` finds, with their source, and the number of problems.
    fn ranks(a: &[&str], e: &[(&str, &str)]) -> (Option<(u32, String)>, usize) {
        let i = read(&argv(a), &env(e));
        let r = i.shape.local_ranks.zip(i.shape.local_ranks_source);
        (r, i.shape.problems.len())
    }

    /// Each launcher's local ranks: Paddle's devices, torchrun's processes per node, DeepSpeed's GPUs and
    /// hosts; none from the script's own arguments; a wrapped command's launcher names still count.
    #[test]
    fn local_ranks_from_each_launcher() {
        let some = |n: u32, s: &str| (Some((n, s.to_string())), 0);
        for flag in ["--devices", "--gpus"] {
            assert_eq!(
                ranks(
                    &[
                        "python",
                        "-m",
                        "paddle.distributed.launch",
                        flag,
                        "0,1",
                        "train.py"
                    ],
                    &[]
                ),
                some(2, flag),
                "{flag}"
            );
        }
        assert_eq!(
            ranks(&["torchrun", "--nproc-per-node=8", "t.py"], &[]),
            some(8, "--nproc-per-node")
        );
        assert_eq!(
            ranks(&["torchrun", "--nproc_per_node", "4", "t.py"], &[]),
            some(4, "--nproc_per_node")
        );
        assert_eq!(
            ranks(&["torchrun", "--nproc-per-node=gpu", "t.py"], &[]),
            (None, 0)
        );
        assert_eq!(
            ranks(&["deepspeed", "--num_gpus", "2", "t.py"], &[]),
            some(2, "--num_gpus")
        );
        assert_eq!(
            ranks(&["deepspeed", "--include", "localhost:0,1,2", "t.py"], &[]),
            some(3, "--include")
        );
        assert_eq!(
            ranks(&["deepspeed", "--include=w1:0,1@w2:0,1,2,3", "t.py"], &[]),
            some(4, "--include")
        );
        assert_eq!(
            ranks(&["deepspeed", "--include", "w1@w2:0", "t.py"], &[]),
            (None, 0)
        );
        // After the script: the script's own arguments.
        assert_eq!(
            ranks(&["torchrun", "t.py", "--nproc-per-node=8"], &[]),
            (None, 0)
        );
        // A wrapped command: the launcher's names still count.
        assert_eq!(
            ranks(&["sh", "-c", "x", "--devices", "0,1,2"], &[]),
            some(3, "--devices")
        );
    }

    /// `PET_NPROC_PER_NODE` gives torchrun's local ranks (a wrapped one's too) unless the flag does; Paddle
    /// does not read it. A bad value is a problem, and the next source is used.
    #[test]
    fn local_ranks_from_pet_nproc_per_node_and_bad_values() {
        let some = |n: u32, s: &str| (Some((n, s.to_string())), 0);
        let pet = [("PET_NPROC_PER_NODE", "4")];
        assert_eq!(
            ranks(&["torchrun", "t.py"], &pet),
            some(4, "PET_NPROC_PER_NODE")
        );
        assert_eq!(
            ranks(&["sh", "-c", "torchrun t.py"], &pet),
            some(4, "PET_NPROC_PER_NODE")
        );
        assert_eq!(
            ranks(&["torchrun", "--nproc-per-node=2", "t.py"], &pet),
            some(2, "--nproc-per-node")
        );
        assert_eq!(
            ranks(&["python", "-m", "paddle.distributed.launch", "t.py"], &pet),
            (None, 0)
        );
        // Bad values are problems, and the next source is used.
        let i = read(
            &argv(&["torchrun", "--nproc-per-node=x", "t.py"]),
            &env(&pet),
        );
        assert_eq!(i.shape.local_ranks, Some(4));
        assert!(
            i.shape.problems.len() == 1 && i.shape.problems[0].contains("--nproc-per-node"),
            "{:?}",
            i.shape.problems
        );
        assert_eq!(
            ranks(
                &[
                    "python",
                    "-m",
                    "paddle.distributed.launch",
                    "--devices",
                    ",",
                    "t.py"
                ],
                &[]
            ),
            (None, 1)
        );
        assert_eq!(
            ranks(&["torchrun", "--nproc-per-node=0", "t.py"], &[]),
            (None, 1)
        );
    }

    fn argv(s: &[&str]) -> Vec<OsString> {
        s.iter().map(OsString::from).collect()
    }
    fn env(v: &[(&str, &str)]) -> BTreeMap<String, String> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
    fn master(i: &LaunchInfo) -> Option<(String, String)> {
        i.master
            .as_ref()
            .map(|m| (m.source.clone(), m.value.host.clone()))
    }
    fn m(source: &str, host: &str) -> Option<(String, String)> {
        Some((source.to_string(), host.to_string()))
    }

    #[test]
    fn endpoints_lose_scheme_userinfo_port_and_brackets() {
        let e = parse_endpoint("etcd://root:S3CR3T@10.100.0.5:2379/v3").expect("etcd");
        assert_eq!(
            e,
            Endpoint {
                host: "10.100.0.5".into(),
                port: Some(2379),
                scheme: Some("etcd".into())
            }
        );
        assert_eq!(
            parse_host("[fd00:20::11]:5000").as_deref(),
            Some("fd00:20::11")
        );
        assert_eq!(parse_host("fd00::1").as_deref(), Some("fd00::1"));
        assert_eq!(parse_host("u:p@m.example:80").as_deref(), Some("m.example"));
        for bad in ["etcd://root:S3CR3T@:2379", "etcd://root:S3CR3T@h:99999"] {
            let err = parse_endpoint(bad).expect_err(bad);
            assert!(!err.contains("S3CR3T"), "{err}");
        }
        assert_eq!(parse_port("65535"), Ok(65535));
        assert!(parse_port("0").is_err() && parse_port("+1").is_err() && parse_port("").is_err());
    }

    #[test]
    fn userinfo_is_redacted_item_by_item() {
        assert_eq!(
            redact_userinfo("etcd://root:S3CR3T@10.0.0.5:2379/x"),
            "etcd://***@10.0.0.5:2379/x"
        );
        assert_eq!(redact_userinfo("u:p@h:1,h2:2"), "***@h:1,h2:2");
        assert_eq!(redact_userinfo("http://h/a@b"), "http://h/a@b");
        assert_eq!(redact_userinfo("10.0.0.1:80"), "10.0.0.1:80");
    }

    #[test]
    fn a_shell_parameter_at_is_not_user_information() {
        // Break-it 02: an `$@` ncclenv did not expand was shown as `***@`.
        let u = crate::shell::UNKNOWN;
        assert_eq!(redact_shell_word(&format!("{u}${{@:2}}{u}")), "${@:2}");
        assert_eq!(
            written("--master_addr", &format!("{u}$@{u}")),
            "launcher argument --master_addr \"$@\""
        );
        // The known text around it is still redacted; an `@` inside `$(…)` too.
        assert_eq!(
            redact_shell_word(&format!("etcd://u:S3CR3T@{u}$H{u}:2379")),
            "etcd://***@$H:2379"
        );
        assert_eq!(redact_shell_word(&format!("{u}$(echo u:p@h){u}")), "***@h)");
    }

    #[test]
    fn launchers_are_recognised_by_program_and_module() {
        let d = |s: &[&str]| detect(&s.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        assert_eq!(d(&["torchrun", "t.py"]), Some((Launcher::Torchrun, 1)));
        assert_eq!(
            d(&[
                "/usr/bin/python3.10",
                "-u",
                "-m",
                "torch.distributed.run",
                "x"
            ]),
            Some((Launcher::Torchrun, 4))
        );
        assert_eq!(
            d(&["python", "-mpaddle.distributed.launch"]),
            Some((Launcher::Paddle, 2))
        );
        assert_eq!(
            d(&["python", "/usr/local/bin/deepspeed", "--num_nodes=2"]),
            Some((Launcher::Deepspeed, 2))
        );
        assert_eq!(
            d(&["python3", "-m", "sglang.launch_server"]),
            Some((Launcher::Sglang, 3))
        );
        assert_eq!(d(&["ray", "start", "--head"]), Some((Launcher::Ray, 2)));
        assert_eq!(d(&["ray", "status"]), None);
        assert_eq!(d(&["vllm", "serve", "m"]), Some((Launcher::Vllm, 1)));
        assert_eq!(d(&["horovodrun", "-np", "2"]), Some((Launcher::Horovod, 1)));
        assert_eq!(d(&["mpiexec"]), Some((Launcher::Mpi, 1)));
        assert_eq!(d(&["python", "train.py"]), None);
        assert_eq!(d(&["python", "-c", "import x"]), None);
        assert_eq!(d(&["sh", "-c", "torchrun t.py"]), None);
        assert_eq!(d(&["pythonista"]), None);
    }

    /// F19: PyTorchJob's PET_* variables; a flag wins over its variable, as in torchrun.
    #[test]
    fn f19_torchrun_reads_pet_variables_and_flags_win() {
        let e = env(&[
            ("PET_NNODES", "2"),
            ("PET_RDZV_ENDPOINT", "10.100.0.5:29400"),
            ("PET_NODE_RANK", "1"),
        ]);
        let i = read(&argv(&["torchrun", "train.py"]), &e);
        assert_eq!(master(&i), m("PET_RDZV_ENDPOINT", "10.100.0.5"));
        assert_eq!(
            (i.shape.nnodes, i.shape.source.as_deref()),
            (Some(2), Some("PET_NNODES"))
        );
        assert_eq!(
            (i.shape.node_rank, i.shape.node_rank_source.as_deref()),
            (Some(1), Some("PET_NODE_RANK"))
        );
        assert_eq!(i.shape.master_port, Some(29400));
        assert_eq!(i.shape.launcher, Some(Launcher::Torchrun));
        let r = i.shape.rendezvous.as_ref().expect("rdzv");
        assert_eq!(r.protocol, RdzvProtocol::Tcp);

        let e = env(&[
            ("PET_NNODES", "2"),
            ("PET_MASTER_ADDR", "10.100.0.5"),
            ("PET_MASTER_PORT", "23456"),
        ]);
        let i = read(&argv(&["torchrun", "train.py"]), &e);
        assert_eq!(master(&i), m("PET_MASTER_ADDR", "10.100.0.5"));
        assert_eq!(
            (i.shape.master_port, i.shape.master_port_source.as_deref()),
            (Some(23456), Some("PET_MASTER_PORT"))
        );
        // Flags win, each on its own.
        let i = read(
            &argv(&[
                "torchrun",
                "--nnodes=3",
                "--master-addr",
                "10.9.0.1",
                "--node_rank=0",
                "train.py",
            ]),
            &e,
        );
        assert_eq!(master(&i), m("--master-addr", "10.9.0.1"));
        assert_eq!(
            (i.shape.nnodes, i.shape.source.as_deref()),
            (Some(3), Some("--nnodes"))
        );
        assert_eq!(i.shape.node_rank_source.as_deref(), Some("--node_rank"));
        assert_eq!(
            i.shape.master_port_source.as_deref(),
            Some("PET_MASTER_PORT")
        );
        // The static backend without a port: torchrun's default, said so.
        let i = read(
            &argv(&["torchrun", "--master_addr=m", "t.py"]),
            &BTreeMap::new(),
        );
        assert_eq!(
            (i.shape.master_port, i.shape.master_port_source.as_deref()),
            (Some(29500), Some("torchrun's default"))
        );
        // An endpoint wins over master_addr (get_rdzv_endpoint), and c10d ignores master_addr.
        let i = read(
            &argv(&[
                "torchrun",
                "--rdzv-backend=c10d",
                "--master-addr=a",
                "--rdzv-endpoint=b:1",
                "t.py",
            ]),
            &BTreeMap::new(),
        );
        assert_eq!(master(&i), m("--rdzv-endpoint", "b"));
        let i = read(
            &argv(&["torchrun", "--rdzv-backend=c10d", "--master-addr=a", "t.py"]),
            &BTreeMap::new(),
        );
        assert_eq!(master(&i), None);
        // --standalone (flag or PET_STANDALONE=1): one node, no master.
        let i = read(
            &argv(&["torchrun", "--standalone", "t.py"]),
            &env(&[("PET_NNODES", "2")]),
        );
        assert_eq!((i.shape.nnodes, master(&i)), (Some(1), None));
        let i = read(
            &argv(&["torchrun", "t.py"]),
            &env(&[("PET_STANDALONE", "1")]),
        );
        assert_eq!(i.shape.source.as_deref(), Some("PET_STANDALONE"));
        let i = read(
            &argv(&["torchrun", "t.py"]),
            &env(&[("PET_STANDALONE", "0")]),
        );
        assert_eq!(i.shape.nnodes, None);
        // After the script, arguments belong to the script.
        let i = read(&argv(&["torchrun", "t.py", "--nnodes=2"]), &BTreeMap::new());
        assert_eq!(i.shape.nnodes, None);
    }

    /// A launcher's options end at its first positional argument (argparse `REMAINDER`): for torchrun a
    /// module name after `-m`, a program after `--no-python`, a script not ending in `.py`; the program's own
    /// arguments are never read, whatever they are called. Options ncclenv does not read are skipped with
    /// their values.
    #[test]
    fn torchrun_options_end_at_the_first_positional() {
        let none = BTreeMap::new();
        let r = |a: &[&str]| read(&argv(a), &none);
        let i = r(&[
            "torchrun",
            "--nnodes",
            "2",
            "-m",
            "pkg.train",
            "--master_addr",
            "x",
            "--nnodes",
            "4",
        ]);
        assert_eq!((i.shape.nnodes, master(&i)), (Some(2), None));
        let i = r(&["torchrun", "--no-python", "./run.sh", "--nnodes", "8"]);
        assert_eq!(i.shape.nnodes, None);
        let i = r(&["torchrun", "--no_python", "bash", "run.sh", "--nnodes=8"]);
        assert_eq!(i.shape.nnodes, None);
        let i = r(&[
            "torchrun",
            "train.sh",
            "--master-addr=10.0.0.9",
            "--nnodes=3",
        ]);
        assert_eq!((i.shape.nnodes, master(&i)), (None, None));
        // Options ncclenv does not read, with their values, before the ones it reads.
        let i = r(&[
            "torchrun",
            "--max-restarts",
            "3",
            "--rdzv-id",
            "job7",
            "--nnodes",
            "2",
            "--standalone",
            "--log-dir",
            "logs",
            "run.sh",
            "--nnodes",
            "5",
        ]);
        assert_eq!(i.shape.nnodes, Some(1), "--standalone read, 5 not");
        let i = r(&[
            "python",
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "4",
            "-m",
            "pkg.train",
            "--nproc-per-node",
            "8",
        ]);
        assert_eq!(i.shape.local_ranks, Some(4));
    }

    /// DeepSpeed's options end at the module after `--module` or the program after `--no_python`; Paddle's
    /// at a script not ending in `.py`.
    #[test]
    fn deepspeed_and_paddle_options_end_at_the_first_positional() {
        let none = BTreeMap::new();
        let r = |a: &[&str]| read(&argv(a), &none);
        let i = r(&[
            "deepspeed",
            "--num_nodes",
            "2",
            "--module",
            "pkg.train",
            "--master_addr",
            "x",
        ]);
        assert_eq!((i.shape.nnodes, master(&i)), (Some(2), None));
        let i = r(&["deepspeed", "--no_python", "run.sh", "--num_nodes", "3"]);
        assert_eq!(i.shape.nnodes, None);
        let i = r(&[
            "python",
            "-m",
            "paddle.distributed.launch",
            "--gpus",
            "0,1",
            "run.sh",
            "--master",
            "10.0.0.1:8090",
        ]);
        assert_eq!((i.shape.local_ranks, master(&i)), (Some(2), None));
    }

    /// mpirun's and horovodrun's options end at the program: its own `-H` and `--hosts` are not read.
    #[test]
    fn mpirun_and_horovodrun_options_end_at_the_first_positional() {
        let none = BTreeMap::new();
        let r = |a: &[&str]| read(&argv(a), &none);
        let i = r(&[
            "mpirun",
            "-np",
            "4",
            "--mca",
            "btl_tcp_if_include",
            "eth0",
            "--allow-run-as-root",
            "-H",
            "a,b",
            "python",
            "train.py",
            "-H",
            "c,d,e",
        ]);
        assert_eq!(i.shape.nnodes, Some(2));
        let i = r(&["mpirun", "-np", "4", "./bench", "-H", "c,d,e"]);
        assert_eq!(i.shape.nnodes, None);
        let i = r(&[
            "horovodrun",
            "-np",
            "4",
            "--gloo",
            "-H",
            "a:2,b:2",
            "./train.sh",
            "--hosts",
            "x,y,z",
        ]);
        assert_eq!(i.shape.nnodes, Some(2));
    }

    /// [`launcher_value`] reads the launcher's own options, never the script's.
    #[test]
    fn launcher_value_reads_the_launchers_options_only() {
        let a = argv(&[
            "python",
            "-m",
            "paddle.distributed.launch",
            "--log_level",
            "DEBUG",
            "run.sh",
            "--log_level",
            "INFO",
        ]);
        assert_eq!(launcher_value(&a, "--log_level").as_deref(), Some("DEBUG"));
        let a = argv(&[
            "python",
            "-m",
            "paddle.distributed.launch",
            "run.sh",
            "--log_level=INFO",
        ]);
        assert_eq!(launcher_value(&a, "--log_level"), None);
    }

    /// F21: an etcd URL with user information: the host after the '@', HTTP, and nothing of the secret.
    #[test]
    fn f21_etcd_urls_are_http_and_keep_no_secret() {
        let i = read(
            &argv(&[
                "torchrun",
                "--nnodes=2",
                "--rdzv-endpoint=etcd://root:S3CR3T@10.100.0.5:2379",
                "train.py",
            ]),
            &BTreeMap::new(),
        );
        assert_eq!(master(&i), m("--rdzv-endpoint", "10.100.0.5"));
        let r = i.shape.rendezvous.expect("rdzv");
        assert_eq!((r.protocol, r.port), (RdzvProtocol::Http, Some(2379)));
        assert!(r.owner.contains("etcd"), "{}", r.owner);
        let i = read(
            &argv(&[
                "torchrun",
                "--rdzv-endpoint=etcd://root:S3CR3T@10.100.0.5:0",
                "t.py",
            ]),
            &BTreeMap::new(),
        );
        assert_eq!(i.master, None);
        assert!(!format!("{i:?}").contains("S3CR3T"), "{i:?}");
        assert_eq!(i.shape.problems.len(), 1, "{:?}", i.shape.problems);
    }

    /// Paddle: variables override flags; --master is an HTTP master whose launcher clears the lower-case
    /// proxies; --ips alone has no rendezvous.
    #[test]
    fn paddle_variables_override_flags() {
        let cmd = argv(&[
            "python",
            "-m",
            "paddle.distributed.launch",
            "--master=10.1.0.1:8090",
            "--nnodes=2",
            "--rank=1",
            "train.py",
        ]);
        let i = read(&cmd, &BTreeMap::new());
        assert_eq!(master(&i), m("--master", "10.1.0.1"));
        assert_eq!(i.shape.node_rank, Some(1));
        let r = i.shape.rendezvous.as_ref().expect("rdzv");
        assert_eq!(r.protocol, RdzvProtocol::Http);
        assert_eq!(r.clears, vec!["http_proxy", "https_proxy"]);
        assert_eq!(
            (i.shape.master_port, i.shape.master_port_source.as_deref()),
            (Some(8090), Some("--master"))
        );
        let e = env(&[
            ("PADDLE_MASTER", "10.2.0.1:8090"),
            ("PADDLE_NNODES", "4"),
            ("PADDLE_TRAINER_ID", "3"),
            ("POD_IP", "10.2.0.7"),
        ]);
        let i = read(&cmd, &e);
        assert_eq!(master(&i), m("PADDLE_MASTER", "10.2.0.1"));
        assert_eq!(
            (i.shape.nnodes, i.shape.source.as_deref()),
            (Some(4), Some("PADDLE_NNODES"))
        );
        assert_eq!(
            i.shape.node_rank_source.as_deref(),
            Some("PADDLE_TRAINER_ID")
        );
        assert_eq!(
            (
                i.shape.self_addr.as_deref(),
                i.shape.self_addr_source.as_deref()
            ),
            (Some("10.2.0.7"), Some("POD_IP"))
        );
        // A negative PADDLE_TRAINER_ID is unset: --rank counts.
        let i = read(&cmd, &env(&[("PADDLE_TRAINER_ID", "-1")]));
        assert_eq!(i.shape.node_rank_source.as_deref(), Some("--rank"));
        // --ips only: the first host, no rendezvous server.
        let i = read(
            &argv(&[
                "python",
                "-m",
                "paddle.distributed.launch",
                "--ips",
                "10.3.0.1,10.3.0.2",
                "t.py",
            ]),
            &BTreeMap::new(),
        );
        assert_eq!(master(&i), m("--ips", "10.3.0.1"));
        assert_eq!(
            (i.shape.nnodes, i.shape.rendezvous.as_ref()),
            (Some(2), None)
        );
    }

    /// The operators' variables: PaddleFlow's PADDLE_TRAINERS_NUM and trainer list, Kubeflow's PADDLE_MASTER.
    /// A shell-wrapped command, read as `probe::job::job_command` reads it: through the shell, expanding
    /// from `vars`.
    fn wrapped(argv_: &[&str], vars: &[(&str, &str)]) -> LaunchInfo {
        let words: Vec<String> = argv_.iter().map(|w| w.to_string()).collect();
        let e = env(vars);
        let u = crate::shell::unwrap(&words, &|k: &str| e.get(k).cloned());
        let mut job_env = e.clone();
        job_env.extend(u.assignments.iter().cloned());
        read(
            &argv(&u.argv.iter().map(String::as_str).collect::<Vec<_>>()),
            &job_env,
        )
    }

    #[test]
    fn shell_wrapped_commands_name_the_job() {
        let i = wrapped(
            &["/bin/bash", "-c", "cd /workspace && torchrun --nnodes=2 --rdzv_endpoint=${MASTER_ADDR}:${MASTER_PORT} t.py"],
            &[("MASTER_ADDR", "10.0.0.1"), ("MASTER_PORT", "23456")],
        );
        assert_eq!(master(&i), m("--rdzv_endpoint", "10.0.0.1"));
        assert_eq!(
            (i.shape.nnodes, i.shape.master_port),
            (Some(2), Some(23456))
        );
        assert_eq!(i.shape.launcher, Some(Launcher::Torchrun));
        // Leading assignments count as the job's environment.
        let i = wrapped(
            &[
                "sh",
                "-c",
                "MASTER_ADDR=10.0.0.7 NODE_RANK=1 python train.py",
            ],
            &[],
        );
        assert_eq!(master(&i), m("MASTER_ADDR", "10.0.0.7"));
        assert_eq!(i.shape.node_rank, Some(1));
        // A command substitution is unknown: no master, even when MASTER_ADDR is exported; a warning.
        let i = wrapped(
            &[
                "bash",
                "-c",
                "torchrun --nnodes=2 --master_addr=$(scontrol show hostnames | head -n1) t.py",
            ],
            &[("MASTER_ADDR", "10.0.0.9")],
        );
        assert_eq!(master(&i), None);
        assert_eq!(i.shape.nnodes, Some(2));
        assert!(
            i.shape.problems.iter().any(|p| p.contains("--master_addr")
                && p.contains("$(scontrol show hostnames | head -n1)")
                && p.contains("not known")),
            "{:?}",
            i.shape.problems
        );
        let i = wrapped(
            &["sh", "-c", "MASTER_ADDR=$(hostname -i) torchrun t.py"],
            &[],
        );
        assert_eq!(master(&i), None);
        assert!(i
            .shape
            .problems
            .iter()
            .any(|p| p.starts_with("MASTER_ADDR=") && p.contains("not known")));
    }

    /// `read_with` over a map of file contents (a path not in it is missing).
    fn read_files(argv_: &[&str], vars: &[(&str, &str)], files: &[(&str, &str)]) -> LaunchInfo {
        let files: BTreeMap<String, String> = files
            .iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect();
        read_with(&argv(argv_), &env(vars), &|p: &str, _| {
            files
                .get(p)
                .map(|t| t.clone().into_bytes())
                .ok_or((true, "no such file".into()))
        })
    }

    /// #21 item 2: Accelerate's flags in both spellings, under `python -m` and inside `sh -c`.
    #[test]
    fn accelerate_flags_name_the_job() {
        let d = |s: &[&str]| detect(&s.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        assert_eq!(
            d(&["accelerate", "launch", "t.py"]),
            Some((Launcher::Accelerate, 2))
        );
        assert_eq!(
            d(&["python3", "-m", "accelerate.commands.launch", "t.py"]),
            Some((Launcher::Accelerate, 3))
        );
        assert_eq!(d(&["accelerate", "config"]), None);
        let flags = [
            "accelerate",
            "launch",
            "--multi_gpu",
            "--main_process_ip",
            "10.0.0.1",
            "--main-process-port=2345",
            "--num_machines",
            "2",
            "--machine_rank=1",
            "t.py",
            "--main_process_ip=10.9.9.9",
        ];
        let i = read(&argv(&flags), &BTreeMap::new());
        assert_eq!(master(&i), m("--main_process_ip", "10.0.0.1"));
        assert_eq!(
            (i.shape.nnodes, i.shape.node_rank, i.shape.master_port),
            (Some(2), Some(1), Some(2345))
        );
        assert_eq!(i.shape.launcher, Some(Launcher::Accelerate));
        let r = i.shape.rendezvous.as_ref().expect("rendezvous");
        assert_eq!(r.protocol, RdzvProtocol::Tcp);
        assert_eq!(framework(&argv(&flags)), Some(Framework::PyTorch));
        // Inside sh -c, with the variables the shell expands.
        let i = wrapped(
            &[
                "bash",
                "-lc",
                "cd /w && accelerate launch --num_machines 2 --main_process_ip $MASTER_ADDR --main_process_port $MASTER_PORT t.py",
            ],
            &[("MASTER_ADDR", "10.0.0.5"), ("MASTER_PORT", "7000")],
        );
        assert_eq!(master(&i), m("--main_process_ip", "10.0.0.5"));
        assert_eq!((i.shape.nnodes, i.shape.master_port), (Some(2), Some(7000)));
        // A value the shell cannot know: the master is unknown, whatever else says.
        let i = wrapped(
            &[
                "sh",
                "-c",
                "accelerate launch --main_process_ip $(hostname -i) t.py",
            ],
            &[("MASTER_ADDR", "10.0.0.9")],
        );
        assert_eq!(master(&i), None);
    }

    /// #21: what Accelerate itself makes of the machines, the master and the processes
    /// (huggingface/accelerate 16cb6eb): one machine unless something says more (launch.py line 1343;
    /// `ClusterConfig.num_machines = 1`, config_args.py line 182), and then `main_process_ip` is not the
    /// master (utils/launch.py lines 216-228 read it only when `num_machines > 1`); `--num_processes` is the
    /// whole job's, divided by the machines on each (line 217); `--same_network` makes it `--master_addr`,
    /// `--rdzv_backend` its backend (etcd: HTTP); `--main_training_function` (TPU only) takes a value.
    #[test]
    fn accelerate_resolves_the_job_as_accelerate_does() {
        let acc = |flags: &[&str]| {
            let mut a = vec!["accelerate", "launch"];
            a.extend_from_slice(flags);
            a.push("t.py");
            // HOME names the default file's place (`~/.cache/huggingface/…`), which does not exist here.
            read(&argv(&a), &env(&[("HOME", "/root")]))
        };
        // No --num_machines, no config file: one machine, the IP unused.
        let i = acc(&[
            "--multi_gpu",
            "--main_process_ip",
            "10.0.0.1",
            "--num_processes",
            "8",
        ]);
        assert_eq!((master(&i), i.shape.nnodes), (None, Some(1)));
        assert_eq!(
            i.shape.source.as_deref(),
            Some("Accelerate's default num_machines (no config file)")
        );
        assert_eq!(i.shape.local_ranks, Some(8));
        // A config file without num_machines: ClusterConfig's 1.
        let cfg = "/w/c.yaml";
        let i = read_files(
            &["accelerate", "launch", "--config_file", cfg, "t.py"],
            &[],
            &[(cfg, "main_process_ip: 10.0.0.2\nnum_processes: 4\n")],
        );
        assert_eq!(
            (master(&i), i.shape.nnodes, i.shape.local_ranks),
            (None, Some(1), Some(4))
        );
        // Two machines: 16 processes are 8 on each; the master is the IP, torchrun's static rendezvous.
        let i = acc(&[
            "--num_machines=2",
            "--num-processes=16",
            "--main_training_function",
            "main",
            "--main_process_ip=10.0.0.1",
        ]);
        assert_eq!(master(&i), m("--main_process_ip", "10.0.0.1"));
        assert_eq!((i.shape.nnodes, i.shape.local_ranks), (Some(2), Some(8)));
        assert_eq!(
            i.shape.local_ranks_source.as_deref(),
            Some("--num-processes / 2 machines")
        );
        let r = |i: &LaunchInfo| {
            i.shape
                .rendezvous
                .as_ref()
                .map(|r| (r.protocol, r.owner.clone()))
        };
        assert!(r(&i).is_some_and(|(p, o)| p == RdzvProtocol::Tcp && o.contains("static")));
        let i = acc(&[
            "--num_machines",
            "2",
            "--main_process_ip",
            "10.0.0.1",
            "--same_network",
        ]);
        assert!(
            r(&i).is_some_and(|(_, o)| o.contains("--master_addr")),
            "{:?}",
            r(&i)
        );
        let i = acc(&[
            "--num_machines",
            "2",
            "--main_process_ip",
            "e.svc",
            "--rdzv_backend",
            "etcd-v2",
        ]);
        assert!(
            r(&i).is_some_and(|(p, _)| p == RdzvProtocol::Http),
            "{:?}",
            r(&i)
        );
        let i = acc(&[
            "--num_machines",
            "2",
            "--main_process_ip",
            "10.0.0.1",
            "--rdzv-backend=c10d",
        ]);
        assert!(r(&i).is_some_and(|(p, o)| p == RdzvProtocol::Tcp && o.contains("c10d")));
    }

    /// A config file's `rdzv_backend` never counts for Accelerate: the copy of the file's values
    /// (launch.py line 1274) fills only options that are `None`, and `--rdzv_backend` defaults to `"static"`.
    #[test]
    fn accelerate_config_rdzv_backend_does_not_count() {
        let cfg = "/w/c.yaml";
        let r = |i: &LaunchInfo| i.shape.rendezvous.as_ref().map(|r| r.protocol);
        let i = read_files(
            &["accelerate", "launch", "--config_file", cfg, "t.py"],
            &[],
            &[(
                cfg,
                "main_process_ip: e.svc\nnum_machines: 2\nrdzv_backend: etcd\n",
            )],
        );
        assert_eq!(r(&i), Some(RdzvProtocol::Tcp));
        assert_eq!(master(&i), m(&format!("{cfg}: main_process_ip"), "e.svc"));
    }

    /// #21 item 2: Accelerate's config file, named or default (as Accelerate resolves it), flags winning.
    #[test]
    fn accelerate_config_files_fill_what_the_flags_leave() {
        // The default file: HF_HOME, else XDG_CACHE_HOME, else ~/.cache; values the flags do not give.
        let yaml =
            "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nmachine_rank: 0\n\
                    main_process_ip: master-0.job\nmain_process_port: 29501\nnum_machines: 4\n";
        let default = "/root/.cache/huggingface/accelerate/default_config.yaml";
        let i = read_files(
            &["accelerate", "launch", "--machine-rank", "3", "t.py"],
            &[("HOME", "/root")],
            &[(default, yaml)],
        );
        let src = format!("{default}: main_process_ip");
        assert_eq!(master(&i), m(&src, "master-0.job"));
        assert_eq!(
            (i.shape.nnodes, i.shape.node_rank, i.shape.master_port),
            (Some(4), Some(3), Some(29501))
        );
        assert_eq!(i.shape.node_rank_source.as_deref(), Some("--machine-rank"));
        assert_eq!(
            i.shape.source.as_deref(),
            Some(format!("{default}: num_machines").as_str())
        );
        let hf = "/hf/accelerate/default_config.yaml";
        let i = read_files(
            &["python", "-m", "accelerate.commands.launch", "t.py"],
            &[
                ("HOME", "/root"),
                ("HF_HOME", "/hf"),
                ("XDG_CACHE_HOME", "/x"),
            ],
            &[
                (default, yaml),
                (hf, "main_process_ip: 10.0.0.8\nnum_machines: 2\n"),
            ],
        );
        assert_eq!(master(&i), m(&format!("{hf}: main_process_ip"), "10.0.0.8"));
        assert_eq!(i.shape.master_port, Some(29500));
        // --cpu: the default file is not read (so Accelerate's own num_machines 1 counts, launch.py line
        // 1343); a named file always is; a flag wins over it.
        let i = read_files(
            &["accelerate", "launch", "--cpu", "t.py"],
            &[("HOME", "/root")],
            &[(default, yaml)],
        );
        assert_eq!((master(&i), i.shape.nnodes), (None, Some(1)));
        let i = read_files(
            &[
                "accelerate",
                "launch",
                "--config_file",
                "/w/multi.json",
                "--main_process_ip=10.0.0.3",
                "t.py",
            ],
            &[],
            &[(
                "/w/multi.json",
                "{\"main_process_ip\": \"10.0.0.2\", \"num_machines\": 2}",
            )],
        );
        assert_eq!(master(&i), m("--main_process_ip", "10.0.0.3"));
        assert_eq!(i.shape.nnodes, Some(2));
        // A named file that is missing or does not parse is a problem; a SageMaker file is not this launcher's.
        let i = read_files(
            &["accelerate", "launch", "--config_file=/nope.yaml", "t.py"],
            &[],
            &[],
        );
        assert!(
            i.shape
                .problems
                .iter()
                .any(|p| p.contains("/nope.yaml") && p.contains("cannot be read")),
            "{:?}",
            i.shape.problems
        );
        let i = read_files(
            &["accelerate", "launch", "--config_file=/c.yaml", "t.py"],
            &[],
            &[(
                "/c.yaml",
                "compute_environment: AMAZON_SAGEMAKER\nmain_process_ip: 10.0.0.1\n",
            )],
        );
        assert_eq!((master(&i), i.shape.problems.len()), (None, 0));
        let i = read_files(
            &["accelerate", "launch", "--config_file=/c.yaml", "t.py"],
            &[],
            &[("/c.yaml", "{main_process_ip: 10.0.0.1}")],
        );
        assert_eq!(master(&i), None);
        assert_eq!(i.shape.problems.len(), 1, "{:?}", i.shape.problems);
    }

    #[test]
    fn empty_master_variables_are_named() {
        let i = read(
            &argv(&["python", "t.py"]),
            &env(&[("MASTER_ADDR", ""), ("MASTER_PORT", "29500")]),
        );
        assert_eq!(master(&i), None);
        assert_eq!(i.shape.problems.len(), 1, "{:?}", i.shape.problems);
        assert!(i.shape.problems[0].starts_with("MASTER_ADDR is set but empty"));
        let i = read(&argv(&["torchrun", "--master_addr=", "t.py"]), &env(&[]));
        assert!(
            i.shape.problems.iter().any(|p| p.contains("--master_addr")),
            "{:?}",
            i.shape.problems
        );
    }

    #[test]
    fn orchestrators_come_after_the_launcher() {
        let slurm = [
            ("SLURM_JOB_NODELIST", "gpu[001-004]"),
            ("SLURM_JOB_NUM_NODES", "4"),
            ("SLURM_NODEID", "3"),
        ];
        let i = read(&argv(&["python", "train.py"]), &env(&slurm));
        assert_eq!(master(&i), m("SLURM_JOB_NODELIST (Slurm)", "gpu001"));
        assert_eq!((i.shape.nnodes, i.shape.node_rank), (Some(4), Some(3)));
        assert_eq!(i.shape.orchestrator.as_deref(), Some("Slurm"));
        let mut with_master = slurm.to_vec();
        with_master.push(("MASTER_ADDR", "10.0.0.2"));
        let i = read(&argv(&["python", "train.py"]), &env(&with_master));
        assert_eq!(master(&i), m("MASTER_ADDR", "10.0.0.2"));
        let i = read(
            &argv(&["torchrun", "--nnodes=2", "--master_addr=h", "t.py"]),
            &env(&slurm),
        );
        assert_eq!(master(&i), m("--master_addr", "h"));
        assert_eq!(i.shape.nnodes, Some(2));
        assert_eq!(i.shape.node_rank, Some(3));
        let i = read(&argv(&["torchrun", "--standalone", "t.py"]), &env(&slurm));
        assert_eq!((master(&i), i.shape.nnodes), (None, Some(1)));
    }

    #[test]
    fn operator_variables_give_shape_and_rank() {
        let e = env(&[
            ("PADDLE_TRAINERS_NUM", "2"),
            ("PADDLE_TRAINERS", "job-worker-0,job-worker-1"),
            ("PADDLE_TRAINER_ID", "1"),
        ]);
        let i = read(&argv(&["python", "train.py"]), &e);
        assert_eq!(
            (i.shape.nnodes, i.shape.source.as_deref()),
            (Some(2), Some("PADDLE_TRAINERS_NUM"))
        );
        assert_eq!(master(&i), m("PADDLE_TRAINERS", "job-worker-0"));
        assert_eq!(i.shape.node_rank, Some(1));
        let i = read(
            &argv(&["python", "train.py"]),
            &env(&[("PADDLE_MASTER", "m:37777")]),
        );
        assert_eq!(
            i.shape.rendezvous.as_ref().map(|r| r.owner.as_str()),
            Some("Paddle's HTTP master")
        );
        assert_eq!(i.shape.master_port, Some(37777));
    }

    /// DeepSpeed's runner and `deepspeed.launcher.launch`: the master, its port (29500 by default), the nodes
    /// (`-1`: not said) and the node rank.
    #[test]
    fn deepspeed_names_the_master_nodes_and_rank() {
        let i = read(
            &argv(&[
                "deepspeed",
                "--num_nodes",
                "2",
                "--master_addr",
                "10.0.0.1",
                "--master_port=2222",
                "t.py",
            ]),
            &BTreeMap::new(),
        );
        assert_eq!(master(&i), m("--master_addr", "10.0.0.1"));
        assert_eq!((i.shape.nnodes, i.shape.master_port), (Some(2), Some(2222)));
        let i = read(
            &argv(&["deepspeed", "--num_nodes=-1", "t.py"]),
            &BTreeMap::new(),
        );
        assert_eq!((i.shape.nnodes, i.shape.problems.len()), (None, 0));
        let i = read(
            &argv(&[
                "python",
                "-m",
                "deepspeed.launcher.launch",
                "--node_rank=1",
                "--master_addr=m",
                "t.py",
            ]),
            &BTreeMap::new(),
        );
        assert_eq!(
            (i.shape.node_rank, i.shape.master_port),
            (Some(1), Some(29500))
        );
    }

    /// F27: SGLang's `--dist-init-addr` with IPv6 in brackets: the master, its port, the nodes and the rank.
    #[test]
    fn f27_sglang_names_an_ipv6_master_in_brackets() {
        let i = read(
            &argv(&[
                "python3",
                "-m",
                "sglang.launch_server",
                "--dist-init-addr",
                "[fd00:20::11]:5000",
                "--nnodes",
                "2",
                "--node-rank",
                "1",
            ]),
            &BTreeMap::new(),
        );
        assert_eq!(master(&i), m("--dist-init-addr", "fd00:20::11"));
        assert_eq!(
            (i.shape.nnodes, i.shape.node_rank, i.shape.master_port),
            (Some(2), Some(1), Some(5000))
        );
    }

    /// Ray: the head and this node's address; `--address=auto` names no master; `--address` means nothing to
    /// other commands.
    #[test]
    fn ray_names_the_head_and_this_node() {
        let i = read(
            &argv(&[
                "ray",
                "start",
                "--address=10.0.0.1:6379",
                "--node-ip-address",
                "10.0.1.12",
            ]),
            &BTreeMap::new(),
        );
        assert_eq!(master(&i), m("--address", "10.0.0.1"));
        assert_eq!(i.shape.self_addr.as_deref(), Some("10.0.1.12"));
        assert_eq!(
            i.shape.rendezvous.as_ref().map(|r| r.protocol),
            Some(RdzvProtocol::Tcp)
        );
        // `--address=auto`: the cluster this machine runs; no master named (not a host called "auto").
        for a in [
            &["ray", "start", "--address=auto"][..],
            &["ray", "start", "--address", "auto", "--block"],
        ] {
            let i = read(&argv(a), &BTreeMap::new());
            assert_eq!((master(&i), i.shape.problems.len()), (None, 0), "{a:?}");
        }
        // `--address` means nothing to other commands.
        let i = read(
            &argv(&["python", "x", "--address=10.0.0.1"]),
            &BTreeMap::new(),
        );
        assert_eq!(master(&i), None);
    }

    /// F29: `VLLM_HOST_IP` names this node's address, for any command.
    #[test]
    fn f29_vllm_host_ip_names_this_node() {
        let i = read(
            &argv(&["vllm", "serve", "m"]),
            &env(&[("VLLM_HOST_IP", "10.0.1.12")]),
        );
        assert_eq!(
            (
                i.shape.self_addr.as_deref(),
                i.shape.self_addr_source.as_deref()
            ),
            (Some("10.0.1.12"), Some("VLLM_HOST_IP"))
        );
    }

    /// horovodrun `-H`: the node count.
    #[test]
    fn horovodrun_hosts_count_the_nodes() {
        let i = read(
            &argv(&[
                "horovodrun",
                "-np",
                "2",
                "-H",
                "node-a:1,node-b:1",
                "python",
                "train.py",
            ]),
            &BTreeMap::new(),
        );
        assert_eq!(
            (i.shape.nnodes, i.shape.source.as_deref()),
            (Some(2), Some("-H"))
        );
    }

    #[test]
    fn other_commands_read_every_launchers_names_then_variables() {
        let e = env(&[("MASTER_ADDR", "10.0.0.9"), ("MASTER_PORT", "1234")]);
        let i = read(
            &argv(&["sh", "-c", "x", "sh", "--master=10.1.0.1:8090"]),
            &e,
        );
        assert_eq!(master(&i), m("--master", "10.1.0.1"));
        let i = read(&argv(&["python", "t.py", "--master=10.1.0.1"]), &e);
        assert_eq!(master(&i), m("MASTER_ADDR", "10.0.0.9"));
        assert_eq!(
            (i.shape.master_port, i.shape.master_port_source.as_deref()),
            (Some(1234), Some("MASTER_PORT"))
        );
        // A wrapped torchrun still reads PET_*, after the others.
        let i = read(
            &argv(&["bash", "-c", "torchrun t.py"]),
            &env(&[("PET_NNODES", "2")]),
        );
        assert_eq!(i.shape.nnodes, Some(2));
        // NODE_RANK for anything.
        let i = read(&argv(&["python", "t.py"]), &env(&[("NODE_RANK", "x")]));
        assert_eq!(i.shape.node_rank, None);
        assert!(
            i.shape.problems[0].starts_with("NODE_RANK"),
            "{:?}",
            i.shape.problems
        );
    }

    #[test]
    fn bad_values_become_problems_and_the_next_source_counts() {
        let e = env(&[("MASTER_ADDR", "10.0.0.9")]);
        let cmd = argv(&[
            "python",
            "-m",
            "paddle.distributed.launch",
            "--master=:8090",
            "t.py",
        ]);
        let i = read(&cmd, &e);
        assert_eq!(master(&i), m("MASTER_ADDR", "10.0.0.9"));
        assert!(
            i.shape.problems.len() == 1 && i.shape.problems[0].contains("--master"),
            "{:?}",
            i.shape.problems
        );
        // Sources after the one used are not looked at.
        let e = env(&[
            ("MASTER_ADDR", "10.0.0.9"),
            ("PADDLE_TRAINER_ENDPOINTS", "x:abc"),
        ]);
        let i = read(&argv(&["python"]), &e);
        assert!(i.shape.problems.is_empty(), "{:?}", i.shape.problems);
        let i = read(
            &argv(&["torchrun", "--nnodes", "2:1", "t.py"]),
            &BTreeMap::new(),
        );
        assert_eq!(i.shape.nnodes, None);
        assert!(
            i.shape.problems[0].contains("--nnodes"),
            "{:?}",
            i.shape.problems
        );
        let i = read(
            &argv(&["torchrun", "--master-addr=m", "--master-port=99999", "t.py"]),
            &BTreeMap::new(),
        );
        assert_eq!(i.shape.master_port, None);
        assert!(
            i.shape.problems[0].contains("--master-port"),
            "{:?}",
            i.shape.problems
        );
    }

    #[test]
    fn nnodes_ranges() {
        assert_eq!(parse_nnodes("1:4"), Ok(4));
        assert_eq!(parse_nnodes("3"), Ok(3));
        assert!(parse_nnodes("2:1").expect_err("2:1").contains("minimum 2"));
        assert!(parse_nnodes("0:1").is_err());
        assert!(parse_nnodes("1:2:3").is_err());
    }

    proptest! {
        #[test]
        fn never_panics_and_never_keeps_userinfo(args in proptest::collection::vec(".{0,24}", 0..8), v in ".{0,32}") {
            let mut a: Vec<OsString> = args.iter().map(OsString::from).collect();
            let secret = format!("etcd://u:S3CR3T@{v}");
            a.push(OsString::from(format!("--rdzv-endpoint={secret}")));
            let mut e = BTreeMap::new();
            for k in VARS {
                e.insert(k.to_string(), v.clone());
            }
            e.insert("PET_RDZV_ENDPOINT".to_string(), secret.clone());
            for prog in ["torchrun", "python", "sh"] {
                let mut cmd = vec![OsString::from(prog)];
                cmd.extend(a.iter().cloned());
                let shown = format!("{:?}", read(&cmd, &e));
                prop_assert!(!shown.contains("S3CR3T"), "{}", shown);
            }
            let _ = parse_endpoint(&v);
            let _ = parse_nnodes(&v);
            let _ = redact_userinfo(&v);
        }
    }
}
