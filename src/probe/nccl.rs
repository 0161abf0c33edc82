//! Probe: the libnccl files the command could load, and their versions.
//!
//! Several NCCLs in one image (the system's, a pip `nvidia-nccl-cu12` wheel, torch's or Paddle's bundled copy)
//! are a classic source of "works here, fails there": which one is loaded depends on `LD_LIBRARY_PATH`, the
//! loader cache and the framework's own `dlopen`. This probe lists them all, cheaply: only `read_dir` of a
//! fixed set of directories and one read of `/etc/ld.so.cache` (no `ldconfig -p`, no process spawned, no
//! library opened).

use crate::snapshot::NcclInstall;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The loader cache read for `libnccl.so*` paths.
pub const LD_SO_CACHE: &str = "/etc/ld.so.cache";

/// System library directories scanned (besides the loader cache); entries ending in `*` are globbed on their
/// last component.
pub const SYSTEM_LIB_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
    "/usr/local/cuda*/lib64",
    "/usr/local/cuda*/targets/x86_64-linux/lib",
    "/usr/local/cuda*/targets/sbsa-linux/lib",
    "/usr/local/nccl*/lib",
    "/opt/nccl*/lib",
];

/// Python library roots scanned for `python3*/{site,dist}-packages` (`~` = `HOME` from `env`).
pub const PYTHON_LIB_ROOTS: &[&str] = &[
    "/usr/lib",
    "/usr/local/lib",
    "/opt/conda/lib",
    "~/.local/lib",
];

/// Every `libnccl.so*` the command could load, de-duplicated by canonical path (symlinks `libnccl.so` →
/// `libnccl.so.2` → `libnccl.so.2.21.5` are one install), in the order the loader would prefer them:
///
/// 1. directories of `LD_LIBRARY_PATH` (`env`);
/// 2. `/etc/ld.so.cache` (absolute paths of `libnccl.so*` in its string table) and [`SYSTEM_LIB_DIRS`];
/// 3. per Python path (`PYTHONPATH` entries; `VIRTUAL_ENV`, `CONDA_PREFIX` and [`PYTHON_LIB_ROOTS`]
///    `python3*/{site,dist}-packages`): `nvidia/nccl/lib` (the `nvidia-nccl-cu*` wheel), `torch/lib`,
///    `paddle/libs`.
///
/// The version comes from the canonical file name (`libnccl.so.2.21.5`), else from a
/// `nvidia_nccl_cu*-X.Y.Z.dist-info` directory in the same site-packages. Never fails: unreadable
/// directories are skipped.
pub fn find_installs(env: &BTreeMap<String, String>) -> Vec<NcclInstall> {
    let mut f = Finder::default();
    if let Some(lp) = env.get("LD_LIBRARY_PATH") {
        for d in lp.split(':').filter(|d| !d.is_empty()) {
            f.scan_dir(Path::new(d), "LD_LIBRARY_PATH", None);
        }
    }
    if let Ok(bytes) = super::read::read_file(Path::new(LD_SO_CACHE), super::read::LD_CACHE_MAX) {
        for p in ld_cache_paths(&bytes) {
            f.add(&p, "ld.so.cache", None);
        }
    }
    for d in SYSTEM_LIB_DIRS {
        for dir in expand(d, env) {
            f.scan_dir(&dir, "system library directory", None);
        }
    }
    let mut sites: Vec<(PathBuf, &str)> = Vec::new();
    if let Some(pp) = env.get("PYTHONPATH") {
        sites.extend(
            pp.split(':')
                .filter(|d| !d.is_empty())
                .map(|d| (PathBuf::from(d), "PYTHONPATH")),
        );
    }
    for (var, label) in [
        ("VIRTUAL_ENV", "VIRTUAL_ENV"),
        ("CONDA_PREFIX", "CONDA_PREFIX"),
    ] {
        if let Some(root) = env.get(var).filter(|v| !v.is_empty()) {
            for py in glob_prefix(&Path::new(root).join("lib"), "python3") {
                sites.push((py.join("site-packages"), label));
            }
        }
    }
    for root in PYTHON_LIB_ROOTS {
        for lib in expand(root, env) {
            for py in glob_prefix(&lib, "python3") {
                sites.push((py.join("site-packages"), "site-packages"));
                sites.push((py.join("dist-packages"), "dist-packages"));
            }
        }
    }
    for (site, label) in sites {
        if !site.is_dir() {
            continue;
        }
        let wheel = wheel_version(&site);
        f.scan_dir(
            &site.join("nvidia/nccl/lib"),
            &format!("{label} (nvidia-nccl wheel)"),
            wheel.as_deref(),
        );
        f.scan_dir(
            &site.join("torch/lib"),
            &format!("{label} (torch bundled)"),
            None,
        );
        f.scan_dir(
            &site.join("paddle/libs"),
            &format!("{label} (paddle bundled)"),
            None,
        );
    }
    f.out
}

