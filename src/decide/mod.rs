//! The pure decision: [`decide`] turns a [`Snapshot`] and a [`Config`] into a [`Plan`]. No I/O here: every
//! rule reads plain data, so each is tested with plain values.

pub mod debug;
pub mod gid;
pub mod host;
pub mod interface;
pub mod rdma;
pub mod shm;

use crate::config::Config;
use crate::findings::Finding;
use crate::nccl_rules::effective;
use crate::plan::{Plan, Warning};
use crate::snapshot::Snapshot;

/// Variables (or prefixes) that mean a vendor network plugin manages NCCL's transport: AWS EFA
/// (`FI_PROVIDER`, aws-ofi-nccl), GKE GPUDirect-TCPX/TCPXO (`NCCL_GPUDIRECTTCPX_*`, `NCCL_FASTRAK_*`, enforced
/// by a config checker), an explicit `NCCL_NET`, or a `NCCL_NET_PLUGIN` other than `none` (with `none`
/// NCCL's net-plugin loader, src/plugin/, loads no plugin).
const VENDOR_KEYS: &[&str] = &[
    "NCCL_NET",
    "NCCL_NET_PLUGIN",
    "FI_PROVIDER",
    "NCCL_GPUDIRECTTCPX_",
    "NCCL_FASTRAK_",
];

