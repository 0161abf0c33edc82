//! The companions: the frameworks' and launchers' own interface variables (`GLOO_SOCKET_IFNAME`,
//! `TP_SOCKET_IFNAME`, `HOROVOD_GLOO_IFACE`, Open MPI's `OMPI_MCA_*_tcp_if_include`, `UCX_NET_DEVICES`),
//! each judged by its own library's rule against the bound interface ([`companions`]; `docs/policy.md`).

use super::advertised::{declared_differs, ips_differ, pod_ip};
use super::fix::{Fix, Repair};
use super::view::NetworkView;
use super::{is_multi, Bound};
use crate::findings::Finding;
use crate::nccl_rules;
use crate::plan::Plan;
use crate::snapshot::{is_link_local_ip, prefix_contains, Launcher, Snapshot};
use std::net::IpAddr;

/// Step "companions": the frameworks' and launchers' own interface variables (exact names only), `POD_IP`,
/// and the addresses the launcher declares or advertises, checked against the bound interface.
pub(super) fn companions(
    v: &NetworkView,
    snap: &Snapshot,
    bound: &Bound,
    fix: &Fix,
    plan: &mut Plan,
) {
    let (ifname, addr) = (bound.ifname.as_str(), bound.addr);
    for var in ["GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"] {
        companion(v, snap, var, bound, fix, plan);
    }
    other_launchers(v, snap, bound, fix, plan);
    pod_ip(snap, ifname, addr, is_multi(snap), fix, plan);
    declared_differs(v, snap, ifname, addr, plan);
    ips_differ(snap, ifname, addr, plan);
}

/// `GLOO_SOCKET_IFNAME` / `TP_SOCKET_IFNAME`: exact interface names only (PyTorch: a comma list; Paddle: one
/// name), each resolved as Gloo resolves it: the first `getifaddrs` entry whose `ifa_name` equals the name
/// (`strcmp`, so an IPv4 address label is a name of its own) and that has an IPv4 or IPv6 address, with no
/// check of its flags, scope or reachability (`lookupAddrForIface`, pytorch/gloo
/// gloo/transport/tcp/device.cc). Set when unset, to the name of the bound address ([`Bound::gname`]);
/// repaired when it holds NCCL syntax, a name with no address (Gloo fails with "Unable to find address
/// for: …"), or, in a multi-node job, a name whose first address is loopback or link-local (not on a
/// link-local master's link): the same grounds as NCCL's (`fatal_reason`; #26 item 4). Warned when it
/// names another interface than NCCL's.
fn companion(
    v: &NetworkView,
    snap: &Snapshot,
    var: &str,
    bound: &Bound,
    fix: &Fix,
    plan: &mut Plan,
) {
    let gname = bound.gname.as_str();
    let Some(val) = snap.env.get(var) else {
        plan.set(
            var,
            gname,
            format!("the same interface as NCCL ({var} takes exact names)"),
        );
        return;
    };
    let names: Vec<&str> = val.split(',').collect();
    if let Some(why) = names
        .iter()
        .find_map(|n| gloo_name_fails(v, n, is_multi(snap)).map(|w| (n, w)))
        .map(|(_, w)| w.replace("{var}", var))
    {
        fix.apply(
            plan,
            Repair {
                name: var,
                old: val,
                new: Some(gname.to_string()),
                reason: format!("inherited {var}={val:?} would fail: {why}"),
                code: Finding::GlooIfnameRepaired,
                message: format!("{var}={val:?} replaced by {gname:?}: {why}"),
                remedy: format!("set {var} to one plain interface name, e.g. {gname}"),
            },
        );
    } else if !names.contains(&gname) && !names.contains(&bound.ifname.as_str()) {
        plan.finding(
            Finding::CompanionDiffers,
            format!("{var}={val} names another interface than NCCL's {gname}"),
            format!("set {var}={gname} so that every library of the job uses one interface"),
        );
    }
}

