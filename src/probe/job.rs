//! The job: its peer (the master), its shape (how many nodes), the inherited variables that matter, and NCCL's
//! configuration files. Reads the command's own arguments the way the launchers do (NCCL-FACTS §8).

use crate::snapshot::{ConfFile, Framework, JobShape, Peer};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::{IpAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

/// Variables recorded in the snapshot by exact name. Anything else is never recorded (secrets).
const RECORDED: &[&str] = &[
    "GLOO_SOCKET_IFNAME",
    "TP_SOCKET_IFNAME",
    "POD_IP",
    "MASTER_ADDR",
    "MASTER_PORT",
    "PADDLE_MASTER",
    "PADDLE_NNODES",
    "PADDLE_TRAINER_ENDPOINTS",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "FI_PROVIDER",
    "NO_PROXY",
    "no_proxy",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "HOME",
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
    name.starts_with("NCCL_") || RECORDED.contains(&name) || PROXY_VARS.contains(&name)
}

/// Remove `user:password@` from a proxy URL so that it can be recorded and reported.
pub fn redact_proxy(value: &str) -> String {
    let (scheme, rest) = match value.find("://") {
        Some(i) => (&value[..i + 3], &value[i + 3..]),
        None => ("", value),
    };
    let host_end = rest.find('/').unwrap_or(rest.len());
    match rest[..host_end].rfind('@') {
        Some(at) => format!("{scheme}***@{}", &rest[at + 1..]),
        None => value.to_string(),
    }
}

/// Record the relevant inherited variables (see [`is_recorded`]). Non-UTF-8 values are recorded lossily (they
/// pass to the command unchanged; only the record is lossy).
pub fn record_env<I: IntoIterator<Item = (OsString, OsString)>>(
    vars: I,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (k, v) in vars {
        let Some(k) = k.to_str() else { continue };
        if !is_recorded(k) {
            continue;
        }
        let v = v.to_string_lossy().into_owned();
        let v = if PROXY_VARS.contains(&k) {
            redact_proxy(&v)
        } else {
            v
        };
        out.insert(k.to_string(), v);
    }
    out
}

/// Parse `host[:port]`, `[v6]:port`, `[v6]` or a bare IPv6 address, after an optional scheme (`etcd://`,
/// `tcp://`) and before an optional `/path`, into the host alone. A port, when written, is 1 to 65535 in
/// digits; a `[` must close. The error is a short reason for a message.
pub fn parse_host_spec(spec: &str) -> Result<String, String> {
    let s = spec.trim();
    let s = match s.find("://") {
        Some(i) => &s[i + 3..],
        None => s,
    };
    let s = s.split('/').next().unwrap_or("");
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return Err("the '[' is not closed by ']'".into());
        };
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(p) => (host, Some(p)),
                None => return Err(format!("unexpected {after:?} after ']'")),
            },
        }
    } else if s.matches(':').count() > 1 {
        // A bare IPv6 address: no port can be told apart.
        (s, None)
    } else {
        match s.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    if host
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '[' || c == ']')
    {
        return Err(format!("{host:?} is not a host name or address"));
    }
    if let Some(p) = port {
        let ok = !p.is_empty()
            && p.len() <= 5
            && p.bytes().all(|b| b.is_ascii_digit())
            && p.parse::<u32>().is_ok_and(|n| (1..=65535).contains(&n));
        if !ok {
            return Err(format!("port {p:?} is not a number from 1 to 65535"));
        }
    }
    Ok(host.to_string())
}

/// [`parse_host_spec`] without the reason: `None` for anything it rejects (an empty host, a bad port, an
/// unclosed `[`).
pub fn parse_host(spec: &str) -> Option<String> {
    parse_host_spec(spec).ok()
}

/// The launcher options read from the command, each with its value: `--name value` or `--name=value`, and
/// torchrun's `--standalone` (with an empty value). Scanning stops at the training script (the first `*.py` argument after the program), after which
/// arguments belong to the script.
fn launcher_options(argv: &[OsString]) -> Vec<(String, String)> {
    const NAMES: &[&str] = &[
        "--master",
        "--ips",
        "--nnodes",
        "--master-addr",
        "--master_addr",
        "--rdzv-endpoint",
        "--rdzv_endpoint",
    ];
    let args: Vec<String> = argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if i >= 1 && a.ends_with(".py") && !a.starts_with('-') {
            break;
        }
        if let Some((name, value)) = a.split_once('=') {
            if NAMES.contains(&name) {
                out.push((name.to_string(), value.to_string()));
            }
        } else if NAMES.contains(&a.as_str()) {
            if let Some(v) = args.get(i + 1) {
                out.push((a.clone(), v.clone()));
                i += 1;
            }
        } else if a == "--standalone" {
            // torchrun's single-node switch takes no value.
            out.push((a.clone(), String::new()));
        }
        i += 1;
    }
    out
}

