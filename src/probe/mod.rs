//! Probes: read the world into plain data. A probe never aborts: it records its error in the snapshot.

pub mod host;
pub mod job;
pub mod nccl;
pub mod net;
pub mod rdma;
pub mod read;

use crate::config::Config;
use crate::launcher;
use crate::snapshot::{ConfFile, JobShape, NcclInstall, Network, RdmaSnapshot, Snapshot};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

/// How much to probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// What the decision needs before every job start.
    Start,
    /// Also what only `doctor` reports (every NCCL installation on disk; the start path looks for them only
    /// when an inherited `NCCL_SOCKET_IFNAME` needs NCCL's version to be read).
    Doctor,
}

/// Run every probe and assemble the snapshot. `cmd` is the job's command (launcher arguments are read from
/// it by `crate::launcher`; empty when there is none), `vars` the inherited environment. Launcher values that
/// cannot be parsed are recorded in the job shape's `problems`. Never fails: each probe records its own
/// error (a peer that does not resolve within `NCCLENV_RESOLVE_TIMEOUT_MS` is recorded in the peer).
pub fn collect(
    cfg: &Config,
    cmd: &[OsString],
    vars: &[(OsString, OsString)],
    depth: Depth,
) -> Snapshot {
    let env = job::record_env(vars.iter().cloned());
    let conf_files = job::read_conf_files(&env, Path::new("/etc"));
    let peer_given = cfg.peer.as_deref().map(|p| {
        let source = cfg.peer_source.as_deref().unwrap_or("NCCLENV_PEER");
        (p, source)
    });
    let jc = job::job_command(cmd, vars, &env);
    let cmd = jc.argv.as_slice();
    let job_env = jc.env.as_ref().unwrap_or(&env);
    let (peer, shape) = job::job(peer_given, cfg.nnodes, cmd, job_env, jc.cwd.as_deref());
    // A job that may span nodes, started by ncclenv, waits for its master's name as long as its launcher
    // would (`Config::resolve_timeout`); doctor and single-node jobs keep the short bound.
    let (timeout, bound) = cfg.resolve_timeout(depth == Depth::Start && !shape.is_single_node());
    let peer = peer.map(|p| {
        let mut say = |line: &str| tracing::info!("{line}");
        let wait = job::ResolveWait {
            timeout,
            bound,
            every: job::RESOLVE_REPORT_EVERY,
            say: &mut say,
        };
        job::resolve_peer_waiting(p.source, p.value.host, p.value.port, wait)
    });
    let mut shape = shape;
    shape.framework = launcher::framework(cmd);
    shape.launcher_log_level = launcher::launcher_value(cmd, "--log_level");
    // Doctor alone reads the first line of a script the command runs directly (`./run.sh`).
    let script = match depth {
        Depth::Doctor => jc.script.clone().or_else(|| job::direct_script(&jc)),
        Depth::Start => jc.script.clone(),
    };
    let gpu_env = gpu_env(&env, &jc.env_assigned);
    shape.wrapper = jc.wrapper;
    shape.script = script;
    shape.env_removed = jc.env_removed;
    shape.env_assigned = jc.env_assigned;
    shape.problems.extend(jc.problems);
    // A contact URI (an MPI rank's) lists every address of mpirun's: each is looked up, and the one this host
    // reaches best becomes the peer (`job::contact_peer`).
    let peer_addrs = if shape.contact_addrs.is_empty() {
        peer.as_ref().map(|p| p.addrs.clone()).unwrap_or_default()
    } else {
        shape.contact_addrs.clone()
    };
    let rdma = rdma::probe(&cfg.sysfs, &cfg.devfs);
    let net = probe_network(cfg, depth, &peer_addrs, &rdma, &env, &conf_files);
    let (peer, net) = job::contact_peer(peer, &shape.contact_addrs, net);
    // Net plugins matter only where RDMA devices exist (they run their own IB transport); doctor lists them
    // always.
    let net_plugins = if depth == Depth::Doctor || !rdma.devices.is_empty() {
        let chosen =
            crate::nccl_rules::effective("NCCL_NET_PLUGIN", &env, &conf_files).map(|(v, _)| v);
        nccl::find_net_plugins(&env, chosen, depth == Depth::Doctor)
    } else {
        Vec::new()
    };
    let rdma = Some(rdma);
    let shm = Some(host::probe_shm(&cfg.shm_path));
    let gpus = Some(host::gpu_count(&gpu_env, &cfg.devfs));
    // The NCCL the command will load decides how an inherited NCCL_SOCKET_IFNAME is read: before 2.28 an
    // interface with an address but without carrier counts. The start path looks for the installations
    // (directory scans: about a millisecond) only when that can change the reading: such a value is
    // inherited and such an interface exists. `NCCLENV_DEBUG=1` also needs them: it picks NCCL's debug
    // subsystems by that version.
    let nccl_installs = nccl_installs(cfg, depth, &net, &env, &conf_files);
    let link_speeds = link_speeds(cfg, depth, &net, &shape);
    Snapshot {
        net,
        peer,
        job: shape,
        env,
        conf_files,
        rdma,
        shm,
        gpus,
        nccl_installs,
        net_plugins,
        link_speeds,
    }
}

