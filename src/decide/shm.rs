//! Decision rules: `/dev/shm` and NCCL's SHM transport (`NCCL_SHM_DISABLE`).
//!
//! NCCL's SHM transport (src/transport/shm.cc, `shmRecvSetup` → `ncclShmOpen`, NCCL 2.18–2.30) creates one
//! receive segment per (channel, SHM peer, connection) of 9,637,888 B by default (LL 512 KiB + LL128
//! 4,915,200 B + SIMPLE 4 MiB + 4 KiB) in `/dev/shm`. Docker's default 64 MiB tmpfs is too small for 4 GPUs:
//! init fails with `Error while creating shared memory segment … (size 9637888)` (ENOSPC). NCCL ≥ 2.24 with
//! driver ≥ 12.6 can use cuMem host memory instead, but without `SYS_NICE` (default Docker) 2.26.3+ falls
//! back to `/dev/shm`, and ranks of one process always use it. `NCCL_SHM_DISABLE=1` is safe: pairs without
//! P2P use the network transport and the job runs.

use crate::config::Config;
use crate::plan::Plan;
use crate::snapshot::Snapshot;

/// Bytes of one SHM receive segment with the default `NCCL_BUFFSIZE` (src/transport/shm.cc).
pub const SHM_SEGMENT_BYTES: u64 = 9_637_888;

/// Segments budgeted per local GPU: 4 (channels × connections, rounded up from NCCL-FACTS §5's
/// "local ranks × channels × (1–2) × 9.2 MiB").
pub const SEGMENTS_PER_GPU: u64 = 4;

/// GPUs assumed when the count is unknown.
pub const GPUS_WHEN_UNKNOWN: u64 = 8;

const MIB: u64 = 1 << 20;

const REMEDY: &str =
    "run the container with --shm-size=1g (or --ipc=host); Kubernetes: mount an emptyDir \
                      with medium: Memory at /dev/shm";

/// The free `/dev/shm` (bytes) the job needs: `cfg.shm_min_mib` MiB when set, else
/// [`SEGMENTS_PER_GPU`] × [`SHM_SEGMENT_BYTES`] per local GPU, counting at least 2 GPUs and
/// [`GPUS_WHEN_UNKNOWN`] when the count is unknown (8 GPUs: 294 MiB; 4 GPUs: 147 MiB).
pub fn shm_need_bytes(gpus: Option<u32>, cfg: &Config) -> u64 {
    if let Some(mib) = cfg.shm_min_mib {
        return mib.saturating_mul(MIB);
    }
    let n = gpus.map_or(GPUS_WHEN_UNKNOWN, |n| u64::from(n).max(2));
    n.saturating_mul(SEGMENTS_PER_GPU)
        .saturating_mul(SHM_SEGMENT_BYTES)
}

