//! scripts/gpu-check.sh, the one call that proves the allreduce check on a GPU machine, run here against the
//! fake libnccl and libcuda of tests/fake (check_fake's), so that the GPU itself is its only unknown there:
//! binaries from a dist folder and no cargo on PATH, NCCL found in a python site-packages laid out as the
//! nvidia-nccl-cu13 wheel is, a fake `nvidia-smi`, the repair path (the fake fails `ncclGetUniqueId` for an
//! NCCL_SOCKET_IFNAME that names no interface, as NCCL ≥ 2.24 does), one, two and no GPUs, the budget, and
//! every report under $OUT. One test runs it with the real libnccl of each wheel and the real libcudart 13
//! instead, for the steps that need no GPU (NCCL itself refusing the inherited NCCL_SOCKET_IFNAME).
//!
//! In a network namespace with eth0 (ncclenv chooses it; the fake puts its address into the unique id).
//! Needs root, `python3`, `bash`, `cc`, and for that test the wheels (a skip outside CI, a failure under CI=true).

use crate::check_fake::fakes;
use crate::common;

use common::{exe, Netns, TempDir};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

const ADDR: &str = "10.90.0.2";

/// A dist folder, a site-packages with the fake NCCL as the nvidia-nccl-cu13 wheel installs it, and a bin
/// folder with a fake nvidia-smi that lists `gpus` GPUs.
struct Machine {
    tmp: TempDir,
    ns: Netns,
}

impl Machine {
    fn new(gpus: u32) -> Machine {
        let tmp = TempDir::new("gpu-check");
        let dist = tmp.join("dist");
        std::fs::create_dir_all(&dist).expect("mkdir dist");
        exe::copy(
            Path::new(env!("CARGO_BIN_EXE_ncclenv")),
            &dist.join("ncclenv"),
        );
        exe::copy(
            Path::new(env!("CARGO_BIN_EXE_ncclenv-check")),
            &dist.join("ncclenv-check"),
        );
        let lib = tmp.join("site/nvidia/nccl/lib");
        std::fs::create_dir_all(&lib).expect("mkdir site");
        std::fs::copy(fakes().join("libnccl.so.2"), lib.join("libnccl.so.2")).expect("copy fake");
        let meta = tmp.join("site/nvidia_nccl_cu13-2.27.7.dist-info");
        std::fs::create_dir_all(&meta).expect("mkdir dist-info");
        std::fs::write(
            meta.join("METADATA"),
            "Metadata-Version: 2.1\nName: nvidia-nccl-cu13\nVersion: 2.27.7\n",
        )
        .expect("write METADATA");
        std::fs::create_dir_all(tmp.join("bin")).expect("mkdir bin");
        let list: String = (0..gpus)
            .map(|i| format!("echo 'GPU {i}: NVIDIA H200 (UUID: GPU-fake-{i})'\n"))
            .collect();
        exe::write(
            &tmp.join("bin/nvidia-smi"),
            format!(
                "#!/bin/sh\ncase \"$1\" in -L) {};; *) echo 'NVIDIA H200, 580.65.06, 143771 MiB';; esac\n",
                if list.is_empty() { "true\n".to_string() } else { list }
            ),
            0o755,
        );
        std::fs::create_dir_all(tmp.join("xchg")).expect("mkdir xchg");
        let ns = Netns::new("gpuchk");
        ns.plug("eth0");
        ns.addr("eth0", &format!("{ADDR}/24"));
        ns.route("default via 10.90.0.1 dev eth0");
        Machine { tmp, ns }
    }

