//! Why a check failed, in words: the likely causes of a hang in each step, and the explanation and remedy of a
//! failure the helper reported. NCCL's own errors are explained by the knowledge base in
//! [`crate::nccl_errors`] (one table for the check, `ncclenv explain` and docs/nccl-errors.md); this module only picks
//! what applies to a stage.

use super::protocol::{HelperError, Stage, Step};

/// Likely causes of a hang in `step` (`None`: before the helper reported any step).
pub fn hang_causes(step: Option<Step>) -> &'static str {
    match step {
        Some(Step::Load) => "loading libnccl or CUDA blocked: a hung network filesystem, or a stuck CUDA driver (check nvidia-smi)",
        Some(Step::Cuda) => "CUDA initialisation or allocation blocked: a GPU in a bad state (Xid errors in dmesg), or a busy/locked device (check nvidia-smi)",
        Some(Step::Id) => "ncclGetUniqueId blocked in NCCL's interface search or bind",
        Some(Step::Init) => "ncclCommInitRank waits for the other ranks: a firewall on the chosen interface, a wrong \
                   NCCL_SOCKET_IFNAME (exists but does not route between the ranks), or a blocked bootstrap port",
        Some(Step::Collective) => "the allreduce does not complete: PCIe P2P through a switch with ACS/IOMMU enabled (retry with \
                         NCCL_P2P_DISABLE=1 to confirm), a broken NVLink, or a network transport blocked by a firewall",
        Some(Step::Verify) => "copying the result back blocked: a GPU fault (check dmesg for Xid errors)",
        None => "the helper did not start its work: an overloaded machine, or a hang before NCCL was loaded",
    }
}

/// ncclenv's explanation and remedy for a failure the helper reported, from its stage, its code, the
/// library's version (`ncclGetVersion`, when known) and `ncclGetLastError`. Returns `(explanation, remedy)`.
///
/// "Bootstrap : no socket interface found" comes from `bootstrapNetInit` (src/bootstrap.cc): code 3
/// (`ncclInternalError`) up to 2.23 and 5 (`ncclInvalidUsage`) from 2.24 on; the knowledge base matches both by
/// the text.
pub fn explain_failure(error: &HelperError, version: Option<i32>) -> (String, String) {
    match error.stage {
        Stage::Load | Stage::Symbol => (
            format!("{} (looked: {})", error.message, places(&error.looked)),
            "Install NCCL (pip install nvidia-nccl-cu12, or the image's libnccl2) or point NCCLENV_NCCL_LIB \
             at libnccl.so.2"
                .to_string(),
        ),
        Stage::Verify => (
            error.message.clone(),
            "The GPUs or the path between them corrupt data: retry with NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 \
             separately to find the transport, and check dmesg for Xid errors"
                .to_string(),
        ),
        Stage::Crash => (
            error.message.clone(),
            "A rank process died: check dmesg and the helper's stderr below".to_string(),
        ),
        _ => match error.code {
            Some(c) => {
                let v = version.and_then(|v| u32::try_from(v).ok()).unwrap_or(0);
                crate::nccl_errors::explain_failure(c, v, error.last_error.as_deref().unwrap_or(""))
            }
            None => (error.message.clone(), "See the helper's stderr below".to_string()),
        },
    }
}

/// Places a library was looked for, in brief: the first [`PLACES_SHOWN`], then how many more
/// (`ncclenv check --json` lists them all in `looked`).
fn places(looked: &[String]) -> String {
    if looked.len() <= PLACES_SHOWN {
        return looked.join("; ");
    }
    format!(
        "{}; and {} more (ncclenv check --json lists them)",
        looked[..PLACES_SHOWN].join("; "),
        looked.len() - PLACES_SHOWN
    )
}

/// Places named in a "not found" explanation.
const PLACES_SHOWN: usize = 3;

/// The facts of a reported failure for the summary line: `code ncclSystemError (2) "…", last error "…"` (or
/// `CUDA error N "…"`); empty when the helper gave none.
pub fn failure_facts(e: &HelperError) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(c) = e.code {
        let quoted = e
            .error_string
            .as_deref()
            .map(|s| format!(" \"{s}\""))
            .unwrap_or_default();
        if e.stage == Stage::Cuda {
            parts.push(format!("CUDA error {c}{quoted}"));
        } else {
            parts.push(format!(
                "code {} ({c}){quoted}",
                crate::nccl_errors::result_name(c)
            ));
        }
    }
    if let Some(l) = e.last_error.as_deref().filter(|s| !s.is_empty()) {
        parts.push(format!("last error \"{l}\""));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nccl_error(code: i32, last: &str) -> HelperError {
        HelperError {
            code: Some(code),
            last_error: Some(last.into()),
            ..HelperError::new(Stage::Id, "ncclGetUniqueId returned")
        }
    }

    #[test]
    fn no_interface_explained_for_both_codes() {
        let last = "Bootstrap : no socket interface found";
        let (e3, _) = explain_failure(&nccl_error(3, last), Some(22105));
        let (e5, _) = explain_failure(&nccl_error(5, last), Some(22707));
        assert!(e3.contains("no socket interface"));
        assert!(e5.contains("no socket interface"));
        assert!(!e3.contains("usually returns"));
        assert!(!e5.contains("usually returns"));
        let (c2, _) = explain_failure(
            &nccl_error(2, "NET/Socket : No usable listening interface found"),
            Some(22707),
        );
        assert!(c2.contains("NCCL_COMM_ID"));
    }

    #[test]
    fn a_missing_library_is_explained_by_the_places_looked() {
        let mut e = HelperError::new(Stage::Load, "libnccl.so.2 not found");
        e.looked = vec!["/a: not found".into(), "/b: not found".into()];
        let (why, remedy) = explain_failure(&e, None);
        assert!(why.contains("/a: not found; /b: not found"), "{why}");
        assert!(remedy.contains("NCCLENV_NCCL_LIB"), "{remedy}");
        e.looked = (0..20).map(|i| format!("/p{i}: not found")).collect();
        let (why, _) = explain_failure(&e, None);
        assert!(why.contains("/p2: not found; and 17 more"), "{why}");
        assert!(!why.contains("/p3:"), "{why}");
    }

    #[test]
    fn facts_name_the_code() {
        let mut e = nccl_error(2, "fake: socket connect");
        e.error_string = Some("unhandled system error".into());
        assert_eq!(
            failure_facts(&e),
            "code ncclSystemError (2) \"unhandled system error\", last error \"fake: socket connect\""
        );
        let mut c = HelperError::new(Stage::Cuda, "cuInit returned 3");
        c.code = Some(3);
        assert_eq!(failure_facts(&c), "CUDA error 3");
        assert_eq!(failure_facts(&HelperError::new(Stage::Crash, "x")), "");
    }
}