/// Link speeds (`/sys/class/net/*/speed`, Mbit/s by name): doctor shows every link's. The start path reads
/// them only where `decide::faster` can use them: a job not known to be single-node with two or more
/// RUNNING, non-loopback links that hold a usable address (one sysfs read each, a few microseconds).
fn link_speeds(
    cfg: &Config,
    depth: Depth,
    net: &Result<Network, String>,
    shape: &JobShape,
) -> BTreeMap<String, u64> {
    match (net, depth) {
        (Ok(n), Depth::Doctor) => {
            let names: Vec<String> = n.links.iter().map(|l| l.name.clone()).collect();
            host::link_speeds(&cfg.sysfs, &names)
        }
        (Ok(n), Depth::Start) if !shape.is_single_node() => {
            let names: Vec<String> = n
                .links
                .iter()
                .filter(|l| l.running && !l.loopback)
                .filter(|l| n.addrs.iter().any(|a| a.index == l.index && a.usable()))
                .map(|l| l.name.clone())
                .collect();
            if names.len() > 1 {
                host::link_speeds(&cfg.sysfs, &names)
            } else {
                Default::default()
            }
        }
        _ => Default::default(),
    }
}

/// The network: the full dumps for `doctor`; for a job start, what the decision needs ([`net::probe_start`]):
/// the peer routes, the netdevs of RoCE GIDs (`decide::rdma` looks them up by name), IPv6 routes when the
/// effective `NCCL_SOCKET_FAMILY` asks for IPv6.
fn probe_network(
    cfg: &Config,
    depth: Depth,
    peer_addrs: &[std::net::IpAddr],
    rdma: &RdmaSnapshot,
    env: &BTreeMap<String, String>,
    conf_files: &[ConfFile],
) -> Result<Network, String> {
    match depth {
        Depth::Doctor => net::probe_full(peer_addrs),
        Depth::Start => {
            // The netdevs of RoCE GIDs: `decide::rdma` looks them up by name in the links.
            let mut names: Vec<String> = rdma
                .devices
                .iter()
                .flat_map(|d| &d.ports)
                .flat_map(|p| &p.gids)
                .filter_map(|g| g.ndev.clone())
                .collect();
            names.sort_unstable();
            names.dedup();
            let family = crate::nccl_rules::effective("NCCL_SOCKET_FAMILY", env, conf_files);
            let needs = net::StartNeeds {
                ipv6_family: crate::nccl_rules::socket_family(family.as_ref().map(|(v, _)| *v))
                    == Some(crate::snapshot::Family::Inet6),
                exclude: &cfg.exclude,
                names: &names,
            };
            net::probe_start(peer_addrs, &needs)
        }
    }
}

/// The NCCL installations the command can load: always for `doctor`; for a job start only where they can
/// change the decision (see the comment at the call).
fn nccl_installs(
    cfg: &Config,
    depth: Depth,
    net: &Result<Network, String>,
    env: &BTreeMap<String, String>,
    conf_files: &[ConfFile],
) -> Vec<NcclInstall> {
    match depth {
        Depth::Doctor => nccl::installs(cfg.nccl_lib.as_deref(), env, true),
        Depth::Start => {
            let inherited = crate::nccl_rules::effective("NCCL_SOCKET_IFNAME", env, conf_files)
                .is_some_and(|(v, _)| crate::nccl_rules::ifname_counts(v));
            let dead = net.as_ref().is_ok_and(|n| {
                n.links
                    .iter()
                    .any(|l| !l.running && n.addrs.iter().any(|a| a.index == l.index))
            });
            // NCCL_COMM_ID: a version's known defect may apply (`crate::nccl_defects`).
            let comm_id = crate::nccl_rules::effective("NCCL_COMM_ID", env, conf_files).is_some();
            if (inherited && dead) || cfg.debug || comm_id {
                nccl::installs(cfg.nccl_lib.as_deref(), env, false)
            } else {
                Vec::new()
            }
        }
    }
}

/// The environment the GPU count reads ([`host::gpu_count`]): ncclenv's, with the wrapper's assignments of
/// `CUDA_VISIBLE_DEVICES` and `NVIDIA_VISIBLE_DEVICES` over it (`sh -c "CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun
/// …"`, `env CUDA_VISIBLE_DEVICES=… torchrun`: the command sees those; break-it finding: they were not counted
/// and a `/dev/shm` too small for four ranks went unjudged). A value the shell leaves unknown is not used.
fn gpu_env(
    env: &BTreeMap<String, String>,
    assigned: &[(String, String)],
) -> BTreeMap<String, String> {
    let mut out = env.clone();
    for (name, value) in assigned {
        let gpu_var = name == "CUDA_VISIBLE_DEVICES" || name == "NVIDIA_VISIBLE_DEVICES";
        if gpu_var && !crate::launch_facts::is_unknown(value) {
            out.insert(name.clone(), value.clone());
        }
    }
    out
}

#[cfg(test)]
mod gpu_env_tests {
    use super::*;

    /// The wrapper's `CUDA_VISIBLE_DEVICES` is the job's; an unknown one (`$GPUS`) is not used.
    #[test]
    fn the_wrappers_gpu_list_is_the_jobs() {
        let env = BTreeMap::from([("CUDA_VISIBLE_DEVICES".to_string(), "0".to_string())]);
        let assigned = vec![
            ("CUDA_VISIBLE_DEVICES".to_string(), "0,1,2,3".to_string()),
            ("UCX_NET_DEVICES".to_string(), "eth0".to_string()),
        ];
        let out = gpu_env(&env, &assigned);
        assert_eq!(out["CUDA_VISIBLE_DEVICES"], "0,1,2,3");
        assert!(!out.contains_key("UCX_NET_DEVICES"));
        let unknown = format!(
            "{}GPUS{}",
            crate::launch_facts::UNKNOWN,
            crate::launch_facts::UNKNOWN
        );
        let out = gpu_env(&env, &[("CUDA_VISIBLE_DEVICES".to_string(), unknown)]);
        assert_eq!(out["CUDA_VISIBLE_DEVICES"], "0");
    }
}
