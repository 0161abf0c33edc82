//! What a check found: [`CheckReport`] for the caller to act on, and [`CheckDetail`], everything known, which
//! is what `ncclenv check --json` prints ([`CheckReport::to_json`]).

use super::protocol::{CudaApi, HelperMsg, HelperResult, Stage, Step};
use crate::config::CheckMode;
use serde::{Serialize, Serializer};

pub use crate::exit::{
    CHECK_FAILED as EXIT_CHECK_FAILED, CHECK_UNAVAILABLE as EXIT_CHECK_UNAVAILABLE,
    SIGNAL_BASE as EXIT_SIGNAL_BASE,
};

/// What the check found, for `main.rs` to print and act on.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckReport {
    /// The check that actually ran (an allreduce on a machine without GPU falls back to `Bootstrap`).
    pub mode: CheckMode,
    /// True when NCCL accepted the environment (and, for allreduce, every element of the result was right).
    pub passed: bool,
    /// One line: the verdict and its main number or reason.
    pub summary: String,
    /// Everything known, for `--json` ([`CheckReport::to_json`]).
    pub detail: CheckDetail,
    /// Variables to add to the command's environment: set when `NCCLENV_CHECK_REPAIR=1` found a setting with
    /// which a failed allreduce passes.
    pub extra_env: Vec<ExtraVar>,
}

impl CheckReport {
    /// The signal number (SIGINT 2, SIGTERM 15) that interrupted the check, if one did. The caller should then
    /// stop instead of running the command, with [`CheckReport::interrupted_exit_code`].
    pub fn interrupted_by(&self) -> Option<i32> {
        self.detail.interrupted_by
    }

    /// 128 + the signal that interrupted the check ([`EXIT_SIGNAL_BASE`]), if one did.
    pub fn interrupted_exit_code(&self) -> Option<u8> {
        let sig = u8::try_from(self.interrupted_by()?).ok()?;
        Some(EXIT_SIGNAL_BASE.saturating_add(sig))
    }

    /// True when the check could not run at all (exit [`EXIT_CHECK_UNAVAILABLE`]): no helper, the helper
    /// could not be started (its glibc loader missing), or libnccl not found or not loadable; NCCL itself was
    /// never asked.
    pub fn could_not_run(&self) -> bool {
        !self.passed
            && self.detail.interrupted_by.is_none()
            && self
                .detail
                .error
                .as_ref()
                .is_some_and(ErrorDetail::asks_nccl_nothing)
    }

    /// What `ncclenv check --json` prints: [`CheckDetail`] as one line of JSON.
    pub fn to_json_text(&self) -> String {
        serde_json::to_string(&self.detail).unwrap_or_default()
    }

    /// [`CheckDetail`] as a JSON value (for programs and tests that read it by key).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(&self.detail).unwrap_or(serde_json::Value::Null)
    }
}

/// A variable the check's repair adds to the command's environment (`extra_env` in the JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExtraVar {
    // Fields in alphabetical order, as CheckDetail's.
    /// Its name, e.g. `NCCL_SHM_DISABLE`.
    pub name: String,
    /// Why: which failure it repaired.
    pub reason: String,
    /// Its value, e.g. `1`.
    pub value: String,
}

