//! Command line and `NCCLENV_*` variables → [`Config`] and a [`Mode`]. Every option reads from its
//! `NCCLENV_*` variable; the flag wins. A malformed value is a usage error (exit 2) naming the flag or
//! variable.
//!
//! Each option is declared once, in [`OPTIONS`] (name, value placeholder, type and range, `--help` line,
//! the README's meaning and default, and how it is stored): the parser, [`help`] and docs/configuration.md's table of
//! variables (a test; `NCCLENV_BLESS=1 cargo test --lib cli` rewrites it) all read that table.
//!
//! Only the exact upper-case names of the options ([`option_variables`]) are read, each as `getenv` reads it
//! (the first entry of a duplicated name wins). Any other `NCCLENV_*` name (`NCCLENV_Peer`,
//! `NCCLENV_CHECK_TIMEOUTS`, a name or value that is not UTF-8) is never an option and never stops the job:
//! it is listed in [`Config::unknown_vars`] with the nearest known name when it looks like a typo, and the
//! decision reports it (`unknown-variable`).

use crate::config::{
    CheckMode, Config, LogFormat, LogLevel, CHECK_VALUES, LOG_FORMAT_VALUES, LOG_VALUES,
};
use std::ffi::OsString;
use std::path::PathBuf;

/// What ncclenv was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// `ncclenv [OPTIONS] -- COMMAND [ARGS…]`: decide, apply, exec. The vector is COMMAND and its arguments,
    /// byte for byte.
    Exec(Vec<OsString>),
    /// `ncclenv env [-- COMMAND…]`: print the plan as POSIX shell lines. The vector is the optional job
    /// command after `--`: its launcher arguments are read as the entrypoint reads them; it is not run.
    Env(Vec<OsString>),
    /// `ncclenv doctor [--json] [-- COMMAND…]`.
    Doctor {
        /// JSON instead of text.
        json: bool,
        /// The job's command after `--` (read, not run); empty when none was given.
        cmd: Vec<OsString>,
    },
    /// `ncclenv check [bootstrap|allreduce] [--json] [-- COMMAND…]`; `None` (no word given) = bootstrap.
    Check {
        /// The check asked for.
        mode: Option<CheckMode>,
        /// JSON instead of text.
        json: bool,
        /// The job's command after `--` (read, not run); empty when none was given.
        cmd: Vec<OsString>,
    },
    /// `ncclenv install DIR`: copy `ncclenv` (and `ncclenv-check` when it sits beside it) into DIR, e.g. a
    /// Kubernetes `emptyDir` shared with the training container.
    Install(PathBuf),
    /// `ncclenv explain [--json] [FILE…]`: read NCCL debug output (the files, or stdin when none or `-`) and
    /// report what it says (see `crate::explain`).
    Explain {
        /// JSON instead of text.
        json: bool,
        /// The logs to read, in order; empty (or `-`) = standard input.
        files: Vec<PathBuf>,
    },
    /// `ncclenv completions bash|zsh|fish`: print that shell's completion script (`crate::completions`).
    Completions(Shell),
    /// `--help`, `help`: the whole page (`None`), or one subcommand's (`ncclenv doctor --help`,
    /// `ncclenv help doctor`; the name is one of [`SUBCOMMANDS`]).
    Help(Option<&'static str>),
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
        _ => err(what, v, "1, true, yes, on or 0, false, no, off, empty"),
    }
}

/// A whole number in `min..=max` (`unit` names what it counts, for the message). The bounds keep every later
/// computation (deadlines, buffer sizes) far from overflow.
fn parse_range(what: &str, v: &str, min: u64, max: u64, unit: &str) -> Result<u64, UsageError> {
    match v.trim().parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => err(
            what,
            v,
            &format!("a whole number of {unit} from {min} to {max}"),
        ),
    }
}

/// A TCP port, 1 to 65535.
fn parse_port(what: &str, v: &str) -> Result<u16, UsageError> {
    match v.trim().parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => err(what, v, "a TCP port from 1 to 65535"),
    }
}

fn parse_nnodes(what: &str, v: &str) -> Result<u32, UsageError> {
    crate::launcher::parse_nnodes(v).map_err(|e| UsageError(format!("{what}: {e}")))
}

/// `NCCLENV_LOG`'s value as a level: `off`/`none`, `error`, `warn`/`warning`, `info`, `debug`/`trace` (any
/// case, spaces around ignored); a usage error naming `what` otherwise.
pub fn parse_log(what: &str, v: &str) -> Result<LogLevel, UsageError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "off" | "none" => Ok(LogLevel::Off),
        "error" => Ok(LogLevel::Error),
        "warn" | "warning" => Ok(LogLevel::Warn),
        "info" => Ok(LogLevel::Info),
        "debug" | "trace" => Ok(LogLevel::Debug),
        _ => err(what, v, LOG_VALUES),
    }
}

fn parse_log_format(what: &str, v: &str) -> Result<LogFormat, UsageError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        _ => err(what, v, LOG_FORMAT_VALUES),
    }
}

fn parse_check(what: &str, v: &str) -> Result<CheckMode, UsageError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "off" | "0" | "" | "none" => Ok(CheckMode::Off),
        "bootstrap" => Ok(CheckMode::Bootstrap),
        "allreduce" => Ok(CheckMode::Allreduce),
        _ => err(what, v, CHECK_VALUES),
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

/// An absolute path (NCCL opens `NCCL_DEBUG_FILE` relative to each rank's working directory, which launchers
/// change).
fn parse_abs_path(what: &str, v: &str) -> Result<PathBuf, UsageError> {
    if !v.starts_with('/') {
        return err(what, v, "an absolute path");
    }
    Ok(PathBuf::from(v))
}

fn parse_peer(what: &str, v: &str) -> Result<String, UsageError> {
    match crate::launcher::parse_host_spec(v) {
        Ok(_) => Ok(v.to_string()),
        Err(why) => Err(UsageError(format!(
            "{what}: invalid value {:?} ({why}; expected a host name or address, optionally with :port)",
            crate::launcher::redact_userinfo(v)
        ))),
    }
}

/// What an option's value may be (its type and range). [`Accepts::Whole`]'s range is the one the parser
/// enforces and the README states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepts {
    /// A switch: `1`, `true`, `yes`, `on` / `0`, `false`, `no`, `off`, empty (any case); the flag alone = `1`.
    Switch,
    /// A whole number in `min..=max` counting `unit`.
    Whole {
        /// Smallest value.
        min: u64,
        /// Largest value (far from overflow in every later computation: deadlines, buffer sizes).
        max: u64,
        /// What it counts, for the usage error.
        unit: &'static str,
    },
    /// A TCP port, 1–65535.
    Port,
    /// One of a few words (the option's parser lists them).
    Words,
    /// A host or address, optionally with `:port` (`launcher::parse_host_spec`).
    Peer,
    /// `N` or `N:M` (`launcher::parse_nnodes`).
    Nnodes,
    /// Comma-separated interface names (at most 15 bytes each).
    Names,
    /// A path, not empty.
    Path,
    /// An absolute path.
    AbsPath,
}

/// One option, declared once: the parser ([`parse`], [`config_from_env`]), `--help` ([`help`]) and the README's
/// table of variables (checked by a test) are read from [`OPTIONS`].
pub struct Opt {
    /// The long flag without dashes (`check-timeout`); its variable is [`option_variable`] of it.
    pub name: &'static str,
    /// The value's placeholder in `--help` and the README (`SECS`); `None` for a switch.
    pub value: Option<&'static str>,
    /// Type and range.
    pub accepts: Accepts,
    /// The `--help` text (lines after the first are continuation lines).
    pub help: &'static str,
    /// The README's "meaning" column (`{range}` stands for a [`Accepts::Whole`] range).
    pub meaning: &'static str,
    /// The README's "default" column.
    pub default: &'static str,
    /// Parse the value and store it in the config.
    set: fn(&mut Config, Val<'_>) -> Result<(), UsageError>,
}

/// A value being applied: the text, the flag or variable it came from (for errors), and what it accepts.
struct Val<'a> {
    what: &'a str,
    text: &'a str,
    accepts: Accepts,
}

impl Val<'_> {
    fn switch(&self) -> Result<bool, UsageError> {
        parse_bool(self.what, self.text)
    }
    fn whole(&self) -> Result<u64, UsageError> {
        match self.accepts {
            Accepts::Whole { min, max, unit } => parse_range(self.what, self.text, min, max, unit),
            _ => Err(UsageError(format!("{}: not a number option", self.what))),
        }
    }
}

