//! The job: its peer (the master) resolved to addresses, its shape (read by `crate::launcher`), the inherited
//! variables that matter, and NCCL's configuration files.

use super::read;
use crate::launcher::{self, Endpoint, Sourced};
use crate::snapshot::{ConfFile, JobShape, Peer};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::{IpAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The job's peer (not yet resolved) and shape: `--peer`/`NCCLENV_PEER` (`cfg_peer`: the value and where it
/// was given, as written) names the peer when set, else the launcher does (`launcher::read`);
/// `NCCLENV_NNODES` (`cfg_nnodes`) sets the node count when set, else the launcher does. `env` is the
/// recorded environment ([`record_env`]).
pub fn job(
    cfg_peer: Option<(&str, &str)>,
    cfg_nnodes: Option<u32>,
    argv: &[OsString],
    env: &BTreeMap<String, String>,
    cwd: Option<&str>,
) -> (Option<Sourced<Endpoint>>, JobShape) {
    // The launcher's own config file (Accelerate's), read bounded and only when it is a regular file; a
    // relative path from the directory the command starts in (`cd /w && accelerate launch --config_file
    // a.yaml`), which the wrapper may hide.
    let files = |path: &str, max: usize| {
        let path = match cwd {
            Some(d) if !path.starts_with('/') && d.contains(crate::shell::UNKNOWN) => {
                return Err((
                    false,
                    "it is relative to a working directory the command's wrapper changes in a way ncclenv cannot follow (cd -, cd $(…), popd, cd NAME with CDPATH set)".to_string(),
                ))
            }
            _ => crate::shell::join_dir(cwd, path),
        };
        read::read_file(Path::new(&path), max).map_err(|e| (e.is_missing(), e.to_string()))
    };
    let info = launcher::read_with(argv, env, &files);
    let mut shape = info.shape;
    if let Some(n) = cfg_nnodes {
        shape.nnodes = Some(n);
        shape.source = Some("--nnodes/NCCLENV_NNODES".into());
    }
    let own = cfg_peer.and_then(|(p, source)| {
        launcher::parse_endpoint(p).ok().map(|e| Sourced {
            value: e,
            source: source.into(),
        })
    });
    if own.is_some() {
        // The peer is the one configured, not the contact URI's.
        shape.contact_addrs.clear();
    }
    (own.or(info.master), shape)
}

/// How this host reaches an address of the master's contact URI, best first (the order of
/// [`order_contact`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reach {
    /// On a prefix of one of this host's addresses (the kernel's route has no gateway), through the link
    /// with that index when known.
    Connected(Option<u32>),
    /// Through a gateway of a route to that destination's network that is not the default route.
    Gateway,
    /// Only through the default route.
    Default,
    /// This host's own address (the kernel answers `local`): the master would be this host.
    Own,
    /// No route (the kernel's lookup failed), or nothing known about it.
    Other,
}

/// How this host reaches `ip` ([`Reach`]), from the network probe: the kernel's route lookup of `ip` when
/// the probe made one (`Network::peer_routes`), else this host's addresses and main-table routes.
pub fn reach(ip: &IpAddr, net: &crate::snapshot::Network) -> Reach {
    let lookup = net.peer_routes.iter().find(|l| l.dest == *ip);
    if net.addrs.iter().any(|a| a.addr == *ip) || lookup.is_some_and(|l| l.local) {
        return Reach::Own;
    }
    let specific = |gw: bool| {
        net.routes.iter().any(|r| {
            r.kind == 1
                && r.dst
                    .is_some_and(|(n, l)| l > 0 && crate::snapshot::prefix_contains(&n, l, ip))
                && r.paths().iter().any(|p| p.gateway.is_some() == gw)
        })
    };
    let covered = || {
        net.addrs
            .iter()
            .find(|a| !a.is_loopback() && a.covers(ip))
            .map(|a| a.index)
    };
    match lookup {
        Some(l) if l.error.is_some() => Reach::Other,
        Some(l) if l.gateway.is_none() => Reach::Connected(l.oif),
        Some(_) if specific(true) => Reach::Gateway,
        Some(_) => Reach::Default,
        None => match covered() {
            Some(i) => Reach::Connected(Some(i)),
            None if specific(true) => Reach::Gateway,
            None if net.routes.iter().any(|r| {
                r.kind == 1 && r.is_default() && r.family == crate::snapshot::Family::of(ip)
            }) =>
            {
                Reach::Default
            }
            None => Reach::Other,
        },
    }
}

/// The addresses of the master's contact URI (`JobShape::contact_addrs`: Open MPI's `OMPI_MCA_orte_hnp_uri`,
/// PMIx's `PMIX_SERVER_URI*`) ordered by how this host reaches each ([`reach`]): connected, through a
/// gateway route that is not the default, through the default route, this host's own address, the others;
/// an address in a container engine's NAT bridge pool (`crate::snapshot::NAT_BRIDGE_POOLS`: Docker's
/// `docker0` 172.17.0.1, which every Docker host owns) after all of them unless it is connected through a
/// link that is not a container bridge (a Compose network's `eth0`); IPv4 before IPv6 within each; otherwise
/// the URI's order (Open MPI tries them in that order, open-mpi/ompi v4.1.8
/// orte/mca/oob/tcp/oob_tcp_connection.c `mca_oob_tcp_peer_try_connect`). Without a network (`None`: the
/// probe failed) only the pools and the families order them.
pub fn order_contact(addrs: &[IpAddr], net: Option<&crate::snapshot::Network>) -> Vec<IpAddr> {
    let key = |ip: &IpAddr| {
        let r = net.map_or(Reach::Other, |n| reach(ip, n));
        let direct = match (r, net) {
            (Reach::Connected(Some(i)), Some(n)) => n
                .links
                .iter()
                .find(|l| l.index == i)
                .is_none_or(|l| !l.is_bridge_like()),
            _ => false,
        };
        let decoy = crate::snapshot::in_nat_bridge_pool(ip) && !direct;
        (decoy, rank_of(r), ip.is_ipv6())
    };
    let mut out = addrs.to_vec();
    out.sort_by_key(key);
    out
}

/// The place of a [`Reach`] in [`order_contact`]'s order (the link does not count).
fn rank_of(r: Reach) -> u8 {
    match r {
        Reach::Connected(_) => 0,
        Reach::Gateway => 1,
        Reach::Default => 2,
        Reach::Own => 3,
        Reach::Other => 4,
    }
}

/// The peer named by a contact URI (`contact`, `JobShape::contact_addrs`; empty for any other peer) once the
/// network is probed: the address [`order_contact`] puts first, alone, as if the URI had named only it (so
/// that an address every host owns, `docker0`'s, never makes this host the master), its source naming the
/// others (`OMPI_MCA_orte_hnp_uri (Open MPI rank), the one of 172.17.0.1, 10.81.0.1 this host reaches
/// best`), and the network's route lookups narrowed to it. Anything else is returned unchanged.
pub fn contact_peer(
    peer: Option<Peer>,
    contact: &[IpAddr],
    net: Result<crate::snapshot::Network, String>,
) -> (Option<Peer>, Result<crate::snapshot::Network, String>) {
    if contact.is_empty() {
        return (peer, net);
    }
    let Some(mut p) = peer else {
        return (None, net);
    };
    let Some(best) = order_contact(contact, net.as_ref().ok()).first().copied() else {
        return (Some(p), net);
    };
    if contact.len() > 1 {
        let all: Vec<String> = contact.iter().map(IpAddr::to_string).collect();
        p.source = format!(
            "{}, the one of {} this host reaches best",
            p.source,
            all.join(", ")
        );
    }
    p.host = best.to_string();
    p.addrs = vec![best];
    let net = net.map(|mut n| {
        n.peer_routes.retain(|l| l.dest == best);
        n
    });
    (Some(p), net)
}

/// The job's command as its facts are read: through shells and prefix programs (`crate::shell`), with the
/// environment the command receives (the recorded one, plus the shell's exported assignments of launcher
/// variables, less what `env -i`/`env -u` removes).
#[derive(Debug, Clone, Default)]
pub struct JobCommand {
    /// The simple command that starts the job (the command itself when nothing wraps it).
    pub argv: Vec<OsString>,
    /// The recorded environment as that command receives it, when it differs from the recorded one.
    pub env: Option<BTreeMap<String, String>>,
    /// `sh -c: torchrun --nnodes=2 …` when the command is wrapped (user information removed).
    pub wrapper: Option<String>,
    /// The script file a shell runs, not read.
    pub script: Option<String>,
    /// What could not be read (an unclosed quote), one sentence each.
    pub problems: Vec<String>,
    /// The working directory the command starts in when its wrapper changes it (`crate::shell::Unwrapped::cwd`;
    /// it may hold `crate::shell::UNKNOWN`); `None` when unchanged.
    pub cwd: Option<String>,
    /// What the wrapper removes from the command's environment: `["*"]` for `env -i`, else the names of
    /// `env -u NAME`; `None` when nothing is removed (see `JobShape::env_removed`).
    pub env_removed: Option<Vec<String>>,
    /// The recorded variables other than the launchers' that the wrapper assigns, name and value (see
    /// `JobShape::env_assigned`).
    pub env_assigned: Vec<(String, String)>,
}

