//! Decision rules: InfiniBand / RoCE (`NCCL_IB_DISABLE`, `NCCL_IB_HCA`, RLIMIT_MEMLOCK).
//!
//! Pure: reads the [`Snapshot`] (filled by `probe::rdma`), writes the [`Plan`]. The rules mirror how NCCL's IB
//! transport finds devices (src/transport/net_ib.cc, `ncclIbInitDevices`, NCCL 2.18–2.30):
//!
//! - it opens libibverbs and walks `ibv_get_device_list()`; rdma-core (libibverbs/init.c) silently drops every
//!   device whose `/dev/infiniband/uverbsN` node is missing;
//! - it keeps ports whose `ibv_query_port` state is `IBV_PORT_ACTIVE` (sysfs `state` = `4: ACTIVE`) and whose
//!   link layer is InfiniBand or Ethernet (RoCE), filtered by `NCCL_IB_HCA` (list syntax of
//!   src/misc/utils.cc `parseStringList`/`matchIfList`: `=` for exact names, `name:port`);
//! - when no port is left it logs `NET/IB : No device found.` at INFO level and NCCL silently uses the socket
//!   transport (often 10× slower); when a port is kept but RLIMIT_MEMLOCK is small, `ibv_reg_mr` fails
//!   (`Call to ibv_reg_mr failed`, `ncclSystemError`) and the job dies at its first collective.
//!
//! A RoCE port needs a GID bound to a netdev of this network namespace (`gid_attrs/ndevs/<i>`): a pod without
//! its Multus/SR-IOV interface has none, and NCCL (2.21+ `NCCL_IB_GID_INDEX` auto-selection) finds no usable GID.

use crate::config::Config;
use crate::plan::Plan;
use crate::snapshot::{RdmaDevice, RdmaPort, RdmaSnapshot, Snapshot};
use std::collections::{BTreeMap, BTreeSet};

/// `ibv_port_state` value of an active port (`IBV_PORT_ACTIVE`, sysfs `4: ACTIVE`).
pub const PORT_ACTIVE: u32 = 4;

/// The smallest effective RLIMIT_MEMLOCK (bytes) ncclenv accepts for RDMA: 1 GiB. NCCL registers its buffers
/// with `ibv_reg_mr` (src/transport/net_ib.cc, `ncclIbRegMrDmaBufInternal`); the common defaults 64 KiB and
/// 8 MiB make that fail.
pub const MEMLOCK_MIN_BYTES: u64 = 1 << 30;

/// Entries `NCCL_IB_HCA` may hold (`parseStringList`, src/misc/utils.cc: at most 16).
pub const MAX_HCA_ENTRIES: usize = 16;

const MIB: u64 = 1 << 20;

const DOCKER_RDMA_FLAGS: &str = "--device=/dev/infiniband --cap-add=IPC_LOCK --ulimit memlock=-1";

/// Decide `NCCL_IB_DISABLE`, `NCCL_IB_HCA` and `Plan::raise_memlock` from the RDMA part of the snapshot.
///
/// In order:
/// 1. `snap.rdma == None` (not probed): nothing.
/// 2. A vendor network plugin is configured (`NCCL_NET`, `NCCL_NET_PLUGIN`, `FI_PROVIDER` (AWS EFA,
///    aws-ofi-nccl), `NCCL_GPUDIRECTTCPX_*`, `NCCL_FASTRAK_*` (GKE TCPX/TCPXO)): it owns these variables;
///    info only (`rdma-vendor-plugin`).
/// 3. The evidence is assessed ([`assess`]): no device, no ACTIVE port, no verbs node, no RoCE port with its
///    netdev here, memlock below [`MEMLOCK_MIN_BYTES`] after raising soft to hard; else usable.
/// 4. An inherited `NCCL_IB_DISABLE` (any value) is kept; a warning is added where the evidence contradicts
///    it (`NCCL_IB_DISABLE=0` with IB unusable) and an info where IB would work but is disabled.
/// 5. Otherwise: unusable → `NCCL_IB_DISABLE=1` with the reason (and a warning where hardware exists but the
///    container is missing something); usable → `NCCL_IB_DISABLE` left alone, `raise_memlock` when
///    soft < hard, and `NCCL_IB_HCA==dev,…` (exact names, `dev:port` where only some ports qualify) when some
///    visible HCA or ACTIVE port is excluded and `NCCL_IB_HCA` is not inherited.
pub fn decide_rdma(snap: &Snapshot, cfg: &Config, plan: &mut Plan) {
    let Some(rdma) = &snap.rdma else {
        return;
    };
    if let Some(key) = vendor_plugin(&snap.env) {
        plan.info(
            "rdma-vendor-plugin",
            format!(
                "a vendor network plugin is configured ({key}); it manages its own transport variables, so \
                 ncclenv leaves NCCL_IB_DISABLE and NCCL_IB_HCA as they are"
            ),
            "nothing to do; `ncclenv doctor` shows the RDMA devices it saw",
        );
        return;
    }
    if let Some(err) = &rdma.error {
        if !rdma.devices.is_empty() {
            plan.info(
                "rdma-probe-error",
                format!("part of the RDMA probe failed: {err}"),
                "check that sysfs and /dev are mounted normally",
            );
        }
    }
    let links: Option<BTreeSet<&str>> = snap
        .net
        .as_ref()
        .ok()
        .map(|n| n.links.iter().map(|l| l.name.as_str()).collect());
    let a = assess(rdma, links.as_ref(), cfg);

    match snap.var("NCCL_IB_DISABLE") {
        Some(v) => inherited(plan, &a, v),
        None => apply(plan, &a, snap.var("NCCL_IB_HCA").is_some()),
    }
}

