//! Probe: RDMA devices (sysfs), verbs device nodes (devfs) and RLIMIT_MEMLOCK.
//!
//! What NCCL's IB transport sees comes from libibverbs (src/transport/net_ib.cc, `ncclIbInitDevices`:
//! `ibv_get_device_list`, `ibv_query_port`, ports with `state != IBV_PORT_ACTIVE` skipped). The kernel mirrors
//! the same facts in sysfs under `class/infiniband/<dev>/ports/<n>/` (`state` = `4: ACTIVE`, `phys_state` =
//! `5: LinkUp`, `link_layer`, `rate`, `gids/<i>`, `gid_attrs/types/<i>`, `gid_attrs/ndevs/<i>`), which can
//! be read without loading libibverbs. rdma-core drops every device whose `/dev/infiniband/uverbsN` node is
//! missing, and NCCL skips a device whose node does not open (`NET/IB : Unable to open device`, `ncclIbInitDevices`
//! in src/transport/net_ib.cc 2.21.5, src/transport/net_ib/init.cc 2.30.7), so each HCA's own node is found
//! through `class/infiniband_verbs/uverbsN/ibdev` and opened read-write (then closed at once), as
//! `ibv_open_device` opens it.
//!
//! Everything per device (the verbs map, the opens, `/proc/self/status`) happens only where
//! `class/infiniband` lists a device: a host without RDMA pays no extra system call.
//!
//! Both roots are parameters (`Config.sysfs`, `Config.devfs`) so that tests and `doctor` can point the probe
//! at a fake tree. The probe never panics: every failure is recorded in [`RdmaSnapshot::error`].

use super::read;
use crate::snapshot::{RdmaDevice, RdmaGid, RdmaPort, RdmaSnapshot, VerbsNode};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// The all-zero GID as sysfs prints an unused GID table entry.
const ZERO_GID: &str = "0000:0000:0000:0000:0000:0000:0000:0000";

/// Where the kernel shows this process's capabilities.
pub const PROC_SELF_STATUS: &str = "/proc/self/status";

/// `CAP_IPC_LOCK` (include/uapi/linux/capability.h): lock memory past RLIMIT_MEMLOCK.
pub const CAP_IPC_LOCK: u32 = 14;

/// Probe every RDMA device under `<sysfs>/class/infiniband` with all its ports, the `uverbsN` and `rdma_cm`
/// character devices under `<devfs>/infiniband`, and the process's RLIMIT_MEMLOCK (soft and hard, in bytes;
/// `None` = unlimited). Where devices exist, also each device's own verbs node (`class/infiniband_verbs`,
/// opened read-write and closed) and whether the command will hold `CAP_IPC_LOCK` ([`ipc_lock_from_status`]).
///
/// A missing `class/infiniband` or `infiniband` device directory is not an error (no RDMA hardware, or a
/// container without `--device=/dev/infiniband`); unreadable directories and files are recorded in
/// `error` (several errors are joined with `; `). Files missing inside a port (`gid_attrs` on older kernels,
/// `rate` on some drivers) are fine: the field stays empty.
pub fn probe(sysfs: &Path, devfs: &Path) -> RdmaSnapshot {
    let mut errors: Vec<String> = Vec::new();
    let mut devices = probe_devices(&sysfs.join("class/infiniband"), &mut errors);
    let (uverbs, rdma_cm) = probe_nodes(&devfs.join("infiniband"), &mut errors);
    let mut cap_ipc_lock = None;
    if !devices.is_empty() {
        let map = verbs_map(&sysfs.join("class/infiniband_verbs"), &mut errors);
        for d in &mut devices {
            d.verbs = map
                .get(&d.name)
                .map(|n| open_node(n, &devfs.join("infiniband").join(n)));
        }
        cap_ipc_lock = read::read_file(Path::new(PROC_SELF_STATUS), read::ATTR_MAX)
            .ok()
            .and_then(|t| {
                ipc_lock_from_status(
                    &String::from_utf8_lossy(&t),
                    nix::unistd::geteuid().is_root(),
                )
            });
    }
    let (memlock_soft, memlock_hard) = match memlock() {
        Ok(v) => v,
        Err(e) => {
            errors.push(e);
            (None, None)
        }
    };
    RdmaSnapshot {
        devices,
        uverbs,
        rdma_cm,
        memlock_soft,
        memlock_hard,
        error: if errors.is_empty() {
            None
        } else {
            Some(errors.join("; "))
        },
        cap_ipc_lock,
    }
}

/// HCA name → `uverbsN`, from `<class>/uverbsN/ibdev` (the kernel's own map; the numbers of `uverbsN` and
/// `mlx5_N` need not agree). A missing or unreadable class gives an empty map.
fn verbs_map(class: &Path, errors: &mut Vec<String>) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let Ok(entries) = fs::read_dir(class) else {
        return map;
    };
    for e in entries.flatten() {
        let node = e.file_name().to_string_lossy().into_owned();
        if !is_uverbs_name(&node) {
            continue;
        }
        if let Some(dev) = read_trim(&e.path().join("ibdev"), errors).filter(|d| !d.is_empty()) {
            map.insert(dev, node);
        }
    }
    map
}

