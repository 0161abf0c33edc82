//! Findings about the host that change no variable but can make NCCL fail or surprise: a GPU list the CUDA
//! runtime or the container toolkit reads differently than written, and several NCCL versions on disk. As
//! findings they have a code and count for doctor's exit code.

use crate::findings::Finding;
use crate::plan::Plan;
use crate::snapshot::{distinct_versions, Snapshot};

/// Run both rules.
pub fn decide_host(snap: &Snapshot, plan: &mut Plan) {
    gpu_list(snap, plan);
    nccl_versions(snap, plan);
}

/// `gpu-list-invalid`: `CUDA_VISIBLE_DEVICES` or `NVIDIA_VISIBLE_DEVICES` holds an entry that is cut or ignored
/// (the CUDA runtime stops at the first invalid entry of `CUDA_VISIBLE_DEVICES`; see
/// [`crate::probe::host::parse_cuda_visible`]), so the job sees fewer GPUs than the list names.
fn gpu_list(snap: &Snapshot, plan: &mut Plan) {
    let Some(w) = snap.gpus.as_ref().and_then(|g| g.warning.as_ref()) else {
        return;
    };
    plan.finding(
        Finding::GpuListInvalid,
        w.clone(),
        "list GPU indices or GPU-/MIG- UUIDs only, each once (nvidia-smi -L shows them)",
    );
}

/// `nccl-several-versions`: NCCL libraries of more than one version were found (by `doctor`, or by a start
/// that looked for them: `probe::collect` searches the disk only where the version changes the decision). Which one a job loads depends on `LD_LIBRARY_PATH`, the loader cache and the
/// framework's own wheel, so a version mismatch between nodes or with the framework is easy to miss.
fn nccl_versions(snap: &Snapshot, plan: &mut Plan) {
    let versions = distinct_versions(&snap.nccl_installs);
    if versions.len() < 2 {
        return;
    }
    let places: Vec<String> = snap
        .nccl_installs
        .iter()
        .filter_map(|i| i.version.as_ref().map(|v| format!("{v} at {}", i.path)))
        .collect();
    plan.finding(
        Finding::NcclSeveralVersions,
        format!(
            "several NCCL versions are installed ({}): which one the job loads depends on LD_LIBRARY_PATH and \
             the framework",
            places.join(", ")
        ),
        "run the job once with NCCL_DEBUG=VERSION to see the version it loads; keep one NCCL, or the same on \
         every node",
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{GpuInfo, NcclInstall};
    use crate::test_machine::codes;
    use crate::test_snapshot::SnapshotBuilder;

    fn install(path: &str, v: &str) -> NcclInstall {
        NcclInstall {
            path: path.into(),
            version: Some(v.into()),
            source: "test".into(),
        }
    }

    #[test]
    fn several_versions_is_a_warning_one_version_twice_is_not() {
        let mut snap = SnapshotBuilder::new()
            .nccl("/a/libnccl.so.2", Some("2.21.5"))
            .nccl("/b/libnccl.so.2", Some("2.21.5"))
            .build();
        let mut p = Plan::default();
        decide_host(&snap, &mut p);
        assert!(codes(&p).is_empty());
        snap.nccl_installs
            .push(install("/c/libnccl.so.2", "2.27.7"));
        let mut p = Plan::default();
        decide_host(&snap, &mut p);
        assert_eq!(codes(&p), ["nccl-several-versions"]);
        assert!(p.has_warnings());
        assert!(p.warnings[0].message.contains("2.27.7 at /c/libnccl.so.2"));
    }

    #[test]
    fn an_invalid_gpu_list_is_a_warning_a_valid_one_is_not() {
        let env = |v: &str| {
            [("CUDA_VISIBLE_DEVICES".to_string(), v.to_string())]
                .into_iter()
                .collect()
        };
        for (value, want) in [("0,1", None), ("0,x,1", Some("gpu-list-invalid"))] {
            let g: GpuInfo = crate::probe::host::gpu_count_with(
                &env(value),
                std::path::Path::new("/nonexistent"),
                std::path::Path::new("/nonexistent"),
            );
            let snap = SnapshotBuilder::new().gpus(g).build();
            let mut p = Plan::default();
            decide_host(&snap, &mut p);
            assert_eq!(codes(&p).first().copied(), want, "{value}");
        }
    }
}
