//! Vendor network profiles: the variables that mean a vendor network plugin manages NCCL's transport, listed
//! once ([`VENDOR_KEYS`]), read by the regime ([`super::Regime::VendorProfile`]), by the RDMA rules
//! (`rdma-vendor-plugin`) and by the fleet preflight.

use crate::nccl_rules::{effective, Origin};
use crate::snapshot::Snapshot;

/// Variables (or prefixes, ending in `_`) that mean a vendor network plugin manages NCCL's transport: an
/// explicit `NCCL_NET`, a `NCCL_NET_PLUGIN` other than `none` (with `none` NCCL's net-plugin loader,
/// src/plugin/, loads no plugin), AWS EFA (`FI_PROVIDER`, aws-ofi-nccl), GKE GPUDirect-TCPX/TCPXO
/// (`NCCL_GPUDIRECTTCPX_*`, `NCCL_FASTRAK_*`, enforced by a config checker). docs/rdma-shm.md.
pub const VENDOR_KEYS: &[&str] = &[
    "NCCL_NET",
    "NCCL_NET_PLUGIN",
    "FI_PROVIDER",
    "NCCL_GPUDIRECTTCPX_",
    "NCCL_FASTRAK_",
];

/// Whether `k` is one of [`VENDOR_KEYS`] (a prefix entry matches every name it starts).
fn is_vendor_key(k: &str) -> bool {
    VENDOR_KEYS.iter().any(|v| {
        if v.ends_with('_') {
            k.starts_with(v)
        } else {
            k == *v
        }
    })
}

/// Whether `NAME=value` counts: `NCCL_NET_PLUGIN` empty or `none` loads no plugin.
fn counts(k: &str, v: &str) -> bool {
    !(k == "NCCL_NET_PLUGIN" && (v.is_empty() || v.eq_ignore_ascii_case("none")))
}

/// The vendor profile keys present in the inherited environment or NCCL's config files, sorted, each once.
pub fn vendor_profile(snap: &Snapshot) -> Vec<String> {
    let mut keys: Vec<String> = snap
        .env
        .iter()
        .chain(
            snap.conf_files
                .iter()
                .flat_map(|f| f.values.iter().map(|(k, v)| (k, v))),
        )
        .filter(|(k, v)| counts(k, v))
        .map(|(k, _)| k)
        .filter(|k| is_vendor_key(k))
        .cloned()
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// The vendor-plugin variable the RDMA rules name, if any: the first exact key of [`VENDOR_KEYS`] NCCL sees
/// (as [`effective`] reads it) as `NAME=value` (`NAME=value from FILE` for a config file's), else the first
/// name with a prefix of [`VENDOR_KEYS`] in the environment, else in NCCL's config files.
pub fn vendor_plugin(snap: &Snapshot) -> Option<String> {
    for k in VENDOR_KEYS.iter().filter(|k| !k.ends_with('_')) {
        if let Some((v, origin)) = effective(k, &snap.env, &snap.conf_files) {
            if !counts(k, v) {
                continue;
            }
            return Some(if origin == Origin::Environment {
                format!("{k}={v}")
            } else {
                format!("{k}={v} from {origin}")
            });
        }
    }
    let prefixed = |k: &&String| {
        VENDOR_KEYS
            .iter()
            .any(|v| v.ends_with('_') && k.starts_with(v))
    };
    snap.env.keys().find(prefixed).cloned().or_else(|| {
        snap.conf_files
            .iter()
            .flat_map(|f| f.values.iter().map(|(k, _)| k))
            .find(prefixed)
            .cloned()
    })
}