/// Why Gloo fails, or binds where another node cannot connect, with the interface name `n` (see
/// [`companion`]; `{var}` stands for the variable's name). `None` when it works.
fn gloo_name_fails(v: &NetworkView, n: &str, multi: bool) -> Option<String> {
    let entries = nccl_rules::ifaddrs(v.net);
    let first = entries.iter().find(|e| e.name == n);
    let syntax = n.is_empty() || n.starts_with('^') || n.starts_with('=');
    match first {
        _ if syntax => Some(format!(
            "{{var}} takes exact interface names, not NCCL's list syntax ({n:?}); Gloo would fail with \"Unable to find address for\""
        )),
        None if n.contains(':') => Some(format!(
            "{{var}} takes exact interface names, not NCCL's list syntax ({n:?}), and no address is labelled so; Gloo would fail with \"Unable to find address for\""
        )),
        None if v.link_by_name(n).is_some() => Some(format!(
            "{n:?} has no IPv4 or IPv6 address here; Gloo would fail with \"Unable to find address for\""
        )),
        None => Some(format!(
            "no interface named {n:?} exists here; Gloo would fail with \"Unable to find address for\""
        )),
        Some(e)
            if multi
                && (e.addr.is_loopback()
                    || (is_link_local_ip(&e.addr) && !v.link_local_ok(e.index, &e.addr))) =>
        {
            Some(format!(
                "Gloo binds the first address of {n:?}, {}, which another node cannot reach (only {})",
                e.addr,
                if e.addr.is_loopback() { "loopback" } else { "link-local" }
            ))
        }
        Some(_) => None,
    }
}

/// The other launchers' interface variables, each in its own syntax and by its own library's rule (F26;
/// #26 item 4). An inherited value naming an interface that library cannot use (missing, without an
/// address, or link-local only in a multi-node job: [`gloo_name_fails`] for Horovod's Gloo,
/// [`netdev_unusable`] for Open MPI and UCX) is repaired (`launcher-ifname-repaired`), one that selects
/// another interface than NCCL's is warned (`companion-differs`); an unset one is set only for the launcher
/// that reads it (its command is the job's):
///
/// * `HOROVOD_GLOO_IFACE`: one exact name (horovod/common/utils/env_parser.cc `ParseGlooIface`;
///   horovodrun sets it to the first of its NICs, horovod/runner/gloo_run.py). Set for `horovodrun`.
/// * `OMPI_MCA_btl_tcp_if_include`, `OMPI_MCA_oob_tcp_if_include`: comma-separated exact names or CIDR
///   networks (Open MPI's `btl_tcp_if_include`/`oob_tcp_if_include` MCA parameters). Set for `mpirun`. Open
///   MPI forwards `OMPI_MCA_*` to every node: the name must be the same there.
/// * `UCX_NET_DEVICES`: comma-separated devices: netdev names, RDMA `device:port` entries, or `all`. Only
///   evaluated (never set: it would take UCX off RDMA); a value with RDMA entries is warned, not repaired.
fn other_launchers(v: &NetworkView, snap: &Snapshot, bound: &Bound, fix: &Fix, plan: &mut Plan) {
    let addr = bound.addr;
    let c = Companion {
        v,
        ifname: &bound.ifname,
        gname: &bound.gname,
        multi: is_multi(snap),
        fix,
    };
    let launcher = snap.job.launcher;
    horovod_iface(&c, snap.env.get("HOROVOD_GLOO_IFACE"), launcher, plan);
    let ompi = OmpiTarget::of(&c, snap, addr);
    for var in ["OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include"] {
        ompi_if_include(&c, var, snap.env.get(var), &ompi, addr, plan);
    }
    if let Some(val) = snap.env.get("UCX_NET_DEVICES") {
        ucx_net_devices(&c, val, plan);
    }
}

/// What the launcher variables' checks share: the network, the bound interface and how to repair.
struct Companion<'a, 'n> {
    v: &'a NetworkView<'n>,
    ifname: &'a str,
    /// The bound address's `getifaddrs` name ([`Bound::gname`]), for the variables Gloo resolves.
    gname: &'a str,
    /// The job may span nodes ([`is_multi`]): a loopback or link-local-only interface is a failure.
    multi: bool,
    fix: &'a Fix,
}

impl Companion<'_, '_> {
    /// `companion-differs`: `var` selects another interface than NCCL's.
    fn differs(&self, plan: &mut Plan, var: &str, val: &str) {
        let ifname = self.ifname;
        plan.finding(
            Finding::CompanionDiffers,
            format!("{var}={val} selects another interface than NCCL's {ifname}"),
            format!("set {var} to {ifname} so that every library of the job uses one interface"),
        )
    }
    /// `launcher-ifname-repaired`: `var` would fail (`why`); replaced by the bound interface ([`Fix`]).
    fn repair(&self, plan: &mut Plan, var: &'static str, val: &str, why: String) {
        self.repair_to(plan, var, val, why, self.ifname)
    }
    /// [`Companion::repair`] with `ifname` as the new value (a CIDR network for Open MPI).
    fn repair_to(&self, plan: &mut Plan, var: &'static str, val: &str, why: String, ifname: &str) {
        self.fix.apply(
            plan,
            Repair {
                name: var,
                old: val,
                new: Some(ifname.to_string()),
                reason: format!("inherited {var}={val:?} would fail: {why}"),
                code: Finding::LauncherIfnameRepaired,
                message: format!("{var}={val:?} replaced by {ifname:?}: {why}"),
                remedy: format!("set {var} to an interface that exists here, e.g. {ifname}"),
            },
        )
    }
}

