//! The orchestrators' own variables, as one table: the platform that started the process (Slurm, a Kubernetes
//! operator, SageMaker, AWS Batch, Vertex AI, Ray, an MPI launcher) usually names the job's master, the node
//! count and this node's rank in variables of its own, whatever the command is. [`ROWS`] holds one row per
//! orchestrator, each with its source; [`read`] is the one generic reader. It runs after the launcher's own
//! arguments and variables (`crate::launcher::read`), which win: a row only fills what they left unknown, the
//! master only when no launcher source named one (an exported `MASTER_ADDR` still wins over Slurm's node
//! list). The first row (in table order) whose variable names a master decides it; `JobShape::orchestrator`
//! names that row (or the row that gave the node count or rank).
//!
//! Values are parsed by the shapes of [`HostVar`], [`CountVar`] and [`RankVar`]; Slurm's compressed host lists
//! by [`hostlist`], exactly as Slurm's `src/common/hostlist.c` expands them. A value that does not parse is a
//! problem (a `launcher-argument` warning naming the variable) and is not used.

use crate::launch_facts::{parse_endpoint, Endpoint, LaunchInfo, Sourced};
use std::collections::BTreeMap;

/// How a variable names the master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostVar {
    /// `host`, `host:port`, `[v6]:port` or a URL (`crate::launch_facts::parse_endpoint`).
    Endpoint,
    /// A Slurm host list (`gpu[01-04],login1`): its first host.
    SlurmHostlist,
    /// A JSON list of host names (`["algo-1","algo-2"]`): the first.
    JsonList,
    /// Vertex AI's `CLUSTER_SPEC` JSON: `cluster.workerpool0[0]` (the primary replica).
    VertexSpec,
    /// Open MPI's ORTE contact URI (`OMPI_MCA_orte_hnp_uri`, see [`ompi_uri`]): mpirun's addresses that are
    /// not loopback, all kept in `JobShape::contact_addrs`; the peer is the one this host reaches best
    /// (`crate::probe::job::order_contact`), the first until the network is known.
    OmpiUri,
    /// A PMIx server URI (`PMIX_SERVER_URI*`, see [`pmix_uri`]): a peer only when the server is the PRRTE
    /// launcher itself (rank 0 of the daemons' namespace `…@0`); its addresses are read as [`HostVar::OmpiUri`]'s.
    PmixUri,
}

/// How a variable gives the node count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountVar {
    /// A number (1 or more).
    Number,
    /// The hosts of a Slurm host list.
    SlurmHostlist,
    /// The entries of a JSON list.
    JsonList,
    /// This variable (processes in the job) divided by the named one (processes on this node), when it
    /// divides evenly (MPI ranks: `OMPI_COMM_WORLD_SIZE / OMPI_COMM_WORLD_LOCAL_SIZE`).
    Over(&'static str),
    /// Vertex AI's `CLUSTER_SPEC`: the replicas of `workerpool0` and `workerpool1`.
    VertexSpec,
}

/// How a variable gives this node's rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankVar {
    /// A number from 0.
    Number,
    /// This host's name (the variable) at its position in the named JSON list (`SM_CURRENT_HOST` in
    /// `SM_HOSTS`).
    IndexIn(&'static str),
    /// Vertex AI's `CLUSTER_SPEC`: `task.index` in `workerpool0` (0), or 1 + `task.index` in `workerpool1`.
    VertexSpec,
}

/// One orchestrator's variables. Each field lists the names tried in order (the first that is set counts).
#[derive(Debug, Clone, Copy)]
pub struct Row {
    /// The orchestrator's name as `doctor` shows it.
    pub name: &'static str,
    /// The public source of the row's names and meaning.
    pub source: &'static str,
    /// The master (peer).
    pub master: Option<(&'static [&'static str], HostVar)>,
    /// The master's port, when named apart from it.
    pub port: &'static [&'static str],
    /// The node count.
    pub nodes: Option<(&'static [&'static str], CountVar)>,
    /// This node's rank among the nodes.
    pub node_rank: Option<(&'static [&'static str], RankVar)>,
    /// The variable naming the network interface the platform provides for the job, when there is one.
    pub interface: &'static [&'static str],
}