/// `source` of the installation named by `NCCLENV_NCCL_LIB` / `--nccl-lib` (see [`explicit_install`]).
pub const EXPLICIT_SOURCE: &str = "NCCLENV_NCCL_LIB";

/// The library named by `NCCLENV_NCCL_LIB` / `--nccl-lib`, as an installation (source [`EXPLICIT_SOURCE`]):
/// the check loads it and nothing else, so it is the NCCL the model follows. Its version comes from the
/// canonical file name (`libnccl.so.2.21.5`), else from the `nvidia_nccl_cu*-X.Y.Z.dist-info` folder of the
/// wheel it belongs to (`<site>/nvidia/nccl/lib/libnccl.so.2`); `None` when neither says. Never fails: a
/// missing file is listed with no version.
pub fn explicit_install(path: &Path) -> NcclInstall {
    let canon = fs::canonicalize(path).ok();
    let version = canon
        .as_deref()
        .and_then(Path::file_name)
        .and_then(|n| version_from_name(&n.to_string_lossy()))
        .or_else(|| {
            path.file_name()
                .and_then(|n| version_from_name(&n.to_string_lossy()))
        })
        .or_else(|| wheel_version_of_lib(canon.as_deref().unwrap_or(path)));
    NcclInstall {
        path: path.display().to_string(),
        version,
        source: EXPLICIT_SOURCE.to_string(),
    }
}

/// The installations the model of NCCL follows: with an explicit library ([`explicit_install`]) that one
/// first; then, when `all` is set (or there is no explicit library), every other one [`find_installs`]
/// finds.
pub fn installs(
    explicit: Option<&Path>,
    env: &BTreeMap<String, String>,
    all: bool,
) -> Vec<NcclInstall> {
    let mut out: Vec<NcclInstall> = explicit.map(explicit_install).into_iter().collect();
    if all || out.is_empty() {
        let first = explicit.and_then(|p| fs::canonicalize(p).ok());
        out.extend(
            find_installs(env)
                .into_iter()
                .filter(|i| first.is_none() || fs::canonicalize(&i.path).ok() != first),
        );
    }
    out
}

/// The version of the `nvidia-nccl-cu*` wheel a library at `<site>/nvidia/nccl/lib/FILE` belongs to, from
/// `<site>/nvidia_nccl_cu*-X.Y.Z.dist-info`.
fn wheel_version_of_lib(lib: &Path) -> Option<String> {
    let dir = lib.parent()?;
    if !dir.ends_with("nvidia/nccl/lib") {
        return None;
    }
    wheel_version(dir.parent()?.parent()?.parent()?)
}