/// `HOROVOD_GLOO_IFACE`: one exact interface name, which Horovod hands to Gloo unchanged (`attr.iface` of
/// `gloo::transport::tcp::CreateDevice`, horovod/common/gloo/gloo_context.cc `GlooContext::Initialize`), so
/// Gloo's own rule judges it ([`gloo_name_fails`]; #26 item 4: a name whose first address is link-local in a
/// multi-node job is repaired like `GLOO_SOCKET_IFNAME`). A list is repaired too (Horovod takes one name).
/// Repaired to the bound address's `getifaddrs` name ([`Bound::gname`]); another interface is warned; unset,
/// it is set for `horovodrun`.
fn horovod_iface(c: &Companion, val: Option<&String>, launcher: Option<Launcher>, plan: &mut Plan) {
    const VAR: &str = "HOROVOD_GLOO_IFACE";
    match val {
        Some(val) => {
            let fails: Vec<String> = val
                .split(',')
                .filter_map(|n| gloo_name_fails(c.v, n, c.multi))
                .map(|w| w.replace("{var}", VAR))
                .collect();
            if val.contains(',') || !fails.is_empty() {
                let why = match (val.contains(','), fails.is_empty()) {
                    (true, true) => format!("{VAR} takes one interface name, not a list"),
                    (true, false) => format!(
                        "{VAR} takes one interface name, not a list (and {})",
                        fails.join("; ")
                    ),
                    _ => fails.join("; "),
                };
                c.repair_to(plan, VAR, val, why, c.gname);
            } else if val != c.ifname && val != c.gname {
                c.differs(plan, VAR, val);
            }
        }
        None if launcher == Some(Launcher::Horovod) => plan.set(
            VAR,
            c.gname,
            "the same interface as NCCL, for horovodrun's Gloo (one exact name)",
        ),
        None => {}
    }
}

/// What ncclenv gives Open MPI's `*_tcp_if_include` and for which process.
struct OmpiTarget {
    /// The value: the bound interface's network as a CIDR (`10.79.0.0/24`) when the job may span nodes
    /// (another node's NIC on that network may have another name, and Open MPI forwards `OMPI_MCA_*` to every
    /// node; `*_if_include` takes CIDR networks, opal/mca/if `opal_ifmatches`), else the interface's name. A
    /// host address (/32, /128) or an interface without address gives the name.
    value: String,
    /// The command is `mpirun`: both variables are set (its `orted` daemons use `oob`, the ranks `btl`).
    mpirun: bool,
    /// The command is an Open MPI rank (`OMPI_COMM_WORLD_SIZE` set): `btl` only, read by the rank's
    /// `MPI_Init`.
    rank: bool,
}

impl OmpiTarget {
    fn of(c: &Companion, snap: &Snapshot, addr: Option<IpAddr>) -> OmpiTarget {
        let cidr = addr
            .filter(|_| !snap.job.is_single_node())
            .and_then(|a| {
                c.v.net
                    .addrs
                    .iter()
                    .find(|x| x.addr == a)
                    .map(|x| (a, x.prefix_len))
            })
            .filter(|(a, len)| *len < if a.is_ipv4() { 32 } else { 128 })
            .map(|(a, len)| format!("{}/{len}", crate::snapshot::network_of(&a, len)));
        OmpiTarget {
            value: cidr.unwrap_or_else(|| c.ifname.to_string()),
            mpirun: snap.job.launcher == Some(Launcher::Mpi),
            rank: snap.env.contains_key("OMPI_COMM_WORLD_SIZE"),
        }
    }
}

