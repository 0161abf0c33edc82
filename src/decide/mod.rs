//! The pure decision: [`decide`] turns a [`Snapshot`] and a [`Config`] into a [`Plan`]. No I/O here: every
//! rule reads plain data, so each is tested with plain values.

pub mod debug;
pub mod faster;
pub mod gid;
pub mod host;
pub mod inherit;
pub mod interface;
pub mod rdma;
pub mod shm;
pub mod spread;
pub mod switches;
pub mod vendor;

pub use vendor::vendor_profile;

use crate::config::Config;
use crate::findings::Finding;
use crate::nccl_rules::{effective, Origin};
use crate::plan::{Action, Note, Plan};
use crate::snapshot::Snapshot;
use inherit::{settle, Fix, Inherited, Said, Verdict};

/// Decide everything. Order: `NCCLENV_DISABLE` → host findings (GPU list, NCCL versions) → launcher-argument
/// problems → a peer that did not resolve → hands-off cases (a failed probe, `NCCL_COMM_ID`) → interface →
/// a faster interface beside it (`faster`, an info) → RDMA → `/dev/shm` → NCCL's debug logs (`NCCLENV_DEBUG=1`) → strict mode (every finding marked
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
    match Regime::of(snap, cfg) {
        Regime::Disabled => disabled(cfg),
        Regime::ProbeFailed(failures) => probe_failed(snap, cfg, &failures),
        Regime::HandsOff {
            value,
            origin,
            vendor,
        } => comm_id(snap, cfg, value, &origin, vendor),
        Regime::VendorProfile(keys) => vendor(snap, cfg, &keys),
        Regime::Normal => normal(snap, cfg),
    }
}