/// The distinct versions among `installs` (sorted); more than one means the loaded NCCL depends on paths.
pub fn distinct_versions(installs: &[NcclInstall]) -> Vec<String> {
    installs
        .iter()
        .filter_map(|i| i.version.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

#[derive(Default)]
struct Finder {
    seen: BTreeSet<PathBuf>,
    out: Vec<NcclInstall>,
}

impl Finder {
    fn scan_dir(&mut self, dir: &Path, source: &str, fallback_version: Option<&str>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        let mut names: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| is_libnccl_name(&e.file_name().to_string_lossy()))
            .map(|e| e.path())
            .collect();
        // `libnccl.so.2` (the SONAME the loader asks for) first, then shortest names.
        names.sort_by_key(|p| {
            (
                p.file_name().is_none_or(|n| n != "libnccl.so.2"),
                p.as_os_str().len(),
                p.clone(),
            )
        });
        for p in names {
            self.add(&p, source, fallback_version);
        }
    }

    fn add(&mut self, path: &Path, source: &str, fallback_version: Option<&str>) {
        let Ok(canon) = fs::canonicalize(path) else {
            return;
        };
        if !canon.is_file() || !self.seen.insert(canon.clone()) {
            return;
        }
        let version = canon
            .file_name()
            .and_then(|n| version_from_name(&n.to_string_lossy()))
            .or_else(|| {
                path.file_name()
                    .and_then(|n| version_from_name(&n.to_string_lossy()))
            })
            .or_else(|| fallback_version.map(str::to_string))
            .or_else(|| wheel_version_of_lib(&canon));
        self.out.push(NcclInstall {
            path: path.display().to_string(),
            version,
            source: source.to_string(),
        });
    }
}

/// `libnccl.so`, `libnccl.so.2`, `libnccl.so.2.21.5` (not `libnccl-net.so`, `libnccl_static.a`).
fn is_libnccl_name(name: &str) -> bool {
    name == "libnccl.so" || name.starts_with("libnccl.so.")
}

/// `libnccl.so.2.21.5` → `2.21.5`; needs at least major.minor.patch, all numeric.
pub fn version_from_name(name: &str) -> Option<String> {
    let v = name.strip_prefix("libnccl.so.")?;
    let parts: Vec<&str> = v.split('.').collect();
    if parts.len() >= 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    {
        Some(parts[..3].join("."))
    } else {
        None
    }
}

/// The version of an `nvidia_nccl_cu*-X.Y.Z.dist-info` directory in `site`, if any.
fn wheel_version(site: &Path) -> Option<String> {
    let entries = fs::read_dir(site).ok()?;
    let mut best: Option<String> = None;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(v) = dist_info_version(&name) {
            best = Some(v);
        }
    }
    best
}

/// `nvidia_nccl_cu12-2.21.5.dist-info` → `2.21.5`.
pub fn dist_info_version(name: &str) -> Option<String> {
    let rest = name.strip_prefix("nvidia_nccl_cu")?;
    let rest = rest.strip_suffix(".dist-info")?;
    let (_, v) = rest.split_once('-')?;
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.') {
        return None;
    }
    Some(v.to_string())
}

/// Absolute `…/libnccl.so*` paths in a loader cache's string table. The format (glibc `cache_file_new`,
/// optionally after an old `ld.so-1.7.0` header) keeps every path as a NUL-terminated string, so scanning
/// the strings is enough and independent of the header layout.
pub fn ld_cache_paths(bytes: &[u8]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for s in bytes.split(|b| *b == 0) {
        if s.first() != Some(&b'/') {
            continue;
        }
        let Ok(s) = std::str::from_utf8(s) else {
            continue;
        };
        let name = s.rsplit('/').next().unwrap_or("");
        if is_libnccl_name(name) {
            out.push(PathBuf::from(s));
        }
    }
    out
}

/// Expand `~` (from `HOME` in `env`) and a trailing `*` in one path component into existing directories.
fn expand(pattern: &str, env: &BTreeMap<String, String>) -> Vec<PathBuf> {
    let pattern = if let Some(rest) = pattern.strip_prefix("~/") {
        match env.get("HOME").filter(|h| !h.is_empty()) {
            Some(h) => format!("{h}/{rest}"),
            None => return Vec::new(),
        }
    } else {
        pattern.to_string()
    };
    let mut bases = vec![PathBuf::from("/")];
    for comp in pattern.split('/').filter(|c| !c.is_empty()) {
        let mut next = Vec::new();
        for b in &bases {
            if let Some(prefix) = comp.strip_suffix('*') {
                next.extend(glob_prefix(b, prefix));
            } else {
                next.push(b.join(comp));
            }
        }
        bases = next;
    }
    bases.into_iter().filter(|p| p.is_dir()).collect()
}