/// Check one verbs node: a character device at `path` (symlinks followed) that opens read-write, as
/// libibverbs opens it (`O_RDWR | O_CLOEXEC`); the descriptor is closed at once.
fn open_node(name: &str, path: &Path) -> VerbsNode {
    let mut node = VerbsNode {
        name: name.to_string(),
        path: path.display().to_string(),
        present: false,
        open_error: None,
    };
    match fs::metadata(path) {
        Err(_) => {}
        Ok(m) if !m.file_type().is_char_device() => {
            node.open_error = Some("not a character device".into());
        }
        Ok(_) => {
            node.present = true;
            if let Err(e) = fs::OpenOptions::new().read(true).write(true).open(path) {
                node.open_error = Some(e.to_string());
            }
        }
    }
    node
}

/// Whether a process with this `/proc/<pid>/status` text keeps `CAP_IPC_LOCK` for the program it execs: the
/// bit is in `CapEff` now, and in `CapBnd` when `root` (root's capabilities after `execve` are its bounding
/// set) or in `CapAmb` otherwise (the ambient set is what an unprivileged program keeps; capabilities(7),
/// "Transformation of capabilities during execve()"). `None` when a line is missing or not hexadecimal.
pub fn ipc_lock_from_status(status: &str, root: bool) -> Option<bool> {
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find_map(|l| l.strip_prefix(name))?;
        u64::from_str_radix(line.trim_start_matches(':').trim(), 16).ok()
    };
    let bit = 1u64 << CAP_IPC_LOCK;
    let eff = field("CapEff")?;
    let kept = if root {
        field("CapBnd")?
    } else {
        field("CapAmb")?
    };
    Some(eff & bit != 0 && kept & bit != 0)
}

/// RLIMIT_MEMLOCK of this process as `(soft, hard)` in bytes, `None` meaning `RLIM_INFINITY` (unlimited).
pub fn memlock() -> Result<(Option<u64>, Option<u64>), String> {
    use nix::sys::resource::{getrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_MEMLOCK)
        .map_err(|e| format!("getrlimit(RLIMIT_MEMLOCK): {e}"))?;
    let conv = |v: nix::libc::rlim_t| -> Option<u64> {
        if v == nix::libc::RLIM_INFINITY {
            None
        } else {
            Some(v)
        }
    };
    Ok((conv(soft), conv(hard)))
}

fn probe_devices(class: &Path, errors: &mut Vec<String>) -> Vec<RdmaDevice> {
    let entries = match fs::read_dir(class) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            errors.push(format!("{}: {e}", class.display()));
            return Vec::new();
        }
    };
    let mut devices = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let ports = probe_ports(&entry.path().join("ports"), &name, errors);
        devices.push(RdmaDevice {
            name,
            ports,
            verbs: None,
        });
    }
    devices.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    devices
}

fn probe_ports(dir: &Path, dev: &str, errors: &mut Vec<String>) -> Vec<RdmaPort> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            errors.push(format!("{dev}: {}: {e}", dir.display()));
            return Vec::new();
        }
    };
    let mut ports = Vec::new();
    for entry in entries.flatten() {
        let Ok(port) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let p = entry.path();
        let (gids, gid_tbl_len) = probe_gids(&p, errors);
        ports.push(RdmaPort {
            port,
            state: read_trim(&p.join("state"), errors)
                .as_deref()
                .and_then(leading_number)
                .unwrap_or(0),
            phys_state: read_trim(&p.join("phys_state"), errors)
                .as_deref()
                .and_then(leading_number)
                .unwrap_or(0),
            link_layer: read_trim(&p.join("link_layer"), errors).unwrap_or_default(),
            rate: read_trim(&p.join("rate"), errors).unwrap_or_default(),
            gids,
            gid_tbl_len,
        });
    }
    ports.sort_unstable_by_key(|p| p.port);
    ports
}

/// The non-zero GIDs of a port and the length of its GID table (every numeric entry of `gids/`).
fn probe_gids(port: &Path, errors: &mut Vec<String>) -> (Vec<RdmaGid>, u32) {
    let Ok(entries) = fs::read_dir(port.join("gids")) else {
        return (Vec::new(), 0);
    };
    let mut gids = Vec::new();
    let mut len: u32 = 0;
    for entry in entries.flatten() {
        let fname = entry.file_name().to_string_lossy().into_owned();
        let Ok(index) = fname.parse::<u32>() else {
            continue;
        };
        len = len.max(index.saturating_add(1));
        // Reading an unused entry fails (EINVAL) on some kernels and reads as all zeros on others.
        let Some(gid) = read_trim(&entry.path(), errors) else {
            continue;
        };
        if gid.is_empty() || gid == ZERO_GID {
            continue;
        }
        let kind =
            read_trim(&port.join("gid_attrs/types").join(&fname), errors).filter(|s| !s.is_empty());
        let ndev =
            read_trim(&port.join("gid_attrs/ndevs").join(&fname), errors).filter(|s| !s.is_empty());
        gids.push(RdmaGid {
            index,
            gid,
            kind,
            ndev,
        });
    }
    gids.sort_unstable_by_key(|g| g.index);
    (gids, len)
}