/// What the RDMA evidence says, before looking at inherited variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assessment {
    /// The probe failed and found no device: can't tell (nothing is changed).
    ProbeFailed(String),
    /// No device under `class/infiniband`.
    NoDevice(String),
    /// Devices, but no ACTIVE port (`<dev>/<port>: state N` list).
    NoActivePort(String),
    /// ACTIVE ports, but no `uverbsN` node: rdma-core hides every device (list of active ports).
    NoVerbsNodes(String),
    /// Only RoCE ports whose GIDs belong to netdevs absent from this namespace (description).
    RoceNetdevMissing(String),
    /// The effective memlock limit (bytes) is below [`MEMLOCK_MIN_BYTES`]; `raised` when soft < hard.
    MemlockLow {
        /// Effective limit in bytes (the hard limit when raised).
        bytes: u64,
        /// True when the soft limit would be raised to it.
        raised: bool,
    },
    /// IB usable.
    Usable {
        /// `NCCL_IB_HCA` entries of the usable ports (`mlx5_0`, or `mlx5_0:1` when only some ports qualify).
        entries: Vec<String>,
        /// Excluded HCAs or ports with why (`mlx5_2: port 1 DOWN`); empty when every HCA qualifies.
        excluded: Vec<String>,
        /// Soft RLIMIT_MEMLOCK below hard: raise it before exec.
        raise: bool,
        /// Effective memlock after raising (bytes, `None` = unlimited).
        memlock: Option<u64>,
    },
}

