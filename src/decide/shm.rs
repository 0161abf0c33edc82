//! Decision rules: `/dev/shm` and NCCL's SHM transport (`NCCL_SHM_DISABLE`).
//!
//! NCCL's SHM transport (src/transport/shm.cc, `shmRecvSetup` → `ncclShmOpen`, NCCL 2.18–2.30) creates, for
//! each (channel, SHM peer, connection), a receive segment `/dev/shm/nccl-XXXXXX` of
//! `sizeof(struct ncclRecvMem)` (4,096 B, `MEM_ALIGN`) plus one buffer per protocol (`comm->buffSizes`, set by
//! `computeBuffSizes` in src/init.cc from `NCCL_LL_BUFFSIZE`, `NCCL_LL128_BUFFSIZE` and `NCCL_BUFFSIZE`, each
//! defaulting when unset: LL 524,288 B, LL128 4,915,200 B, SIMPLE 4 MiB). With the defaults one segment is
//! 9,637,888 B; `NCCL_BUFFSIZE=8388608` makes it 13,832,192 B. Docker's default 64 MiB tmpfs is too small for
//! 4 GPUs: init fails with `Error while creating shared memory segment … (size 9637888)` (ENOSPC); a
//! `/dev/shm` the job's user cannot write fails the same way (NVIDIA/nccl#328). NCCL ≥ 2.24 with driver ≥ 12.6
//! can use cuMem host memory instead, but without `SYS_NICE` (default Docker) 2.26.3+ falls back to
//! `/dev/shm`, and ranks of one process always use it. `NCCL_SHM_DISABLE=1` is safe: pairs without P2P use the
//! network transport and the job runs. The rule and its numbers are described in docs/rdma-shm.md.

use crate::config::Config;
use crate::decide::inherit::{Inherited, Said, Verdict};
use crate::decide::switches::{self, TurnOff};
use crate::findings::Finding;
use crate::nccl_rules::effective;
use crate::nccl_rules::param_value;
use crate::plan::Plan;
pub use crate::plan::{BufferSizes, ShmNeed};
use crate::snapshot::{ShmInfo, Snapshot};

/// `sizeof(struct ncclRecvMem)`: the segment header, padded to `MEM_ALIGN` (4,096 B; src/include/device.h,
/// src/include/comm.h).
pub const RECV_MEM_BYTES: u64 = 4096;

/// NCCL's default LL buffer: `NCCL_LL_LINES_PER_THREAD` (8) × `NCCL_LL_MAX_NTHREADS` (512) × `NCCL_STEPS` (8)
/// × `sizeof(union ncclLLFifoLine)` (16) = 524,288 B (`DEFAULT_LL_BUFFSIZE`, src/init.cc, 2.18–2.30).
pub const DEFAULT_LL_BUFFSIZE: u64 = 8 * 512 * 8 * 16;

/// NCCL's default LL128 buffer: `NCCL_LL128_ELEMS_PER_THREAD` (120) × `NCCL_LL128_MAX_NTHREADS` (640) ×
/// `NCCL_STEPS` (8) × 8 B = 4,915,200 B (`DEFAULT_LL128_BUFFSIZE`, src/init.cc, 2.18–2.30).
pub const DEFAULT_LL128_BUFFSIZE: u64 = 120 * 640 * 8 * 8;

/// NCCL's default SIMPLE buffer, 4 MiB (`DEFAULT_BUFFSIZE`, src/init.cc, 2.18–2.30).
pub const DEFAULT_BUFFSIZE: u64 = 1 << 22;

/// Bytes of one SHM receive segment with NCCL's default buffers: 9,637,888.
pub const SHM_SEGMENT_BYTES: u64 =
    RECV_MEM_BYTES + DEFAULT_LL_BUFFSIZE + DEFAULT_LL128_BUFFSIZE + DEFAULT_BUFFSIZE;

/// Segments budgeted per local rank: 4 (channels × connections per SHM peer, rounded up; docs/rdma-shm.md).
pub const SEGMENTS_PER_GPU: u64 = 4;

const MIB: u64 = 1 << 20;

const REMEDY: &str =
    "run the container with --shm-size=1g (or --ipc=host); Kubernetes: mount an emptyDir \
                      with medium: Memory at /dev/shm";

