//! Command line and `NCCLENV_*` variables → [`Config`] and a [`Mode`]. Every option reads from its
//! `NCCLENV_*` variable (through envy); the flag wins. A malformed value is a usage error (exit 2) naming the
//! flag or variable.

use crate::config::{CheckMode, Config, LogLevel};
use serde::Deserialize;
use std::ffi::OsString;
use std::path::PathBuf;

/// What ncclenv was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// `ncclenv [OPTIONS] -- COMMAND [ARGS…]`: decide, apply, exec. The vector is COMMAND and its arguments,
    /// byte for byte.
    Exec(Vec<OsString>),
    /// `ncclenv env`: print the plan as POSIX shell lines.
    Env,
    /// `ncclenv doctor [--json]`.
    Doctor {
        /// JSON instead of text.
        json: bool,
    },
    /// `ncclenv check [bootstrap|allreduce] [--json]`; `None` = bootstrap, or allreduce when GPUs are visible.
    Check {
        /// The check asked for.
        mode: Option<CheckMode>,
        /// JSON instead of text.
        json: bool,
    },
    /// `--help`.
    Help,
    /// `--version`.
    Version,
}

/// A usage error: one line for stderr; exit 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

/// The parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cli {
    /// What to do.
    pub mode: Mode,
    /// The configuration (variables, then flags).
    pub config: Config,
}

/// The help text printed by `--help`.
pub const HELP: &str = "\
ncclenv: give a multi-GPU job an NCCL environment that works, or stop with the exact reason

usage:
  ncclenv [OPTIONS] -- COMMAND [ARGS...]   decide, set the variables, exec COMMAND
  ncclenv [OPTIONS] env                    print the decisions as shell lines: eval \"$(ncclenv env)\"
  ncclenv [OPTIONS] doctor [--json]        everything probed and decided (exit 0 ok, 1 warnings, 78 refuse)
  ncclenv [OPTIONS] check [bootstrap|allreduce] [--json]
                                           prove the environment with the real NCCL

options (each also read from the variable in brackets; the flag wins):
  --peer HOST            the job's master host or address        [NCCLENV_PEER]
  --nnodes N             number of nodes of the job              [NCCLENV_NNODES]
  --strict               refuse (exit 78) on any repair or risk   [NCCLENV_STRICT=1]
  --log LEVEL            off|error|warn|info|debug (info)        [NCCLENV_LOG]
  --exclude LIST         interface names never to choose         [NCCLENV_EXCLUDE]
  --disable              change nothing, just exec               [NCCLENV_DISABLE=1]
  --sysfs PATH           sysfs root (/sys)                       [NCCLENV_SYSFS]
  --devfs PATH           dev root (/dev)                         [NCCLENV_DEVFS]
  --shm-path PATH        shared memory path (/dev/shm)           [NCCLENV_SHM_PATH]
  --shm-min MIB          free /dev/shm needed, MiB               [NCCLENV_SHM_MIN]
  --check MODE           off|bootstrap|allreduce before exec     [NCCLENV_CHECK]
  --check-timeout SECS   deadline of the check (60)              [NCCLENV_CHECK_TIMEOUT]
  --check-gpus N         ranks of the allreduce check (2)        [NCCLENV_CHECK_GPUS]
  --check-mib MIB        allreduce buffer, MiB (64)              [NCCLENV_CHECK_MIB]
  --check-repair         retry a failed allreduce safer          [NCCLENV_CHECK_REPAIR=1]
  --check-helper PATH    the ncclenv-check helper                [NCCLENV_CHECK_HELPER]
  --nccl-lib PATH        libnccl to load for the check           [NCCLENV_NCCL_LIB]
  --resolve-timeout-ms MS  bound on resolving the peer (2000)    [NCCLENV_RESOLVE_TIMEOUT_MS]
  -h, --help             this text
  -V, --version          the version