/// A variable ncclenv (or its helper) reads that is not an option, for docs/configuration.md's table.
pub struct EnvOnly {
    /// The variable.
    pub name: &'static str,
    /// The README's "meaning" column.
    pub meaning: &'static str,
    /// The README's "default" column.
    pub default: &'static str,
}

/// Every option, in the order of `--help` and the README.
pub const OPTIONS: &[Opt] = &[
    Opt {
        name: "peer",
        value: Some("HOST"),
        accepts: Accepts::Peer,
        help: "the job's master host or address",
        meaning: "host or address of the job's master, optionally `:port` (1–65535; IPv6 with a port as `[addr]:port`)",
        default: "from the launcher",
        set: |c, v| {
            c.peer = Some(parse_peer(v.what, v.text)?);
            c.peer_source = Some(v.what.to_string());
            Ok(())
        },
    },
    Opt {
        name: "nnodes",
        value: Some("N"),
        accepts: Accepts::Nnodes,
        help: "number of nodes of the job",
        meaning: "number of nodes (`N` or `N:M` with 1 ≤ N ≤ M, which counts as M)",
        default: "from the launcher",
        set: |c, v| {
            c.nnodes = Some(parse_nnodes(v.what, v.text)?);
            Ok(())
        },
    },
    Opt {
        name: "strict",
        value: None,
        accepts: Accepts::Switch,
        help: "refuse on strict findings (exit 78)",
        meaning: "`1`: every repair, every risk warning about an inherited value, a fallback to `lo` and a choice no route supported become exit 78",
        default: "`0`",
        set: |c, v| {
            c.strict = v.switch()?;
            Ok(())
        },
    },
    Opt {
        name: "log",
        value: Some("LEVEL"),
        accepts: Accepts::Words,
        help: "off|error|warn|info|debug (info)",
        meaning: "`off`, `error`, `warn`, `info`, `debug`",
        default: "`info`",
        set: |c, v| {
            c.log = parse_log(v.what, v.text)?;
            Ok(())
        },
    },
    Opt {
        name: "log-format",
        value: Some("FORMAT"),
        accepts: Accepts::Words,
        help: "text|json lines on stderr (text)",
        meaning: "`text`, or `json`: one JSON object per line on stderr (fields: [logging.md](logging.md))",
        default: "`text`",
        set: |c, v| {
            c.log_format = parse_log_format(v.what, v.text)?;
            Ok(())
        },
    },
    Opt {
        name: "termination-log",
        value: Some("PATH"),
        accepts: Accepts::Path,
        help: "where exit 78 writes its reason
(default /dev/termination-log when it exists and is writable)",
        meaning: "where a refusal (exit 78) writes its reason for Kubernetes (`kubectl describe pod`)",
        default: "`/dev/termination-log` when it exists and is writable",
        set: |c, v| {
            c.termination_log = Some(parse_path(v.what, v.text)?);
            Ok(())
        },
    },
    Opt {
        name: "exclude",
        value: Some("LIST"),
        accepts: Accepts::Names,
        help: "interface names never to choose",
        meaning: "comma-separated interface names never to choose (exact names)",
        default: "none",
        set: |c, v| {
            c.exclude = parse_exclude(v.what, v.text)?;
            Ok(())
        },
    },
    Opt {
        name: "disable",
        value: None,
        accepts: Accepts::Switch,
        help: "change nothing, just exec",
        meaning: "`1`: change nothing, probe nothing, just exec",
        default: "`0`",
        set: |c, v| {
            c.disable = v.switch()?;
            c.disable_as = if !c.disable {
                String::new()
            } else if v.what.starts_with("--") {
                v.what.to_string()
            } else {
                format!("{}={}", v.what, v.text)
            };
            Ok(())
        },
    },
    Opt {
        name: "sysfs",
        value: Some("PATH"),
        accepts: Accepts::Path,
        help: "sysfs root (/sys)",
        meaning: "sysfs root (RDMA devices, link speeds)",
        default: "`/sys`",
        set: |c, v| {
            c.sysfs = parse_path(v.what, v.text)?;
            Ok(())
        },
    },
    Opt {
        name: "devfs",
        value: Some("PATH"),
        accepts: Accepts::Path,
        help: "dev root (/dev)",
        meaning: "dev root (`infiniband/uverbsN`, `nvidiaN`)",
        default: "`/dev`",
        set: |c, v| {
            c.devfs = parse_path(v.what, v.text)?;
            Ok(())
        },
    },
    Opt {
        name: "shm-path",
        value: Some("PATH"),
        accepts: Accepts::Path,
        help: "shared memory path (/dev/shm)",
        meaning: "the shared-memory mount checked",
        default: "`/dev/shm`",
        set: |c, v| {
            c.shm_path = parse_path(v.what, v.text)?;
            Ok(())
        },
    },
    Opt {
        name: "shm-min",
        value: Some("MIB"),
        accepts: Accepts::Whole { min: 0, max: 1_048_576, unit: "MiB" },
        help: "free /dev/shm needed, MiB",
        meaning: "free MiB of `/dev/shm` NCCL needs ({range})",
        default: "4 NCCL segments (9,637,888 B each with the default `NCCL_BUFFSIZE`/`NCCL_LL_BUFFSIZE`/`NCCL_LL128_BUFFSIZE`) per local rank: the launcher's count, else visible GPUs (≥ 2); unknown: not judged (`docs/rdma-shm.md`)",
        set: |c, v| {
            c.shm_min_mib = Some(v.whole()?);
            Ok(())
        },
    },
    Opt {
        name: "check",
        value: Some("MODE"),
        accepts: Accepts::Words,
        help: "off|bootstrap|allreduce before exec",
        meaning: "`off`, `bootstrap`, `allreduce`: prove the environment before exec",
        default: "`off`",
        set: |c, v| {
            c.check = parse_check(v.what, v.text)?;
            Ok(())
        },
    },
    Opt {
        name: "check-timeout",
        value: Some("SECS"),
        accepts: Accepts::Whole { min: 1, max: 86_400, unit: "seconds" },
        help: "deadline of the check (60)",
        meaning: "deadline of the whole check, seconds, {range} (with repair, the first attempt gets half)",
        default: "`60`",
        set: |c, v| {
            c.check_timeout_s = v.whole()?;
            Ok(())
        },
    },
    Opt {
        name: "check-gpus",
        value: Some("N"),
        accepts: Accepts::Whole { min: 1, max: 1_024, unit: "ranks" },
        help: "ranks of the allreduce check (2)",
        meaning: "ranks of the allreduce check, {range} (capped by visible GPUs)",
        default: "`2`",
        set: |c, v| {
            // At most 1024 (the range above), which fits in u32.
            c.check_gpus = v.whole()? as u32;
            Ok(())
        },
    },
    Opt {
        name: "check-mib",
        value: Some("MIB"),
        accepts: Accepts::Whole { min: 1, max: 65_536, unit: "MiB" },
        help: "allreduce buffer, MiB (64)",
        meaning: "allreduce buffer size, {range}",
        default: "`64`",
        set: |c, v| {
            c.check_mib = v.whole()?;
            Ok(())
        },
    },
    Opt {
        name: "check-repair",
        value: None,
        accepts: Accepts::Switch,
        help: "retry a failed allreduce safer",
        meaning: "retry a failed allreduce with `NCCL_SHM_DISABLE=1`, `NCCL_P2P_DISABLE=1`, `NCCL_IB_DISABLE=1`, the next candidate interface; run with the first that passes",
        default: "`0`",
        set: |c, v| {
            c.check_repair = v.switch()?;
            Ok(())
        },
    },
    Opt {
        name: "check-helper",
        value: Some("PATH"),
        accepts: Accepts::Path,
        help: "the ncclenv-check helper",
        meaning: "the `ncclenv-check` binary (named: that one only, an error when it is not executable)",
        default: "beside `ncclenv`",
        set: |c, v| {
            c.check_helper = Some(parse_path(v.what, v.text)?);
            Ok(())
        },
    },
    Opt {
        name: "nccl-lib",
        value: Some("PATH"),
        accepts: Accepts::Path,
        help: "libnccl to load for the check",
        meaning: "libnccl for the check (when set, the only one tried), and the NCCL whose rules the decision follows",
        default: "loader, CUDA folders, site-packages",
        set: |c, v| {
            c.nccl_lib = Some(parse_path(v.what, v.text)?);
            Ok(())
        },
    },
    Opt {
        name: "resolve-timeout-ms",
        value: Some("MS"),
        accepts: Accepts::Whole { min: 1, max: 600_000, unit: "milliseconds" },
        help: "bound on resolving the peer (2000;
600000 for a job that may span nodes)",
        meaning: "how long a master's host name that does not resolve (yet) is retried, {range}; then `peer-unresolved`. When not given, a job that may span nodes waits up to 10 minutes, as long as torchrun waits for its master ([policy.md](policy.md#a-master-whose-name-appears-late))",
        default: "`2000`; `600000` for a job that may span nodes",
        set: |c, v| {
            c.resolve_timeout_ms = Some(v.whole()?);
            Ok(())
        },
    },
    Opt {
        name: "debug",
        value: None,
        accepts: Accepts::Switch,
        help: "NCCL's own logs for the command: sets
NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS, NCCL_DEBUG_FILE
(each when unset; one file per host and process)
and the launcher's debug switch",
        meaning: "`1`: NCCL's own logs for the command, one file per host and process (below; [explain.md](explain.md))",
        default: "`0`",
        set: |c, v| {
            c.debug = v.switch()?;
            Ok(())
        },
    },
    Opt {
        name: "debug-dir",
        value: Some("PATH"),
        accepts: Accepts::AbsPath,
        help: "folder of those files (/tmp/ncclenv-debug)",
        meaning: "absolute folder of those files (created when missing)",
        default: "`/tmp/ncclenv-debug`",
        set: |c, v| {
            c.debug_dir = Some(parse_abs_path(v.what, v.text)?);
            Ok(())
        },
    },
    Opt {
        name: "preflight",
        value: None,
        accepts: Accepts::Switch,
        help: "the nodes meet and agree before exec",
        meaning: "`1`: the nodes meet and agree before exec ([fleet preflight](preflight.md))",
        default: "`0`",
        set: |c, v| {
            c.preflight = v.switch()?;
            Ok(())
        },
    },
    Opt {
        name: "preflight-timeout",
        value: Some("SECS"),
        accepts: Accepts::Whole { min: 1, max: 86_400, unit: "seconds" },
        help: "wait for the other nodes (60)",
        meaning: "how long the preflight waits for the other nodes, {range}",
        default: "`60`",
        set: |c, v| {
            c.preflight_timeout_s = v.whole()?;
            Ok(())
        },
    },
    Opt {
        name: "preflight-port",
        value: Some("PORT"),
        accepts: Accepts::Port,
        help: "port to meet on (the master's port)",
        meaning: "the port the nodes meet on",
        default: "the launcher's master port",
        set: |c, v| {
            c.preflight_port = Some(parse_port(v.what, v.text)?);
            Ok(())
        },
    },
    Opt {
        name: "preflight-measure",
        value: None,
        accepts: Accepts::Switch,
        help: "measure the networks every node shares (1)",
        meaning: "`0`: the preflight does not measure the networks every node shares, and the choice stays the route's ([policy](policy.md))",
        default: "`1`",
        set: |c, v| {
            c.preflight_measure = v.switch()?;
            Ok(())
        },
    },
];

