//! `ncclenv doctor` rendering (placeholder until the probe branch lands).
use crate::config::Config;
use crate::plan::{Plan, Verdict};
use crate::snapshot::Snapshot;

/// JSON of the snapshot and the plan.
pub fn render_json_value(
    snap: &Snapshot,
    plan: &Plan,
    nccl_alone: Option<&str>,
    _cfg: &Config,
) -> serde_json::Value {
    serde_json::json!({"snapshot": snap, "plan": plan, "nccl_alone": nccl_alone})
}
/// Text rendering.
pub fn render_text_value(
    snap: &Snapshot,
    plan: &Plan,
    nccl_alone: Option<&str>,
    cfg: &Config,
) -> String {
    format!("{:#}\n", render_json_value(snap, plan, nccl_alone, cfg))
}
/// 0 ok, 1 warnings, 78 refuse.
pub fn exit_code(plan: &Plan) -> i32 {
    if !matches!(plan.verdict, Verdict::Proceed) {
        78
    } else if plan.has_warnings() {
        1
    } else {
        0
    }
}
