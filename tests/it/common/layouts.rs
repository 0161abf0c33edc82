//! The network layouts of the field cases (`docs/field-cases.md`, F1–F31, where a case has a network of its own) and
//! a few decoys of the same kind, as builders over a [`Netns`]. Used where a test must run on every layout,
//! e.g. the agreement of ncclenv's model of NCCL with the real library (`tests/it/check_real_nccl.rs`).
//!
//! The field cases whose variants differ only in what the job inherits and runs are also written here as
//! specifications, once: one [`Case`] row per variant (F1–F13, F16, F18–F20, F26–F29), which
//! `tests/it/decide_core.rs` decides as plain data and `tests/it/field_cases.rs` runs through the binary.
//!
//! Each builder leaves the namespace settled: every RUNNING interface (except `lo`) has its IPv6 link-local
//! address, so that two probes of the same layout see the same addresses in the same order.

use super::snapshot::SnapshotBuilder;
use super::Netns;
use ncclenv::snapshot::{RdmaSnapshot, ShmInfo};
use serde_json::Value;
use std::ffi::OsString;
use std::path::Path;

/// One layout: a short name (the field case it comes from) and its builder.
pub struct Layout {
    /// `f1-docker-bridge`, `decoy-virbr`, …
    pub name: &'static str,
    /// Builds the layout in a fresh namespace.
    pub build: fn(&Netns),
}

/// Every layout, in field-case order, then the decoys.
pub const ALL: &[Layout] = &[
    Layout {
        name: "f1-docker-bridge",
        build: f1,
    },
    Layout {
        name: "f2-ens6",
        build: f2,
    },
    Layout {
        name: "f3-compose-bridges-fe80-veths",
        build: f3,
    },
    Layout {
        name: "f4-fe80-veth",
        build: f4,
    },
    Layout {
        name: "f5-eth0-eth1-eth10",
        build: f5,
    },
    Layout {
        name: "f6-eni-fe80",
        build: f6,
    },
    Layout {
        name: "f7-vlan-children",
        build: f7,
    },
    Layout {
        name: "f8-wifi-and-dead-enp3s0",
        build: f8,
    },
    Layout {
        name: "f9-ipv6-only-tunnel-first",
        build: f9,
    },
    Layout {
        name: "f10-lo-only",
        build: f10,
    },
    Layout {
        name: "f11-dead-default-route",
        build: f11,
    },
    Layout {
        name: "f12-multus-net1",
        build: f12,
    },
    Layout {
        name: "f14-roce-bond0",
        build: f14,
    },
    Layout {
        name: "f15-ens1-ib0",
        build: f15,
    },
    Layout {
        name: "f16-ipv4-link-local-cable",
        build: f16,
    },
    Layout {
        name: "f18-docker0-beside-uplink",
        build: f18,
    },
    Layout {
        name: "f27-ipv6-secondary",
        build: f27,
    },
    Layout {
        name: "f28-policy-routing",
        build: f28,
    },
    Layout {
        name: "decoy-docker0-only",
        build: docker_only,
    },
    Layout {
        name: "decoy-virbr0-first",
        build: virbr_first,
    },
    Layout {
        name: "decoy-dead-eth0-first",
        build: dead_first,
    },
    Layout {
        name: "decoy-ipv6-beside-ipv4",
        build: dual_stack,
    },
    Layout {
        name: "label-eno1-avahi",
        build: label_avahi,
    },
    Layout {
        name: "label-eth0-alias",
        build: label_alias,
    },
    Layout {
        name: "deprecated-addresses",
        build: deprecated,
    },
];

/// #26: `eno1` holding avahi-autoipd's 169.254.8.223 (label `eno1:avahi`, link scope, so the kernel lists it
/// first) and 10.10.3.5/24.
pub fn label_avahi(ns: &Netns) {
    ns.plug("eno1");
    ns.addr_with(
        "eno1",
        "169.254.8.223/16",
        &["scope", "link", "label", "eno1:avahi"],
    );
    ns.addr("eno1", "10.10.3.5/24");
    ns.route("default via 10.10.3.1 dev eno1");
    settle(ns);
}

/// #26: `eth0` 192.168.50.2/24 and the alias `eth0:1` 10.20.0.7/24; `eth1` 10.30.1.2/24 beside them.
pub fn label_alias(ns: &Netns) {
    ns.plug("eth0");
    ns.addr("eth0", "192.168.50.2/24");
    ns.addr_with("eth0", "10.20.0.7/24", &["label", "eth0:1"]);
    ns.plug("eth1");
    ns.addr("eth1", "10.30.1.2/24");
    settle(ns);
}

/// #26: `eth0` whose IPv4 and global IPv6 addresses are deprecated (`preferred_lft 0`), `eth1` with a
/// preferred IPv4 address.
pub fn deprecated(ns: &Netns) {
    ns.plug("eth0");
    for a in ["10.30.0.4/24", "fd00:30::4/64"] {
        let mut args = vec![
            "addr",
            "add",
            a,
            "dev",
            "eth0",
            "preferred_lft",
            "0",
            "valid_lft",
            "forever",
        ];
        if a.contains(':') {
            args.push("nodad");
        }
        ns.ip(&args);
    }
    ns.plug("eth1");
    ns.addr("eth1", "10.30.1.2/24");
    settle(ns);
}

