//! Decision rules: InfiniBand / RoCE (`NCCL_IB_DISABLE`, `NCCL_IB_HCA`, `NCCL_IBEXT_DISABLE`, RLIMIT_MEMLOCK,
//! an inherited `NCCL_IB_GID_INDEX`).
//!
//! Pure: reads the [`Snapshot`] (filled by `probe::rdma` and `probe::nccl::find_net_plugins`), writes the
//! [`Plan`]. The rules mirror how NCCL's IB transport finds devices (`ncclIbInit`, src/transport/net_ib.cc
//! in 2.18–2.28; `ncclIbInitDevices`, src/transport/net_ib/init.cc in 2.29–2.30, the file split in 2.29.2):
//!
//! - it opens libibverbs and walks `ibv_get_device_list()`; rdma-core (libibverbs/init.c) silently drops every
//!   device whose `/dev/infiniband/uverbsN` node is missing, and NCCL skips a device it cannot open
//!   (`NET/IB : Unable to open device`). Either way a node that sees only some of its HCAs uses fewer NICs
//!   than its peers, and the job fails NCCL's net-mismatch guard or hangs (NVIDIA/nccl#2428): so every HCA's
//!   own node is judged (`class/infiniband_verbs/uverbsN/ibdev` names it), and `NCCL_IB_HCA` lists exactly
//!   the usable ones;
//! - it keeps ports whose `ibv_query_port` state is `IBV_PORT_ACTIVE` (sysfs `state` = `4: ACTIVE`) and whose
//!   link layer is InfiniBand or Ethernet (RoCE), filtered by `NCCL_IB_HCA` (list syntax of
//!   src/misc/utils.cc `parseStringList`/`matchIfList`: `=` for exact names, `name:port`);
//! - when no port is left it logs `NET/IB : No device found.` at INFO level and NCCL silently uses the socket
//!   transport (often 10× slower); when a port is kept but RLIMIT_MEMLOCK is small, `ibv_reg_mr` fails
//!   (`Call to ibv_reg_mr failed`, `ncclSystemError`) and the job dies at its first collective — unless the
//!   process holds `CAP_IPC_LOCK`, which lets it lock memory past the limit (mlock(2));
//! - an external net plugin (HPC-X's RDMA/SHARP `libnccl-net.so`) runs its own IB transport (`IBext`) that
//!   `NCCL_IB_DISABLE` does not switch off; its switch is `NCCL_IBEXT_DISABLE=1` (NVIDIA/nccl#676,
//!   nccl-tests#373); `NCCL_NET_PLUGIN=none` keeps any plugin from loading.
//!
//! A RoCE port needs a GID bound to a netdev of this network namespace (`gid_attrs/ndevs/<i>`): a pod without
//! its Multus/SR-IOV interface has none, and NCCL (2.21+ `NCCL_IB_GID_INDEX` auto-selection) finds no usable GID.
//! An inherited `NCCL_IB_GID_INDEX` is judged against each usable RoCE port's table (see `decide::gid`).

use crate::config::Config;
use crate::decide::gid;
use crate::decide::inherit::{settle, Fix, Inherited, Said, Verdict};
use crate::decide::switches::{self, Outcome, TurnOff};
use crate::decide::vendor::vendor_plugin;
use crate::findings::Finding;
use crate::nccl_rules::param_value;
use crate::plan::Plan;
use crate::snapshot::{Mib, NetPlugin, RdmaDevice, RdmaPort, RdmaSnapshot, Snapshot};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// `ibv_port_state` value of an active port (`IBV_PORT_ACTIVE`, sysfs `4: ACTIVE`).
pub const PORT_ACTIVE: u32 = crate::snapshot::PortState::ACTIVE.0;

/// The smallest effective RLIMIT_MEMLOCK (bytes) ncclenv accepts for RDMA: 1 GiB. NCCL registers its buffers
/// with `ibv_reg_mr` (src/transport/net_ib.cc, `ncclIbRegMrDmaBufInternal`); the common defaults 64 KiB and
/// 8 MiB make that fail.
pub const MEMLOCK_MIN_BYTES: u64 = 1 << 30;

/// Entries `NCCL_IB_HCA` may hold (`parseStringList`, src/misc/utils.cc: at most 16).
pub const MAX_HCA_ENTRIES: usize = 16;

const MIB: u64 = 1 << 20;

const DOCKER_RDMA_FLAGS: &str = "--device=/dev/infiniband --cap-add=IPC_LOCK --ulimit memlock=-1";

/// Decide `NCCL_IB_DISABLE`, `NCCL_IB_HCA`, `NCCL_IBEXT_DISABLE` and `Plan::raise_memlock` from the RDMA part
/// of the snapshot, and judge an inherited `NCCL_IB_GID_INDEX`.
///
/// In order:
/// 1. `snap.rdma == None` (not probed): nothing.
/// 2. A vendor network plugin is configured (`NCCL_NET`, `NCCL_NET_PLUGIN` other than `none`, `FI_PROVIDER`
///    (AWS EFA, aws-ofi-nccl), `NCCL_GPUDIRECTTCPX_*`, `NCCL_FASTRAK_*` (GKE TCPX/TCPXO)): it owns these
///    variables; info only (`rdma-vendor-plugin`).
/// 3. The evidence is assessed ([`assess`]) port by port: ACTIVE, its HCA's verbs node present and opening,
///    RoCE with its netdev here; then memlock below [`MEMLOCK_MIN_BYTES`] after raising soft to hard, unless
///    the command holds `CAP_IPC_LOCK`.
/// 4. An inherited `NCCL_IB_DISABLE` (any value) is kept (through the one rule, `decide::inherit::settle`,
///    as are an inherited `NCCL_IB_HCA` and `NCCL_IB_GID_INDEX`); a warning is added where the evidence contradicts
///    it (`NCCL_IB_DISABLE=0` with IB unusable), an info where IB would work but is disabled, and a warning
///    (`rdma-plugin-ignores-ib-disable`) when it disables IB while a net plugin that ignores it would load.
/// 5. Otherwise: unusable → `NCCL_IB_DISABLE=1` with the reason (and a warning where hardware exists but the
///    container is missing something), plus `NCCL_IBEXT_DISABLE=1` when a net plugin would load; usable →
///    `NCCL_IB_DISABLE` left alone, `raise_memlock` when soft < hard, and `NCCL_IB_HCA==dev,…` (exact names,
///    `dev:port` where only some ports qualify) when some visible HCA or ACTIVE port is excluded and
///    `NCCL_IB_HCA` is not inherited; HCAs excluded for their verbs node are named in a warning
///    (`rdma-hca-unusable`).
/// 6. Where IB stays on, an inherited `NCCL_IB_GID_INDEX` ≥ 0 that does not work on a usable RoCE port is
///    kept with a warning naming the index that would (`rdma-gid-index-unusable`).
pub fn decide_rdma(snap: &Snapshot, cfg: &Config, plan: &mut Plan) {
    let Some(rdma) = &snap.rdma else {
        return;
    };
    if let Some(key) = vendor_plugin(snap) {
        forced_ib(snap, rdma, cfg, plan);
        plan.finding(
            Finding::RdmaVendorPlugin,
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
            plan.finding(
                Finding::RdmaProbeError,
                format!("part of the RDMA probe failed: {err}"),
                "check that sysfs and /dev are mounted normally",
            );
        }
    }
    let links = link_names(snap);
    let a = assess(rdma, links.as_ref(), cfg);
    let plugin = snap.net_plugins.iter().find(|p| p.loads);

    // An inherited switch (environment or NCCL's config files) is kept with the evidence's verdict; an unset
    // one is set where the evidence says RDMA cannot work ([`ib_off`]).
    let judge = |inh: &Inherited| judge_ib_disable(&a, inh, snap, plugin);
    let ib_on = match switches::IB.decide(snap, plan, judge, || ib_off(&a)) {
        Outcome::Kept { off } => {
            let on = !off && matches!(a, Assessment::Usable { .. });
            if on {
                use_hcas(plan, &a, hca_inherited(snap).as_ref());
            }
            on
        }
        Outcome::Set => {
            // Raised all the same (field case F15, docs/rdma-shm.md): the command inherits the hard limit,
            // which is what the container was given; the warning names the limit that remains too low.
            if let Assessment::MemlockLow { raised, .. } = a {
                plan.raise_memlock |= raised;
            }
            disable_plugin_ib(plan, snap, plugin);
            false
        }
        Outcome::Unset => left_on(plan, &a, snap),
    };
    if ib_on {
        check_gid_index(snap, rdma, links.as_ref(), plan);
    }
}

