//! How each library reads its companion's value ([`super::Read`]), each a [`Companion`] method returning a
//! [`Reading`], and the rules they share: Gloo's lookup of a name ([`gloo_name_fails`]), a netdev Open MPI
//! or UCX cannot use ([`netdev_unusable`]) and what Open MPI's variables get ([`OmpiTarget`]).

use super::{Companion, Reading};
use crate::decide::interface::view::NetworkView;
use crate::nccl_rules;
use crate::snapshot::{is_link_local_ip, prefix_contains, Launcher, Snapshot};
use std::net::IpAddr;

impl Companion<'_, '_> {
    /// [`Read::GlooNames`](super::Read::GlooNames): the first name Gloo cannot use fails the value ([`gloo_name_fails`]); a value
    /// naming neither the bound address's name nor the link's differs.
    pub(super) fn gloo_names(&self, var: &str, val: &str) -> Reading {
        let names: Vec<&str> = val.split(',').collect();
        if let Some(why) = names
            .iter()
            .find_map(|n| gloo_name_fails(self.view, n, self.multi))
        {
            return Reading::Fails(why.replace("{var}", var));
        }
        // PyTorch's Gloo makes one device per listed name and spreads its pairs over them
        // (ProcessGroupGloo, GLOO_SOCKET_IFNAME "eth0,eth1"): a container bridge among them, in a job across
        // nodes, carries pairs that cannot leave this host (break-it, stop 32: `eth0,docker0` was kept silently).
        let bridge = self.multi
            && names.iter().any(|n| {
                *n != self.gname
                    && *n != self.ifname
                    && self
                        .view
                        .link_by_name(n)
                        .is_some_and(|l| self.view.container_bridge(l))
            });
        if bridge || (!names.contains(&self.gname) && !names.contains(&self.ifname)) {
            Reading::Differs
        } else {
            Reading::Works
        }
    }

    /// [`Read::GlooOne`](super::Read::GlooOne) (`HOROVOD_GLOO_IFACE`): a list fails (Horovod takes one name), and so does a name
    /// Gloo cannot use ([`gloo_name_fails`]); another interface differs.
    pub(super) fn gloo_one(&self, var: &str, val: &str) -> Reading {
        let fails: Vec<String> = val
            .split(',')
            .filter_map(|n| gloo_name_fails(self.view, n, self.multi))
            .map(|w| w.replace("{var}", var))
            .collect();
        let list = val.contains(',');
        if list || !fails.is_empty() {
            return Reading::Fails(match (list, fails.is_empty()) {
                (true, true) => format!("{var} takes one interface name, not a list"),
                (true, false) => format!(
                    "{var} takes one interface name, not a list (and {})",
                    fails.join("; ")
                ),
                _ => fails.join("; "),
            });
        }
        if val != self.ifname && val != self.gname {
            Reading::Differs
        } else {
            Reading::Works
        }
    }

    /// [`Read::OmpiInclude`](super::Read::OmpiInclude): an empty value, a name Open MPI cannot use ([`netdev_unusable`]: missing,
    /// without an address, or link-local only in a multi-node job) or a network holding no address here
    /// fails; one that does not select the bound interface (by name or by its address) differs.
    pub(super) fn ompi_if_include(&self, val: &str) -> Reading {
        let entries: Vec<&str> = val.split(',').filter(|e| !e.is_empty()).collect();
        let mut bad: Vec<String> = Vec::new();
        let mut selects = false;
        for e in &entries {
            match e.split_once('/') {
                Some((net, len)) => match (net.parse::<IpAddr>(), len.parse::<u8>()) {
                    (Ok(n), Ok(l)) => {
                        if !self
                            .view
                            .net
                            .addrs
                            .iter()
                            .any(|a| prefix_contains(&n, l, &a.addr))
                        {
                            bad.push(format!("{e} (no address here is in it)"));
                        }
                        selects |= self.addr.is_some_and(|a| prefix_contains(&n, l, &a));
                    }
                    _ => bad.push(format!("{e} (not a CIDR network)")),
                },
                None => {
                    bad.extend(netdev_unusable(self.view, e, self.multi));
                    selects |= *e == self.ifname;
                }
            }
        }
        if entries.is_empty() {
            Reading::Fails("it names nothing".to_string())
        } else if !bad.is_empty() {
            Reading::Fails(format!("Open MPI cannot use {}", bad.join(", ")))
        } else if !selects {
            Reading::Differs
        } else {
            Reading::Works
        }
    }

