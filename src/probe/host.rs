//! Probe: `/dev/shm` capacity, the number of GPUs the command will see, and interface speeds.
//!
//! Every function here reads only what it is given (a path, the inherited variables, a devfs or sysfs root)
//! and never panics: problems become `error`/`warning` fields or missing entries.

use crate::snapshot::{GpuInfo, ShmInfo, ShmSegment};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// At most this many `nccl-*` files are recorded (the largest first).
pub const MAX_SEGMENTS_LISTED: usize = 32;

/// Capacity of the filesystem at `path` (normally `/dev/shm`, `Config.shm_path`) by `statvfs(3)`:
/// total bytes (`f_blocks × f_frsize`), bytes free to an unprivileged writer (`f_bavail × f_frsize`) and the
/// read-only mount flag (`ST_RDONLY`). A missing or unreadable path gives `error` and no sizes.
///
/// Also whether this process may create files there (`access(2)` with `W_OK | X_OK`: the command runs as the
/// same user; when it may not, the directory's owner and mode are read for the message), and, only when part
/// of the filesystem is in use (free < total), the `nccl-*` files in it ([`MAX_SEGMENTS_LISTED`] at most):
/// segments a job left behind when it died before unlinking them.
///
/// NCCL's SHM transport (src/transport/shm.cc) creates its segments there (`/dev/shm/nccl-XXXXXX`,
/// `ncclShmOpen`); a full tmpfs makes `ncclCommInitRank` fail with `Error while creating shared memory segment
/// … (size 9637888)`, and so does a directory the job's user cannot write (NVIDIA/nccl#328).
pub fn probe_shm(path: &Path) -> ShmInfo {
    use nix::sys::statvfs::{statvfs, FsFlags};
    let mut info = ShmInfo {
        path: path.display().to_string(),
        ..ShmInfo::default()
    };
    match statvfs(path) {
        // fsblkcnt_t / c_ulong are u64 on 64-bit Linux but not everywhere.
        #[allow(clippy::useless_conversion)]
        Ok(st) => {
            let frsize = u64::from(st.fragment_size());
            info.total_bytes = Some(u64::from(st.blocks()).saturating_mul(frsize));
            info.free_bytes = Some(u64::from(st.blocks_available()).saturating_mul(frsize));
            info.read_only = st.flags().contains(FsFlags::ST_RDONLY);
        }
        Err(e) => info.error = Some(format!("statvfs({}): {e}", path.display())),
    }
    if info.error.is_none() {
        writability(path, &mut info);
        if matches!((info.free_bytes, info.total_bytes), (Some(f), Some(t)) if f < t) {
            info.nccl_segments = nccl_segments(path);
        }
    }
    info
}

/// Fill `writable` and `write_error` for `path`.
fn writability(path: &Path, info: &mut ShmInfo) {
    use nix::unistd::{access, getuid, AccessFlags};
    match access(path, AccessFlags::W_OK | AccessFlags::X_OK) {
        Ok(()) => info.writable = Some(true),
        Err(e) => {
            use std::os::unix::fs::MetadataExt;
            let owner = fs::metadata(path).map_or_else(
                |_| String::new(),
                |m| {
                    format!(
                        "; it is owned by uid {} gid {} with mode {:04o}",
                        m.uid(),
                        m.gid(),
                        m.mode() & 0o7777
                    )
                },
            );
            info.writable = Some(false);
            info.write_error = Some(format!(
                "uid {} cannot create files in {} ({}){owner}",
                getuid(),
                path.display(),
                e.desc()
            ));
        }
    }
}

/// The `nccl-*` files directly in `dir` with the bytes they occupy, largest first, at most
/// [`MAX_SEGMENTS_LISTED`].
fn nccl_segments(dir: &Path) -> Vec<ShmSegment> {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<ShmSegment> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with("nccl-") {
                return None;
            }
            let m = e.metadata().ok().filter(|m| m.is_file())?;
            Some(ShmSegment {
                name,
                bytes: m.blocks().saturating_mul(512),
            })
        })
        .collect();
    out.sort_unstable_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.name.cmp(&b.name)));
    out.truncate(MAX_SEGMENTS_LISTED);
    out
}

/// Where the NVIDIA driver lists its GPUs in procfs (one directory per GPU, named by PCI address).
pub const PROC_NVIDIA_GPUS: &str = "/proc/driver/nvidia/gpus";

