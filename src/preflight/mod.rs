//! The fleet preflight (`NCCLENV_PREFLIGHT=1`): before NCCL does, the nodes of a multi-node job meet on the
//! launcher's master port, prove that each node's ephemeral ports on its bootstrap address can be reached,
//! and agree: certain failures refuse on every node with the same reason, repairable differences are
//! repaired on every node, risky ones warned. A node that never arrives is no proof of failure: the others
//! warn and run (strict mode refuses). See `docs/preflight.md`.
//!
//! - [`protocol`]: the typed, versioned, bounded messages;
//! - [`agree`]: the pure agreement over the nodes' reports (tested with plain values);
//! - [`master`], [`worker`]: the two sides, over [`net`]'s sockets (std + `poll`/`epoll`, no runtime);
//!
//! The entrypoint runs [`run`] between the decision and the check/exec: its repairs and findings go into the
//! [`Plan`], so they are logged with the rest and reach the command. [`outlook`] is the pure part
//! (`ncclenv doctor` shows it): whether a preflight would run, as master or worker, on which port.

pub mod agree;
pub mod endpoint;
pub mod master;
pub mod measure;
pub mod mtu;
pub mod net;
pub mod networks;
pub mod protocol;
pub mod worker;

use crate::config::Config;
use crate::environ::Environ;
use crate::findings::Finding;
use crate::plan::{Plan, Verdict};
use crate::snapshot::{Family, Snapshot};
use protocol::{FleetVerdict, NodeReport};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

/// Bound on one probe of a ring neighbour's ephemeral port (connect and answer): 5 s, enough for two SYN
/// retransmissions (1 s, then 2 s), so a single lost packet is not a failure; a firewall that drops the SYNs
/// is reported after it.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The part a node plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Listens on the master port, gathers the nodes, agrees, sends the verdict.
    Master,
    /// Connects to the master.
    Worker,
}

/// How this node takes part in the preflight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Setup {
    /// Master or worker.
    pub role: Role,
    /// Why this role: `this node owns the master address 10.0.0.1`, `node rank 0 (PET_NODE_RANK)`, …
    pub role_reason: String,
    /// The master's host as the job names it (shown; the job key is made from the resolved endpoint).
    pub master_host: String,
    /// Where workers connect: the master's address and the preflight port.
    pub master: SocketAddr,
    /// Where the master listens: the master address when this node owns it, else the wildcard address of
    /// its family (node rank 0 behind a service address).
    pub listen: SocketAddr,
    /// Where the port came from: `NCCLENV_PREFLIGHT_PORT`, `--master`, `MASTER_PORT`, …
    pub port_source: String,
    /// The job's node count.
    pub nnodes: u32,
    /// This node's rank among the nodes, when the launcher says.
    pub node_rank: Option<u32>,
    /// The job key ([`protocol::job_key`]).
    pub key: String,
    /// The interface NCCL will bootstrap on.
    pub ifname: String,
    /// Its address: the probe port listens there.
    pub bootstrap: IpAddr,
    /// `NCCLENV_PREFLIGHT_TIMEOUT`, seconds.
    pub timeout_s: u64,
}

/// Whether a preflight would run here, and how: what `ncclenv doctor` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outlook {
    /// `NCCLENV_PREFLIGHT=1` / `--preflight`.
    pub enabled: bool,
    /// `NCCLENV_PREFLIGHT_TIMEOUT`, seconds.
    pub timeout_s: u64,
    /// How it would run, or why it would be skipped.
    pub setup: Result<Setup, String>,
}

/// Decide, without I/O, whether and how this node takes part: the job must be known to span several nodes,
/// name a master that resolved and a port (`NCCLENV_PREFLIGHT_PORT`, else the launcher's master port,
/// `JobShape::master_port`, else a port written with the master, `NCCLENV_PEER=host:port`), and
/// ncclenv must have decided the bootstrap address (not hands off). The master is the node that owns the
/// master address, else the node of rank 0 (listening on the wildcard address: the master address is then a
/// service address that forwards to it, or a name that resolves to loopback on the master itself; the rank is
/// `JobShape::node_rank`); every other node is a worker.
pub fn outlook(snap: &Snapshot, cfg: &Config, plan: &Plan) -> Outlook {
    Outlook {
        enabled: cfg.preflight,
        timeout_s: cfg.preflight_timeout_s,
        setup: setup(snap, cfg, plan),
    }
}