    /// scripts/gpu-check.sh with the fakes, `gpus` fake GPUs and `vars`; its output and how long it took.
    fn run(&self, gpus: u32, vars: &[(&str, &str)]) -> (Output, Duration, PathBuf) {
        let out = self.tmp.join("out");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/gpu-check.sh");
        let mut c = self.ns.command("bash");
        c.arg(script)
            .env_clear()
            .env(
                "PATH",
                format!(
                    "{}:/usr/sbin:/usr/bin:/sbin:/bin",
                    self.tmp.join("bin").display()
                ),
            )
            .env("PYTHONPATH", self.tmp.join("site"))
            .env("NCCLENV_DIST", self.tmp.join("dist"))
            .env("OUT", &out)
            .env("NCCLENV_CUDA_LIB", fakes().join("libcuda.so.1"))
            .env("NCCLENV_CHECK_MIB", "1")
            .env("NCCLENV_SHM_MIN", "0")
            .env("FAKE_NCCL_GPUS", gpus.to_string())
            .env("FAKE_NCCL_CHECK_IFNAME", "1")
            .env("FAKE_NCCL_ADDR", ADDR)
            .env("FAKE_NCCL_DIR", self.tmp.join("xchg"));
        for (k, v) in vars {
            c.env(k, v);
        }
        let t = Instant::now();
        let o = exe::output(&mut c).expect("run gpu-check.sh");
        (o, t.elapsed(), out)
    }
}

fn ready() -> bool {
    common::require_root()
        && common::needs::program("python3", &["--version"], "apt-get install python3")
        && common::needs::program("cc", &["--version"], "apt-get install gcc")
}

/// The verdict block: everything from the `====` line on.
fn verdict(o: &Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout);
    match out.find("================ ncclenv GPU check") {
        Some(at) => out[at..].to_string(),
        None => panic!(
            "no verdict block:\n{out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        ),
    }
}

/// The verdict line of `step` (`one-rank:   PASSED: …`).
fn line<'a>(v: &'a str, step: &str) -> &'a str {
    v.lines()
        .find(|l| l.starts_with(&format!("{step}:")))
        .unwrap_or_else(|| panic!("no {step} line:\n{v}"))
}

#[test]
fn one_gpu_passes_says_which_nccl_and_that_two_ranks_need_two_gpus() {
    if !ready() {
        return;
    }
    let m = Machine::new(1);
    let (o, took, out) = m.run(1, &[]);
    let v = verdict(&o);
    assert_eq!(o.status.code(), Some(0), "{v}");
    assert!(v.contains("VERDICT: PASSED"), "{v}");
    assert!(took < Duration::from_secs(120), "{took:?}");
    let nccl = m.tmp.join("site/nvidia/nccl/lib/libnccl.so.2");
    let l = line(&v, "NCCL");
    assert!(
        l.contains(&*nccl.to_string_lossy())
            && l.contains("the nvidia-nccl wheel")
            && l.contains("nvidia-nccl-cu13 2.27.7"),
        "{v}"
    );
    assert!(
        line(&v, "machine").contains("1 GPU(s): GPU 0: NVIDIA H200"),
        "{v}"
    );
    assert!(
        line(&v, "bootstrap").contains("PASSED: bootstrap check passed"),
        "{v}"
    );
    let one = line(&v, "one-rank");
    assert!(
        one.contains("PASSED: 1 rank(s), 262144 float32 each verified (0 mismatches)"),
        "{v}"
    );
    let raw = line(&v, "repair-raw");
    assert!(
        raw.contains("FAILS-AS-EXPECTED") && raw.contains("no socket interface found"),
        "{v}"
    );
    assert!(
        line(&v, "repair").contains("PASSED: NCCL_SOCKET_IFNAME=ncclenv-none0 replaced by eth0"),
        "{v}"
    );
    let two = line(&v, "two-rank");
    assert!(
        two.contains("NEEDS-2-GPUS: a 2-rank allreduce needs 2 GPUs and 1 is visible"),
        "{v}"
    );
    for f in [
        "gpu-check.log",
        "nvidia-smi.txt",
        "nccl-found.txt",
        "doctor.txt",
        "bootstrap.json",
        "allreduce-1.json",
        "repair-raw.jsonl",
        "repair.err",
        "allreduce-2.json",
    ] {
        assert!(out.join(f).is_file(), "{f} missing in $OUT");
    }
    let log = std::fs::read_to_string(out.join("gpu-check.log")).expect("log");
    assert!(log.ends_with("VERDICT: PASSED\n"), "{log}");
}