/// Find the job's peer (master): `NCCLENV_PEER` (`cfg_peer`); else the launcher's arguments (`--master`, the
/// first host of `--ips`, `--master-addr`/`--master_addr`, `--rdzv-endpoint`); else `PADDLE_MASTER`,
/// `MASTER_ADDR`, the first host of `PADDLE_TRAINER_ENDPOINTS`. Returns (source, host) without resolving.
pub fn find_peer(
    cfg_peer: Option<&str>,
    argv: &[OsString],
    env: &BTreeMap<String, String>,
) -> Option<(String, String)> {
    find_peer_checked(cfg_peer, argv, env).0
}

/// [`find_peer`], and one sentence for each launcher argument or variable looked at before the peer was found
/// whose value is not a host (`MASTER_ADDR='a b'`, `--master=:8090`): it is skipped, and the sentences go to
/// [`JobShape::problems`] (`launcher-argument` warnings) instead of being dropped silently.
pub fn find_peer_checked(
    cfg_peer: Option<&str>,
    argv: &[OsString],
    env: &BTreeMap<String, String>,
) -> (Option<(String, String)>, Vec<String>) {
    let mut problems = Vec::new();
    if let Some(p) = cfg_peer.and_then(parse_host) {
        return (Some(("NCCLENV_PEER".into(), p)), problems);
    }
    let opts = launcher_options(argv);
    for want in [
        "--master",
        "--ips",
        "--master-addr",
        "--master_addr",
        "--rdzv-endpoint",
        "--rdzv_endpoint",
    ] {
        if let Some((_, v)) = opts.iter().find(|(n, _)| n == want) {
            let first = v.split(',').next().unwrap_or("");
            match parse_host_spec(first) {
                Ok(h) => return (Some((want.to_string(), h)), problems),
                Err(e) => problems.push(format!(
                    "launcher argument {want} {v:?}: {e}; not used as the peer"
                )),
            }
        }
    }
    for var in ["PADDLE_MASTER", "MASTER_ADDR", "PADDLE_TRAINER_ENDPOINTS"] {
        if let Some(v) = env.get(var) {
            let first = v.split(',').next().unwrap_or("");
            match parse_host_spec(first) {
                Ok(h) => return (Some((var.to_string(), h)), problems),
                Err(e) => problems.push(format!("{var}={v:?}: {e}; not used as the peer")),
            }
        }
    }
    (None, problems)
}

/// Parse a node count: `N` or `N:M` (torchrun's elastic range, `1 <= N <= M`; counts as M, the largest
/// size).
pub fn parse_nnodes(v: &str) -> Result<u32, String> {
    let count = |part: &str| -> Result<u32, String> {
        match part.trim().parse::<u32>() {
            Ok(0) => Err(format!("'{v}' is not a node count (must be at least 1)")),
            Ok(n) => Ok(n),
            Err(_) => Err(format!("'{v}' is not a node count (N or N:M)")),
        }
    };
    match v.split_once(':') {
        None => count(v),
        Some((min, max)) => {
            let (min, max) = (count(min)?, count(max)?);
            if min > max {
                return Err(format!(
                    "'{v}' is not a node range: the minimum {min} is larger than the maximum {max}"
                ));
            }
            Ok(max)
        }
    }
}