fn setup(snap: &Snapshot, cfg: &Config, plan: &Plan) -> Result<Setup, String> {
    if !snap.job.is_multi_node() {
        return Err(match snap.job.nnodes {
            Some(_) => "the job runs on one node".into(),
            None => {
                "the job is not known to span several nodes (no --nnodes, --ips, PADDLE_NNODES or \
                     NCCLENV_NNODES)"
                    .into()
            }
        });
    }
    let nnodes = snap.job.nnodes.unwrap_or(2);
    let peer = snap.peer.as_ref().ok_or_else(|| {
        "no master named (the launcher's --master, --master-addr, --rdzv-endpoint, MASTER_ADDR, or \
         NCCLENV_PEER)"
            .to_string()
    })?;
    let unresolved = || format!("the master {} did not resolve", peer.host);
    if peer.addrs.is_empty() {
        return Err(unresolved());
    }
    let job = &snap.job;
    let (port, port_source) = master_port(cfg, snap, peer)?;
    if plan.hands_off {
        return Err(
            "ncclenv leaves this environment untouched, so the address NCCL will bootstrap on is not known"
                .into(),
        );
    }
    let (ifname, bootstrap) = match &plan.choice {
        Some(crate::plan::Choice {
            ifname,
            addr: Some(a),
            ..
        }) => (ifname.clone(), *a),
        _ => return Err("no interface with an address was decided for NCCL".into()),
    };
    let master_ip = peer
        .addrs
        .iter()
        .find(|a| Family::of(a) == Family::of(&bootstrap))
        .or_else(|| peer.addrs.first())
        .copied()
        .ok_or_else(unresolved)?;
    let node_rank_zero = job.node_rank == Some(0);
    if master_ip.is_loopback() && !node_rank_zero {
        // On the master itself a host name often resolves to 127.0.1.1 (Debian's /etc/hosts); only the node
        // rank can then say who listens.
        return Err(format!(
            "the master address {master_ip} is a loopback address here, and no node rank 0 says this node is the \
             master"
        ));
    }
    let (role, role_reason, listen) = role(snap, peer, master_ip, port);
    // The key names the master's endpoint as the workers reach it, resolved (`localhost`, `127.0.0.1` and the
    // address itself meet). On node rank 0 a master name that resolves to loopback here stands for the
    // address the others reach, taken to be this node's bootstrap address.
    let key_ip = if master_ip.is_loopback() {
        bootstrap
    } else {
        master_ip
    };
    Ok(Setup {
        role,
        role_reason,
        master_host: peer.host.clone(),
        master: SocketAddr::new(master_ip, port),
        listen,
        port_source,
        nnodes,
        node_rank: job.node_rank,
        key: protocol::job_key(SocketAddr::new(key_ip, port), nnodes),
        ifname,
        bootstrap,
        timeout_s: cfg.preflight_timeout_s,
    })
}

/// The port the nodes meet on and where it came from: `NCCLENV_PREFLIGHT_PORT`, else the launcher's master
/// port, else a port written with the master (`NCCLENV_PEER=host:port`); `Err` with why none is known.
fn master_port(
    cfg: &Config,
    snap: &Snapshot,
    peer: &crate::snapshot::Peer,
) -> Result<(u16, String), String> {
    let job = &snap.job;
    Ok(match (cfg.preflight_port, job.master_port, peer.port) {
        (Some(p), _, _) => (p, "NCCLENV_PREFLIGHT_PORT".to_string()),
        (None, Some(p), _) => (
            p,
            job.master_port_source
                .clone()
                .unwrap_or_else(|| "the launcher".into()),
        ),
        // A port written with the master (NCCLENV_PEER=host:port).
        (None, None, Some(p)) => (p, peer.source.clone()),
        (None, None, None) => {
            return Err(
                "no master port known (Paddle --master host:port, torchrun --master-port, \
                        --rdzv-endpoint, PET_MASTER_PORT, MASTER_PORT, NCCLENV_PEER=host:port); set \
                        NCCLENV_PREFLIGHT_PORT"
                    .into(),
            )
        }
    })
}

/// This node's part, why, and where the master listens: the owner of the master address is the master (on
/// that address), else node rank 0 (on the wildcard address of `master_ip`'s family); every other node
/// is a worker (connecting to `master_ip`).
fn role(
    snap: &Snapshot,
    peer: &crate::snapshot::Peer,
    master_ip: IpAddr,
    port: u16,
) -> (Role, String, SocketAddr) {
    let job = &snap.job;
    let owned = snap
        .net
        .as_ref()
        .ok()
        .and_then(|n| n.addrs.iter().find(|a| peer.addrs.contains(&a.addr)))
        .map(|a| a.addr)
        .filter(|a| !a.is_loopback());
    let rank_source = job.node_rank_source.as_deref().unwrap_or("the launcher");
    match (owned, job.node_rank) {
        (Some(a), _) => (
            Role::Master,
            format!("this node owns the master address {a}"),
            SocketAddr::new(a, port),
        ),
        (None, Some(0)) => {
            let any: IpAddr = match master_ip {
                IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
                IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
            };
            (
                Role::Master,
                format!(
                    "node rank 0 ({rank_source}); no address of this node is the master address {master_ip}"
                ),
                SocketAddr::new(any, port),
            )
        }
        (None, Some(r)) => (
            Role::Worker,
            format!("node rank {r} ({rank_source})"),
            SocketAddr::new(master_ip, port),
        ),
        (None, None) => (
            Role::Worker,
            format!("this node does not own the master address {master_ip}"),
            SocketAddr::new(master_ip, port),
        ),
    }
}