/// Waits until every RUNNING interface but `lo` has its IPv6 link-local address (the kernel adds it
/// asynchronously once carrier is up).
pub fn settle(ns: &Netns) {
    let links = ns.ip_json(&["link", "show"]);
    let running: Vec<String> = links
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or(&[])
        .iter()
        .filter(|l| {
            let flags: Vec<&str> = l["flags"]
                .as_array()
                .map(|f| f.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            flags.contains(&"UP") && flags.contains(&"LOWER_UP") && !flags.contains(&"LOOPBACK")
        })
        .filter_map(|l| l["ifname"].as_str().map(String::from))
        .collect();
    for l in running {
        ns.wait_link_local(&l);
    }
}

/// One part of a field case's network, written once: [`Net::build`] makes it in a namespace,
/// [`Net::lay`] as plain data for the decision core. An `fe80::` address in a list is the kernel's own in a
/// namespace (every RUNNING interface gets one; [`settle`] waits for it) and is written out in plain data.
pub enum Part {
    /// A plug (a RUNNING veth) with its addresses.
    Plug(&'static str, &'static [&'static str]),
    /// A stub (a veth without carrier) with its addresses.
    Stub(&'static str, &'static [&'static str]),
    /// A bridge with its addresses (in a namespace it also has a running port, `vethbN`, fe80 only).
    Bridge(&'static str, &'static [&'static str]),
    /// A macvlan child `.0` of `.1`, up, with its addresses.
    Macvlan(&'static str, &'static str, &'static [&'static str]),
    /// A vxlan, up (RUNNING), with its addresses: a stand-in for a tunnel such as `ip6tnl0`.
    Vxlan(&'static str, &'static [&'static str]),
    /// The default route via `.0` out of `.1` with the metric `.2`.
    Default(&'static str, &'static str, u32),
    /// A direct cable: a plug `.0` whose address `.1` has link scope (as link-local autoconfiguration adds
    /// it), and `.2` on the cable's far end (the peer namespace's side of the veth).
    Cable(&'static str, &'static str, &'static str),
    /// The default route via `.0` out of `.1` only in the routing table `.2`, which an `ip rule` (`from all
    /// lookup .2 pref 1000`) consults before table `main`; in plain data, the kernel's answer to an off-link
    /// lookup from that table.
    Table(&'static str, &'static str, u32),
}

/// A field case's network: its parts in creation order (so in the kernel's index order).
pub struct Net(pub &'static [Part]);

impl Net {
    /// Builds the network in `ns` and leaves it settled.
    pub fn build(&self, ns: &Netns) {
        let addrs = |name: &str, cidrs: &[&str]| {
            for c in cidrs.iter().filter(|c| !c.starts_with("fe80:")) {
                ns.addr(name, c);
            }
        };
        let mut children = Vec::new();
        for part in self.0 {
            match *part {
                Part::Plug(name, cidrs) => {
                    ns.plug(name);
                    addrs(name, cidrs);
                }
                Part::Stub(name, cidrs) => {
                    ns.stub(name);
                    addrs(name, cidrs);
                }
                Part::Bridge(name, cidrs) => {
                    ns.bridge(name);
                    addrs(name, cidrs);
                }
                Part::Macvlan(name, parent, cidrs) => {
                    ns.macvlan(name, parent);
                    addrs(name, cidrs);
                    children.push(name);
                }
                Part::Vxlan(name, cidrs) => {
                    ns.vxlan(name);
                    addrs(name, cidrs);
                }
                Part::Default(gw, dev, metric) => {
                    let family = if gw.contains(':') { "-6 " } else { "" };
                    let metric = if metric == 0 {
                        String::new()
                    } else {
                        format!(" metric {metric}")
                    };
                    ns.route(&format!("{family}default via {gw} dev {dev}{metric}"));
                }
                Part::Cable(name, cidr, far) => {
                    let far_end = ns.plug(name);
                    ns.ip(&["addr", "add", cidr, "scope", "link", "dev", name]);
                    ns.peer_ip(&["addr", "add", far, "dev", &far_end]);
                }
                Part::Table(gw, dev, table) => {
                    let table = table.to_string();
                    ns.ip(&[
                        "rule", "add", "from", "all", "lookup", &table, "pref", "1000",
                    ]);
                    ns.ip(&[
                        "route", "add", "default", "via", gw, "dev", dev, "table", &table,
                    ]);
                }
            }
        }
        for name in children {
            ns.wait_running(name);
        }
        settle(ns);
    }

    /// The same network as plain data: `lo`, then every part (plugs and stubs are veths; a bridge has no
    /// port here; a default route out of a stub is `linkdown`, as the kernel flags it).
    pub fn lay(&self) -> SnapshotBuilder {
        let mut l = SnapshotBuilder::new();
        for part in self.0 {
            match *part {
                Part::Plug(name, cidrs) => {
                    l.plug(name, cidrs);
                }
                Part::Stub(name, cidrs) => {
                    l.stub(name, cidrs);
                }
                Part::Bridge(name, cidrs) => {
                    let i = l.link(name, true, Some("bridge"));
                    cidrs.iter().for_each(|c| l.addr(i, c));
                }
                Part::Macvlan(name, _, cidrs) => {
                    let i = l.link(name, true, Some("macvlan"));
                    cidrs.iter().for_each(|c| l.addr(i, c));
                }
                Part::Vxlan(name, cidrs) => {
                    let i = l.link(name, true, Some("vxlan"));
                    cidrs.iter().for_each(|c| l.addr(i, c));
                }
                Part::Default(gw, dev, metric) => {
                    let oif = index(&l, dev);
                    let down = l.net.links.iter().any(|k| k.index == oif && !k.running);
                    l.default_via(gw, oif, metric, down);
                }
                Part::Cable(name, cidr, _) => {
                    l.plug(name, &[cidr]);
                }
                Part::Table(gw, dev, table) => {
                    let oif = index(&l, dev);
                    l.offlink(OFFLINK_PROBE, oif, gw, table);
                }
            }
        }
        l
    }
}

/// The bytes of a tmpfs `size` as `mount -o size=` reads it: a number with an optional `k`, `m` or `g`
/// (binary multiples); panics on anything else (test data).
pub fn tmpfs_bytes(size: &str) -> u64 {
    let (digits, shift) = match size.as_bytes().last() {
        Some(b'k') => (&size[..size.len() - 1], 10),
        Some(b'm') => (&size[..size.len() - 1], 20),
        Some(b'g') => (&size[..size.len() - 1], 30),
        _ => (size, 0),
    };
    digits.parse::<u64>().expect("tmpfs size") << shift
}

/// The off-link destination whose route lookup stands for the probe's (TEST-NET-2, reached only by a default
/// route).
pub const OFFLINK_PROBE: &str = "198.51.100.1";

/// The index of the link `name` in `l`; panics when there is none (test data).
pub fn index(l: &SnapshotBuilder, name: &str) -> u32 {
    l.net
        .links
        .iter()
        .find(|k| k.name == name)
        .map(|k| k.index)
        .unwrap_or_else(|| panic!("no link {name}"))
}

/// F1: `eth0` 172.17.0.2/16, default via 172.17.0.1.
pub const F1: Net = Net(&[
    Part::Plug("eth0", &["172.17.0.2/16"]),
    Part::Default("172.17.0.1", "eth0", 0),
]);

/// F2: `ens6` 10.1.0.10/16 with the default route, no `eth0`.
pub const F2: Net = Net(&[
    Part::Plug("ens6", &["10.1.0.10/16"]),
    Part::Default("10.1.0.1", "ens6", 0),
]);

/// F3: `bond0` with the default route, three compose bridges with running ports, four fe80-only veths.
pub const F3: Net = Net(&[
    Part::Plug("bond0", &["10.10.1.11/24"]),
    Part::Default("10.10.1.1", "bond0", 0),
    Part::Bridge("br-1a2b3c4d5e6f", &["172.19.0.1/16"]),
    Part::Bridge("br-7a8b9c0d1e2f", &["172.21.0.1/16"]),
    Part::Bridge("br-3a4b5c6d7e8f", &["172.30.0.1/16"]),
    Part::Plug("veth1a2b3c4", &["fe80::1/64"]),
    Part::Plug("veth5d6e7f8", &["fe80::2/64"]),
    Part::Plug("veth9a0b1c2", &["fe80::3/64"]),
    Part::Plug("veth3d4e5f6", &["fe80::4/64"]),
]);

/// F4: `ens5` 10.31.0.11/20 with the default route and a RUNNING fe80-only `veth3f2a`.
pub const F4: Net = Net(&[
    Part::Plug("ens5", &["10.31.0.11/20"]),
    Part::Default("10.31.0.1", "ens5", 0),
    Part::Plug("veth3f2a", &["fe80::2/64"]),
]);

/// F5: `eth0` (default route), `eth1`, `eth10`: a prefix trap.
pub const F5: Net = Net(&[
    Part::Plug("eth0", &["10.0.0.5/24"]),
    Part::Default("10.0.0.1", "eth0", 0),
    Part::Plug("eth1", &["10.0.1.5/24"]),
    Part::Plug("eth10", &["10.0.10.5/24"]),
]);

/// F6: `ens5` with the default route and a RUNNING fe80-only `eni4c1d`.
pub const F6: Net = Net(&[
    Part::Plug("ens5", &["10.0.1.10/24"]),
    Part::Default("10.0.1.1", "ens5", 0),
    Part::Plug("eni4c1d", &["fe80::3/64"]),
]);

/// F7: `bond0` with macvlan children `bond0.2973` (an address) and `bond0.2973.1` (fe80 only).
pub const F7: Net = Net(&[
    Part::Plug("bond0", &["10.42.0.11/27"]),
    Part::Default("10.42.0.1", "bond0", 0),
    Part::Macvlan("bond0.2973", "bond0", &["10.0.106.11/16"]),
    Part::Macvlan("bond0.2973.1", "bond0", &["fe80::5/64"]),
]);

/// F8: `wlp2s0` (default route, metric 600) after `enp3s0`, which has an address but no carrier.
pub const F8: Net = Net(&[
    Part::Stub("enp3s0", &["10.0.9.19/24"]),
    Part::Plug("wlp2s0", &["10.0.8.19/24"]),
    Part::Default("10.0.8.1", "wlp2s0", 600),
]);

/// One field case as a specification, read by both the plain-data test (`decide_core`) and the one through
/// the binary in a namespace (`field_cases`): the network, what the job inherits, and what ncclenv must
/// decide.
pub struct Case {
    /// The network.
    pub net: &'static Net,
    /// The inherited variables.
    pub env: &'static [(&'static str, &'static str)],
    /// The job's command when it says something about the job (a launcher and its arguments, program
    /// first), read as the binary reads it (`ncclenv::launcher::read`); empty for a plain command.
    pub command: &'static [&'static str],
    /// The job's node count, when the command says it (`--nnodes=N`).
    pub nnodes: Option<u32>,
    /// `/dev/shm` as an empty private tmpfs of this size (`mount -t tmpfs -o size=…`, e.g. `64m`), looked at
    /// with ncclenv's default minimum; `None`: not looked at (the namespace runs set `NCCLENV_SHM_MIN=0`).
    pub shm: Option<&'static str>,
    /// The job's master and the interface the kernel routes it through, `lo` for an address of this machine
    /// (the peer; its variable is in [`Case::env`]).
    pub peer: Option<(&'static str, &'static str)>,
    /// What the command sees afterwards: a variable's value, or `None` for unset. A value equal to the
    /// inherited one is kept: ncclenv changes nothing.
    pub expect: &'static [(&'static str, Option<&'static str>)],
    /// The finding codes that must be reported.
    pub warns: &'static [&'static str],
    /// The finding codes that must not be.
    pub not: &'static [&'static str],
    /// The info codes that must be reported (as infos, not warnings).
    pub infos: &'static [&'static str],
    /// No warning at all (infos allowed).
    pub quiet: bool,
    /// `NCCLENV_STRICT=1` refuses the job (exit 78); otherwise it runs.
    pub strict_refuses: bool,
}

/// A case with nothing inherited and no warning: `net` decides to `expect`.
const fn plain(net: &'static Net, expect: &'static [(&'static str, Option<&'static str>)]) -> Case {
    Case {
        net,
        env: &[],
        command: &[],
        nnodes: None,
        shm: None,
        peer: None,
        expect,
        warns: &[],
        not: &[],
        infos: &[],
        quiet: true,
        strict_refuses: false,
    }
}

/// A case where the inherited `env` draws the finding `warn`, which strict mode refuses.
const fn warned(
    net: &'static Net,
    env: &'static [(&'static str, &'static str)],
    expect: &'static [(&'static str, Option<&'static str>)],
    warn: &'static [&'static str],
) -> Case {
    Case {
        env,
        warns: warn,
        quiet: false,
        strict_refuses: true,
        ..plain(net, expect)
    }
}

/// F1: everything on `eth0`, nothing to warn, strict mode runs.
pub const CASE_F1: Case = plain(
    &F1,
    &[
        ("NCCL_SOCKET_IFNAME", Some("eth0")),
        ("NCCL_SOCKET_FAMILY", Some("AF_INET")),
        ("GLOO_SOCKET_IFNAME", Some("eth0")),
        ("TP_SOCKET_IFNAME", Some("eth0")),
        ("POD_IP", Some("172.17.0.2")),
    ],
);

/// F2, nothing inherited: `ens6`.
pub const CASE_F2: Case = plain(
    &F2,
    &[
        ("NCCL_SOCKET_IFNAME", Some("ens6")),
        ("GLOO_SOCKET_IFNAME", Some("ens6")),
        ("POD_IP", Some("10.1.0.10")),
    ],
);

/// F2: the image's `NCCL_SOCKET_IFNAME=eth0` in a 2-node job is repaired to `ens6`.
pub const CASE_F2_BAKED: Case = Case {
    nnodes: Some(2),
    ..warned(
        &F2,
        &[("NCCL_SOCKET_IFNAME", "eth0")],
        &[
            ("NCCL_SOCKET_IFNAME", Some("ens6")),
            ("NCCL_SOCKET_FAMILY", Some("AF_INET")),
            ("GLOO_SOCKET_IFNAME", Some("ens6")),
            ("POD_IP", Some("10.1.0.10")),
        ],
        &["inherited-ifname-repaired"],
    )
};

/// F3: `bond0` despite the bridges and veths.
pub const CASE_F3: Case = plain(
    &F3,
    &[
        ("NCCL_SOCKET_IFNAME", Some("bond0")),
        ("GLOO_SOCKET_IFNAME", Some("bond0")),
        ("TP_SOCKET_IFNAME", Some("bond0")),
        ("POD_IP", Some("10.10.1.11")),
    ],
);

/// F4: `ens5` despite the fe80-only veth.
pub const CASE_F4: Case = plain(
    &F4,
    &[
        ("NCCL_SOCKET_IFNAME", Some("ens5")),
        ("GLOO_SOCKET_IFNAME", Some("ens5")),
        ("POD_IP", Some("10.31.0.11")),
    ],
);

/// F5, nothing inherited: `eth0`, the plain name (nothing else starts with it).
pub const CASE_F5: Case = plain(
    &F5,
    &[
        ("NCCL_SOCKET_IFNAME", Some("eth0")),
        ("GLOO_SOCKET_IFNAME", Some("eth0")),
        ("POD_IP", Some("10.0.0.5")),
    ],
);

/// F5: an inherited `eth2` (no such interface) is repaired to `eth0`.
pub const CASE_F5_MISSING: Case = warned(
    &F5,
    &[("NCCL_SOCKET_IFNAME", "eth2")],
    &[
        ("NCCL_SOCKET_IFNAME", Some("eth0")),
        ("GLOO_SOCKET_IFNAME", Some("eth0")),
        ("POD_IP", Some("10.0.0.5")),
    ],
    &["inherited-ifname-repaired"],
);

/// F5: an inherited `eth1` (also matches `eth10`) is kept with a warning.
pub const CASE_F5_PREFIX: Case = Case {
    not: &["inherited-ifname-repaired"],
    ..warned(
        &F5,
        &[("NCCL_SOCKET_IFNAME", "eth1")],
        &[
            ("NCCL_SOCKET_IFNAME", Some("eth1")),
            ("GLOO_SOCKET_IFNAME", Some("eth1")),
            ("TP_SOCKET_IFNAME", Some("eth1")),
            ("POD_IP", Some("10.0.1.5")),
        ],
        &["inherited-ifname-prefix"],
    )
};

/// F6: NCCL's list syntax kept for NCCL, repaired for Gloo.
pub const CASE_F6: Case = Case {
    peer: Some(("10.0.1.20", "ens5")),
    not: &["inherited-ifname-prefix", "inherited-ifname-repaired"],
    ..warned(
        &F6,
        &[
            ("NCCL_SOCKET_IFNAME", "^lo,docker,veth,eni"),
            ("GLOO_SOCKET_IFNAME", "^lo,docker,veth,eni"),
            ("MASTER_ADDR", "10.0.1.20"),
        ],
        &[
            ("NCCL_SOCKET_IFNAME", Some("^lo,docker,veth,eni")),
            ("NCCL_SOCKET_FAMILY", Some("AF_INET")),
            ("GLOO_SOCKET_IFNAME", Some("ens5")),
            ("TP_SOCKET_IFNAME", Some("ens5")),
            ("POD_IP", Some("10.0.1.10")),
        ],
        &["gloo-ifname-repaired"],
    )
};

/// F7, nothing inherited: the exact `=bond0` (the plain name would match the children).
pub const CASE_F7: Case = plain(
    &F7,
    &[
        ("NCCL_SOCKET_IFNAME", Some("=bond0")),
        ("GLOO_SOCKET_IFNAME", Some("bond0")),
        ("TP_SOCKET_IFNAME", Some("bond0")),
        ("POD_IP", Some("10.42.0.11")),
    ],
);

/// F7: an inherited `bond0` is kept with a warning that NET/Socket also stripes over the children.
pub const CASE_F7_PREFIX: Case = warned(
    &F7,
    &[("NCCL_SOCKET_IFNAME", "bond0")],
    &[
        ("NCCL_SOCKET_IFNAME", Some("bond0")),
        ("GLOO_SOCKET_IFNAME", Some("bond0")),
        ("POD_IP", Some("10.42.0.11")),
    ],
    &["inherited-ifname-prefix"],
);

/// F8, nothing inherited: the Wi-Fi uplink `wlp2s0`.
pub const CASE_F8: Case = plain(
    &F8,
    &[
        ("NCCL_SOCKET_IFNAME", Some("wlp2s0")),
        ("GLOO_SOCKET_IFNAME", Some("wlp2s0")),
        ("POD_IP", Some("10.0.8.19")),
    ],
);

/// F8: an inherited `en,eth,bond` (only the dead `enp3s0` matches) is repaired to `wlp2s0`.
pub const CASE_F8_LIST: Case = warned(
    &F8,
    &[("NCCL_SOCKET_IFNAME", "en,eth,bond")],
    &[
        ("NCCL_SOCKET_IFNAME", Some("wlp2s0")),
        ("GLOO_SOCKET_IFNAME", Some("wlp2s0")),
        ("POD_IP", Some("10.0.8.19")),
    ],
    &["inherited-ifname-repaired"],
);

/// F9: IPv6 only: `veth0` and `AF_INET6`, no `POD_IP` (Paddle's is IPv4 only).
pub const CASE_F9: Case = plain(
    &F9,
    &[
        ("NCCL_SOCKET_IFNAME", Some("veth0")),
        ("NCCL_SOCKET_FAMILY", Some("AF_INET6")),
        ("GLOO_SOCKET_IFNAME", Some("veth0")),
        ("TP_SOCKET_IFNAME", Some("veth0")),
        ("POD_IP", None),
    ],
);

/// F10, single node or shape unknown: `lo`, with a warning; strict mode refuses rather than guess.
pub const CASE_F10: Case = warned(
    &F10,
    &[],
    &[
        ("NCCL_SOCKET_IFNAME", Some("lo")),
        ("NCCL_SOCKET_FAMILY", Some("AF_INET")),
        ("GLOO_SOCKET_IFNAME", Some("lo")),
        ("TP_SOCKET_IFNAME", Some("lo")),
        ("POD_IP", None),
    ],
    &["loopback-only"],
);

/// F11: the live `eth1`, with a warning naming the dead default route; not a strict refusal.
pub const CASE_F11: Case = Case {
    strict_refuses: false,
    ..warned(
        &F11,
        &[],
        &[
            ("NCCL_SOCKET_IFNAME", Some("eth1")),
            ("GLOO_SOCKET_IFNAME", Some("eth1")),
            ("POD_IP", Some("10.0.1.2")),
        ],
        &["default-route-down"],
    )
};

/// F12, no peer: the default route decides, `eth0`.
pub const CASE_F12: Case = Case {
    quiet: false,
    ..plain(
        &F12,
        &[
            ("NCCL_SOCKET_IFNAME", Some("eth0")),
            ("POD_IP", Some("10.244.1.11")),
        ],
    )
};

/// What the command sees on F12 when the peer decides: `net1`.
pub const F12_NET1: &[(&str, Option<&str>)] = &[
    ("NCCL_SOCKET_IFNAME", Some("net1")),
    ("NCCL_SOCKET_FAMILY", Some("AF_INET")),
    ("GLOO_SOCKET_IFNAME", Some("net1")),
    ("TP_SOCKET_IFNAME", Some("net1")),
    ("POD_IP", Some("10.100.0.11")),
];

/// F12: the master 10.100.0.12 is on the Multus network: `net1`.
pub const CASE_F12_PEER: Case = Case {
    env: &[("MASTER_ADDR", "10.100.0.12")],
    peer: Some(("10.100.0.12", "net1")),
    ..plain(&F12, F12_NET1)
};

/// F12: this pod is the master (`MASTER_ADDR=10.100.0.11`, a local address): its owner `net1`.
pub const CASE_F12_LOCAL: Case = Case {
    env: &[("MASTER_ADDR", "10.100.0.11")],
    peer: Some(("10.100.0.11", "lo")),
    ..plain(&F12, F12_NET1)
};

/// What the command sees on F13's network with 4 GPUs and too small a `/dev/shm`: `eth0`, no shared memory.
const F13_SMALL: &[(&str, Option<&str>)] = &[
    ("NCCL_SOCKET_IFNAME", Some("eth0")),
    ("NCCL_SHM_DISABLE", Some("1")),
];

/// F13, NVIDIA/nccl#342 and PaddlePaddle/Paddle#29331: Docker's 64 MiB `/dev/shm` on F1's network with
/// `CUDA_VISIBLE_DEVICES=0,1,2,3` → `NCCL_SHM_DISABLE=1` and `shm-too-small` (not a strict refusal).
pub const CASE_F13: Case = Case {
    env: &[("CUDA_VISIBLE_DEVICES", "0,1,2,3")],
    shm: Some("64m"),
    warns: &["shm-too-small"],
    quiet: false,
    ..plain(&F1, F13_SMALL)
};

/// F13: an inherited `NCCL_SHM_DISABLE=1` is kept, and nothing is said.
pub const CASE_F13_KEPT: Case = Case {
    env: &[
        ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
        ("NCCL_SHM_DISABLE", "1"),
    ],
    warns: &[],
    not: &["shm-too-small"],
    quiet: true,
    ..CASE_F13
};

/// F13: an inherited `NCCL_SHM_DISABLE=0` is kept too, with the warning.
pub const CASE_F13_KEPT_ON: Case = Case {
    env: &[
        ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
        ("NCCL_SHM_DISABLE", "0"),
    ],
    expect: &[
        ("NCCL_SOCKET_IFNAME", Some("eth0")),
        ("NCCL_SHM_DISABLE", Some("0")),
    ],
    ..CASE_F13
};

/// F13 with a 1 GiB `/dev/shm`: `NCCL_SHM_DISABLE` stays unset.
pub const CASE_F13_ROOM: Case = Case {
    env: &[("CUDA_VISIBLE_DEVICES", "0,1,2,3")],
    shm: Some("1g"),
    ..plain(
        &F1,
        &[
            ("NCCL_SOCKET_IFNAME", Some("eth0")),
            ("NCCL_SHM_DISABLE", None),
        ],
    )
};

/// What the command sees on F16's cable: every variable names `enp3s0`, `POD_IP` its link-local address.
pub const F16_CABLE: &[(&str, Option<&str>)] = &[
    ("NCCL_SOCKET_IFNAME", Some("enp3s0")),
    ("NCCL_SOCKET_FAMILY", Some("AF_INET")),
    ("GLOO_SOCKET_IFNAME", Some("enp3s0")),
    ("TP_SOCKET_IFNAME", Some("enp3s0")),
    ("POD_IP", Some("169.254.94.75")),
];

/// Paddle's launcher with its HTTP master on F16's cable, 2 nodes.
const F16_PADDLE: &[&str] = &[
    "python",
    "-m",
    "paddle.distributed.launch",
    "--master=169.254.60.61:36011",
    "--nnodes=2",
    "train.py",
    "--lr=0.1",
];

/// F16, PaddlePaddle/Paddle#47130: `--master` on the far end of a link-local cable → the cable.
pub const CASE_F16: Case = Case {
    command: F16_PADDLE,
    peer: Some(("169.254.60.61", "enp3s0")),
    ..plain(&F16, F16_CABLE)
};

/// F16: this node is the master on the cable (`--master=169.254.94.75:36011`, its own address) → the
/// interface owning the address.
pub const CASE_F16_MASTER: Case = Case {
    command: &[
        "python",
        "-m",
        "paddle.distributed.launch",
        "--master=169.254.94.75:36011",
        "--nnodes=2",
        "train.py",
        "--lr=0.1",
    ],
    peer: Some(("169.254.94.75", "lo")),
    ..plain(&F16, F16_CABLE)
};

/// F16: an inherited `NCCL_SOCKET_IFNAME=enp3s0` naming the cable is kept, neither called risky nor
/// repaired.
pub const CASE_F16_KEPT: Case = Case {
    env: &[("NCCL_SOCKET_IFNAME", "enp3s0")],
    not: &["inherited-ifname-repaired", "inherited-ifname-risky"],
    ..CASE_F16
};

/// F16 with `eno1` holding the default route: the route to the master still leaves through the cable.
pub const CASE_F16_UPLINK: Case = Case {
    net: &F16_UPLINK,
    ..CASE_F16
};

/// F16 with `eno1`: the inherited `enp3s0` is kept there too.
pub const CASE_F16_UPLINK_KEPT: Case = Case {
    net: &F16_UPLINK,
    ..CASE_F16_KEPT
};

/// F16 with `eno1` and no master named → `eno1`: link-local is never taken by the default route or ranking.
pub const CASE_F16_UPLINK_NO_PEER: Case = plain(
    &F16_UPLINK,
    &[
        ("NCCL_SOCKET_IFNAME", Some("eno1")),
        ("GLOO_SOCKET_IFNAME", Some("eno1")),
        ("POD_IP", Some("10.20.0.5")),
    ],
);

/// F16 with `eno1`, no master, 2 nodes: an inherited `enp3s0` (link-local only) is repaired to `eno1`.
pub const CASE_F16_UPLINK_REPAIRED: Case = Case {
    nnodes: Some(2),
    ..warned(
        &F16_UPLINK,
        &[("NCCL_SOCKET_IFNAME", "enp3s0")],
        &[
            ("NCCL_SOCKET_IFNAME", Some("eno1")),
            ("GLOO_SOCKET_IFNAME", Some("eno1")),
            ("POD_IP", Some("10.20.0.5")),
        ],
        &["inherited-ifname-repaired"],
    )
};

/// What the command sees on F18: the bootstrap interface `enp73s0`, NCCL's transport untouched (no
/// `NCCL_IB_DISABLE` although no RDMA device is there).
const F18_BOOTSTRAP: &[(&str, Option<&str>)] = &[
    ("NCCL_SOCKET_IFNAME", Some("enp73s0")),
    ("NCCL_SOCKET_FAMILY", Some("AF_INET")),
    ("GLOO_SOCKET_IFNAME", Some("enp73s0")),
    ("TP_SOCKET_IFNAME", Some("enp73s0")),
    ("POD_IP", Some("10.1.239.200")),
    ("NCCL_IB_DISABLE", None),
];

/// The EFA profile of F18.
const F18_EFA: &[(&str, &str)] = &[("FI_PROVIDER", "efa"), ("NCCL_NET_PLUGIN", "ofi")];

/// F18, aws-samples/aws-do-eks#69: an EFA profile (`FI_PROVIDER=efa`, `NCCL_NET_PLUGIN=ofi`) → the bootstrap
/// interface is set, the transport left alone.
pub const CASE_F18: Case = Case {
    env: F18_EFA,
    infos: &["vendor-profile"],
    ..plain(&F18, F18_BOOTSTRAP)
};

/// F18 without the profile (the control): `NCCL_IB_DISABLE=1`, since no RDMA device is there.
pub const CASE_F18_NO_PROFILE: Case = Case {
    not: &["vendor-profile"],
    ..plain(
        &F18,
        &[
            ("NCCL_SOCKET_IFNAME", Some("enp73s0")),
            ("GLOO_SOCKET_IFNAME", Some("enp73s0")),
            ("NCCL_IB_DISABLE", Some("1")),
        ],
    )
};

/// F18: under the profile an inherited `NCCL_SOCKET_IFNAME=eth9` that would fail is kept and warned, never
/// repaired; strict mode refuses.
pub const CASE_F18_KEPT: Case = Case {
    infos: &["vendor-profile"],
    not: &["inherited-ifname-repaired"],
    ..warned(
        &F18,
        &[
            ("FI_PROVIDER", "efa"),
            ("NCCL_NET_PLUGIN", "ofi"),
            ("NCCL_SOCKET_IFNAME", "eth9"),
        ],
        &[
            ("NCCL_SOCKET_IFNAME", Some("eth9")),
            ("GLOO_SOCKET_IFNAME", Some("enp73s0")),
            ("NCCL_IB_DISABLE", None),
        ],
        &["vendor-value-kept"],
    )
};

/// What the command sees on F19's pod when the master is on the Multus network: `net1`.
pub const F19_NET1: &[(&str, Option<&str>)] = &[
    ("NCCL_SOCKET_IFNAME", Some("net1")),
    ("GLOO_SOCKET_IFNAME", Some("net1")),
    ("TP_SOCKET_IFNAME", Some("net1")),
    ("POD_IP", Some("10.100.0.7")),
];

/// F19, a Kubeflow PyTorchJob: `torchrun train.py` with `PET_NNODES=2` and `PET_RDZV_ENDPOINT` on `net1` →
/// `net1`.
pub const CASE_F19: Case = Case {
    env: &[
        ("PET_NNODES", "2"),
        ("PET_RDZV_ENDPOINT", "10.100.0.5:29400"),
        ("PET_NODE_RANK", "1"),
    ],
    command: &["torchrun", "train.py"],
    peer: Some(("10.100.0.5", "net1")),
    ..plain(&F19, F19_NET1)
};

/// F19 with `PET_MASTER_ADDR` and `PET_MASTER_PORT` instead of the endpoint → `net1`.
pub const CASE_F19_MASTER_ADDR: Case = Case {
    env: &[
        ("PET_NNODES", "2"),
        ("PET_MASTER_ADDR", "10.100.0.5"),
        ("PET_MASTER_PORT", "23456"),
    ],
    ..CASE_F19
};

/// F19: a flag wins over its `PET_` variable, as in torchrun: `--master-addr 10.244.0.9` beside
/// `PET_MASTER_ADDR=10.100.0.5` → `eth0`.
pub const CASE_F19_FLAG_WINS: Case = Case {
    env: CASE_F19_MASTER_ADDR.env,
    command: &["torchrun", "--master-addr", "10.244.0.9", "train.py"],
    peer: Some(("10.244.0.9", "eth0")),
    ..plain(
        &F19,
        &[
            ("NCCL_SOCKET_IFNAME", Some("eth0")),
            ("GLOO_SOCKET_IFNAME", Some("eth0")),
            ("POD_IP", Some("10.244.0.5")),
        ],
    )
};

/// Paddle's launcher with its HTTP master 10.100.0.5:8090 on F19's `net1`, 2 nodes.
const F20_PADDLE: &[&str] = &[
    "python",
    "-m",
    "paddle.distributed.launch",
    "--master=10.100.0.5:8090",
    "--nnodes=2",
    "train.py",
    "--lr=0.1",
];

/// A proxy for the rows of F20.
const PROXY: &str = "http://proxy.example:3128";

/// F20: torchrun's static rendezvous is raw TCP: `HTTPS_PROXY` and `HTTP_PROXY` catch nothing.
pub const CASE_F20_TORCHRUN: Case = Case {
    env: &[("HTTPS_PROXY", PROXY), ("HTTP_PROXY", PROXY)],
    command: &[
        "torchrun",
        "--nnodes=2",
        "--master-addr=10.100.0.5",
        "train.py",
    ],
    peer: Some(("10.100.0.5", "net1")),
    not: &["proxy-catches-peer"],
    ..plain(&F19, F19_NET1)
};

/// F20: Paddle's HTTP master with `HTTP_PROXY` and no `NO_PROXY` → `proxy-catches-peer` (not a strict
/// refusal).
pub const CASE_F20_PADDLE: Case = Case {
    env: &[("HTTP_PROXY", PROXY)],
    command: F20_PADDLE,
    peer: Some(("10.100.0.5", "net1")),
    warns: &["proxy-catches-peer"],
    quiet: false,
    ..plain(&F19, F19_NET1)
};

/// F20: `NO_PROXY` covering the master exempts it.
pub const CASE_F20_NO_PROXY: Case = Case {
    env: &[("HTTP_PROXY", PROXY), ("NO_PROXY", "10.100.0.0/16")],
    warns: &[],
    not: &["proxy-catches-peer"],
    quiet: true,
    ..CASE_F20_PADDLE
};

/// F20: lower-case proxies alone are no risk to Paddle: its launcher clears them itself.
pub const CASE_F20_LOWER_CASE: Case = Case {
    env: &[("http_proxy", PROXY), ("https_proxy", PROXY)],
    ..CASE_F20_NO_PROXY
};

/// F20: Paddle with `--ips` only has no HTTP rendezvous → no warning.
pub const CASE_F20_IPS: Case = Case {
    env: &[("HTTP_PROXY", PROXY)],
    command: &[
        "python",
        "-m",
        "paddle.distributed.launch",
        "--ips=10.100.0.5,10.100.0.7",
        "train.py",
    ],
    ..CASE_F20_NO_PROXY
};

/// `horovodrun` across two hosts (F26).
const HOROVODRUN: &[&str] = &[
    "horovodrun",
    "-np",
    "2",
    "-H",
    "node-a:1,node-b:1",
    "python",
    "train.py",
];

/// What the command sees on F26 with `NCCL_SOCKET_IFNAME=em2` inherited: every library on `em2`.
const F26_EM2: &[(&str, Option<&str>)] = &[
    ("NCCL_SOCKET_IFNAME", Some("em2")),
    ("GLOO_SOCKET_IFNAME", Some("em2")),
    ("HOROVOD_GLOO_IFACE", Some("em2")),
];

/// F26, horovod/horovod#1341: `HOROVOD_GLOO_IFACE=eth0` (no such interface) beside `NCCL_SOCKET_IFNAME=em2`
/// → NCCL keeps `em2`, Horovod's variable is repaired to `em2`.
pub const CASE_F26: Case = Case {
    command: HOROVODRUN,
    ..warned(
        &F26,
        &[
            ("HOROVOD_GLOO_IFACE", "eth0"),
            ("NCCL_SOCKET_IFNAME", "em2"),
        ],
        F26_EM2,
        &["launcher-ifname-repaired"],
    )
};

/// F26 with a list, one name missing (`em1,enp129s0f1`): repaired the same way.
pub const CASE_F26_LIST: Case = Case {
    env: &[
        ("HOROVOD_GLOO_IFACE", "em1,enp129s0f1"),
        ("NCCL_SOCKET_IFNAME", "em2"),
    ],
    ..CASE_F26
};

/// F26 with `HOROVOD_GLOO_IFACE` unset: `horovodrun` gets NCCL's interface.
pub const CASE_F26_UNSET: Case = Case {
    env: &[("NCCL_SOCKET_IFNAME", "em2")],
    command: HOROVODRUN,
    ..plain(&F26, F26_EM2)
};

/// What mpirun is given on F26 when it may span nodes and nothing is inherited: em1's network for both of
/// Open MPI's TCP components (another node's NIC may have another name, #21).
const F26_MPI_NETWORK: &[(&str, Option<&str>)] = &[
    ("NCCL_SOCKET_IFNAME", Some("em1")),
    ("OMPI_MCA_btl_tcp_if_include", Some("10.5.1.0/24")),
    ("OMPI_MCA_oob_tcp_if_include", Some("10.5.1.0/24")),
];

/// F26 with `mpirun` across two hosts: a missing `OMPI_MCA_btl_tcp_if_include=eth9` is repaired to em1's
/// network, a CIDR (`oob`) that covers em2 is kept with `companion-differs`, and mpirun forwards ncclenv's
/// variables (`OMPI_MCA_mca_base_env_list`).
pub const CASE_F26_MPI: Case = Case {
    command: &["mpirun", "-np", "2", "-H", "a,b", "python", "train.py"],
    ..warned(
        &F26,
        &[
            ("OMPI_MCA_btl_tcp_if_include", "eth9"),
            ("OMPI_MCA_oob_tcp_if_include", "10.5.2.0/24"),
        ],
        &[
            ("NCCL_SOCKET_IFNAME", Some("em1")),
            ("OMPI_MCA_btl_tcp_if_include", Some("10.5.1.0/24")),
            ("OMPI_MCA_oob_tcp_if_include", Some("10.5.2.0/24")),
            (
                "OMPI_MCA_mca_base_env_list",
                Some("NCCL_SOCKET_IFNAME;NCCL_SOCKET_FAMILY;GLOO_SOCKET_IFNAME;TP_SOCKET_IFNAME"),
            ),
        ],
        &["launcher-ifname-repaired", "companion-differs"],
    )
};

/// F26 with `mpirun` and nothing inherited, the hosts unknown: em1's network for both components.
pub const CASE_F26_MPI_UNSET: Case = Case {
    command: &["mpirun", "-np", "2", "python", "train.py"],
    ..plain(&F26, F26_MPI_NETWORK)
};

/// F26 with `mpirun` on one host (`-H a:2`): the interface's name for both components, nothing forwarded.
pub const CASE_F26_MPI_ONE_NODE: Case = Case {
    command: &["mpirun", "-np", "2", "-H", "a:2", "python", "train.py"],
    ..plain(
        &F26,
        &[
            ("OMPI_MCA_btl_tcp_if_include", Some("em1")),
            ("OMPI_MCA_oob_tcp_if_include", Some("em1")),
            ("OMPI_MCA_mca_base_env_list", None),
        ],
    )
};

/// F27, THUDM/slime#2151: SGLang's `--dist-init-addr [fd00:20::11]:5000` on the IPv6-only `net1` → `net1`,
/// `AF_INET6`, no `POD_IP`.
pub const CASE_F27: Case = Case {
    command: &[
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "m",
        "--dist-init-addr",
        "[fd00:20::11]:5000",
        "--nnodes",
        "2",
        "--node-rank",
        "1",
    ],
    peer: Some(("fd00:20::11", "net1")),
    ..plain(
        &F27,
        &[
            ("NCCL_SOCKET_IFNAME", Some("net1")),
            ("NCCL_SOCKET_FAMILY", Some("AF_INET6")),
            ("GLOO_SOCKET_IFNAME", Some("net1")),
            ("TP_SOCKET_IFNAME", Some("net1")),
            ("POD_IP", None),
        ],
    )
};

/// F28, aws/aws-parallelcluster-cookbook#2766: the default route only in table 300 → `ens6`, no
/// `no-route-decided`.
pub const CASE_F28: Case = Case {
    not: &["no-route-decided"],
    ..plain(
        &F28,
        &[
            ("NCCL_SOCKET_IFNAME", Some("ens6")),
            ("GLOO_SOCKET_IFNAME", Some("ens6")),
            ("POD_IP", Some("10.7.2.10")),
        ],
    )
};

/// What the command sees on F29 when this node's declared address decides: `eth0`.
const F29_ETH0: &[(&str, Option<&str>)] = &[
    ("NCCL_SOCKET_IFNAME", Some("eth0")),
    ("GLOO_SOCKET_IFNAME", Some("eth0")),
    ("POD_IP", Some("10.0.1.12")),
];

/// F29, vllm-project/vllm#15071: `VLLM_HOST_IP=10.0.1.12` with `vllm serve` → `eth0`, the interface owning
/// it, not the default route's `eth1`.
pub const CASE_F29: Case = Case {
    env: &[("VLLM_HOST_IP", "10.0.1.12")],
    command: &["vllm", "serve", "model", "--tensor-parallel-size", "16"],
    ..plain(&F29, F29_ETH0)
};

/// F29 with Ray's head: `ray start --head --node-ip-address=10.0.1.12` → `eth0`.
pub const CASE_F29_RAY_HEAD: Case = Case {
    command: &["ray", "start", "--head", "--node-ip-address=10.0.1.12"],
    ..plain(&F29, F29_ETH0)
};

/// F29: a Ray worker whose head 10.8.0.50 is reached through `eth1`: the route decides, and the
/// disagreement with `--node-ip-address` is said (not a strict refusal).
pub const CASE_F29_RAY_WORKER: Case = Case {
    command: &[
        "ray",
        "start",
        "--address=10.8.0.50:6379",
        "--node-ip-address=10.0.1.12",
    ],
    peer: Some(("10.8.0.50", "eth1")),
    warns: &["advertised-address-differs"],
    quiet: false,
    ..plain(&F29, &[("NCCL_SOCKET_IFNAME", Some("eth1"))])
};

/// F29 without a declared address (the control): the default route's `eth1`.
pub const CASE_F29_NO_ADDRESS: Case = plain(
    &F29,
    &[
        ("NCCL_SOCKET_IFNAME", Some("eth1")),
        ("GLOO_SOCKET_IFNAME", Some("eth1")),
        ("POD_IP", Some("10.8.0.12")),
    ],
);

impl Case {
    /// The plain-data machine of this case: [`Net::lay`] with the inherited values; the job as the binary
    /// reads it from the command and the variables (`ncclenv::launcher::read`), the node count, and the
    /// kernel's route to the master the job names (the row's peer, which every row naming a master gives);
    /// RDMA probed and no device found, as the binary finds in the empty sysfs of `field_cases`.
    pub fn lay(&self) -> SnapshotBuilder {
        let mut l = self.net.lay();
        for (k, v) in self.env {
            l.env(k, v);
        }
        let argv: Vec<OsString> = self.command.iter().map(OsString::from).collect();
        let info = ncclenv::launcher::read(&argv, &l.env);
        l.job = info.shape;
        if let Some(n) = self.nnodes {
            l.nnodes(n);
        }
        l.rdma = Some(RdmaSnapshot::default());
        if let Some(size) = self.shm {
            let bytes = tmpfs_bytes(size);
            l.shm = Some(ShmInfo {
                path: "/dev/shm".into(),
                total_bytes: Some(bytes),
                free_bytes: Some(bytes),
                writable: Some(true),
                ..ShmInfo::default()
            });
            // The GPUs as the binary counts them with no device node and no driver (an empty devfs).
            let none = Path::new("/nonexistent");
            l.gpus = Some(ncclenv::probe::host::gpu_count_with(&l.env, none, none));
        }
        match (self.peer, info.master) {
            (Some((dest, dev)), Some(master)) => {
                assert_eq!(
                    master.value.host, dest,
                    "the row's peer is the job's master"
                );
                // The kernel answers a local address from `lo` (`ip route get` says `dev lo`).
                let oif = index(&l, dev);
                l.peer(&master.source, dest, Some(oif), dev == "lo");
                if let Some(p) = l.peer.as_mut() {
                    p.port = master.value.port;
                }
            }
            (None, None) => {}
            (peer, master) => panic!("the row's peer {peer:?} and the job's master {master:?}"),
        }
        l
    }

    /// What the command must see: [`Case::expect`], then the defaults that `field_cases`' `Job::check` also
    /// adds where the row is silent: `NCCL_IB_DISABLE=1` (no RDMA device) and no `NCCL_SHM_DISABLE`.
    pub fn expected(&self) -> Vec<(&'static str, Option<&'static str>)> {
        let mut all = self.expect.to_vec();
        for (k, v) in [("NCCL_IB_DISABLE", Some("1")), ("NCCL_SHM_DISABLE", None)] {
            if !all.iter().any(|(e, _)| *e == k) {
                all.push((k, v));
            }
        }
        all
    }

    /// The inherited value of `k`, if any.
    pub fn inherited(&self, k: &str) -> Option<&'static str> {
        self.env.iter().find(|(n, _)| *n == k).map(|(_, v)| *v)
    }
}

/// [`F1`] in `ns`.
pub fn f1(ns: &Netns) {
    F1.build(ns);
}

/// [`F2`] in `ns`.
pub fn f2(ns: &Netns) {
    F2.build(ns);
}

/// [`F3`] in `ns`.
pub fn f3(ns: &Netns) {
    F3.build(ns);
}

/// [`F4`] in `ns`.
pub fn f4(ns: &Netns) {
    F4.build(ns);
}

/// [`F5`] in `ns`.
pub fn f5(ns: &Netns) {
    F5.build(ns);
}

/// [`F6`] in `ns`.
pub fn f6(ns: &Netns) {
    F6.build(ns);
}

/// [`F7`] in `ns`.
pub fn f7(ns: &Netns) {
    F7.build(ns);
}

/// [`F8`] in `ns`.
pub fn f8(ns: &Netns) {
    F8.build(ns);
}

/// F9: IPv6 only; a vxlan `ip6tnl0` (fe80 only, lower index) and `veth0` fd00:10::5/64 with the default route.
pub const F9: Net = Net(&[
    Part::Vxlan("ip6tnl0", &["fe80::9/64"]),
    Part::Plug("veth0", &["fd00:10::5/64", "fe80::5/64"]),
    Part::Default("fe80::1", "veth0", 1024),
]);

/// F10: only `lo`.
pub const F10: Net = Net(&[]);

/// F11: `eth0` without carrier holds the preferred default route; `eth1` the second one.
pub const F11: Net = Net(&[
    Part::Stub("eth0", &["10.0.0.2/24"]),
    Part::Default("10.0.0.1", "eth0", 100),
    Part::Plug("eth1", &["10.0.1.2/24"]),
    Part::Default("10.0.1.1", "eth1", 200),
]);

/// F12: `eth0` with the default route; Multus `net1` (a macvlan on `ext0`, which has no address).
pub const F12: Net = Net(&[
    Part::Plug("eth0", &["10.244.1.11/24"]),
    Part::Default("10.244.1.1", "eth0", 0),
    Part::Plug("ext0", &[]),
    Part::Macvlan("net1", "ext0", &["10.100.0.11/24"]),
]);

/// F16 (PaddlePaddle/Paddle#47130): node B's `enp3s0` 169.254.94.75/16 on a direct cable to the master
/// 169.254.60.61 (the cable's far end); no default route.
pub const F16: Net = Net(&[Part::Cable(
    "enp3s0",
    "169.254.94.75/16",
    "169.254.60.61/16",
)]);

/// F16 with a second NIC: `eno1` 10.20.0.5/24 holds the default route beside the cable.
pub const F16_UPLINK: Net = Net(&[
    Part::Cable("enp3s0", "169.254.94.75/16", "169.254.60.61/16"),
    Part::Plug("eno1", &["10.20.0.5/24"]),
    Part::Default("10.20.0.1", "eno1", 0),
]);

/// F18 (aws-samples/aws-do-eks#69): host network, `docker0` 172.17.0.1/16 with a running port, `enp73s0`
/// with the default route.
pub const F18: Net = Net(&[
    Part::Bridge("docker0", &["172.17.0.1/16"]),
    Part::Plug("enp73s0", &["10.1.239.200/16"]),
    Part::Default("10.1.0.1", "enp73s0", 0),
]);

/// F19 (a Kubeflow PyTorchJob pod, also F20's and F21's): `eth0` with the default route, Multus `net1`
/// 10.100.0.7/24.
pub const F19: Net = Net(&[
    Part::Plug("eth0", &["10.244.0.5/24"]),
    Part::Default("10.244.0.1", "eth0", 0),
    Part::Plug("net1", &["10.100.0.7/24"]),
]);

/// F26 (horovod/horovod#1341): `em1` with the default route, `em2` beside it.
pub const F26: Net = Net(&[
    Part::Plug("em1", &["10.5.1.11/24"]),
    Part::Default("10.5.1.1", "em1", 0),
    Part::Plug("em2", &["10.5.2.11/24"]),
]);

/// F27 (THUDM/slime#2151): `eth0` 10.30.0.11/24 with the default route, `net1` with only fd00:20::12/64.
pub const F27: Net = Net(&[
    Part::Plug("eth0", &["10.30.0.11/24"]),
    Part::Default("10.30.0.1", "eth0", 0),
    Part::Plug("net1", &["fd00:20::12/64"]),
]);

/// F28 (aws/aws-parallelcluster-cookbook#2766): `ens5` and `ens6`, the default route only in table 300.
pub const F28: Net = Net(&[
    Part::Plug("ens5", &["10.7.1.10/24"]),
    Part::Plug("ens6", &["10.7.2.10/24"]),
    Part::Table("10.7.2.1", "ens6", 300),
]);

/// F29 (vllm-project/vllm#15071): `eth0` 10.0.1.12/24 (the cluster network), `eth1` with the default route.
pub const F29: Net = Net(&[
    Part::Plug("eth0", &["10.0.1.12/24"]),
    Part::Plug("eth1", &["10.8.0.12/24"]),
    Part::Default("10.8.0.1", "eth1", 0),
]);

/// [`F9`] in `ns`.
pub fn f9(ns: &Netns) {
    F9.build(ns);
}

/// [`F10`] in `ns`.
pub fn f10(ns: &Netns) {
    F10.build(ns);
}

/// [`F11`] in `ns`.
pub fn f11(ns: &Netns) {
    F11.build(ns);
}

/// [`F12`] in `ns`.
pub fn f12(ns: &Netns) {
    F12.build(ns);
}

/// F14: host network, `bond0` 10.200.93.11/24 with the default route.
pub fn f14(ns: &Netns) {
    ns.plug("bond0");
    ns.addr("bond0", "10.200.93.11/24");
    ns.route("default via 10.200.93.1 dev bond0");
    settle(ns);
}

/// F15: `ens1` with the default route and `ib0` (NCCL's automatic chain tries `ib` first).
pub fn f15(ns: &Netns) {
    ns.plug("ens1");
    ns.addr("ens1", "10.20.0.5/24");
    ns.route("default via 10.20.0.1 dev ens1");
    ns.plug("ib0");
    ns.addr("ib0", "10.30.0.5/24");
    settle(ns);
}

/// F16: a direct cable with an IPv4 link-local address (`enp3s0` 169.254.94.75/16) beside `eno1` with the
/// default route.
pub fn f16(ns: &Netns) {
    ns.plug("eno1");
    ns.addr("eno1", "10.20.0.5/24");
    ns.route("default via 10.20.0.1 dev eno1");
    ns.plug("enp3s0");
    ns.addr("enp3s0", "169.254.94.75/16");
    settle(ns);
}

/// [`F18`] in `ns`.
pub fn f18(ns: &Netns) {
    F18.build(ns);
}

/// [`F27`] in `ns`.
pub fn f27(ns: &Netns) {
    F27.build(ns);
}

/// [`F28`] in `ns`.
pub fn f28(ns: &Netns) {
    F28.build(ns);
}

/// Only `docker0` (a bridge with an address) beside `lo`: NCCL's automatic chain falls to its `docker` step.
pub fn docker_only(ns: &Netns) {
    ns.bridge("docker0");
    ns.addr("docker0", "172.17.0.1/16");
    settle(ns);
}

/// libvirt's `virbr0` created before the uplink `eth0`: NCCL 2.28+ leaves it for last, older versions do not.
pub fn virbr_first(ns: &Netns) {
    ns.bridge("virbr0");
    ns.addr("virbr0", "192.168.122.1/24");
    ns.plug("eth0");
    ns.addr("eth0", "10.0.0.2/24");
    ns.route("default via 10.0.0.1 dev eth0");
    settle(ns);
}

/// `eth0` (an address, no carrier) before the live `eth1` and `ens3`: the inherited prefix `eth` matches the
/// dead one first.
pub fn dead_first(ns: &Netns) {
    ns.stub("eth0");
    ns.addr("eth0", "10.0.0.2/24");
    ns.plug("eth1");
    ns.addr("eth1", "10.0.1.2/24");
    ns.route("default via 10.0.1.1 dev eth1");
    ns.plug("ens3");
    ns.addr("ens3", "10.0.3.2/24");
    settle(ns);
}

/// `eth0` with IPv4 and a global IPv6 address, `eth1` with only a global IPv6 address.
pub fn dual_stack(ns: &Netns) {
    ns.plug("eth0");
    ns.addr("eth0", "10.0.0.2/24");
    ns.addr("eth0", "fd00:1::2/64");
    ns.route("default via 10.0.0.1 dev eth0");
    ns.plug("eth1");
    ns.addr("eth1", "fd00:2::2/64");
    settle(ns);
}
