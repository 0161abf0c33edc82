//! Probe: the libnccl files the command could load, and their versions.
//!
//! Several NCCLs in one image (the system's, a pip `nvidia-nccl-cu12` wheel, torch's or Paddle's bundled copy)
//! are a classic source of "works here, fails there": which one is loaded depends on `LD_LIBRARY_PATH`, the
//! loader cache and the framework's own `dlopen`. This probe lists them all, cheaply: only `read_dir` of a
//! fixed set of directories and one read of `/etc/ld.so.cache` (no `ldconfig -p`, no process spawned, no
//! library opened).

use crate::snapshot::{NcclInstall, NetPlugin};
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
    let mut finder = Finder::default();
    if let Some(lp) = env.get("LD_LIBRARY_PATH") {
        for d in lp.split(':').filter(|d| !d.is_empty()) {
            finder.scan_dir(Path::new(d), "LD_LIBRARY_PATH", None);
        }
    }
    if let Ok(bytes) = super::read::read_file(Path::new(LD_SO_CACHE), super::read::LD_CACHE_MAX) {
        for p in ld_cache_paths(&bytes) {
            finder.add(&p, "ld.so.cache", None);
        }
    }
    for d in SYSTEM_LIB_DIRS {
        for dir in expand(d, env) {
            finder.scan_dir(&dir, "system library directory", None);
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
        finder.scan_dir(
            &site.join("nvidia/nccl/lib"),
            &format!("{label} (nvidia-nccl wheel)"),
            wheel.as_deref(),
        );
        finder.scan_dir(
            &site.join("torch/lib"),
            &format!("{label} (torch bundled)"),
            None,
        );
        finder.scan_dir(
            &site.join("paddle/libs"),
            &format!("{label} (paddle bundled)"),
            None,
        );
    }
    finder.out
}

/// `source` of the installation named by `NCCLENV_NCCL_LIB` / `--nccl-lib` (see [`explicit_install`]).
pub const EXPLICIT_SOURCE: &str = crate::snapshot::EXPLICIT_NCCL_SOURCE;

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

/// Folders where HPC-X puts NCCL's RDMA/SHARP net plugin (`libnccl-net.so`), besides `$HPCX_DIR` and
/// `$HPCX_NCCL_RDMA_SHARP_PLUGIN_DIR`. A library there loads only when the loader path names the folder.
pub const HPCX_PLUGIN_DIRS: &[&str] = &[
    "/opt/hpcx/nccl_rdma_sharp_plugin/lib",
    "/opt/mellanox/hpcx/nccl_rdma_sharp_plugin/lib",
    "/usr/local/hpcx/nccl_rdma_sharp_plugin/lib",
];

/// The loader's default directories (after `LD_LIBRARY_PATH` and `/etc/ld.so.cache`), in its order.
pub const LOADER_DEFAULT_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

/// The library names NCCL `dlopen`s for its external net plugin, in order, given the `NCCL_NET_PLUGIN` value
/// NCCL sees:
///
/// - unset or empty: `libnccl-net.so` (`openNetPluginLib`, src/net.cc 2.21.5; `initPluginLibsOnceFunc`,
///   src/plugin/net.cc 2.30.7);
/// - `none` (any case): nothing; 2.30.7 says so, 2.21.5 finds no library of that name;
/// - otherwise, for each comma-separated name (2.30.7 takes a list; 2.21.5 one name): the name as written,
///   then `libnccl-net-NAME.so` (2.30.7 `openPluginLib` in src/plugin/plugin_open.cc skips the second form
///   for a path or a `lib….so` name).
pub fn net_plugin_names(net_plugin: Option<&str>) -> Vec<String> {
    match net_plugin {
        None | Some("") => vec!["libnccl-net.so".into()],
        Some(v) if v.eq_ignore_ascii_case("none") => Vec::new(),
        Some(v) => {
            let mut out = Vec::new();
            for name in v.split(',').filter(|n| !n.is_empty()) {
                out.push(name.to_string());
                let lib_so = name.starts_with("lib") && name.ends_with(".so");
                if !name.contains('/') && !lib_so {
                    out.push(format!("libnccl-net-{name}.so"));
                }
            }
            out
        }
    }
}