/// The vendor profile keys present in the inherited environment or NCCL's config files.
pub fn vendor_profile(snap: &Snapshot) -> Vec<String> {
    let mut keys: Vec<String> = snap
        .env
        .iter()
        .chain(
            snap.conf_files
                .iter()
                .flat_map(|f| f.values.iter().map(|(k, v)| (k, v))),
        )
        .filter(|(k, v)| {
            !(k.as_str() == "NCCL_NET_PLUGIN" && (v.is_empty() || v.eq_ignore_ascii_case("none")))
        })
        .map(|(k, _)| k)
        .filter(|k| {
            VENDOR_KEYS.iter().any(|v| {
                if v.ends_with('_') {
                    k.starts_with(v)
                } else {
                    k == v
                }
            })
        })
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Decide everything. Order: `NCCLENV_DISABLE` → host findings (GPU list, NCCL versions) → launcher-argument
/// problems → a peer that did not resolve → hands-off cases (a failed probe, `NCCL_COMM_ID`) → interface →
/// RDMA → `/dev/shm` → NCCL's debug logs (`NCCLENV_DEBUG=1`) → strict mode (every finding marked
/// `strict_refuses` becomes exit 78). Under a vendor network profile (F18) the interface is decided without
/// repairing any inherited value and RDMA is left alone.
///
/// `NCCL_COMM_ID` owns bootstrap, not shared memory: the `/dev/shm` rule runs under it too (as under a vendor
/// profile), while `hands_off` stays true for the network.
///
/// Fail open: when the network probe or a config file failed, the plan changes nothing and carries a
/// warning (a refusal under `NCCLENV_STRICT=1`). A peer whose name did not resolve within
/// `NCCLENV_RESOLVE_TIMEOUT_MS` is not a probe failure: `peer-unresolved` (strict), then the decision goes
/// on as if no peer were named (F17).
pub fn decide(snap: &Snapshot, cfg: &Config) -> Plan {
    let mut plan = Plan::default();
    for (name, near) in &cfg.unknown_vars {
        plan.finding(
            Finding::UnknownVariable,
            unknown_variable_text(name, near.as_deref()),
            match near {
                Some(n) => match crate::cli::variable_values(n) {
                    Some(values) => format!("rename it to {n} (values: {values})"),
                    None => format!("rename it to {n}"),
                },
                None => "remove it; ncclenv --help lists its variables".to_string(),
            },
        );
    }
    if cfg.disable {
        plan.hands_off = true;
        plan.finding(
            Finding::Disabled,
            format!("{}: ncclenv changes nothing", cfg.disable_words()),
            "unset NCCLENV_DISABLE to let ncclenv decide",
        );
        return plan;
    }
    host::decide_host(snap, &mut plan);
    for p in &snap.job.problems {
        plan.finding(
            Finding::LauncherArgument,
            p.clone(),
            "fix the launcher argument; ncclenv ignored it",
        );
    }
    if let Some(p) = snap.peer.as_ref().filter(|p| p.addrs.is_empty()) {
        plan.finding(
            Finding::PeerUnresolved,
            format!(
                "the master's name {} (from {}) did not resolve: tried for {} ms ({} attempt{}){}; deciding as if no master were named",
                p.host,
                p.source,
                p.resolve_ms,
                p.resolve_attempts,
                if p.resolve_attempts == 1 { "" } else { "s" },
                p.error.as_ref().map_or(String::new(), |e| format!(", last: {e}"))
            ),
            "make the name resolvable before the job starts (a headless Service for the master pod, DNS), raise NCCLENV_RESOLVE_TIMEOUT_MS, or give the master as an address",
        );
    }
    // Fail open on probe errors.
    // (what failed, what the user can do)
    let mut failures: Vec<(String, &str)> = Vec::new();
    if let Err(e) = &snap.net {
        failures.push((
            format!("cannot read the network over netlink: {e}"),
            "run ncclenv where it can open a NETLINK_ROUTE socket (any container can), or set NCCL_SOCKET_IFNAME yourself",
        ));
    }
    for f in &snap.conf_files {
        if let Some(e) = &f.error {
            failures.push((
                format!("cannot read NCCL config file {}: {e}", f.path),
                "make the NCCL config file readable, fix NCCL_CONF_FILE, or remove the file",
            ));
        }
    }
    // The interface ncclenv would export must have a name it can write: a name that is not UTF-8 is kept in
    // the world (it counts as an interface) but cannot be put into NCCL_SOCKET_IFNAME, so ncclenv fails open.
    let mut with_interface = None;
    if failures.is_empty() && effective("NCCL_COMM_ID", &snap.env, &snap.conf_files).is_none() {
        let vendor_mode = !vendor_profile(snap).is_empty();
        let mut trial = plan.clone();
        interface::decide_interface(snap, cfg, &mut trial, vendor_mode);
        match interface::unwritable_choice(snap, &trial) {
            Some(name) => failures.push((
                format!("the interface ncclenv would choose, {name}, has a name that is not UTF-8 (shown with \\x escapes), which ncclenv cannot write into NCCL_SOCKET_IFNAME"),
                "rename the interface (ip link set dev OLD name eth1) or set NCCL_SOCKET_IFNAME yourself",
            )),
            None if !vendor_mode => with_interface = Some(trial),
            None => {}
        }
    }
    if !failures.is_empty() {
        plan.hands_off = true;
        let msg = format!(
            "{}; ncclenv leaves the environment untouched",
            failures
                .iter()
                .map(|(m, _)| m.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        );
        let remedy = failures
            .iter()
            .map(|(_, r)| *r)
            .collect::<Vec<_>>()
            .join("; ");
        plan.finding(Finding::ProbeFailed, msg, remedy);
        return finish(plan, snap, cfg);
    }
    if let Some((v, origin)) = effective("NCCL_COMM_ID", &snap.env, &snap.conf_files) {
        plan.hands_off = true;
        let defects = crate::nccl_defects::applying(snap);
        let lo = defects
            .iter()
            .find(|(d, _)| d.condition == crate::nccl_defects::Condition::CommIdSet);
        plan.finding(
            Finding::CommId,
            match lo {
                None => format!("NCCL_COMM_ID={v} (from {origin}) is set: bootstrap takes the interface in that address's subnet and ignores NCCL_SOCKET_IFNAME; ncclenv changes nothing"),
                Some(_) => format!("NCCL_COMM_ID={v} (from {origin}) is set: bootstrap ignores NCCL_SOCKET_IFNAME; ncclenv changes nothing"),
            },
            "unset NCCL_COMM_ID to let ncclenv choose",
        );
        // The other rows are part of the model of NCCL (the carrier rule: `nccl_rules::Era`).
        let comm: Vec<_> = defects
            .iter()
            .filter(|(d, _)| d.condition == crate::nccl_defects::Condition::CommIdSet)
            .cloned()
            .collect();
        version_defects(&comm, &mut plan);
        comm_id_subnet_check(snap, v, &mut plan);
        comm_id_ifname_check(snap, &mut plan);
        shm::decide_shm(snap, cfg, &mut plan);
        return finish(plan, snap, cfg);
    }
    let vendor = vendor_profile(snap);
    if !vendor.is_empty() {
        plan.finding(
            Finding::VendorProfile,
            format!("a vendor network profile manages NCCL's transport ({}): ncclenv leaves NCCL_IB_*, NCCL_NET* and the plugin's variables alone and repairs no inherited value; NCCL's bootstrap and Gloo still use plain sockets, so it sets NCCL_SOCKET_IFNAME, NCCL_SOCKET_FAMILY and the companions where unset", vendor.join(", ")),
            "nothing to do",
        );
        interface::decide_interface(snap, cfg, &mut plan, true);
        // The RDMA rules only say that the plugin owns the transport (`rdma-vendor-plugin`) and change
        // nothing, when they see the profile in the environment (a profile from a config file: skipped).
        if vendor.iter().any(|k| snap.env.contains_key(k)) {
            rdma::decide_rdma(snap, cfg, &mut plan);
        }
        shm::decide_shm(snap, cfg, &mut plan);
        return finish(plan, snap, cfg);
    }
    match with_interface {
        Some(p) => plan = p,
        None => interface::decide_interface(snap, cfg, &mut plan, false),
    }
    no_master_note(snap, &mut plan);
    rdma::decide_rdma(snap, cfg, &mut plan);
    shm::decide_shm(snap, cfg, &mut plan);
    finish(plan, snap, cfg)
}

/// `nccl-version-defect` for each row of the known-defects table that applies (`crate::nccl_defects`).
fn version_defects(defects: &[(&crate::nccl_defects::Defect, Vec<String>)], plan: &mut Plan) {
    for (d, versions) in defects {
        plan.finding(
            Finding::NcclVersionDefect,
            format!(
                "NCCL {} ({}, {}): {}, so {} [{}]",
                versions.join(", "),
                d.range_text(),
                d.source,
                d.condition_text,
                d.effect,
                d.id
            ),
            d.remedy,
        );
    }
}

/// When no master is known (none named, or its name did not resolve) for a job not known to be single-node,
/// and ncclenv chose another interface than NCCL alone would bind (`nccl_rules::nccl_alone`), say both
/// (`no-master-nccl-differs`): the default route then overrode NCCL's own pick, which may be the right
/// network (an IPoIB `ib0` the master's name resolves to on the other nodes).
fn no_master_note(snap: &Snapshot, plan: &mut Plan) {
    let known = snap.peer.as_ref().is_some_and(|p| !p.addrs.is_empty());
    if known
        || snap.job.is_single_node()
        || plan.hands_off
        || matches!(plan.verdict, crate::plan::Verdict::Refuse { .. })
    {
        return;
    }
    // With one RUNNING interface that has an address besides loopback, NCCL alone has nothing else to pick: skip
    // its model (start-up cost).
    let Ok(net) = &snap.net else { return };
    let mut owners = net
        .addrs
        .iter()
        .filter(|a| !a.addr.is_loopback())
        .filter(|a| net.links.iter().any(|l| l.index == a.index && l.running))
        .map(|a| a.index);
    let Some(first) = owners.next() else { return };
    if owners.all(|i| i == first) {
        return;
    }
    let Some(c) = plan.choice.clone() else { return };
    let Some((pick, _)) = crate::nccl_rules::nccl_alone(snap) else {
        return;
    };
    let Some(f) = pick.found.first() else { return };
    if f.name == c.ifname {
        return;
    }
    plan.finding(
        Finding::NoMasterNcclDiffers,
        format!(
            "no master named; NCCL alone would use {} ({}), ncclenv chose {} ({})",
            f.name,
            f.addr,
            c.ifname,
            c.how.split(" (").next().unwrap_or(&c.how)
        ),
        format!(
            "name the job's master (NCCLENV_PEER, MASTER_ADDR or the launcher's own flag) so that ncclenv takes the route to it, or set NCCL_SOCKET_IFNAME={} if NCCL's own pick is the job's network",
            f.name
        ),
    );
}

/// The `unknown-variable` message for an `NCCLENV_*` name that is not an option (`name` as text; `near`, the
/// known name it probably meant).
pub fn unknown_variable_text(name: &str, near: Option<&str>) -> String {
    match near {
        Some(n) => format!(
            "{name} is not an ncclenv variable and is ignored; did you mean {n}? (only the exact upper-case names are read)"
        ),
        None => format!("{name} is not an ncclenv variable and is ignored"),
    }
}

/// With `NCCL_COMM_ID=ip:port`, bootstrap needs a local interface whose netmask covers that address
/// (`ncclFindInterfaceMatchSubnet`, src/misc/socket.cc), else "NET/Socket : No usable listening interface
/// found" (`ncclSystemError`).
fn comm_id_subnet_check(snap: &Snapshot, comm_id: &str, plan: &mut Plan) {
    let Ok(net) = &snap.net else { return };
    let Some(host) = crate::launcher::parse_host(comm_id) else {
        return;
    };
    let Ok(ip) = host.parse::<std::net::IpAddr>() else {
        return;
    };
    if !net.addrs.iter().any(|a| a.covers(&ip)) {
        plan.finding(
            Finding::CommIdNoSubnet,
            format!("no local interface has a prefix covering NCCL_COMM_ID's address {ip}: NCCL fails with \"NET/Socket : No usable listening interface found\""),
            "set NCCL_COMM_ID to an address in one of this node's subnets",
        );
    }
}

/// With `NCCL_COMM_ID` set, bootstrap ignores `NCCL_SOCKET_IFNAME`, but NCCL's network transports still read
/// it (`ncclNetSocketInit` in src/transport/net_socket.cc: "NET/Socket : no interface found"; `ncclIbInit` in
/// src/transport/net_ib.cc: "NET/IB : No IP interface found."), so an inherited value (environment or config
/// file) that matches no usable interface still makes the job fail. ncclenv stays hands off and warns
/// (`comm-id-ifname-unmatched`, a refusal under `NCCLENV_STRICT=1`). Under a vendor network profile the
/// plugin carries the traffic and NCCL's own transports are not initialised: no warning.
fn comm_id_ifname_check(snap: &Snapshot, plan: &mut Plan) {
    use crate::nccl_rules;
    let Ok(net) = &snap.net else { return };
    if !vendor_profile(snap).is_empty() {
        return;
    }
    let Some((val, origin)) = effective("NCCL_SOCKET_IFNAME", &snap.env, &snap.conf_files) else {
        return;
    };
    if !nccl_rules::ifname_counts(val) {
        return;
    }
    let fam = nccl_rules::socket_family(
        effective("NCCL_SOCKET_FAMILY", &snap.env, &snap.conf_files).map(|(v, _)| v),
    );
    let era = nccl_rules::nccl_target(snap).era;
    if !nccl_rules::nccl_pick(net, Some(val), fam, era)
        .found
        .is_empty()
    {
        return;
    }
    let auto: Vec<String> = nccl_rules::nccl_pick(net, None, fam, era)
        .found
        .iter()
        .map(|f| f.name.clone())
        .collect();
    plan.finding(
        Finding::CommIdIfnameUnmatched,
        format!(
            "NCCL_SOCKET_IFNAME={val:?} (from {origin}) matches no interface that is RUNNING and has an \
             address; NCCL_COMM_ID makes bootstrap ignore it, but NCCL's network transports still use it and \
             fail (\"NET/Socket : no interface found\", \"NET/IB : No IP interface found.\"); ncclenv changes \
             nothing while NCCL_COMM_ID is set"
        ),
        if auto.is_empty() {
            "unset NCCL_SOCKET_IFNAME, or unset NCCL_COMM_ID to let ncclenv choose".to_string()
        } else {
            format!(
                "unset NCCL_SOCKET_IFNAME (NCCL would then use {}), set it to an interface of this node, or \
                 unset NCCL_COMM_ID to let ncclenv repair it",
                auto.join(", ")
            )
        },
    );
}

/// Last steps on every path but `NCCLENV_DISABLE`: NCCL's own logs when asked for (`NCCLENV_DEBUG=1`; set in
/// hands-off cases too, they touch no transport variable), then strict mode: the first finding marked
/// `strict_refuses` becomes the refusal.
fn finish(mut plan: Plan, snap: &Snapshot, cfg: &Config) -> Plan {
    debug::decide_debug(snap, cfg, &mut plan);
    if cfg.strict {
        if let Some(w) = plan.warnings.iter().find(|w| w.strict_refuses).cloned() {
            // Nothing is applied for a command that does not run: the findings say what a repair would do.
            for w in &mut plan.warnings {
                w.message = w
                    .message
                    .replacen(" replaced by ", " would be replaced by ", 1);
            }
            let w = Warning {
                message: w
                    .message
                    .replacen(" replaced by ", " would be replaced by ", 1),
                ..w
            };
            plan.refuse(
                &w.code,
                format!(
                    "NCCLENV_STRICT=1 refuses what ncclenv would otherwise repair or run with a warning ({}): {}",
                    w.code, w.message
                ),
                w.remedy,
            );
        }
    }
    plan
}