exit codes: 2 usage error, 78 refused (NCCL would certainly fail, or strict mode), 126 command not
executable, 127 command not found; otherwise the command's own.
";

/// The `NCCLENV_*` variables, read through envy as strings and parsed here so that every error names its
/// variable.
#[derive(Debug, Default, Deserialize)]
struct EnvVars {
    peer: Option<String>,
    nnodes: Option<String>,
    strict: Option<String>,
    log: Option<String>,
    exclude: Option<String>,
    disable: Option<String>,
    sysfs: Option<String>,
    devfs: Option<String>,
    shm_path: Option<String>,
    shm_min: Option<String>,
    check: Option<String>,
    check_timeout: Option<String>,
    check_gpus: Option<String>,
    check_mib: Option<String>,
    check_repair: Option<String>,
    check_helper: Option<String>,
    nccl_lib: Option<String>,
    resolve_timeout_ms: Option<String>,
}

fn err<T>(what: &str, value: &str, expected: &str) -> Result<T, UsageError> {
    Err(UsageError(format!(
        "{what}: invalid value {value:?} (expected {expected})"
    )))
}

/// Parse a boolean: `1|true|yes|on` / `0|false|no|off|` (empty).
pub fn parse_bool(what: &str, v: &str) -> Result<bool, UsageError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        _ => err(what, v, "1 or 0"),
    }
}

fn parse_u64(what: &str, v: &str, min: u64) -> Result<u64, UsageError> {
    match v.trim().parse::<u64>() {
        Ok(n) if n >= min => Ok(n),
        _ => err(what, v, &format!("a whole number of at least {min}")),
    }
}

fn parse_nnodes(what: &str, v: &str) -> Result<u32, UsageError> {
    crate::probe::job::parse_nnodes(v).map_err(|e| UsageError(format!("{what}: {e}")))
}

fn parse_log(what: &str, v: &str) -> Result<LogLevel, UsageError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "off" | "none" => Ok(LogLevel::Off),
        "error" => Ok(LogLevel::Error),
        "warn" | "warning" => Ok(LogLevel::Warn),
        "info" => Ok(LogLevel::Info),
        "debug" | "trace" => Ok(LogLevel::Debug),
        _ => err(what, v, "off, error, warn, info or debug"),
    }
}

fn parse_check(what: &str, v: &str) -> Result<CheckMode, UsageError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "off" | "0" | "" | "none" => Ok(CheckMode::Off),
        "bootstrap" => Ok(CheckMode::Bootstrap),
        "allreduce" => Ok(CheckMode::Allreduce),
        _ => err(what, v, "off, bootstrap or allreduce"),
    }
}

fn parse_exclude(what: &str, v: &str) -> Result<Vec<String>, UsageError> {
    let names: Vec<String> = v
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(bad) = names
        .iter()
        .find(|n| n.len() > 15 || n.contains('/') || n.chars().any(|c| c.is_whitespace()))
    {
        return err(
            what,
            bad,
            "comma-separated interface names (at most 15 bytes each)",
        );
    }
    Ok(names)
}

fn parse_path(what: &str, v: &str) -> Result<PathBuf, UsageError> {
    if v.is_empty() {
        return err(what, v, "a path");
    }
    Ok(PathBuf::from(v))
}

fn parse_peer(what: &str, v: &str) -> Result<String, UsageError> {
    match crate::probe::job::parse_host(v) {
        Some(_) => Ok(v.to_string()),
        None => err(what, v, "a host name or address, optionally with :port"),
    }
}

