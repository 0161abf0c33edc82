//! The check's report for people: the verdict block `ncclenv check` prints.

use super::judge::mode_name;
use super::outcome::CheckReport;

/// Lines of the helper's stderr shown under a failed check (the last non-blank ones).
const STDERR_LINES: usize = 5;

/// The human verdict block for a report: a headline, the numbers, the error with its explanation and remedy,
/// a hang's step and causes, and the repair found. Ends with a newline. Every line is escaped
/// ([`crate::text::escape`]).
pub fn render_check(report: &CheckReport) -> String {
    let detail = &report.detail;
    let mut out = String::new();
    out.push_str(&format!(
        "ncclenv check ({}): {}\n",
        mode_name(report.mode),
        if report.passed {
            "PASSED"
        } else if report.could_not_run() {
            "COULD NOT RUN"
        } else {
            "FAILED"
        }
    ));
    out.push_str(&format!("  {}\n", report.summary));
    if let Some(v) = &detail.nccl_version {
        let p = detail.nccl_path.as_deref().unwrap_or_default();
        out.push_str(&format!("  library:     NCCL {v} {p}\n"));
    }
    if let Some(result) = &detail.result {
        if let Some(a) = &result.addr {
            out.push_str(&format!(
                "  bootstrap:   {a} port {}\n",
                result.port.unwrap_or(0)
            ));
        }
        if let (Some(n), Some(bytes)) = (result.nranks, result.bytes) {
            out.push_str(&format!(
                "  allreduce:   {n} rank(s), {bytes} bytes, {:.3} ms, algbw {:.2} GB/s, busbw {:.2} GB/s\n",
                result.seconds.unwrap_or(0.0) * 1e3,
                result.algbw_gbps.unwrap_or(0.0),
                result.busbw_gbps.unwrap_or(0.0),
            ));
        }
    }
    if let Some(note) = &detail.note {
        out.push_str(&format!("  note:        {note}\n"));
    }
    if let Some(e) = &detail.error {
        // The summary often carries the explanation already (a library not found, with the places looked):
        // said once.
        if let Some(x) = e.explanation().filter(|x| !report.summary.contains(x)) {
            out.push_str(&format!("  why:         {x}\n"));
        }
        if let Some(x) = e.remedy() {
            out.push_str(&format!("  remedy:      {x}\n"));
        }
    }
    if let Some(h) = &detail.hang {
        out.push_str(&format!("  stuck:       {}\n", h.where_));
        out.push_str(&format!("  likely:      {}\n", h.likely_causes));
    }
    for r in &report.extra_env {
        out.push_str(&format!(
            "  repair:      {}={} ({})\n",
            r.name, r.value, r.reason
        ));
    }
    if !report.passed {
        if let Some(t) = &detail.stderr_tail {
            let lines: Vec<&str> = t.lines().filter(|l| !l.trim().is_empty()).collect();
            let start = lines.len().saturating_sub(STDERR_LINES);
            for l in &lines[start..] {
                out.push_str(&format!("  stderr:      {l}\n"));
            }
        }
    }
    // NCCL's messages and the helper's stderr may hold control characters: every line leaves inert.
    crate::text::escape_lines(&out)
}