/// Run the preflight on this node (the entrypoint, `NCCLENV_PREFLIGHT=1`) and put its outcome into `plan`:
/// the fleet's repairs and findings, or its refusal; or, when it is skipped, an info finding
/// (`preflight-skipped`); or, when no verdict came (no master, the master port busy), a warning that
/// strict mode turns into a refusal. `environ` is the environment the command inherits.
pub fn run(cfg: &Config, snap: &Snapshot, plan: &mut Plan, environ: &Environ) {
    let setup = match setup(snap, cfg, plan) {
        Ok(setup) => setup,
        Err(why) => {
            plan.finding(
                Finding::PreflightSkipped,
                format!("preflight skipped: {why}"),
                "nothing to do for a single-node job; otherwise name the master, its port and the node count \
                 (the launcher's arguments, or NCCLENV_PEER, NCCLENV_PREFLIGHT_PORT, NCCLENV_NNODES)",
            );
            return;
        }
    };
    let _wait = crate::signals::waiting(crate::signals::Wait::Preflight);
    let deadline = Instant::now() + Duration::from_secs(cfg.preflight_timeout_s);
    let probe_timeout = PROBE_TIMEOUT.min(Duration::from_secs(cfg.preflight_timeout_s));
    let env = with_conf_files(nccl_env(&crate::exec::final_env(environ, plan)), snap);
    let nonce = nonce();
    let responder = net::Responder::start(setup.bootstrap, &setup.key, nonce);
    let ifaces = networks::local(snap, cfg);
    let has = |v6: bool| {
        ifaces
            .iter()
            .flat_map(|i| &i.addrs)
            .any(|a| a.addr.is_ipv6() == v6)
    };
    let sink = measure::Sink::start(has(false), has(true), nonce);
    let mut me = local_report(snap, cfg, plan, &setup, &env, &responder, nonce);
    me.ifaces = ifaces.clone();
    me.sink_ports = (sink.port4, sink.port6);
    let vendor = !crate::decide::vendor_profile(snap).is_empty();
    let end: Result<FleetVerdict, (Finding, String)> = match setup.role {
        Role::Master => match master::run(&setup, me.clone(), deadline, probe_timeout) {
            Ok(master::MasterOutcome::Verdict(m)) => {
                log(format!(
                    "preflight: verdict for {} of {} nodes, {}: {}",
                    m.verdict.present,
                    m.verdict.expected,
                    m.after_words(),
                    verdict_word(&m.verdict)
                ));
                Ok(m.verdict)
            }
            Ok(master::MasterOutcome::Yield(why)) => {
                log(format!("preflight: {why}"));
                as_worker(&setup, me, deadline, probe_timeout)
            }
            Err(why) => Err((Finding::PreflightListenFailed, why)),
        },
        Role::Worker => as_worker(&setup, me, deadline, probe_timeout),
    };
    responder.stop();
    sink.stop();
    match end {
        Ok(v) => {
            agree::apply(plan, &v, |name| env.get(name).cloned(), vendor);
            if let Some(choice) = &v.network {
                move_to(snap, cfg, plan, &ifaces, choice);
            }
        }
        Err((code, why)) => {
            let remedy = "check that the master node runs ncclenv with NCCLENV_PREFLIGHT=1 and that this node \
                          reaches its master port; NCCLENV_STRICT=1 refuses instead of running";
            // A verdict lost on the way is no observed failure: never a refusal (docs/preflight.md).
            let refusing = cfg.strict && code != Finding::PreflightVerdictLost;
            let message = no_verdict_words(&why, refusing);
            plan.finding(code, message.clone(), remedy);
            if refusing {
                plan.refuse(
                    code.code(),
                    format!("preflight [{code}]: {message}"),
                    remedy,
                );
            }
        }
    }
}

/// The finding of a node that got no verdict (`why`, the observed cause first): what the node does with it,
/// `running without it`, or `refusing (NCCLENV_STRICT=1)` when strict mode refuses.
fn no_verdict_words(why: &str, refusing: bool) -> String {
    let does = if refusing {
        "refusing (NCCLENV_STRICT=1)"
    } else {
        "running without it"
    };
    format!("preflight: no verdict, {does}: {why}")
}

