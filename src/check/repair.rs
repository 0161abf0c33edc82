//! `NCCLENV_CHECK_REPAIR=1`: after a failed allreduce, retry with one setting changed at a time, within the
//! check's one deadline; the first setting with which it passes goes into the command's environment.

use super::outcome::{CheckReport, ExtraVar, RepairAttempt};
use super::Check;
use crate::decide::switches::SWITCHES;
use std::time::Duration;

/// Interfaces tried as `NCCL_SOCKET_IFNAME==name` by repair, at most.
const MAX_OTHER_IFACES: usize = 3;
/// Time a retry needs at least; with less left, repair stops and says so.
const MIN_RETRY: Duration = Duration::from_secs(1);

/// The settings tried, in order: each transport switch the table retries with (`decide::switches::SWITCHES`:
/// the SHM transport off, GPU peer-to-peer off, InfiniBand/RoCE off), then each of the next candidate
/// interfaces (at most [`MAX_OTHER_IFACES`]), each alone.
fn tries(other_ifaces: &[String]) -> Vec<ExtraVar> {
    let repair = |name: &str, value: String, reason: String| ExtraVar {
        name: name.into(),
        value,
        reason,
    };
    let mut tries: Vec<ExtraVar> = SWITCHES
        .iter()
        .filter_map(|s| {
            s.retry.map(|r| {
                repair(
                    s.var,
                    "1".into(),
                    format!(
                        "the allreduce check failed and passed with {} off ({})",
                        r.off, r.cause
                    ),
                )
            })
        })
        .collect();
    for i in other_ifaces.iter().take(MAX_OTHER_IFACES) {
        tries.push(repair(
            "NCCL_SOCKET_IFNAME",
            format!("={i}"),
            format!("the allreduce check failed on the chosen interface and passed on {i}"),
        ));
    }
    tries
}

/// Retry the failed allreduce of `report` (whose summary is the first attempt's) with each setting of
/// [`tries`] the environment does not hold already, until one passes, a signal comes, or the deadline leaves
/// less than [`MIN_RETRY`]. Records every attempt in `repair_attempts`; a pass sets `passed`, the summary,
/// `extra_env` and `repaired_result`; a signal sets `interrupted_by` and the summary.
pub(super) fn repair(check: &Check<'_>, report: &mut CheckReport, other_ifaces: &[String]) {
    let first_summary = report.summary.clone();
    let mut attempts = Vec::new();
    for t in tries(other_ifaces) {
        if check.env.get(&t.name) == Some(std::ffi::OsStr::new(&t.value)) {
            continue;
        }
        let set = format!("{}={}", t.name, t.value);
        let left = check.time_left();
        if left < MIN_RETRY {
            attempts.push(RepairAttempt {
                set,
                passed: false,
                summary: "not tried: the check's deadline (NCCLENV_CHECK_TIMEOUT) was reached"
                    .into(),
            });
            break;
        }
        // Another interface bootstraps on another address: the comparison would fail it.
        let compare = t.name != "NCCL_SOCKET_IFNAME";
        let v = check.attempt(&[(t.name.clone(), t.value.clone())], left, compare);
        attempts.push(RepairAttempt {
            set: set.clone(),
            passed: v.passed,
            summary: v.summary.clone(),
        });
        if let Some(sig) = v.detail.interrupted_by {
            report.detail.interrupted_by = Some(sig);
            report.summary = v.summary;
            break;
        }
        if v.passed {
            report.passed = true;
            report.summary = format!(
                "{} (repaired: {set}; first try: {first_summary})",
                v.summary
            );
            report.extra_env.push(t);
            report.detail.repaired_result = Some(Box::new(v.detail));
            break;
        }
    }
    report.detail.repair_attempts = Some(attempts);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The retries come from the switch table in its order (the SHM transport, GPU peer-to-peer, InfiniBand),
    /// each `VAR=1` with its reason, then the other interfaces, at most [`MAX_OTHER_IFACES`].
    #[test]
    fn tries_are_the_tables_switches_then_the_other_interfaces() {
        let ifaces: Vec<String> = ["eth1", "eth2", "eth3", "eth4"].map(String::from).to_vec();
        let got: Vec<(String, String, String)> = tries(&ifaces)
            .into_iter()
            .map(|t| (t.name, t.value, t.reason))
            .collect();
        let want = [
            ("NCCL_SHM_DISABLE", "1", "the allreduce check failed and passed with the SHM transport off (/dev/shm too small or broken)"),
            ("NCCL_P2P_DISABLE", "1", "the allreduce check failed and passed with GPU peer-to-peer off (PCIe ACS/IOMMU or a broken P2P path)"),
            ("NCCL_IB_DISABLE", "1", "the allreduce check failed and passed with InfiniBand/RoCE off (a broken RDMA setup)"),
            ("NCCL_SOCKET_IFNAME", "=eth1", "the allreduce check failed on the chosen interface and passed on eth1"),
            ("NCCL_SOCKET_IFNAME", "=eth2", "the allreduce check failed on the chosen interface and passed on eth2"),
            ("NCCL_SOCKET_IFNAME", "=eth3", "the allreduce check failed on the chosen interface and passed on eth3"),
        ]
        .map(|(n, v, r)| (n.to_string(), v.to_string(), r.to_string()));
        assert_eq!(got, want);
    }
}
