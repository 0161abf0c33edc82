//! The allreduce check's GPU path against the real libraries of the wheels on a machine without a GPU or a CUDA
//! driver: libnccl of every `nvidia-nccl-cu12` wheel (scripts/install-nccl-wheels.sh) with `libcudart` of the
//! CUDA 12.9 and 13.0 runtime wheels (scripts/install-cuda-wheels.sh). The first call that needs a device is
//! `cudaGetDeviceCount`, which answers `cudaErrorInsufficientDriver` (35) where no driver (libcuda.so.1) is
//! loadable (cuda_runtime_api.h: "the installed NVIDIA CUDA driver is older than the CUDA runtime library",
//! which is also what a missing driver is reported as). The check must stop there and say that no GPU is
//! visible, with CUDA's own name and text, then prove the bootstrap instead: no crash, no communicator, no
//! generic failure.
//!
//! In a network namespace with one interface (eth0), so that NCCL's bootstrap is the same everywhere. Needs
//! root, the wheels and no GPU (a skip outside CI, a failure under CI=true).

use crate::common;

use common::Netns;
use ncclenv::check::protocol::{HelperMsg, Step};
use std::path::{Path, PathBuf};
use std::process::Output;

/// Every NCCL wheel's libnccl with every CUDA set's libcudart, or `None` (a skip; a failure under CI).
fn pairs() -> Option<Vec<(String, PathBuf, PathBuf)>> {
    if !common::require_root() {
        return None;
    }
    if Path::new("/dev/nvidiactl").exists() {
        return common::needs::missing(
            "check_no_gpu: this machine has an NVIDIA driver (/dev/nvidiactl); the test is of a machine without one",
        );
    }
    let wheels = common::needs::nccl_wheels()?;
    let sets = common::needs::cuda_sets()?;
    let mut v = Vec::new();
    for w in &wheels {
        for s in &sets {
            v.push((
                format!("nccl {} + libcudart {}", w.version, s.version),
                w.lib.clone(),
                s.cudart.clone(),
            ));
        }
    }
    Some(v)
}

fn layout() -> Netns {
    let ns = Netns::new("nogpu");
    ns.plug("eth0");
    ns.addr("eth0", "10.89.0.2/24");
    ns.route("default via 10.89.0.1 dev eth0");
    ns
}

/// `program ARGS` in `ns` with only PATH, the NCCL and CUDA libraries named, and the helper beside it.
fn run(ns: &Netns, program: &str, nccl: &Path, cudart: &Path, args: &[&str]) -> Output {
    let mut c = ns.command(program);
    c.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("NCCLENV_NCCL_LIB", nccl)
        .env("NCCLENV_CUDA_LIB", cudart)
        .env("NCCLENV_CHECK_HELPER", env!("CARGO_BIN_EXE_ncclenv-check"))
        .env("NCCLENV_SHM_MIN", "0")
        .args(args);
    c.output().expect("run in the namespace")
}

/// What CUDA's runtime says, by name and number, and why: the words the check must carry.
const NO_DRIVER: &str = "cudaGetDeviceCount returned cudaErrorInsufficientDriver (35)";