/// The job's shape: `NCCLENV_NNODES`/`--nnodes` given to ncclenv (`cfg_nnodes`) wins; else torchrun's
/// `--standalone` (one node); else the launcher's `--nnodes` (N or N:M → M), the number of hosts in `--ips`,
/// `PADDLE_NNODES`, the number of distinct hosts in `PADDLE_TRAINER_ENDPOINTS`. Unparseable launcher values
/// are recorded in `problems` and ignored.
pub fn job_shape(
    cfg_nnodes: Option<u32>,
    argv: &[OsString],
    env: &BTreeMap<String, String>,
) -> JobShape {
    let opts = launcher_options(argv);
    let mut shape = JobShape::default();
    if let Some((_, ips)) = opts.iter().find(|(n, _)| n == "--ips") {
        shape.ips = ips.split(',').filter_map(parse_host).collect::<Vec<_>>();
    }
    if let Some(n) = cfg_nnodes {
        shape.nnodes = Some(n);
        shape.source = Some("--nnodes/NCCLENV_NNODES".into());
        return shape;
    }
    if opts.iter().any(|(n, _)| n == "--standalone") {
        shape.nnodes = Some(1);
        shape.source = Some("--standalone".into());
        return shape;
    }
    if let Some((_, v)) = opts.iter().find(|(n, _)| n == "--nnodes") {
        match parse_nnodes(v) {
            Ok(n) => {
                shape.nnodes = Some(n);
                shape.source = Some("--nnodes".into());
                return shape;
            }
            Err(e) => shape
                .problems
                .push(format!("launcher argument --nnodes: {e}")),
        }
    }
    if !shape.ips.is_empty() {
        let mut hosts = shape.ips.clone();
        hosts.sort();
        hosts.dedup();
        shape.nnodes = Some(hosts.len() as u32);
        shape.source = Some("--ips".into());
        return shape;
    }
    if let Some(v) = env.get("PADDLE_NNODES") {
        match parse_nnodes(v) {
            Ok(n) => {
                shape.nnodes = Some(n);
                shape.source = Some("PADDLE_NNODES".into());
                return shape;
            }
            Err(e) => shape.problems.push(format!("PADDLE_NNODES: {e}")),
        }
    }
    if let Some(v) = env.get("PADDLE_TRAINER_ENDPOINTS") {
        let mut hosts: Vec<String> = v.split(',').filter_map(parse_host).collect();
        hosts.sort();
        hosts.dedup();
        if !hosts.is_empty() {
            shape.nnodes = Some(hosts.len() as u32);
            shape.source = Some("PADDLE_TRAINER_ENDPOINTS".into());
        }
    }
    shape
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
        "torch.distributed.run" | "torch.distributed.launch" => Some(Framework::PyTorch),
        "paddle.distributed.launch" => Some(Framework::Paddle),
        _ => None,
    }
}

/// The value of a launcher option (`--name value` or `--name=value`) before the training script, if given.
pub fn launcher_value(argv: &[OsString], name: &str) -> Option<String> {
    let args: Vec<String> = argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut i = 1;
    while i < args.len() {
        let a = &args[i];
        if a.ends_with(".py") && !a.starts_with('-') {
            return None;
        }
        if let Some(v) = a.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
            return Some(v.to_string());
        }
        if a == name {
            return args.get(i + 1).cloned();
        }
        i += 1;
    }
    None
}

/// Resolve a peer host to addresses, waiting at most `timeout`. An address literal needs no resolver. On
/// failure or timeout the error is recorded and `addrs` is empty (the resolver thread is left behind; `exec`
/// ends it).
pub fn resolve_peer(source: String, host: String, timeout: Duration) -> Peer {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Peer {
            source,
            host,
            addrs: vec![ip],
            error: None,
        };
    }
    let (tx, rx) = mpsc::channel();
    let h = host.clone();
    let spawned = std::thread::Builder::new()
        .name("ncclenv-resolve".into())
        .spawn(move || {
            let r = (h.as_str(), 0u16)
                .to_socket_addrs()
                .map(|it| it.map(|sa| sa.ip()).collect::<Vec<_>>());
            let _ = tx.send(r);
        });
    let result = match spawned {
        Err(e) => Err(format!("cannot start the resolver: {e}")),
        Ok(_) => match rx.recv_timeout(timeout) {
            Ok(Ok(mut addrs)) => {
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
            Ok(Err(e)) => Err(format!("cannot resolve: {e}")),
            Err(_) => Err(format!(
                "no answer from the resolver within {} ms",
                timeout.as_millis()
            )),
        },
    };
    match result {
        Ok(addrs) => Peer {
            source,
            host,
            addrs,
            error: None,
        },
        Err(e) => Peer {
            source,
            host,
            addrs: vec![],
            error: Some(e),
        },
    }
}