/// Variables read that are not options: `NCCLENV_CUDA_LIB` (the check helper's CUDA library,
/// `src/bin/ncclenv-check/`) and `NO_COLOR`.
pub const ENV_ONLY: &[EnvOnly] = &[
    EnvOnly {
        name: "NCCLENV_CUDA_LIB",
        meaning: "`libcuda.so.1` (or `libcudart`) for the allreduce check, tried before the usual places (read by `ncclenv-check`)",
        default: "loader, CUDA folders, site-packages",
    },
    EnvOnly {
        name: "NO_COLOR",
        meaning: "non-empty: no colour on stderr",
        default: "",
    },
];

/// The option named `name` (the long flag without dashes).
fn option(name: &str) -> Option<&'static Opt> {
    OPTIONS.iter().find(|o| o.name == name)
}

/// Apply one option's value to the config. `what` names the flag or variable in errors.
fn apply(cfg: &mut Config, opt: &Opt, what: &str, v: &str) -> Result<(), UsageError> {
    (opt.set)(
        cfg,
        Val {
            what,
            text: v,
            accepts: opt.accepts,
        },
    )
}

/// The `--help` text: usage, then one line (or a few) per option from [`OPTIONS`], then the exit codes.
pub fn help() -> String {
    use std::fmt::Write as _;
    let mut out = String::from(HELP_USAGE);
    out.push_str("\noptions (each also read from the variable in brackets; the flag wins):\n");
    for opt in OPTIONS {
        let left = match opt.value {
            Some(v) => format!("  --{} {v}", opt.name),
            None => format!("  --{}", opt.name),
        };
        let var = match opt.accepts {
            Accepts::Switch => format!("[{}=1]", option_variable(opt.name)),
            _ => format!("[{}]", option_variable(opt.name)),
        };
        let mut lines = opt.help.lines();
        let first = lines.next().unwrap_or("");
        // The text at column 25 (two spaces after a longer flag), the variable at column 66.
        let line = if left.len() < 24 {
            format!("{left:<24} {first}")
        } else {
            format!("{left}  {first}")
        };
        let _ = writeln!(out, "{line:<64} {var}");
        for more in lines {
            let _ = writeln!(out, "{:<24} {more}", "");
        }
    }
    for (left, what) in [
        ("  -h, --help", "this text"),
        ("  -V, --version", "the version"),
    ] {
        let _ = writeln!(out, "{left:<24} {what}");
    }
    let _ = write!(
        out,
        "\nexit codes: {} usage error, {} refused (NCCL would certainly fail, or strict mode), {} command not\n\
         executable, {} command not found, {}+N interrupted by signal N during a check, {} internal error\n\
         (env, doctor, check); otherwise the command's own.\n",
        crate::exit::USAGE,
        crate::exit::REFUSED,
        crate::exit::CANNOT_EXECUTE,
        crate::exit::NOT_FOUND,
        crate::exit::SIGNAL_BASE,
        crate::exit::SOFTWARE
    );
    out
}

/// The commands part of `--help`.
const HELP_USAGE: &str = "\
ncclenv: give a multi-GPU job an NCCL environment that works, or stop with the exact reason

usage:
  ncclenv [OPTIONS] -- COMMAND [ARGS...]   decide, set the variables, exec COMMAND
  ncclenv [OPTIONS] env                    print the decisions as shell lines: eval \"$(ncclenv env)\"
  ncclenv [OPTIONS] doctor [--json]        everything probed and decided (exit 0 ok, 1 warnings, 78 refuse)
  ncclenv [OPTIONS] check [bootstrap|allreduce] [--json]
                                           prove the environment with the real NCCL
  ncclenv install DIR                      copy ncclenv (and ncclenv-check beside it) into DIR
  ncclenv [OPTIONS] explain [--json] [FILE...]
                                           read NCCL debug logs (stdin when no FILE): per process
                                           the bootstrap, interfaces, transport and every error with
                                           its cause and fix (exit 0 nothing wrong, 1 something wrong)
  ncclenv help [SUBCOMMAND]                one subcommand's page (also: ncclenv SUBCOMMAND --help)
  ncclenv completions bash|zsh|fish        the shell's completion script: source <(ncclenv completions bash)
  env, doctor and check also take -- COMMAND [ARGS...]: the job's command, whose launcher arguments
  (--nnodes, --master, ...) are read exactly as the entrypoint reads them; it is not run.
";
/// The variable of an option: `NCCLENV_` and the long name in upper case with `_` for `-`
/// (`check-timeout` → `NCCLENV_CHECK_TIMEOUT`).
pub fn option_variable(key: &str) -> String {
    format!("NCCLENV_{}", key.replace('-', "_").to_ascii_uppercase())
}

/// Every `NCCLENV_*` name ncclenv knows: the options' variables ([`option_variable`] of each switch and
/// valued option) and the few others it reads.
pub fn option_variables() -> Vec<String> {
    OPTIONS
        .iter()
        .map(|o| option_variable(o.name))
        .chain(other_variables().map(str::to_string))
        .collect()
}

