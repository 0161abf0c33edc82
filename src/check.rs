//! The check (placeholder until the check branch lands).
use crate::config::{CheckMode, Config};
use crate::plan::Plan;
use std::ffi::OsString;

/// Outcome of a check.
pub struct CheckReport {
    /// Which check ran.
    pub mode: CheckMode,
    /// Passed or not.
    pub passed: bool,
    /// One line.
    pub summary: String,
    /// Details as JSON.
    pub detail: serde_json::Value,
    /// (name, value, reason) added by repair.
    pub extra_env: Vec<(String, String, String)>,
}
/// Run a check for a plan.
pub fn run_for(
    _cfg: &Config,
    mode: CheckMode,
    _env: &[(OsString, OsString)],
    _plan: &Plan,
) -> CheckReport {
    CheckReport {
        mode,
        passed: false,
        summary: "the check is not built yet".into(),
        detail: serde_json::Value::Null,
        extra_env: vec![],
    }
}
/// Render.
pub fn render_check(r: &CheckReport) -> String {
    format!("{}\n", r.summary)
}