/// Decide `NCCL_SHM_DISABLE` from the `/dev/shm` probe and the GPU count.
///
/// - `snap.shm == None` (not probed): nothing.
/// - One visible GPU: no local peer, SHM is never used; info `shm-single-gpu`, nothing changed.
/// - Path missing, read-only, or free space below [`shm_need_bytes`]: `NCCL_SHM_DISABLE=1` and a warning
///   (`shm-missing`, `shm-read-only`, `shm-too-small`) naming `--shm-size=1g` or `--ipc=host`.
/// - An inherited `NCCL_SHM_DISABLE` is kept whatever its value; the warning is still made where it does not
///   disable SHM and `/dev/shm` is too small.
/// - Inherited `NCCL_P2P_DISABLE=1` while SHM ends up disabled: warning `shm-p2p-both-disabled` (intra-node
///   traffic goes through the network transport; NCCL-FACTS §5).
pub fn decide_shm(snap: &Snapshot, cfg: &Config, plan: &mut Plan) {
    let Some(shm) = &snap.shm else {
        return;
    };
    let gpus = snap.gpus.as_ref().and_then(|g| g.count);
    if gpus == Some(1) {
        plan.info(
            "shm-single-gpu",
            "one GPU visible: no local peer, NCCL's SHM transport is not used",
            "nothing to do",
        );
        return;
    }
    let need = shm_need_bytes(gpus, cfg);
    let need_how = match (cfg.shm_min_mib, gpus) {
        (Some(m), _) => format!("{m} MiB (NCCLENV_SHM_MIN)"),
        (None, Some(n)) => format!("{} MiB for {n} GPU(s)", need.div_ceil(MIB)),
        (None, None) => format!(
            "{} MiB assuming {GPUS_WHEN_UNKNOWN} GPUs",
            need.div_ceil(MIB)
        ),
    };
    let problem: Option<(&str, String)> = if let Some(e) = &shm.error {
        Some(("shm-missing", format!("{} is not usable ({e})", shm.path)))
    } else if shm.read_only {
        Some((
            "shm-read-only",
            format!("{} is mounted read-only", shm.path),
        ))
    } else {
        match shm.free_bytes {
            Some(free) if free >= need => None,
            Some(free) => Some((
                "shm-too-small",
                format!(
                    "{} has {} MiB free (of {} MiB), NCCL's SHM transport needs about {need_how}: segment \
                     creation would fail with ENOSPC",
                    shm.path,
                    free / MIB,
                    shm.total_bytes.unwrap_or(0) / MIB
                ),
            )),
            None => Some(("shm-missing", format!("{}: free space unknown", shm.path))),
        }
    };

    let inherited = snap.var("NCCL_SHM_DISABLE");
    let shm_disabled = match (inherited, &problem) {
        (Some(v), Some((code, why))) => {
            let disables = truthy(v);
            if !disables {
                plan.warn(
                    code,
                    format!("inherited NCCL_SHM_DISABLE={v} kept, but {why}"),
                    REMEDY,
                );
            }
            disables
        }
        (Some(v), None) => truthy(v),
        (None, Some((code, why))) => {
            plan.set(
                "NCCL_SHM_DISABLE",
                "1",
                format!("{why}; the network transport carries those pairs instead"),
            );
            plan.warn(
                code,
                format!(
                    "{why}; NCCL's SHM transport is disabled (NCCL_SHM_DISABLE=1), which is slower"
                ),
                REMEDY,
            );
            true
        }
        (None, None) => false,
    };
    if shm_disabled && snap.var("NCCL_P2P_DISABLE").is_some_and(truthy) {
        plan.warn(
            "shm-p2p-both-disabled",
            "NCCL_P2P_DISABLE=1 is inherited and SHM is disabled: all traffic between local GPUs goes through \
             the network transport",
            format!(
                "{REMEDY}; keep NCCL_P2P_DISABLE=1 only where an allreduce failed without it (PCIe ACS / IOMMU)"
            ),
        );
    }
}

