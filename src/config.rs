//! ncclenv's own configuration: command-line flags and `NCCLENV_*` variables (the flag wins).
//! `cli` fills it; everything else only reads it.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Log verbosity (`NCCLENV_LOG`, `--log`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Print nothing (refusals and exec errors still print: they are the job's exit reason).
    Off,
    /// Errors only.
    Error,
    /// Errors and warnings.
    Warn,
    /// Also the one summary line (default).
    #[default]
    Info,
    /// Also every probed fact and rule.
    Debug,
}

/// How log lines on stderr are written (`NCCLENV_LOG_FORMAT`, `--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// `ncclenv: …` lines for people (default).
    #[default]
    Text,
    /// One JSON object per line, for log pipelines (fields in `docs/logging.md`).
    Json,
}

/// Which proof to run before the command (`NCCLENV_CHECK`, `--check`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum CheckMode {
    /// No check (default).
    #[default]
    Off,
    /// `ncclGetUniqueId` with the real libnccl in a child: NCCL accepts the environment (no GPU needed).
    Bootstrap,
    /// One process per GPU, a real allreduce, verified element by element.
    Allreduce,
}

/// The values of `NCCLENV_LOG` / `--log`.
pub const LOG_VALUES: &str = "off, error, warn, info or debug";
/// The values of `NCCLENV_LOG_FORMAT` / `--log-format`.
pub const LOG_FORMAT_VALUES: &str = "text or json";
/// The values of `NCCLENV_CHECK` / `--check`.
pub const CHECK_VALUES: &str = "off, bootstrap or allreduce";