impl BufferSizes {
    /// One receive segment: [`RECV_MEM_BYTES`] + the three buffers.
    pub fn segment_bytes(&self) -> u64 {
        RECV_MEM_BYTES
            .saturating_add(self.ll)
            .saturating_add(self.ll128)
            .saturating_add(self.simple)
    }
}

/// The buffer sizes NCCL will use: each of `NCCL_LL_BUFFSIZE`, `NCCL_LL128_BUFFSIZE`, `NCCL_BUFFSIZE` (the
/// environment's, else NCCL's config files') read as NCCL reads it (`param_value`: `strtoll`, base 0); an
/// unset, empty, overflowing or non-positive value leaves the default (NCCL keeps -2 as "default" and would
/// break on other non-positive values, which no working job sets).
pub fn buffer_sizes(snap: &Snapshot) -> BufferSizes {
    let mut b = BufferSizes {
        ll: DEFAULT_LL_BUFFSIZE,
        ll128: DEFAULT_LL128_BUFFSIZE,
        simple: DEFAULT_BUFFSIZE,
        set_by: Vec::new(),
    };
    for (name, slot) in [
        ("NCCL_LL_BUFFSIZE", &mut b.ll),
        ("NCCL_LL128_BUFFSIZE", &mut b.ll128),
        ("NCCL_BUFFSIZE", &mut b.simple),
    ] {
        if let Some((v, origin)) = effective(name, &snap.env, &snap.conf_files) {
            if let Some(n) = param_value(v).filter(|n| *n > 0) {
                *slot = n as u64;
                b.set_by.push(format!("{name}={v} ({origin})"));
            }
        }
    }
    b
}

/// The budget: ranks from the launcher (`snap.job.local_ranks`, see `launcher::local_ranks`), else the
/// visible GPUs (`snap.gpus`: device nodes, `CUDA_VISIBLE_DEVICES`, `NVIDIA_VISIBLE_DEVICES`, where
/// `void`/`none` means 0 and `all` without a device node is unknown), else unknown (`ranks` `None`, no
/// budget: a guess would disable SHM for a job that may have no local peer at all); × [`SEGMENTS_PER_GPU`] ×
/// the segment NCCL's buffers make ([`buffer_sizes`]). `cfg.shm_min_mib` (`NCCLENV_SHM_MIN`) replaces the
/// result.
pub fn shm_need(snap: &Snapshot, cfg: &Config) -> ShmNeed {
    let (ranks, ranks_source) = match (snap.job.local_ranks, &snap.gpus) {
        (Some(n), _) => (
            Some(n),
            snap.job
                .local_ranks_source
                .clone()
                .unwrap_or_else(|| "the launcher".into()),
        ),
        (None, Some(g)) => (g.count, g.source.clone()),
        (None, None) => (None, "not probed".into()),
    };
    let counted_ranks = ranks.map_or(0, |n| u64::from(n).max(2));
    let buffers = buffer_sizes(snap);
    let segment_bytes = buffers.segment_bytes();
    let need_bytes = match cfg.shm_min_mib {
        Some(mib) => mib.saturating_mul(MIB),
        None => counted_ranks
            .saturating_mul(SEGMENTS_PER_GPU)
            .saturating_mul(segment_bytes),
    };
    ShmNeed {
        ranks,
        ranks_source,
        counted_ranks,
        segments_per_rank: SEGMENTS_PER_GPU,
        segment_bytes,
        buffers,
        override_mib: cfg.shm_min_mib,
        need_bytes,
    }
}

impl ShmNeed {
    /// The need in words: `74 MiB for 2 local rank(s) (--devices): 4 segments of 9637888 B each`.
    pub fn describe(&self) -> String {
        if let Some(m) = self.override_mib {
            return format!("{m} MiB (NCCLENV_SHM_MIN)");
        }
        let who = match self.ranks {
            Some(n) => format!("{n} local rank(s) ({})", self.ranks_source),
            None => {
                return format!(
                    "unknown: local ranks unknown ({}), so /dev/shm is not judged",
                    self.ranks_source
                )
            }
        };
        let mut s = format!(
            "{} MiB for {who}: {} segments of {} B each per rank",
            self.need_bytes.div_ceil(MIB),
            self.segments_per_rank,
            self.segment_bytes
        );
        if !self.buffers.set_by.is_empty() {
            s.push_str(&format!(" ({})", self.buffers.set_by.join(", ")));
        }
        s
    }
}