/// Assess the RDMA snapshot. `links` are the netdev names of this namespace (`None` = unknown: every RoCE port
/// counts as usable). Pure.
pub fn assess(rdma: &RdmaSnapshot, links: Option<&BTreeSet<&str>>, cfg: &Config) -> Assessment {
    if rdma.devices.is_empty() {
        if let Some(e) = &rdma.error {
            return Assessment::ProbeFailed(e.clone());
        }
        return Assessment::NoDevice(format!(
            "no RDMA device under {}/class/infiniband",
            cfg.sysfs.display()
        ));
    }
    let active: Vec<(&RdmaDevice, &RdmaPort)> = rdma
        .devices
        .iter()
        .flat_map(|d| d.ports.iter().map(move |p| (d, p)))
        .filter(|(_, p)| p.state == PORT_ACTIVE)
        .collect();
    if active.is_empty() {
        let states: Vec<String> = rdma
            .devices
            .iter()
            .flat_map(|d| {
                d.ports
                    .iter()
                    .map(move |p| format!("{}/{}: {}", d.name, p.port, port_state_name(p.state)))
            })
            .collect();
        let states = if states.is_empty() {
            "no ports".to_string()
        } else {
            states.join(", ")
        };
        return Assessment::NoActivePort(format!("no ACTIVE RDMA port ({states})"));
    }
    if rdma.uverbs.is_empty() {
        let ports: Vec<String> = active.iter().map(|(d, p)| port_desc(d, p)).collect();
        return Assessment::NoVerbsNodes(format!(
            "ACTIVE RDMA port(s) {} but no uverbs device under {}/infiniband: libibverbs hides every device \
             without its node",
            ports.join(", "),
            cfg.devfs.display()
        ));
    }
    // Per-port usability (RoCE needs its netdev here).
    let mut usable: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    let mut excluded_ports: Vec<String> = Vec::new();
    for (d, p) in &active {
        match roce_problem(p, links) {
            None => usable.entry(d.name.as_str()).or_default().push(p.port),
            Some(why) => excluded_ports.push(format!("{}:{} ({why})", d.name, p.port)),
        }
    }
    if usable.is_empty() {
        return Assessment::RoceNetdevMissing(format!(
            "every ACTIVE RDMA port is RoCE without its network interface in this namespace: {}",
            excluded_ports.join(", ")
        ));
    }
    // Memlock: the soft limit can be raised to the hard one without privilege.
    let raise = below(rdma.memlock_soft, rdma.memlock_hard);
    let memlock = if raise {
        rdma.memlock_hard
    } else {
        rdma.memlock_soft
    };
    if let Some(bytes) = memlock.filter(|b| *b < MEMLOCK_MIN_BYTES) {
        return Assessment::MemlockLow {
            bytes,
            raised: raise,
        };
    }
    // Entries and exclusions.
    let mut entries = Vec::new();
    let mut excluded = Vec::new();
    for d in &rdma.devices {
        let active_ports: Vec<u32> = d
            .ports
            .iter()
            .filter(|p| p.state == PORT_ACTIVE)
            .map(|p| p.port)
            .collect();
        match usable.get(d.name.as_str()) {
            None if active_ports.is_empty() => {
                let st: Vec<String> = d
                    .ports
                    .iter()
                    .map(|p| format!("port {} {}", p.port, port_state_name(p.state)))
                    .collect();
                excluded.push(format!("{} ({})", d.name, st.join(", ")));
            }
            None => {}
            Some(ports) if ports.len() == active_ports.len() => entries.push(d.name.clone()),
            Some(ports) => entries.extend(ports.iter().map(|p| format!("{}:{p}", d.name))),
        }
    }
    excluded.extend(excluded_ports);
    Assessment::Usable {
        entries,
        excluded,
        raise,
        memlock,
    }
}

/// Apply the assessment when `NCCL_IB_DISABLE` is not inherited.
fn apply(plan: &mut Plan, a: &Assessment, hca_inherited: bool) {
    match a {
        Assessment::ProbeFailed(e) => plan.info(
            "rdma-probe-error",
            format!("the RDMA probe failed ({e}); NCCL_IB_DISABLE left as NCCL decides"),
            "check that sysfs and /dev are mounted normally",
        ),
        Assessment::NoDevice(why) | Assessment::NoActivePort(why) => plan.set(
            "NCCL_IB_DISABLE",
            "1",
            format!(
                "{why}: NET/IB would find nothing (net_ib.cc, ncclIbInitDevices); skip its probe"
            ),
        ),
        Assessment::NoVerbsNodes(why) => {
            plan.set(
                "NCCL_IB_DISABLE",
                "1",
                format!("{why}; NCCL would silently fall back to sockets"),
            );
            warn_no_verbs(plan, why);
        }
        Assessment::RoceNetdevMissing(why) => {
            plan.set(
                "NCCL_IB_DISABLE",
                "1",
                format!("{why}; no usable GID, NCCL would use sockets"),
            );
            warn_roce(plan, why);
        }
        Assessment::MemlockLow { bytes, raised } => {
            plan.set(
                "NCCL_IB_DISABLE",
                "1",
                format!(
                    "RLIMIT_MEMLOCK {} is below {} MiB: ibv_reg_mr would fail and the job would die",
                    fmt_mib(*bytes),
                    MEMLOCK_MIN_BYTES / MIB
                ),
            );
            // Raised all the same (FIELD-CASES F15): the command inherits the hard limit, which is what
            // the container was given; the warning names the limit that remains too low.
            plan.raise_memlock |= *raised;
            warn_memlock(plan, *bytes, *raised);
        }
        Assessment::Usable {
            entries,
            excluded,
            raise,
            memlock,
        } => {
            raise_memlock(plan, *raise, *memlock);
            if excluded.is_empty() {
                plan.info(
                    "rdma-usable",
                    format!("RDMA usable on {}", entries.join(", ")),
                    "nothing to do",
                );
                return;
            }
            if hca_inherited {
                plan.info(
                    "rdma-hca-inherited",
                    format!(
                        "RDMA usable on {}; not usable: {}; inherited NCCL_IB_HCA kept",
                        entries.join(", "),
                        excluded.join(", ")
                    ),
                    format!("make sure NCCL_IB_HCA selects only ={}", entries.join(",")),
                );
            } else if entries.len() > MAX_HCA_ENTRIES {
                plan.info(
                    "rdma-hca-too-many",
                    format!(
                        "{} usable RDMA ports exceed the {MAX_HCA_ENTRIES} entries NCCL_IB_HCA can hold; not \
                         set (not usable: {})",
                        entries.len(),
                        excluded.join(", ")
                    ),
                    "set NCCL_IB_HCA yourself if NCCL picks an unusable HCA",
                );
            } else {
                plan.set(
                    "NCCL_IB_HCA",
                    format!("={}", entries.join(",")),
                    format!(
                        "use exactly the usable RDMA HCAs ({}); not usable: {}",
                        entries.join(", "),
                        excluded.join(", ")
                    ),
                );
            }
        }
    }
}