/// The values an option variable takes, when they are a short list (`NCCLENV_LOG`: "off, error, warn, info or
/// debug"), for the remedy of a misspelt name.
pub fn variable_values(name: &str) -> Option<&'static str> {
    match name {
        "NCCLENV_LOG" => Some(LOG_VALUES),
        "NCCLENV_LOG_FORMAT" => Some(LOG_FORMAT_VALUES),
        "NCCLENV_CHECK" => Some(CHECK_VALUES),
        _ => None,
    }
}

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Host or address of the job's master (`NCCLENV_PEER`, `--peer`); overrides what launchers say.
    pub peer: Option<String>,
    /// Where `peer` was given, as written (`--peer` or `NCCLENV_PEER`), for the reason texts; `None`: not
    /// given, or not known (then `NCCLENV_PEER` is named).
    #[serde(skip)]
    pub peer_source: Option<String>,
    /// Number of nodes (`NCCLENV_NNODES`, `--nnodes`); overrides what launchers say.
    pub nnodes: Option<u32>,
    /// Refuse (exit 78) on every repair, risk warning and unsupported choice (`NCCLENV_STRICT=1`).
    pub strict: bool,
    /// Log verbosity (`NCCLENV_LOG`).
    pub log: LogLevel,
    /// Log line format (`NCCLENV_LOG_FORMAT`: `text` or `json`).
    pub log_format: LogFormat,
    /// Where a refusal (exit 78) writes its reason for Kubernetes (`NCCLENV_TERMINATION_LOG`); `None` =
    /// `/dev/termination-log` when it exists and is writable.
    pub termination_log: Option<PathBuf>,
    /// Interface names never to choose, exact names (`NCCLENV_EXCLUDE`, comma-separated).
    pub exclude: Vec<String>,
    /// Do nothing, just exec (`NCCLENV_DISABLE=1`).
    pub disable: bool,
    /// How `disable` was asked for, echoed as given: `NCCLENV_DISABLE=yes`, `--disable`; empty when not.
    #[serde(skip)]
    pub disable_as: String,
    /// Root of sysfs (`NCCLENV_SYSFS`, default `/sys`).
    pub sysfs: PathBuf,
    /// Root of devfs (`NCCLENV_DEVFS`, default `/dev`).
    pub devfs: PathBuf,
    /// Path probed as `/dev/shm` (`NCCLENV_SHM_PATH`, default `/dev/shm`).
    pub shm_path: PathBuf,
    /// Minimum free `/dev/shm` in MiB (`NCCLENV_SHM_MIN`); default derived from the GPU count.
    pub shm_min_mib: Option<u64>,
    /// Proof to run before the command (`NCCLENV_CHECK`).
    pub check: CheckMode,
    /// Deadline for the whole check in seconds (`NCCLENV_CHECK_TIMEOUT`, default 60).
    pub check_timeout_s: u64,
    /// Ranks for the allreduce check (`NCCLENV_CHECK_GPUS`, default 2; capped by visible GPUs).
    pub check_gpus: u32,
    /// Allreduce buffer size in MiB (`NCCLENV_CHECK_MIB`, default 64).
    pub check_mib: u64,
    /// Retry a failed allreduce with safer settings (`NCCLENV_CHECK_REPAIR=1`).
    pub check_repair: bool,
    /// Path of the `ncclenv-check` helper (`NCCLENV_CHECK_HELPER`); default: beside the executable.
    pub check_helper: Option<PathBuf>,
    /// Path of libnccl to load (`NCCLENV_NCCL_LIB`).
    pub nccl_lib: Option<PathBuf>,
    /// Bound on host-name resolution of the peer in milliseconds (`NCCLENV_RESOLVE_TIMEOUT_MS`); `None` when
    /// not given: then [`Config::resolve_timeout`] picks the default for the job.
    pub resolve_timeout_ms: Option<u64>,
    /// Turn on NCCL's own logs for the command (`NCCLENV_DEBUG=1`, `--debug`): see `decide::debug`.
    pub debug: bool,
    /// Folder of NCCL's per-process log files under `NCCLENV_DEBUG=1` (`NCCLENV_DEBUG_DIR`, an absolute path;
    /// default [`DEFAULT_DEBUG_DIR`]).
    pub debug_dir: Option<PathBuf>,
    /// `NCCLENV_*` variables in the environment that are not options (another case, a typo, bytes that are
    /// not UTF-8): `(name as text, nearest known name)`. Never read as options; reported as
    /// `unknown-variable` findings.
    pub unknown_vars: Vec<(String, Option<String>)>,
    /// Run the fleet preflight before exec (`NCCLENV_PREFLIGHT=1`, `--preflight`; see `docs/preflight.md`).
    pub preflight: bool,
    /// How long the preflight waits for the other nodes, in seconds (`NCCLENV_PREFLIGHT_TIMEOUT`, default 60).
    pub preflight_timeout_s: u64,
    /// TCP port the preflight meets on (`NCCLENV_PREFLIGHT_PORT`); default: the launcher's master port.
    pub preflight_port: Option<u16>,
    /// Measure the networks every node shares in the preflight (`NCCLENV_PREFLIGHT_MEASURE`, default on;
    /// `0` keeps the route's choice; see `preflight::networks`).
    pub preflight_measure: bool,
    /// The interface to decide on instead of ncclenv's own choice: set only by the preflight when the fleet
    /// moves to a measured network (`preflight::move_to`), never by an option.
    #[serde(skip)]
    pub interface_override: Option<InterfaceOverride>,
}

/// An interface given to the decision (see [`Config::interface_override`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceOverride {
    /// The interface's name.
    pub ifname: String,
    /// Its address to bootstrap on.
    pub addr: std::net::IpAddr,
    /// How it was chosen (the plan's `choice.how`).
    pub how: String,
}