/// Variables named `NCCLENV_*` that ncclenv or its helper reads but that are not options: those of
/// [`ENV_ONLY`] (`NCCLENV_CUDA_LIB`) and, in debug builds only, `NCCLENV_TEST_PANIC` (the tests' forced
/// panic, `src/main.rs`).
fn other_variables() -> impl Iterator<Item = &'static str> {
    const TEST_ONLY: &[&str] = &[
        #[cfg(debug_assertions)]
        "NCCLENV_TEST_PANIC",
    ];
    ENV_ONLY
        .iter()
        .map(|e| e.name)
        .filter(|n| n.starts_with("NCCLENV_"))
        .chain(TEST_ONLY.iter().copied())
}

/// The known name closest to `name`, when `name` looks like a typo of it: the same name in another case, at
/// most two edits away (Levenshtein distance of the parts after `NCCLENV_`, at most a third of the length),
/// or a known name with a suffix added (`NCCLENV_LOG_LEVEL` → `NCCLENV_LOG`; the longest such name).
pub fn nearest_variable(name: &str) -> Option<String> {
    let known = option_variables();
    let upper = name.to_ascii_uppercase();
    if let Some(known_name) = known.iter().find(|k| **k == upper) {
        return Some(known_name.clone());
    }
    let tail = |s: &str| s.get(8..).unwrap_or("").to_string();
    let t = tail(&upper);
    known
        .iter()
        .map(|k| (edit_distance(&t, &tail(k)), k))
        .filter(|(d, k)| *d <= 2 && *d * 3 <= tail(k).len().max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.clone())
        .or_else(|| {
            known
                .iter()
                .filter(|k| {
                    upper
                        .strip_prefix(k.as_str())
                        .is_some_and(|rest| rest.starts_with('_'))
                })
                .max_by_key(|k| k.len())
                .cloned()
        })
}

/// Levenshtein distance in characters (insertions, deletions, substitutions), for [`nearest_variable`].
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// The words `ncclenv check` takes (and `NCCLENV_CHECK`, which also takes `off`).
pub const CHECK_WORDS: &[&str] = &["bootstrap", "allreduce"];

/// One subcommand: its name, usage line, what it does, the words it takes, and its exit codes (its `--help`
/// page, [`subcommand_help`]).
pub struct Sub {
    /// The word, e.g. `doctor`.
    pub name: &'static str,
    /// The usage line after `ncclenv `.
    pub usage: &'static str,
    /// What it does, a few lines.
    pub about: &'static str,
    /// The exit codes, one line.
    pub exits: &'static str,
    /// What it takes after its word, for the shell completions (`crate::completions`).
    pub args: Arg,
}

/// What a subcommand takes after its word (besides options and the job's command after `--`): the one list
/// the parser ([`parse`]) and the shell completions (`crate::completions`) read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    /// Nothing.
    Nothing,
    /// One of these words, once.
    Words(&'static [&'static str]),
    /// One subcommand's name, once.
    Subcommand,
    /// One directory.
    Dir,
    /// Files, any number.
    Files,
}

/// The shells `ncclenv completions` writes a script for.
pub const SHELL_WORDS: &[&str] = &["bash", "zsh", "fish"];

/// A shell `ncclenv completions` writes a script for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shell {
    /// GNU bash 4.0 or later.
    Bash,
    /// zsh with compsys (`compinit`).
    Zsh,
    /// fish 3.
    Fish,
}

impl Shell {
    /// The shell named `word` (one of [`SHELL_WORDS`], exactly).
    pub fn from_word(word: &str) -> Option<Shell> {
        match word {
            "bash" => Some(Shell::Bash),
            "zsh" => Some(Shell::Zsh),
            "fish" => Some(Shell::Fish),
            _ => None,
        }
    }
}

/// Every subcommand, in the order of `--help`.
pub const SUBCOMMANDS: &[Sub] = &[
    Sub {
        name: "env",
        usage: "[OPTIONS] env [-- COMMAND [ARGS...]]",
        about: "Print the decisions as shell lines (export NAME='value', unset NAME) for\n\
                eval \"$(ncclenv env)\". The job's command after -- is read (its launcher arguments),\n\
                not run. On a refusal or a usage error it prints `exit 78` (`exit 2`) so that the\n\
                script that evals it stops.",
        exits: "0 printed, 2 usage error, 78 refused",
        args: Arg::Nothing,
    },
    Sub {
        name: "doctor",
        usage: "[OPTIONS] doctor [--json] [-- COMMAND [ARGS...]]",
        about: "Everything probed and decided: interfaces, routes, the peer, RDMA, memlock, /dev/shm,\n\
                GPUs, NCCL installations and config files, every change with its reason, every finding\n\
                with its remedy, the verdict. --json: one object (docs/doctor.schema.json). The job's\n\
                command after -- is read (its launcher arguments), not run.",
        exits: "0 NCCL should work, 1 a warning applies, 78 ncclenv would refuse, 2 usage error",
        args: Arg::Nothing,
    },
    Sub {
        name: "check",
        usage: "[OPTIONS] check [bootstrap|allreduce] [--json] [-- COMMAND [ARGS...]]",
        about: "Prove the environment the entrypoint would give COMMAND with the real NCCL, in the\n\
                helper ncclenv-check (glibc) beside ncclenv: bootstrap (default) creates a 2-rank\n\
                communicator on the chosen interface, allreduce runs one on the GPUs.",
        exits: "0 passed, 1 failed, 69 could not run the check (no libnccl, no helper, no glibc\n\
                loader), 78 refused (nothing is run), 128+N interrupted, 2 usage error",
        args: Arg::Words(CHECK_WORDS),
    },
    Sub {
        name: "install",
        usage: "install DIR",
        about: "Copy ncclenv (and ncclenv-check beside it) into DIR (created when its parent exists),\n\
                mode 755, through a rename; a Kubernetes init container's way to hand it to the training\n\
                container. Identical copies already there (a read-only volume) count as installed.",
        exits: "0 copied or already there, 1 could not (the reason on stderr), 2 usage error",
        args: Arg::Dir,
    },
    Sub {
        name: "explain",
        usage: "[OPTIONS] explain [--json] [FILE...]",
        about: "Read NCCL debug logs (per-process files or a job's combined log; stdin when no FILE):\n\
                per process the version, bootstrap interface, transport and every WARN with cause and\n\
                fix; across processes what breaks jobs between ranks. Runs in ncclenv-check.",
        exits: "0 nothing wrong found, 1 something wrong, 2 usage error (an unreadable file, no helper that can start)",
        args: Arg::Files,
    },
    Sub {
        name: "help",
        usage: "help [SUBCOMMAND]",
        about: "This page, or one subcommand's (also: ncclenv SUBCOMMAND --help).",
        exits: "0",
        args: Arg::Subcommand,
    },
    Sub {
        name: "completions",
        usage: "completions bash|zsh|fish",
        about: "Print the completion script of the shell, made from ncclenv's table of options and\n\
                subcommands: `source <(ncclenv completions bash)`, or write it where the shell loads\n\
                completions from (bash: ~/.local/share/bash-completion/completions/ncclenv; zsh: a\n\
                folder of $fpath as _ncclenv; fish: ~/.config/fish/completions/ncclenv.fish).",
        exits: "0 printed, 2 usage error",
        args: Arg::Words(SHELL_WORDS),
    },
];

/// The subcommand named `word`.
pub fn subcommand(word: &str) -> Option<&'static Sub> {
    SUBCOMMANDS.iter().find(|s| s.name == word)
}

/// What to say when the job's command was not found (exit 127) and its name is one of [`SUBCOMMANDS`]: with
/// `ENTRYPOINT ["ncclenv", "--"]`, `docker run IMAGE doctor` runs `doctor` as the job's command. The text
/// follows `NAME: command not found` and says how to run the subcommand instead (docs/images.md, "Running a
/// subcommand in an image"); `None` for any other name, a path, or the empty command.
pub fn subcommand_as_command_hint(command: &[std::ffi::OsString]) -> Option<String> {
    let name = command.first()?.to_str()?;
    let sub = subcommand(name)?;
    let w = sub.name;
    Some(format!(
        "{w} is ncclenv's own subcommand: docker run --entrypoint ncclenv IMAGE {w}, or in a live pod \
         kubectl exec POD -- ncclenv {w} -- COMMAND"
    ))
}