/// Parse an NCCL configuration file's text as `setEnvFile` (src/misc/param.cc) does: each line `NAME=value`
/// (split at the first `=`, nothing trimmed, a trailing newline dropped); lines without `=` are skipped.
/// Lines starting with `#` are dropped here (NCCL would set a variable named `#…`, which nothing reads).
pub fn parse_conf(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            if k.is_empty() {
                return None;
            }
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

/// The configuration files NCCL reads, in the order it applies them (`initEnv`, src/misc/param.cc):
/// `NCCL_CONF_FILE` if set and non-empty, else `<home>/.nccl.conf` (the user's home from the password
/// database, else `HOME`); then `/etc/nccl.conf`. Missing files are left out; an unreadable one is recorded
/// with its error.
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
    for p in paths {
        match std::fs::read(&p) {
            Ok(bytes) => out.push(ConfFile {
                path: p.display().to_string(),
                values: parse_conf(&String::from_utf8_lossy(&bytes)),
                error: None,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => out.push(ConfFile {
                path: p.display().to_string(),
                values: vec![],
                error: Some(e.to_string()),
            }),
        }
    }
    out
}

/// The value NCCL sees for `name`: the environment's, else the first configuration file that sets it
/// (`setenv(name, value, 0)`: the first applied wins, the environment always wins). Returns the value and where
/// it came from (`environment` or the file's path).
pub fn effective<'a>(
    name: &str,
    env: &'a BTreeMap<String, String>,
    conf: &'a [ConfFile],
) -> Option<(&'a str, String)> {
    if let Some(v) = env.get(name) {
        return Some((v.as_str(), "environment".to_string()));
    }
    for f in conf {
        if let Some((_, v)) = f.values.iter().find(|(k, _)| k == name) {
            return Some((v.as_str(), f.path.clone()));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn argv(s: &[&str]) -> Vec<OsString> {
        s.iter().map(OsString::from).collect()
    }

    #[test]
    fn frameworks_from_the_launcher() {
        let f = |v: &[&str]| framework(&argv(v));
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
        let cmd = argv(&[
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
        let cmd = argv(&[
            "python",
            "-m",
            "paddle.distributed.launch",
            "t.py",
            "--log_level=x",
        ]);
        assert_eq!(launcher_value(&cmd, "--log_level"), None);
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
        ] {
            let e = parse_host_spec(spec).expect_err(spec);
            assert!(e.contains(why), "{spec}: {e}");
            assert_eq!(parse_host(spec), None, "{spec}");
        }
        assert_eq!(parse_host_spec("m:65535").as_deref(), Ok("m"));
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

    #[test]
    fn conf_files_parse_like_nccl() {
        let v = parse_conf("NCCL_SOCKET_IFNAME=eth0\n# c=1\nNCCL_DEBUG= INFO \nnoequals\n=x\n");
        assert_eq!(
            v,
            vec![
                ("NCCL_SOCKET_IFNAME".to_string(), "eth0".to_string()),
                ("NCCL_DEBUG".to_string(), " INFO ".to_string())
            ]
        );
    }

    #[test]
    fn effective_prefers_environment_then_first_file() {
        let conf = vec![
            ConfFile {
                path: "/u".into(),
                values: vec![("A".into(), "u".into())],
                error: None,
            },
            ConfFile {
                path: "/etc".into(),
                values: vec![("A".into(), "e".into()), ("B".into(), "e".into())],
                error: None,
            },
        ];
        let mut env = BTreeMap::new();
        assert_eq!(effective("A", &env, &conf), Some(("u", "/u".to_string())));
        assert_eq!(effective("B", &env, &conf), Some(("e", "/etc".to_string())));
        env.insert("A".to_string(), "x".to_string());
        assert_eq!(
            effective("A", &env, &conf),
            Some(("x", "environment".to_string()))
        );
        assert_eq!(effective("C", &env, &conf), None);
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
    fn resolves_literals_and_reports_failures() {
        let p = resolve_peer("x".into(), "10.0.0.1".into(), Duration::from_millis(10));
        assert_eq!(p.addrs, vec!["10.0.0.1".parse::<IpAddr>().expect("ip")]);
        let p = resolve_peer("x".into(), "localhost".into(), Duration::from_millis(2000));
        assert!(
            p.addrs.iter().all(|a| a.is_loopback()) && !p.addrs.is_empty(),
            "{p:?}"
        );
        let p = resolve_peer(
            "x".into(),
            "no-such-host.invalid".into(),
            Duration::from_millis(2000),
        );
        assert!(p.addrs.is_empty() && p.error.is_some());
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
            let _ = redact_proxy(&v);
            let _ = parse_conf(&v);
        }
    }
}