/// Everything a check knows: the JSON object of `ncclenv check --json` ([`CheckReport::to_json_text`]), one
/// field per key. A key is left out when its field is `None`: `--check off` has only `mode`; a missing helper
/// `mode`, `passed` and `error`; a run of the helper the rest, as far as it got. The report's own objects list
/// their keys in alphabetical order; the helper's lines (`events`, `result`) are written as the helper wrote
/// them, `ev` first.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CheckDetail {
    // Fields in alphabetical order: the keys come out sorted, as they did when the report was built as a
    // serde_json::Value.
    /// Its API.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_api: Option<CudaApi>,
    /// Path of the CUDA library the ranks loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_path: Option<String>,
    /// Milliseconds from starting the helper to its verdict (or to the end of the attempt).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elapsed_ms: Option<u64>,
    /// Why the check failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
    /// The helper's protocol lines but its result, the latest 256.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<HelperMsg>>,
    /// Protocol lines not kept (beyond 4,096 lines or 16 MiB), when some were not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_dropped: Option<u64>,
    /// Events not in `events` (dropped, or beyond the 256 latest), when some are not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_not_shown: Option<u64>,
    /// The interface and address ncclenv chose, when NCCL's bootstrap address was compared with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<Expected>,
    /// The variables repair adds to the command's environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra_env: Option<Vec<ExtraVar>>,
    /// Where the check hung.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hang: Option<Hang>,
    /// Path of the helper that ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub helper: Option<String>,
    /// How the helper ended (`exit 0`, `killed by signal 9 (SIGKILL)`…).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub helper_exit: Option<String>,
    /// The helper's pid (= its process group; 0 when it did not start).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub helper_pid: Option<i32>,
    /// The signal that interrupted the check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<i32>,
    /// Lines longer than 1 MiB, dropped, when there were some.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lines_too_long: Option<u64>,
    /// The check the helper ran (from its result; `off` for `--check off`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<CheckMode>,
    /// Path of the libnccl the helper loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl_path: Option<String>,
    /// Its version, e.g. `2.21.5`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl_version: Option<String>,
    /// The helper's remark (one-rank communicator, no-GPU fallback).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The verdict (as [`CheckReport::passed`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passed: Option<bool>,
    /// True when a process the check started could not be killed (should never be).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes_left: Option<bool>,
    /// The settings repair tried, in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repair_attempts: Option<Vec<RepairAttempt>>,
    /// The detail of the attempt that passed with the repair.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repaired_result: Option<Box<CheckDetail>>,
    /// The check asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested: Option<CheckMode>,
    /// The helper's result line.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "ser_result")]
    pub result: Option<HelperResult>,
    /// The last 8 KiB of the helper's stderr, when it wrote any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_tail: Option<String>,
    /// Lines on stdout that were not protocol (at most 50, each cut to 300 characters), when there were some.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stray_output: Option<Vec<String>>,
    /// The one-line verdict (as [`CheckReport::summary`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

/// Why a check failed (`error` in the JSON).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ErrorDetail {
    /// The helper reported the failure: its error, explained.
    Reported(ReportedError),
    /// ncclenv saw the failure itself (no helper, not started, no verdict, another bootstrap address).
    Own(OwnError),
}

impl ErrorDetail {
    /// The stage's name (`load`, `init`, …, `helper`, `spawn`, `crash`, `address`).
    pub fn stage(&self) -> &'static str {
        match self {
            ErrorDetail::Reported(e) => e.stage.name(),
            ErrorDetail::Own(e) => e.stage.name(),
        }
    }

    /// True when the failure came before NCCL was asked anything: no helper, a helper or rank that could not
    /// be started, no library loaded (the helper's stages by [`super::protocol::Stage::asks_nccl_nothing`],
    /// which the summary's wording reads too).
    pub fn asks_nccl_nothing(&self) -> bool {
        match self {
            ErrorDetail::Reported(e) => e.stage.asks_nccl_nothing(),
            ErrorDetail::Own(e) => matches!(e.stage, OwnStage::Helper | OwnStage::Spawn),
        }
    }

    /// The NCCL (or CUDA) result code, when the helper reported one.
    pub fn code(&self) -> Option<i32> {
        match self {
            ErrorDetail::Reported(e) => e.code,
            ErrorDetail::Own(_) => None,
        }
    }

    /// ncclenv's explanation, when the helper reported the failure.
    pub fn explanation(&self) -> Option<&str> {
        match self {
            ErrorDetail::Reported(e) => Some(&e.explanation),
            ErrorDetail::Own(_) => None,
        }
    }

    /// What to do about it, when ncclenv knows.
    pub fn remedy(&self) -> Option<&str> {
        match self {
            ErrorDetail::Reported(e) => Some(&e.remedy),
            ErrorDetail::Own(e) => e.remedy.as_deref(),
        }
    }

    /// The places looked for a library (or for the helper).
    pub fn looked(&self) -> &[String] {
        match self {
            ErrorDetail::Reported(e) => &e.looked,
            ErrorDetail::Own(e) => e.looked.as_deref().unwrap_or(&[]),
        }
    }
}