/// The names of [`SUBCOMMANDS`].
pub fn subcommand_names() -> Vec<&'static str> {
    SUBCOMMANDS.iter().map(|s| s.name).collect()
}

/// The `--help` page of one subcommand: usage, what it does, its exit codes, and where the options are.
pub fn subcommand_help(sub: &Sub) -> String {
    format!(
        "usage: ncclenv {}\n\n{}\n\nexit codes: {}\n\noptions: every option of ncclenv --help applies (each also an NCCLENV_* variable).\n",
        sub.usage, sub.about, sub.exits
    )
}

/// The long flags ncclenv knows, without dashes: every option of [`OPTIONS`], `json`, `help`, `version`.
pub fn flag_names() -> Vec<&'static str> {
    OPTIONS
        .iter()
        .map(|o| o.name)
        .chain(["json", "help", "version"])
        .collect()
}

/// The word of `known` closest to `word` when `word` looks like a typo of it: at most two edits away and at
/// most a third of the known word's length (the rule of [`nearest_variable`]), or `word` a prefix of
/// exactly one known word of at least two characters more.
pub fn nearest_word<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    let w = word.to_ascii_lowercase();
    known
        .iter()
        .map(|k| (edit_distance(&w, k), *k))
        .filter(|(d, k)| *d <= 2 && *d * 3 <= k.len().max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
        .or_else(|| {
            let mut p = known
                .iter()
                .filter(|k| w.len() >= 2 && k.starts_with(w.as_str()));
            match (p.next(), p.next()) {
                (Some(k), None) => Some(*k),
                _ => None,
            }
        })
}

/// `unknown option A`, with the nearest flag when `key` (A without dashes and `=value`) looks like a typo.
fn unknown_flag(a: &str, key: &str) -> UsageError {
    match nearest_word(key, &flag_names()) {
        Some(n) => UsageError(format!("unknown option {a}; did you mean --{n}?")),
        None => UsageError(format!("unknown option {a}")),
    }
}

/// `WHAT: invalid value "W" (expected A or B)`, with the nearest word when `w` looks like a typo.
fn unknown_word(what: &str, w: &str, words: &[&str]) -> UsageError {
    let list = match words.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        Some((last, _)) => last.to_string(),
        None => String::new(),
    };
    let near = nearest_word(w, words)
        .map(|n| format!("; did you mean {n}?"))
        .unwrap_or_default();
    UsageError(format!(
        "{what}: invalid value {w:?} (expected {list}){near}"
    ))
}

/// Read the `NCCLENV_*` variables into a config, as `getenv` sees them (the first entry of a name wins).
///
/// - An option's exact variable name ([`option_variables`]) with a value that is not UTF-8 or not valid is a
///   usage error naming the variable; an empty value means "not set" for valued options and "off" for
///   switches.
/// - Every other name beginning with `NCCLENV_` (another case, a typo, a name or value that is not UTF-8) is
///   not an option: it goes to [`Config::unknown_vars`] (its name as text, invalid bytes as `\xNN`, with the
///   nearest known name) and never fails.
///
/// Variables not beginning with `NCCLENV_` are ignored.
pub fn config_from_env<I: IntoIterator<Item = (OsString, OsString)>>(
    vars: I,
) -> Result<Config, UsageError> {
    use std::os::unix::ffi::OsStrExt;
    let mut cfg = Config::default();
    let mut seen: Vec<OsString> = Vec::new();
    for (k, v) in vars {
        if !k.as_bytes().starts_with(b"NCCLENV_") || seen.contains(&k) {
            continue;
        }
        seen.push(k.clone());
        let opt = k
            .to_str()
            .and_then(|name| OPTIONS.iter().find(|o| option_variable(o.name) == name));
        let Some(opt) = opt else {
            if k.to_str()
                .is_some_and(|n| other_variables().any(|o| o == n))
            {
                continue;
            }
            let name = crate::text::bytes_text(k.as_bytes());
            let near = k.to_str().and_then(nearest_variable);
            cfg.unknown_vars.push((name, near));
            continue;
        };
        let var = option_variable(opt.name);
        let Some(v) = v.to_str() else {
            return Err(UsageError(format!("{var}: the value is not valid UTF-8")));
        };
        // An empty variable means "not set" for values, "off" for switches.
        if v.is_empty() && opt.accepts != Accepts::Switch {
            continue;
        }
        apply(&mut cfg, opt, &var, v)?;
    }
    Ok(cfg)
}

/// Parse `args` (without argv\[0\]) and the environment. Options may come before or after the subcommand
/// word; everything after `--` is the command, untouched: run by the entrypoint, only read (its launcher
/// arguments) by `env`, `doctor` and `check`.
pub fn parse<I: IntoIterator<Item = (OsString, OsString)>>(
    args: &[OsString],
    vars: I,
) -> Result<Cli, UsageError> {
    let mut config = config_from_env(vars)?;
    let mode = match read_args(args, &mut config)? {
        Args::Help(topic) => Mode::Help(topic.and_then(|t| subcommand(&t)).map(|s| s.name)),
        Args::Version => Mode::Version,
        Args::Words { words, json, cmd } => mode(&words, json, cmd)?,
    };
    Ok(Cli { mode, config })
}

/// The command line read word by word: `--help`/`--version` at once, or the subcommand's words, `--json`
/// and the command after `--`.
enum Args {
    /// `-h`/`--help`, with the subcommand word before or after it, if any.
    Help(Option<String>),
    Version,
    Words {
        words: Vec<String>,
        json: bool,
        cmd: Option<Vec<OsString>>,
    },
}

/// Apply every option of `args` to `cfg` (the flag wins over the variable) and collect the rest.
fn read_args(args: &[OsString], cfg: &mut Config) -> Result<Args, UsageError> {
    let mut words: Vec<String> = Vec::new();
    let mut json = false;
    let mut cmd: Option<Vec<OsString>> = None;
    let mut i = 0;
    while i < args.len() {
        let raw = &args[i];
        if raw == "--" {
            let c: Vec<OsString> = args[i + 1..].to_vec();
            if c.is_empty() {
                return Err(UsageError("no command after --".into()));
            }
            cmd = Some(c);
            break;
        }
        let Some(a) = raw.to_str() else {
            return Err(UsageError(format!(
                "argument {:?} is not valid UTF-8 (put the command after --)",
                raw.to_string_lossy()
            )));
        };
        match a {
            "-h" | "--help" => {
                // `ncclenv doctor --help`, `ncclenv --help doctor`: that subcommand's page.
                let after = args[i + 1..]
                    .iter()
                    .take_while(|a| *a != "--")
                    .filter_map(|a| a.to_str())
                    .find(|a| !a.starts_with('-'))
                    .map(str::to_string);
                return Ok(Args::Help(words.first().cloned().or(after)));
            }
            "-V" | "--version" => return Ok(Args::Version),
            "--json" => json = true,
            _ if a.starts_with("--") => {
                let body = &a[2..];
                let (key, inline) = match body.split_once('=') {
                    Some((k, v)) => (k, Some(v.to_string())),
                    None => (body, None),
                };
                let Some(opt) = option(key) else {
                    return Err(unknown_flag(a, key));
                };
                if opt.accepts == Accepts::Switch {
                    apply(cfg, opt, a, inline.as_deref().unwrap_or("1"))?;
                } else {
                    let v = match inline {
                        Some(v) => v,
                        None => {
                            i += 1;
                            next_value(args.get(i), key)?
                        }
                    };
                    apply(cfg, opt, &format!("--{key}"), &v)?;
                }
            }
            _ if a.starts_with('-') && a.len() > 1 => {
                return Err(unknown_flag(a, a.trim_start_matches('-')))
            }
            _ => words.push(a.to_string()),
        }
        i += 1;
    }
    Ok(Args::Words { words, json, cmd })
}

/// The value of `--key VALUE`: the next argument, which must exist, be UTF-8 and not be `--` (`--peer -- cmd`:
/// the `--` starts the command, it is not the value).
fn next_value(next: Option<&OsString>, key: &str) -> Result<String, UsageError> {
    match next {
        None => Err(UsageError(format!("--{key} needs a value"))),
        Some(v) if v == "--" => Err(UsageError(format!("--{key} needs a value"))),
        Some(v) => match v.to_str() {
            Some(v) => Ok(v.to_string()),
            None => Err(UsageError(format!("--{key}: value is not valid UTF-8"))),
        },
    }
}