/// Entries of `dir` whose names start with `prefix`, sorted.
fn glob_prefix(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_versions() {
        assert!(is_libnccl_name("libnccl.so"));
        assert!(is_libnccl_name("libnccl.so.2"));
        assert!(!is_libnccl_name("libnccl-net.so"));
        assert!(!is_libnccl_name("libnccl_static.a"));
        assert_eq!(
            version_from_name("libnccl.so.2.21.5").as_deref(),
            Some("2.21.5")
        );
        assert_eq!(version_from_name("libnccl.so.2"), None);
        assert_eq!(version_from_name("libnccl.so.2.x.1"), None);
        assert_eq!(
            dist_info_version("nvidia_nccl_cu12-2.21.5.dist-info").as_deref(),
            Some("2.21.5")
        );
        assert_eq!(dist_info_version("nvidia_cublas_cu12-12.1.dist-info"), None);
    }

    #[test]
    fn cache_strings() {
        let mut b = b"glibc-ld.so.cache1.1\x00\x00libnccl.so.2\x00/usr/lib/x86_64-linux-gnu/libnccl.so.2\x00".to_vec();
        b.extend_from_slice(b"/usr/lib/libc.so.6\x00/opt/libnccl-net.so\x00");
        assert_eq!(
            ld_cache_paths(&b),
            vec![PathBuf::from("/usr/lib/x86_64-linux-gnu/libnccl.so.2")]
        );
    }

    #[test]
    fn finds_wheel_in_virtualenv_and_dedups_symlinks() {
        let root = std::env::temp_dir().join(format!("ncclenv-nccl-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let site = root.join("venv/lib/python3.11/site-packages");
        let lib = site.join("nvidia/nccl/lib");
        let ld = root.join("ld");
        let ok = fs::create_dir_all(&lib).is_ok()
            && fs::create_dir_all(site.join("nvidia_nccl_cu12-2.21.5.dist-info")).is_ok()
            && fs::create_dir_all(&ld).is_ok()
            && fs::write(lib.join("libnccl.so.2"), b"x").is_ok()
            && fs::write(ld.join("libnccl.so.2.19.3"), b"x").is_ok()
            && std::os::unix::fs::symlink("libnccl.so.2.19.3", ld.join("libnccl.so.2")).is_ok()
            && std::os::unix::fs::symlink("libnccl.so.2", ld.join("libnccl.so")).is_ok();
        assert!(ok, "could not build the fixture under {}", root.display());
        let mut env = BTreeMap::new();
        env.insert(
            "LD_LIBRARY_PATH".to_string(),
            format!("{}::/nonexistent", ld.display()),
        );
        env.insert(
            "VIRTUAL_ENV".to_string(),
            root.join("venv").display().to_string(),
        );
        let found = find_installs(&env);
        let ours: Vec<&NcclInstall> = found
            .iter()
            .filter(|i| i.path.starts_with(&root.display().to_string()))
            .collect();
        // The wheel's library named explicitly, or found through LD_LIBRARY_PATH: the version comes from the
        // wheel's dist-info.
        let e = explicit_install(&lib.join("libnccl.so.2"));
        assert_eq!(
            (e.version.as_deref(), e.source.as_str()),
            (Some("2.21.5"), EXPLICIT_SOURCE)
        );
        let mut lp = BTreeMap::new();
        lp.insert("LD_LIBRARY_PATH".to_string(), lib.display().to_string());
        let via_path = find_installs(&lp);
        assert_eq!(
            via_path[0].version.as_deref(),
            Some("2.21.5"),
            "{via_path:?}"
        );
        let only = installs(Some(&ld.join("libnccl.so")), &env, false);
        assert_eq!(only.len(), 1, "{only:?}");
        assert_eq!(only[0].version.as_deref(), Some("2.19.3"));
        let all = installs(Some(&ld.join("libnccl.so")), &env, true);
        // The explicit one first, and the same file is not listed twice under another name.
        assert_eq!(all[0].source, EXPLICIT_SOURCE);
        let in_ld = all
            .iter()
            .filter(|i| i.path.starts_with(&ld.display().to_string()));
        assert_eq!(in_ld.count(), 1, "{all:?}");
        let _ = fs::remove_dir_all(&root);
        assert_eq!(ours.len(), 2, "{ours:?}");
        assert_eq!(ours[0].source, "LD_LIBRARY_PATH");
        assert_eq!(ours[0].version.as_deref(), Some("2.19.3"));
        assert!(ours[0].path.ends_with("/libnccl.so.2"));
        assert_eq!(ours[1].source, "VIRTUAL_ENV (nvidia-nccl wheel)");
        assert_eq!(ours[1].version.as_deref(), Some("2.21.5"));
        assert!(distinct_versions(&found[..]).len() >= 2);
    }
}