/// The orchestrators, in the order they are consulted. Rows whose variables the launcher reading already
/// takes (PyTorchJob's `MASTER_ADDR`, PaddleJob's `PADDLE_MASTER`) are listed so that the table says every
/// source; they change nothing there.
pub const ROWS: &[Row] = &[
    Row {
        name: "Kubeflow PyTorchJob",
        source: "kubeflow/training-operator pkg/controller.v1/pytorch/envvar.go (MASTER_ADDR, MASTER_PORT, PET_NNODES, PET_NODE_RANK)",
        master: Some((&["MASTER_ADDR"], HostVar::Endpoint)),
        port: &["MASTER_PORT"],
        nodes: Some((&["PET_NNODES"], CountVar::Number)),
        node_rank: Some((&["PET_NODE_RANK"], RankVar::Number)),
        interface: &[],
    },
    Row {
        name: "Kubeflow PaddleJob",
        source: "kubeflow/training-operator pkg/controller.v1/paddlepaddle/envvar.go (PADDLE_MASTER, PADDLE_NNODES)",
        master: Some((&["PADDLE_MASTER"], HostVar::Endpoint)),
        port: &[],
        nodes: Some((&["PADDLE_NNODES"], CountVar::Number)),
        node_rank: Some((&["PADDLE_TRAINER_ID"], RankVar::Number)),
        interface: &[],
    },
    Row {
        name: "Slurm",
        source: "SchedMD/slurm doc/man/man1/srun.1 and sbatch.1 (OUTPUT ENVIRONMENT VARIABLES), src/common/hostlist.c; the first host is the master as in Lightning's SLURMEnvironment and `scontrol show hostnames | head -n1`",
        master: Some((&["SLURM_JOB_NODELIST", "SLURM_NODELIST"], HostVar::SlurmHostlist)),
        port: &[],
        nodes: Some((
            &["SLURM_JOB_NUM_NODES", "SLURM_NNODES"],
            CountVar::Number,
        )),
        node_rank: Some((&["SLURM_NODEID"], RankVar::Number)),
        interface: &[],
    },
    Row {
        name: "LeaderWorkerSet",
        source: "kubernetes-sigs/lws api/leaderworkerset/v1/leaderworkerset_types.go (LWS_LEADER_ADDRESS, LWS_GROUP_SIZE, LWS_WORKER_INDEX; index 0 is the leader)",
        master: Some((&["LWS_LEADER_ADDRESS"], HostVar::Endpoint)),
        port: &[],
        nodes: Some((&["LWS_GROUP_SIZE"], CountVar::Number)),
        node_rank: Some((&["LWS_WORKER_INDEX"], RankVar::Number)),
        interface: &[],
    },
    Row {
        name: "SageMaker",
        source: "aws/sagemaker-training-toolkit src/sagemaker_training/environment.py and params.py (SM_HOSTS sorted, the master its first host; SM_CURRENT_HOST; SM_NETWORK_INTERFACE_NAME)",
        master: Some((&["SM_HOSTS"], HostVar::JsonList)),
        port: &[],
        nodes: Some((&["SM_HOSTS"], CountVar::JsonList)),
        node_rank: Some((&["SM_CURRENT_HOST"], RankVar::IndexIn("SM_HOSTS"))),
        interface: &["SM_NETWORK_INTERFACE_NAME"],
    },
    Row {
        name: "AWS Batch multi-node",
        source: "AWS Batch User Guide, multi-node parallel jobs: environment variables (AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS, set on the child nodes; AWS_BATCH_JOB_NUM_NODES; AWS_BATCH_JOB_NODE_INDEX)",
        master: Some((&["AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"], HostVar::Endpoint)),
        port: &[],
        nodes: Some((&["AWS_BATCH_JOB_NUM_NODES"], CountVar::Number)),
        node_rank: Some((&["AWS_BATCH_JOB_NODE_INDEX"], RankVar::Number)),
        interface: &[],
    },
    Row {
        name: "Vertex AI",
        source: "Google Cloud Vertex AI, distributed training: CLUSTER_SPEC (cluster.workerpool0 is the primary replica; task.type, task.index)",
        master: Some((&["CLUSTER_SPEC"], HostVar::VertexSpec)),
        port: &[],
        nodes: Some((&["CLUSTER_SPEC"], CountVar::VertexSpec)),
        node_rank: Some((&["CLUSTER_SPEC"], RankVar::VertexSpec)),
        interface: &[],
    },
    Row {
        name: "Ray",
        source: "ray-project/ray python/ray/_private/worker.py (ray.init reads RAY_ADDRESS; `auto` names no host)",
        master: Some((&["RAY_ADDRESS"], HostVar::Endpoint)),
        port: &[],
        nodes: None,
        node_rank: None,
        interface: &[],
    },
    Row {
        name: "Open MPI rank",
        source: "open-mpi/ompi docs (mpirun(1) \"Environment variables\": OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE); OMPI_MCA_orte_hnp_uri, mpirun's (the HNP's) contact URI set in every rank by Open MPI 4.x ORTE (orte/mca/ess, measured with Open MPI 4.1.4: `JOB.VPID;tcp://ADDR[,ADDR…]:PORT;tcp6://[ADDR]:PORT`)",
        master: Some((&["OMPI_MCA_orte_hnp_uri"], HostVar::OmpiUri)),
        port: &[],
        nodes: Some((
            &["OMPI_COMM_WORLD_SIZE"],
            CountVar::Over("OMPI_COMM_WORLD_LOCAL_SIZE"),
        )),
        node_rank: None,
        interface: &[],
    },
    Row {
        name: "Open MPI 5 (PRRTE) rank",
        source: "openpmix/openpmix src/mca/ptl/base (the client tries PMIX_SERVER_URI51, 41, 4, 3, 2, 21 in that order; the value is `NSPACE.RANK;tcp4://ADDR:PORT` or `tcp6://[ADDR]:PORT`, as stored with \"%s.%u;%s\" in ptl_base_connection_hdlr.c / pmix_client.c); PRRTE's daemons form the namespace `prterun-HOST-PID@0`, rank 0 being prterun itself, any other rank a local prted",
        master: Some((PMIX_URI_VARS, HostVar::PmixUri)),
        port: &[],
        nodes: Some((
            &["OMPI_COMM_WORLD_SIZE"],
            CountVar::Over("OMPI_COMM_WORLD_LOCAL_SIZE"),
        )),
        node_rank: None,
        interface: &[],
    },
    Row {
        name: "MPICH/Hydra rank",
        source: "pmodels/mpich src/pm/hydra/proxy/pmip_cb.c (PMI_SIZE, PMI_RANK, MPI_LOCALNRANKS set by the Hydra proxy; its PMI_HOSTNAME is the proxy's own host and PMI_PORT/PMI_FD the local proxy, so no variable names the launching host)",
        master: None,
        port: &[],
        nodes: Some((&["PMI_SIZE"], CountVar::Over("MPI_LOCALNRANKS"))),
        node_rank: None,
        interface: &[],
    },
];