    /// [`Read::UcxDevices`](super::Read::UcxDevices): netdevs UCX's TCP transport cannot use ([`netdev_unusable`]) fail the value
    /// when it has no RDMA entry, else are warned; a value that names netdevs but not the bound interface
    /// differs; `all` works.
    pub(super) fn ucx_net_devices(&self, val: &str) -> Reading {
        let entries: Vec<&str> = val.split(',').filter(|e| !e.is_empty()).collect();
        if entries.contains(&"all") {
            return Reading::Works;
        }
        let (rdma, netdevs): (Vec<&str>, Vec<&str>) = entries.iter().partition(|e| e.contains(':'));
        let missing: Vec<String> = netdevs
            .iter()
            .filter_map(|n| netdev_unusable(self.view, n, self.multi))
            .collect();
        if !missing.is_empty() && rdma.is_empty() {
            Reading::Fails(format!(
                "UCX's TCP transport cannot use {}",
                missing.join(", ")
            ))
        } else if !missing.is_empty() {
            Reading::Warned(
                format!(
                    "UCX_NET_DEVICES={val} names {}, which UCX's TCP transport cannot use (its RDMA devices are kept)",
                    missing.join(", ")
                ),
                format!("remove those names or use {}", self.ifname),
            )
        } else if rdma.is_empty() && !netdevs.contains(&self.ifname) {
            Reading::Differs
        } else {
            Reading::Works
        }
    }

    /// [`Read::Address`](super::Read::Address) (`POD_IP`): a loopback address in a multi-node job fails (Paddle advertises it and
    /// the other nodes connect to their own loopback); another address than the bound one differs.
    pub(super) fn address(&self, val: &str) -> Reading {
        let ip = val.parse::<IpAddr>().ok();
        if self.multi && ip.is_some_and(|ip| ip.is_loopback()) {
            return Reading::Fails("a loopback address".to_string());
        }
        match self.addr {
            Some(a) if ip != Some(a) => Reading::Differs,
            _ => Reading::Works,
        }
    }
}

/// Why Gloo fails, or binds where another node cannot connect, with the interface name `n`; `{var}` stands
/// for the variable's name. `None` when it works. Gloo resolves a name as the first `getifaddrs` entry whose
/// `ifa_name` equals it (`strcmp`, so an IPv4 address label is a name of its own) and that has an IPv4 or
/// IPv6 address, with no check of its flags, scope or reachability (`lookupAddrForIface`, pytorch/gloo
/// gloo/transport/tcp/device.cc): a name with no address fails ("Unable to find address for: …"), and in a
/// multi-node job so does one whose first address is loopback or link-local (not on a link-local master's
/// link), the grounds on which NCCL's value is repaired (`fatal_reason`; #26 item 4).
pub(super) fn gloo_name_fails(view: &NetworkView, name: &str, multi: bool) -> Option<String> {
    let entries = nccl_rules::ifaddrs(view.net);
    let first = entries.iter().find(|e| e.name == name);
    let syntax = name.is_empty() || name.starts_with('^') || name.starts_with('=');
    match first {
        _ if syntax => Some(format!(
            "{{var}} takes exact interface names, not NCCL's list syntax ({name:?}); Gloo would fail with \"Unable to find address for\""
        )),
        None if name.contains(':') => Some(format!(
            "{{var}} takes exact interface names, not NCCL's list syntax ({name:?}), and no address is labelled so; Gloo would fail with \"Unable to find address for\""
        )),
        None if view.link_by_name(name).is_some() => Some(format!(
            "{name:?} has no IPv4 or IPv6 address here; Gloo would fail with \"Unable to find address for\""
        )),
        None => Some(format!(
            "no interface named {name:?} exists here; Gloo would fail with \"Unable to find address for\""
        )),
        Some(e)
            if multi
                && (e.addr.is_loopback()
                    || (is_link_local_ip(&e.addr) && !view.link_local_ok(e.index, &e.addr))) =>
        {
            Some(format!(
                "Gloo binds the first address of {name:?}, {}, which another node cannot reach (only {})",
                e.addr,
                if e.addr.is_loopback() { "loopback" } else { "link-local" }
            ))
        }
        Some(_) => None,
    }
}