/// Decide `NCCL_SHM_DISABLE` from the `/dev/shm` probe and the ranks on this node ([`shm_need`]).
///
/// - `snap.shm == None` (not probed): nothing.
/// - Local ranks unknown (no launcher count, no GPU seen, no `NCCLENV_SHM_MIN`): nothing; doctor says
///   "unknown".
/// - No GPU (`NVIDIA_VISIBLE_DEVICES=void`, …; info `shm-no-gpu`) or one rank (`shm-single-gpu`): no local
///   peer, SHM is never used; nothing changed.
/// - Path missing, read-only, not writable for this user (the command runs as the same user), or free space
///   below the need: `NCCL_SHM_DISABLE=1` and a warning (`shm-missing`, `shm-read-only`, `shm-not-writable`,
///   `shm-too-small`) naming `--shm-size=1g` or `--ipc=host`; leftover `nccl-*` segments in a full
///   `/dev/shm` are named in the remedy.
/// - An inherited `NCCL_SHM_DISABLE` is kept whatever its value; the warning is still made where it does not
///   disable SHM and `/dev/shm` is unusable.
/// - Inherited `NCCL_P2P_DISABLE=1` while SHM ends up disabled: warning `shm-p2p-both-disabled` (intra-node
///   traffic goes through the network transport).
pub fn decide_shm(snap: &Snapshot, cfg: &Config, plan: &mut Plan) {
    let Some(shm) = &snap.shm else {
        return;
    };
    let need = shm_need(snap, cfg);
    plan.shm_need = Some(need.clone());
    if need.ranks.is_none() && need.override_mib.is_none() {
        return;
    }
    if !has_local_peer(&need, plan) {
        return;
    }
    let (problem, remedy) = shm_problem(shm, &need);
    let shm_fits = problem.is_none();
    let shm_disabled = disable_on_problem(snap, problem, &remedy, plan);
    let judge = |p2p: &Inherited| {
        if !(shm_disabled && switches::P2P.turns_off(p2p)) {
            return Verdict::Works;
        }
        // Where `/dev/shm` fits, SHM is off by the user's own switch: enlarging it does nothing (break-it
        // finding); the value is quoted as written.
        let first = if shm_fits {
            "unset NCCL_SHM_DISABLE (/dev/shm is large enough for the local ranks)".to_string()
        } else {
            REMEDY.to_string()
        };
        Verdict::risky(Said::new(
            Finding::ShmP2pBothDisabled,
            format!(
                "NCCL_P2P_DISABLE={}{} is inherited and SHM is disabled: all traffic between local GPUs goes \
                 through the network transport",
                p2p.value,
                switches::P2P.reading(p2p)
            ),
            format!(
                "{first}; keep NCCL_P2P_DISABLE=1 only where an allreduce failed without it (PCIe ACS / IOMMU)"
            ),
        ))
    };
    switches::P2P.decide(snap, plan, judge, || None);
}

/// Whether a rank here has a local peer (SHM is used at all); else the info `shm-no-gpu` (no GPU visible)
/// or `shm-single-gpu` (one local rank).
fn has_local_peer(need: &ShmNeed, plan: &mut Plan) -> bool {
    match need.ranks {
        Some(0) => {
            plan.finding(
                Finding::ShmNoGpu,
                format!(
                    "no GPU visible to the command ({}): NCCL's SHM transport is not used",
                    need.ranks_source
                ),
                "nothing to do",
            );
            false
        }
        Some(1) => {
            plan.finding(
                Finding::ShmSingleGpu,
                format!(
                    "one local rank ({}): no local peer, NCCL's SHM transport is not used",
                    need.ranks_source
                ),
                "nothing to do",
            );
            false
        }
        _ => true,
    }
}