/// NCCL reads these variables with `strtoll` (src/misc/param.cc): non-zero disables.
fn truthy(v: &str) -> bool {
    v.trim().parse::<i64>().map(|n| n != 0).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{GpuInfo, ShmInfo};

    fn snap(free_mib: Option<u64>, gpus: Option<u32>, env: &[(&str, &str)]) -> Snapshot {
        Snapshot {
            shm: Some(ShmInfo {
                path: "/dev/shm".into(),
                total_bytes: free_mib.map(|m| m * MIB),
                free_bytes: free_mib.map(|m| m * MIB),
                read_only: false,
                error: if free_mib.is_none() {
                    Some("No such file or directory".into())
                } else {
                    None
                },
            }),
            gpus: Some(GpuInfo {
                count: gpus,
                source: "test".into(),
                warning: None,
            }),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Snapshot::default()
        }
    }
    fn run_cfg(s: &Snapshot, cfg: &Config) -> Plan {
        let mut p = Plan::default();
        decide_shm(s, cfg, &mut p);
        p
    }
    fn run(s: &Snapshot) -> Plan {
        run_cfg(s, &Config::default())
    }
    fn codes(p: &Plan) -> Vec<&str> {
        p.warnings.iter().map(|w| w.code.as_str()).collect()
    }

    /// The budget in bytes, written out (not recomputed from the constants): 4 segments of NCCL's 9,637,888 B
    /// per GPU (src/transport/shm.cc, default NCCL_BUFFSIZE), at least 2 GPUs, 8 when unknown.
    #[test]
    fn need_sizes() {
        let c = Config::default();
        assert_eq!(shm_need_bytes(Some(4), &c), 154_206_208); // 147.06 MiB
        assert_eq!(shm_need_bytes(Some(1), &c), 77_103_104);
        assert_eq!(shm_need_bytes(Some(0), &c), 77_103_104);
        assert_eq!(shm_need_bytes(None, &c), 308_412_416); // 294.12 MiB
                                                           // Where the decision flips for 4 GPUs: 147 MiB free is too little, 148 MiB enough.
        assert_eq!(
            run(&snap(Some(147), Some(4), &[])).value_of("NCCL_SHM_DISABLE"),
            Some("1")
        );
        assert!(run(&snap(Some(148), Some(4), &[])).changes.is_empty());
        let c = Config {
            shm_min_mib: Some(100),
            ..Config::default()
        };
        assert_eq!(shm_need_bytes(Some(8), &c), 100 * MIB);
    }

    #[test]
    fn f13_small_shm_disables() {
        let p = run(&snap(Some(64), Some(4), &[]));
        assert_eq!(p.value_of("NCCL_SHM_DISABLE"), Some("1"));
        assert_eq!(codes(&p), vec!["shm-too-small"]);
        assert!(p.warnings[0].remedy.contains("--shm-size=1g"));
        assert!(p.warnings[0].remedy.contains("--ipc=host"));
        let p = run(&snap(Some(1024), Some(4), &[]));
        assert!(p.changes.is_empty() && p.warnings.is_empty());
    }

    #[test]
    fn unknown_gpus_assume_eight() {
        assert_eq!(
            run(&snap(Some(256), None, &[])).value_of("NCCL_SHM_DISABLE"),
            Some("1")
        );
        assert!(run(&snap(Some(512), None, &[])).changes.is_empty());
    }

    #[test]
    fn shm_min_overrides() {
        let cfg = Config {
            shm_min_mib: Some(32),
            ..Config::default()
        };
        assert!(run_cfg(&snap(Some(64), Some(8), &[]), &cfg)
            .changes
            .is_empty());
    }

    #[test]
    fn missing_and_read_only() {
        let p = run(&snap(None, Some(2), &[]));
        assert_eq!(p.value_of("NCCL_SHM_DISABLE"), Some("1"));
        assert_eq!(codes(&p), vec!["shm-missing"]);
        let mut s = snap(Some(4096), Some(2), &[]);
        if let Some(shm) = s.shm.as_mut() {
            shm.read_only = true;
        }
        let p = run(&s);
        assert_eq!(codes(&p), vec!["shm-read-only"]);
    }

    #[test]
    fn single_gpu_never_disables() {
        let p = run(&snap(Some(1), Some(1), &[]));
        assert!(p.changes.is_empty());
        assert_eq!(codes(&p), vec!["shm-single-gpu"]);
        assert!(!p.has_warnings());
    }

    #[test]
    fn inherited_kept() {
        let p = run(&snap(Some(64), Some(4), &[("NCCL_SHM_DISABLE", "1")]));
        assert!(p.changes.is_empty() && p.warnings.is_empty());
        let p = run(&snap(Some(64), Some(4), &[("NCCL_SHM_DISABLE", "0")]));
        assert!(p.changes.is_empty());
        assert_eq!(codes(&p), vec!["shm-too-small"]);
        assert!(p.warnings[0].message.contains("NCCL_SHM_DISABLE=0 kept"));
    }

    #[test]
    fn p2p_and_shm_both_disabled_warns() {
        let p = run(&snap(Some(64), Some(4), &[("NCCL_P2P_DISABLE", "1")]));
        assert_eq!(codes(&p), vec!["shm-too-small", "shm-p2p-both-disabled"]);
        let p = run(&snap(
            Some(4096),
            Some(4),
            &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")],
        ));
        assert_eq!(codes(&p), vec!["shm-p2p-both-disabled"]);
        let p = run(&snap(Some(4096), Some(4), &[("NCCL_P2P_DISABLE", "1")]));
        assert!(p.warnings.is_empty());
    }

    #[test]
    fn not_probed_does_nothing() {
        let p = run(&Snapshot::default());
        assert!(p.changes.is_empty() && p.warnings.is_empty());
    }
}