/// Open MPI's `OMPI_MCA_{btl,oob}_tcp_if_include` (`var`): exact names or CIDR networks (no `^` exclusions:
/// those are `*_if_exclude`'s, and `^eth0` here is a name that does not exist). An empty value, a name
/// Open MPI cannot use ([`netdev_unusable`]: missing, without an address, or link-local only in a
/// multi-node job) or a network holding no address here is repaired; one that does not select the bound
/// interface (by name or by its address `addr`) is warned; unset, both are set for `mpirun` and
/// `btl_tcp_if_include` for an Open MPI rank ([`OmpiTarget`]).
fn ompi_if_include(
    c: &Companion,
    var: &'static str,
    val: Option<&String>,
    t: &OmpiTarget,
    addr: Option<IpAddr>,
    plan: &mut Plan,
) {
    let Some(val) = val else {
        let how = if t.value == c.ifname {
            c.ifname.to_string()
        } else {
            format!("{}'s network", c.ifname)
        };
        if t.mpirun {
            plan.set(
                var,
                t.value.clone(),
                format!("the same interface as NCCL ({how}), for Open MPI's TCP transport (Open MPI forwards it to every node)"),
            );
        } else if t.rank && var == "OMPI_MCA_btl_tcp_if_include" {
            plan.set(
                var,
                t.value.clone(),
                format!("the same interface as NCCL ({how}), for this Open MPI rank's TCP transport (read by MPI_Init)"),
            );
        }
        return;
    };
    let entries: Vec<&str> = val.split(',').filter(|e| !e.is_empty()).collect();
    let mut bad: Vec<String> = Vec::new();
    let mut selects = false;
    for e in &entries {
        match e.split_once('/') {
            Some((net, len)) => match (net.parse::<IpAddr>(), len.parse::<u8>()) {
                (Ok(n), Ok(l)) => {
                    if !c
                        .v
                        .net
                        .addrs
                        .iter()
                        .any(|a| prefix_contains(&n, l, &a.addr))
                    {
                        bad.push(format!("{e} (no address here is in it)"));
                    }
                    selects |= addr.is_some_and(|a| prefix_contains(&n, l, &a));
                }
                _ => bad.push(format!("{e} (not a CIDR network)")),
            },
            None => {
                bad.extend(netdev_unusable(c.v, e, c.multi));
                selects |= *e == c.ifname;
            }
        }
    }
    if entries.is_empty() || !bad.is_empty() {
        let why = if entries.is_empty() {
            "it names nothing".to_string()
        } else {
            format!("Open MPI cannot use {}", bad.join(", "))
        };
        c.repair_to(plan, var, val, why, &t.value);
    } else if !selects {
        c.differs(plan, var, val);
    }
}

/// Why the netdev `n`, named in Open MPI's `*_tcp_if_include` or in `UCX_NET_DEVICES`, gives that library's
/// TCP transport no address another node can use, as `"n (why)"`; `None` when it works. No such link, or
/// no address on it (Open MPI lists only interfaces that hold an address, opal/mca/if; UCX's TCP transport
/// binds the netdev's address, uct/tcp): a failure on any job, like a missing name. In a multi-node job also
/// a link whose addresses are all loopback or link-local (the Multus network whose IPAM has not delivered:
/// `net1` UP with only fe80, #26 item 4): the grounds on which NCCL's value is repaired (`fatal_reason`),
/// IPv4 link-local on the master's own link excepted ([`NetworkView::link_local_ok`]).
fn netdev_unusable(v: &NetworkView, n: &str, multi: bool) -> Option<String> {
    let Some(link) = v.link_by_name(n) else {
        return Some(format!("{n} (no such interface)"));
    };
    let addrs: Vec<&IpAddr> = v
        .net
        .addrs
        .iter()
        .filter(|a| a.index == link.index)
        .map(|a| &a.addr)
        .collect();
    let reachable =
        |a: &IpAddr| !a.is_loopback() && (!is_link_local_ip(a) || v.link_local_ok(link.index, a));
    match addrs.first() {
        None => Some(format!("{n} (it has no address)")),
        Some(_) if multi && !addrs.iter().any(|a| reachable(a)) => Some(format!(
            "{n} (only loopback or link-local addresses, which another node cannot reach)"
        )),
        Some(_) => None,
    }
}