/// The PMIx server URI variables in the order a PMIx client tries them (openpmix src/mca/ptl/base), then the
/// unversioned one.
const PMIX_URI_VARS: &[&str] = &[
    "PMIX_SERVER_URI51",
    "PMIX_SERVER_URI41",
    "PMIX_SERVER_URI4",
    "PMIX_SERVER_URI3",
    "PMIX_SERVER_URI2",
    "PMIX_SERVER_URI21",
    "PMIX_SERVER_URI",
];

/// Every variable a row of [`ROWS`] reads (recorded in the snapshot, see `probe::job::is_recorded`); a unit
/// test checks that it holds every name of the table. A plain list: `is_recorded` asks for every inherited
/// variable on the start path.
pub const VARS: &[&str] = &[
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_JOB_NUM_NODES",
    "SLURM_NNODES",
    "SLURM_NODEID",
    "LWS_LEADER_ADDRESS",
    "LWS_GROUP_SIZE",
    "LWS_WORKER_INDEX",
    "SM_HOSTS",
    "SM_CURRENT_HOST",
    "SM_NETWORK_INTERFACE_NAME",
    "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS",
    "AWS_BATCH_JOB_NUM_NODES",
    "AWS_BATCH_JOB_NODE_INDEX",
    "CLUSTER_SPEC",
    "RAY_ADDRESS",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_MCA_orte_hnp_uri",
    "PMIX_SERVER_URI51",
    "PMIX_SERVER_URI41",
    "PMIX_SERVER_URI4",
    "PMIX_SERVER_URI3",
    "PMIX_SERVER_URI2",
    "PMIX_SERVER_URI21",
    "PMIX_SERVER_URI",
    "PMI_SIZE",
    "MPI_LOCALNRANKS",
];

/// True for a variable a row reads that the launcher reading does not ([`VARS`]).
pub fn is_var(name: &str) -> bool {
    VARS.contains(&name)
}

/// Every name a row mentions (for the test that [`VARS`] is complete).
#[cfg(test)]
fn row_names(r: &Row) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = Vec::new();
    if let Some((n, _)) = r.master {
        v.extend_from_slice(n);
    }
    v.extend_from_slice(r.port);
    v.extend_from_slice(r.interface);
    if let Some((n, c)) = r.nodes {
        v.extend_from_slice(n);
        if let CountVar::Over(d) = c {
            v.push(d);
        }
    }
    if let Some((n, k)) = r.node_rank {
        v.extend_from_slice(n);
        if let RankVar::IndexIn(l) = k {
            v.push(l);
        }
    }
    v
}

/// The first of `names` that is set (and not empty), with its value. The launcher's own variables
/// (`crate::launch_facts::VARS`) are skipped: the launcher reading has read them already.
fn first<'a>(
    env: &'a BTreeMap<String, String>,
    names: &[&'static str],
) -> Option<(&'static str, &'a str)> {
    names
        .iter()
        .filter(|n| !crate::launch_facts::VARS.contains(n))
        .find_map(|n| {
            env.get(*n)
                .filter(|v| !v.is_empty())
                .map(|v| (*n, v.as_str()))
        })
}

/// The interface a platform names outright for the job (a row's `interface` variable, e.g. SageMaker's
/// `SM_NETWORK_INTERFACE_NAME`, which aws/sagemaker-training-toolkit `src/sagemaker_training/environment.py`
/// exposes as `network_interface_name` from the resource config): the variable, its value (trimmed) and the
/// row's name. The first row (in table order) with such a variable set decides.
pub fn named_interface(
    env: &BTreeMap<String, String>,
) -> Option<(&'static str, &str, &'static str)> {
    ROWS.iter().find_map(|row| {
        row.interface.iter().find_map(|n| {
            env.get(*n)
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
                .map(|v| (*n, v, row.name))
        })
    })
}

/// Fill what the launcher left unknown in `info` from the rows' variables (see the module docs). Problems
/// (a value that does not parse) are added to `info.shape.problems`.
pub fn read(env: &BTreeMap<String, String>, info: &mut LaunchInfo) {
    // The start path of a job no orchestrator started: nothing to look up.
    if !env.keys().any(|k| is_var(k)) {
        return;
    }
    for row in ROWS {
        let mut used = false;
        if info.master.is_none() {
            if let Some((names, shape)) = row.master {
                used |= read_master(env, row, names, shape, info);
            }
        }
        if info.shape.nnodes.is_none() {
            if let Some((names, shape)) = row.nodes {
                if let Some((name, v)) = first(env, names) {
                    match count(env, v, shape) {
                        Ok(Some(n)) => {
                            info.shape.nnodes = Some(n);
                            info.shape.source = Some(format!("{name} ({})", row.name));
                            used = true;
                        }
                        Ok(None) => {}
                        Err(e) => problem(
                            info,
                            format!(
                                "{name}={v:?} ({}): {e}; not used as the node count",
                                row.name
                            ),
                        ),
                    }
                }
            }
        }
        if info.shape.node_rank.is_none() {
            if let Some((names, shape)) = row.node_rank {
                if let Some((name, v)) = first(env, names) {
                    match rank(env, v, shape) {
                        Ok(Some(r)) => {
                            info.shape.node_rank = Some(r);
                            info.shape.node_rank_source = Some(format!("{name} ({})", row.name));
                            used = true;
                        }
                        Ok(None) => {}
                        Err(e) => problem(
                            info,
                            format!(
                                "{name}={v:?} ({}): {e}; not used as the node rank",
                                row.name
                            ),
                        ),
                    }
                }
            }
        }
        if used && info.shape.orchestrator.is_none() {
            info.shape.orchestrator = Some(row.name.to_string());
        }
    }
}