/// The mode the words say: none (the entrypoint, with a command), or a subcommand and its arguments.
fn mode(words: &[String], json: bool, cmd: Option<Vec<OsString>>) -> Result<Mode, UsageError> {
    let Some(first) = words.first().map(String::as_str) else {
        return match cmd {
            Some(cmd) if !json => Ok(Mode::Exec(cmd)),
            Some(_) => Err(UsageError("--json goes with doctor, check or explain".into())),
            None => Err(UsageError(
                "nothing to do: give a command after -- (ncclenv -- COMMAND), or env, doctor, check, explain, install DIR"
                    .into(),
            )),
        };
    };
    let cmd = cmd.unwrap_or_default();
    let mode = match first {
        "env" if words.len() == 1 => Mode::Env(cmd),
        "doctor" if words.len() == 1 => Mode::Doctor { json, cmd },
        "install" if words.len() == 2 && cmd.is_empty() => Mode::Install(PathBuf::from(&words[1])),
        "install" if words.len() != 2 => {
            return Err(UsageError(
                "install takes one directory: ncclenv install DIR".into(),
            ))
        }
        "install" => {
            return Err(UsageError(
                "install takes no command after --: ncclenv install DIR".into(),
            ))
        }
        "check" if words.len() <= 2 => Mode::Check {
            mode: match words.get(1).map(String::as_str) {
                None => None,
                Some("bootstrap") => Some(CheckMode::Bootstrap),
                Some("allreduce") => Some(CheckMode::Allreduce),
                Some(w) => return Err(unknown_word("check", w, CHECK_WORDS)),
            },
            json,
            cmd,
        },
        "completions" if words.len() == 2 && cmd.is_empty() => match Shell::from_word(&words[1]) {
            Some(shell) => Mode::Completions(shell),
            None => return Err(unknown_word("completions", &words[1], SHELL_WORDS)),
        },
        "completions" => {
            return Err(UsageError(
                "completions takes one shell: ncclenv completions bash|zsh|fish".into(),
            ))
        }
        "help" if words.len() <= 2 => match words.get(1) {
            None => Mode::Help(None),
            Some(w) => match subcommand(w) {
                Some(s) => Mode::Help(Some(s.name)),
                None => return Err(unknown_word("help", w, &subcommand_names())),
            },
        },
        "explain" => {
            if !cmd.is_empty() {
                return Err(UsageError(
                    "explain reads log files, not a command: ncclenv explain [--json] [FILE...]"
                        .into(),
                ));
            }
            Mode::Explain {
                json,
                files: words[1..].iter().map(PathBuf::from).collect(),
            }
        }
        w @ ("env" | "doctor" | "check") => {
            return Err(UsageError(format!(
                "unexpected argument after {w}: {:?} (put the job's command after --)",
                words[1..].join(" ")
            )))
        }
        w => {
            let near = nearest_word(w, &subcommand_names())
                .map(|n| format!("did you mean {n}? "))
                .unwrap_or_default();
            return Err(UsageError(format!(
                "unknown subcommand {w:?}; {near}to run a command write: ncclenv -- {w} ..."
            )));
        }
    };
    if json
        && !matches!(
            mode,
            Mode::Doctor { .. } | Mode::Check { .. } | Mode::Explain { .. }
        )
    {
        return Err(UsageError(
            "--json goes with doctor, check or explain".into(),
        ));
    }
    Ok(mode)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_subcommand_as_the_command_gets_a_hint_and_nothing_else_does() {
        let cmd = |w: &str| vec![std::ffi::OsString::from(w)];
        let h = subcommand_as_command_hint(&cmd("doctor")).unwrap_or_default();
        assert!(h.contains("--entrypoint ncclenv IMAGE doctor"), "{h}");
        assert!(
            h.contains("kubectl exec POD -- ncclenv doctor -- COMMAND"),
            "{h}"
        );
        for other in ["python", "/usr/bin/doctor", "", "doctorr"] {
            assert_eq!(subcommand_as_command_hint(&cmd(other)), None, "{other}");
        }
        assert_eq!(subcommand_as_command_hint(&[]), None);
    }

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

    const BEGIN: &str = "<!-- options:begin (generated from src/cli.rs) -->\n";
    const END: &str = "<!-- options:end -->";

    /// docs/configuration.md's table of variables, from [`OPTIONS`] and [`ENV_ONLY`].
    fn readme_table() -> String {
        let mut t = String::from("| variable | flag | meaning | default |\n|---|---|---|---|\n");
        for o in OPTIONS {
            let flag = match o.value {
                Some(v) => format!("`--{} {v}`", o.name),
                None => format!("`--{}`", o.name),
            };
            let meaning = match o.accepts {
                Accepts::Whole { min, max, .. } => {
                    o.meaning.replace("{range}", &format!("{min}\u{2013}{max}"))
                }
                _ => o.meaning.to_string(),
            };
            t.push_str(&format!(
                "| `{}` | {flag} | {meaning} | {} |\n",
                option_variable(o.name),
                o.default
            ));
        }
        for e in ENV_ONLY {
            t.push_str(&format!(
                "| `{}` | | {} | {} |\n",
                e.name, e.meaning, e.default
            ));
        }
        t
    }

    /// docs/configuration.md's table of variables is [`OPTIONS`]; with `NCCLENV_BLESS=1` this test rewrites it
    /// instead of failing. Every `NCCLENV_*` name the README mentions is an option.
    #[test]
    fn variables_table_is_the_options_table() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        crate::doc_table::check_or_bless(
            "docs/configuration.md",
            BEGIN,
            END,
            &readme_table(),
            "docs/configuration.md's variables differ from cli::OPTIONS; run NCCLENV_BLESS=1 cargo test --lib cli",
        );
        let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
        let mut named = 0;
        for word in readme.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if let Some(rest) = word.strip_prefix("NCCLENV_").filter(|r| !r.is_empty()) {
                named += 1;
                assert!(
                    OPTIONS.iter().any(|o| option_variable(o.name) == word)
                        || ENV_ONLY.iter().any(|e| e.name == word),
                    "README.md names NCCLENV_{rest}, which is not an option"
                );
            }
        }
        assert!(named > 5, "the README names {named} NCCLENV_* variables");
    }

    /// Every option is in `--help` with its variable, every `{range}` has a range, and a default the README
    /// gives as one value is the config's default.
    #[test]
    fn help_and_defaults_follow_the_table() {
        let h = help();
        for o in OPTIONS {
            let var = option_variable(o.name);
            let line = h
                .lines()
                .find(|l| {
                    l.trim_start().starts_with(&format!("--{} ", o.name))
                        || l.trim_start() == format!("--{}", o.name)
                })
                .unwrap_or_else(|| panic!("--help lacks --{}", o.name));
            assert!(line.contains(&var), "{line}");
            assert_eq!(
                o.meaning.contains("{range}"),
                matches!(o.accepts, Accepts::Whole { .. }),
                "{}",
                o.name
            );
            let one = o
                .default
                .strip_prefix('`')
                .and_then(|d| d.strip_suffix('`'))
                .filter(|d| !d.contains('`'));
            if let (Some(d), false) = (one, o.accepts == Accepts::AbsPath) {
                let mut c = Config::default();
                apply(&mut c, o, "default", d).expect("default parses");
                assert_eq!(c, Config::default(), "--{}'s default {d}", o.name);
            }
        }
        for code in [
            crate::exit::USAGE,
            crate::exit::REFUSED,
            crate::exit::CANNOT_EXECUTE,
            crate::exit::NOT_FOUND,
        ] {
            assert!(h.contains(&format!("{code} ")), "{code}");
        }
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
        assert_eq!(c.mode, Mode::Env(vec![]));
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
            Mode::Doctor {
                json: true,
                cmd: vec![]
            }
        );
        assert_eq!(
            parse(&os(&["check", "allreduce"]), env(&[]))
                .expect("p")
                .mode,
            Mode::Check {
                mode: Some(CheckMode::Allreduce),
                json: false,
                cmd: vec![]
            }
        );
        assert_eq!(
            parse(&os(&["--version"]), env(&[])).expect("p").mode,
            Mode::Version
        );
    }

    #[test]
    fn typos_of_flags_subcommands_and_words_get_the_nearest_one() {
        let e = |a: &[&str]| parse(&os(a), env(&[])).expect_err("usage error").0;
        assert_eq!(
            e(&["doctor", "--jsn"]),
            "unknown option --jsn; did you mean --json?"
        );
        assert!(e(&["--stric", "doctor"]).ends_with("did you mean --strict?"));
        assert!(e(&["--log-fromat=json", "env"]).ends_with("did you mean --log-format?"));
        assert_eq!(e(&["--zzzzzz", "env"]), "unknown option --zzzzzz");
        assert!(
            e(&["doctr"]).contains("did you mean doctor?"),
            "{}",
            e(&["doctr"])
        );
        assert!(e(&["chek"]).contains("did you mean check?"));
        assert!(!e(&["python"]).contains("did you mean"));
        // One list of words for `check`: what it lists is what it takes.
        let m = e(&["check", "boot"]);
        assert_eq!(
            m,
            "check: invalid value \"boot\" (expected bootstrap or allreduce); did you mean bootstrap?"
        );
        for w in CHECK_WORDS {
            assert!(parse(&os(&["check", w]), env(&[])).is_ok(), "{w}");
        }
        assert!(e(&["check", "off"]).contains("expected bootstrap or allreduce"));
        assert!(e(&["help", "doctr"]).contains("did you mean doctor?"));
    }

    #[test]
    fn every_subcommand_has_its_own_help_page() {
        let mode = |a: &[&str]| parse(&os(a), env(&[])).expect("p").mode;
        assert_eq!(mode(&["--help"]), Mode::Help(None));
        assert_eq!(mode(&["help"]), Mode::Help(None));
        for sub in SUBCOMMANDS {
            assert_eq!(mode(&[sub.name, "--help"]), Mode::Help(Some(sub.name)));
            assert_eq!(mode(&["-h", sub.name]), Mode::Help(Some(sub.name)));
            assert_eq!(mode(&["help", sub.name]), Mode::Help(Some(sub.name)));
            let page = subcommand_help(sub);
            assert!(
                page.starts_with(&format!("usage: ncclenv {}", sub.usage)),
                "{page}"
            );
            assert!(page.contains("exit codes: "), "{page}");
            // The global page names every subcommand.
            assert!(help().contains(&format!(" {} ", sub.name)), "{}", sub.name);
        }
        // A command after -- is the job's, its --help is not ncclenv's.
        assert_eq!(
            mode(&["--", "python", "--help"]),
            Mode::Exec(os(&["python", "--help"]))
        );
    }

    #[test]
    fn subcommands_take_the_jobs_command_after_double_dash() {
        let job = ["torchrun", "--nnodes=2", "--master-addr", "m", "t.py"];
        let c = parse(
            &os(&[&["--strict", "doctor", "--json", "--"][..], &job[..]].concat()),
            env(&[]),
        )
        .expect("doctor -- cmd");
        assert_eq!(
            c.mode,
            Mode::Doctor {
                json: true,
                cmd: os(&job)
            }
        );
        assert!(c.config.strict);
        let c = parse(&os(&[&["env", "--"][..], &job[..]].concat()), env(&[])).expect("env");
        assert_eq!(c.mode, Mode::Env(os(&job)));
        let c = parse(
            &os(&[&["check", "bootstrap", "--json", "--"][..], &job[..]].concat()),
            env(&[]),
        )
        .expect("check");
        assert_eq!(
            c.mode,
            Mode::Check {
                mode: Some(CheckMode::Bootstrap),
                json: true,
                cmd: os(&job)
            }
        );
        // The command is untouched, even words that look like ours.
        let c = parse(&os(&["doctor", "--", "doctor", "--json"]), env(&[])).expect("p");
        assert_eq!(
            c.mode,
            Mode::Doctor {
                json: false,
                cmd: os(&["doctor", "--json"])
            }
        );
        assert!(parse(&os(&["doctor", "--"]), env(&[])).is_err());
        assert!(parse(&os(&["env", "x", "--", "true"]), env(&[])).is_err());
        assert!(parse(&os(&["--json", "--", "true"]), env(&[])).is_err());
    }

    #[test]
    fn debug_switch_folder_and_explain_files() {
        let c = parse(
            &os(&["--debug", "--", "true"]),
            env(&[("NCCLENV_DEBUG_DIR", "/var/log/nccl")]),
        )
        .expect("debug");
        assert!(c.config.debug);
        assert_eq!(
            c.config.debug_dir.as_deref(),
            Some(std::path::Path::new("/var/log/nccl"))
        );
        let c = parse(&os(&["env"]), env(&[("NCCLENV_DEBUG", "1")])).expect("env");
        assert!(c.config.debug);
        let e = parse(&os(&["env"]), env(&[("NCCLENV_DEBUG_DIR", "logs")])).expect_err("relative");
        assert!(
            e.0.contains("NCCLENV_DEBUG_DIR") && e.0.contains("absolute"),
            "{}",
            e.0
        );
        assert!(parse(&os(&["--debug-dir", "rel", "env"]), env(&[])).is_err());
        assert_eq!(
            parse(&os(&["explain", "--json", "a.log", "-"]), env(&[]))
                .expect("explain")
                .mode,
            Mode::Explain {
                json: true,
                files: vec![PathBuf::from("a.log"), PathBuf::from("-")]
            }
        );
        assert_eq!(
            parse(&os(&["explain"]), env(&[])).expect("stdin").mode,
            Mode::Explain {
                json: false,
                files: vec![]
            }
        );
        assert!(parse(&os(&["explain", "--", "true"]), env(&[])).is_err());
    }

    #[test]
    fn numeric_options_are_bounded_and_the_message_says_the_range() {
        // (variable, largest allowed, smallest allowed)
        let cases = [
            ("CHECK_TIMEOUT", 86_400u64, 1u64),
            ("RESOLVE_TIMEOUT_MS", 600_000, 1),
            ("CHECK_MIB", 65_536, 1),
            ("CHECK_GPUS", 1_024, 1),
            ("SHM_MIN", 1_048_576, 0),
            ("PREFLIGHT_TIMEOUT", 86_400, 1),
            ("PREFLIGHT_PORT", 65_535, 1),
        ];
        for (name, max, min) in cases {
            let var = format!("NCCLENV_{name}");
            let flag = format!("--{}", name.to_ascii_lowercase().replace('_', "-"));
            for ok in [min, max] {
                let c = parse(&os(&["env"]), env(&[(&var, &ok.to_string())]));
                assert!(c.is_ok(), "{var}={ok}: {c:?}");
                let c = parse(&os(&[&format!("{flag}={ok}"), "env"]), env(&[]));
                assert!(c.is_ok(), "{flag}={ok}: {c:?}");
            }
            let range = format!("from {min} to {max}");
            for bad in [
                (max + 1).to_string(),
                u64::MAX.to_string(),
                "99999999999999999999".to_string(),
            ] {
                let e = parse(&os(&["env"]), env(&[(&var, &bad)])).expect_err(&var);
                assert!(e.0.contains(&var) && e.0.contains(&range), "{}", e.0);
                let e = parse(&os(&[&flag, &bad, "env"]), env(&[])).expect_err(&flag);
                assert!(e.0.contains(&flag) && e.0.contains(&range), "{}", e.0);
            }
            if min > 0 {
                let e = parse(&os(&["env"]), env(&[(&var, "0")])).expect_err("zero");
                assert!(e.0.contains(&range), "{}", e.0);
            }
        }
        let c = parse(
            &os(&["env"]),
            env(&[
                ("NCCLENV_CHECK_TIMEOUT", "86400"),
                ("NCCLENV_CHECK_GPUS", "1024"),
            ]),
        )
        .expect("p");
        assert_eq!(
            (c.config.check_timeout_s, c.config.check_gpus),
            (86_400, 1_024)
        );
    }

    #[test]
    fn peer_values_need_a_host_a_closed_bracket_and_a_real_port() {
        for bad in [
            "10.0.0.1:abc",
            "10.0.0.1:99999",
            "10.0.0.1:0",
            "10.0.0.1:",
            "10.0.0.1:+80",
            "[fd00::1",
            "[fd00::1]x",
            "[fd00::1]:65536",
            "[]:80",
            ":29500",
            "a b",
        ] {
            let e = parse(&os(&["env"]), env(&[("NCCLENV_PEER", bad)])).expect_err(bad);
            assert!(e.0.contains("NCCLENV_PEER"), "{bad}: {}", e.0);
            let e = parse(&os(&["--peer", bad, "env"]), env(&[])).expect_err(bad);
            assert!(e.0.contains("--peer"), "{bad}: {}", e.0);
        }
        for good in [
            "10.0.0.1",
            "10.0.0.1:1",
            "10.0.0.1:65535",
            "m.example:29500",
            "[fd00::1]",
            "[fd00::1]:29500",
            "fd00::1",
            "tcp://m:8090/x",
        ] {
            let c = parse(&os(&["env"]), env(&[("NCCLENV_PEER", good)]));
            assert!(c.is_ok(), "{good}: {c:?}");
        }
    }

    #[test]
    fn a_bad_peer_url_is_quoted_without_its_password() {
        let e = parse(
            &os(&["env"]),
            env(&[("NCCLENV_PEER", "etcd://root:S3CR3T@10.0.0.5:99999")]),
        )
        .expect_err("bad port");
        assert!(
            e.0.contains("NCCLENV_PEER") && e.0.contains("***@10.0.0.5") && !e.0.contains("S3CR3T"),
            "{}",
            e.0
        );
    }

    #[test]
    fn nnodes_range_with_min_above_max_is_a_usage_error() {
        let e = parse(&os(&["env"]), env(&[("NCCLENV_NNODES", "2:1")])).expect_err("2:1");
        assert!(
            e.0.contains("NCCLENV_NNODES") && e.0.contains("minimum 2"),
            "{}",
            e.0
        );
        assert!(parse(&os(&["--nnodes", "2:1", "env"]), env(&[])).is_err());
        assert!(parse(&os(&["env"]), env(&[("NCCLENV_NNODES", "x:3")])).is_err());
        assert_eq!(
            parse(&os(&["env"]), env(&[("NCCLENV_NNODES", "2:2")]))
                .expect("2:2")
                .config
                .nnodes,
            Some(2)
        );
    }

    #[test]
    fn a_valued_option_before_double_dash_or_at_the_end_needs_a_value() {
        for args in [
            &["--peer", "--", "true"][..],
            &["--peer"][..],
            &["--nnodes", "--", "true"][..],
            &["env", "--log"][..],
        ] {
            let e = parse(&os(args), env(&[])).expect_err("no value");
            assert!(e.0.ends_with("needs a value"), "{args:?}: {}", e.0);
        }
        // The hint is main's to add, once.
        let e = parse(&os(&["--bogus", "--", "true"]), env(&[])).expect_err("bogus");
        assert_eq!(e.0, "unknown option --bogus");
        let e = parse(&os(&["-x", "env"]), env(&[])).expect_err("-x");
        assert!(!e.0.contains("see --help"), "{}", e.0);
    }

    /// Generated cases of the `NCCLENV_*` property test (docs/reliability.md).
    const PROPTEST_NCCLENV_CASES: u32 = 3000;

    /// `NCCLENV_` and a tail: a known option's in any case, with a typo, or any bytes.
    fn nccl_env_name() -> impl Strategy<Value = OsString> {
        use std::os::unix::ffi::OsStringExt;
        let known: Vec<String> = OPTIONS
            .iter()
            .map(|o| option_variable(o.name)[8..].to_string())
            .collect();
        prop_oneof![
            3 => proptest::sample::select(known.clone()).prop_map(|t| t.into_bytes()),
            2 => (proptest::sample::select(known.clone()), any::<proptest::sample::Index>())
                .prop_map(|(t, i)| {
                    let mut b = t.into_bytes();
                    let at = i.index(b.len());
                    b[at] = b[at].to_ascii_lowercase();
                    b
                }),
            2 => (proptest::sample::select(known), any::<proptest::sample::Index>(), any::<u8>())
                .prop_map(|(t, i, c)| {
                    let mut b = t.into_bytes();
                    let at = i.index(b.len() + 1);
                    b.insert(at, c);
                    b
                }),
            1 => proptest::collection::vec(any::<u8>(), 0..12),
        ]
        .prop_map(|tail| OsString::from_vec([b"NCCLENV_".to_vec(), tail].concat()))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(PROPTEST_NCCLENV_CASES))]

        /// Any `NCCLENV_*` names and values: an error only ever comes from the first entry of an exact option
        /// name (and names it); every other name is listed as unknown, once, and never fails.
        #[test]
        fn nccl_env_names_and_values_of_any_bytes(
            entries in proptest::collection::vec(
                (nccl_env_name(), proptest::collection::vec(any::<u8>(), 0..10)), 0..6),
        ) {
            use std::os::unix::ffi::OsStringExt;
            let vars: Vec<(OsString, OsString)> =
                entries.into_iter().map(|(k, v)| (k, OsString::from_vec(v))).collect();
            let known = option_variables();
            let is_known = |k: &OsString| k.to_str().is_some_and(|k| known.iter().any(|n| n == k));
            let mut unknown: Vec<&OsString> = vars.iter().map(|(k, _)| k).filter(|k| !is_known(k)).collect();
            unknown.sort();
            unknown.dedup();
            match config_from_env(vars.clone()) {
                Ok(cfg) => prop_assert_eq!(cfg.unknown_vars.len(), unknown.len()),
                Err(e) => {
                    let var = e.0.split(':').next().unwrap_or("");
                    prop_assert!(known.iter().any(|k| k == var), "{}", e.0);
                }
            }
            let only_unknown: Vec<(OsString, OsString)> =
                vars.into_iter().filter(|(k, _)| !is_known(k)).collect();
            let cfg = config_from_env(only_unknown);
            prop_assert!(cfg.is_ok());
        }
    }

    #[test]
    fn unknown_names_are_reported_with_the_nearest_known_one() {
        let c = parse(
            &os(&["env"]),
            env(&[
                ("NCCLENV_Peer", "10.0.0.1"),
                ("NCCLENV_CHECK_TIMEOUTS", "5"),
                ("NCCLENV_FOO", "x"),
                ("NCCLENV_LOG", "off"),
                ("NCCLENV_LOG", "bogus"),
            ]),
        )
        .expect("unknown names never fail; the first NCCLENV_LOG wins");
        assert_eq!(c.config.peer, None);
        assert_eq!(c.config.log, LogLevel::Off);
        assert_eq!(
            c.config.unknown_vars,
            vec![
                ("NCCLENV_Peer".to_string(), Some("NCCLENV_PEER".to_string())),
                (
                    "NCCLENV_CHECK_TIMEOUTS".to_string(),
                    Some("NCCLENV_CHECK_TIMEOUT".to_string())
                ),
                ("NCCLENV_FOO".to_string(), None),
            ]
        );
        // A known name with a word added: that name, and its values where they are a short list.
        assert_eq!(
            nearest_variable("NCCLENV_LOG_LEVEL").as_deref(),
            Some("NCCLENV_LOG")
        );
        assert_eq!(
            nearest_variable("NCCLENV_CHECK_TIMEOUT_SECONDS").as_deref(),
            Some("NCCLENV_CHECK_TIMEOUT")
        );
        assert_eq!(
            crate::config::variable_values("NCCLENV_LOG"),
            Some("off, error, warn, info or debug")
        );
    }

    proptest! {
        #[test]
        fn garbage_in_every_variable_never_panics(v in ".{0,40}") {
            for name in ["PEER","NNODES","STRICT","LOG","LOG_FORMAT","TERMINATION_LOG","EXCLUDE","DISABLE","SYSFS","DEVFS","SHM_PATH","SHM_MIN",
                         "CHECK","CHECK_TIMEOUT","CHECK_GPUS","CHECK_MIB","CHECK_REPAIR","CHECK_HELPER","NCCL_LIB","RESOLVE_TIMEOUT_MS",
                         "DEBUG","DEBUG_DIR","PREFLIGHT","PREFLIGHT_TIMEOUT","PREFLIGHT_PORT","PREFLIGHT_MEASURE"] {
                let var = format!("NCCLENV_{name}");
                let r = parse(&os(&["env"]), vec![(OsString::from(&var), OsString::from(&v))]);
                if let Err(e) = r { prop_assert!(e.0.contains(&var), "{} lacks {}", e.0, var); }
                let flag = format!("--{}={}", name.to_ascii_lowercase().replace('_', "-"), v);
                let _ = parse(&[OsString::from(flag), OsString::from("env")], Vec::<(OsString, OsString)>::new());
            }
        }
    }
}