/// What makes `/dev/shm` unusable for `need`, if anything (the finding and its message), and the remedy:
/// missing, read-only, not writable for this user, or too little free space (leftover `nccl-*` segments
/// named in the remedy).
fn shm_problem(shm: &ShmInfo, need: &ShmNeed) -> (Option<(Finding, String)>, String) {
    let mut remedy = REMEDY.to_string();
    let problem: Option<(Finding, String)> = if let Some(e) = &shm.error {
        Some((
            Finding::ShmMissing,
            format!("{} is not usable ({e})", shm.path),
        ))
    } else if shm.read_only {
        Some((
            Finding::ShmReadOnly,
            format!("{} is mounted read-only", shm.path),
        ))
    } else if shm.writable == Some(false) {
        remedy = format!(
            "make {} writable for the job's user (Docker's own /dev/shm is mode 1777; Kubernetes: an emptyDir \
             with medium: Memory), or run the job as its owner",
            shm.path
        );
        Some((
            Finding::ShmNotWritable,
            format!(
                "{} is not writable for the job: {}; NCCL's segment creation would fail",
                shm.path,
                shm.write_error.as_deref().unwrap_or("access denied")
            ),
        ))
    } else {
        match shm.free_bytes {
            Some(free) if free >= need.need_bytes => None,
            Some(free) => {
                let mut why = format!(
                    "{} has {} MiB free (of {} MiB), NCCL's SHM transport needs about {}: segment creation \
                     would fail with ENOSPC",
                    shm.path,
                    free / MIB,
                    shm.total_bytes.unwrap_or(0) / MIB,
                    need.describe()
                );
                if !shm.nccl_segments.is_empty() {
                    let total: u64 = shm.nccl_segments.iter().map(|s| s.bytes).sum();
                    let names: Vec<String> = shm
                        .nccl_segments
                        .iter()
                        .map(|s| {
                            format!(
                                "{}/{} ({})",
                                shm.path,
                                s.name,
                                crate::snapshot::Mib(s.bytes)
                            )
                        })
                        .collect();
                    why.push_str(&format!(
                        "; {} of it is held by {} leftover nccl-* segment(s)",
                        crate::snapshot::Mib(total),
                        names.len()
                    ));
                    remedy = format!(
                        "remove the leftover NCCL segments if no NCCL job on this host is running: {} (rm {}/nccl-*); \
                         or {REMEDY}",
                        names.join(", "),
                        shm.path
                    );
                }
                Some((Finding::ShmTooSmall, why))
            }
            None => Some((
                Finding::ShmMissing,
                format!("{}: free space unknown", shm.path),
            )),
        }
    };
    (problem, remedy)
}