/// The number of GPUs the command will see, first rule that applies:
///
/// 1. `CUDA_VISIBLE_DEVICES` set: parsed as the CUDA runtime does ([`parse_cuda_visible`]): a comma list of
///    indices or UUIDs (`GPU-…`, `MIG-…`); the empty string means no GPU; `-1`, an invalid entry, a duplicate
///    or an index beyond the device nodes ends the list there (entries before it count).
/// 2. `NVIDIA_VISIBLE_DEVICES` (NVIDIA container toolkit) set: `none`, `void` or empty → 0; `all` → go on to
///    3. (every CUDA base image sets it: GPUs may be present, their number is not said); otherwise the number
///    of distinct entries of its comma list.
/// 3. `nvidia[0-9]+` device nodes under `devfs` (in a container: the GPUs the toolkit injected).
/// 4. Directories in `/proc/driver/nvidia/gpus`.
///
/// Otherwise the count is unknown (`None`), its source saying what was looked at (with
/// `NVIDIA_VISIBLE_DEVICES=all`: that it is set, GPUs being unknown but not absent). Malformed values give a
/// `warning`, never a panic.
pub fn gpu_count(env: &BTreeMap<String, String>, devfs: &Path) -> GpuInfo {
    gpu_count_with(env, devfs, Path::new(PROC_NVIDIA_GPUS))
}

/// [`gpu_count`] with the procfs directory as a parameter (for tests).
pub fn gpu_count_with(env: &BTreeMap<String, String>, devfs: &Path, proc_gpus: &Path) -> GpuInfo {
    let nodes = count_device_nodes(devfs);
    let mut all = false;
    if let Some(v) = env.get("CUDA_VISIBLE_DEVICES") {
        let parsed = parse_cuda_visible(v, nodes);
        return GpuInfo {
            count: Some(parsed.count),
            source: "CUDA_VISIBLE_DEVICES".into(),
            warning: parsed.warning,
        };
    }
    if let Some(v) = env.get("NVIDIA_VISIBLE_DEVICES") {
        match parse_nvidia_visible(v) {
            NvidiaVisible::All => all = true,
            NvidiaVisible::Count(count, warning) => {
                return GpuInfo {
                    count: Some(count),
                    source: "NVIDIA_VISIBLE_DEVICES".into(),
                    warning,
                }
            }
        }
    }
    if let Some(n) = nodes.filter(|n| *n > 0) {
        return GpuInfo {
            count: Some(n),
            source: format!("{}/nvidia[0-9]+ device nodes", devfs.display()),
            warning: None,
        };
    }
    if let Ok(entries) = fs::read_dir(proc_gpus) {
        let n = entries.flatten().count() as u32;
        if n > 0 {
            return GpuInfo {
                count: Some(n),
                source: proc_gpus.display().to_string(),
                warning: None,
            };
        }
    }
    let source = if all {
        format!(
            "NVIDIA_VISIBLE_DEVICES=all names no number, and no {}/nvidia[0-9]+ device node or driver entry is seen",
            devfs.display()
        )
    } else {
        "no CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES, device node or driver entry".into()
    };
    GpuInfo {
        count: None,
        source,
        warning: None,
    }
}

/// Number of `nvidia[0-9]+` entries directly under `devfs`; `None` when the directory cannot be read.
fn count_device_nodes(devfs: &Path) -> Option<u32> {
    let entries = fs::read_dir(devfs).ok()?;
    let n = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.strip_prefix("nvidia")
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        })
        .count();
    Some(n as u32)
}

/// The result of parsing `CUDA_VISIBLE_DEVICES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaVisible {
    /// GPUs the CUDA runtime will enumerate.
    pub count: u32,
    /// Why the list was cut short, when an entry was malformed (not for `-1`, the usual "hide the rest").
    pub warning: Option<String>,
}

