//! What every reader of a job's command line shares (`crate::launcher`, `crate::accelerate`,
//! `crate::orchestrator`, `crate::spread`, `crate::shell`): which launcher a command runs ([`detect`]), the
//! variables a launcher reads ([`VARS`]), a value with its source ([`Sourced`]), the master's endpoint and
//! its parsers ([`parse_endpoint`], [`parse_port`], [`parse_nnodes`]), and what a reading found
//! ([`LaunchInfo`]). It imports no reader, so the readers import it and not each other (issue #20 item 6:
//! the launcher circle). The rules of each launcher and their sources are in `crate::launcher`'s docs.

use crate::snapshot::{JobShape, Launcher};

/// Every variable a launcher reads that ncclenv looks at (recorded in the snapshot with user information
/// removed; see `probe::job::record_env`).
pub const VARS: &[&str] = &[
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_RANK",
    "PET_NNODES",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "PET_RDZV_ENDPOINT",
    "PET_RDZV_BACKEND",
    "PET_STANDALONE",
    "PET_LOCAL_ADDR",
    "PET_NPROC_PER_NODE",
    "PADDLE_MASTER",
    "PADDLE_NNODES",
    "PADDLE_IPS",
    "PADDLE_RANK",
    "PADDLE_TRAINER_ID",
    "PADDLE_TRAINERS_NUM",
    "PADDLE_TRAINER_ENDPOINTS",
    "PADDLE_TRAINERS",
    "POD_IP",
    "VLLM_HOST_IP",
    "HF_HOME",
    "XDG_CACHE_HOME",
];

/// torchrun's and DeepSpeed's default master port (`--master-port` default in torch/distributed/run.py;
/// `TORCH_DISTRIBUTED_DEFAULT_PORT` in deepspeed/constants.py).
pub const TORCH_DEFAULT_PORT: u16 = 29500;

/// A value and where it came from (a flag as written, or a variable's name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sourced<T> {
    /// The value.
    pub value: T,
    /// Where it came from.
    pub source: String,
}

/// A parsed `host[:port]`, `[v6][:port]`, bare IPv6 address or URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The host, without brackets, user information or port.
    pub host: String,
    /// The port, when written (1–65535).
    pub port: Option<u16>,
    /// The URL scheme in lower case (`etcd`, `http`, `https`, `tcp`), when written.
    pub scheme: Option<String>,
}

/// Parse an endpoint: an optional `scheme://`, optional user information up to the last `@` (dropped, never
/// stored), then `host[:port]`, `[v6]:port`, `[v6]` or a bare IPv6 address, then an optional `/path`. A port,
/// when written, is 1 to 65535 in digits; a `[` must close. The error is a short reason for a message and
/// never contains the user information.
pub fn parse_endpoint(spec: &str) -> Result<Endpoint, String> {
    let authority = spec.trim();
    let (scheme, authority) = match authority.find("://") {
        Some(i) => (
            Some(authority[..i].to_ascii_lowercase()),
            &authority[i + 3..],
        ),
        None => (None, authority),
    };
    let authority = authority.split('/').next().unwrap_or("");
    // User information: everything up to the last '@' of the authority.
    let authority = match authority.rfind('@') {
        Some(at) => &authority[at + 1..],
        None => authority,
    };
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
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
    } else if authority.matches(':').count() > 1 {
        // A bare IPv6 address: no port can be told apart.
        (authority, None)
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    if !is_host(host) {
        return Err(format!("{host:?} is not a host name or address"));
    }
    let port = match port {
        None => None,
        Some(p) => Some(parse_port(p)?),
    };
    Ok(Endpoint {
        host: host.to_string(),
        port,
        scheme,
    })
}