/// `rdma-net-ib-forced`: an inherited `NCCL_NET=IB` (compared case-insensitively, as NCCL matches a net's
/// name: `strcasecmp` in src/plugin/net.cc, 2.30) forces NCCL's built-in IB network, which has no socket
/// fallback; where the evidence says IB cannot work here, NCCL finds no network and `ncclCommInitRank`
/// fails (break-it finding: doctor said "NCCL should work"). A warning (strict refuses); `NCCL_NET` stays as
/// the user set it, under the vendor profile it makes.
fn forced_ib(snap: &Snapshot, rdma: &RdmaSnapshot, cfg: &Config, plan: &mut Plan) {
    let Some(net) = Inherited::nccl("NCCL_NET", snap) else {
        return;
    };
    if !net.value.trim().eq_ignore_ascii_case("IB") {
        return;
    }
    // IB forced and switched off at once: NCCL's IB init returns an error, and no other net is allowed.
    let ib_off = switches::IB
        .inherited(snap)
        .filter(|i| switches::IB.turns_off(i));
    let why = match ib_off {
        Some(i) => format!(
            "{}{} turns it off",
            i.kept().trim_end_matches(" kept"),
            switches::IB.reading(&i)
        ),
        None => match assess(rdma, link_names(snap).as_ref(), cfg) {
            Assessment::NoDevice(w)
            | Assessment::NoActivePort(w)
            | Assessment::NoVerbsNodes(w)
            | Assessment::RoceNetdevMissing(w) => w,
            Assessment::MemlockLow { bytes, .. } => format!(
                "RLIMIT_MEMLOCK is {}, below {} MiB (ibv_reg_mr fails)",
                Mib(bytes),
                MEMLOCK_MIN_BYTES / MIB
            ),
            Assessment::ProbeFailed(_) | Assessment::Usable { .. } => return,
        },
    };
    plan.finding(
        Finding::RdmaNetIbForced,
        format!(
            "{} forces NCCL's IB network, which has no socket fallback, but {why}: NCCL finds no network and \
             ncclCommInitRank fails",
            net.kept().trim_end_matches(" kept")
        ),
        format!(
            "give the container its RDMA devices ({DOCKER_RDMA_FLAGS}), or unset NCCL_NET (NCCL_NET=Socket uses \
             sockets)"
        ),
    );
}

/// The netdev names of this namespace, when the network probe worked.
fn link_names(snap: &Snapshot) -> Option<BTreeSet<&str>> {
    snap.net
        .as_ref()
        .ok()
        .map(|n| n.links.iter().map(|l| l.name.as_str()).collect())
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
    /// ACTIVE ports, but no HCA whose verbs node is present and opens: rdma-core hides a device without its
    /// node and NCCL skips one it cannot open (description, with each HCA's reason).
    NoVerbsNodes(String),
    /// Only RoCE ports whose GIDs belong to netdevs absent from this namespace (description).
    RoceNetdevMissing(String),
    /// The effective memlock limit (bytes) is below [`MEMLOCK_MIN_BYTES`] and the command does not hold
    /// `CAP_IPC_LOCK`; `raised` when soft < hard.
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
        /// Excluded HCAs or ports with why (`mlx5_2 (port 1 DOWN)`); empty when every HCA qualifies.
        excluded: Vec<String>,
        /// The HCAs with ACTIVE ports excluded because their verbs node is missing or does not open, with
        /// why (`erdma_1 (no verbs node /dev/infiniband/uverbs1)`): the ones a warning names.
        unusable_hcas: Vec<String>,
        /// Soft RLIMIT_MEMLOCK below hard: raise it before exec.
        raise: bool,
        /// Effective memlock after raising (bytes, `None` = unlimited).
        memlock: Option<u64>,
        /// The memlock limit is below [`MEMLOCK_MIN_BYTES`] but the command holds `CAP_IPC_LOCK`.
        ipc_lock: bool,
    },
}

/// Why one HCA's verbs node keeps NCCL from using it, or `None` when it is fine or cannot be judged (sysfs
/// maps no node to the HCA while some `uverbsN` node exists: the older machine-wide rule applies).
pub fn verbs_problem(d: &RdmaDevice, rdma: &RdmaSnapshot) -> Option<String> {
    match &d.verbs {
        Some(v) if !v.present => Some(match &v.open_error {
            Some(e) => format!("verbs node {}: {e}", v.path),
            None => format!("no verbs node {}", v.path),
        }),
        Some(v) => v
            .open_error
            .as_ref()
            .map(|e| format!("verbs node {} does not open read-write: {e}", v.path)),
        None if rdma.uverbs.is_empty() => Some("no uverbs device node".into()),
        None => None,
    }
}

/// Why NCCL will not use one port, or `None` when it can: not ACTIVE, its HCA's verbs node
/// ([`verbs_problem`]), or RoCE without its netdev here.
fn port_problem(
    d: &RdmaDevice,
    p: &RdmaPort,
    rdma: &RdmaSnapshot,
    links: Option<&BTreeSet<&str>>,
) -> Option<String> {
    if p.state != PORT_ACTIVE {
        return Some(format!("port {}", p.port_state()));
    }
    verbs_problem(d, rdma).or_else(|| roce_problem(p, links))
}

/// Assess the RDMA snapshot. `links` are the netdev names of this namespace (`None` = unknown: every RoCE port
/// counts as usable). Pure.
pub fn assess(rdma: &RdmaSnapshot, links: Option<&BTreeSet<&str>>, cfg: &Config) -> Assessment {
    let active = match active_ports(rdma, cfg) {
        Ok(active) => active,
        Err(a) => return a,
    };
    let (usable, verbs_excluded, excluded_ports) = sort_ports(&active, rdma, links);
    let unusable_hcas: Vec<String> = verbs_excluded
        .iter()
        .map(|(d, why)| format!("{d} ({why})"))
        .collect();
    if usable.is_empty() {
        return no_usable_port(
            &active,
            rdma,
            cfg,
            &verbs_excluded,
            &unusable_hcas,
            &excluded_ports,
        );
    }
    // Memlock: the soft limit can be raised to the hard one without privilege; CAP_IPC_LOCK lifts it.
    let raise = below(rdma.memlock_soft, rdma.memlock_hard);
    let memlock = if raise {
        rdma.memlock_hard
    } else {
        rdma.memlock_soft
    };
    let low = memlock.filter(|b| *b < MEMLOCK_MIN_BYTES);
    let ipc_lock = low.is_some() && rdma.cap_ipc_lock == Some(true);
    if let (Some(bytes), false) = (low, ipc_lock) {
        return Assessment::MemlockLow {
            bytes,
            raised: raise,
        };
    }
    let (entries, mut excluded) = entries_and_exclusions(rdma, &usable, &verbs_excluded);
    excluded.extend(excluded_ports);
    Assessment::Usable {
        entries,
        excluded,
        unusable_hcas,
        raise,
        memlock,
        ipc_lock,
    }
}