/// Read `cmd` through its shells and prefix programs (`crate::shell::unwrap`), expanding from `vars` (the
/// environment as the command receives it, first entry of a name winning as `getenv` reads it). `env` is the
/// recorded environment ([`record_env`]).
pub fn job_command(
    cmd: &[OsString],
    vars: &[(OsString, OsString)],
    env: &BTreeMap<String, String>,
) -> JobCommand {
    let args: Vec<String> = cmd
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let lookup = |name: &str| -> Option<String> {
        vars.iter()
            .find(|(k, _)| k.as_encoded_bytes() == name.as_bytes())
            .map(|(_, v)| v.to_string_lossy().into_owned())
    };
    let unwrapped = crate::shell::unwrap(&args, &lookup);
    if !unwrapped.wrapped() {
        return JobCommand {
            argv: cmd.to_vec(),
            env: None,
            wrapper: None,
            script: unwrapped.script,
            problems: unwrapped.problems,
            env_removed: None,
            env_assigned: Vec::new(),
            cwd: None,
        };
    }
    let mut job_env = env.clone();
    if unwrapped.cleared {
        job_env.retain(|k, _| !is_launcher_var(k));
    }
    for n in &unwrapped.unset {
        job_env.remove(n);
    }
    let mut env_assigned = Vec::new();
    for (n, v) in &unwrapped.assignments {
        if is_launcher_var(n) {
            job_env.insert(n.clone(), launcher::redact_userinfo(v));
        } else if is_recorded(n) {
            env_assigned.push((n.clone(), launcher::redact_userinfo(v)));
        }
    }
    let env_removed = removed_names(&unwrapped);
    JobCommand {
        argv: unwrapped.argv.iter().map(OsString::from).collect(),
        env: Some(job_env),
        wrapper: Some(wrapper_text(&unwrapped)),
        script: unwrapped.script,
        problems: unwrapped.problems,
        env_removed,
        env_assigned,
        cwd: unwrapped.cwd,
    }
}

/// The shell script `jc` runs directly (`./run.sh`, `/w/train.sh`), when its wrappers named none (`bash
/// run.sh`), changed no directory and its program is no launcher (a wrapper script called `torchrun` is
/// torchrun): read for doctor only (`crate::probe::Depth::Doctor`), so a job's start reads no file of its
/// command. Break-it finding 6: such a script got no "not read" hint, only `bash run.sh` did.
pub fn direct_script(jc: &JobCommand) -> Option<String> {
    let argv: Vec<String> = jc
        .argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if jc.script.is_some() || jc.cwd.is_some() || launcher::detect(&argv).is_some() {
        return None;
    }
    shell_script(argv.first()?)
}

/// `path` when it names a shell script: a path (it holds a `/`, so the kernel runs it without a `PATH`
/// search) to a file whose `#!` line names a shell, directly or through `env` (execve(2): the interpreter
/// line). Reads at most 256 bytes; any error is `None`.
fn shell_script(path: &str) -> Option<String> {
    if !path.contains('/') || path.contains(crate::shell::UNKNOWN) {
        return None;
    }
    let head = read::read_head(Path::new(path), 256).ok()?;
    let line = String::from_utf8_lossy(&head);
    let line = line.strip_prefix("#!")?.lines().next()?.to_string();
    let mut words = line.split_whitespace();
    let mut prog = words.next()?.rsplit('/').next()?;
    if prog == "env" {
        prog = words.find(|w| !w.starts_with('-'))?;
    }
    crate::shell::is_shell(prog).then(|| path.to_string())
}

/// What `u`'s wrappers remove from the command's environment: `["*"]` for `env -i`, else the names of
/// `env -u NAME`, `None` when nothing.
fn removed_names(u: &crate::shell::Unwrapped) -> Option<Vec<String>> {
    if u.cleared {
        Some(vec!["*".to_string()])
    } else if u.unset.is_empty() {
        None
    } else {
        Some(u.unset.clone())
    }
}

/// True for the variables the launcher and orchestrator readings look at.
fn is_launcher_var(name: &str) -> bool {
    launcher::VARS.contains(&name)
        || crate::orchestrator::is_var(name)
        || RUNNER_FILE_VARS.contains(&name)
}

/// The variables that say where a runner's own files are (`~/.deepspeed_env`, its name): a wrapper's
/// assignment of them is the job's (`env HOME=/h deepspeed …`, `sh -c "DS_ENV_FILE=f deepspeed …"`), as
/// DeepSpeed's runner reads them from its environment (`crate::spread`).
const RUNNER_FILE_VARS: &[&str] = &["HOME", "DS_ENV_FILE"];

/// `sh -c: torchrun --nnodes=2 --master_addr=m t.py` (at most 12 words, each with user information removed
/// and a value of a `*KEY*`/`*TOKEN*`/`*SECRET*`/`*PASSWORD*` option or assignment as `***`).
fn wrapper_text(u: &crate::shell::Unwrapped) -> String {
    let mut words: Vec<String> = u
        .argv
        .iter()
        .take(12)
        .map(|w| match crate::shell::display(w).split_once('=') {
            Some((n, _)) if secret_name(n) => format!("{n}=***"),
            _ => launcher::redact_shell_word(w),
        })
        .collect();
    if u.argv.len() > 12 {
        words.push("…".into());
    }
    format!("{}: {}", u.via.join(", "), words.join(" "))
}

fn secret_name(n: &str) -> bool {
    let n = n.to_ascii_uppercase();
    ["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD"]
        .iter()
        .any(|s| n.contains(s))
}

/// Variables recorded in the snapshot by exact name, besides the launchers' (`launcher::VARS`). Anything
/// else is never recorded (secrets).
const RECORDED: &[&str] = &[
    "GLOO_SOCKET_IFNAME",
    "TP_SOCKET_IFNAME",
    "HOROVOD_GLOO_IFACE",
    "OMPI_MCA_btl_tcp_if_include",
    "OMPI_MCA_oob_tcp_if_include",
    // Open MPI takes an include or an exclude list, not both (`ompi-exclude-kept`).
    "OMPI_MCA_btl_tcp_if_exclude",
    "OMPI_MCA_oob_tcp_if_exclude",
    "OMPI_MCA_mca_base_env_list",
    "OMPI_MCA_mca_base_env_list_delimiter",
    "UCX_NET_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "HPCX_DIR",
    "HPCX_NCCL_RDMA_SHARP_PLUGIN_DIR",
    "FI_PROVIDER",
    "NO_PROXY",
    "no_proxy",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "HOME",
    // DeepSpeed's environment file name (`crate::spread::deepspeed_env_ifname`).
    "DS_ENV_FILE",
    "TORCH_DISTRIBUTED_DEBUG",
    "TORCH_CPP_LOG_LEVEL",
    "PADDLE_LOG_LEVEL",
];

/// Proxy variables: recorded with any `user:password@` removed.
pub const PROXY_VARS: &[&str] = &[
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// True for the variables the snapshot records: every `NCCL_*`, the launcher, GPU, library-path and proxy variables listed in this module.
pub fn is_recorded(name: &str) -> bool {
    name.starts_with("NCCL_")
        || RECORDED.contains(&name)
        || PROXY_VARS.contains(&name)
        || launcher::VARS.contains(&name)
        || crate::orchestrator::is_var(name)
}

/// Record the relevant inherited variables (see [`is_recorded`]) as `getenv` reads them (the first entry of a
/// duplicated name wins), each with the user information of URLs replaced by `***`
/// (`launcher::redact_userinfo`: proxies and rendezvous endpoints carry passwords). Non-UTF-8 values are
/// recorded lossily (they pass to the command unchanged; only the record is lossy).
pub fn record_env<I: IntoIterator<Item = (OsString, OsString)>>(
    vars: I,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (k, v) in vars {
        let Some(k) = k.to_str() else { continue };
        if !is_recorded(k) {
            continue;
        }
        let mut v = launcher::redact_userinfo(&v.to_string_lossy());
        // Open MPI's env list may assign values (`NAME=VALUE`), which may be secrets: not recorded
        // (`decide::spread` then leaves the list alone).
        if k == "OMPI_MCA_mca_base_env_list" && v.contains('=') {
            v = crate::decide::spread::ENV_LIST_ASSIGNS.to_string();
        }
        // getenv: the first entry of a name is the one the command reads.
        out.entry(k.to_string()).or_insert(v);
    }
    out
}

/// First pause between two resolver calls for a name that does not resolve (yet); it doubles up to
/// [`RESOLVE_RETRY_MAX`].
const RESOLVE_RETRY_FIRST: Duration = Duration::from_millis(50);
/// Longest pause between two resolver calls.
const RESOLVE_RETRY_MAX: Duration = Duration::from_millis(500);
/// How often a wait for the master's name says that it still waits (issue #21, item 7).
pub const RESOLVE_REPORT_EVERY: Duration = Duration::from_secs(10);

/// How long to wait for the master's name and what to say while waiting.
pub struct ResolveWait<'a> {
    /// The bound on the whole wait.
    pub timeout: Duration,
    /// Where the bound comes from, for the first line (`NCCLENV_RESOLVE_TIMEOUT_MS`, …).
    pub bound: &'a str,
    /// How often a line says the wait goes on ([`RESOLVE_REPORT_EVERY`]).
    pub every: Duration,
    /// Where the lines go (the logger's info level in the entrypoint).
    pub say: &'a mut dyn FnMut(&str),
}