/// Whether `host` can name a machine: an IP address (IPv6 with a `%zone` too), or a name of dot-separated
/// labels of letters, digits, `-` and `_` (RFC 1123 2.1 host names; `_` as resolvers accept it), none empty
/// or starting or ending with `-`, at most 253 bytes. A word a shell or Kubernetes did not expand
/// (`$(MASTER_ADDR)`, `${HOST}`), an option (`-x`) or `a..b` is none: it is said at once instead of being
/// waited for as a name that may appear late (break-it finding: retried for 600 s, then blamed on DNS).
fn is_host(host: &str) -> bool {
    if host.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    if let Some((addr, zone)) = host.split_once('%') {
        return addr.parse::<std::net::Ipv6Addr>().is_ok() && !zone.is_empty();
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// A port: 1 to 65535, digits only.
pub fn parse_port(p: &str) -> Result<u16, String> {
    let ok = !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit());
    match p.parse::<u32>() {
        Ok(n) if ok && (1..=65535).contains(&n) => Ok(n as u16),
        _ => Err(format!("port {p:?} is not a number from 1 to 65535")),
    }
}

/// [`parse_endpoint`], the host alone.
pub fn parse_host_spec(spec: &str) -> Result<String, String> {
    parse_endpoint(spec).map(|e| e.host)
}

/// [`parse_host_spec`] without the reason: `None` for anything it rejects.
pub fn parse_host(spec: &str) -> Option<String> {
    parse_host_spec(spec).ok()
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

/// Replace the user information of every URL-shaped item of a comma-separated value with `***`:
/// `etcd://root:S3CR3T@10.0.0.5:2379` → `etcd://***@10.0.0.5:2379`, `u:p@host:80` → `***@host:80`. Values
/// without `@` before their first `/` are returned unchanged.
pub fn redact_userinfo(value: &str) -> String {
    if !value.contains('@') {
        return value.to_string();
    }
    value
        .split(',')
        .map(|item| {
            let (scheme, rest) = match item.find("://") {
                Some(i) => (&item[..i + 3], &item[i + 3..]),
                None => ("", item),
            };
            let end = rest.find('/').unwrap_or(rest.len());
            match rest[..end].rfind('@') {
                Some(at) => format!("{scheme}***@{}", &rest[at + 1..]),
                None => item.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Marks, on both sides, the text of an expansion ncclenv cannot know before the shell runs (`$(hostname)`,
/// an unset `$VAR`; set by `crate::shell`): a word holding it is unknown. [`display`] removes the marks.
pub const UNKNOWN: char = '\u{1A}';

/// `dir` taken from `base` (`None`: ncclenv's own working directory) as `cd` takes it, and a file name taken
/// from its directory the same way: an absolute `dir` replaces it, a relative one is joined; unknown (holding
/// [`UNKNOWN`]) when either is unknown. The shell's `cd` and `env -C`, the launchers' relative files
/// (Accelerate's config, DeepSpeed's environment files) all join this way.
pub fn join_dir(base: Option<&str>, dir: &str) -> String {
    let unknown = |s: &str| s.contains(UNKNOWN);
    match base {
        _ if unknown(dir) => UNKNOWN.to_string(),
        _ if dir.starts_with('/') => dir.to_string(),
        Some(b) if unknown(b) => UNKNOWN.to_string(),
        Some(b) => format!("{}/{dir}", b.trim_end_matches('/')),
        None => dir.to_string(),
    }
}

/// `word` with the [`UNKNOWN`] marks removed: the text as the command wrote it.
pub fn display(word: &str) -> String {
    word.chars().filter(|c| *c != UNKNOWN).collect()
}

/// True when `word` holds an expansion that is not known before the shell runs.
pub fn is_unknown(word: &str) -> bool {
    word.contains(UNKNOWN)
}

/// `word` (a word of the shell's command, [`UNKNOWN`] marks in place) as shown, with the user
/// information of a URL in it replaced by `***`; the `@` of a shell parameter (`$@`, `${@…}`) that
/// ncclenv did not expand is not a URL's and is kept. Break-it finding: `exec "$@"` was shown as `exec ***@`.
pub fn redact_shell_word(word: &str) -> String {
    // A character no shown word holds stands for such an `@` while the URL is redacted.
    const AT: char = '\u{1B}';
    let mut kept = String::with_capacity(word.len());
    let mut unknown = false;
    for c in word.chars() {
        if c == UNKNOWN {
            unknown = !unknown;
        }
        let parameter = kept.ends_with('$') || kept.ends_with("${");
        kept.push(if c == '@' && unknown && parameter {
            AT
        } else {
            c
        });
    }
    let shown = display(&redact_userinfo(&kept));
    shown.replace(AT, "@")
}

/// The launcher `argv` runs, and the index of its first own argument. Recognised: the program's base name
/// (`torchrun`, `deepspeed`, `sglang`, `vllm`, `horovodrun`, `mpirun`/`mpiexec`/`orterun`/`prterun`,
/// `ray` with `start`), and `python[3[.x]] [-u …] -m MODULE` or `python SCRIPT` with the script's base name
/// (`torch.distributed.run`/`.launch`, `paddle.distributed.launch`/`.fleet.launch`,
/// `deepspeed.launcher.runner`/`.launch`, `sglang.*`, `vllm.*`, `horovod.runner.launch`). `None` for
/// anything else (a plain script, a shell wrapper).
pub fn detect(argv: &[String]) -> Option<(Launcher, usize)> {
    let program = argv.first()?;
    let base = basename(program);
    if is_python(base) {
        let mut i = 1;
        while i < argv.len() {
            let a = argv[i].as_str();
            if a == "-m" {
                return by_module(argv.get(i + 1)?).map(|l| (l, i + 2));
            }
            if let Some(m) = a
                .strip_prefix("-m")
                .filter(|m| !m.is_empty() && !a.starts_with("--"))
            {
                return by_module(m).map(|l| (l, i + 1));
            }
            if a == "-c" || a == "-" {
                return None;
            }
            if a == "-X" || a == "-W" || a == "--check-hash-based-pycs" {
                i += 2;
                continue;
            }
            if a.starts_with('-') {
                i += 1;
                continue;
            }
            // A script: launchers installed as scripts run as `python /usr/bin/torchrun …`.
            return by_program(basename(a), argv.get(i + 1).map(String::as_str))
                .map(|(l, skip)| (l, i + 1 + skip));
        }
        return None;
    }
    by_program(base, argv.get(1).map(String::as_str)).map(|(l, skip)| (l, 1 + skip))
}

fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

fn is_python(base: &str) -> bool {
    base.strip_prefix("python")
        .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

/// A program's base name (and its first argument, for `ray start`) → the launcher and how many words after
/// the program to skip.
fn by_program(base: &str, first: Option<&str>) -> Option<(Launcher, usize)> {
    Some(match base {
        "torchrun" => (Launcher::Torchrun, 0),
        "deepspeed" => (Launcher::Deepspeed, 0),
        "sglang" => (Launcher::Sglang, 0),
        "vllm" => (Launcher::Vllm, 0),
        "horovodrun" => (Launcher::Horovod, 0),
        "mpirun" | "mpiexec" | "orterun" | "prterun" => (Launcher::Mpi, 0),
        "ray" if first == Some("start") => (Launcher::Ray, 1),
        "accelerate" if first == Some("launch") => (Launcher::Accelerate, 1),
        _ => return None,
    })
}

fn by_module(m: &str) -> Option<Launcher> {
    Some(match m {
        "torch.distributed.run" | "torch.distributed.launch" => Launcher::Torchrun,
        "paddle.distributed.launch" | "paddle.distributed.fleet.launch" => Launcher::Paddle,
        "deepspeed.launcher.runner" | "deepspeed.launcher.launch" | "deepspeed" => {
            Launcher::Deepspeed
        }
        "horovod.runner.launch" | "horovod.runner" => Launcher::Horovod,
        "ray.scripts.scripts" => Launcher::Ray,
        "accelerate.commands.launch" => Launcher::Accelerate,
        _ if m == "sglang" || m.starts_with("sglang.") => Launcher::Sglang,
        _ if m == "vllm" || m.starts_with("vllm.") => Launcher::Vllm,
        _ => return None,
    })
}

/// Everything `crate::launcher::read` found; `probe::job` turns it into the snapshot's `Peer` and [`JobShape`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchInfo {
    /// The job's master: its endpoint and where it was named.
    pub master: Option<Sourced<Endpoint>>,
    /// The job's shape: nodes, node rank, master port, this node's address, rendezvous, launcher, problems.
    pub shape: JobShape,
}

/// Reads a file a launcher reads (Accelerate's config file, an mpirun or DeepSpeed hostfile, a
/// `.deepspeed_env`) by path, at most the given number of bytes: its bytes, or `Err((missing, reason))` (a
/// longer file is an error). A relative path is taken from the directory the command starts in.
pub type ReadFile<'a> = dyn Fn(&str, usize) -> Result<Vec<u8>, (bool, String)> + 'a;