/// A device and one of its ports.
type DevicePort<'a> = (&'a RdmaDevice, &'a RdmaPort);

/// The ACTIVE ports, or the assessment when there is none: the probe failed, no device, no ACTIVE port.
fn active_ports<'a>(
    rdma: &'a RdmaSnapshot,
    cfg: &Config,
) -> Result<Vec<DevicePort<'a>>, Assessment> {
    if rdma.devices.is_empty() {
        if let Some(e) = &rdma.error {
            return Err(Assessment::ProbeFailed(e.clone()));
        }
        return Err(Assessment::NoDevice(format!(
            "no RDMA device under {}/class/infiniband",
            cfg.sysfs.display()
        )));
    }
    let active: Vec<DevicePort<'a>> = rdma
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
                    .map(move |p| format!("{}/{}: {}", d.name, p.port, p.port_state()))
            })
            .collect();
        let states = if states.is_empty() {
            "no ports".to_string()
        } else {
            states.join(", ")
        };
        return Err(Assessment::NoActivePort(format!(
            "no ACTIVE RDMA port ({states})"
        )));
    }
    Ok(active)
}

/// The usable ports of `active`, by HCA; the HCAs without a usable verbs node, with why; the RoCE ports
/// whose netdev is not in this namespace, as `HCA:PORT (why)`.
#[allow(clippy::type_complexity)]
fn sort_ports<'a>(
    active: &[DevicePort<'a>],
    rdma: &RdmaSnapshot,
    links: Option<&BTreeSet<&str>>,
) -> (
    BTreeMap<&'a str, Vec<u32>>,
    BTreeMap<&'a str, String>,
    Vec<String>,
) {
    // Per HCA: its verbs node. Per port: RoCE needs its netdev here.
    let mut usable: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    let mut verbs_excluded: BTreeMap<&str, String> = BTreeMap::new();
    let mut excluded_ports: Vec<String> = Vec::new();
    for (d, p) in active {
        if let Some(why) = verbs_problem(d, rdma) {
            verbs_excluded.insert(d.name.as_str(), why);
            continue;
        }
        match roce_problem(p, links) {
            None => usable.entry(d.name.as_str()).or_default().push(p.port),
            Some(why) => excluded_ports.push(format!("{}:{} ({why})", d.name, p.port)),
        }
    }
    (usable, verbs_excluded, excluded_ports)
}

/// The assessment when no ACTIVE port is usable: RoCE ports without their netdev, or no usable verbs node.
fn no_usable_port(
    active: &[DevicePort],
    rdma: &RdmaSnapshot,
    cfg: &Config,
    verbs_excluded: &BTreeMap<&str, String>,
    unusable_hcas: &[String],
    excluded_ports: &[String],
) -> Assessment {
    if verbs_excluded.is_empty() {
        return Assessment::RoceNetdevMissing(format!(
            "every ACTIVE RDMA port is RoCE without its network interface in this namespace: {}",
            excluded_ports.join(", ")
        ));
    }
    let ports: Vec<String> = active.iter().map(|(d, p)| port_desc(d, p)).collect();
    let mapped = rdma.devices.iter().any(|d| d.verbs.is_some());
    let mut why = if mapped {
        format!(
            "ACTIVE RDMA port(s) {} but no HCA with a usable verbs node under {}/infiniband: {}; \
                 libibverbs hides a device without its node and NCCL skips one it cannot open",
            ports.join(", "),
            cfg.devfs.display(),
            unusable_hcas.join(", ")
        )
    } else {
        format!(
                "ACTIVE RDMA port(s) {} but no uverbs device under {}/infiniband: libibverbs hides every \
                 device without its node",
                ports.join(", "),
                cfg.devfs.display()
            )
    };
    if !excluded_ports.is_empty() {
        why.push_str(&format!("; also {}", excluded_ports.join(", ")));
    }
    Assessment::NoVerbsNodes(why)
}

/// The `NCCL_IB_HCA` entries (a whole HCA when all its ACTIVE ports are usable, else `HCA:PORT`) and the
/// HCAs left out, with why.
fn entries_and_exclusions(
    rdma: &RdmaSnapshot,
    usable: &BTreeMap<&str, Vec<u32>>,
    verbs_excluded: &BTreeMap<&str, String>,
) -> (Vec<String>, Vec<String>) {
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
                    .map(|p| format!("port {} {}", p.port, p.port_state()))
                    .collect();
                excluded.push(format!("{} ({})", d.name, st.join(", ")));
            }
            None => {
                if let Some(why) = verbs_excluded.get(d.name.as_str()) {
                    excluded.push(format!("{} ({why})", d.name));
                }
            }
            Some(ports) if ports.len() == active_ports.len() => entries.push(d.name.clone()),
            Some(ports) => entries.extend(ports.iter().map(|p| format!("{}:{p}", d.name))),
        }
    }
    (entries, excluded)
}

/// True when ncclenv's `NCCL_IB_DISABLE=1` here only skips a probe that finds nothing: no device under
/// `class/infiniband`, or no ACTIVE port (`Assessment::NoDevice`, `Assessment::NoActivePort`). NCCL on this
/// node then uses sockets with or without it (net_ib.cc `ncclIbInitDevices` finds no device), so a runner
/// that copies it to other nodes (`decide::spread`) may be denied it at no cost here; on a node with HCAs it
/// would switch InfiniBand off.
pub fn ib_disable_only_skips_probe(snap: &Snapshot, cfg: &Config) -> bool {
    let Some(rdma) = &snap.rdma else {
        return false;
    };
    let links = link_names(snap);
    matches!(
        assess(rdma, links.as_ref(), cfg),
        Assessment::NoDevice(_) | Assessment::NoActivePort(_)
    )
}

/// [`switches::IB`]'s rule when it is unset: where the evidence says RDMA cannot work, turn IB off with the
/// reason (and the warning where hardware exists but the container is missing something); `None` where the
/// probe failed or RDMA is usable ([`left_on`]).
fn ib_off(a: &Assessment) -> Option<TurnOff> {
    let (reason, said) = match a {
        Assessment::ProbeFailed(_) | Assessment::Usable { .. } => return None,
        Assessment::NoDevice(why) | Assessment::NoActivePort(why) => (
            format!("{why}: NET/IB would find nothing (net_ib.cc, ncclIbInitDevices); skip its probe"),
            None,
        ),
        Assessment::NoVerbsNodes(why) => (
            format!("{why}; NCCL would silently fall back to sockets"),
            Some(no_verbs(why)),
        ),
        Assessment::RoceNetdevMissing(why) => (
            format!("{why}; no usable GID, NCCL would use sockets"),
            Some(roce_netdev(why)),
        ),
        Assessment::MemlockLow { bytes, raised } => (
            format!(
                "RLIMIT_MEMLOCK {} is below {} MiB and the command does not hold CAP_IPC_LOCK: ibv_reg_mr \
                 would fail and the job would die",
                Mib(*bytes),
                MEMLOCK_MIN_BYTES / MIB
            ),
            Some(memlock_low(
                *bytes,
                *raised,
                "ncclenv disables RDMA (NCCL_IB_DISABLE=1)",
            )),
        ),
    };
    Some(TurnOff { reason, said })
}