/// Resolve a peer host to addresses within `timeout` ([`resolve_peer_waiting`] saying nothing).
pub fn resolve_peer(source: String, host: String, port: Option<u16>, timeout: Duration) -> Peer {
    let mut quiet = |_: &str| {};
    let wait = ResolveWait {
        timeout,
        bound: "NCCLENV_RESOLVE_TIMEOUT_MS",
        every: RESOLVE_REPORT_EVERY,
        say: &mut quiet,
    };
    resolve_peer_waiting(source, host, port, wait)
}

/// Resolve a peer host to addresses within `wait.timeout`. An address literal needs no resolver and never
/// waits. A name is looked up with the system resolver (`getaddrinfo`, through `ToSocketAddrs`) on a helper
/// thread; when the lookup fails (NXDOMAIN, no resolver reachable, an empty answer) it is retried, with
/// pauses of 50 ms doubling to 500 ms, until the bound has passed — a Kubernetes headless service often
/// appears seconds after its pods start. When the first call fails a line says at once which name is waited
/// for and how long, another every `wait.every` while the wait goes on, and one when the name resolves; a
/// call that hangs does not hold those lines back. A call still running at the deadline is abandoned (its
/// thread is left behind; `exec` ends it). SIGTERM and its kin end the wait at once with 128 + N
/// (`crate::signals`, [`crate::signals::Wait::Resolving`]). The result records the time spent
/// ([`Peer::resolve_ms`]), the number of calls and, on failure, the last error; its `addrs` are then empty.
pub fn resolve_peer_waiting(
    source: String,
    host: String,
    port: Option<u16>,
    mut wait: ResolveWait<'_>,
) -> Peer {
    let _wait = crate::signals::waiting(crate::signals::Wait::Resolving);
    let mut peer = Peer {
        source,
        host,
        addrs: vec![],
        error: None,
        port,
        resolve_ms: 0,
        resolve_attempts: 0,
    };
    if let Ok(ip) = peer.host.parse::<IpAddr>() {
        peer.addrs = vec![ip];
        return peer;
    }
    let start = Instant::now();
    let deadline = start + wait.timeout;
    // A first call that hangs is said after at most a second; later lines come every `wait.every`.
    let mut said = Said {
        began: false,
        next: start + wait.every.min(Duration::from_secs(1)),
    };
    let mut pause = RESOLVE_RETRY_FIRST;
    let mut call: Option<mpsc::Receiver<Answer>> = None;
    loop {
        let rx = match call.take() {
            Some(rx) => rx,
            None => {
                peer.resolve_attempts += 1;
                match start_call(&peer.host) {
                    Ok(rx) => rx,
                    Err(e) => {
                        peer.error = Some(e);
                        break;
                    }
                }
            }
        };
        match rx.recv_timeout(
            deadline
                .min(said.next)
                .saturating_duration_since(Instant::now()),
        ) {
            Ok(answer) => match answer_addrs(answer) {
                Ok(addrs) => {
                    peer.addrs = addrs;
                    peer.error = None;
                    break;
                }
                Err(e) => peer.error = Some(e),
            },
            Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {
                // The call hangs (a resolver that does not answer): keep waiting for it.
                call = Some(rx);
                said.tick(&peer, start, &mut wait);
                continue;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                peer.error = Some("no answer from the resolver".to_string());
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                peer.error = Some("the resolver ended without an answer".to_string());
            }
        }
        if Instant::now() >= deadline {
            break;
        }
        said.tick(&peer, start, &mut wait);
        // Sleep in steps that end at the next line, so that lines come on time.
        let until = (Instant::now() + pause).min(deadline);
        while Instant::now() < until {
            std::thread::sleep(
                until
                    .min(said.next)
                    .saturating_duration_since(Instant::now()),
            );
            said.tick(&peer, start, &mut wait);
        }
        pause = (pause * 2).min(RESOLVE_RETRY_MAX);
    }
    peer.resolve_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    if said.began && !peer.addrs.is_empty() {
        (wait.say)(&format!(
            "the master's name {} resolved after {:.1} s ({} resolver calls)",
            peer.host,
            start.elapsed().as_secs_f64(),
            peer.resolve_attempts
        ));
    }
    peer
}

/// What a wait has said: whether it began, and when the next line is due.
struct Said {
    began: bool,
    next: Instant,
}

impl Said {
    /// The first line once a call failed, then one every `wait.every`.
    fn tick(&mut self, peer: &Peer, start: Instant, wait: &mut ResolveWait<'_>) {
        // The resolver's own words, without the wrapping the lines repeat.
        let last = peer.error.as_deref().map_or(String::new(), |e| {
            let e = e.strip_prefix("cannot resolve: ").unwrap_or(e);
            let e = e
                .strip_prefix("failed to lookup address information: ")
                .unwrap_or(e);
            format!("; last: {e}")
        });
        if !self.began {
            self.began = true;
            self.next = start + wait.every;
            (wait.say)(&format!(
                "waiting up to {} for the master's name {} (from {}) to resolve ({}){last}",
                secs(wait.timeout),
                peer.host,
                peer.source,
                wait.bound
            ));
        } else if Instant::now() >= self.next {
            self.next += wait.every;
            (wait.say)(&format!(
                "still waiting for the master's name {} (from {}) to resolve: {} of {}{last}",
                peer.host,
                peer.source,
                secs(start.elapsed()),
                secs(wait.timeout)
            ));
        }
    }
}

/// `600 s`, `2 s`, `0.4 s`.
fn secs(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) || ms >= 10_000 {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// One resolver call's answer.
type Answer = std::io::Result<Vec<IpAddr>>;

/// Start one resolver call for `host` on a helper thread.
fn start_call(host: &str) -> Result<mpsc::Receiver<Answer>, String> {
    let (tx, rx) = mpsc::channel();
    let h = host.to_string();
    std::thread::Builder::new()
        .name("ncclenv-resolve".into())
        .spawn(move || {
            let r = (h.as_str(), 0u16)
                .to_socket_addrs()
                .map(|it| it.map(|sa| sa.ip()).collect::<Vec<_>>());
            let _ = tx.send(r);
        })
        .map_err(|e| format!("cannot start the resolver: {e}"))?;
    Ok(rx)
}

/// The distinct addresses of an answer, or why there are none.
fn answer_addrs(answer: Answer) -> Result<Vec<IpAddr>, String> {
    match answer {
        Ok(mut addrs) => {
            let mut seen = Vec::new();
            addrs.retain(|a| {
                let new = !seen.contains(a);
                seen.push(*a);
                new
            });
            if addrs.is_empty() {
                Err("the resolver returned no address".to_string())
            } else {
                Ok(addrs)
            }
        }
        Err(e) => Err(format!("cannot resolve: {e}")),
    }
}

/// NCCL keeps at most this many bytes of a configuration line's name and of its value (`char envVar[1024]`,
/// `char envValue[1024]` in `setEnvFile`, src/misc/param.cc), and of a configuration file's path
/// (`char confFilePath[1024]` in `initEnv`).
pub const CONF_FIELD_MAX: usize = 1023;

/// Parse an NCCL configuration file exactly as `setEnvFile` does (src/misc/param.cc, NCCL 2.21.5 and 2.27.7;
/// docs/reliability.md), returning the `(name, value)` pairs it hands to `setenv(name, value, 0)`, in file
/// order (so the first one of a name wins, as `setenv(…, 0)` keeps it):
///
/// - a line is what `getline` returns: everything up to and including a `\n`, of any length; the last line
///   may lack the `\n`;
/// - a line starting with `#` is skipped (2.23 and later: `if (line[0] == '#') continue;`; 2.21.5 sets a
///   variable whose name starts with `#`, which no NCCL code reads, so the result is the same);
/// - only a final `\n` is removed: the `\r` of a CRLF file stays in the value (`eth0\r`), as NCCL keeps it;
/// - the name runs to the first `=`; a line without `=`, or with a NUL byte before it (NCCL's C string ends
///   there), is skipped; an empty name is skipped (`setenv` refuses it with `EINVAL`); the name is cut to
///   [`CONF_FIELD_MAX`] bytes (2.23+; older versions overflow their buffer on longer names, which no NCCL
///   variable has);
/// - the value runs from after the `=` to the first NUL byte or the end of the line, cut to
///   [`CONF_FIELD_MAX`] bytes (`strncpy(envValue, …, 1023)`).
///
/// Bytes that are not UTF-8 are replaced (U+FFFD) in the returned text. Never panics, whatever the input.
pub fn parse_conf(text: &[u8]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let end = rest
            .iter()
            .position(|b| *b == b'\n')
            .map_or(rest.len(), |i| i + 1);
        let (mut line, tail) = rest.split_at(end);
        rest = tail;
        if line.first() == Some(&b'#') {
            continue;
        }
        if line.last() == Some(&b'\n') {
            line = &line[..line.len() - 1];
        }
        // The C string ends at the first NUL byte.
        let line = line.split(|b| *b == 0).next().unwrap_or(&[]);
        let Some(eq) = line.iter().position(|b| *b == b'=') else {
            continue;
        };
        if eq == 0 {
            continue;
        }
        let name = &line[..eq.min(CONF_FIELD_MAX)];
        let value = &line[eq + 1..];
        let value = &value[..value.len().min(CONF_FIELD_MAX)];
        out.push((
            String::from_utf8_lossy(name).into_owned(),
            String::from_utf8_lossy(value).into_owned(),
        ));
    }
    out
}