/// Parse `CUDA_VISIBLE_DEVICES` as the CUDA runtime does: comma-separated entries, each a non-negative index
/// or a UUID (`GPU-…`, `MIG-…`, possibly abbreviated); surrounding whitespace of an entry is ignored. The
/// first entry that is not valid (`-1`, an empty entry, a non-number, a duplicate, or an index ≥ `nodes`
/// when the number of device nodes is known and non-zero) ends the list: CUDA enumerates only the entries
/// before it. The empty string means no GPU. Never panics, whatever the input.
pub fn parse_cuda_visible(value: &str, nodes: Option<u32>) -> CudaVisible {
    if value.trim().is_empty() {
        return CudaVisible {
            count: 0,
            warning: None,
        };
    }
    let limit = nodes.filter(|n| *n > 0);
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut count: u32 = 0;
    let entries: Vec<&str> = value.split(',').collect();
    let total = entries.len();
    for (i, raw) in entries.iter().enumerate() {
        let tok = raw.trim();
        let last = i + 1 == total;
        let problem: Option<String> = if tok == "-1" {
            // The documented way to hide the remaining devices: no warning.
            return CudaVisible {
                count,
                warning: None,
            };
        } else if tok.is_empty() {
            if last {
                // A trailing comma loses nothing.
                None
            } else {
                Some("an empty entry".to_string())
            }
        } else if tok.bytes().all(|b| b.is_ascii_digit()) {
            match tok.parse::<u64>() {
                Ok(idx) if limit.is_some_and(|n| idx >= u64::from(n)) => Some(format!(
                    "index {idx} is beyond the {} GPU device node(s)",
                    limit.unwrap_or(0)
                )),
                Ok(idx) if seen.contains(&idx.to_string()) => {
                    Some(format!("index {idx} is listed twice"))
                }
                Ok(idx) => {
                    seen.insert(idx.to_string());
                    None
                }
                Err(_) => Some(format!("`{}` is not a valid index", shorten(tok))),
            }
        } else if is_uuid_entry(tok) {
            if seen.contains(tok) {
                Some(format!("`{}` is listed twice", shorten(tok)))
            } else {
                seen.insert(tok.to_string());
                None
            }
        } else {
            Some(format!(
                "`{}` is neither an index nor a GPU-/MIG- UUID",
                shorten(tok)
            ))
        };
        match problem {
            None if tok.is_empty() => {}
            None => count = count.saturating_add(1),
            Some(why) => {
                return CudaVisible {
                    count,
                    warning: Some(format!(
                        "CUDA_VISIBLE_DEVICES={:?}: {why}; CUDA ignores it and every later entry, so the \
                         command sees {count} GPU(s)",
                        shorten(value)
                    )),
                }
            }
        }
    }
    CudaVisible {
        count,
        warning: None,
    }
}

/// True for a UUID entry: `GPU-` or `MIG-` followed by at least one hex digit or dash (abbreviations allowed).
fn is_uuid_entry(tok: &str) -> bool {
    let rest = tok
        .strip_prefix("GPU-")
        .or_else(|| tok.strip_prefix("MIG-"));
    rest.is_some_and(|r| {
        !r.is_empty()
            && r.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'/')
    })
}

/// Cut a value for a message (at most 64 characters, on a char boundary).
fn shorten(s: &str) -> String {
    if s.chars().count() <= 64 {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(61).collect();
        out.push_str("...");
        out
    }
}

enum NvidiaVisible {
    All,
    Count(u32, Option<String>),
}

/// `NVIDIA_VISIBLE_DEVICES` as the NVIDIA container toolkit reads it: `all`, `none`, `void`, empty, or a comma
/// list of indices and UUIDs.
fn parse_nvidia_visible(value: &str) -> NvidiaVisible {
    let v = value.trim();
    match v {
        "all" => return NvidiaVisible::All,
        "" | "none" | "void" => return NvidiaVisible::Count(0, None),
        _ => {}
    }
    let mut seen = BTreeSet::new();
    let mut bad = Vec::new();
    for tok in v.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        if tok.bytes().all(|b| b.is_ascii_digit()) || is_uuid_entry(tok) {
            seen.insert(tok.to_string());
        } else {
            bad.push(shorten(tok));
        }
    }
    let n = seen.len() as u32;
    let warning = if bad.is_empty() {
        None
    } else {
        Some(format!(
            "NVIDIA_VISIBLE_DEVICES={:?}: entries {} are neither indices nor UUIDs; counted {n} GPU(s)",
            shorten(value),
            bad.join(", ")
        ))
    };
    NvidiaVisible::Count(n, warning)
}