fn probe_nodes(dir: &Path, errors: &mut Vec<String>) -> (Vec<String>, bool) {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (Vec::new(), false),
        Err(e) => {
            errors.push(format!("{}: {e}", dir.display()));
            return (Vec::new(), false);
        }
    };
    let mut uverbs = Vec::new();
    let mut rdma_cm = false;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // Follow symlinks: a node may be bind-mounted or linked.
        let is_char = fs::metadata(entry.path())
            .map(|m| m.file_type().is_char_device())
            .unwrap_or(false);
        if !is_char {
            continue;
        }
        if name == "rdma_cm" {
            rdma_cm = true;
        } else if is_uverbs_name(&name) {
            uverbs.push(name);
        }
    }
    uverbs.sort_unstable_by_key(|n| (n.len(), n.clone()));
    (uverbs, rdma_cm)
}

/// `uverbs` followed by one or more digits.
fn is_uverbs_name(name: &str) -> bool {
    name.strip_prefix("uverbs")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The number before the colon of a sysfs state line (`4: ACTIVE` → 4).
fn leading_number(s: &str) -> Option<u32> {
    s.split(':').next()?.trim().parse().ok()
}

/// One sysfs attribute as trimmed text (`probe::read`: non-blocking, regular files only, bounded). `None`
/// when it is missing or unreadable (an unused GID entry reads `EINVAL` on some kernels); an attribute that
/// is not a regular file or is larger than a page is also recorded in `errors`.
fn read_trim(p: &Path, errors: &mut Vec<String>) -> Option<String> {
    match read::read_file(p, read::ATTR_MAX) {
        Ok(b) => Some(String::from_utf8_lossy(&b).trim().to_string()),
        Err(e @ (read::ReadError::NotRegular(_) | read::ReadError::TooLarge(_))) => {
            errors.push(format!("{}: {e}", p.display()));
            None
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_lines_parse() {
        assert_eq!(leading_number("4: ACTIVE"), Some(4));
        assert_eq!(leading_number("5: LinkUp"), Some(5));
        assert_eq!(leading_number("1: DOWN"), Some(1));
        assert_eq!(leading_number("garbage"), None);
        assert_eq!(leading_number(""), None);
    }

    #[test]
    fn uverbs_names() {
        assert!(is_uverbs_name("uverbs0"));
        assert!(is_uverbs_name("uverbs12"));
        assert!(!is_uverbs_name("uverbs"));
        assert!(!is_uverbs_name("uverbsX"));
        assert!(!is_uverbs_name("rdma_cm"));
    }

    #[test]
    fn ipc_lock_kept_across_exec() {
        let status = |eff: &str, bnd: &str, amb: &str| {
            format!("Name:\tx\nCapInh:\t0\nCapPrm:\t{eff}\nCapEff:\t{eff}\nCapBnd:\t{bnd}\nCapAmb:\t{amb}\n")
        };
        let all = "000001fffeffffff";
        let no_ipc = "000001fffeffbfff";
        // Root with the usual set (Docker --cap-add=IPC_LOCK, a privileged pod).
        assert_eq!(
            ipc_lock_from_status(&status(all, all, "0"), true),
            Some(true)
        );
        // Root whose bounding set lost it (`setpriv --bounding-set -ipc_lock`, Docker's default set).
        assert_eq!(
            ipc_lock_from_status(&status(no_ipc, no_ipc, "0"), true),
            Some(false)
        );
        // Effective now, but not in the bounding set: the command would not have it.
        assert_eq!(
            ipc_lock_from_status(&status(all, no_ipc, "0"), true),
            Some(false)
        );
        // Another user: only an ambient capability survives execve.
        assert_eq!(
            ipc_lock_from_status(&status("0000000000004000", all, "0"), false),
            Some(false)
        );
        assert_eq!(
            ipc_lock_from_status(&status("0000000000004000", all, "0000000000004000"), false),
            Some(true)
        );
        assert_eq!(
            ipc_lock_from_status(&status("0", all, "0"), false),
            Some(false)
        );
        assert_eq!(ipc_lock_from_status("CapEff:\tzz\n", true), None);
        assert_eq!(ipc_lock_from_status("", true), None);
    }

    #[test]
    fn missing_roots_are_not_errors() {
        let s = probe(
            Path::new("/nonexistent-ncclenv/sys"),
            Path::new("/nonexistent-ncclenv/dev"),
        );
        assert!(s.devices.is_empty());
        assert!(s.uverbs.is_empty());
        assert!(!s.rdma_cm);
        assert_eq!(s.error, None);
    }
}
