//! Where libnccl and CUDA are looked for, and loading the first candidate that fits: the loader's own search,
//! the CUDA folders, and the Python packages that ship them (nvidia-nccl-cu12/-cu13, torch, paddle). An
//! explicit `NCCLENV_NCCL_LIB` is the only candidate for NCCL; `NCCLENV_CUDA_LIB` is tried first for CUDA.
//!
//! Wheel layouts (read from the wheels' file lists): `nvidia-nccl-cu12` and `nvidia-nccl-cu13` (2.27.7, 2.28.9,
//! 2.30.7, 2.32.3) both install `nvidia/nccl/lib/libnccl.so.2`; PyTorch builds that bundle NCCL have
//! `torch/lib/libnccl.so.2`, Paddle's `paddle/libs/`; CUDA 12's runtime wheel has
//! `nvidia/cuda_runtime/lib/libcudart.so.12`, CUDA 13's (`nvidia-cuda-runtime` 13.0.96)
//! `nvidia/cu13/lib/libcudart.so.13`.

use crate::ffi;
use libloading::Library;
use std::path::PathBuf;

/// Match `name` against a pattern with `*` wildcards only.
fn wild(pat: &str, name: &str) -> bool {
    let parts: Vec<&str> = pat.split('*').collect();
    if parts.len() == 1 {
        return pat == name;
    }
    let mut rest = name;
    for (i, p) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(p) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.len() >= p.len() && rest.ends_with(p);
        } else {
            match rest.find(p) {
                Some(at) => rest = &rest[at + p.len()..],
                None => return false,
            }
        }
    }
    true
}

/// Expand an absolute path pattern whose components may hold `*`; existing paths only, sorted.
fn glob(pattern: &str) -> Vec<PathBuf> {
    let mut cur = vec![PathBuf::from("/")];
    for comp in pattern.split('/').filter(|c| !c.is_empty()) {
        let mut next = Vec::new();
        for base in &cur {
            if comp.contains('*') {
                if let Ok(rd) = std::fs::read_dir(base) {
                    let mut names: Vec<String> = rd
                        .filter_map(|e| e.ok())
                        .filter_map(|e| e.file_name().into_string().ok())
                        .filter(|n| wild(comp, n))
                        .collect();
                    names.sort();
                    next.extend(names.into_iter().map(|n| base.join(n)));
                }
            } else {
                let p = base.join(comp);
                if p.exists() {
                    next.push(p);
                }
            }
        }
        cur = next;
        if cur.is_empty() {
            break;
        }
    }
    cur
}