/// Move this node to the network the fleet chose (#23): its own interface holding an address there (from the
/// list it sent), decided again as ncclenv decides an interface (`decide::interface`, with the interface
/// given: `NCCL_SOCKET_IFNAME` with `=` where NCCL's prefix rule needs it, `NCCL_SOCKET_FAMILY`, the
/// companions); every change of that decision that differs from this plan's replaces it. A node without
/// such an interface (it cannot be: it reported one) keeps its choice and says so.
fn move_to(
    snap: &Snapshot,
    cfg: &Config,
    plan: &mut Plan,
    ifaces: &[networks::Iface],
    choice: &protocol::NetChoice,
) {
    if matches!(plan.verdict, Verdict::Refuse { .. }) {
        return;
    }
    let Some((name, addr)) = ifaces.iter().find_map(|i| {
        i.addrs
            .iter()
            .find(|a| choice.net.contains(&a.addr))
            .map(|a| (i.name.clone(), a.addr))
    }) else {
        log(format!(
            "preflight: the fleet moves to {}, but no interface here holds an address there: the choice stays",
            choice.net
        ));
        return;
    };
    let mut again = cfg.clone();
    again.interface_override = Some(crate::config::InterfaceOverride {
        ifname: name.clone(),
        addr,
        how: choice.how.clone(),
    });
    let other = crate::decide::decide(snap, &again);
    if other.choice.as_ref().map(|c| c.ifname.as_str()) != Some(name.as_str()) {
        log(format!(
            "preflight: the fleet moves to {}, but {name} cannot be decided here: the choice stays",
            choice.net
        ));
        return;
    }
    for c in other.changes {
        if plan.changes.contains(&c) {
            continue;
        }
        // In place: the summary names NCCL's variables in the plan's order.
        match plan.changes.iter_mut().find(|x| x.name == c.name) {
            Some(x) => *x = c,
            None => plan.changes.push(c),
        }
    }
    // What the decision says of the new interface (a companion that names another one) is worth a line, but
    // never a refusal of this node alone: the fleet has agreed. The hint that a faster interface exists
    // (`faster-interface`) is answered.
    plan.warnings
        .retain(|w| w.code != crate::findings::Finding::FasterInterface.code());
    for w in other.warnings {
        if !plan.warnings.contains(&w) && w.code != crate::findings::Finding::FasterInterface.code()
        {
            plan.warnings.push(crate::plan::Note {
                strict_refuses: false,
                ..w
            });
        }
    }
    plan.choice = other.choice;
    log(format!(
        "preflight: this node moves to {name} {addr} on {} with every node",
        choice.net
    ));
}

/// The worker's side of the meeting, its verdict logged; or why none came, with the finding it is.
fn as_worker(
    setup: &Setup,
    me: NodeReport,
    deadline: Instant,
    probe_timeout: Duration,
) -> Result<FleetVerdict, (Finding, String)> {
    match worker::run(setup, me, deadline, probe_timeout) {
        worker::WorkerEnd::Verdict(v) => {
            log(format!(
                "preflight: verdict from the master {} for {} of {} nodes: {}",
                setup.master,
                v.present,
                v.expected,
                verdict_word(&v)
            ));
            Ok(v)
        }
        worker::WorkerEnd::NoVerdict(why) => Err((Finding::PreflightNoMaster, why)),
        worker::WorkerEnd::Undelivered(why) => Err((Finding::PreflightVerdictLost, why)),
    }
}

/// One info line of the preflight (`ncclenv: preflight: …`): every line goes through this one call site.
fn log(line: String) {
    tracing::info!("{line}");
}

fn verdict_word(v: &FleetVerdict) -> &'static str {
    match v.refuse {
        None => "proceed",
        Some(_) => "refuse",
    }
}

/// The `NCCL_*` variables of the command's final environment as the command's `getenv` sees them (the first
/// entry of a name; names and values that are valid UTF-8).
fn nccl_env(env: &Environ) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (k, v) in env.pairs() {
        if let (Some(k), Some(v)) = (k.to_str(), v.to_str()) {
            // The first entry of a name is the one `getenv` returns.
            if k.starts_with("NCCL_") && !out.contains_key(k) {
                out.insert(k.to_string(), v.to_string());
            }
        }
    }
    out
}

/// `env` (the command's `NCCL_*` variables) with what NCCL's configuration files set for names it lacks: NCCL
/// applies each file's lines with `setenv(name, value, 0)`, so the environment and the first line that sets
/// a name win (`setEnvFile`/`initEnv`, src/misc/param.cc, 2.18–2.30). A node whose `/etc/nccl.conf` says
/// `NCCL_IB_DISABLE=1` has IB off, and the fleet must know it (break-it finding: only the environment was
/// reported, and the master kept IB on).
fn with_conf_files(mut env: BTreeMap<String, String>, snap: &Snapshot) -> BTreeMap<String, String> {
    let names: std::collections::BTreeSet<&str> = snap
        .conf_files
        .iter()
        .flat_map(|f| f.values.iter().map(|(name, _)| name.as_str()))
        .filter(|name| name.starts_with("NCCL_") && !env.contains_key(*name))
        .collect();
    // Each value as NCCL sees it, by the one rule (`nccl_rules::effective`).
    let from_files: Vec<(String, String)> = names
        .into_iter()
        .filter_map(|name| {
            crate::nccl_rules::effective(name, &env, &snap.conf_files)
                .map(|(value, _)| (name.to_string(), value.to_string()))
        })
        .collect();
    env.extend(from_files);
    env
}

/// A random-enough number for one run of ncclenv: std's per-process random hash keys over the pid and the
/// time. Not a secret; it only tells one node's probe listener from another's.
fn nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.finish()
}