/// The master from one row: true when it named one.
fn read_master(
    env: &BTreeMap<String, String>,
    row: &Row,
    names: &[&'static str],
    shape: HostVar,
    info: &mut LaunchInfo,
) -> bool {
    let Some((name, v)) = first(env, names) else {
        return false;
    };
    let contact = match shape {
        HostVar::OmpiUri => ompi_uri(v).unwrap_or_default(),
        HostVar::PmixUri => pmix_uri(v).unwrap_or_default(),
        _ => Vec::new(),
    };
    let e = match master(v, shape) {
        Ok(Some(e)) => e,
        Ok(None) => return false,
        Err(e) => {
            problem(
                info,
                format!("{name}={v:?} ({}): {e}; not used as the peer", row.name),
            );
            return false;
        }
    };
    let source = format!("{name} ({})", row.name);
    let mut port = e.port.map(|p| (p, source.clone()));
    if port.is_none() {
        if let Some((pn, pv)) = first(env, row.port) {
            if let Ok(p) = crate::launch_facts::parse_port(pv.trim()) {
                port = Some((p, pn.to_string()));
            }
        }
    }
    if let Some((p, s)) = port {
        info.shape.master_port = Some(p);
        info.shape.master_port_source = Some(s);
    }
    info.master = Some(Sourced { value: e, source });
    info.shape.contact_addrs = contact;
    true
}

fn problem(info: &mut LaunchInfo, text: String) {
    if !info.shape.problems.contains(&text) {
        info.shape.problems.push(text);
    }
}

/// The master a value names; `Ok(None)` when it names none on purpose (Ray's `auto`, an empty list).
fn master(v: &str, shape: HostVar) -> Result<Option<Endpoint>, String> {
    let host = match shape {
        HostVar::Endpoint if v.trim() == "auto" || v.trim() == "local" => return Ok(None),
        HostVar::Endpoint => return parse_endpoint(v).map(Some),
        HostVar::SlurmHostlist => hostlist(v)?.into_iter().next(),
        HostVar::JsonList => json_list(v)?.into_iter().next(),
        HostVar::VertexSpec => vertex(v)?.pools.first().and_then(|p| p.first().cloned()),
        HostVar::OmpiUri => ompi_uri(v)?.into_iter().next().map(|a| a.to_string()),
        HostVar::PmixUri => pmix_uri(v)?.into_iter().next().map(|a| a.to_string()),
    };
    match host {
        Some(h) => parse_endpoint(&h).map(Some),
        None => Ok(None),
    }
}

fn count(env: &BTreeMap<String, String>, v: &str, shape: CountVar) -> Result<Option<u32>, String> {
    let n = match shape {
        CountVar::Number => number(v, 1)?,
        CountVar::SlurmHostlist => hostlist(v)?.len(),
        CountVar::JsonList => json_list(v)?.len(),
        CountVar::VertexSpec => vertex(v)?.pools.iter().take(2).map(Vec::len).sum(),
        CountVar::Over(local) => {
            let world = number(v, 1)?;
            let Some(l) = env.get(local).and_then(|l| l.trim().parse::<usize>().ok()) else {
                return Ok(None);
            };
            if l == 0 || world % l != 0 {
                return Ok(None);
            }
            world / l
        }
    };
    Ok(u32::try_from(n).ok().filter(|n| *n >= 1))
}

fn rank(env: &BTreeMap<String, String>, v: &str, shape: RankVar) -> Result<Option<u32>, String> {
    let r = match shape {
        RankVar::Number => number(v, 0)?,
        RankVar::IndexIn(list) => {
            let Some(l) = env.get(list) else {
                return Ok(None);
            };
            match json_list(l)?.iter().position(|h| h == v.trim()) {
                Some(i) => i,
                None => return Err(format!("not one of the hosts of {list}")),
            }
        }
        RankVar::VertexSpec => {
            let spec = vertex(v)?;
            match (spec.task_type.as_str(), spec.task_index) {
                ("workerpool0", i) => i,
                ("workerpool1", i) => spec.pools.first().map_or(0, Vec::len) + i,
                _ => return Ok(None),
            }
        }
    };
    Ok(u32::try_from(r).ok())
}

/// The addresses of an Open MPI 4.x ORTE contact URI (`OMPI_MCA_orte_hnp_uri`), in the URI's order,
/// loopback and link-local ones left out: `JOBID.VPID;tcp://A,B:PORT;tcp6://[V6],[V6]:PORT` (open-mpi/ompi
/// v4.1.8 orte/mca/oob/tcp/oob_tcp_component.c `component_get_addr`: one `tcp://` entry listing every IPv4
/// address mpirun listens on, comma-separated, then one `tcp6://`; the port is ORTE's, not the job's). A rank
/// keeps them in that order (`component_set_addr` appends each to the peer's list) and connects to the first
/// that accepts (oob_tcp_connection.c `mca_oob_tcp_peer_try_connect`): which one this host reaches best is
/// judged where its networks are known (`crate::probe::job::order_contact`), not here. An error when the
/// value is not such a URI.
pub fn ompi_uri(v: &str) -> Result<Vec<std::net::IpAddr>, String> {
    use std::net::IpAddr;
    let bad = || "not Open MPI's contact URI (JOB.VPID;tcp://ADDR:PORT)".to_string();
    let mut parts = v.trim().split(';');
    let id = parts.next().unwrap_or("");
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(bad());
    }
    let mut out: Vec<IpAddr> = Vec::new();
    let mut seen = false;
    for p in parts {
        let Some((scheme, rest)) = p.split_once("://") else {
            continue;
        };
        if scheme != "tcp" && scheme != "tcp6" {
            continue;
        }
        seen = true;
        // ORTE lists only addresses it listens on: one that does not parse is skipped.
        let _all_parsed = uri_addresses(rest, &mut out);
    }
    if !seen {
        return Err(bad());
    }
    Ok(out)
}