#[test]
fn the_helper_stops_at_the_first_device_call_and_says_no_gpu_is_visible() {
    let Some(pairs) = pairs() else { return };
    let ns = layout();
    for (label, nccl, cudart) in pairs {
        let o = run(
            &ns,
            env!("CARGO_BIN_EXE_ncclenv-check"),
            &nccl,
            &cudart,
            &["allreduce", "--gpus", "2", "--mib", "1"],
        );
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        // Exit 0: the helper wrote its verdict (a crash would be a signal, bad usage 2).
        assert_eq!(o.status.code(), Some(0), "{label}\n{out}\n{err}");
        let msgs: Vec<HelperMsg> = out.lines().filter_map(HelperMsg::parse).collect();
        assert_eq!(
            msgs.len(),
            out.lines().count(),
            "{label}: stray lines\n{out}"
        );
        // Rank 0 loaded both real libraries, took the runtime API, and went no further than the CUDA step.
        let rank0_steps: Vec<Step> = msgs
            .iter()
            .filter_map(|m| match m {
                HelperMsg::Step(s) if s.rank == Some(0) => Some(s.step),
                _ => None,
            })
            .collect();
        assert_eq!(rank0_steps, [Step::Load, Step::Cuda], "{label}\n{out}");
        assert!(out.contains(&*cudart.to_string_lossy()) && out.contains(r#""cuda":"runtime""#));
        // No rank > 0 was started, no communicator made.
        assert!(
            !msgs
                .iter()
                .any(|m| matches!(m, HelperMsg::Id(_) | HelperMsg::RankResult(_))),
            "{label}\n{out}"
        );
        let nogpu = msgs
            .iter()
            .find_map(|m| match m {
                HelperMsg::Nogpu(n) => Some(n.note.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{label}: no nogpu line\n{out}"));
        assert!(nogpu.contains(NO_DRIVER), "{label}: {nogpu}");
        // CUDA's own text (cudaGetErrorString of the real runtime), then ncclenv's reading of it.
        assert!(
            nogpu.contains("CUDA driver version is insufficient"),
            "{label}: {nogpu}"
        );
        assert!(nogpu.contains("no CUDA driver"), "{label}: {nogpu}");
        let result = msgs.last().and_then(|m| match m {
            HelperMsg::Result(r) => Some(r),
            _ => None,
        });
        let r = result.unwrap_or_else(|| panic!("{label}: the last line is not the result\n{out}"));
        assert!(r.ok && r.error.is_none(), "{label}\n{out}");
        assert_eq!(r.gpus_visible, Some(0));
        let note = r.note.clone().unwrap_or_default();
        assert!(
            note.starts_with("no GPU visible (") && note.contains(NO_DRIVER),
            "{label}: {note}"
        );
        assert!(note.ends_with("fell back to the bootstrap check"), "{note}");
    }
}

#[test]
fn ncclenv_check_allreduce_without_a_gpu_says_so_and_proves_the_bootstrap() {
    let Some(pairs) = pairs() else { return };
    let ns = layout();
    for (label, nccl, cudart) in pairs {
        let o = run(
            &ns,
            env!("CARGO_BIN_EXE_ncclenv"),
            &nccl,
            &cudart,
            &["check", "allreduce", "--json"],
        );
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{label}\n{out}\n{err}");
        let v: serde_json::Value = serde_json::from_str(out.trim()).expect("check --json");
        assert_eq!(v["passed"], true, "{label}\n{out}");
        assert_eq!(v["requested"], "allreduce", "{label}\n{out}");
        assert_eq!(v["mode"], "bootstrap", "{label}\n{out}");
        assert!(v["error"].is_null(), "{label}\n{out}");
        let summary = v["summary"].as_str().unwrap_or_default();
        assert!(
            summary.contains("no GPU visible") && summary.contains(NO_DRIVER),
            "{label}: {summary}"
        );
        assert!(summary.contains("10.89.0.2"), "{label}: {summary}");
        // The text report says it as plainly.
        let o = run(
            &ns,
            env!("CARGO_BIN_EXE_ncclenv"),
            &nccl,
            &cudart,
            &["check", "allreduce"],
        );
        let text = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{label}\n{text}");
        assert!(
            text.contains("PASSED") && text.contains("no GPU visible"),
            "{label}\n{text}"
        );
    }
}

/// The `lib` lines' paths of a helper run: (libnccl's, CUDA's).
fn lib_paths(out: &str) -> (Option<String>, Option<String>) {
    let (mut nccl, mut cuda) = (None, None);
    for m in out.lines().filter_map(HelperMsg::parse) {
        if let HelperMsg::Lib(l) = m {
            match l.what {
                ncclenv::check::protocol::LibKind::Nccl => nccl = nccl.or(Some(l.path)),
                ncclenv::check::protocol::LibKind::Cuda => cuda = cuda.or(Some(l.path)),
            }
        }
    }
    (nccl, cuda)
}

#[test]
fn the_wheel_layouts_of_cuda_13_and_pytorch_are_searched() {
    let Some(pairs) = pairs() else { return };
    let Some((_, nccl, _)) = pairs.last().cloned() else {
        return;
    };
    let Some(cudart13) = pairs
        .iter()
        .map(|p| p.2.clone())
        .find(|c| c.to_string_lossy().ends_with("libcudart.so.13"))
    else {
        common::needs::skip("check_no_gpu: no CUDA 13 runtime set");
        return;
    };
    let ns = layout();
    // A site-packages as pip makes it for PyTorch cu130: nvidia-nccl-cu13 (nvidia/nccl/lib) and
    // nvidia-cuda-runtime 13 (nvidia/cu13/lib); then PyTorch's bundled NCCL (torch/lib) instead.
    for nccl_rel in ["nvidia/nccl/lib", "torch/lib"] {
        let site = common::TempDir::new("site");
        let link = |rel: &str, to: &Path| {
            let at = site.path.join(rel);
            std::fs::create_dir_all(at.parent().expect("parent")).expect("mkdir");
            std::os::unix::fs::symlink(to, &at).expect("symlink");
            at
        };
        let n = link(&format!("{nccl_rel}/libnccl.so.2"), &nccl);
        let c = link("nvidia/cu13/lib/libcudart.so.13", &cudart13);
        let mut cmd = ns.command(env!("CARGO_BIN_EXE_ncclenv-check"));
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("PYTHONPATH", &site.path)
            .args(["allreduce", "--gpus", "1", "--mib", "1"]);
        let o = cmd.output().expect("run the helper");
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{out}");
        let (got_nccl, got_cuda) = lib_paths(&out);
        assert_eq!(got_nccl.as_deref(), Some(&*n.to_string_lossy()), "{out}");
        assert_eq!(got_cuda.as_deref(), Some(&*c.to_string_lossy()), "{out}");
        assert!(out.contains(NO_DRIVER), "{out}");
    }
}