/// Apply one option (by its long name without dashes) to the config. `what` names the flag or variable in
/// errors.
fn apply(cfg: &mut Config, key: &str, what: &str, v: &str) -> Result<(), UsageError> {
    match key {
        "peer" => cfg.peer = Some(parse_peer(what, v)?),
        "nnodes" => cfg.nnodes = Some(parse_nnodes(what, v)?),
        "strict" => cfg.strict = parse_bool(what, v)?,
        "log" => cfg.log = parse_log(what, v)?,
        "exclude" => cfg.exclude = parse_exclude(what, v)?,
        "disable" => cfg.disable = parse_bool(what, v)?,
        "sysfs" => cfg.sysfs = parse_path(what, v)?,
        "devfs" => cfg.devfs = parse_path(what, v)?,
        "shm-path" => cfg.shm_path = parse_path(what, v)?,
        "shm-min" => cfg.shm_min_mib = Some(parse_u64(what, v, 0)?),
        "check" => cfg.check = parse_check(what, v)?,
        "check-timeout" => cfg.check_timeout_s = parse_u64(what, v, 1)?,
        "check-gpus" => {
            cfg.check_gpus = u32::try_from(parse_u64(what, v, 1)?)
                .or_else(|_| err(what, v, "a small whole number"))?
        }
        "check-mib" => cfg.check_mib = parse_u64(what, v, 1)?,
        "check-repair" => cfg.check_repair = parse_bool(what, v)?,
        "check-helper" => cfg.check_helper = Some(parse_path(what, v)?),
        "nccl-lib" => cfg.nccl_lib = Some(parse_path(what, v)?),
        "resolve-timeout-ms" => cfg.resolve_timeout_ms = parse_u64(what, v, 1)?,
        _ => return Err(UsageError(format!("unknown option --{key}"))),
    }
    Ok(())
}

/// Options that take no value (`--strict` = `--strict=1`).
const SWITCHES: &[&str] = &["strict", "disable", "check-repair"];
/// Options that take a value.
const VALUED: &[&str] = &[
    "peer",
    "nnodes",
    "log",
    "exclude",
    "sysfs",
    "devfs",
    "shm-path",
    "shm-min",
    "check",
    "check-timeout",
    "check-gpus",
    "check-mib",
    "check-helper",
    "nccl-lib",
    "resolve-timeout-ms",
];

/// Read the `NCCLENV_*` variables into a config. Non-UTF-8 values of these variables are usage errors; every
/// other variable is ignored here.
pub fn config_from_env<I: IntoIterator<Item = (OsString, OsString)>>(
    vars: I,
) -> Result<Config, UsageError> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for (k, v) in vars {
        let Some(k) = k.to_str() else { continue };
        if !k.starts_with("NCCLENV_") {
            continue;
        }
        match v.into_string() {
            Ok(v) => pairs.push((k.to_string(), v)),
            Err(_) => return Err(UsageError(format!("{k}: the value is not valid UTF-8"))),
        }
    }
    let ev: EnvVars = envy::prefixed("NCCLENV_")
        .from_iter(pairs)
        .map_err(|e| UsageError(format!("NCCLENV_* variables: {e}")))?;
    let mut cfg = Config::default();
    let fields: [(&str, &Option<String>); 18] = [
        ("peer", &ev.peer),
        ("nnodes", &ev.nnodes),
        ("strict", &ev.strict),
        ("log", &ev.log),
        ("exclude", &ev.exclude),
        ("disable", &ev.disable),
        ("sysfs", &ev.sysfs),
        ("devfs", &ev.devfs),
        ("shm-path", &ev.shm_path),
        ("shm-min", &ev.shm_min),
        ("check", &ev.check),
        ("check-timeout", &ev.check_timeout),
        ("check-gpus", &ev.check_gpus),
        ("check-mib", &ev.check_mib),
        ("check-repair", &ev.check_repair),
        ("check-helper", &ev.check_helper),
        ("nccl-lib", &ev.nccl_lib),
        ("resolve-timeout-ms", &ev.resolve_timeout_ms),
    ];
    for (key, value) in fields {
        if let Some(v) = value {
            // An empty variable means "not set" for values, "off" for switches.
            if v.is_empty() && !SWITCHES.contains(&key) {
                continue;
            }
            let var = format!("NCCLENV_{}", key.replace('-', "_").to_ascii_uppercase());
            apply(&mut cfg, key, &var, v)?;
        }
    }
    Ok(cfg)
}