/// This node's report: host name, bootstrap interface and address, MTU, probe port, the NCCL version its
/// command will load when exactly one is visible, the `NCCL_*` variables of the final environment and
/// ncclenv's own `NCCL_*` decisions.
fn local_report(
    snap: &Snapshot,
    cfg: &Config,
    plan: &Plan,
    setup: &Setup,
    env: &BTreeMap<String, String>,
    responder: &net::Responder,
    nonce: u64,
) -> NodeReport {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    let mtu = snap
        .net
        .as_ref()
        .ok()
        .and_then(|n| n.links.iter().find(|l| l.name == setup.ifname))
        .and_then(|l| l.mtu);
    let nccl_version = node_nccl_version(snap, cfg);
    let mut report = NodeReport {
        hostname,
        ifname: setup.ifname.clone(),
        addr: setup.bootstrap,
        family: Family::of(&setup.bootstrap),
        mtu,
        data_mtus: mtu::local(snap, env.get("NCCL_SOCKET_IFNAME").map(String::as_str))
            .iter()
            .map(mtu::NetMtu::wire)
            .collect(),
        probe_port: responder.port,
        listen_error: responder.error.clone(),
        nonce,
        nccl_version,
        ncclenv_version: env!("CARGO_PKG_VERSION").to_string(),
        nccl_env: env.clone(),
        decided: BTreeMap::new(),
        vendor_profile: !crate::decide::vendor_profile(snap).is_empty(),
        strict: cfg.strict,
        refused: match &plan.verdict {
            Verdict::Refuse { reason, .. } => Some(reason.clone()),
            Verdict::Proceed => None,
        },
        node_rank: setup.node_rank,
        ifaces: Vec::new(),
        sink_ports: (None, None),
        measure: cfg.preflight_measure,
        ib_usable: !agree::ib_disabled_env(env)
            && snap
                .rdma
                .iter()
                .flat_map(|r| &r.devices)
                .any(|d| d.ports.iter().any(|p| p.state == 4)),
        own_ifname: plan.changes.iter().any(|c| {
            c.name == "NCCL_SOCKET_IFNAME" && matches!(c.action, crate::plan::Action::Set { .. })
        }),
    };
    for c in plan.changes.iter().filter(|c| c.name.starts_with("NCCL_")) {
        report.decided.insert(c.name.clone(), c.reason.clone());
    }
    report.sanitize();
    report
}

/// The NCCL version this node reports to the others: with `NCCLENV_NCCL_LIB` / `--nccl-lib` set, that
/// library's (the one the check loads; `probe::nccl::explicit_install`), else the one version every
/// installation found shares (the snapshot's, else a fresh search); `None` when unknown or ambiguous.
fn node_nccl_version(snap: &Snapshot, cfg: &Config) -> Option<String> {
    use crate::probe::nccl;
    if let Some(lib) = &cfg.nccl_lib {
        return snap
            .nccl_installs
            .iter()
            .find(|i| i.source == crate::snapshot::EXPLICIT_NCCL_SOURCE)
            .cloned()
            .unwrap_or_else(|| nccl::explicit_install(lib))
            .version;
    }
    let installs = if snap.nccl_installs.is_empty() {
        nccl::find_installs(&snap.env)
    } else {
        snap.nccl_installs.clone()
    };
    let versions = crate::snapshot::distinct_versions(&installs);
    (versions.len() == 1 && installs.iter().all(|i| i.version.is_some()))
        .then(|| versions[0].clone())
}

impl Outlook {
    /// One or two lines for `ncclenv doctor`'s Preflight section.
    pub fn text(&self) -> String {
        let state = if self.enabled {
            format!("on (NCCLENV_PREFLIGHT=1, timeout {} s)", self.timeout_s)
        } else {
            "off (NCCLENV_PREFLIGHT=1 or --preflight turns it on)".to_string()
        };
        match &self.setup {
            Err(why) => format!("  {state}\n  would not run: {why}\n"),
            Ok(s) => {
                let (role, verb, at) = match s.role {
                    Role::Master => ("master", "listening on", s.listen),
                    Role::Worker => ("worker", "connecting to", s.master),
                };
                format!(
                    "  {state}\n  would run as {role}, {verb} {at} (port {} from {}; {}), {} nodes\n  probe port: ephemeral, on {} {}; job key {}\n",
                    s.master.port(),
                    s.port_source,
                    s.role_reason,
                    s.nnodes,
                    s.ifname,
                    s.bootstrap,
                    s.key
                )
            }
        }
    }