/// A failure the helper reported, with ncclenv's explanation and remedy. Every key is written, `null` when
/// unknown.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReportedError {
    // Fields in alphabetical order, as CheckDetail's.
    /// NCCL result code (or CUDA error number for stage `cuda`).
    pub code: Option<i32>,
    /// `ncclGetErrorString` (or CUDA's error string).
    pub error_string: Option<String>,
    /// ncclenv's explanation.
    pub explanation: String,
    /// `ncclGetLastError(NULL)`.
    pub last_error: Option<String>,
    /// Places looked for a library.
    pub looked: Vec<String>,
    /// The helper's message.
    pub message: String,
    /// The code's `ncclResult_t` name.
    pub name: Option<&'static str>,
    /// The rank it happened on.
    pub rank: Option<u32>,
    /// What to do about it.
    pub remedy: String,
    /// Where it failed.
    pub stage: Stage,
}

/// Where a failure ncclenv saw itself happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OwnStage {
    /// No helper was found.
    Helper,
    /// The helper could not be started.
    Spawn,
    /// The helper ended without a verdict.
    Crash,
    /// NCCL bootstraps on another address than the one ncclenv chose.
    Address,
}

impl OwnStage {
    /// The stage's name in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            OwnStage::Helper => "helper",
            OwnStage::Spawn => "spawn",
            OwnStage::Crash => "crash",
            OwnStage::Address => "address",
        }
    }
}

/// A failure ncclenv saw itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OwnError {
    // Fields in alphabetical order, as CheckDetail's.
    /// The places looked for the helper (stage `helper`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub looked: Option<Vec<String>>,
    /// What happened.
    pub message: String,
    /// What to do about it (stage `address`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remedy: Option<String>,
    /// Where.
    pub stage: OwnStage,
}

impl OwnError {
    /// A failure at `stage` with `message` and nothing else.
    pub fn new(stage: OwnStage, message: String) -> OwnError {
        OwnError {
            stage,
            message,
            looked: None,
            remedy: None,
        }
    }
}

/// Where a check hung (`hang` in the JSON).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hang {
    // Fields in alphabetical order, as CheckDetail's.
    /// Its likely causes.
    pub likely_causes: &'static str,
    /// The most advanced step an unfinished rank was in (written `""` when none had started one).
    #[serde(serialize_with = "step_or_empty")]
    pub step: Option<Step>,
    /// The deadline of the attempt, seconds.
    pub timeout_s: f64,
    /// Each unfinished rank (or the helper) and its step, e.g. `rank 0 in init, rank 1 in collective`.
    #[serde(rename = "where")]
    pub where_: String,
}

fn ser_result<S: Serializer>(r: &Option<HelperResult>, s: S) -> Result<S::Ok, S::Error> {
    match r {
        Some(r) => super::protocol::tagged_result(r).serialize(s),
        None => s.serialize_none(),
    }
}

fn step_or_empty<S: Serializer>(step: &Option<Step>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(step.map(Step::name).unwrap_or(""))
}

/// The interface and address ncclenv chose (`expected` in the JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Expected {
    // Fields in alphabetical order, as CheckDetail's.
    /// Its address.
    pub addr: String,
    /// The interface.
    pub interface: String,
}

/// One setting repair tried (`repair_attempts` in the JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RepairAttempt {
    // Fields in alphabetical order, as CheckDetail's.
    /// Whether the allreduce passed with it.
    pub passed: bool,
    /// `NAME=VALUE`.
    pub set: String,
    /// The attempt's verdict (or why it was not tried).
    pub summary: String,
}