/// `NCCL_IB_DISABLE` unset and left so ([`ib_off`] says `None`): a failed probe is said; usable RDMA gets its
/// HCAs ([`use_hcas`]). Returns true: IB stays on.
fn left_on(plan: &mut Plan, a: &Assessment, snap: &Snapshot) -> bool {
    match a {
        Assessment::ProbeFailed(e) => plan.finding(
            Finding::RdmaProbeError,
            format!("the RDMA probe failed ({e}); NCCL_IB_DISABLE left as NCCL decides"),
            "check that sysfs and /dev are mounted normally",
        ),
        _ => use_hcas(plan, a, hca_inherited(snap).as_ref()),
    }
    true
}

/// IB stays on: raise memlock, say why memlock does not matter, restrict `NCCL_IB_HCA` to the usable HCAs
/// (unless inherited) and name the HCAs whose verbs node failed.
fn use_hcas(plan: &mut Plan, a: &Assessment, hca: Option<&Inherited>) {
    let Assessment::Usable {
        entries,
        excluded,
        unusable_hcas,
        raise,
        memlock,
        ipc_lock,
    } = a
    else {
        return;
    };
    raise_memlock(plan, *raise, *memlock);
    if *ipc_lock {
        plan.finding(
            Finding::RdmaMemlockIpcLock,
            format!(
                "RLIMIT_MEMLOCK is {}, below {} MiB, but the command holds CAP_IPC_LOCK, which lets it lock \
                 memory past the limit: RDMA memory registration works, RDMA stays on",
                memlock.map_or_else(|| "unlimited".to_string(), |b| Mib(b).to_string()),
                MEMLOCK_MIN_BYTES / MIB
            ),
            "nothing to do; a command that drops CAP_IPC_LOCK would need --ulimit memlock=-1",
        );
    }
    if !unusable_hcas.is_empty() {
        plan.finding(
            Finding::RdmaHcaUnusable,
            format!(
                "RDMA HCA(s) with an ACTIVE port that NCCL cannot use in this container: {}; NCCL would use \
                 only {}, and a node that uses fewer NICs than its peers fails NCCL's net-mismatch check or \
                 hangs",
                unusable_hcas.join(", "),
                entries.join(", ")
            ),
            if hca.is_some() {
                format!(
                    "make sure the inherited NCCL_IB_HCA selects only ={}; better, give the container every \
                     HCA's verbs node (Kubernetes: one RDMA device-plugin resource per HCA; Docker: \
                     --device=/dev/infiniband)",
                    entries.join(",")
                )
            } else {
                "give the container every HCA's verbs node (Kubernetes: one RDMA device-plugin resource per \
                 HCA; Docker: --device=/dev/infiniband), so that every node uses the same NICs"
                    .to_string()
            },
        );
    }
    hca_list(plan, entries, excluded, hca);
}