/// `path` as NCCL's 1024-byte buffer holds it (`snprintf(confFilePath, 1024, …)` in `initEnv`): cut to
/// [`CONF_FIELD_MAX`] bytes.
fn nccl_conf_path(path: PathBuf) -> PathBuf {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() <= CONF_FIELD_MAX {
        return path;
    }
    PathBuf::from(std::ffi::OsString::from_vec(
        bytes[..CONF_FIELD_MAX].to_vec(),
    ))
}

/// The configuration files NCCL reads, in the order it applies them (`initEnv`, src/misc/param.cc):
/// `NCCL_CONF_FILE` if set and non-empty, else `<home>/.nccl.conf` (the user's home from the password
/// database, else `HOME`); then `/etc/nccl.conf`. Each path is cut to 1023 bytes as NCCL's buffer cuts it.
/// Every file is read through `probe::read` (non-blocking, regular files only, at most
/// [`read::CONF_FILE_MAX`] bytes) and parsed with [`parse_conf`]. Missing files are left out, and so is one
/// this user may not read (`EACCES`): NCCL's `setEnvFile` returns when `fopen` fails, so NCCL reads nothing
/// from it either (break-it, stop 32: a home the user cannot read made every start fail open). One that
/// cannot be read otherwise (a FIFO, where NCCL's `fopen` would block; `/dev/zero`; a directory; too large)
/// is recorded with its error, which the decision turns into a fail-open warning.
pub fn read_conf_files(env: &BTreeMap<String, String>, etc_dir: &Path) -> Vec<ConfFile> {
    let mut paths: Vec<PathBuf> = Vec::new();
    match env.get("NCCL_CONF_FILE").filter(|v| !v.is_empty()) {
        Some(f) => paths.push(PathBuf::from(f)),
        None => {
            let home = nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map(|u| u.dir)
                .or_else(|| env.get("HOME").map(PathBuf::from));
            if let Some(h) = home {
                paths.push(h.join(".nccl.conf"));
            }
        }
    }
    paths.push(etc_dir.join("nccl.conf"));
    let mut out = Vec::new();
    for p in paths.into_iter().map(nccl_conf_path) {
        match read::read_file(&p, read::CONF_FILE_MAX) {
            Ok(bytes) => out.push(ConfFile {
                path: p.display().to_string(),
                values: parse_conf(&bytes),
                error: None,
            }),
            Err(e) if e.is_missing() => {}
            Err(read::ReadError::Io(e)) if e.kind() == std::io::ErrorKind::PermissionDenied => {}
            Err(e) => out.push(ConfFile {
                path: p.display().to_string(),
                values: vec![],
                error: Some(e.to_string()),
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launcher::{parse_host, parse_host_spec, parse_nnodes, redact_userinfo};
    use proptest::prelude::*;

    fn argv(s: &[&str]) -> Vec<OsString> {
        s.iter().map(OsString::from).collect()
    }

    /// A host's network as plain values: links `(index, name)`, addresses `"A/LEN"` on a link index, main
    /// routes `(dst/len or "default", gateway, oif)` and route lookups `(dest, gateway, local, error)`.
    mod net {
        use crate::snapshot::{Addr, Family, Link, Network, Route, RouteLookup};
        use std::net::IpAddr;

        pub fn ip(s: &str) -> IpAddr {
            s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
        }
        pub fn host(
            links: &[(u32, &str)],
            addrs: &[(u32, &str)],
            routes: &[(&str, Option<&str>, u32)],
        ) -> Network {
            let links = links
                .iter()
                .map(|(i, n)| Link {
                    index: *i,
                    name: n.to_string(),
                    up: true,
                    running: true,
                    ..Link::default()
                })
                .collect();
            let addrs = addrs
                .iter()
                .map(|(i, a)| {
                    let (a, l) = a.split_once('/').unwrap_or((a, "32"));
                    Addr {
                        index: *i,
                        addr: ip(a),
                        prefix_len: l.parse().unwrap_or(32),
                        scope: 0,
                        tentative: false,
                        deprecated: false,
                        dad_failed: false,
                        label: None,
                    }
                })
                .collect();
            let routes = routes
                .iter()
                .map(|(d, gw, oif)| {
                    let dst = (*d != "default").then(|| {
                        let (a, l) = d.split_once('/').unwrap_or((d, "32"));
                        (ip(a), l.parse().unwrap_or(32))
                    });
                    let gateway = gw.map(ip);
                    Route {
                        family: Family::of(&gateway.or(dst.map(|d| d.0)).unwrap_or(ip("0.0.0.0"))),
                        dst,
                        metric: 0,
                        oif: Some(*oif),
                        gateway,
                        linkdown: false,
                        nexthops: vec![],
                        kind: 1,
                        scope: if gateway.is_some() { 0 } else { 253 },
                        prefsrc: None,
                    }
                })
                .collect();
            Network {
                links,
                addrs,
                routes,
                ..Network::default()
            }
        }
        pub fn lookup(
            dest: &str,
            gw: Option<&str>,
            oif: u32,
            local: bool,
            err: bool,
        ) -> RouteLookup {
            RouteLookup {
                dest: ip(dest),
                oif: (!err).then_some(oif),
                prefsrc: None,
                gateway: gw.map(ip),
                local,
                error: err.then(|| "Network is unreachable".to_string()),
                table: (!err).then_some(254),
            }
        }
    }

    fn ordered(addrs: &[&str], n: Option<&crate::snapshot::Network>) -> Vec<String> {
        let a: Vec<IpAddr> = addrs.iter().map(|a| net::ip(a)).collect();
        order_contact(&a, n).iter().map(|a| a.to_string()).collect()
    }

    /// A node with eth0 (10.0.0.2/24, the default route), eth1 (10.81.0.2/24, the job's network), a route to
    /// 10.90.0.0/16 through 10.81.0.254, and Docker's docker0 (172.17.0.1/16).
    fn two_nics_and_docker() -> crate::snapshot::Network {
        net::host(
            &[(1, "lo"), (2, "eth0"), (3, "eth1"), (4, "docker0")],
            &[
                (1, "127.0.0.1/8"),
                (2, "10.0.0.2/24"),
                (3, "10.81.0.2/24"),
                (4, "172.17.0.1/16"),
            ],
            &[
                ("default", Some("10.0.0.1"), 2),
                ("10.0.0.0/24", None, 2),
                ("10.81.0.0/24", None, 3),
                ("10.90.0.0/16", Some("10.81.0.254"), 3),
                ("172.17.0.0/16", None, 4),
            ],
        )
    }

    #[test]
    fn contact_addresses_ordered_by_this_hosts_networks() {
        let n = two_nics_and_docker();
        // connected > non-default gateway > default route > own > no route; docker0's pool after all.
        assert_eq!(
            ordered(
                &[
                    "172.17.0.1",
                    "10.0.0.2",
                    "8.8.8.8",
                    "10.90.1.1",
                    "10.81.0.1"
                ],
                Some(&n)
            ),
            [
                "10.81.0.1",
                "10.90.1.1",
                "8.8.8.8",
                "10.0.0.2",
                "172.17.0.1"
            ]
        );
        // Measured Open MPI 4.1.4 URI order on the mpirun node: eth1's address, then docker0's (which this
        // node owns too): eth1's first; the URI's order kept for equals.
        assert_eq!(
            ordered(&["172.17.0.1", "10.81.0.1"], Some(&n)),
            ["10.81.0.1", "172.17.0.1"]
        );
        assert_eq!(
            ordered(&["10.81.0.7", "10.81.0.1", "fd00::1"], Some(&n)),
            ["10.81.0.7", "10.81.0.1", "fd00::1"]
        );
        // Without a default route an address off every network is "other", after this host's own.
        let mut bare = two_nics_and_docker();
        bare.routes.retain(|r| !r.is_default());
        assert_eq!(
            ordered(&["8.8.8.8", "10.0.0.2"], Some(&bare)),
            ["10.0.0.2", "8.8.8.8"]
        );
        // A Compose network in a Docker pool, connected through the container's veth eth0: not a decoy.
        let compose = net::host(
            &[(1, "lo"), (2, "eth0")],
            &[(2, "172.18.0.3/16")],
            &[
                ("default", Some("172.18.0.1"), 2),
                ("172.18.0.0/16", None, 2),
            ],
        );
        assert_eq!(
            ordered(&["10.99.0.1", "172.18.0.2"], Some(&compose)),
            ["172.18.0.2", "10.99.0.1"]
        );
        // A pool address reached only through the default route is a decoy; so is one connected through a
        // bridge.
        assert_eq!(
            ordered(&["192.168.5.5", "10.99.0.1"], Some(&compose)),
            ["10.99.0.1", "192.168.5.5"]
        );
        // No network known: the pools last, IPv4 before IPv6, else the URI's order.
        assert_eq!(
            ordered(&["172.17.0.1", "fd00::2", "10.81.0.1"], None),
            ["10.81.0.1", "fd00::2", "172.17.0.1"]
        );
    }

    #[test]
    fn the_kernels_lookup_decides_the_reach() {
        let mut n = two_nics_and_docker();
        n.peer_routes = vec![
            // Policy routing sends 10.81.0.1 through a gateway, though eth1's prefix covers it.
            net::lookup("10.81.0.1", Some("10.0.0.1"), 2, false, false),
            net::lookup("10.7.0.1", None, 3, false, false),
            net::lookup("10.90.1.1", None, 0, false, true),
            net::lookup("10.0.0.9", None, 1, true, false),
        ];
        assert_eq!(reach(&net::ip("10.81.0.1"), &n), Reach::Default);
        assert_eq!(reach(&net::ip("10.7.0.1"), &n), Reach::Connected(Some(3)));
        assert_eq!(reach(&net::ip("10.90.1.1"), &n), Reach::Other);
        assert_eq!(reach(&net::ip("10.0.0.9"), &n), Reach::Own);
        assert_eq!(reach(&net::ip("10.81.0.5"), &n), Reach::Connected(Some(3)));
        assert_eq!(reach(&net::ip("10.90.2.2"), &n), Reach::Gateway);
    }

    #[test]
    fn the_contact_uris_best_address_is_the_peer() {
        let n = two_nics_and_docker();
        let uri: Vec<IpAddr> = ["172.17.0.1", "10.81.0.1"]
            .iter()
            .map(|a| net::ip(a))
            .collect();
        let mut with_lookups = n.clone();
        with_lookups.peer_routes = vec![
            net::lookup("172.17.0.1", None, 1, true, false),
            net::lookup("10.81.0.1", None, 3, false, false),
        ];
        let peer = resolve_peer(
            "OMPI_MCA_orte_hnp_uri (Open MPI rank)".into(),
            "172.17.0.1".into(),
            None,
            Duration::ZERO,
        );
        let (p, net) = contact_peer(Some(peer.clone()), &uri, Ok(with_lookups));
        let p = p.unwrap_or_else(|| panic!("a peer"));
        assert_eq!(
            (p.host.as_str(), p.addrs.clone()),
            ("10.81.0.1", vec![net::ip("10.81.0.1")])
        );
        assert_eq!(
            p.source,
            "OMPI_MCA_orte_hnp_uri (Open MPI rank), the one of 172.17.0.1, 10.81.0.1 this host reaches best"
        );
        let dests: Vec<IpAddr> = net
            .map(|n| n.peer_routes.iter().map(|l| l.dest).collect())
            .unwrap_or_default();
        assert_eq!(dests, [net::ip("10.81.0.1")]);
        // A peer not named by a contact URI is left as it is; so is the network.
        let (q, _) = contact_peer(Some(peer.clone()), &[], Ok(n.clone()));
        assert_eq!(q, Some(peer.clone()));
        // The probe failed: the pools last still.
        let (p, net) = contact_peer(Some(peer), &uri, Err("netlink".into()));
        assert_eq!(p.map(|p| p.host), Some("10.81.0.1".to_string()));
        assert!(net.is_err());
    }

    #[test]
    fn a_shell_script_run_directly_is_named_as_not_read() {
        let dir = std::env::temp_dir().join(format!("ncclenv-script-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let file = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).expect("a script");
            p.display().to_string()
        };
        let bash = file("run.sh", "#!/bin/bash\ntorchrun --nnodes=2 t.py\n");
        let envsh = file("env.sh", "#!/usr/bin/env -S bash -e\ntorchrun t.py\n");
        let py = file("run.py", "#!/usr/bin/env python3\nprint(1)\n");
        let none = dir.join("absent.sh").display().to_string();
        let jc = |words: &[&str]| job_command(&argv(words), &[], &BTreeMap::new());
        let script = |words: &[&str]| direct_script(&jc(words));
        assert_eq!(
            jc(&[&bash]).script,
            None,
            "a job's start reads no file of its command"
        );
        assert_eq!(script(&[&bash]), Some(bash.clone()));
        assert_eq!(script(&["nohup", &envsh]), Some(envsh.clone()));
        assert_eq!(
            script(&[&py]),
            None,
            "a Python script is not a shell script"
        );
        assert_eq!(script(&[&none]), None, "a file that is not there");
        assert_eq!(
            script(&["run.sh"]),
            None,
            "a bare name is found through PATH, not read"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Break-it finding: `sh -c 'cd /w && exec "$@"' sh accelerate launch …` was shown as `exec: ***@
    /// accelerate …` and read no master; a `$@` ncclenv does not expand is shown as written, a URL's password
    /// still is not.
    #[test]
    fn the_entrypoint_idiom_reads_the_launcher_and_shows_dollar_at() {
        let cmd = [
            "sh",
            "-c",
            "cd /w && exec \"$@\"",
            "sh",
            "accelerate",
            "launch",
            "--num_machines",
            "2",
            "--main_process_ip",
            "10.4.4.4",
            "t.py",
        ];
        let jc = job_command(&argv(&cmd), &[], &BTreeMap::new());
        assert_eq!(
            jc.wrapper.as_deref(),
            Some("sh -c, exec: accelerate launch --num_machines 2 --main_process_ip 10.4.4.4 t.py")
        );
        let (peer, shape) = through_shell(&cmd, &[]);
        assert_eq!(peer.map(|p| p.value.host), Some("10.4.4.4".to_string()));
        assert_eq!(shape.nnodes, Some(2));
        let jc = job_command(
            &argv(&[
                "bash",
                "-c",
                "exec \"${@:2}\" --rdzv_endpoint=etcd://u:S3CR3T@$H:2379",
            ]),
            &[],
            &BTreeMap::new(),
        );
        assert_eq!(
            jc.wrapper.as_deref(),
            Some("bash -c, exec: ${@:2} --rdzv_endpoint=etcd://***@$H:2379")
        );
    }

    /// Break-it finding: `sh -c "cd /w && accelerate launch --config_file acc.yaml"` read `acc.yaml` from
    /// ncclenv's own directory, not from `/w`.
    #[test]
    fn a_relative_config_file_is_read_where_the_shell_cds_to() {
        let dir = std::env::temp_dir().join(format!("ncclenv-cwd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        std::fs::write(
            dir.join("acc.yaml"),
            "main_process_ip: 10.9.0.1\nnum_machines: 2\n",
        )
        .expect("the config file");
        let (parent, name) = (
            dir.parent()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            dir.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
        let vars = [("HOME", "/nonexistent")];
        for line in [
            format!("cd {} && accelerate launch --config_file acc.yaml t.py", dir.display()),
            format!("cd {parent}; cd -P {name} && exec accelerate launch --config_file=acc.yaml t.py"),
            format!("env -C {parent} sh -c 'cd {name} && accelerate launch --config_file acc.yaml t.py'"),
            format!("env --chdir={} accelerate launch --config_file acc.yaml t.py", dir.display()),
        ] {
            let (p, s) = through_shell(&["sh", "-c", &line], &vars);
            assert_eq!(p.map(|p| p.value.host).as_deref(), Some("10.9.0.1"), "{line}");
            assert_eq!(s.nnodes, Some(2), "{line}");
        }
        // Control: without the cd the file is not found (named, so a problem), and no master.
        let (p, s) = through_shell(
            &["sh", "-c", "accelerate launch --config_file acc.yaml t.py"],
            &vars,
        );
        assert!(p.is_none() && !s.problems.is_empty(), "{:?}", s.problems);
        // A directory ncclenv cannot follow: said, never guessed.
        let line = format!(
            "cd {} && cd - && accelerate launch --config_file acc.yaml t.py",
            dir.display()
        );
        let (p, s) = through_shell(&["sh", "-c", &line], &vars);
        assert!(p.is_none(), "{line}");
        assert!(
            s.problems.iter().any(|m| m.contains("cannot follow (cd -")),
            "{:?}",
            s.problems
        );
        // The runners' files too: mpirun's relative hostfile, DeepSpeed's `./.deepspeed_env` and its
        // `~/.deepspeed_env` from the HOME the command receives (they were read from ncclenv's own directory
        // and HOME).
        std::fs::write(dir.join("hf"), "a slots=1\nb slots=1\nc\n").expect("the hostfile");
        std::fs::write(dir.join("ds"), "a slots=1\nb slots=1\n").expect("the DeepSpeed hostfile");
        std::fs::write(dir.join(".deepspeed_env"), "NCCL_SOCKET_IFNAME=ens5\n")
            .expect("the env file");
        let line = format!(
            "cd {} && mpirun --hostfile hf -np 3 python t.py",
            dir.display()
        );
        let (_, s) = through_shell(&["sh", "-c", &line], &vars);
        assert_eq!(s.nnodes, Some(3), "{line}: {:?}", s.problems);
        let line = format!("cd {} && deepspeed --hostfile ds t.py", dir.display());
        let (_, s) = through_shell(&["sh", "-c", &line], &vars);
        let file = s.spread.and_then(|sp| sp.env_file_ifname);
        assert_eq!(file.map(|f| f.1).as_deref(), Some("ens5"), "{line}");
        let home = [("HOME", dir.to_str().unwrap_or_default())];
        let (_, s) = through_shell(
            &[
                "deepspeed",
                "--hostfile",
                &format!("{}/ds", dir.display()),
                "t.py",
            ],
            &home,
        );
        let file = s.spread.and_then(|sp| sp.env_file_ifname);
        assert_eq!(
            file.map(|f| f.1).as_deref(),
            Some("ens5"),
            "~/.deepspeed_env from the job's HOME"
        );
        // HOME and DS_ENV_FILE as the wrapper assigns them (break-it, stop 32: they were ignored).
        std::fs::write(dir.join("custom_env"), "NCCL_SOCKET_IFNAME=ib0\n")
            .expect("the custom env file");
        let ds = format!("{}/ds", dir.display());
        for line in [
            format!("HOME={} deepspeed --hostfile {ds} t.py", dir.display()),
            format!("env HOME={} deepspeed --hostfile {ds} t.py", dir.display()),
        ] {
            let (_, s) = through_shell(&["sh", "-c", &line], &[("HOME", "/nonexistent")]);
            let file = s.spread.and_then(|sp| sp.env_file_ifname);
            assert_eq!(file.map(|f| f.1).as_deref(), Some("ens5"), "{line}");
        }
        let line = format!(
            "cd {} && DS_ENV_FILE=custom_env deepspeed --hostfile ds t.py",
            dir.display()
        );
        let (_, s) = through_shell(&["sh", "-c", &line], &vars);
        let file = s.spread.and_then(|sp| sp.env_file_ifname);
        assert_eq!(file.map(|f| f.1).as_deref(), Some("ib0"), "{line}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The job's facts read as `probe::collect` reads them: `cmd` through its shells, with the inherited
    /// `vars` (recorded as the snapshot records them).
    fn through_shell(cmd: &[&str], vars: &[(&str, &str)]) -> (Option<Sourced<Endpoint>>, JobShape) {
        let vars: Vec<(OsString, OsString)> = vars
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect();
        let env = record_env(vars.iter().cloned());
        let jc = job_command(&argv(cmd), &vars, &env);
        job(
            None,
            None,
            &jc.argv,
            jc.env.as_ref().unwrap_or(&env),
            jc.cwd.as_deref(),
        )
    }

    /// #21 item 1: a shell's leading `VAR=value` assignments are the job's environment for the orchestrator
    /// table too: SageMaker's interface, the LeaderWorkerSet, Slurm and AWS Batch rows; an exported
    /// `MASTER_ADDR` in front of `srun` still wins over Slurm's node list.
    #[test]
    fn shell_assignments_reach_the_orchestrator_table() {
        let (_, s) = through_shell(
            &[
                "sh",
                "-c",
                "SM_NETWORK_INTERFACE_NAME=eth1 torchrun --nnodes=2 t.py",
            ],
            &[],
        );
        assert_eq!(
            s.platform_interface,
            Some((
                "SM_NETWORK_INTERFACE_NAME".into(),
                "eth1".into(),
                "SageMaker".into()
            ))
        );
        // The assignment wins over the inherited value, as the shell exports it.
        let (_, s) = through_shell(
            &["bash", "-c", "SM_NETWORK_INTERFACE_NAME=eth1 python t.py"],
            &[("SM_NETWORK_INTERFACE_NAME", "eth0")],
        );
        assert_eq!(s.platform_interface.map(|p| p.1), Some("eth1".to_string()));
        // A value the shell computes is unknown: not the interface.
        let (_, s) = through_shell(
            &[
                "sh",
                "-c",
                "SM_NETWORK_INTERFACE_NAME=$(cat /x) python t.py",
            ],
            &[],
        );
        assert_eq!(s.platform_interface, None);
        let host = |p: Option<Sourced<Endpoint>>| p.map(|p| (p.value.host, p.source));
        let (p, s) = through_shell(
            &["sh", "-c", "MASTER_ADDR=10.0.0.1 srun python t.py"],
            &[
                ("SLURM_JOB_NODELIST", "gpu[01-02]"),
                ("SLURM_NNODES", "2"),
                ("SLURM_NODEID", "1"),
            ],
        );
        assert_eq!(host(p), Some(("10.0.0.1".into(), "MASTER_ADDR".into())));
        assert_eq!((s.nnodes, s.node_rank), (Some(2), Some(1)));
        let (p, s) = through_shell(
            &[
                "sh",
                "-c",
                "SLURM_JOB_NODELIST=gpu[07-08] SLURM_JOB_NUM_NODES=2 python t.py",
            ],
            &[],
        );
        assert_eq!(
            host(p),
            Some(("gpu07".into(), "SLURM_JOB_NODELIST (Slurm)".into()))
        );
        assert_eq!(s.nnodes, Some(2));
        let (p, s) = through_shell(
            &["sh", "-c", "cd /w && LWS_LEADER_ADDRESS=lead.svc LWS_GROUP_SIZE=4 LWS_WORKER_INDEX=2 python t.py"],
            &[],
        );
        assert_eq!(
            host(p),
            Some((
                "lead.svc".into(),
                "LWS_LEADER_ADDRESS (LeaderWorkerSet)".into()
            ))
        );
        assert_eq!((s.nnodes, s.node_rank), (Some(4), Some(2)));
        let (p, s) = through_shell(
            &["sh", "-c", "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS=10.3.0.4 AWS_BATCH_JOB_NUM_NODES=3 python t.py"],
            &[],
        );
        assert_eq!(host(p).map(|h| h.0), Some("10.3.0.4".to_string()));
        assert_eq!(s.nnodes, Some(3));
    }

    #[test]
    fn a_configured_peer_drops_the_contact_uri() {
        let env: BTreeMap<String, String> = [
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "1"),
            ("OMPI_MCA_orte_hnp_uri", "1.0;tcp://172.17.0.1,10.81.0.1:5"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let (_, shape) = job(None, None, &[], &env, None);
        assert_eq!(shape.contact_addrs.len(), 2);
        let (p, shape) = job(Some(("10.5.0.1", "NCCLENV_PEER")), None, &[], &env, None);
        assert_eq!(p.map(|p| p.value.host), Some("10.5.0.1".to_string()));
        assert!(shape.contact_addrs.is_empty());
    }
    fn find_peer_checked(
        cfg: Option<&str>,
        cmd: &[OsString],
        env: &BTreeMap<String, String>,
    ) -> (Option<(String, String)>, Vec<String>) {
        let (peer, shape) = job(cfg.map(|c| (c, "NCCLENV_PEER")), None, cmd, env, None);
        (peer.map(|p| (p.source, p.value.host)), shape.problems)
    }
    fn find_peer(
        cfg: Option<&str>,
        cmd: &[OsString],
        env: &BTreeMap<String, String>,
    ) -> Option<(String, String)> {
        find_peer_checked(cfg, cmd, env).0
    }
    fn job_shape(cfg: Option<u32>, cmd: &[OsString], env: &BTreeMap<String, String>) -> JobShape {
        job(None, cfg, cmd, env, None).1
    }

    #[test]
    fn hosts_lose_scheme_port_and_brackets() {
        assert_eq!(parse_host("10.0.0.1:8090").as_deref(), Some("10.0.0.1"));
        assert_eq!(
            parse_host("etcd://m.example:2379").as_deref(),
            Some("m.example")
        );
        assert_eq!(parse_host("[fd00::1]:29500").as_deref(), Some("fd00::1"));
        assert_eq!(parse_host("fd00::1").as_deref(), Some("fd00::1"));
        assert_eq!(parse_host("host").as_deref(), Some("host"));
        assert_eq!(parse_host(":8090"), None);
        assert_eq!(parse_host(""), None);
        assert_eq!(parse_host("a b"), None);
    }

    #[test]
    fn peer_order_flag_then_launcher_then_env() {
        let mut env = BTreeMap::new();
        env.insert("MASTER_ADDR".to_string(), "10.0.0.9".to_string());
        let cmd = argv(&[
            "python",
            "-m",
            "paddle.distributed.launch",
            "--master=10.1.0.1:8090",
            "t.py",
        ]);
        assert_eq!(
            find_peer(Some("10.2.0.1"), &cmd, &env),
            Some(("NCCLENV_PEER".into(), "10.2.0.1".into()))
        );
        assert_eq!(
            find_peer(None, &cmd, &env),
            Some(("--master".into(), "10.1.0.1".into()))
        );
        let cmd = argv(&["torchrun", "--rdzv-endpoint", "m:29400", "t.py"]);
        assert_eq!(
            find_peer(None, &cmd, &env),
            Some(("--rdzv-endpoint".into(), "m".into()))
        );
        let cmd = argv(&["python", "t.py", "--master=10.1.0.1"]);
        assert_eq!(
            find_peer(None, &cmd, &env),
            Some(("MASTER_ADDR".into(), "10.0.0.9".into()))
        );
        let cmd = argv(&["launch", "--ips", "10.3.0.1,10.3.0.2"]);
        assert_eq!(
            find_peer(None, &cmd, &BTreeMap::new()),
            Some(("--ips".into(), "10.3.0.1".into()))
        );
    }

    #[test]
    fn shape_from_nnodes_ips_and_env() {
        let e = BTreeMap::new();
        assert_eq!(
            job_shape(None, &argv(&["x", "--nnodes=2"]), &e).nnodes,
            Some(2)
        );
        assert_eq!(
            job_shape(None, &argv(&["x", "--nnodes", "1:4"]), &e).nnodes,
            Some(4)
        );
        assert_eq!(
            job_shape(None, &argv(&["x", "--nnodes=1"]), &e).nnodes,
            Some(1)
        );
        assert_eq!(
            job_shape(Some(3), &argv(&["x", "--nnodes=1"]), &e).nnodes,
            Some(3)
        );
        let s = job_shape(None, &argv(&["x", "--ips=a,b"]), &e);
        assert_eq!((s.nnodes, s.ips.len()), (Some(2), 2));
        let s = job_shape(None, &argv(&["x", "--nnodes=abc"]), &e);
        assert_eq!(s.nnodes, None);
        assert_eq!(s.problems.len(), 1);
        let mut e = BTreeMap::new();
        e.insert(
            "PADDLE_TRAINER_ENDPOINTS".into(),
            "10.0.0.1:1,10.0.0.2:1,10.0.0.1:2".into(),
        );
        assert_eq!(job_shape(None, &argv(&["x"]), &e).nnodes, Some(2));
        e.insert("PADDLE_NNODES".into(), "1".into());
        assert_eq!(job_shape(None, &argv(&["x"]), &e).nnodes, Some(1));
        assert_eq!(
            job_shape(None, &argv(&["x"]), &BTreeMap::new()).nnodes,
            None
        );
    }

    #[test]
    fn host_specs_reject_bad_ports_and_unclosed_brackets() {
        for (spec, why) in [
            ("10.0.0.1:abc", "port"),
            ("10.0.0.1:99999", "port"),
            ("10.0.0.1:0", "port"),
            ("10.0.0.1:", "port"),
            ("[fd00::1", "not closed"),
            ("[fd00::1]29500", "after ']'"),
            (":29500", "no host"),
            ("", "no host"),
            ("a b", "not a host"),
            // Words nobody expanded, options, empty labels (break-it finding).
            ("$(MASTER_ADDR)", "not a host"),
            ("${MASTER_ADDR}:29500", "not a host"),
            ("$HOST", "not a host"),
            ("-x", "not a host"),
            ("a..b", "not a host"),
        ] {
            let e = parse_host_spec(spec).expect_err(spec);
            assert!(e.contains(why), "{spec}: {e}");
            assert_eq!(parse_host(spec), None, "{spec}");
        }
        assert_eq!(parse_host_spec("m:65535").as_deref(), Ok("m"));
        for host in [
            "master-0.job.svc.cluster.local",
            "node_a",
            "fe80::1%eth0",
            "10.0.0.1",
            "fd00::1",
            "m.",
        ] {
            assert_eq!(parse_host_spec(host).as_deref(), Ok(host), "{host}");
        }
        assert_eq!(parse_host_spec("[fd00::1]").as_deref(), Ok("fd00::1"));
        assert_eq!(
            parse_host_spec("etcd://10.0.0.1:2379/v3").as_deref(),
            Ok("10.0.0.1")
        );
    }

    #[test]
    fn bad_peer_values_become_problems_not_silence() {
        let mut env = BTreeMap::new();
        env.insert("MASTER_ADDR".to_string(), "a b".to_string());
        let (peer, problems) = find_peer_checked(None, &argv(&["python", "t.py"]), &env);
        assert_eq!(peer, None);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("MASTER_ADDR="), "{problems:?}");

        env.insert("MASTER_ADDR".to_string(), ":29500".to_string());
        let (peer, problems) = find_peer_checked(None, &argv(&["python", "t.py"]), &env);
        assert_eq!(peer, None);
        assert!(
            problems.len() == 1 && problems[0].contains("no host"),
            "{problems:?}"
        );

        // A bad --master is reported and the next source is used.
        env.insert("MASTER_ADDR".to_string(), "10.0.0.9".to_string());
        let cmd = argv(&[
            "python",
            "-m",
            "paddle.distributed.launch",
            "--master=:8090",
            "t.py",
        ]);
        let (peer, problems) = find_peer_checked(None, &cmd, &env);
        assert_eq!(peer, Some(("MASTER_ADDR".into(), "10.0.0.9".into())));
        assert!(
            problems.len() == 1 && problems[0].contains("--master"),
            "{problems:?}"
        );
        let cmd = argv(&["torchrun", "--master-addr", "[fd00::1", "t.py"]);
        let (_, problems) = find_peer_checked(None, &cmd, &env);
        assert!(problems[0].contains("not closed"), "{problems:?}");

        // Sources after the one used are not looked at; a good value reports nothing.
        env.insert("PADDLE_TRAINER_ENDPOINTS".to_string(), "x:abc".to_string());
        let (peer, problems) = find_peer_checked(None, &argv(&["python"]), &env);
        assert_eq!(peer, Some(("MASTER_ADDR".into(), "10.0.0.9".into())));
        assert!(problems.is_empty(), "{problems:?}");
    }

    #[test]
    fn nnodes_ranges_and_standalone() {
        assert_eq!(parse_nnodes("1:4"), Ok(4));
        assert_eq!(parse_nnodes("3"), Ok(3));
        assert!(parse_nnodes("2:1").expect_err("2:1").contains("minimum 2"));
        assert!(parse_nnodes("0:1").is_err());
        assert!(parse_nnodes("x:2").is_err());
        assert!(parse_nnodes("1:2:3").is_err());
        let e = BTreeMap::new();
        let s = job_shape(None, &argv(&["torchrun", "--nnodes", "2:1", "t.py"]), &e);
        assert_eq!(s.nnodes, None);
        assert!(
            s.problems.len() == 1 && s.problems[0].contains("--nnodes"),
            "{s:?}"
        );
        // torchrun --standalone: one node.
        let s = job_shape(
            None,
            &argv(&["torchrun", "--standalone", "--nproc-per-node=8", "t.py"]),
            &e,
        );
        assert_eq!(
            (s.nnodes, s.source.as_deref()),
            (Some(1), Some("--standalone"))
        );
        // After the script it belongs to the script.
        let s = job_shape(None, &argv(&["torchrun", "t.py", "--standalone"]), &e);
        assert_eq!(s.nnodes, None);
        // ncclenv's own --nnodes/NCCLENV_NNODES wins, and says where it came from.
        let s = job_shape(Some(2), &argv(&["torchrun", "--standalone", "t.py"]), &e);
        assert_eq!(
            (s.nnodes, s.source.as_deref()),
            (Some(2), Some("--nnodes/NCCLENV_NNODES"))
        );
    }

    /// `setEnvFile` (src/misc/param.cc, 2.27.7) transliterated: `getline`, the `#` test, the `\n` cut, the
    /// scan for `=` or NUL, `strncpy` into 1024-byte buffers, and `setenv` refusing an empty name. The
    /// reference the parser is compared with.
    fn set_env_file_model(file: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let strncpy = |src: &[u8], n: usize| -> Vec<u8> {
            src.iter()
                .take(n)
                .take_while(|c| **c != 0)
                .copied()
                .collect()
        };
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < file.len() {
            let mut line: Vec<u8> = Vec::new();
            while pos < file.len() {
                let c = file[pos];
                pos += 1;
                line.push(c);
                if c == b'\n' {
                    break;
                }
            }
            let read = line.len();
            line.push(0);
            if line[0] == b'#' {
                continue;
            }
            if line[read - 1] == b'\n' {
                line[read - 1] = 0;
            }
            let mut s = 0;
            while line[s] != 0 && line[s] != b'=' {
                s += 1;
            }
            if line[s] == 0 {
                continue;
            }
            let var = strncpy(&line, s.min(1023));
            let value = strncpy(&line[s + 1..], 1023);
            if var.is_empty() {
                continue; // setenv("", …) fails with EINVAL
            }
            out.push((var, value));
        }
        out
    }

    #[test]
    fn conf_files_keep_cr_nul_and_long_lines_as_nccl_does() {
        let v = parse_conf(b"NCCL_SOCKET_IFNAME=eth0\r\nA=x\0y\nB\0=z\n\n#C=1\nD=");
        assert_eq!(
            v,
            vec![
                ("NCCL_SOCKET_IFNAME".to_string(), "eth0\r".to_string()),
                ("A".to_string(), "x".to_string()),
                ("D".to_string(), String::new()),
            ]
        );
        let long = format!("V={}\n", "x".repeat(5000));
        assert_eq!(parse_conf(long.as_bytes())[0].1.len(), 1023);
        let long = format!("{}=v\n", "N".repeat(5000));
        assert_eq!(parse_conf(long.as_bytes())[0].0.len(), 1023);
    }

    #[test]
    fn conf_files_parse_like_nccl() {
        let v = parse_conf(b"NCCL_SOCKET_IFNAME=eth0\n# c=1\nNCCL_DEBUG= INFO \nnoequals\n=x\n");
        assert_eq!(
            v,
            vec![
                ("NCCL_SOCKET_IFNAME".to_string(), "eth0".to_string()),
                ("NCCL_DEBUG".to_string(), " INFO ".to_string())
            ]
        );
    }

    #[test]
    fn proxies_are_redacted_and_secrets_not_recorded() {
        let vars = vec![
            (
                OsString::from("HTTP_PROXY"),
                OsString::from("http://u:p@proxy:3128"),
            ),
            (OsString::from("AWS_SECRET_ACCESS_KEY"), OsString::from("s")),
            (OsString::from("NCCL_DEBUG"), OsString::from("INFO")),
        ];
        let r = record_env(vars);
        assert_eq!(
            r.get("HTTP_PROXY").map(String::as_str),
            Some("http://***@proxy:3128")
        );
        assert!(!r.contains_key("AWS_SECRET_ACCESS_KEY"));
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn resolves_literals_and_retries_failures_until_the_deadline() {
        let p = resolve_peer(
            "x".into(),
            "10.0.0.1".into(),
            Some(80),
            Duration::from_millis(10),
        );
        assert_eq!(p.addrs, vec!["10.0.0.1".parse::<IpAddr>().expect("ip")]);
        assert_eq!((p.resolve_attempts, p.port), (0, Some(80)));
        let p = resolve_peer(
            "x".into(),
            "localhost".into(),
            None,
            Duration::from_millis(2000),
        );
        assert!(
            p.addrs.iter().all(|a| a.is_loopback()) && !p.addrs.is_empty(),
            "{p:?}"
        );
        assert_eq!(p.resolve_attempts, 1);
        // `.invalid` never resolves (RFC 6761): retried until the deadline, then the last error.
        let p = resolve_peer(
            "x".into(),
            "no-such-host.invalid".into(),
            None,
            Duration::from_millis(400),
        );
        assert!(p.addrs.is_empty() && p.error.is_some(), "{p:?}");
        assert!(p.resolve_ms >= 400, "{p:?}");
        assert!(p.resolve_attempts >= 2, "{p:?}");
    }

    #[test]
    fn a_wait_says_the_name_at_once_then_every_interval() {
        let mut lines: Vec<String> = Vec::new();
        let mut say = |l: &str| lines.push(l.to_string());
        let wait = ResolveWait {
            timeout: Duration::from_millis(450),
            bound: "the bound",
            every: Duration::from_millis(100),
            say: &mut say,
        };
        let p = resolve_peer_waiting(
            "MASTER_ADDR".into(),
            "late-master.invalid".into(),
            None,
            wait,
        );
        assert!(p.addrs.is_empty(), "{p:?}");
        let first = lines.first().map(String::as_str).unwrap_or_default();
        assert!(
            first.starts_with("waiting up to 0.5 s for the master's name late-master.invalid (from MASTER_ADDR) to resolve (the bound); last: "),
            "{lines:?}"
        );
        let still = lines
            .iter()
            .filter(|l| l.starts_with("still waiting for the master's name late-master.invalid"))
            .count();
        assert!((3..=4).contains(&still), "{lines:?}");
        // An address literal never waits and says nothing.
        let mut lines: Vec<String> = Vec::new();
        let mut say = |l: &str| lines.push(l.to_string());
        let wait = ResolveWait {
            timeout: Duration::from_secs(600),
            bound: "b",
            every: Duration::from_millis(1),
            say: &mut say,
        };
        let p = resolve_peer_waiting("x".into(), "fd00::1".into(), None, wait);
        assert_eq!((p.resolve_attempts, lines.len()), (0, 0));
    }

    /// Generated cases of the configuration-file property test (docs/reliability.md).
    const PROPTEST_CONF_CASES: u32 = 4000;
    /// Generated cases of the launcher-argument property test (docs/reliability.md).
    const PROPTEST_LAUNCHER_CASES: u32 = 3000;

    fn conf_bytes() -> impl Strategy<Value = Vec<u8>> {
        let byte = prop_oneof![
            8 => proptest::sample::select(b"N_CLSOKETIFAMe0=#\n\r\0 ,^".to_vec()),
            1 => any::<u8>(),
        ];
        let piece = prop_oneof![
            10 => proptest::collection::vec(byte, 1..12),
            1 => (1usize..1500, proptest::sample::select(b"x=\0".to_vec()))
                .prop_map(|(n, b)| vec![b; n]),
            3 => Just(b"NCCL_SOCKET_IFNAME=".to_vec()),
        ];
        proptest::collection::vec(piece, 0..40).prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(PROPTEST_CONF_CASES))]

        /// The parser gives exactly what `setEnvFile` would hand to `setenv`.
        #[test]
        fn conf_files_parse_exactly_as_set_env_file(file in conf_bytes()) {
            let want: Vec<(String, String)> = set_env_file_model(&file)
                .into_iter()
                .map(|(k, v)| (String::from_utf8_lossy(&k).into_owned(), String::from_utf8_lossy(&v).into_owned()))
                .collect();
            prop_assert_eq!(parse_conf(&file), want);
        }
    }

    fn arg_bytes() -> impl Strategy<Value = OsString> {
        use std::os::unix::ffi::OsStringExt;
        let word = prop_oneof![
            3 => proptest::sample::select(vec![
                "--master", "--ips", "--nnodes", "--master-addr", "--master_addr", "--rdzv-endpoint",
                "--rdzv_endpoint", "--standalone", "t.py", "=", ":", ",", "[", "]", "::1", "10.0.0.1", "2:1",
                "0", "65536", "tcp://", "/", " ",
            ]).prop_map(|s| s.as_bytes().to_vec()),
            2 => proptest::collection::vec(any::<u8>(), 0..12),
        ];
        proptest::collection::vec(word, 0..4).prop_map(|w| OsString::from_vec(w.concat()))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(PROPTEST_LAUNCHER_CASES))]

        /// Launcher arguments and variables of any bytes: the public parsers never panic, a peer found is a
        /// host without whitespace or control characters, and a node count is at least 1.
        #[test]
        fn launcher_arguments_of_any_bytes(
            args in proptest::collection::vec(arg_bytes(), 0..8),
            v in arg_bytes(),
            peer in proptest::option::of(arg_bytes()),
        ) {
            let text = v.to_string_lossy().into_owned();
            let mut env = BTreeMap::new();
            for k in ["PADDLE_TRAINER_ENDPOINTS", "PADDLE_NNODES", "MASTER_ADDR", "PADDLE_MASTER"] {
                env.insert(k.to_string(), text.clone());
            }
            let peer = peer.map(|p| p.to_string_lossy().into_owned());
            let (found, _problems) = find_peer_checked(peer.as_deref(), &args, &env);
            if let Some((_, host)) = found {
                prop_assert!(!host.is_empty());
                prop_assert!(!host.chars().any(|c| c.is_whitespace() || c.is_control()), "{:?}", host);
            }
            let shape = job_shape(None, &args, &env);
            prop_assert!(shape.nnodes.is_none_or(|n| n >= 1));
            if let Ok(n) = parse_nnodes(&text) { prop_assert!(n >= 1); }
            let _ = redact_userinfo(&text);
            let _ = launcher::parse_endpoint(&text);
            let strings: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
            let _ = launcher::detect(&strings);
        }
    }

    proptest! {
        #[test]
        fn launcher_parsers_never_panic(args in proptest::collection::vec(".{0,24}", 0..8), v in ".{0,32}") {
            let a: Vec<OsString> = args.iter().map(OsString::from).collect();
            let mut env = BTreeMap::new();
            env.insert("PADDLE_TRAINER_ENDPOINTS".to_string(), v.clone());
            env.insert("PADDLE_NNODES".to_string(), v.clone());
            env.insert("MASTER_ADDR".to_string(), v.clone());
            let _ = find_peer(Some(&v), &a, &env);
            let _ = job_shape(None, &a, &env);
            let _ = parse_nnodes(&v);
            let _ = parse_host(&v);
            let _ = redact_userinfo(&v);
            let _ = parse_conf(v.as_bytes());
        }
    }
}