/// Parse `args` (without argv\[0\]) and the environment. Options may come before or after the subcommand
/// word; everything after `--` is the command, untouched.
pub fn parse<I: IntoIterator<Item = (OsString, OsString)>>(
    args: &[OsString],
    vars: I,
) -> Result<Cli, UsageError> {
    let mut cfg = config_from_env(vars)?;
    let mut words: Vec<String> = Vec::new();
    let mut json = false;
    let mut i = 0;
    while i < args.len() {
        let raw = &args[i];
        if raw == "--" {
            let cmd: Vec<OsString> = args[i + 1..].to_vec();
            if !words.is_empty() {
                return Err(UsageError(format!(
                    "unexpected {:?} before --",
                    words.join(" ")
                )));
            }
            if cmd.is_empty() {
                return Err(UsageError("no command after --".into()));
            }
            return Ok(Cli {
                mode: Mode::Exec(cmd),
                config: cfg,
            });
        }
        let Some(a) = raw.to_str() else {
            return Err(UsageError(format!(
                "argument {:?} is not valid UTF-8 (put the command after --)",
                raw.to_string_lossy()
            )));
        };
        match a {
            "-h" | "--help" => {
                return Ok(Cli {
                    mode: Mode::Help,
                    config: cfg,
                })
            }
            "-V" | "--version" => {
                return Ok(Cli {
                    mode: Mode::Version,
                    config: cfg,
                })
            }
            "--json" => json = true,
            _ if a.starts_with("--") => {
                let body = &a[2..];
                let (key, inline) = match body.split_once('=') {
                    Some((k, v)) => (k, Some(v.to_string())),
                    None => (body, None),
                };
                if SWITCHES.contains(&key) {
                    apply(&mut cfg, key, a, inline.as_deref().unwrap_or("1"))?;
                } else if VALUED.contains(&key) {
                    let v = match inline {
                        Some(v) => v,
                        None => {
                            i += 1;
                            match args.get(i).map(|v| v.to_str()) {
                                Some(Some(v)) => v.to_string(),
                                Some(None) => {
                                    return Err(UsageError(format!(
                                        "--{key}: value is not valid UTF-8"
                                    )))
                                }
                                None => return Err(UsageError(format!("--{key} needs a value"))),
                            }
                        }
                    };
                    apply(&mut cfg, key, &format!("--{key}"), &v)?;
                } else {
                    return Err(UsageError(format!("unknown option {a} (see --help)")));
                }
            }
            _ if a.starts_with('-') && a.len() > 1 => {
                return Err(UsageError(format!("unknown option {a} (see --help)")))
            }
            _ => words.push(a.to_string()),
        }
        i += 1;
    }
    let mode = match words.first().map(String::as_str) {
        None => return Err(UsageError(
            "nothing to do: give a command after -- (ncclenv -- COMMAND), or env, doctor, check"
                .into(),
        )),
        Some("env") if words.len() == 1 => Mode::Env,
        Some("doctor") if words.len() == 1 => Mode::Doctor { json },
        Some("check") if words.len() <= 2 => Mode::Check {
            mode: match words.get(1) {
                None => None,
                Some(w) => match parse_check("check", w)? {
                    CheckMode::Off => return err("check", w, "bootstrap or allreduce"),
                    m => Some(m),
                },
            },
            json,
        },
        Some(w @ ("env" | "doctor" | "check")) => {
            return Err(UsageError(format!(
                "unexpected argument after {w}: {:?}",
                words[1..].join(" ")
            )))
        }
        Some(w) => {
            return Err(UsageError(format!(
                "unknown subcommand {w:?}; to run a command write: ncclenv -- {w} ..."
            )))
        }
    };
    if json && !matches!(mode, Mode::Doctor { .. } | Mode::Check { .. }) {
        return Err(UsageError("--json goes with doctor or check".into()));
    }
    Ok(Cli { mode, config: cfg })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }
    fn env(v: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        v.iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn command_after_double_dash_passes_untouched() {
        let c = parse(&os(&["--strict", "--", "env", "--strict", "a b"]), env(&[])).expect("parse");
        assert_eq!(c.mode, Mode::Exec(os(&["env", "--strict", "a b"])));
        assert!(c.config.strict);
    }

    #[test]
    fn flag_wins_over_variable() {
        let c = parse(
            &os(&["--peer=10.0.0.1", "--log", "debug", "env"]),
            env(&[
                ("NCCLENV_PEER", "10.9.9.9"),
                ("NCCLENV_LOG", "warn"),
                ("NCCLENV_NNODES", "1:3"),
            ]),
        )
        .expect("parse");
        assert_eq!(c.config.peer.as_deref(), Some("10.0.0.1"));
        assert_eq!(c.config.log, LogLevel::Debug);
        assert_eq!(c.config.nnodes, Some(3));
        assert_eq!(c.mode, Mode::Env);
    }

    #[test]
    fn usage_errors_name_the_variable_or_flag() {
        let e = parse(&os(&["env"]), env(&[("NCCLENV_STRICT", "maybe")])).expect_err("bad bool");
        assert!(e.0.contains("NCCLENV_STRICT"), "{}", e.0);
        let e = parse(&os(&["env"]), env(&[("NCCLENV_NNODES", "zero")])).expect_err("bad n");
        assert!(e.0.contains("NCCLENV_NNODES"), "{}", e.0);
        let e = parse(&os(&["--nnodes=x", "env"]), env(&[])).expect_err("bad flag");
        assert!(e.0.contains("--nnodes"), "{}", e.0);
        let e = parse(&os(&["--"]), env(&[])).expect_err("no command");
        assert!(e.0.contains("no command"));
        let e = parse(&os(&[]), env(&[])).expect_err("nothing");
        assert!(e.0.contains("nothing to do"));
        assert!(parse(&os(&["--bogus", "env"]), env(&[])).is_err());
        assert!(parse(&os(&["python"]), env(&[])).is_err());
        assert!(parse(&os(&["env", "--json"]), env(&[])).is_err());
        assert!(parse(&os(&["--peer"]), env(&[])).is_err());
    }

    #[test]
    fn subcommands() {
        assert_eq!(
            parse(&os(&["doctor", "--json"]), env(&[])).expect("p").mode,
            Mode::Doctor { json: true }
        );
        assert_eq!(
            parse(&os(&["check", "allreduce"]), env(&[]))
                .expect("p")
                .mode,
            Mode::Check {
                mode: Some(CheckMode::Allreduce),
                json: false
            }
        );
        assert_eq!(
            parse(&os(&["--version"]), env(&[])).expect("p").mode,
            Mode::Version
        );
    }

    proptest! {
        #[test]
        fn garbage_in_every_variable_never_panics(v in ".{0,40}") {
            for name in ["PEER","NNODES","STRICT","LOG","EXCLUDE","DISABLE","SYSFS","DEVFS","SHM_PATH","SHM_MIN",
                         "CHECK","CHECK_TIMEOUT","CHECK_GPUS","CHECK_MIB","CHECK_REPAIR","CHECK_HELPER","NCCL_LIB","RESOLVE_TIMEOUT_MS"] {
                let var = format!("NCCLENV_{name}");
                let r = parse(&os(&["env"]), vec![(OsString::from(&var), OsString::from(&v))]);
                if let Err(e) = r { prop_assert!(e.0.contains(&var), "{} lacks {}", e.0, var); }
                let flag = format!("--{}={}", name.to_ascii_lowercase().replace('_', "-"), v);
                let _ = parse(&[OsString::from(flag), OsString::from("env")], Vec::<(OsString, OsString)>::new());
            }
        }
    }
}