/// The external net plugins NCCL could load. `net_plugin` is the `NCCL_NET_PLUGIN` value NCCL sees (the
/// environment's, else the config files').
///
/// The one that loads is resolved as the loader resolves NCCL's `dlopen(name)` ([`net_plugin_names`] in
/// order): a name with `/` is a path; otherwise the directories of `LD_LIBRARY_PATH`, the paths in
/// `/etc/ld.so.cache`, then [`LOADER_DEFAULT_DIRS`] (libnccl's own RUNPATH is not known and not searched).
/// Only `stat`s and one read of the cache: cheap enough for the start path where RDMA devices exist.
///
/// With `list_all` (doctor) every `libnccl-net*.so*` in those directories and in the HPC-X folders
/// ([`HPCX_PLUGIN_DIRS`], `$HPCX_DIR/nccl_rdma_sharp_plugin/lib`, `$HPCX_NCCL_RDMA_SHARP_PLUGIN_DIR/lib`) is
/// listed too, with `loads: false`. Never fails: unreadable places are skipped.
pub fn find_net_plugins(
    env: &BTreeMap<String, String>,
    net_plugin: Option<&str>,
    list_all: bool,
) -> Vec<NetPlugin> {
    let ld_dirs: Vec<PathBuf> = env
        .get("LD_LIBRARY_PATH")
        .map(|lp| {
            lp.split(':')
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .collect()
        })
        .unwrap_or_default();
    let cache: Vec<PathBuf> = fs::read(LD_SO_CACHE)
        .map(|b| cache_paths_where(&b, is_net_plugin_name))
        .unwrap_or_default();
    let mut found = PluginList::default();
    'names: for name in net_plugin_names(net_plugin) {
        if name.contains('/') {
            if Path::new(&name).is_file() {
                found.add(Path::new(&name), "NCCL_NET_PLUGIN", true);
                break;
            }
            continue;
        }
        for d in &ld_dirs {
            let p = d.join(&name);
            if p.is_file() {
                found.add(&p, "LD_LIBRARY_PATH", true);
                break 'names;
            }
        }
        if let Some(p) = cache
            .iter()
            .find(|p| p.file_name().is_some_and(|n| n == name.as_str()) && p.is_file())
        {
            found.add(p, "ld.so.cache", true);
            break;
        }
        for d in LOADER_DEFAULT_DIRS {
            let p = Path::new(d).join(&name);
            if p.is_file() {
                found.add(&p, "system library directory", true);
                break 'names;
            }
        }
    }
    if !list_all {
        return found.out;
    }
    for d in &ld_dirs {
        found.scan(d, "LD_LIBRARY_PATH");
    }
    for p in &cache {
        if p.is_file() {
            found.add(p, "ld.so.cache", false);
        }
    }
    for d in LOADER_DEFAULT_DIRS {
        found.scan(Path::new(d), "system library directory");
    }
    let mut hpcx: Vec<PathBuf> = HPCX_PLUGIN_DIRS.iter().map(PathBuf::from).collect();
    if let Some(h) = env.get("HPCX_DIR").filter(|v| !v.is_empty()) {
        hpcx.push(Path::new(h).join("nccl_rdma_sharp_plugin/lib"));
    }
    if let Some(h) = env
        .get("HPCX_NCCL_RDMA_SHARP_PLUGIN_DIR")
        .filter(|v| !v.is_empty())
    {
        hpcx.push(Path::new(h).join("lib"));
    }
    for d in &hpcx {
        found.scan(d, "HPC-X folder");
    }
    found.out
}

/// Net plugins found so far, de-duplicated by canonical path (the first finding wins).
#[derive(Default)]
struct PluginList {
    seen: BTreeSet<PathBuf>,
    out: Vec<NetPlugin>,
}

impl PluginList {
    fn add(&mut self, path: &Path, source: &str, loads: bool) {
        let key = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if self.seen.insert(key) {
            self.out.push(NetPlugin {
                path: path.display().to_string(),
                source: source.to_string(),
                loads,
            });
        }
    }

    /// Every `libnccl-net*.so*` file in `dir`, by name.
    fn scan(&mut self, dir: &Path, source: &str) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        let mut names: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| is_net_plugin_name(&e.file_name().to_string_lossy()))
            .map(|e| e.path())
            .collect();
        names.sort_unstable();
        for p in names {
            if p.is_file() {
                self.add(&p, source, false);
            }
        }
    }
}