/// Link speed in Mb/s of each named interface from `<sysfs>/class/net/<name>/speed`. Interfaces whose speed
/// is unknown (`-1`, unreadable, EINVAL on a down link, virtual links without a speed) are left out.
pub fn link_speeds(sysfs: &Path, names: &[String]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for name in names {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            continue;
        }
        let p = sysfs.join("class/net").join(name).join("speed");
        let Some(text) = super::read::read_attr(&p) else {
            continue;
        };
        if let Ok(v) = text.parse::<i64>() {
            if v > 0 {
                out.insert(name.clone(), v as u64);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cv(s: &str) -> u32 {
        parse_cuda_visible(s, None).count
    }

    #[test]
    fn cuda_visible_lists() {
        assert_eq!(cv("0,1,2,3"), 4);
        assert_eq!(cv("0"), 1);
        assert_eq!(cv(""), 0);
        assert_eq!(cv("  "), 0);
        assert_eq!(cv("-1"), 0);
        assert_eq!(cv("0,1,-1,2"), 2);
        assert_eq!(cv("0,1,"), 2);
        assert_eq!(cv(" 0, 1"), 2);
        assert_eq!(
            cv("GPU-8f4a1c2e-0000-1111-2222-333344445555,GPU-1234abcd"),
            2
        );
        assert_eq!(cv("MIG-GPU-8f4a1c2e/1/0"), 1);
        assert_eq!(cv("MIG-8f4a1c2e-0000-1111-2222-333344445555"), 1);
        assert_eq!(parse_cuda_visible("0,1,-1,2", None).warning, None);
    }

    #[test]
    fn cuda_visible_malformed_stops_with_warning() {
        let r = parse_cuda_visible("0,x,1", None);
        assert_eq!(r.count, 1);
        assert!(r.warning.as_deref().unwrap_or("").contains("`x`"));
        let r = parse_cuda_visible("0,,1", None);
        assert_eq!(r.count, 1);
        assert!(r.warning.is_some());
        let r = parse_cuda_visible("0,0,1", None);
        assert_eq!(r.count, 1);
        assert!(r.warning.as_deref().unwrap_or("").contains("twice"));
        let r = parse_cuda_visible("abc", None);
        assert_eq!(r.count, 0);
        assert!(r.warning.is_some());
        let r = parse_cuda_visible("99999999999999999999999", None);
        assert_eq!(r.count, 0);
        assert!(r.warning.is_some());
        let r = parse_cuda_visible("GPU-", None);
        assert_eq!(r.count, 0);
    }

    #[test]
    fn cuda_visible_capped_by_nodes() {
        let r = parse_cuda_visible("0,1,2,3", Some(2));
        assert_eq!(r.count, 2);
        assert!(r.warning.is_some());
        // Unknown or zero nodes: no cap.
        assert_eq!(parse_cuda_visible("0,1,2,3", Some(0)).count, 4);
    }

    #[test]
    fn nvidia_visible_values() {
        let env = |k: &str, v: &str| {
            let mut m = BTreeMap::new();
            m.insert(k.to_string(), v.to_string());
            m
        };
        let none = Path::new("/nonexistent-ncclenv");
        for (v, n) in [
            ("none", 0),
            ("void", 0),
            ("", 0),
            ("0,1", 2),
            ("GPU-ab,1,1", 2),
        ] {
            let g = gpu_count_with(&env("NVIDIA_VISIBLE_DEVICES", v), none, none);
            assert_eq!(g.count, Some(n), "{v}");
            assert_eq!(g.source, "NVIDIA_VISIBLE_DEVICES");
        }
        let g = gpu_count_with(&env("NVIDIA_VISIBLE_DEVICES", "0,foo"), none, none);
        assert_eq!(g.count, Some(1));
        assert!(g.warning.is_some());
        // `all` falls through to nodes / procfs: nothing there → unknown.
        let g = gpu_count_with(&env("NVIDIA_VISIBLE_DEVICES", "all"), none, none);
        assert_eq!(g.count, None);
        assert!(
            g.source.starts_with("NVIDIA_VISIBLE_DEVICES=all "),
            "{}",
            g.source
        );
        // CUDA_VISIBLE_DEVICES wins.
        let mut m = env("NVIDIA_VISIBLE_DEVICES", "0,1,2");
        m.insert("CUDA_VISIBLE_DEVICES".into(), "1".into());
        assert_eq!(gpu_count_with(&m, none, none).count, Some(1));
    }

    #[test]
    fn missing_shm_path_is_an_error() {
        let s = probe_shm(Path::new("/nonexistent-ncclenv/shm"));
        assert!(s.error.is_some());
        assert_eq!(s.free_bytes, None);
    }

    #[test]
    fn speeds_skip_unknown() {
        let s = link_speeds(
            Path::new("/nonexistent-ncclenv"),
            &["eth0".to_string(), "../x".to_string()],
        );
        assert!(s.is_empty());
    }

    proptest! {
        #[test]
        fn cuda_parser_never_panics(s in ".*", n in proptest::option::of(0u32..16)) {
            let r = parse_cuda_visible(&s, n);
            prop_assert!(r.count as usize <= s.split(',').count());
        }

        #[test]
        fn cuda_parser_never_panics_on_listy_strings(s in "[0-9GPUMI, \\-a-f/]{0,40}") {
            let _ = parse_cuda_visible(&s, Some(8));
            let _ = parse_nvidia_visible(&s);
        }
    }
}