/// `UCX_NET_DEVICES`: netdev names and RDMA `device:port` entries, or `all`. Only judged, never set. Netdevs
/// that UCX's TCP transport cannot use ([`netdev_unusable`]: missing, without an address, or link-local only
/// in a multi-node job) are repaired when the value has no RDMA entry, else warned; a value that names
/// netdevs but not the bound interface is warned.
fn ucx_net_devices(c: &Companion, val: &str, plan: &mut Plan) {
    let entries: Vec<&str> = val.split(',').filter(|e| !e.is_empty()).collect();
    if entries.contains(&"all") {
        return;
    }
    let (rdma, netdevs): (Vec<&str>, Vec<&str>) = entries.iter().partition(|e| e.contains(':'));
    let missing: Vec<String> = netdevs
        .iter()
        .filter_map(|n| netdev_unusable(c.v, n, c.multi))
        .collect();
    if !missing.is_empty() && rdma.is_empty() {
        c.repair(
            plan,
            "UCX_NET_DEVICES",
            val,
            format!("UCX's TCP transport cannot use {}", missing.join(", ")),
        );
    } else if !missing.is_empty() {
        plan.finding(
            Finding::CompanionDiffers,
            format!(
                "UCX_NET_DEVICES={val} names {}, which UCX's TCP transport cannot use (its RDMA devices are kept)",
                missing.join(", ")
            ),
            format!("remove those names or use {}", c.ifname),
        );
    } else if rdma.is_empty() && !netdevs.contains(&c.ifname) {
        c.differs(plan, "UCX_NET_DEVICES", val);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_snapshot::SnapshotBuilder;

    /// `eth0` 10.244.1.7/24 and `net1` UP with only fe80 (a Multus network whose IPAM has not delivered).
    fn fe80_net1() -> Snapshot {
        SnapshotBuilder::new()
            .plug("eth0", &["10.244.1.7/24"])
            .plug("net1", &["fe80::6c:1/64"])
            .plug("net2", &[])
            .build()
    }

    /// #26 item 4: each companion's own rule on an fe80-only `net1`: unusable in a multi-node job, fine on
    /// one node; `eth0` always fine; a link without address and a missing one fail everywhere.
    #[test]
    fn companion_rules_on_an_fe80_only_link() {
        let snap = fe80_net1();
        let Ok(net) = &snap.net else {
            panic!("no network")
        };
        let v = NetworkView::new(net, &[]);
        for multi in [true, false] {
            assert_eq!(gloo_name_fails(&v, "eth0", multi), None);
            assert_eq!(netdev_unusable(&v, "eth0", multi), None);
            assert!(gloo_name_fails(&v, "net2", multi).is_some());
            assert!(netdev_unusable(&v, "net2", multi).is_some_and(|w| w.contains("no address")));
            assert!(netdev_unusable(&v, "eth9", multi).is_some_and(|w| w.contains("no such")));
        }
        assert!(gloo_name_fails(&v, "net1", true).is_some_and(|w| w.contains("fe80::6c:1")));
        assert!(netdev_unusable(&v, "net1", true).is_some_and(|w| w.contains("link-local")));
        assert_eq!(gloo_name_fails(&v, "net1", false), None);
        assert_eq!(netdev_unusable(&v, "net1", false), None);
    }

    /// #26 item 4 through each companion's step: `net1` (fe80 only) is repaired in a multi-node job and
    /// kept on one node; `eth0` (NCCL's interface) is kept.
    #[test]
    fn companions_repaired_when_fe80_only_kept_when_they_work() {
        let snap = fe80_net1();
        let Ok(net) = &snap.net else {
            panic!("no network")
        };
        let v = NetworkView::new(net, &[]);
        let fix = Fix { vendor: false };
        let run = |var: &'static str, val: &str, multi: bool| {
            let c = Companion {
                v: &v,
                ifname: "eth0",
                gname: "eth0",
                multi,
                fix: &fix,
            };
            let mut plan = Plan::default();
            let val = val.to_string();
            let t = OmpiTarget {
                value: "10.244.1.0/24".into(),
                mpirun: false,
                rank: false,
            };
            match var {
                "HOROVOD_GLOO_IFACE" => horovod_iface(&c, Some(&val), None, &mut plan),
                "UCX_NET_DEVICES" => ucx_net_devices(&c, &val, &mut plan),
                _ => ompi_if_include(
                    &c,
                    var,
                    Some(&val),
                    &t,
                    "10.244.1.7".parse().ok(),
                    &mut plan,
                ),
            }
            plan
        };
        for (var, repaired) in [
            ("HOROVOD_GLOO_IFACE", "eth0"),
            ("OMPI_MCA_btl_tcp_if_include", "10.244.1.0/24"),
            ("OMPI_MCA_oob_tcp_if_include", "10.244.1.0/24"),
            ("UCX_NET_DEVICES", "eth0"),
        ] {
            let p = run(var, "net1", true);
            assert_eq!(p.value_of(var), Some(repaired), "{var}");
            assert!(p
                .warnings
                .iter()
                .any(|w| w.code == "launcher-ifname-repaired" && w.message.contains("link-local")));
            let p = run(var, "net1", false);
            assert_eq!(p.value_of(var), None, "{var} on one node");
            let p = run(var, "eth0", true);
            assert_eq!(p.value_of(var), None, "{var}=eth0");
            assert!(p.warnings.is_empty(), "{var}=eth0: {:?}", p.warnings);
        }
    }
}
