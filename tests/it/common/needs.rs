//! What a test needs from the machine, and the one rule for when it is missing: outside CI the test prints
//! `SKIP <why>` on stderr and returns early (it passes); under CI (`CI` set to a truthy value, [`ci`]) it
//! fails with the same reason, since nothing may skip there (scripts/test.sh installs everything).
//!
//! ```ignore
//! if !common::require_root() { return; }                       // root and `ip netns`
//! let Some(wheels) = common::needs::nccl_wheels() else { return };
//! if !common::needs::docker() { return; }
//! ```
//!
//! Every check here goes through [`skip`]; a module that needs something else (a file only a release build
//! makes, say) calls [`skip`] with its reason.

use std::path::{Path, PathBuf};
use std::process::Command;

/// True when the suite runs under CI: `CI` is set to one of the usual truthy values (`1`, `true`, `yes`,
/// `on`, any case), as CI services set it. Under CI no test may skip: what it needs is missing is a failure.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| truthy(&v))
}

/// `1`, `true`, `yes`, `on` in any case, surrounding spaces ignored: what CI services put in `CI`.
pub fn truthy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

/// A test cannot run here because `why`: prints `SKIP <why>` and returns false, so the caller returns early;
/// under CI ([`ci`]) it panics instead, since nothing may skip there.
pub fn skip(why: &str) -> bool {
    if ci() {
        panic!("cannot skip under CI: {why}");
    }
    eprintln!("SKIP {why}");
    false
}

/// [`skip`], as `None` for the callers that return an `Option`.
pub fn missing<T>(why: &str) -> Option<T> {
    skip(why);
    None
}

/// True when the effective user is root.
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the effective user.
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// True when running as root (mknod, mounts, namespaces); otherwise [`skip`]s: `what` says what the test
/// does with it.
pub fn root(what: &str) -> bool {
    is_root() || skip(&format!("{what}: needs root"))
}