/// Python package directories to search: `PYTHONPATH` entries, then site/dist-packages of common prefixes.
fn python_dirs() -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if let Some(pp) = std::env::var_os("PYTHONPATH") {
        for p in std::env::split_paths(&pp) {
            if !p.as_os_str().is_empty() {
                out.push(p.display().to_string());
            }
        }
    }
    let mut prefixes: Vec<String> = Vec::new();
    for v in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Ok(p) = std::env::var(v) {
            if p.starts_with('/') {
                prefixes.push(p);
            }
        }
    }
    if let Ok(h) = std::env::var("HOME") {
        if h.starts_with('/') {
            prefixes.push(format!("{h}/.local"));
            prefixes.push(format!("{h}/.pyenv/versions/*"));
        }
    }
    prefixes.extend(
        [
            "/usr/local",
            "/usr",
            "/opt/conda",
            "/opt/venv",
            "/opt/python/*",
            "/root/.pyenv/versions/*",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    for pre in prefixes {
        for sub in ["site-packages", "dist-packages"] {
            out.push(format!("{pre}/lib/python3*/{sub}"));
        }
    }
    out.push("/usr/lib/python3/dist-packages".to_string());
    // Only folders that exist, each once, so that "places looked" stays readable.
    let mut dirs: Vec<String> = Vec::new();
    for pat in out {
        for d in glob(&pat) {
            let d = d.display().to_string();
            if d != "/" && !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
    dirs
}

/// A library candidate: a name for the loader's search, or a path pattern.
pub enum Cand {
    /// A name the loader searches for (`libnccl.so.2`).
    Loader(String),
    /// An absolute path pattern (`*` in components).
    Pattern(String),
    /// Several patterns reported as one place (`label`) when none exists.
    Any(String, Vec<String>),
}

/// Where libnccl is looked for, in order.
pub fn nccl_candidates() -> Vec<Cand> {
    let mut candidates = Vec::new();
    // An explicit NCCLENV_NCCL_LIB is the only candidate: proving another library than the one the user
    // named would prove nothing about theirs.
    if let Ok(p) = std::env::var("NCCLENV_NCCL_LIB") {
        if !p.is_empty() {
            candidates.push(Cand::Pattern(p));
            return candidates;
        }
    }
    candidates.push(Cand::Loader("libnccl.so.2".into()));
    candidates.push(Cand::Pattern("/usr/local/cuda*/lib64/libnccl.so.2".into()));
    candidates.push(Cand::Pattern(
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2".into(),
    ));
    candidates.push(Cand::Pattern("/usr/lib64/libnccl.so.2".into()));
    for d in python_dirs() {
        candidates.push(Cand::Any(
            format!("{d}/{{nvidia/nccl/lib,paddle/libs,torch/lib}}/libnccl.so.2"),
            vec![
                format!("{d}/nvidia/nccl/lib/libnccl.so.2"),
                format!("{d}/paddle/libs/libnccl.so.2"),
                format!("{d}/torch/lib/libnccl.so.2"),
            ],
        ));
    }
    candidates
}

/// Where the CUDA driver library (then the runtime, newest first) is looked for, in order.
pub fn cuda_candidates() -> Vec<Cand> {
    let mut candidates = Vec::new();
    if let Ok(p) = std::env::var("NCCLENV_CUDA_LIB") {
        if !p.is_empty() {
            candidates.push(Cand::Pattern(p));
        }
    }
    candidates.push(Cand::Loader("libcuda.so.1".into()));
    candidates.push(Cand::Pattern(
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1".into(),
    ));
    candidates.push(Cand::Pattern("/usr/lib64/libcuda.so.1".into()));
    candidates.push(Cand::Pattern("/usr/local/cuda*/compat/libcuda.so.1".into()));
    let dirs = python_dirs();
    for v in ["13", "12", "11.0"] {
        candidates.push(Cand::Loader(format!("libcudart.so.{v}")));
        candidates.push(Cand::Pattern(format!(
            "/usr/local/cuda*/lib64/libcudart.so.{v}"
        )));
        // CUDA 12's runtime wheel (nvidia-cuda-runtime-cu12) has nvidia/cuda_runtime/lib; CUDA 13's
        // (nvidia-cuda-runtime 13.x, which PyTorch's cu130 wheels depend on) puts every toolkit library in
        // nvidia/cu13/lib. (libnccl stays in nvidia/nccl/lib in the nvidia-nccl-cu13 wheels too.)
        let subs: &[&str] = if v == "13" {
            &[
                "nvidia/cu13/lib",
                "nvidia/cuda_runtime/lib",
                "torch/lib",
                "paddle/libs",
            ]
        } else {
            &["nvidia/cuda_runtime/lib", "torch/lib", "paddle/libs"]
        };
        for d in &dirs {
            candidates.push(Cand::Any(
                format!("{d}/{{{}}}/libcudart.so.{v}", subs.join(",")),
                subs.iter()
                    .map(|s| format!("{d}/{s}/libcudart.so.{v}"))
                    .collect(),
            ));
        }
    }
    candidates
}

/// The paths a candidate stands for and the label it is reported under; `Err` with the "not found" line when
/// no file matches its pattern.
fn expand(c: &Cand) -> Result<(Vec<String>, String), String> {
    let found = |pats: &[String]| -> Vec<String> {
        pats.iter()
            .flat_map(|p| glob(p))
            .map(|x| x.display().to_string())
            .collect()
    };
    match c {
        Cand::Loader(n) => Ok((vec![n.clone()], format!("{n} (loader search)"))),
        Cand::Pattern(p) => {
            let paths = found(std::slice::from_ref(p));
            if paths.is_empty() {
                return Err(format!("{p}: not found"));
            }
            Ok((paths, p.clone()))
        }
        Cand::Any(label, pats) => {
            let paths = found(pats);
            if paths.is_empty() {
                return Err(format!("{label}: not found"));
            }
            Ok((paths, label.clone()))
        }
    }
}

/// Load the first candidate that `accept`s: the library and its path; on failure, the places looked (each
/// `place: why not`).
pub fn load_first(
    cands: Vec<Cand>,
    accept: impl Fn(&Library) -> Result<(), String>,
) -> Result<(Library, String), Vec<String>> {
    let mut looked = Vec::new();
    for c in cands {
        let (paths, label) = match expand(&c) {
            Ok(v) => v,
            Err(not_found) => {
                looked.push(not_found);
                continue;
            }
        };
        for path in paths {
            match ffi::open(&path) {
                Ok(lib) => match accept(&lib) {
                    Ok(()) => return Ok((lib, path)),
                    Err(e) => looked.push(format!("{path}: {e}")),
                },
                Err(why) => looked.push(format!("{label}: {why}")),
            }
        }
    }
    Err(looked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_as_a_shell_would() {
        assert!(wild("python3*", "python3.12"));
        assert!(wild("*", "anything"));
        assert!(wild("cuda*", "cuda"));
        assert!(wild("lib*.so.*", "libnccl.so.2"));
        assert!(!wild("lib*.so.*", "libnccl.so"));
        assert!(!wild("python3*", "python2.7"));
        assert!(wild("exact", "exact") && !wild("exact", "exactly"));
    }

    #[test]
    fn a_missing_pattern_is_one_place_looked() {
        let r = load_first(
            vec![Cand::Pattern("/nonexistent-ncclenv/*/libnccl.so.2".into())],
            |_| Ok(()),
        );
        assert_eq!(
            r.err(),
            Some(vec![
                "/nonexistent-ncclenv/*/libnccl.so.2: not found".to_string()
            ])
        );
    }
}