/// [`switches::SHM`]'s rule: an inherited `NCCL_SHM_DISABLE` is kept whatever its value (risky, with the
/// problem's warning, where it does not disable SHM); an unset one is set to `1` where there is a problem,
/// with the warning. Returns whether SHM ends up disabled.
fn disable_on_problem(
    snap: &Snapshot,
    problem: Option<(Finding, String)>,
    remedy: &str,
    plan: &mut Plan,
) -> bool {
    let judge = |inh: &Inherited| match &problem {
        Some((code, why)) if !switches::SHM.turns_off(inh) => {
            let reading = switches::SHM.reading(inh);
            // A value set to turn SHM off that NCCL reads otherwise (`2`, `yes`) says so, and how to.
            let remedy = if reading.is_empty() {
                remedy.to_string()
            } else {
                format!("set NCCL_SHM_DISABLE=1, or {remedy}")
            };
            Verdict::risky(Said::new(
                *code,
                format!("{}{reading}, but {why}", inh.kept()),
                remedy,
            ))
        }
        _ => Verdict::Works,
    };
    let turn_off = || {
        problem.as_ref().map(|(code, why)| TurnOff {
            reason: format!("{why}; the network transport carries those pairs instead"),
            said: Some(Said::new(
                *code,
                format!(
                    "{why}; NCCL's SHM transport is disabled (NCCL_SHM_DISABLE=1), which is slower"
                ),
                remedy,
            )),
        })
    };
    switches::SHM.decide(snap, plan, judge, turn_off).off()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{GpuInfo, ShmInfo};
    use crate::test_machine::codes;

    fn snap(free_mib: Option<u64>, gpus: Option<u32>, env: &[(&str, &str)]) -> Snapshot {
        crate::test_snapshot::SnapshotBuilder::new()
            .shm(ShmInfo {
                path: "/dev/shm".into(),
                total_bytes: free_mib.map(|m| m * MIB),
                free_bytes: free_mib.map(|m| m * MIB),
                read_only: false,
                error: if free_mib.is_none() {
                    Some("No such file or directory".into())
                } else {
                    None
                },
                writable: free_mib.map(|_| true),
                ..ShmInfo::default()
            })
            .gpus(GpuInfo {
                count: gpus,
                source: "test".into(),
                warning: None,
            })
            .envs(env)
            .build()
    }
    fn run_cfg(s: &Snapshot, cfg: &Config) -> Plan {
        let mut p = Plan::default();
        decide_shm(s, cfg, &mut p);
        p
    }
    fn run(s: &Snapshot) -> Plan {
        run_cfg(s, &Config::default())
    }

    fn need(gpus: Option<u32>, cfg: &Config) -> u64 {
        shm_need(&snap(Some(1), gpus, &[]), cfg).need_bytes
    }

    /// The budget in bytes, written out (not recomputed from the constants): 4 segments of NCCL's 9,637,888 B
    /// per rank (src/transport/shm.cc, default NCCL_BUFFSIZE), at least 2 ranks, none when unknown.
    #[test]
    fn need_sizes() {
        let c = Config::default();
        assert_eq!(SHM_SEGMENT_BYTES, 9_637_888);
        assert_eq!(need(Some(4), &c), 154_206_208); // 147.06 MiB
        assert_eq!(need(Some(2), &c), 77_103_104);
        assert_eq!(need(Some(1), &c), 77_103_104);
        assert_eq!(need(Some(0), &c), 77_103_104);
        assert_eq!(need(None, &c), 0);

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
        assert_eq!(need(Some(8), &c), 100 * MIB);
    }

    #[test]
    fn buffer_sizes_follow_nccls_variables() {
        let s = snap(Some(1), Some(8), &[("NCCL_BUFFSIZE", "8388608")]);
        let b = buffer_sizes(&s);
        assert_eq!(b.segment_bytes(), 13_832_192);
        assert_eq!(
            b.set_by,
            vec!["NCCL_BUFFSIZE=8388608 (environment)".to_string()]
        );
        let s = snap(
            Some(1),
            Some(8),
            &[
                ("NCCL_LL_BUFFSIZE", "0x100000"),
                ("NCCL_LL128_BUFFSIZE", "-2"),
            ],
        );
        let b = buffer_sizes(&s);
        assert_eq!(
            (b.ll, b.ll128, b.simple),
            (1 << 20, DEFAULT_LL128_BUFFSIZE, DEFAULT_BUFFSIZE)
        );
        // From NCCL's config file, as NCCL applies it.
        let mut s = snap(Some(1), Some(8), &[]);
        s.conf_files.push(crate::snapshot::ConfFile {
            path: "/etc/nccl.conf".into(),
            values: vec![("NCCL_BUFFSIZE".into(), "16777216".into())],
            error: None,
        });
        assert_eq!(buffer_sizes(&s).simple, 16 << 20);
    }

    #[test]
    fn f23_larger_buffers_need_more() {
        // 8 GPUs, 320 MiB: enough with the default buffers (294 MiB), not with NCCL_BUFFSIZE=8 MiB (422 MiB).
        let p = run(&snap(Some(320), Some(8), &[]));
        assert!(p.changes.is_empty(), "{:?}", p.changes);
        let p = run(&snap(Some(320), Some(8), &[("NCCL_BUFFSIZE", "8388608")]));
        assert_eq!(p.value_of("NCCL_SHM_DISABLE"), Some("1"));
        assert_eq!(codes(&p), vec!["shm-too-small"]);
        assert!(
            p.warnings[0].message.contains("423 MiB"),
            "{}",
            p.warnings[0].message
        );
        assert!(p.warnings[0].message.contains("NCCL_BUFFSIZE=8388608"));
        let n = p.shm_need.as_ref().map(|n| n.need_bytes);
        assert_eq!(n, Some(8 * 4 * 13_832_192));
    }

    #[test]
    fn f24_launcher_ranks_before_visible_gpus() {
        // 8 GPUs visible, 128 MiB: too small for 8, enough for the 2 ranks the launcher starts.
        let mut s = snap(Some(128), Some(8), &[]);
        assert_eq!(run(&s).value_of("NCCL_SHM_DISABLE"), Some("1"));
        s.job.local_ranks = Some(2);
        s.job.local_ranks_source = Some("--devices".into());
        let p = run(&s);
        assert!(
            p.changes.is_empty() && p.warnings.is_empty(),
            "{:?}",
            p.warnings
        );
        let n = p.shm_need.expect("budget");
        assert_eq!((n.ranks, n.ranks_source.as_str()), (Some(2), "--devices"));
        assert_eq!(n.need_bytes, 2 * 4 * SHM_SEGMENT_BYTES);
        // One local rank: no peer.
        s.job.local_ranks = Some(1);
        assert_eq!(codes(&run(&s)), vec!["shm-single-gpu"]);
    }

    #[test]
    fn f24_no_gpu_changes_nothing() {
        let p = run(&snap(Some(64), Some(0), &[]));
        assert!(p.changes.is_empty());
        assert_eq!(codes(&p), vec!["shm-no-gpu"]);
        assert!(!p.has_warnings());
        assert!(!codes(&run(&snap(Some(64), Some(4), &[]))).contains(&"shm-no-gpu"));
    }

    #[test]
    fn f30_not_writable_disables() {
        let mut s = snap(Some(1024), Some(2), &[]);
        if let Some(shm) = s.shm.as_mut() {
            shm.writable = Some(false);
            shm.write_error = Some(
                "uid 1000 cannot create files in /dev/shm (Permission denied); it is owned by uid 0 gid 0 \
                 with mode 0755"
                    .into(),
            );
        }
        let p = run(&s);
        assert_eq!(p.value_of("NCCL_SHM_DISABLE"), Some("1"));
        assert_eq!(codes(&p), vec!["shm-not-writable"]);
        assert!(p.warnings[0].message.contains("uid 1000"));
        assert!(p.warnings[0].remedy.contains("writable"));
        // Writable: nothing.
        let p = run(&snap(Some(1024), Some(2), &[]));
        assert!(!codes(&p).contains(&"shm-not-writable"));
    }

    #[test]
    fn f30_leftover_segments_named_in_the_remedy() {
        let mut s = snap(Some(4), Some(2), &[]);
        if let Some(shm) = s.shm.as_mut() {
            shm.total_bytes = Some(64 * MIB);
            shm.nccl_segments = vec![
                crate::snapshot::ShmSegment {
                    name: "nccl-AbC123".into(),
                    bytes: 40 * MIB,
                },
                crate::snapshot::ShmSegment {
                    name: "nccl-XyZ789".into(),
                    bytes: 20 * MIB,
                },
            ];
        }
        let p = run(&s);
        assert_eq!(p.value_of("NCCL_SHM_DISABLE"), Some("1"));
        let w = &p.warnings[0];
        assert_eq!(w.code, "shm-too-small");
        assert!(
            w.remedy.contains("/dev/shm/nccl-AbC123 (40 MiB)") && w.remedy.contains("nccl-XyZ789"),
            "{w:?}"
        );
        assert!(
            w.message.contains("60 MiB of it is held by 2 leftover"),
            "{w:?}"
        );
        // Without leftovers the remedy is the usual one.
        let p = run(&snap(Some(4), Some(2), &[]));
        assert!(
            !p.warnings[0].remedy.contains("nccl-"),
            "{:?}",
            p.warnings[0]
        );
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
    fn unknown_ranks_leave_shm_alone() {
        // Nothing seen: no change and no finding, even on Docker's 64 MiB or a missing /dev/shm.
        for free in [Some(64), None] {
            let p = run(&snap(free, None, &[]));
            assert!(p.changes.is_empty() && p.warnings.is_empty(), "{p:?}");
            let n = p.shm_need.expect("the budget is recorded");
            assert_eq!((n.ranks, n.need_bytes), (None, 0));
            assert!(n.describe().starts_with("unknown: "), "{}", n.describe());
        }
        // The launcher names the ranks: judged.
        let mut s = snap(Some(64), None, &[]);
        s.job.local_ranks = Some(4);
        s.job.local_ranks_source = Some("--nproc-per-node".into());
        assert_eq!(run(&s).value_of("NCCL_SHM_DISABLE"), Some("1"));
        // NCCLENV_SHM_MIN says the need: judged.
        let cfg = Config {
            shm_min_mib: Some(128),
            ..Config::default()
        };
        let p = run_cfg(&snap(Some(64), None, &[]), &cfg);
        assert_eq!(p.value_of("NCCL_SHM_DISABLE"), Some("1"));
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

    /// NCCL reads `NCCL_SHM_DISABLE` and `NCCL_P2P_DISABLE` from its config files too (`initEnv`,
    /// src/misc/param.cc): a value there is kept like an inherited one, never overridden by the environment.
    #[test]
    fn config_file_values_count_as_inherited() {
        let conf = |pairs: &[(&str, &str)]| crate::snapshot::ConfFile {
            path: "/etc/nccl.conf".into(),
            values: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            error: None,
        };
        let mut s = snap(Some(64), Some(4), &[]);
        s.conf_files.push(conf(&[("NCCL_SHM_DISABLE", "1")]));
        let p = run(&s);
        assert!(p.changes.is_empty() && p.warnings.is_empty(), "{p:?}");
        let mut s = snap(Some(64), Some(4), &[]);
        s.conf_files.push(conf(&[("NCCL_SHM_DISABLE", "0")]));
        let p = run(&s);
        assert!(p.changes.is_empty());
        assert_eq!(codes(&p), vec!["shm-too-small"]);
        assert!(p.warnings[0]
            .message
            .contains("NCCL_SHM_DISABLE=0 (from /etc/nccl.conf) kept"));
        // The environment wins over the file, as in NCCL.
        let mut s = snap(Some(64), Some(4), &[("NCCL_SHM_DISABLE", "1")]);
        s.conf_files.push(conf(&[("NCCL_SHM_DISABLE", "0")]));
        assert!(run(&s).warnings.is_empty());
        // NCCL_P2P_DISABLE=1 from the file with SHM disabled.
        let mut s = snap(Some(4096), Some(4), &[("NCCL_SHM_DISABLE", "1")]);
        s.conf_files.push(conf(&[("NCCL_P2P_DISABLE", "1")]));
        assert_eq!(codes(&run(&s)), vec!["shm-p2p-both-disabled"]);
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

    /// NCCL turns SHM and P2P off only at exactly 1 (`shmCanConnect`, `ncclGetLevel`; NCCL 2.18–2.30): an
    /// inherited `NCCL_SHM_DISABLE=2` leaves SHM on, so a `/dev/shm` too small is still a warning, and
    /// `NCCL_P2P_DISABLE=2` leaves P2P on, so SHM turned off is not "both disabled".
    #[test]
    fn shm_and_p2p_switches_other_than_one_leave_their_transport_on() {
        for v in ["2", "0x2", "-1"] {
            let p = run(&snap(Some(64), Some(4), &[("NCCL_SHM_DISABLE", v)]));
            assert!(p.changes.is_empty(), "{v}: {:?}", p.changes);
            assert_eq!(codes(&p), vec!["shm-too-small"], "NCCL_SHM_DISABLE={v}");
            let p = run(&snap(Some(64), Some(4), &[("NCCL_P2P_DISABLE", v)]));
            assert_eq!(codes(&p), vec!["shm-too-small"], "NCCL_P2P_DISABLE={v}");
        }
        for v in ["1", "0x1", "01"] {
            let p = run(&snap(Some(64), Some(4), &[("NCCL_SHM_DISABLE", v)]));
            assert!(
                p.warnings.is_empty(),
                "NCCL_SHM_DISABLE={v}: {:?}",
                p.warnings
            );
        }
    }

    #[test]
    fn not_probed_does_nothing() {
        let p = run(&Snapshot::default());
        assert!(p.changes.is_empty() && p.warnings.is_empty());
    }
}