/// The addresses of a PMIx server URI (`PMIX_SERVER_URI*`) when that server is PRRTE's launcher itself, in
/// the URI's order (ordered by this host's networks as [`ompi_uri`]'s are, by
/// `crate::probe::job::order_contact`). The value is `NSPACE.RANK;tcp4://ADDR:PORT` (or
/// `tcp6://[ADDR]:PORT`; a comma-separated address list is read too), as openpmix stores it (`"%s.%u;%s"`,
/// src/mca/ptl/base/ptl_base_connection_hdlr.c). Empty (no peer) when the server is not rank 0 of a PRRTE
/// daemons' namespace (`…@0`: a local prted, Slurm's `pmix-server.PID`, a singleton's own server) or has only
/// loopback and link-local addresses (PMIx serves local clients on loopback). The port is PMIx's, not the
/// job's. An error when the value is not such a URI.
pub fn pmix_uri(v: &str) -> Result<Vec<std::net::IpAddr>, String> {
    use std::net::IpAddr;
    let bad = || "not a PMIx server URI (NSPACE.RANK;tcp4://ADDR:PORT)".to_string();
    let (id, uri) = v.trim().split_once(';').ok_or_else(bad)?;
    let (nspace, rank) = id.rsplit_once('.').ok_or_else(bad)?;
    let rank: u32 = rank.parse().map_err(|_| bad())?;
    let (scheme, rest) = uri.split_once("://").ok_or_else(bad)?;
    if nspace.is_empty() || !matches!(scheme, "tcp4" | "tcp6" | "tcp") {
        return Err(bad());
    }
    let mut out: Vec<IpAddr> = Vec::new();
    if !uri_addresses(rest, &mut out) {
        return Err(bad());
    }
    if rank != 0 || !nspace.ends_with("@0") {
        return Ok(Vec::new());
    }
    Ok(out)
}

/// The addresses of one `ADDR[,ADDR…]:PORT` entry of an Open MPI or PMIx contact URI (everything up to the
/// last `:` lists them, IPv6 ones bracketed), appended to `out` in order, loopback, link-local and repeated
/// ones left out. False when one of them is not an IP address (those are skipped).
fn uri_addresses(entry: &str, out: &mut Vec<std::net::IpAddr>) -> bool {
    let list = entry.rsplit_once(':').map_or(entry, |(l, _)| l);
    let mut all = true;
    for a in list.split(',') {
        let a = a.trim().trim_start_matches('[').trim_end_matches(']');
        match a.parse::<std::net::IpAddr>() {
            Ok(ip) => {
                if !ip.is_loopback()
                    && !crate::snapshot::is_link_local_ip(&ip)
                    && !out.contains(&ip)
                {
                    out.push(ip);
                }
            }
            Err(_) => all = false,
        }
    }
    all
}

/// A whole number of at least `min`.
fn number(v: &str, min: usize) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(format!("not a whole number from {min}")),
    }
}

/// A JSON list of strings (`["algo-1","algo-2"]`).
fn json_list(v: &str) -> Result<Vec<String>, String> {
    serde_json::from_str::<Vec<String>>(v).map_err(|_| "not a JSON list of host names".to_string())
}

/// What ncclenv reads of Vertex AI's `CLUSTER_SPEC`.
struct Vertex {
    /// `cluster.workerpool0`, `cluster.workerpool1`, … (`host:port` entries), in pool order.
    pools: Vec<Vec<String>>,
    task_type: String,
    task_index: usize,
}