/// How long a master's name is waited for when `NCCLENV_RESOLVE_TIMEOUT_MS` is not given and the job may
/// span nodes, in milliseconds: as long as the launchers wait for their master. torchrun's static rendezvous
/// (`--master-addr`, its default) waits `_default_timeout_seconds = 600` for the master's `TCPStore`
/// (torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py), its c10d/etcd rendezvous
/// `RendezvousTimeout._DEFAULT_TIMEOUTS["join"] = timedelta(seconds=600)` (dynamic_rendezvous.py);
/// Paddle's `HTTPMaster.sync_peers` retries `wait_server_ready(timeout=5)` until the job ends, without bound
/// (paddle/distributed/launch/controllers/master.py, 3.2.2). 600 s is also the option's largest value.
pub const RESOLVE_WAIT_MULTI_NODE_MS: u64 = 600_000;
/// The bound when `NCCLENV_RESOLVE_TIMEOUT_MS` is not given and the job runs on one node (or for `doctor`),
/// in milliseconds.
pub const RESOLVE_WAIT_DEFAULT_MS: u64 = 2000;

impl Config {
    /// The bound on resolving the master's name, and where it comes from (said in the wait's first line):
    /// `NCCLENV_RESOLVE_TIMEOUT_MS` when given (it always wins); else [`RESOLVE_WAIT_MULTI_NODE_MS`] when
    /// `may_span_nodes` (the job may be multi-node and ncclenv starts it), else
    /// [`RESOLVE_WAIT_DEFAULT_MS`]. Issue #21, item 7: gang-scheduled workers start before their master's
    /// name exists, and the launcher waits for the master anyway.
    pub fn resolve_timeout(&self, may_span_nodes: bool) -> (std::time::Duration, &'static str) {
        let (ms, why) = match self.resolve_timeout_ms {
            Some(ms) => (ms, "set by NCCLENV_RESOLVE_TIMEOUT_MS"),
            None if may_span_nodes => (
                RESOLVE_WAIT_MULTI_NODE_MS,
                "a launcher's usual wait; NCCLENV_RESOLVE_TIMEOUT_MS sets it",
            ),
            None => (
                RESOLVE_WAIT_DEFAULT_MS,
                "the default for one node; NCCLENV_RESOLVE_TIMEOUT_MS sets it",
            ),
        };
        (std::time::Duration::from_millis(ms), why)
    }
}

/// Where NCCL's per-process log files go under `NCCLENV_DEBUG=1` when `NCCLENV_DEBUG_DIR` is unset: a folder
/// every container has and can write.
pub const DEFAULT_DEBUG_DIR: &str = "/tmp/ncclenv-debug";

impl Config {
    /// How `NCCLENV_DISABLE` was given, for the line that says ncclenv changes nothing:
    /// [`Config::disable_as`], or `NCCLENV_DISABLE=1` when unknown.
    pub fn disable_words(&self) -> &str {
        if self.disable_as.is_empty() {
            "NCCLENV_DISABLE=1"
        } else {
            &self.disable_as
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            peer: None,
            peer_source: None,
            nnodes: None,
            strict: false,
            log: LogLevel::Info,
            log_format: LogFormat::Text,
            termination_log: None,
            exclude: Vec::new(),
            disable: false,
            disable_as: String::new(),
            sysfs: PathBuf::from("/sys"),
            devfs: PathBuf::from("/dev"),
            shm_path: PathBuf::from("/dev/shm"),
            shm_min_mib: None,
            check: CheckMode::Off,
            check_timeout_s: 60,
            check_gpus: 2,
            check_mib: 64,
            check_repair: false,
            check_helper: None,
            nccl_lib: None,
            resolve_timeout_ms: None,
            debug: false,
            debug_dir: None,
            unknown_vars: Vec::new(),
            preflight: false,
            preflight_timeout_s: 60,
            preflight_port: None,
            preflight_measure: true,
            interface_override: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_resolve_bound_is_long_only_for_jobs_that_may_span_nodes_unless_given() {
        let mut c = Config::default();
        assert_eq!(c.resolve_timeout(true).0, Duration::from_secs(600));
        assert_eq!(c.resolve_timeout(false).0, Duration::from_secs(2));
        c.resolve_timeout_ms = Some(300);
        for multi in [true, false] {
            assert_eq!(
                c.resolve_timeout(multi),
                (
                    Duration::from_millis(300),
                    "set by NCCLENV_RESOLVE_TIMEOUT_MS"
                )
            );
        }
    }
}