/// The regime of a decision, derived once from the configuration and the snapshot; [`decide`] has one arm
/// per regime. The first that applies wins, in this order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Regime<'a> {
    /// `NCCLENV_DISABLE=1`: nothing is decided; only misspelt `NCCLENV_*` names are reported.
    Disabled,
    /// The network probe or an NCCL config file failed: fail open, change nothing. Each entry: what failed
    /// and what the user can do.
    ProbeFailed(Vec<(String, &'static str)>),
    /// `NCCL_COMM_ID` is set (environment or config file, `origin` as [`effective`] gives it): NCCL's
    /// bootstrap takes its interface from that address, so the network is left alone; the `/dev/shm` rule
    /// still runs.
    HandsOff {
        /// The value of `NCCL_COMM_ID`.
        value: &'a str,
        /// Where it came from.
        origin: Origin,
        /// A vendor network profile is set too: its plugin carries the traffic.
        vendor: bool,
    },
    /// A vendor network profile ([`vendor_profile`], its keys sorted): the interface is decided without
    /// repairing any inherited value, and RDMA is left to the plugin.
    VendorProfile(Vec<String>),
    /// Everything is decided.
    Normal,
}

impl<'a> Regime<'a> {
    /// The regime of `snap` under `cfg`. A chosen interface whose name cannot be written (not UTF-8) is also
    /// a probe failure, but it is known only once the interface is decided (`unwritable`).
    pub fn of(snap: &'a Snapshot, cfg: &Config) -> Regime<'a> {
        if cfg.disable {
            return Regime::Disabled;
        }
        let failures = probe_failures(snap);
        if !failures.is_empty() {
            return Regime::ProbeFailed(failures);
        }
        let keys = vendor_profile(snap);
        if let Some((value, origin)) = effective("NCCL_COMM_ID", &snap.env, &snap.conf_files) {
            let vendor = !keys.is_empty();
            return Regime::HandsOff {
                value,
                origin,
                vendor,
            };
        }
        if !keys.is_empty() {
            return Regime::VendorProfile(keys);
        }
        Regime::Normal
    }
}

/// Fail open on probe errors: what failed (the netlink probe, each unreadable NCCL config file) and what the
/// user can do.
fn probe_failures(snap: &Snapshot) -> Vec<(String, &'static str)> {
    let mut failures: Vec<(String, &'static str)> = Vec::new();
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
    failures
}

/// The interface ncclenv would export must have a name it can write: a name that is not UTF-8 is kept in
/// the world (it counts as an interface) but cannot be put into `NCCL_SOCKET_IFNAME`, so ncclenv fails open.
/// `plan` holds the interface decision; the failure, when its choice is such a name.
fn unwritable(snap: &Snapshot, plan: &Plan) -> Option<(String, &'static str)> {
    interface::unwritable_choice(snap, plan).map(|name| (
        format!("the interface ncclenv would choose, {name}, has a name that is not UTF-8 (shown with \\x escapes), which ncclenv cannot write into NCCL_SOCKET_IFNAME"),
        "rename the interface (ip link set dev OLD name eth1) or set NCCL_SOCKET_IFNAME yourself",
    ))
}

/// The findings every regime but [`Regime::Disabled`] starts with: misspelt `NCCLENV_*` names, host findings
/// (GPU list, NCCL versions), launcher-argument problems, a peer that did not resolve.
fn preamble(snap: &Snapshot, cfg: &Config) -> Plan {
    let mut plan = Plan::default();
    unknown_variables(cfg, &mut plan);
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
    plan
}

/// `unknown-variable` for each `NCCLENV_*` name that is not an option, with the name it probably meant.
fn unknown_variables(cfg: &Config, plan: &mut Plan) {
    for (name, near) in &cfg.unknown_vars {
        plan.finding(
            Finding::UnknownVariable,
            unknown_variable_text(name, near.as_deref()),
            match near {
                Some(n) => match crate::config::variable_values(n) {
                    Some(values) => format!("rename it to {n} (values: {values})"),
                    None => format!("rename it to {n}"),
                },
                None => "remove it; ncclenv --help lists its variables".to_string(),
            },
        );
    }
}

/// [`Regime::Disabled`]: misspelt names, then `disabled`; no other rule runs (not even strict mode).
fn disabled(cfg: &Config) -> Plan {
    let mut plan = Plan::default();
    unknown_variables(cfg, &mut plan);
    plan.hands_off = true;
    plan.finding(
        Finding::Disabled,
        format!("{}: ncclenv changes nothing", cfg.disable_words()),
        "unset NCCLENV_DISABLE to let ncclenv decide",
    );
    plan
}

/// [`Regime::ProbeFailed`] (or an unwritable interface name): the preamble, one `probe-failed` naming every
/// failure, and [`finish`].
fn probe_failed(snap: &Snapshot, cfg: &Config, failures: &[(String, &str)]) -> Plan {
    let mut plan = preamble(snap, cfg);
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
    finish(plan, snap, cfg)
}

/// [`Regime::HandsOff`]: `comm-id`, the defects that apply with `NCCL_COMM_ID` set, its subnet and the
/// inherited `NCCL_SOCKET_IFNAME` checked, then `/dev/shm`.
fn comm_id(snap: &Snapshot, cfg: &Config, value: &str, origin: &Origin, vendor: bool) -> Plan {
    let mut plan = preamble(snap, cfg);
    plan.hands_off = true;
    let defects = crate::nccl_defects::applying(snap);
    let lo = defects
        .iter()
        .find(|(d, _)| d.condition == crate::nccl_defects::Condition::CommIdSet);
    plan.finding(
        Finding::CommId,
        match lo {
            None => format!("NCCL_COMM_ID={value} (from {origin}) is set: bootstrap takes the interface in that address's subnet and ignores NCCL_SOCKET_IFNAME; ncclenv changes nothing"),
            Some(_) => format!("NCCL_COMM_ID={value} (from {origin}) is set: bootstrap ignores NCCL_SOCKET_IFNAME; ncclenv changes nothing"),
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
    comm_id_subnet_check(snap, value, &mut plan);
    if !vendor {
        comm_id_ifname_check(snap, &mut plan);
    }
    shm::decide_shm(snap, cfg, &mut plan);
    finish(plan, snap, cfg)
}

/// [`Regime::VendorProfile`]: `vendor-profile`, the interface decided without repairing inherited values,
/// the RDMA rules only when the profile is in the environment (they then say the plugin owns the transport
/// and change nothing; a profile from a config file: skipped), then `/dev/shm`.
fn vendor(snap: &Snapshot, cfg: &Config, keys: &[String]) -> Plan {
    let mut plan = preamble(snap, cfg);
    plan.finding(
        Finding::VendorProfile,
        format!("a vendor network profile manages NCCL's transport ({}): ncclenv leaves NCCL_IB_*, NCCL_NET* and the plugin's variables alone and repairs no inherited value; NCCL's bootstrap and Gloo still use plain sockets, so it sets NCCL_SOCKET_IFNAME, NCCL_SOCKET_FAMILY and the companions where unset", keys.join(", ")),
        "nothing to do",
    );
    interface::decide_interface(snap, cfg, &mut plan, true);
    if let Some(failure) = unwritable(snap, &plan) {
        return probe_failed(snap, cfg, &[failure]);
    }
    if keys.iter().any(|k| snap.env.contains_key(k)) {
        rdma::decide_rdma(snap, cfg, &mut plan);
    }
    shm::decide_shm(snap, cfg, &mut plan);
    spread::decide_spread(snap, cfg, &mut plan);
    finish(plan, snap, cfg)
}

/// [`Regime::Normal`]: the interface, `no-master-nccl-differs`, RDMA, `/dev/shm`.
fn normal(snap: &Snapshot, cfg: &Config) -> Plan {
    let mut plan = preamble(snap, cfg);
    interface::decide_interface(snap, cfg, &mut plan, false);
    if let Some(failure) = unwritable(snap, &plan) {
        return probe_failed(snap, cfg, &[failure]);
    }
    no_master_note(snap, &mut plan);
    faster::faster_interface(snap, cfg, &mut plan);
    rdma::decide_rdma(snap, cfg, &mut plan);
    shm::decide_shm(snap, cfg, &mut plan);
    spread::decide_spread(snap, cfg, &mut plan);
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
    // The platform named the interface (SageMaker's SM_NETWORK_INTERFACE_NAME): the route did not override NCCL.
    if snap
        .job
        .platform_interface
        .as_ref()
        .is_some_and(|(_, n, _)| *n == c.ifname)
    {
        return;
    }
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
/// (`comm-id-ifname-unmatched`, a refusal under `NCCLENV_STRICT=1`). Not called under a vendor network
/// profile: the plugin carries the traffic and NCCL's own transports are not initialised.
fn comm_id_ifname_check(snap: &Snapshot, plan: &mut Plan) {
    use crate::nccl_rules;
    let Ok(net) = &snap.net else { return };
    let Some(inh) = Inherited::nccl("NCCL_SOCKET_IFNAME", snap) else {
        return;
    };
    let (val, origin) = (inh.value, &inh.origin);
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
    // It would fail, but NCCL_COMM_ID keeps ncclenv's hands off: kept, with the warning.
    let said = Said::new(
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
    settle(plan, Fix::REPAIRS, &inh, Verdict::risky(said));
}

/// Last steps on every path but `NCCLENV_DISABLE`: NCCL's own logs when asked for (`NCCLENV_DEBUG=1`; set in
/// hands-off cases too, they touch no transport variable), then strict mode: the first finding marked
/// `strict_refuses` becomes the refusal.
fn finish(mut plan: Plan, snap: &Snapshot, cfg: &Config) -> Plan {
    debug::decide_debug(snap, cfg, &mut plan);
    env_removed(snap, &mut plan);
    env_assigned(snap, &mut plan);
    if cfg.strict {
        if let Some(first) = plan.warnings.iter().find(|w| w.strict_refuses).cloned() {
            // Nothing is applied for a command that does not run: the findings say what a repair would do.
            for w in &mut plan.warnings {
                w.message = w
                    .message
                    .replacen(" replaced by ", " would be replaced by ", 1);
            }
            let refusing = Note {
                message: first
                    .message
                    .replacen(" replaced by ", " would be replaced by ", 1),
                ..first
            };
            plan.refuse(
                &refusing.code,
                format!(
                    "NCCLENV_STRICT=1 refuses what ncclenv would otherwise repair or run with a warning ({}): {}",
                    refusing.code, refusing.message
                ),
                refusing.remedy,
            );
        }
    }
    plan
}

/// `env-removed-by-wrapper`: the command's wrapper (`env -i`, `env -u NAME`, read by `crate::shell`, also
/// inside `sh -c`) removes variables the plan sets, so the job never sees ncclenv's value (GNU coreutils
/// `env(1)`: `-i` starts with an empty environment, `-u` removes one name). A warning, not a refusal: the
/// wrapper is the user's, and NCCL may still choose right on its own.
fn env_removed(snap: &Snapshot, plan: &mut Plan) {
    let Some(removed) = &snap.job.env_removed else {
        return;
    };
    let all = removed.iter().any(|n| n == "*");
    let lost: Vec<String> = plan
        .changes
        .iter()
        .filter(|c| matches!(c.action, Action::Set { .. }))
        .filter(|c| all || removed.contains(&c.name))
        .map(|c| c.name.clone())
        .collect();
    if lost.is_empty() {
        return;
    }
    let message = if all {
        format!(
            "env -i in the command drops what ncclenv sets: the job never sees {}",
            lost.join(", ")
        )
    } else {
        format!(
            "env -u in the command drops {}, which ncclenv sets: the job never sees ncclenv's value",
            lost.join(", ")
        )
    };
    plan.finding(
        Finding::EnvRemovedByWrapper,
        message,
        "put ncclenv after the wrapper (env -i … ncclenv -- torchrun …, or sh -c \"… ncclenv -- torchrun …\"), or keep these variables",
    );
}

/// `env-set-by-wrapper`: the command's wrapper assigns a variable the plan sets or unsets (`env
/// NCCL_SOCKET_IFNAME=eth9 torchrun …`, `sh -c "NCCL_SOCKET_IFNAME=eth9 torchrun …"`: the shell exports it to
/// the command, POSIX XCU 2.9.1), so the job gets the wrapper's value, which no rule read (break-it, stop 32:
/// doctor said "Findings none" while the job ran on a name this host lacks). A warning naming each value;
/// the last assignment of a name is the one the command gets; one equal to ncclenv's value is not said.
fn env_assigned(snap: &Snapshot, plan: &mut Plan) {
    let mut given: Vec<(&str, &str)> = Vec::new();
    for (name, value) in snap.job.env_assigned.iter().rev() {
        if !given.iter().any(|(n, _)| n == name) {
            given.push((name, value));
        }
    }
    given.reverse();
    let over: Vec<String> = given
        .iter()
        .filter_map(|(name, value)| {
            let c = plan.changes.iter().find(|c| c.name == *name)?;
            let ours = match &c.action {
                // The same value replaces nothing (break-it finding: `NCCL_SHM_DISABLE=1` beside ncclenv's 1
                // was a warning, and doctor exited 1).
                Action::Set { value: v } if v == value => return None,
                Action::Set { value: v } => format!("ncclenv's {v}"),
                Action::Unset => "ncclenv's unset".to_string(),
            };
            Some(format!("{name}={value} (replacing {ours})"))
        })
        .collect();
    if over.is_empty() {
        return;
    }
    plan.finding(
        Finding::EnvSetByWrapper,
        format!(
            "the command's wrapper assigns {}: the job gets the wrapper's value, which ncclenv did not check",
            over.join(", ")
        ),
        "drop the assignment from the command (ncclenv sets these), or put it before ncclenv so that ncclenv reads \
         and checks it (NAME=VALUE ncclenv -- …, or the image's environment)",
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_snapshot::SnapshotBuilder;

    #[test]
    fn a_wrapper_that_drops_what_ncclenv_sets_is_a_warning() {
        let mut plan = Plan::default();
        plan.set("NCCL_SOCKET_IFNAME", "=eth1", "the route to the master");
        plan.set("GLOO_SOCKET_IFNAME", "eth1", "companion");
        let mut snap = SnapshotBuilder::new().build();
        env_removed(&snap, &mut plan);
        assert!(plan.warnings.is_empty(), "nothing removed: no finding");
        snap.job.env_removed = Some(vec!["GLOO_SOCKET_IFNAME".into()]);
        env_removed(&snap, &mut plan);
        let w = &plan.warnings[0];
        assert_eq!(w.code, "env-removed-by-wrapper");
        assert!(
            w.message
                .contains("env -u in the command drops GLOO_SOCKET_IFNAME,"),
            "{}",
            w.message
        );
        assert!(!w.message.contains("NCCL_SOCKET_IFNAME"), "{}", w.message);
        let mut plan2 = Plan::default();
        plan2.set("NCCL_SOCKET_IFNAME", "=eth1", "r");
        snap.job.env_removed = Some(vec!["*".into()]);
        env_removed(&snap, &mut plan2);
        let m = &plan2.warnings[0].message;
        assert!(
            m.starts_with("env -i") && m.ends_with("never sees NCCL_SOCKET_IFNAME"),
            "{m}"
        );
    }

    /// Break-it (stop 32): `env NCCL_SOCKET_IFNAME=eth9 torchrun …` replaced ncclenv's value silently.
    #[test]
    fn a_wrapper_that_assigns_what_ncclenv_sets_is_a_warning() {
        let mut plan = Plan::default();
        plan.set("NCCL_SOCKET_IFNAME", "=eth1", "the route to the master");
        let mut snap = SnapshotBuilder::new().build();
        snap.job.env_assigned = vec![("NCCL_DEBUG".into(), "INFO".into())];
        env_assigned(&snap, &mut plan);
        assert!(plan.warnings.is_empty(), "not a variable ncclenv sets");
        snap.job.env_assigned = vec![
            ("NCCL_SOCKET_IFNAME".into(), "eth8".into()),
            ("NCCL_SOCKET_IFNAME".into(), "eth9".into()),
        ];
        env_assigned(&snap, &mut plan);
        let w = &plan.warnings[0];
        assert_eq!(w.code, "env-set-by-wrapper");
        assert!(
            w.message
                .contains("assigns NCCL_SOCKET_IFNAME=eth9 (replacing ncclenv's =eth1)"),
            "the last assignment wins: {}",
            w.message
        );
        assert!(!w.message.contains("eth8"), "{}", w.message);
        // The wrapper's value equal to ncclenv's replaces nothing.
        let mut plan = Plan::default();
        plan.set("NCCL_SHM_DISABLE", "1", "/dev/shm too small");
        snap.job.env_assigned = vec![("NCCL_SHM_DISABLE".into(), "1".into())];
        env_assigned(&snap, &mut plan);
        assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
    }
}