#[test]
fn two_gpus_run_the_two_rank_allreduce_with_its_bandwidth() {
    if !ready() {
        return;
    }
    let m = Machine::new(2);
    let (o, _, _) = m.run(2, &[]);
    let v = verdict(&o);
    assert_eq!(o.status.code(), Some(0), "{v}");
    let two = line(&v, "two-rank");
    assert!(
        two.contains("PASSED: 2 ranks, 262144 float32 each verified") && two.contains("busbw"),
        "{v}"
    );
}

#[test]
fn no_gpu_or_no_time_or_no_binaries_is_a_failed_verdict() {
    if !ready() {
        return;
    }
    // nvidia-smi lists one GPU, CUDA sees none: the allreduce steps fail, saying why.
    let m = Machine::new(1);
    let (o, _, _) = m.run(0, &[]);
    let v = verdict(&o);
    assert_eq!(o.status.code(), Some(1), "{v}");
    assert!(v.contains("VERDICT: FAILED"), "{v}");
    assert!(
        line(&v, "one-rank").contains("FAILED: no allreduce ran") && v.contains("no GPU visible"),
        "{v}"
    );
    // The budget bounds the whole run: with 3 s nothing is started after the first few steps.
    let (o, took, _) = m.run(1, &[("NCCLENV_GPU_CHECK_BUDGET", "3")]);
    let v = verdict(&o);
    assert_eq!(o.status.code(), Some(1), "{v}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("budget is spent"),
        "{v}"
    );
    // Without the binaries it says how to make them, and builds nothing.
    std::fs::remove_file(m.tmp.join("dist/ncclenv-check")).expect("rm");
    let (o, _, _) = m.run(1, &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("run scripts/build.sh on the build machine")
            && out.contains("VERDICT: FAILED"),
        "{out}"
    );
}

#[test]
fn with_the_real_nccl_the_inherited_ifname_fails_as_the_script_expects() {
    // The step the fake only imitates, with the real libnccl of each wheel (and the real libcudart 13, no
    // GPU): NCCL alone refuses the inherited NCCL_SOCKET_IFNAME, the bootstrap check passes, and the
    // allreduce steps say that no GPU is visible.
    if !ready() {
        return;
    }
    let Some(wheels) = common::needs::nccl_wheels() else {
        return;
    };
    let Some(sets) = common::needs::cuda_sets() else {
        return;
    };
    let Some(cudart) = sets.last().map(|s| s.cudart.clone()) else {
        return;
    };
    let m = Machine::new(0);
    for w in wheels {
        let lib = w.lib.to_string_lossy().into_owned();
        let cuda = cudart.to_string_lossy().into_owned();
        let (o, _, _) = m.run(
            0,
            &[("NCCLENV_NCCL_LIB", &lib), ("NCCLENV_CUDA_LIB", &cuda)],
        );
        let v = verdict(&o);
        assert_eq!(o.status.code(), Some(1), "{v}");
        assert!(
            line(&v, "NCCL").contains("NCCLENV_NCCL_LIB, as given"),
            "{v}"
        );
        assert!(
            line(&v, "bootstrap").contains("PASSED"),
            "{}: {v}",
            w.version
        );
        let raw = line(&v, "repair-raw");
        assert!(
            raw.contains("FAILS-AS-EXPECTED: ncclGetUniqueId returned")
                && raw.contains("no socket interface found"),
            "{}: {v}",
            w.version
        );
        assert!(
            line(&v, "one-rank").contains("no GPU visible (cudaGetDeviceCount"),
            "{}: {v}",
            w.version
        );
    }
}