    /// The `preflight` object of `ncclenv doctor --json` (described in `docs/doctor.schema.json`).
    pub fn json(&self) -> Value {
        let s = self.setup.as_ref().ok();
        let row = OutlookJson {
            enabled: self.enabled,
            timeout_s: self.timeout_s,
            would_run: s.is_some(),
            reason: self.setup.as_ref().err().map(String::as_str),
            role: s.map(|s| s.role),
            role_reason: s.map(|s| s.role_reason.as_str()),
            master: s.map(|s| s.master.to_string()),
            listen: s.map(|s| s.listen.to_string()),
            port: s.map(|s| s.master.port()),
            port_source: s.map(|s| s.port_source.as_str()),
            nnodes: s.map(|s| s.nnodes),
            node_rank: s.and_then(|s| s.node_rank),
            interface: s.map(|s| s.ifname.as_str()),
            address: s.map(|s| s.bootstrap.to_string()),
            key: s.map(|s| s.key.as_str()),
        };
        serde_json::to_value(row).unwrap_or(Value::Null)
    }
}

/// The shape of [`Outlook::json`] (`docs/doctor.schema.json`, `preflight`).
#[derive(Serialize)]
struct OutlookJson<'a> {
    enabled: bool,
    timeout_s: u64,
    would_run: bool,
    reason: Option<&'a str>,
    role: Option<Role>,
    role_reason: Option<&'a str>,
    master: Option<String>,
    listen: Option<String>,
    port: Option<u16>,
    port_source: Option<&'a str>,
    nnodes: Option<u32>,
    node_rank: Option<u32>,
    interface: Option<&'a str>,
    address: Option<String>,
    key: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Choice;
    use crate::snapshot::{Addr, JobShape, Network, Peer};

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    /// The preflight reports the NCCL of `NCCLENV_NCCL_LIB` when it is set, as the check loads it, not the
    /// default search's.
    #[test]
    fn nccl_version_follows_the_configured_library() {
        let dir = std::env::temp_dir().join(format!("ncclenv-pf-lib-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let lib = dir.join("libnccl.so.2.21.5");
        std::fs::write(&lib, b"").expect("write");
        let found = |v: &str| crate::snapshot::NcclInstall {
            path: format!("/usr/lib/libnccl.so.{v}"),
            version: Some(v.into()),
            source: "ld.so.cache".into(),
        };
        let s = Snapshot {
            nccl_installs: vec![found("2.27.3")],
            ..Snapshot::default()
        };
        let cfg = Config {
            nccl_lib: Some(lib.clone()),
            ..Config::default()
        };
        assert_eq!(node_nccl_version(&s, &cfg).as_deref(), Some("2.21.5"));
        // The explicit library already in the snapshot (doctor's depth) is the one taken.
        let s = Snapshot {
            nccl_installs: vec![crate::probe::nccl::explicit_install(&lib), found("2.27.3")],
            ..Snapshot::default()
        };
        assert_eq!(node_nccl_version(&s, &cfg).as_deref(), Some("2.21.5"));
        // Without it: the one version found.
        let s = Snapshot {
            nccl_installs: vec![found("2.27.3")],
            ..Snapshot::default()
        };
        assert_eq!(
            node_nccl_version(&s, &Config::default()).as_deref(),
            Some("2.27.3")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn snap(own: &str, master: &str, nnodes: Option<u32>) -> Snapshot {
        Snapshot {
            net: Ok(Network {
                addrs: vec![Addr {
                    index: 2,
                    addr: ip(own),
                    prefix_len: 24,
                    scope: 0,
                    tentative: false,
                    deprecated: false,
                    dad_failed: false,
                    label: None,
                }],
                ..Network::default()
            }),
            peer: Some(Peer {
                source: "--master".into(),
                host: master.into(),
                addrs: vec![ip(master)],
                error: None,
                port: None,
                resolve_ms: 0,
                resolve_attempts: 0,
            }),
            job: JobShape {
                nnodes,
                ..JobShape::default()
            },
            ..Snapshot::default()
        }
    }

    fn plan(addr: &str) -> Plan {
        Plan {
            choice: Some(Choice {
                ifname: "eth0".into(),
                addr: Some(ip(addr)),
                how: "route".into(),
            }),
            ..Plan::default()
        }
    }

    /// `snap` with the launcher's master port (from `--master`) and node rank (from `PET_NODE_RANK`).
    fn job(mut snap: Snapshot, port: Option<u16>, rank: Option<u32>) -> Snapshot {
        snap.job.master_port = port;
        snap.job.master_port_source = port.map(|_| "--master".to_string());
        snap.job.node_rank = rank;
        snap.job.node_rank_source = rank.map(|_| "PET_NODE_RANK".to_string());
        snap
    }

    #[test]
    fn the_owner_of_the_master_address_is_the_master() {
        let cfg = Config::default();
        let o = outlook(
            &job(snap("10.0.0.1", "10.0.0.1", Some(3)), Some(8090), Some(2)),
            &cfg,
            &plan("10.0.0.1"),
        );
        let s = o.setup.expect("runs");
        assert_eq!(s.role, Role::Master);
        assert_eq!(s.listen, "10.0.0.1:8090".parse().expect("sa"));
        assert!(
            s.role_reason.contains("owns the master address"),
            "{}",
            s.role_reason
        );
        assert_eq!(
            s.key,
            protocol::job_key("10.0.0.1:8090".parse().expect("sa"), 3)
        );
        assert!(!o.enabled);
        let t = outlook(
            &job(snap("10.0.0.1", "10.0.0.1", Some(3)), Some(8090), None),
            &cfg,
            &plan("10.0.0.1"),
        )
        .text();
        assert!(
            t.contains("would run as master, listening on 10.0.0.1:8090"),
            "{t}"
        );
    }

    /// The job key is made from the resolved master endpoint: a worker that names the master by address, one
    /// that names it by a name resolving to that address, and the master that names itself `localhost` (rank
    /// 0, loopback here, its bootstrap address the master's) meet.
    #[test]
    fn job_key_is_the_resolved_master_endpoint() {
        let cfg = Config::default();
        let worker = |host: &str| {
            let mut s = job(snap("10.0.0.8", "10.0.0.1", Some(2)), Some(29500), Some(1));
            if let Some(p) = &mut s.peer {
                p.host = host.into();
            }
            setup(&s, &cfg, &plan("10.0.0.8")).expect("runs").key
        };
        let mut m = job(snap("10.0.0.1", "127.0.0.1", Some(2)), Some(29500), Some(0));
        if let Some(p) = &mut m.peer {
            p.host = "localhost".into();
        }
        let master = setup(&m, &cfg, &plan("10.0.0.1")).expect("runs");
        assert_eq!(master.role, Role::Master);
        assert_eq!(worker("10.0.0.1"), master.key);
        assert_eq!(worker("node-0.example"), master.key);
        // The master naming itself by address.
        let m = job(snap("10.0.0.1", "10.0.0.1", Some(2)), Some(29500), Some(0));
        assert_eq!(
            setup(&m, &cfg, &plan("10.0.0.1")).expect("runs").key,
            master.key
        );
        // Another node count: another meeting.
        let other = job(snap("10.0.0.8", "10.0.0.1", Some(3)), Some(29500), Some(1));
        assert_ne!(
            setup(&other, &cfg, &plan("10.0.0.8")).expect("runs").key,
            master.key
        );
    }

    #[test]
    fn rank_zero_listens_on_the_wildcard_others_connect() {
        let cfg = Config::default();
        // The master address is a service address nobody owns.
        let s = setup(
            &job(
                snap("10.0.0.7", "10.96.0.10", Some(2)),
                Some(29500),
                Some(0),
            ),
            &cfg,
            &plan("10.0.0.7"),
        )
        .expect("runs");
        assert_eq!(
            (s.role, s.listen),
            (Role::Master, "0.0.0.0:29500".parse().expect("sa"))
        );
        let s = setup(
            &job(
                snap("10.0.0.8", "10.96.0.10", Some(2)),
                Some(29500),
                Some(1),
            ),
            &cfg,
            &plan("10.0.0.8"),
        )
        .expect("runs");
        assert_eq!(
            (s.role, s.master),
            (Role::Worker, "10.96.0.10:29500".parse().expect("sa"))
        );
        assert_eq!(s.node_rank, Some(1));
        let s = setup(
            &job(snap("10.0.0.8", "10.0.0.1", Some(2)), Some(1), None),
            &cfg,
            &plan("10.0.0.8"),
        )
        .expect("runs");
        assert_eq!(s.role, Role::Worker);
        // NCCLENV_PREFLIGHT_PORT wins over the launcher's port.
        let cfg = Config {
            preflight_port: Some(4242),
            ..Config::default()
        };
        let s = setup(
            &job(snap("10.0.0.8", "10.0.0.1", Some(2)), Some(1), None),
            &cfg,
            &plan("10.0.0.8"),
        )
        .expect("runs");
        assert_eq!(
            (s.master.port(), s.port_source.as_str()),
            (4242, "NCCLENV_PREFLIGHT_PORT")
        );
    }

    #[test]
    fn skipped_with_a_reason() {
        let cfg = Config::default();
        let p = plan("10.0.0.8");
        let why =
            |s: Snapshot, p: &Plan| setup(&job(s, Some(8090), None), &cfg, p).expect_err("skipped");
        assert!(why(snap("10.0.0.8", "10.0.0.1", Some(1)), &p).contains("one node"));
        assert!(why(snap("10.0.0.8", "10.0.0.1", None), &p).contains("not known"));
        let no_port = setup(&snap("10.0.0.8", "10.0.0.1", Some(2)), &cfg, &p).expect_err("no port");
        assert!(no_port.contains("NCCLENV_PREFLIGHT_PORT"), "{no_port}");
        // The port written with the master (NCCLENV_PEER=host:port) is the last resort.
        let mut s = snap("10.0.0.8", "10.0.0.1", Some(2));
        if let Some(peer) = &mut s.peer {
            peer.port = Some(4000);
            peer.source = "NCCLENV_PEER".into();
        }
        let got = setup(&s, &cfg, &p).expect("runs");
        assert_eq!(
            (got.master.port(), got.port_source.as_str()),
            (4000, "NCCLENV_PEER")
        );
        let mut s = snap("10.0.0.8", "10.0.0.1", Some(2));
        s.peer = None;
        assert!(why(s, &p).contains("no master"));
        let mut s = snap("10.0.0.8", "10.0.0.1", Some(2));
        if let Some(peer) = &mut s.peer {
            peer.host = "m".into();
            peer.addrs.clear();
        }
        assert!(why(s, &p).contains("did not resolve"));
        let hands_off = Plan {
            hands_off: true,
            ..plan("10.0.0.8")
        };
        assert!(why(snap("10.0.0.8", "10.0.0.1", Some(2)), &hands_off).contains("untouched"));
        assert!(why(snap("10.0.0.8", "127.0.0.1", Some(2)), &p).contains("loopback"));
        // A name that resolves to 127.0.1.1 on the master itself: node rank 0 listens on the wildcard.
        let s = setup(
            &job(snap("10.0.0.1", "127.0.1.1", Some(2)), Some(29500), Some(0)),
            &cfg,
            &p,
        )
        .expect("runs");
        assert_eq!(
            (s.role, s.listen),
            (Role::Master, "0.0.0.0:29500".parse().expect("sa"))
        );
        let o = Outlook {
            enabled: true,
            timeout_s: 60,
            setup: Err("x".into()),
        };
        assert_eq!(o.json()["would_run"], Value::Bool(false));
        assert_eq!(o.json()["reason"], "x");
        assert!(o.json()["port"].is_null());
        assert!(o.text().contains("would not run: x"));
    }

    /// A node told to move to a network decides on its own interface there as ncclenv decides any: `=` where
    /// another interface's name starts with it, the family and the companions; the plan's order is kept.
    #[test]
    fn a_node_moves_to_its_own_interface_on_the_chosen_network() {
        let mut s = crate::test_snapshot::SnapshotBuilder::new()
            .plug("eth0", &["10.1.0.2/24"])
            .plug("ens5", &["10.2.0.2/24"])
            .plug("ens50", &["10.3.0.2/24"])
            .build();
        s.job.nnodes = Some(3);
        let cfg = Config::default();
        let mut p = crate::decide::decide(&s, &cfg);
        assert_eq!(p.value_of("NCCL_SOCKET_IFNAME"), Some("eth0"));
        let first = p.changes[0].name.clone();
        let ifaces = networks::local(&s, &cfg);
        let choice = protocol::NetChoice {
            net: networks::Cidr {
                addr: ip("10.2.0.0"),
                prefix: 24,
            },
            how: "every pair proven: slowest 9.0 Gbit/s vs eth0 20.0 Mbit/s".into(),
        };
        move_to(&s, &cfg, &mut p, &ifaces, &choice);
        assert_eq!(p.value_of("NCCL_SOCKET_IFNAME"), Some("=ens5"));
        assert_eq!(p.value_of("GLOO_SOCKET_IFNAME"), Some("ens5"));
        assert_eq!(p.value_of("NCCL_SOCKET_FAMILY"), Some("AF_INET"));
        assert_eq!(p.changes[0].name, first);
        let c = p.choice.clone().expect("a choice");
        assert_eq!((c.ifname.as_str(), c.addr), ("ens5", Some(ip("10.2.0.2"))));
        assert!(c.how.starts_with("every pair proven"), "{}", c.how);
        // A network this node has no address in: nothing changes.
        let before = p.clone();
        let elsewhere = protocol::NetChoice {
            net: networks::Cidr {
                addr: ip("10.9.0.0"),
                prefix: 24,
            },
            how: "x".into(),
        };
        move_to(&s, &cfg, &mut p, &ifaces, &elsewhere);
        assert_eq!((p.changes, p.choice), (before.changes, before.choice));
    }
}

#[cfg(test)]
mod conf_file_tests {
    use super::*;
    use crate::snapshot::ConfFile;

    /// The environment wins, then the first file line that sets a name, as NCCL applies them; names that are
    /// not NCCL's are left out.
    #[test]
    fn config_files_add_what_the_environment_lacks() {
        let file = |path: &str, values: &[(&str, &str)]| ConfFile {
            path: path.into(),
            values: values
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            error: None,
        };
        let snap = Snapshot {
            conf_files: vec![
                file(
                    "/etc/a.conf",
                    &[
                        ("NCCL_X", "b"),
                        ("NCCL_IB_DISABLE", "1"),
                        ("NCCL_IB_DISABLE", "0"),
                        ("OTHER", "1"),
                    ],
                ),
                file(
                    "/etc/nccl.conf",
                    &[("NCCL_IB_DISABLE", "2"), ("NCCL_Y", "y")],
                ),
            ],
            ..Snapshot::default()
        };
        let env = BTreeMap::from([("NCCL_X".to_string(), "a".to_string())]);
        let got = with_conf_files(env, &snap);
        let want: BTreeMap<String, String> =
            [("NCCL_X", "a"), ("NCCL_IB_DISABLE", "1"), ("NCCL_Y", "y")]
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
        assert_eq!(got, want);
        assert!(agree::ib_disabled_env(&got));
    }
}