/// Keep an inherited `NCCL_IB_DISABLE`; comment where the evidence disagrees.
fn inherited(plan: &mut Plan, a: &Assessment, value: &str) {
    let disables = value.trim().parse::<i64>().map(|v| v != 0).unwrap_or(false);
    let kept = format!("inherited NCCL_IB_DISABLE={value} kept");
    if disables {
        if let Assessment::Usable { entries, .. } = a {
            plan.info(
                "rdma-ib-disabled-inherited",
                format!(
                    "{kept}, although RDMA looks usable on {}",
                    entries.join(", ")
                ),
                "unset NCCL_IB_DISABLE to use RDMA",
            );
        }
        return;
    }
    match a {
        Assessment::NoVerbsNodes(why) => warn_no_verbs(plan, &format!("{kept}, but {why}")),
        Assessment::RoceNetdevMissing(why) => warn_roce(plan, &format!("{kept}, but {why}")),
        Assessment::MemlockLow { bytes, raised } => {
            warn_memlock(plan, *bytes, *raised);
            plan.info("rdma-ib-disabled-inherited", kept, "nothing to do");
        }
        Assessment::NoDevice(why) | Assessment::NoActivePort(why) => plan.info(
            "rdma-ib-disabled-inherited",
            format!("{kept}; {why}, so NCCL will use sockets"),
            "nothing to do",
        ),
        Assessment::ProbeFailed(_) => {}
        Assessment::Usable { raise, memlock, .. } => raise_memlock(plan, *raise, *memlock),
    }
}

fn raise_memlock(plan: &mut Plan, raise: bool, memlock: Option<u64>) {
    if raise {
        plan.raise_memlock = true;
        plan.info(
            "rdma-memlock-raised",
            format!(
                "soft RLIMIT_MEMLOCK raised to the hard limit ({}) for the command",
                memlock.map_or_else(|| "unlimited".to_string(), fmt_mib)
            ),
            "nothing to do",
        );
    }
}

fn warn_no_verbs(plan: &mut Plan, why: &str) {
    plan.warn_strict(
        "rdma-no-verbs-devices",
        format!("RDMA hardware is present but unusable in this container: {why}; NCCL would silently fall back to sockets"),
        format!("run the container with {DOCKER_RDMA_FLAGS} (Kubernetes: request the RDMA device-plugin resource and add capability IPC_LOCK)"),
    );
}

fn warn_roce(plan: &mut Plan, why: &str) {
    plan.warn_strict(
        "rdma-roce-netdev-missing",
        format!("{why}; NCCL would find no usable GID and fall back to sockets"),
        "attach the RoCE interface to the pod (Multus / SR-IOV network annotation) or run with host networking",
    );
}