/// True when the tests can build network namespaces: running as root and `ip netns list` works. Otherwise
/// [`skip`]s with the reason.
pub fn require_root() -> bool {
    let why = if !is_root() {
        Some("not running as root".to_string())
    } else {
        match Command::new("ip").args(["netns", "list"]).output() {
            Ok(o) if o.status.success() => None,
            Ok(o) => Some(format!(
                "`ip netns list` failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => Some(format!("cannot run `ip`: {e}")),
        }
    };
    match why {
        None => true,
        Some(why) => skip(&format!("a network-namespace test: {why}")),
    }
}

/// True when `program ARGS` runs and exits 0 (e.g. `("nft", &["--version"])`); otherwise [`skip`]s, naming
/// `hint` (how to install it).
pub fn program(program: &str, args: &[&str], hint: &str) -> bool {
    match Command::new(program).args(args).output() {
        Ok(o) if o.status.success() => true,
        Ok(o) => skip(&format!(
            "`{program} {}` failed ({hint}): {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => skip(&format!("cannot run `{program}` ({hint}): {e}")),
    }
}

/// True when the Docker engine answers (`docker info`) and `/bin/busybox` (busybox-static, the test images'
/// shell) exists; otherwise [`skip`]s.
pub fn docker() -> bool {
    match Command::new("docker")
        .args(["info", "--format", "{{.ServerVersion}}"])
        .output()
    {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            return skip(&format!(
                "`docker info` failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ))
        }
        Err(e) => return skip(&format!("no docker command: {e}")),
    }
    Path::new("/bin/busybox").exists() || skip("no /bin/busybox (apt-get install busybox-static)")
}

/// One installed `nvidia-nccl-cu12` wheel (scripts/install-nccl-wheels.sh).
#[derive(Clone, Debug)]
pub struct NcclWheel {
    /// The wheel's version, e.g. `2.21.5`.
    pub version: String,
    /// Its folder, `<root>/nccl-<version>` (a `pip install --target`: `nvidia/nccl/lib` and its dist-info).
    pub dir: PathBuf,
    /// `<dir>/nvidia/nccl/lib/libnccl.so.2`.
    pub lib: PathBuf,
}

/// Where the wheels are installed: `NCCLENV_TEST_NCCL_ROOT`, default `/opt/ncclenv`.
pub fn nccl_root() -> PathBuf {
    std::env::var_os("NCCLENV_TEST_NCCL_ROOT")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/ncclenv"))
}

/// Every installed wheel, oldest version first (folders `nccl-<version>` with a `libnccl.so.2`; an
/// install in progress, `*.partial.*`, is not one). `None` after [`skip`] when there is none.
pub fn nccl_wheels() -> Option<Vec<NcclWheel>> {
    let root = nccl_root();
    let mut v: Vec<NcclWheel> = std::fs::read_dir(&root)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().to_string();
                    let version = name.strip_prefix("nccl-")?.to_string();
                    let lib = e.path().join("nvidia/nccl/lib/libnccl.so.2");
                    (!name.contains(".partial") && lib.is_file()).then(|| NcclWheel {
                        version,
                        dir: e.path(),
                        lib,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort_by_key(|w| {
        (
            ncclenv::nccl_log::version_code(&w.version),
            w.version.clone(),
        )
    });
    if v.is_empty() {
        return missing(&format!(
            "no NCCL wheel under {} (run scripts/install-nccl-wheels.sh)",
            root.display()
        ));
    }
    Some(v)
}

/// The installed wheel of NCCL `version`, or `None` after [`skip`].
pub fn nccl_wheel(version: &str) -> Option<NcclWheel> {
    let dir = nccl_root().join(format!("nccl-{version}"));
    let lib = dir.join("nvidia/nccl/lib/libnccl.so.2");
    if lib.is_file() {
        return Some(NcclWheel {
            version: version.to_string(),
            dir,
            lib,
        });
    }
    missing(&format!(
        "the NCCL {version} wheel is not installed in {} (run scripts/install-nccl-wheels.sh)",
        dir.display()
    ))
}

/// The python of the PaddlePaddle `version` CPU venv (scripts/install-paddle.sh, under
/// `NCCLENV_TEST_PADDLE_ROOT`, default `/opt/ncclenv`), or `None` after [`skip`].
pub fn paddle(version: &str) -> Option<PathBuf> {
    let root = std::env::var("NCCLENV_TEST_PADDLE_ROOT")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "/opt/ncclenv".into());
    let venv = Path::new(&root).join(format!("paddle-{version}"));
    let python = venv.join("bin/python");
    if venv.join(".ncclenv-installed").is_file() && python.is_file() {
        return Some(python);
    }
    missing(&format!(
        "PaddlePaddle {version} is not installed in {} (run scripts/install-paddle.sh)",
        venv.display()
    ))
}

/// The `bin` folder of the DeepSpeed `version` venv (with PyTorch; scripts/install-deepspeed.sh, under
/// `NCCLENV_TEST_DEEPSPEED_ROOT`, default `/opt/ncclenv`), or `None` after [`skip`].
pub fn deepspeed(version: &str) -> Option<PathBuf> {
    let root = std::env::var("NCCLENV_TEST_DEEPSPEED_ROOT")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "/opt/ncclenv".into());
    let venv = Path::new(&root).join(format!("deepspeed-{version}"));
    if venv.join(".ncclenv-installed").is_file() && venv.join("bin/deepspeed").is_file() {
        return Some(venv.join("bin"));
    }
    missing(&format!(
        "DeepSpeed {version} is not installed in {} (run scripts/install-deepspeed.sh)",
        venv.display()
    ))
}

/// `path`, a file a build outside `cargo test` makes (the release musl and arm64 builds of scripts/test.sh),
/// or `None` after [`skip`] naming `how` it is built.
pub fn built(path: PathBuf, how: &str) -> Option<PathBuf> {
    if path.is_file() {
        return Some(path);
    }
    missing(&format!("{} is missing: {how}", path.display()))
}

/// One installed set of CUDA headers and runtime (scripts/install-cuda-wheels.sh).
#[derive(Clone, Debug)]
pub struct CudaSet {
    /// The CUDA version of the set, e.g. `12.9`.
    pub version: String,
    /// `<root>/cuda-<version>/include`: `cuda.h`, `cuda_runtime_api.h` and what they include.
    pub include: PathBuf,
    /// `<root>/cuda-<version>/lib/libcudart.so.<major>`, the runtime of the same wheel.
    pub cudart: PathBuf,
}

/// Every installed CUDA set under [`nccl_root`] (folders `cuda-<version>` with the marker
/// `.ncclenv-installed` that scripts/install-cuda-wheels.sh writes last), oldest first; `None` after
/// [`skip`] when there is none.
pub fn cuda_sets() -> Option<Vec<CudaSet>> {
    let root = nccl_root();
    let mut v: Vec<CudaSet> = std::fs::read_dir(&root)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().to_string();
                    let version = name.strip_prefix("cuda-")?.to_string();
                    let major = version.split('.').next()?.to_string();
                    let set = CudaSet {
                        include: e.path().join("include"),
                        cudart: e.path().join(format!("lib/libcudart.so.{major}")),
                        version,
                    };
                    let ok = !name.contains(".partial")
                        && e.path().join(".ncclenv-installed").is_file()
                        && set.include.join("cuda.h").is_file()
                        && set.cudart.is_file();
                    ok.then_some(set)
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort_by_key(|s| {
        let n: Vec<u32> = s
            .version
            .split('.')
            .filter_map(|x| x.parse().ok())
            .collect();
        (n, s.version.clone())
    });
    if v.is_empty() {
        return missing(&format!(
            "no CUDA header set under {} (run scripts/install-cuda-wheels.sh)",
            root.display()
        ));
    }
    Some(v)
}