/// `libnccl-net.so`, `libnccl-net-NAME.so`, and their versioned forms (`libnccl-net.so.0`).
fn is_net_plugin_name(name: &str) -> bool {
    name.starts_with("libnccl-net") && (name.ends_with(".so") || name.contains(".so."))
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
        names.sort_unstable_by_key(|p| {
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
    cache_paths_where(bytes, is_libnccl_name)
}

/// Absolute paths in a loader cache's string table whose file name satisfies `want`.
fn cache_paths_where(bytes: &[u8], want: fn(&str) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for s in bytes.split(|b| *b == 0) {
        if s.first() != Some(&b'/') {
            continue;
        }
        let Ok(s) = std::str::from_utf8(s) else {
            continue;
        };
        let name = s.rsplit('/').next().unwrap_or("");
        if want(name) {
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
    v.sort_unstable();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::distinct_versions;

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
    fn plugin_names_as_nccl_tries_them() {
        assert_eq!(net_plugin_names(None), vec!["libnccl-net.so"]);
        assert_eq!(net_plugin_names(Some("")), vec!["libnccl-net.so"]);
        assert!(net_plugin_names(Some("none")).is_empty());
        assert!(net_plugin_names(Some("NONE")).is_empty());
        assert_eq!(
            net_plugin_names(Some("ofi")),
            vec!["ofi", "libnccl-net-ofi.so"]
        );
        assert_eq!(
            net_plugin_names(Some("/opt/x/libnccl-net.so,libnccl-net-aws.so")),
            vec!["/opt/x/libnccl-net.so", "libnccl-net-aws.so"]
        );
        assert!(is_net_plugin_name("libnccl-net.so"));
        assert!(is_net_plugin_name("libnccl-net-ofi.so"));
        assert!(is_net_plugin_name("libnccl-net.so.0"));
        assert!(!is_net_plugin_name("libnccl.so.2"));
        assert!(!is_net_plugin_name("libnccl-net.la"));
    }

    #[test]
    fn net_plugin_on_the_loader_path_loads() {
        let root = std::env::temp_dir().join(format!("ncclenv-plugin-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let (a, b) = (root.join("a"), root.join("b"));
        let ok = fs::create_dir_all(&a).is_ok()
            && fs::create_dir_all(&b).is_ok()
            && fs::write(b.join("libnccl-net.so"), b"x").is_ok()
            && fs::write(b.join("libnccl-net-ofi.so"), b"x").is_ok();
        assert!(ok, "fixture under {}", root.display());
        let mut env = BTreeMap::new();
        env.insert(
            "LD_LIBRARY_PATH".to_string(),
            format!("{}:{}", a.display(), b.display()),
        );
        let found = find_net_plugins(&env, None, false);
        let ours: Vec<&NetPlugin> = found
            .iter()
            .filter(|p| p.path.starts_with(&root.display().to_string()))
            .collect();
        assert_eq!(ours.len(), 1, "{found:?}");
        assert!(ours[0].loads && ours[0].path.ends_with("b/libnccl-net.so"));
        assert_eq!(ours[0].source, "LD_LIBRARY_PATH");
        // NCCL_NET_PLUGIN=ofi: libnccl-net-ofi.so; none: nothing loads.
        let found = find_net_plugins(&env, Some("ofi"), false);
        assert!(found
            .iter()
            .any(|p| p.loads && p.path.ends_with("libnccl-net-ofi.so")));
        let found = find_net_plugins(&env, Some("none"), true);
        assert!(found.iter().all(|p| !p.loads), "{found:?}");
        assert_eq!(
            found
                .iter()
                .filter(|p| p.path.starts_with(&root.display().to_string()))
                .count(),
            2,
            "doctor lists both: {found:?}"
        );
        // $HPCX_DIR: listed, not loaded.
        let hpcx = root.join("hpcx/nccl_rdma_sharp_plugin/lib");
        assert!(
            fs::create_dir_all(&hpcx).is_ok()
                && fs::write(hpcx.join("libnccl-net.so"), b"x").is_ok()
        );
        let mut env = BTreeMap::new();
        env.insert(
            "HPCX_DIR".to_string(),
            root.join("hpcx").display().to_string(),
        );
        let found = find_net_plugins(&env, None, true);
        let _ = fs::remove_dir_all(&root);
        let h: Vec<&NetPlugin> = found
            .iter()
            .filter(|p| p.source == "HPC-X folder")
            .collect();
        assert!(
            h.iter().any(|p| !p.loads && p.path.contains("/hpcx/")),
            "{found:?}"
        );
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