/// IB stays on with the usable `entries` (and the `excluded` ones): `rdma-usable` when nothing is excluded;
/// else an inherited `NCCL_IB_HCA` kept through the one rule (`rdma-hca-inherited`), or `NCCL_IB_HCA` set to
/// exactly the usable entries (`rdma-hca-too-many` when they do not fit).
fn hca_list(plan: &mut Plan, entries: &[String], excluded: &[String], hca: Option<&Inherited>) {
    if excluded.is_empty() {
        plan.finding(
            Finding::RdmaUsable,
            format!("RDMA usable on {}", entries.join(", ")),
            "nothing to do",
        );
        if let Some(h) = hca {
            settle(plan, Fix::REPAIRS, h, Verdict::Works);
        }
        return;
    }
    if let Some(h) = hca {
        // Kept: it may well select only the usable HCAs; ncclenv cannot rewrite a user's selection.
        let said = Said::new(
            Finding::RdmaHcaInherited,
            format!(
                "RDMA usable on {}; not usable: {}; inherited NCCL_IB_HCA kept",
                entries.join(", "),
                excluded.join(", ")
            ),
            format!("make sure NCCL_IB_HCA selects only ={}", entries.join(",")),
        );
        settle(plan, Fix::REPAIRS, h, Verdict::risky(said));
    } else if entries.len() > MAX_HCA_ENTRIES {
        plan.finding(
            Finding::RdmaHcaTooMany,
            format!(
                "{} usable RDMA ports exceed the {MAX_HCA_ENTRIES} entries NCCL_IB_HCA can hold; not set (not \
                 usable: {})",
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

/// ncclenv disabled IB: a net plugin that would load runs its own IB transport, which `NCCL_IB_DISABLE`
/// does not reach; set its switch too (unless inherited).
fn disable_plugin_ib(plan: &mut Plan, snap: &Snapshot, plugin: Option<&NetPlugin>) {
    let Some(p) = plugin else {
        return;
    };
    // An inherited one is kept whatever its value (the user chose the plugin's switch), with a warning where
    // it leaves the plugin's IB on while ncclenv turns NCCL's off (break-it finding: `NCCL_IBEXT_DISABLE=0`
    // was kept silently and the plugin's registrations failed as the memlock warning predicted).
    let judge = |inh: &Inherited| {
        if switches::IBEXT.turns_off(inh) {
            return Verdict::Works;
        }
        Verdict::risky(Said::new(
            Finding::RdmaPluginIgnoresIbDisable,
            format!(
                "{}{}, but ncclenv disables NCCL's IB and the net plugin {} ({}) would load and run its own IB \
                 transport (IBext), which only NCCL_IBEXT_DISABLE=1 stops",
                inh.kept(),
                switches::IBEXT.reading(inh),
                p.path,
                p.source
            ),
            "set NCCL_IBEXT_DISABLE=1 (or NCCL_NET_PLUGIN=none to load no plugin)",
        ))
    };
    switches::IBEXT.decide(snap, plan, judge, || {
        Some(TurnOff {
            reason: format!(
                "the net plugin {} ({}) would load and run its own IB transport (IBext), which \
                     NCCL_IB_DISABLE does not switch off; NCCL_IBEXT_DISABLE=1 is its switch",
                p.path, p.source
            ),
            said: None,
        })
    });
}

/// The `NCCL_IB_HCA` NCCL sees already (environment or config file), if any.
fn hca_inherited(snap: &Snapshot) -> Option<Inherited<'_>> {
    Inherited::nccl("NCCL_IB_HCA", snap)
}

/// The verdict on an inherited `NCCL_IB_DISABLE`, kept whatever its value: a disabling one where RDMA looks
/// usable (info), or where a net plugin that ignores it would load (warning); an enabling one where the
/// evidence says RDMA will not work (no verbs node, RoCE without its netdev, memlock too low), or an info
/// where there is no RDMA at all.
fn judge_ib_disable(
    a: &Assessment,
    inh: &Inherited,
    snap: &Snapshot,
    plugin: Option<&NetPlugin>,
) -> Verdict {
    let kept = format!("{}{}", inh.kept(), switches::IB.reading(inh));
    let mut said = Vec::new();
    if switches::IB.turns_off(inh) {
        if let Assessment::Usable { entries, .. } = a {
            said.push(Said::new(
                Finding::RdmaIbDisabledInherited,
                format!(
                    "{kept}, although RDMA looks usable on {}",
                    entries.join(", ")
                ),
                "unset NCCL_IB_DISABLE to use RDMA",
            ));
        }
        let ibext_off = switches::IBEXT.disables(snap);
        let devices = !matches!(a, Assessment::NoDevice(_) | Assessment::ProbeFailed(_));
        if let (Some(p), false, true) = (plugin, ibext_off, devices) {
            said.push(Said::new(
                Finding::RdmaPluginIgnoresIbDisable,
                format!(
                    "{kept}, but the net plugin {} ({}) would load and use IB through its own transport \
                     (IBext), which NCCL_IB_DISABLE does not switch off",
                    p.path, p.source
                ),
                "also set NCCL_IBEXT_DISABLE=1 (or NCCL_NET_PLUGIN=none to load no plugin)",
            ));
        }
    } else {
        match a {
            Assessment::NoVerbsNodes(why) => said.push(no_verbs(&format!("{kept}, but {why}"))),
            Assessment::RoceNetdevMissing(why) => {
                said.push(roce_netdev(&format!("{kept}, but {why}")))
            }
            Assessment::MemlockLow { bytes, raised } => {
                // One warning: an info beside it saying "kept, nothing to do" contradicted it (break-it
                // finding); the remedy adds the switch that is in the user's hands.
                let mut w = memlock_low(
                    *bytes,
                    *raised,
                    &format!("{kept}: NCCL will try RDMA and its registrations fail"),
                );
                w.remedy = format!("{}; or set NCCL_IB_DISABLE=1 to use sockets", w.remedy);
                said.push(w);
            }
            Assessment::NoDevice(why) | Assessment::NoActivePort(why) => said.push(Said::new(
                Finding::RdmaIbDisabledInherited,
                format!("{kept}; {why}, so NCCL will use sockets"),
                "nothing to do",
            )),
            Assessment::ProbeFailed(_) | Assessment::Usable { .. } => {}
        }
    }
    if said.is_empty() {
        Verdict::Works
    } else {
        Verdict::Risky(said)
    }
}

/// An inherited `NCCL_IB_GID_INDEX`, kept through the one rule ([`settle`]) with its verdict
/// ([`judge_gid_index`]).
fn check_gid_index(
    snap: &Snapshot,
    rdma: &RdmaSnapshot,
    links: Option<&BTreeSet<&str>>,
    plan: &mut Plan,
) {
    let Some(inh) = Inherited::nccl("NCCL_IB_GID_INDEX", snap) else {
        return;
    };
    let verdict = judge_gid_index(snap, rdma, links, &inh);
    settle(plan, Fix::REPAIRS, &inh, verdict);
}

/// The verdict on an inherited `NCCL_IB_GID_INDEX`: one ≥ 0 (NCCL then skips its own choice) is judged on
/// every usable RoCE port; where it fails on one, it is still kept (ncclenv cannot know which index the job
/// meant), with a warning naming the index that would work, or saying to unset it. A negative or unreadable
/// one lets NCCL choose: it works.
fn judge_gid_index(
    snap: &Snapshot,
    rdma: &RdmaSnapshot,
    links: Option<&BTreeSet<&str>>,
    inh: &Inherited,
) -> Verdict {
    let (value, origin) = (inh.value, &inh.origin);
    let Some(index) = param_value(value).filter(|i| *i >= 0) else {
        return Verdict::Works;
    };
    let prefs = gid::gid_prefs(snap);
    let mut problems = Vec::new();
    let mut fixes = Vec::new();
    let mut auto_fixes_all = true;
    let mut best_set = BTreeSet::new();
    for d in &rdma.devices {
        for p in &d.ports {
            if !gid::is_roce(p) || port_problem(d, p, rdma, links).is_some() {
                continue;
            }
            let Some(why) = gid::index_problem(p, index, links) else {
                continue;
            };
            problems.push(format!("{}:{}: {why}", d.name, p.port));
            let best = gid::best_index(p, &prefs, links);
            auto_fixes_all &= best.is_some() && best == gid::nccl_auto_index(p, &prefs);
            match best {
                Some(b) => {
                    best_set.insert(b);
                    fixes.push(format!("{}:{} → {}", d.name, p.port, gid::describe(p, b)));
                }
                None => fixes.push(format!(
                    "{}:{} has no RoCE v2 GID whose netdev is in this pod",
                    d.name, p.port
                )),
            }
        }
    }
    if problems.is_empty() {
        return Verdict::Works;
    }
    let remedy = if auto_fixes_all {
        format!(
            "unset NCCL_IB_GID_INDEX (or set it to -1): NCCL 2.21+ then picks a working GID itself ({})",
            fixes.join("; ")
        )
    } else if best_set.len() == 1 && fixes.iter().all(|f| f.contains('→')) {
        format!(
            "set NCCL_IB_GID_INDEX={} ({})",
            best_set.iter().next().copied().unwrap_or(0),
            fixes.join("; ")
        )
    } else {
        format!(
            "use a GID that works on every port, or attach the missing interface: {}",
            fixes.join("; ")
        )
    };
    Verdict::risky(Said::new(
        Finding::RdmaGidIndexUnusable,
        format!(
            "inherited NCCL_IB_GID_INDEX={value} (from {origin}) kept, but {}: NCCL uses this index as given \
             and connecting its queue pairs would fail (Call to ibv_modify_qp failed)",
            problems.join("; ")
        ),
        remedy,
    ))
}

/// Per-HCA facts for `doctor`: the verbs node and whether NCCL can use each port, with NCCL's own GID choice
/// and the index that works (RoCE).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HcaReport {
    /// HCA name.
    pub device: String,
    /// Its `uverbsN`, when sysfs names one.
    pub verbs_node: Option<String>,
    /// `opens`, `missing`, `open failed: …`, or `not mapped` (no `class/infiniband_verbs` entry).
    pub verbs: String,
    /// Its ports.
    pub ports: Vec<PortReport>,
}

/// One port in [`HcaReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PortReport {
    /// Port number.
    pub port: u32,
    /// True when NCCL can use it here.
    pub usable: bool,
    /// Why not, when not.
    pub problem: Option<String>,
    /// The GID index NCCL 2.21+ picks itself (RoCE only).
    pub nccl_gid_index: Option<u32>,
    /// A GID index that works here (RoCE v2, netdev here, NCCL's preferred family first); RoCE only.
    pub working_gid_index: Option<u32>,
}

/// The per-HCA facts of the snapshot (empty when RDMA was not probed). Pure.
pub fn hca_report(snap: &Snapshot) -> Vec<HcaReport> {
    let Some(rdma) = &snap.rdma else {
        return Vec::new();
    };
    let links = link_names(snap);
    let prefs = gid::gid_prefs(snap);
    rdma.devices
        .iter()
        .map(|d| HcaReport {
            device: d.name.clone(),
            verbs_node: d.verbs.as_ref().map(|v| v.name.clone()),
            verbs: match &d.verbs {
                None => "not mapped".into(),
                Some(v) if v.opens() => "opens".into(),
                Some(v) => match &v.open_error {
                    Some(e) => format!("open failed: {e}"),
                    None => "missing".into(),
                },
            },
            ports: d
                .ports
                .iter()
                .map(|p| {
                    let problem = port_problem(d, p, rdma, links.as_ref());
                    PortReport {
                        port: p.port,
                        usable: problem.is_none(),
                        problem,
                        nccl_gid_index: gid::nccl_auto_index(p, &prefs),
                        working_gid_index: if gid::is_roce(p) {
                            gid::best_index(p, &prefs, links.as_ref())
                        } else {
                            None
                        },
                    }
                })
                .collect(),
        })
        .collect()
}

fn raise_memlock(plan: &mut Plan, raise: bool, memlock: Option<u64>) {
    if raise {
        plan.raise_memlock = true;
        plan.finding(
            Finding::RdmaMemlockRaised,
            format!(
                "soft RLIMIT_MEMLOCK raised to the hard limit ({}) for the command",
                memlock.map_or_else(|| "unlimited".to_string(), |b| Mib(b).to_string())
            ),
            "nothing to do",
        );
    }
}

/// `rdma-no-verbs-devices`: hardware present, `why` it is unusable here.
fn no_verbs(why: &str) -> Said {
    Said::new(
        Finding::RdmaNoVerbsDevices,
        format!("RDMA hardware is present but unusable in this container: {why}; NCCL would silently fall back to sockets"),
        format!("run the container with {DOCKER_RDMA_FLAGS} (Kubernetes: request the RDMA device-plugin resource and add capability IPC_LOCK)"),
    )
}

/// `rdma-roce-netdev-missing`: `why` no RoCE port has its netdev here.
fn roce_netdev(why: &str) -> Said {
    Said::new(
        Finding::RdmaRoceNetdevMissing,
        format!("{why}; NCCL would find no usable GID and fall back to sockets"),
        "attach the RoCE interface to the pod (Multus / SR-IOV network annotation) or run with host networking",
    )
}

/// `rdma-memlock-low`; `done` says what was done about it (RDMA disabled, or an inherited value kept).
fn memlock_low(bytes: u64, raised: bool, done: &str) -> Said {
    let which = if raised {
        "hard RLIMIT_MEMLOCK"
    } else {
        "RLIMIT_MEMLOCK"
    };
    Said::new(
        Finding::RdmaMemlockLow,
        format!(
            "{which} is {}, below {} MiB: RDMA memory registration (ibv_reg_mr) would fail; {done}",
            Mib(bytes),
            MEMLOCK_MIN_BYTES / MIB
        ),
        "run the container with --ulimit memlock=-1 (Kubernetes: raise the container runtime's memlock limit, e.g. LimitMEMLOCK=infinity)",
    )
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Severity;
    use crate::snapshot::RdmaGid;
    use crate::test_machine::{codes, has_warning, warning, warnings};

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
            gid_tbl_len: 1,
        }
    }
    fn dev(name: &str, ports: Vec<RdmaPort>) -> RdmaDevice {
        RdmaDevice {
            name: name.into(),
            ports,
            verbs: None,
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
            cap_ipc_lock: None,
        }
    }
    fn snap(r: RdmaSnapshot, links: &[&str], env: &[(&str, &str)]) -> Snapshot {
        crate::test_snapshot::SnapshotBuilder::new()
            .rdma(r)
            .links(links)
            .envs(env)
            .build()
    }
    fn run(s: &Snapshot) -> Plan {
        let mut p = Plan::default();
        decide_rdma(s, &Config::default(), &mut p);
        p
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

    /// NCCL reads `NCCL_IB_DISABLE`, `NCCL_IB_HCA` and `NCCL_NET` from its config files too (`initEnv`,
    /// src/misc/param.cc): a value there is kept like an inherited one.
    #[test]
    fn config_file_values_count_as_inherited() {
        let conf = |pairs: &[(&str, &str)]| crate::snapshot::ConfFile {
            path: "/root/.nccl.conf".into(),
            values: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            error: None,
        };
        // No verbs node: ncclenv would set NCCL_IB_DISABLE=1; the file's 0 is kept, with the warning.
        let r = rdma(
            vec![dev("mlx5_0", vec![port(1, 4, "InfiniBand", None)])],
            &[],
            None,
            None,
        );
        let mut s = snap(r, &[], &[]);
        s.conf_files.push(conf(&[("NCCL_IB_DISABLE", "0")]));
        let p = run(&s);
        assert!(p.changes.is_empty(), "{:?}", p.changes);
        assert_eq!(codes(&p), vec!["rdma-no-verbs-devices"]);
        assert!(p.warnings[0]
            .message
            .contains("NCCL_IB_DISABLE=0 (from /root/.nccl.conf) kept"));
        // NCCL_NET from the file: the plugin owns the transport.
        s.conf_files = vec![conf(&[("NCCL_NET", "AWS Libfabric")])];
        let p = run(&s);
        assert!(p.changes.is_empty(), "{:?}", p.changes);
        assert_eq!(codes(&p), vec!["rdma-vendor-plugin"]);
        assert!(p.warnings[0].message.contains("/root/.nccl.conf"));
        // NCCL_NET=IB (any case) forces IB with no socket fallback: here no verbs node, so init fails
        // (break-it finding); NCCL_NET=Socket does not.
        for net in ["IB", "ib"] {
            s.conf_files = vec![conf(&[("NCCL_NET", net)])];
            let p = run(&s);
            assert!(p.changes.is_empty(), "{:?}", p.changes);
            assert_eq!(codes(&p), vec!["rdma-net-ib-forced", "rdma-vendor-plugin"]);
            assert!(
                p.warnings[0].message.contains("no socket fallback"),
                "{}",
                p.warnings[0].message
            );
        }
        s.conf_files = vec![conf(&[("NCCL_NET", "Socket")])];
        assert_eq!(codes(&run(&s)), vec!["rdma-vendor-plugin"]);
        // Forced and switched off at once, even where IB would work.
        let mut t = snap(
            rdma(
                vec![dev("mlx5_0", vec![port(1, 4, "InfiniBand", None)])],
                &["uverbs0"],
                None,
                None,
            ),
            &["ib0"],
            &[("NCCL_NET", "IB"), ("NCCL_IB_DISABLE", "1")],
        );
        let p = run(&t);
        assert_eq!(codes(&p), vec!["rdma-net-ib-forced", "rdma-vendor-plugin"]);
        assert!(
            p.warnings[0]
                .message
                .contains("NCCL_IB_DISABLE=1 turns it off"),
            "{}",
            p.warnings[0].message
        );
        t.env.remove("NCCL_IB_DISABLE");
        assert_eq!(codes(&run(&t)), vec!["rdma-vendor-plugin"]);
        // NCCL_IB_HCA from the file: not overridden.
        let r = rdma(
            vec![
                dev("mlx5_0", vec![port(1, 4, "InfiniBand", None)]),
                dev("mlx5_1", vec![port(1, 1, "InfiniBand", None)]),
            ],
            &["uverbs0", "uverbs1"],
            None,
            None,
        );
        let mut s = snap(r, &[], &[]);
        assert_eq!(run(&s).value_of("NCCL_IB_HCA"), Some("=mlx5_0"));
        s.conf_files.push(conf(&[("NCCL_IB_HCA", "mlx5")]));
        let p = run(&s);
        assert_eq!(p.value_of("NCCL_IB_HCA"), None);
        assert!(has_warning(&p, "rdma-hca-inherited"));
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
        assert!(p.warnings[0]
            .message
            .contains("ncclenv disables RDMA (NCCL_IB_DISABLE=1)"));
        assert!(!p.raise_memlock);
    }

    /// With `NCCL_IB_DISABLE=0` inherited, IB stays on: the memlock warning says the value was kept, never
    /// that RDMA is disabled.
    #[test]
    fn memlock_low_with_ib_kept_says_so() {
        let r = rdma(
            vec![dev("mlx5_0", vec![port(1, 4, "InfiniBand", None)])],
            &["uverbs0"],
            Some(MIB8),
            Some(MIB8),
        );
        let p = run(&snap(r, &["ib0"], &[("NCCL_IB_DISABLE", "0")]));
        assert!(p.changes.is_empty(), "{:?}", p.changes);
        let w = warning(&p, "rdma-memlock-low");
        assert!(!w.message.contains("disable"), "{}", w.message);
        assert!(
            w.message.contains("inherited NCCL_IB_DISABLE=0 kept"),
            "{}",
            w.message
        );
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
            assert!(has_warning(&p, "vendor-profile"), "{k}: {:?}", codes(&p));
            // Control: without the vendor variable the memlock limit would be raised.
            let p = crate::decide::decide(&snap(r.clone(), &links, &[]), &Config::default());
            assert!(p.raise_memlock, "{:?}", p.warnings);
        }
    }

    /// A verbs node as the probe records it: `Ok` = opens, `Err(None)` = missing, `Err(Some(e))` = open error.
    fn verbs(n: u32, state: Result<(), Option<&str>>) -> Option<crate::snapshot::VerbsNode> {
        Some(crate::snapshot::VerbsNode {
            name: format!("uverbs{n}"),
            path: format!("/dev/infiniband/uverbs{n}"),
            present: !matches!(state, Err(None)),
            open_error: match state {
                Err(Some(e)) => Some(e.to_string()),
                _ => None,
            },
        })
    }

    /// F22: erdma_0 and erdma_1, RoCE on net1 / net2, memlock unlimited; erdma_1's node as given.
    fn f22(erdma_1: Result<(), Option<&str>>) -> Snapshot {
        let mut d0 = dev("erdma_0", vec![port(1, 4, "Ethernet", Some("net1"))]);
        d0.verbs = verbs(0, Ok(()));
        let mut d1 = dev("erdma_1", vec![port(1, 4, "Ethernet", Some("net2"))]);
        d1.verbs = verbs(1, erdma_1);
        let mut uv = vec!["uverbs0"];
        if erdma_1 != Err(None) {
            uv.push("uverbs1");
        }
        snap(
            rdma(vec![d0, d1], &uv, None, None),
            &["lo", "eth0", "net1", "net2"],
            &[],
        )
    }

    #[test]
    fn f22_one_hca_without_its_verbs_node() {
        let p = run(&f22(Err(None)));
        assert_eq!(p.value_of("NCCL_IB_HCA"), Some("=erdma_0"));
        assert_eq!(p.value_of("NCCL_IB_DISABLE"), None);
        assert_eq!(codes(&p), vec!["rdma-hca-unusable"]);
        let w = &p.warnings[0];
        assert!(
            w.message.contains("erdma_1")
                && w.message.contains("no verbs node /dev/infiniband/uverbs1"),
            "{w:?}"
        );
        assert!(!w.message.contains("erdma_0 ("), "{w:?}");
        assert!(!w.strict_refuses);
        // Variant: the node exists but does not open.
        let p = run(&f22(Err(Some("Permission denied (os error 13)"))));
        assert_eq!(p.value_of("NCCL_IB_HCA"), Some("=erdma_0"));
        assert_eq!(codes(&p), vec!["rdma-hca-unusable"]);
        assert!(
            p.warnings[0].message.contains("Permission denied"),
            "{:?}",
            p.warnings
        );
        // Both nodes fine: no list, no warning.
        let p = run(&f22(Ok(())));
        assert_eq!(p.value_of("NCCL_IB_HCA"), None);
        assert_eq!(codes(&p), vec!["rdma-usable"]);
        // An inherited NCCL_IB_HCA is kept, the warning still names erdma_1.
        let mut s = f22(Err(None));
        s.env.insert("NCCL_IB_HCA".into(), "erdma".into());
        let p = run(&s);
        assert_eq!(p.value_of("NCCL_IB_HCA"), None);
        assert!(codes(&p).contains(&"rdma-hca-unusable"));
        assert!(codes(&p).contains(&"rdma-hca-inherited"));
    }

    #[test]
    fn no_hca_with_a_usable_node_disables() {
        let mut s = f22(Err(None));
        if let Some(r) = s.rdma.as_mut() {
            r.devices[0].verbs = verbs(0, Err(Some("No such device or address (os error 6)")));
        }
        let p = run(&s);
        assert_eq!(p.value_of("NCCL_IB_DISABLE"), Some("1"));
        assert_eq!(codes(&p), vec!["rdma-no-verbs-devices"]);
        let m = &p.warnings[0].message;
        assert!(
            m.contains("erdma_0") && m.contains("No such device") && m.contains("erdma_1"),
            "{m}"
        );
        assert!(!codes(&p).contains(&"rdma-hca-unusable"));
    }

    fn ib_8mib(cap: Option<bool>) -> Snapshot {
        let mut d = dev("mlx5_0", vec![port(1, 4, "InfiniBand", None)]);
        d.verbs = verbs(0, Ok(()));
        let mut r = rdma(vec![d], &["uverbs0"], Some(MIB8), Some(MIB8));
        r.cap_ipc_lock = cap;
        snap(r, &["eth0"], &[])
    }

    #[test]
    fn f31_ipc_lock_lifts_the_memlock_limit() {
        let p = run(&ib_8mib(Some(true)));
        assert_eq!(p.value_of("NCCL_IB_DISABLE"), None);
        assert!(
            codes(&p).contains(&"rdma-memlock-ipc-lock"),
            "{:?}",
            codes(&p)
        );
        assert!(!codes(&p).contains(&"rdma-memlock-low"));
        assert!(!p.has_warnings());
        for cap in [Some(false), None] {
            let p = run(&ib_8mib(cap));
            assert_eq!(p.value_of("NCCL_IB_DISABLE"), Some("1"), "{cap:?}");
            assert_eq!(codes(&p), vec!["rdma-memlock-low"], "{cap:?}");
            assert!(p.changes[0].reason.contains("CAP_IPC_LOCK"));
        }
        // An unlimited limit needs no capability: no note.
        let mut s = ib_8mib(Some(true));
        if let Some(r) = s.rdma.as_mut() {
            (r.memlock_soft, r.memlock_hard) = (None, None);
        }
        assert!(!codes(&run(&s)).contains(&"rdma-memlock-ipc-lock"));
    }

    fn plugin(loads: bool) -> NetPlugin {
        NetPlugin {
            path: "/opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so".into(),
            source: "LD_LIBRARY_PATH".into(),
            loads,
        }
    }

    #[test]
    fn f25_plugin_gets_its_own_switch() {
        let mut s = ib_8mib(Some(false));
        s.net_plugins = vec![plugin(true)];
        let p = run(&s);
        assert_eq!(p.value_of("NCCL_IB_DISABLE"), Some("1"));
        assert_eq!(p.value_of("NCCL_IBEXT_DISABLE"), Some("1"));
        assert!(p
            .changes
            .iter()
            .any(|c| c.reason.contains("libnccl-net.so")));
        // A plugin that does not load (an HPC-X folder off the loader path), or none: no switch.
        s.net_plugins = vec![plugin(false)];
        assert_eq!(run(&s).value_of("NCCL_IBEXT_DISABLE"), None);
        s.net_plugins.clear();
        assert_eq!(run(&s).value_of("NCCL_IBEXT_DISABLE"), None);
        // Inherited NCCL_IBEXT_DISABLE: kept; one that leaves the plugin's IB on is a warning (break-it).
        s.net_plugins = vec![plugin(true)];
        s.env.insert("NCCL_IBEXT_DISABLE".into(), "0".into());
        let p = run(&s);
        assert_eq!(p.value_of("NCCL_IBEXT_DISABLE"), None);
        let w = warning(&p, "rdma-plugin-ignores-ib-disable");
        assert!(
            w.message.contains("inherited NCCL_IBEXT_DISABLE=0 kept")
                && w.remedy.starts_with("set NCCL_IBEXT_DISABLE=1"),
            "{w:?}"
        );
        s.env.insert("NCCL_IBEXT_DISABLE".into(), "1".into());
        assert!(!codes(&run(&s)).contains(&"rdma-plugin-ignores-ib-disable"));
        // An empty one is unset: ncclenv sets it.
        s.env.insert("NCCL_IBEXT_DISABLE".into(), String::new());
        assert_eq!(run(&s).value_of("NCCL_IBEXT_DISABLE"), Some("1"));
        s.env.remove("NCCL_IBEXT_DISABLE");
        // IB usable: nothing to switch off.
        let mut s = ib_8mib(Some(true));
        s.net_plugins = vec![plugin(true)];
        assert_eq!(run(&s).value_of("NCCL_IBEXT_DISABLE"), None);
    }

    #[test]
    fn f25_user_disabled_ib_with_a_plugin_warns() {
        let mut s = ib_8mib(Some(true));
        s.net_plugins = vec![plugin(true)];
        s.env.insert("NCCL_IB_DISABLE".into(), "1".into());
        let p = run(&s);
        assert!(p.changes.is_empty());
        assert!(
            codes(&p).contains(&"rdma-plugin-ignores-ib-disable"),
            "{:?}",
            codes(&p)
        );
        let w = warnings(&p, "rdma-plugin-ignores-ib-disable").next();
        assert!(w.is_some_and(|w| w.remedy.contains("NCCL_IBEXT_DISABLE=1")
            && w.remedy.contains("NCCL_NET_PLUGIN=none")));
        // Not when the plugin's switch is set too, nor without a plugin, nor with NCCL_IB_DISABLE=0.
        let mut t = s.clone();
        t.env.insert("NCCL_IBEXT_DISABLE".into(), "1".into());
        assert!(!codes(&run(&t)).contains(&"rdma-plugin-ignores-ib-disable"));
        let mut t = s.clone();
        t.net_plugins.clear();
        assert!(!codes(&run(&t)).contains(&"rdma-plugin-ignores-ib-disable"));
        let mut t = s.clone();
        t.env.insert("NCCL_IB_DISABLE".into(), "0".into());
        assert!(!codes(&run(&t)).contains(&"rdma-plugin-ignores-ib-disable"));
        // NCCL_NET_PLUGIN=none is no vendor plugin: the rules run.
        let mut t = ib_8mib(Some(false));
        t.env.insert("NCCL_NET_PLUGIN".into(), "none".into());
        let p = run(&t);
        assert_eq!(p.value_of("NCCL_IB_DISABLE"), Some("1"));
        assert!(!codes(&p).contains(&"rdma-vendor-plugin"));
        t.env.insert("NCCL_NET_PLUGIN".into(), "ofi".into());
        assert_eq!(codes(&run(&t)), vec!["rdma-vendor-plugin"]);
    }

    /// One usable RoCE HCA with the usual mlx5 table on net1, plus an IPv4-mapped v2 entry on net2.
    fn roce_table(links: &[&str], gid_index: Option<&str>) -> Snapshot {
        let g = |index: u32, gid: &str, kind: &str, ndev: &str| RdmaGid {
            index,
            gid: gid.into(),
            kind: Some(kind.into()),
            ndev: Some(ndev.into()),
        };
        let mut p = port(1, 4, "Ethernet", Some("net1"));
        p.gids = vec![
            g(
                0,
                "fe80:0000:0000:0000:1c34:daff:fe5a:0001",
                "IB/RoCE v1",
                "net1",
            ),
            g(
                1,
                "fe80:0000:0000:0000:1c34:daff:fe5a:0001",
                "RoCE v2",
                "net1",
            ),
            g(
                2,
                "0000:0000:0000:0000:0000:ffff:0a0a:0005",
                "IB/RoCE v1",
                "net1",
            ),
            g(
                3,
                "0000:0000:0000:0000:0000:ffff:0a0a:0005",
                "RoCE v2",
                "net1",
            ),
            g(
                4,
                "0000:0000:0000:0000:0000:ffff:0a14:0005",
                "RoCE v2",
                "net2",
            ),
        ];
        p.gid_tbl_len = 16;
        let mut d = dev("mlx5_2", vec![p]);
        d.verbs = verbs(2, Ok(()));
        let env: Vec<(&str, &str)> = gid_index
            .map(|v| ("NCCL_IB_GID_INDEX", v))
            .into_iter()
            .collect();
        snap(rdma(vec![d], &["uverbs2"], None, None), links, &env)
    }

    #[test]
    fn inherited_gid_index_judged_per_port() {
        let here = ["lo", "eth0", "net1", "net2"];
        // Unset, -1 (auto) and a working index: nothing to say.
        for v in [None, Some("-1"), Some("3")] {
            assert!(
                !codes(&run(&roce_table(&here, v))).contains(&"rdma-gid-index-unusable"),
                "{v:?}"
            );
        }
        // RoCE v1: kept, warned, and NCCL's own choice (3) works: unset it.
        let p = run(&roce_table(&here, Some("2")));
        assert!(p.changes.is_empty(), "{:?}", p.changes);
        let w = warnings(&p, "rdma-gid-index-unusable").next();
        let w = w.expect("rdma-gid-index-unusable");
        assert!(
            w.message.contains("RoCE v1") && w.message.contains("mlx5_2:1"),
            "{w:?}"
        );
        assert!(
            w.remedy.starts_with("unset NCCL_IB_GID_INDEX")
                && w.remedy.contains("3 (::ffff:10.10.0.5"),
            "{w:?}"
        );
        assert!(w.strict_refuses);
        // An empty slot, and one beyond the table.
        for (v, why) in [("9", "empty"), ("16", "beyond")] {
            let p = run(&roce_table(&here, Some(v)));
            let w = warnings(&p, "rdma-gid-index-unusable").next();
            assert!(
                w.is_some_and(|w| w.message.contains(why)),
                "{v}: {:?}",
                p.warnings
            );
        }
        // net1 is not in the pod: index 3 fails, NCCL's own choice (3) too; 4 (net2) works: set it.
        let p = run(&roce_table(&["lo", "eth0", "net2"], Some("3")));
        let w = warnings(&p, "rdma-gid-index-unusable").next();
        let w = w.expect("warning");
        assert!(w.message.contains("net1"), "{w:?}");
        assert!(w.remedy.starts_with("set NCCL_IB_GID_INDEX=4"), "{w:?}");
        // From a config file too.
        let mut s = roce_table(&here, None);
        s.conf_files.push(crate::snapshot::ConfFile {
            path: "/etc/nccl.conf".into(),
            values: vec![("NCCL_IB_GID_INDEX".into(), "0".into())],
            error: None,
        });
        let p = run(&s);
        assert!(
            warnings(&p, "rdma-gid-index-unusable").any(|w| w.message.contains("/etc/nccl.conf"))
        );
        // IB disabled: no judgement. InfiniBand ports: NCCL ignores the index.
        let mut s = roce_table(&here, Some("2"));
        s.env.insert("NCCL_IB_DISABLE".into(), "1".into());
        assert!(!codes(&run(&s)).contains(&"rdma-gid-index-unusable"));
        let mut s = ib_8mib(Some(true));
        s.env.insert("NCCL_IB_GID_INDEX".into(), "7".into());
        assert!(!codes(&run(&s)).contains(&"rdma-gid-index-unusable"));
    }

    #[test]
    fn hca_report_has_per_device_facts() {
        let r = hca_report(&f22(Err(None)));
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].device.as_str(), r[0].verbs.as_str()),
            ("erdma_0", "opens")
        );
        assert!(r[0].ports[0].usable);
        assert_eq!(
            (r[1].verbs_node.as_deref(), r[1].verbs.as_str()),
            (Some("uverbs1"), "missing")
        );
        assert!(!r[1].ports[0].usable);
        assert!(r[1].ports[0]
            .problem
            .as_deref()
            .is_some_and(|p| p.contains("uverbs1")));
        let r = hca_report(&roce_table(&["net1"], None));
        assert_eq!(r[0].ports[0].nccl_gid_index, Some(3));
        assert_eq!(r[0].ports[0].working_gid_index, Some(3));
        let r = hca_report(&ib_8mib(None));
        assert_eq!(
            (
                r[0].ports[0].nccl_gid_index,
                r[0].ports[0].working_gid_index
            ),
            (None, None)
        );
        assert!(hca_report(&Snapshot::default()).is_empty());
    }

    #[test]
    fn mib_format() {
        assert_eq!(Mib(8 << 20).to_string(), "8 MiB");
        assert_eq!(Mib(65536).to_string(), "0.06 MiB (65536 B)");
    }
}