fn vertex(v: &str) -> Result<Vertex, String> {
    let bad = || "not Vertex AI's CLUSTER_SPEC JSON (cluster.workerpool0, task)".to_string();
    let j: serde_json::Value = serde_json::from_str(v).map_err(|_| bad())?;
    let cluster = j
        .get("cluster")
        .and_then(|c| c.as_object())
        .ok_or_else(bad)?;
    let mut pools = Vec::new();
    for k in 0..4 {
        let hosts = cluster
            .get(&format!("workerpool{k}"))
            .and_then(|p| p.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|h| h.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        pools.push(hosts);
    }
    let task = j.get("task");
    Ok(Vertex {
        pools,
        task_type: task
            .and_then(|t| t.get("type"))
            .and_then(|t| t.as_str())
            .unwrap_or("")
            .to_string(),
        task_index: task
            .and_then(|t| t.get("index"))
            .and_then(|i| i.as_u64())
            .and_then(|i| usize::try_from(i).ok())
            .unwrap_or(0),
    })
}

/// Slurm's limit on the hosts of one range (`MAX_RANGE`, src/common/hostlist.c), also applied to the whole
/// list here.
const MAX_HOSTS: usize = 64 * 1024;

/// Expand a Slurm host list as `hostlist_create` does (SchedMD/slurm src/common/hostlist.c): entries are
/// separated by commas (and blanks) outside brackets; an entry is `prefix[RANGES]suffix`, where RANGES is a
/// comma-separated list of `N` or `LO-HI` (decimal, `LO <= HI`, no sign, at most 65536 hosts; the width of
/// `LO` as written pads every number with zeros: `[001-004]` → `001` … `004`, `[1-10]` → `1` … `10`), and
/// the prefix may hold one more bracket group (`rack[1-2]-n[01-02]`, the prefix's range outermost). An entry
/// without brackets is one host. `Err` names what does not parse.
pub fn hostlist(v: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for entry in split_top(v)? {
        for h in expand_entry(&entry)? {
            if out.len() >= MAX_HOSTS {
                return Err(format!("more than {MAX_HOSTS} hosts"));
            }
            out.push(h);
        }
    }
    if out.is_empty() {
        return Err("no host".into());
    }
    Ok(out)
}

/// The entries of a host list: split at commas and blanks outside brackets.
fn split_top(v: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let (mut cur, mut depth) = (String::new(), 0usize);
    for c in v.chars() {
        match c {
            '[' => depth += 1,
            ']' if depth == 0 => return Err("a ']' without '['".into()),
            ']' => depth -= 1,
            ',' | ' ' | '\t' | '\n' if depth == 0 => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if depth > 0 {
        return Err("a '[' is not closed by ']'".into());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    Ok(out)
}

/// One entry: its last bracket group expanded, the prefix (which may hold one more group) expanded first.
fn expand_entry(entry: &str) -> Result<Vec<String>, String> {
    let Some(open) = entry.rfind('[') else {
        return Ok(vec![entry.to_string()]);
    };
    let close = entry[open..]
        .find(']')
        .map(|i| open + i)
        .ok_or_else(|| format!("{entry:?}: a '[' is not closed by ']'"))?;
    let (prefix, ranges, suffix) = (&entry[..open], &entry[open + 1..close], &entry[close + 1..]);
    if suffix.contains('[') || prefix.matches('[').count() > 1 {
        return Err(format!("{entry:?}: more bracket groups than Slurm expands"));
    }
    let nums = ranges_of(ranges).map_err(|e| format!("{entry:?}: {e}"))?;
    let prefixes = if prefix.contains('[') {
        expand_entry(prefix)?
    } else {
        vec![prefix.to_string()]
    };
    if prefixes.len().saturating_mul(nums.len()) > MAX_HOSTS {
        return Err(format!("more than {MAX_HOSTS} hosts"));
    }
    let mut out = Vec::new();
    for p in &prefixes {
        for n in &nums {
            out.push(format!("{p}{n}{suffix}"));
        }
    }
    Ok(out)
}

/// `1-3,7,010-012` → the numbers as Slurm writes them (zero-padded to the width of each range's `LO`).
fn ranges_of(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo, hi),
            None => (part, part),
        };
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        if !digits(lo) || !digits(hi) {
            return Err(format!("invalid range {part:?}"));
        }
        let (a, b) = match (lo.parse::<u64>(), hi.parse::<u64>()) {
            (Ok(a), Ok(b)) if a <= b => (a, b),
            _ => return Err(format!("invalid range {part:?}")),
        };
        if b - a >= MAX_HOSTS as u64 || out.len() + (b - a) as usize >= MAX_HOSTS {
            return Err(format!("too many hosts in range {part:?}"));
        }
        let width = lo.len();
        for n in a..=b {
            out.push(format!("{n:0width$}"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
    fn h(v: &str) -> Vec<String> {
        hostlist(v).unwrap_or_else(|e| panic!("{v}: {e}"))
    }

    #[test]
    fn slurm_hostlists_as_slurm_expands_them() {
        assert_eq!(h("gpu[01-02]"), ["gpu01", "gpu02"]);
        assert_eq!(h("gpu[001-004]"), ["gpu001", "gpu002", "gpu003", "gpu004"]);
        assert_eq!(h("a[1-3,7],b5"), ["a1", "a2", "a3", "a7", "b5"]);
        assert_eq!(h("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(h("n[08-10]"), ["n08", "n09", "n10"]);
        assert_eq!(
            h("rack[1-2]-n[01-02]"),
            ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]
        );
        assert_eq!(h("gpu-a[01-02]-ib"), ["gpu-a01-ib", "gpu-a02-ib"]);
        assert_eq!(h("login1"), ["login1"]);
        assert_eq!(h("x[1,3],y[2-3],z"), ["x1", "x3", "y2", "y3", "z"]);
        for bad in [
            "gpu[01-02",
            "gpu01]",
            "a[3-1]",
            "a[1--2]",
            "a[x]",
            "a[]",
            "",
            "a[1-2]b[1-2]c[1-2]",
            "a[0-99999]",
        ] {
            assert!(hostlist(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn every_row_is_sourced_and_its_variables_recorded() {
        for r in ROWS {
            assert!(!r.source.is_empty() && !r.name.is_empty());
            for n in row_names(r) {
                assert!(
                    is_var(n) || crate::launch_facts::VARS.contains(&n),
                    "{n} of {} is in neither VARS",
                    r.name
                );
            }
        }
        assert!(is_var("SLURM_NODEID") && is_var("OMPI_COMM_WORLD_LOCAL_SIZE") && !is_var("HOME"));
    }

    fn read_env(pairs: &[(&str, &str)]) -> LaunchInfo {
        let mut info = LaunchInfo::default();
        read(&env(pairs), &mut info);
        info
    }

    #[test]
    fn rows_fill_master_count_and_rank() {
        let i = read_env(&[
            ("SLURM_JOB_NODELIST", "gpu[07-08]"),
            ("SLURM_NNODES", "2"),
            ("SLURM_NODEID", "1"),
        ]);
        let m = i
            .master
            .as_ref()
            .map(|m| (m.value.host.as_str(), m.source.as_str()));
        assert_eq!(m, Some(("gpu07", "SLURM_JOB_NODELIST (Slurm)")));
        assert_eq!((i.shape.nnodes, i.shape.node_rank), (Some(2), Some(1)));
        assert_eq!(i.shape.orchestrator.as_deref(), Some("Slurm"));
        let i = read_env(&[("SLURM_NODELIST", "gpu[07-"), ("SLURM_NNODES", "2")]);
        assert!(i.master.is_none());
        assert!(
            i.shape.problems[0].contains("SLURM_NODELIST"),
            "{:?}",
            i.shape.problems
        );
        let i = read_env(&[
            ("LWS_LEADER_ADDRESS", "lead.svc"),
            ("LWS_GROUP_SIZE", "4"),
            ("LWS_WORKER_INDEX", "2"),
        ]);
        assert_eq!(i.master.map(|m| m.value.host), Some("lead.svc".into()));
        assert_eq!((i.shape.nnodes, i.shape.node_rank), (Some(4), Some(2)));
        let i = read_env(&[
            ("SM_HOSTS", r#"["algo-1","algo-2"]"#),
            ("SM_CURRENT_HOST", "algo-2"),
        ]);
        assert_eq!(i.master.map(|m| m.value.host), Some("algo-1".into()));
        assert_eq!((i.shape.nnodes, i.shape.node_rank), (Some(2), Some(1)));
        let i = read_env(&[
            ("AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS", "10.0.0.5"),
            ("AWS_BATCH_JOB_NUM_NODES", "3"),
            ("AWS_BATCH_JOB_NODE_INDEX", "2"),
        ]);
        assert_eq!(i.master.map(|m| m.value.host), Some("10.0.0.5".into()));
        assert_eq!((i.shape.nnodes, i.shape.node_rank), (Some(3), Some(2)));
        let spec = r#"{"cluster":{"workerpool0":["cmle-training-workerpool0-ab-0:2222"],"workerpool1":["w-0:2222","w-1:2222"]},"task":{"type":"workerpool1","index":1}}"#;
        let i = read_env(&[("CLUSTER_SPEC", spec)]);
        let m = i
            .master
            .as_ref()
            .map(|m| (m.value.host.clone(), m.value.port));
        assert_eq!(
            m,
            Some(("cmle-training-workerpool0-ab-0".into(), Some(2222)))
        );
        assert_eq!(
            (i.shape.nnodes, i.shape.node_rank, i.shape.master_port),
            (Some(3), Some(2), Some(2222))
        );
        let i = read_env(&[("RAY_ADDRESS", "auto")]);
        assert!(i.master.is_none() && i.shape.problems.is_empty());
        let i = read_env(&[("RAY_ADDRESS", "head:6379")]);
        assert_eq!(i.shape.master_port, Some(6379));
        let i = read_env(&[
            ("OMPI_COMM_WORLD_SIZE", "8"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ]);
        assert_eq!(
            (i.shape.nnodes, i.shape.orchestrator.as_deref()),
            (Some(2), Some("Open MPI rank"))
        );
        let i = read_env(&[("PMI_SIZE", "6"), ("MPI_LOCALNRANKS", "4")]);
        assert_eq!(i.shape.nnodes, None);
        // Hydra names no launching host: PMI_HOSTNAME is this node's own (pmip_cb.c).
        let i = read_env(&[
            ("PMI_SIZE", "8"),
            ("MPI_LOCALNRANKS", "4"),
            ("PMI_RANK", "5"),
            ("PMI_HOSTNAME", "node2"),
        ]);
        assert_eq!((i.shape.nnodes, i.master.is_none()), (Some(2), true));
    }

    #[test]
    fn open_mpi_rank_names_mpirun_as_the_peer() {
        // As Open MPI 4.1.4 sets it in every rank (measured): mpirun's addresses, the decoy bridge after eth0.
        let i = read_env(&[
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "1"),
            ("OMPI_COMM_WORLD_RANK", "1"),
            (
                "OMPI_MCA_orte_hnp_uri",
                "1077542912.0;tcp://10.81.0.1,172.17.0.1:59775;tcp6://[fd00::2]:43713",
            ),
        ]);
        let m = i
            .master
            .as_ref()
            .map(|m| (m.value.host.as_str(), m.value.port, m.source.as_str()));
        assert_eq!(
            m,
            Some(("10.81.0.1", None, "OMPI_MCA_orte_hnp_uri (Open MPI rank)"))
        );
        assert_eq!(i.shape.nnodes, Some(2));
        assert_eq!(i.shape.master_port, None, "ORTE's port is not the job's");
        // Every address is kept, in the URI's order: which one this host reaches best is the probe's to say
        // (probe::job::order_contact).
        let all: Vec<String> = i
            .shape
            .contact_addrs
            .iter()
            .map(|a| a.to_string())
            .collect();
        assert_eq!(all, ["10.81.0.1", "172.17.0.1", "fd00::2"]);
        let ips =
            |v: &str| ompi_uri(v).map(|a| a.iter().map(|a| a.to_string()).collect::<Vec<_>>());
        assert_eq!(
            ips("1.0;tcp://127.0.0.1,169.254.1.1:5;tcp6://[::1],[fd00::9]:6"),
            Ok(vec!["fd00::9".to_string()])
        );
        assert_eq!(
            ips("1.0;tcp6://[fd00::9]:6;tcp://10.0.0.2:5"),
            Ok(vec!["fd00::9".into(), "10.0.0.2".into()])
        );
        assert!(ompi_uri("tcp://10.0.0.1:5").is_err());
        assert!(ompi_uri("1.0;usock://x").is_err());
        let i = read_env(&[
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_MCA_orte_hnp_uri", "garbage"),
        ]);
        assert!(i.master.is_none());
        assert!(
            i.shape
                .problems
                .iter()
                .any(|p| p.contains("OMPI_MCA_orte_hnp_uri")),
            "{:?}",
            i.shape.problems
        );
    }

    #[test]
    fn pmix_uri_names_prterun_only() {
        let ips =
            |v: &str| pmix_uri(v).map(|a| a.iter().map(|a| a.to_string()).collect::<Vec<_>>());
        // prterun itself (rank 0 of the daemons' namespace): its addresses in the URI's order, as
        // ompi_uri's (the probe orders both by this host's networks).
        assert_eq!(
            ips("prterun-node1.example-4242@0.0;tcp4://172.17.0.1,10.0.0.1:36017"),
            Ok(vec!["172.17.0.1".to_string(), "10.0.0.1".to_string()])
        );
        assert_eq!(
            ips("prterun-n1-4242@0.0;tcp6://[fd00::1]:36017"),
            Ok(vec!["fd00::1".to_string()])
        );
        // A local prted (rank 1), Slurm's server, loopback only: no peer, no error.
        assert_eq!(ips("prterun-n1-4242@0.1;tcp4://10.0.0.2:36017"), Ok(vec![]));
        assert_eq!(ips("pmix-server.1050522;tcp4://10.0.0.2:60043"), Ok(vec![]));
        assert_eq!(
            ips("prterun-n1-4242@0.0;tcp4://127.0.0.1:36017"),
            Ok(vec![])
        );
        for bad in [
            "",
            "garbage",
            "x.0;usock://a",
            "x@0.z;tcp4://1.2.3.4:5",
            "x@0.0;tcp4://host:5",
            ";;",
        ] {
            assert!(pmix_uri(bad).is_err(), "{bad:?}");
        }
        // Through the table: several versioned variables (the first PMIx tries wins), the node count from
        // the Open MPI sizes.
        let i = read_env(&[
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("PMIX_SERVER_URI41", "prterun-n1-7@0.0;tcp4://10.0.0.1:5000"),
            ("PMIX_SERVER_URI4", "prterun-n1-7@0.0;tcp4://10.9.9.9:5000"),
            ("PMIX_SERVER_URI3", "prterun-n1-7@0.0;tcp4://10.9.9.9:5000"),
        ]);
        let m = i
            .master
            .as_ref()
            .map(|m| (m.value.host.as_str(), m.value.port, m.source.as_str()));
        assert_eq!(
            m,
            Some((
                "10.0.0.1",
                None,
                "PMIX_SERVER_URI41 (Open MPI 5 (PRRTE) rank)"
            ))
        );
        assert_eq!(i.shape.nnodes, Some(2));
        assert_eq!(
            i.shape.contact_addrs,
            ["10.0.0.1".parse::<std::net::IpAddr>().ok()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
        );
        let i = read_env(&[
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("PMIX_SERVER_URI41", "prterun-n1-7@0.3;tcp4://10.0.0.3:5000"),
        ]);
        assert!(
            i.master.is_none() && i.shape.problems.is_empty() && i.shape.contact_addrs.is_empty(),
            "{:?}",
            i.shape.problems
        );
        let i = read_env(&[("PMIX_SERVER_URI41", "prterun@0.0;tcp4://x")]);
        assert!(i.master.is_none());
        assert!(
            i.shape
                .problems
                .iter()
                .any(|p| p.contains("PMIX_SERVER_URI41")),
            "{:?}",
            i.shape.problems
        );
    }

    #[test]
    fn sagemaker_names_the_interface() {
        assert_eq!(
            named_interface(&env(&[("SM_NETWORK_INTERFACE_NAME", " eth0 ")])),
            Some(("SM_NETWORK_INTERFACE_NAME", "eth0", "SageMaker"))
        );
        assert_eq!(
            named_interface(&env(&[("SM_NETWORK_INTERFACE_NAME", "")])),
            None
        );
        assert_eq!(named_interface(&env(&[("SM_HOSTS", "[]")])), None);
    }

    #[test]
    fn what_the_launcher_said_wins() {
        let mut info = LaunchInfo {
            master: Some(Sourced {
                value: parse_endpoint("10.9.9.9").unwrap_or_else(|e| panic!("{e}")),
                source: "MASTER_ADDR".into(),
            }),
            ..LaunchInfo::default()
        };
        info.shape.nnodes = Some(4);
        read(
            &env(&[
                ("SLURM_NODELIST", "gpu[1-2]"),
                ("SLURM_NNODES", "2"),
                ("SLURM_NODEID", "1"),
            ]),
            &mut info,
        );
        assert_eq!(info.master.map(|m| m.value.host), Some("10.9.9.9".into()));
        assert_eq!(
            (info.shape.nnodes, info.shape.node_rank),
            (Some(4), Some(1))
        );
    }
}