fn warn_memlock(plan: &mut Plan, bytes: u64, raised: bool) {
    let which = if raised {
        "hard RLIMIT_MEMLOCK"
    } else {
        "RLIMIT_MEMLOCK"
    };
    plan.warn_strict(
        "rdma-memlock-low",
        format!(
            "{which} is {}, below {} MiB: RDMA memory registration (ibv_reg_mr) would fail, so RDMA is disabled",
            fmt_mib(bytes),
            MEMLOCK_MIN_BYTES / MIB
        ),
        "run the container with --ulimit memlock=-1 (Kubernetes: raise the container runtime's memlock limit, e.g. LimitMEMLOCK=infinity)",
    );
}

/// The first vendor-plugin variable present, if any (NCCL-FACTS §6).
fn vendor_plugin(env: &BTreeMap<String, String>) -> Option<String> {
    for k in ["NCCL_NET", "NCCL_NET_PLUGIN", "FI_PROVIDER"] {
        if let Some(v) = env.get(k) {
            // NCCL_NET_PLUGIN=none loads no plugin (see `decide::vendor_profile`).
            if k == "NCCL_NET_PLUGIN" && (v.is_empty() || v.eq_ignore_ascii_case("none")) {
                continue;
            }
            return Some(format!("{k}={v}"));
        }
    }
    env.keys()
        .find(|k| k.starts_with("NCCL_GPUDIRECTTCPX_") || k.starts_with("NCCL_FASTRAK_"))
        .cloned()
}

/// Why a RoCE port is unusable here: its GIDs are bound to netdevs none of which exist in this namespace.
/// InfiniBand ports, unknown links and ports without netdev information count as usable.
fn roce_problem(p: &RdmaPort, links: Option<&BTreeSet<&str>>) -> Option<String> {
    if !p.link_layer.eq_ignore_ascii_case("ethernet") {
        return None;
    }
    let links = links?;
    let ndevs: BTreeSet<&str> = p.gids.iter().filter_map(|g| g.ndev.as_deref()).collect();
    if ndevs.is_empty() || ndevs.iter().any(|n| links.contains(n)) {
        return None;
    }
    Some(format!(
        "RoCE GIDs bound to {}, not in this network namespace",
        ndevs.into_iter().collect::<Vec<_>>().join(", ")
    ))
}