/// What ncclenv gives Open MPI's `*_tcp_if_include` and for which process.
pub(super) struct OmpiTarget {
    /// The value: the bound interface's network as a CIDR (`10.79.0.0/24`) when the job may span nodes
    /// (another node's NIC on that network may have another name, and Open MPI forwards `OMPI_MCA_*` to every
    /// node; `*_if_include` takes CIDR networks, opal/mca/if `opal_ifmatches`), else the interface's name. A
    /// host address (/32, /128) or an interface without address gives the name.
    pub(super) value: String,
    /// The command is `mpirun`: both variables are set (its `orted` daemons use `oob`, the ranks `btl`).
    pub(super) mpirun: bool,
    /// The command is an Open MPI rank (`OMPI_COMM_WORLD_SIZE` set): `btl` only, read by the rank's
    /// `MPI_Init`.
    pub(super) rank: bool,
}

impl OmpiTarget {
    pub(super) fn of(
        view: &NetworkView,
        ifname: &str,
        snap: &Snapshot,
        addr: Option<IpAddr>,
    ) -> OmpiTarget {
        let cidr = addr
            .filter(|_| !snap.job.is_single_node())
            .and_then(|a| {
                view.net
                    .addrs
                    .iter()
                    .find(|x| x.addr == a)
                    .map(|x| (a, x.prefix_len))
            })
            .filter(|(a, len)| *len < if a.is_ipv4() { 32 } else { 128 })
            .map(|(a, len)| format!("{}/{len}", crate::snapshot::network_of(&a, len)));
        OmpiTarget {
            value: cidr.unwrap_or_else(|| ifname.to_string()),
            mpirun: snap.job.launcher == Some(Launcher::Mpi),
            rank: snap.env.contains_key("OMPI_COMM_WORLD_SIZE"),
        }
    }
}

/// Why the netdev `n`, named in Open MPI's `*_tcp_if_include` or in `UCX_NET_DEVICES`, gives that library's
/// TCP transport no address another node can use, as `"n (why)"`; `None` when it works. No such link, or
/// no address on it (Open MPI lists only interfaces that hold an address, opal/mca/if; UCX's TCP transport
/// binds the netdev's address, uct/tcp): a failure on any job, like a missing name. In a multi-node job also
/// a link whose addresses are all loopback or link-local (the Multus network whose IPAM has not delivered:
/// `net1` UP with only fe80, #26 item 4): the grounds on which NCCL's value is repaired (`fatal_reason`),
/// IPv4 link-local on the master's own link excepted ([`NetworkView::link_local_ok`]).
pub(super) fn netdev_unusable(view: &NetworkView, n: &str, multi: bool) -> Option<String> {
    let Some(link) = view.link_by_name(n) else {
        return Some(format!("{n} (no such interface)"));
    };
    let addrs: Vec<&IpAddr> = view
        .net
        .addrs
        .iter()
        .filter(|a| a.index == link.index)
        .map(|a| &a.addr)
        .collect();
    let reachable = |a: &IpAddr| {
        !a.is_loopback() && (!is_link_local_ip(a) || view.link_local_ok(link.index, a))
    };
    match addrs.first() {
        None => Some(format!("{n} (it has no address)")),
        Some(_) if multi && !addrs.iter().any(|a| reachable(a)) => Some(format!(
            "{n} (only loopback or link-local addresses, which another node cannot reach)"
        )),
        Some(_) => None,
    }
}