/// `a < b` with `None` = unlimited.
fn below(a: Option<u64>, b: Option<u64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a < b,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// The name of an IB port state number (`state` in sysfs, `enum ib_port_state` in include/rdma/ib_verbs.h):
/// 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER; other numbers as `state N`.
pub fn port_state_name(s: u32) -> String {
    match s {
        1 => "DOWN".into(),
        2 => "INIT".into(),
        3 => "ARMED".into(),
        4 => "ACTIVE".into(),
        5 => "ACTIVE_DEFER".into(),
        n => format!("state {n}"),
    }
}

fn port_desc(d: &RdmaDevice, p: &RdmaPort) -> String {
    let mut s = format!("{}:{}", d.name, p.port);
    let mut extra = Vec::new();
    if !p.link_layer.is_empty() {
        extra.push(p.link_layer.clone());
    }
    if !p.rate.is_empty() {
        extra.push(p.rate.clone());
    }
    if !extra.is_empty() {
        s.push_str(&format!(" ({})", extra.join(", ")));
    }
    s
}

/// Bytes as MiB for messages: `8 MiB`, `0.06 MiB (65536 B)`.
pub fn fmt_mib(bytes: u64) -> String {
    if bytes % MIB == 0 {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{:.2} MiB ({bytes} B)", bytes as f64 / MIB as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Severity;
    use crate::snapshot::{Link, NetSnapshot, RdmaGid};

    fn port(n: u32, state: u32, ll: &str, ndev: Option<&str>) -> RdmaPort {
        RdmaPort {
            port: n,
            state,
            phys_state: if state == 4 { 5 } else { 3 },
            link_layer: ll.into(),
            rate: "200 Gb/sec (4X HDR)".into(),
            gids: vec![RdmaGid {
                index: 0,
                gid: "fe80:0000:0000:0000:0000:0000:0000:0001".into(),
                kind: ndev.map(|_| "RoCE v2".to_string()),
                ndev: ndev.map(str::to_string),
            }],
        }
    }
    fn dev(name: &str, ports: Vec<RdmaPort>) -> RdmaDevice {
        RdmaDevice {
            name: name.into(),
            ports,
        }
    }
    fn rdma(
        devices: Vec<RdmaDevice>,
        uverbs: &[&str],
        soft: Option<u64>,
        hard: Option<u64>,
    ) -> RdmaSnapshot {
        RdmaSnapshot {
            devices,
            uverbs: uverbs.iter().map(|s| s.to_string()).collect(),
            rdma_cm: true,
            memlock_soft: soft,
            memlock_hard: hard,
            error: None,
        }
    }
    fn snap(r: RdmaSnapshot, links: &[&str], env: &[(&str, &str)]) -> Snapshot {
        Snapshot {
            rdma: Some(r),
            net: Ok(NetSnapshot {
                links: links
                    .iter()
                    .enumerate()
                    .map(|(i, n)| Link {
                        index: i as u32 + 1,
                        name: n.to_string(),
                        ..Link::default()
                    })
                    .collect(),
                ..NetSnapshot::default()
            }),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Snapshot::default()
        }
    }
    fn run(s: &Snapshot) -> Plan {
        let mut p = Plan::default();
        decide_rdma(s, &Config::default(), &mut p);
        p
    }
    fn codes(p: &Plan) -> Vec<&str> {
        p.warnings.iter().map(|w| w.code.as_str()).collect()
    }
    const GIB: u64 = 1 << 30;
    const MIB8: u64 = 8 << 20;

    #[test]
    fn not_probed_does_nothing() {
        let p = run(&Snapshot::default());
        assert!(p.changes.is_empty() && p.warnings.is_empty());
    }

    #[test]
    fn no_device_disables_quietly() {
        let p = run(&snap(rdma(vec![], &[], None, None), &["eth0"], &[]));
        assert_eq!(p.value_of("NCCL_IB_DISABLE"), Some("1"));
        assert!(!p.has_warnings());
    }

    #[test]
    fn probe_failure_changes_nothing() {
        let mut r = rdma(vec![], &[], None, None);
        r.error = Some("permission denied".into());
        let p = run(&snap(r, &[], &[]));
        assert!(p.changes.is_empty());
        assert_eq!(codes(&p), vec!["rdma-probe-error"]);
    }

    #[test]
    fn no_active_port_disables() {
        let r = rdma(
            vec![dev("mlx5_0", vec![port(1, 1, "InfiniBand", None)])],
            &["uverbs0"],
            None,
            None,
        );
        let p = run(&snap(r, &[], &[]));
        assert_eq!(p.value_of("NCCL_IB_DISABLE"), Some("1"));
        assert!(p.changes[0].reason.contains("mlx5_0/1: DOWN"));
        assert!(!p.has_warnings());
    }

    #[test]
    fn f14_no_verbs_nodes_disables_with_warning() {
        let r = rdma(
            vec![dev(
                "mlx5_bond_0",
                vec![port(1, 4, "Ethernet", Some("bond0"))],
            )],
            &[],
            None,
            None,
        );
        let p = run(&snap(r.clone(), &["lo", "bond0"], &[]));
        assert_eq!(p.value_of("NCCL_IB_DISABLE"), Some("1"));
        assert_eq!(codes(&p), vec!["rdma-no-verbs-devices"]);
        let w = &p.warnings[0];
        assert!(w.remedy.contains(DOCKER_RDMA_FLAGS));
        assert!(w.strict_refuses);
        // Inherited NCCL_IB_DISABLE=0: kept, same warning.
        let p = run(&snap(r, &["lo", "bond0"], &[("NCCL_IB_DISABLE", "0")]));
        assert!(p.changes.is_empty());
        assert_eq!(codes(&p), vec!["rdma-no-verbs-devices"]);
        assert!(p.warnings[0].message.contains("NCCL_IB_DISABLE=0 kept"));
    }

    #[test]
    fn inherited_disable_kept_whatever_value() {
        let r = rdma(
            vec![dev("mlx5_0", vec![port(1, 4, "InfiniBand", None)])],
            &["uverbs0"],
            None,
            None,
        );
        for v in ["1", "", "yes", "0"] {
            let p = run(&snap(r.clone(), &[], &[("NCCL_IB_DISABLE", v)]));
            assert!(p.changes.is_empty(), "{v}");
            assert!(!p.has_warnings(), "{v}");
        }
        let p = run(&snap(r, &[], &[("NCCL_IB_DISABLE", "1")]));
        assert_eq!(codes(&p), vec!["rdma-ib-disabled-inherited"]);
    }

    #[test]
    fn roce_without_netdev_disables() {
        let r = rdma(
            vec![dev("mlx5_2", vec![port(1, 4, "Ethernet", Some("net1"))])],
            &["uverbs2"],
            None,
            None,
        );
        // Multus interface present: usable.
        let p = run(&snap(r.clone(), &["lo", "eth0", "net1"], &[]));
        assert_eq!(p.value_of("NCCL_IB_DISABLE"), None);
        assert!(!p.has_warnings());
        // Missing: disabled with a warning naming the netdev.
        let p = run(&snap(r.clone(), &["lo", "eth0"], &[]));
        assert_eq!(p.value_of("NCCL_IB_DISABLE"), Some("1"));
        assert_eq!(codes(&p), vec!["rdma-roce-netdev-missing"]);
        assert!(p.warnings[0].message.contains("net1"));
        // Network unknown: can't tell → usable.
        let mut s = snap(r, &[], &[]);
        s.net = Err("netlink failed".into());
        let p = run(&s);
        assert_eq!(p.value_of("NCCL_IB_DISABLE"), None);
    }

    #[test]
    fn f15_memlock_equal_and_low_disables() {
        let r = rdma(
            vec![dev("mlx5_0", vec![port(1, 4, "InfiniBand", None)])],
            &["uverbs0"],
            Some(MIB8),
            Some(MIB8),
        );
        let p = run(&snap(r, &["ens1", "ib0"], &[]));
        assert_eq!(p.value_of("NCCL_IB_DISABLE"), Some("1"));
        assert_eq!(codes(&p), vec!["rdma-memlock-low"]);
        assert!(p.warnings[0].message.contains("8 MiB"));
        assert!(p.warnings[0].remedy.contains("--ulimit memlock=-1"));
        assert!(!p.raise_memlock);
    }

    #[test]
    fn f15_memlock_raised_to_unlimited_hard() {
        let r = rdma(
            vec![dev("mlx5_0", vec![port(1, 4, "InfiniBand", None)])],
            &["uverbs0"],
            Some(MIB8),
            None,
        );
        let p = run(&snap(r, &["ens1", "ib0"], &[]));
        assert_eq!(p.value_of("NCCL_IB_DISABLE"), None);
        assert!(p.raise_memlock);
        assert!(codes(&p).contains(&"rdma-memlock-raised"));
        assert!(!p.has_warnings());
    }

    #[test]
    fn memlock_raised_but_hard_still_low() {
        let r = rdma(
            vec![dev("mlx5_0", vec![port(1, 4, "InfiniBand", None)])],
            &["uverbs0"],
            Some(64 << 10),
            Some(MIB8),
        );
        let p = run(&snap(r, &[], &[]));
        assert_eq!(p.value_of("NCCL_IB_DISABLE"), Some("1"));
        assert!(p.warnings[0]
            .message
            .contains("hard RLIMIT_MEMLOCK is 8 MiB"));
        // Exactly 1 GiB is enough.
        let r = rdma(
            vec![dev("mlx5_0", vec![port(1, 4, "InfiniBand", None)])],
            &["uverbs0"],
            Some(GIB),
            Some(GIB),
        );
        assert_eq!(run(&snap(r, &[], &[])).value_of("NCCL_IB_DISABLE"), None);
    }

    #[test]
    fn some_hcas_down_gives_exact_list() {
        let r = rdma(
            vec![
                dev("mlx5_0", vec![port(1, 4, "InfiniBand", None)]),
                dev("mlx5_1", vec![port(1, 4, "InfiniBand", None)]),
                dev("mlx5_2", vec![port(1, 1, "InfiniBand", None)]),
                dev("mlx5_3", vec![port(1, 1, "InfiniBand", None)]),
            ],
            &["uverbs0", "uverbs1", "uverbs2", "uverbs3"],
            None,
            None,
        );
        let p = run(&snap(r.clone(), &[], &[]));
        assert_eq!(p.value_of("NCCL_IB_HCA"), Some("=mlx5_0,mlx5_1"));
        assert_eq!(p.value_of("NCCL_IB_DISABLE"), None);
        assert!(!p.has_warnings());
        // Inherited NCCL_IB_HCA kept.
        let p = run(&snap(r, &[], &[("NCCL_IB_HCA", "mlx5")]));
        assert_eq!(p.value_of("NCCL_IB_HCA"), None);
        assert_eq!(codes(&p), vec!["rdma-hca-inherited"]);
    }

    #[test]
    fn roce_port_level_list() {
        let r = rdma(
            vec![
                dev(
                    "mlx5_0",
                    vec![
                        port(1, 4, "Ethernet", Some("net1")),
                        port(2, 4, "Ethernet", Some("ens9")),
                    ],
                ),
                dev("mlx5_1", vec![port(1, 4, "Ethernet", Some("ens10"))]),
            ],
            &["uverbs0", "uverbs1"],
            None,
            None,
        );
        let p = run(&snap(r, &["eth0", "net1"], &[]));
        assert_eq!(p.value_of("NCCL_IB_HCA"), Some("=mlx5_0:1"));
    }

    #[test]
    fn all_usable_sets_nothing() {
        let r = rdma(
            vec![
                dev("mlx5_0", vec![port(1, 4, "InfiniBand", None)]),
                dev(
                    "mlx5_1",
                    vec![
                        port(1, 4, "InfiniBand", None),
                        port(2, 1, "InfiniBand", None),
                    ],
                ),
            ],
            &["uverbs0", "uverbs1"],
            None,
            None,
        );
        let p = run(&snap(r, &[], &[]));
        assert!(p.changes.is_empty());
        assert!(p.warnings.iter().all(|w| w.severity == Severity::Info));
    }

    /// A vendor plugin (`NCCL_NET_PLUGIN` here; see also `vendor_profiles_leave_rdma_alone_on_the_real_path`):
    /// an RDMA setup that would otherwise be disabled (no verbs node, 8 MiB memlock) is left to the plugin.
    #[test]
    fn a_net_plugin_leaves_rdma_to_it() {
        let r = rdma(
            vec![dev("mlx5_0", vec![port(1, 4, "InfiniBand", None)])],
            &[],
            Some(MIB8),
            Some(MIB8),
        );
        // Control: without the plugin the same setup is disabled with a warning.
        let p = run(&snap(r.clone(), &[], &[]));
        assert_eq!(p.value_of("NCCL_IB_DISABLE"), Some("1"));
        assert_eq!(codes(&p), vec!["rdma-no-verbs-devices"]);
        let p = run(&snap(r, &[], &[("NCCL_NET_PLUGIN", "ofi")]));
        assert!(p.changes.is_empty(), "{:?}", p.changes);
        assert_eq!(codes(&p), vec!["rdma-vendor-plugin"]);
        assert!(p.warnings[0].message.contains("NCCL_NET_PLUGIN=ofi"));
        assert!(!p.raise_memlock);
    }

    /// The other vendor variables, through the whole decision (the path they really take): NCCL's RDMA
    /// variables stay untouched and the memlock limit is not raised, whatever the RDMA setup.
    #[test]
    fn vendor_profiles_leave_rdma_alone_on_the_real_path() {
        let r = rdma(
            vec![dev("mlx5_0", vec![port(1, 4, "InfiniBand", None)])],
            &["uverbs0"],
            Some(MIB8),
            None,
        );
        let links = ["lo", "eth0"];
        for (k, v) in [
            ("NCCL_NET", "AWS Libfabric"),
            ("FI_PROVIDER", "efa"),
            ("NCCL_GPUDIRECTTCPX_SOCKET_IFNAME", "eth1"),
            ("NCCL_FASTRAK_CTRL_DEV", "eth0"),
        ] {
            let s = snap(r.clone(), &links, &[(k, v)]);
            let p = crate::decide::decide(&s, &Config::default());
            for name in ["NCCL_IB_DISABLE", "NCCL_IB_HCA"] {
                assert_eq!(p.value_of(name), None, "{k}: {name}");
            }
            assert!(!p.raise_memlock, "{k}");
            assert!(
                p.warnings.iter().any(|w| w.code == "vendor-profile"),
                "{k}: {:?}",
                codes(&p)
            );
            // Control: without the vendor variable the memlock limit would be raised.
            let p = crate::decide::decide(&snap(r.clone(), &links, &[]), &Config::default());
            assert!(p.raise_memlock, "{:?}", p.warnings);
        }
    }

    #[test]
    fn mib_format() {
        assert_eq!(fmt_mib(8 << 20), "8 MiB");
        assert_eq!(fmt_mib(65536), "0.06 MiB (65536 B)");
    }
}
