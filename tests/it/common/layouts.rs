//! The network layouts of the field cases (`docs/field-cases.md`, F1–F31, where a case has a network of its own) and
//! a few decoys of the same kind, as builders over a [`Netns`]. Used where a test must run on every layout,
//! e.g. the agreement of ncclenv's model of NCCL with the real library (`tests/it/check_real_nccl.rs`).
//!
//! Each builder leaves the namespace settled: every RUNNING interface (except `lo`) has its IPv6 link-local
//! address, so that two probes of the same layout see the same addresses in the same order.

use super::Netns;
use serde_json::Value;

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

/// F1: `eth0` 172.17.0.2/16, default via 172.17.0.1.
pub fn f1(ns: &Netns) {
    ns.plug("eth0");
    ns.addr("eth0", "172.17.0.2/16");
    ns.route("default via 172.17.0.1 dev eth0");
    settle(ns);
}

/// F2: `ens6` 10.1.0.10/16 with the default route, no `eth0`.
pub fn f2(ns: &Netns) {
    ns.plug("ens6");
    ns.addr("ens6", "10.1.0.10/16");
    ns.route("default via 10.1.0.1 dev ens6");
    settle(ns);
}

/// F3: `bond0` with the default route, three compose bridges with running ports, four fe80-only veths.
pub fn f3(ns: &Netns) {
    ns.plug("bond0");
    ns.addr("bond0", "10.10.1.11/24");
    ns.route("default via 10.10.1.1 dev bond0");
    for (br, cidr) in [
        ("br-1a2b3c4d5e6f", "172.19.0.1/16"),
        ("br-7a8b9c0d1e2f", "172.21.0.1/16"),
        ("br-3a4b5c6d7e8f", "172.30.0.1/16"),
    ] {
        ns.bridge(br);
        ns.addr(br, cidr);
    }
    for v in ["veth1a2b3c4", "veth5d6e7f8", "veth9a0b1c2", "veth3d4e5f6"] {
        ns.plug(v);
    }
    settle(ns);
}

/// F4: `ens5` 10.31.0.11/20 with the default route and a RUNNING fe80-only `veth3f2a`.
pub fn f4(ns: &Netns) {
    ns.plug("ens5");
    ns.addr("ens5", "10.31.0.11/20");
    ns.route("default via 10.31.0.1 dev ens5");
    ns.plug("veth3f2a");
    settle(ns);
}

/// F5: `eth0` (default route), `eth1`, `eth10`: a prefix trap.
pub fn f5(ns: &Netns) {
    ns.plug("eth0");
    ns.addr("eth0", "10.0.0.5/24");
    ns.route("default via 10.0.0.1 dev eth0");
    ns.plug("eth1");
    ns.addr("eth1", "10.0.1.5/24");
    ns.plug("eth10");
    ns.addr("eth10", "10.0.10.5/24");
    settle(ns);
}

/// F6: `ens5` with the default route and a RUNNING fe80-only `eni4c1d`.
pub fn f6(ns: &Netns) {
    ns.plug("ens5");
    ns.addr("ens5", "10.0.1.10/24");
    ns.route("default via 10.0.1.1 dev ens5");
    ns.plug("eni4c1d");
    settle(ns);
}

/// F7: `bond0` with macvlan children `bond0.2973` (an address) and `bond0.2973.1` (fe80 only).
pub fn f7(ns: &Netns) {
    ns.plug("bond0");
    ns.addr("bond0", "10.42.0.11/27");
    ns.route("default via 10.42.0.1 dev bond0");
    ns.macvlan("bond0.2973", "bond0");
    ns.addr("bond0.2973", "10.0.106.11/16");
    ns.macvlan("bond0.2973.1", "bond0");
    ns.wait_running("bond0.2973");
    ns.wait_running("bond0.2973.1");
    settle(ns);
}

/// F8: `wlp2s0` (default route, metric 600) after `enp3s0`, which has an address but no carrier.
pub fn f8(ns: &Netns) {
    ns.stub("enp3s0");
    ns.addr("enp3s0", "10.0.9.19/24");
    ns.plug("wlp2s0");
    ns.addr("wlp2s0", "10.0.8.19/24");
    ns.route("default via 10.0.8.1 dev wlp2s0 metric 600");
    settle(ns);
}

/// F9: IPv6 only; a vxlan `ip6tnl0` (fe80 only, lower index) and `veth0` fd00:10::5/64 with the default route.
pub fn f9(ns: &Netns) {
    ns.vxlan("ip6tnl0");
    ns.plug("veth0");
    ns.addr("veth0", "fd00:10::5/64");
    ns.route("-6 default via fe80::1 dev veth0");
    settle(ns);
}

/// F10: only `lo`.
pub fn f10(ns: &Netns) {
    settle(ns);
}

/// F11: `eth0` without carrier holds the preferred default route; `eth1` the second one.
pub fn f11(ns: &Netns) {
    ns.stub("eth0");
    ns.addr("eth0", "10.0.0.2/24");
    ns.route("default via 10.0.0.1 dev eth0 metric 100");
    ns.plug("eth1");
    ns.addr("eth1", "10.0.1.2/24");
    ns.route("default via 10.0.1.1 dev eth1 metric 200");
    settle(ns);
}

/// F12: `eth0` with the default route; Multus `net1` (a macvlan on `ext0`, which has no address).
pub fn f12(ns: &Netns) {
    ns.plug("eth0");
    ns.addr("eth0", "10.244.1.11/24");
    ns.route("default via 10.244.1.1 dev eth0");
    ns.plug("ext0");
    ns.macvlan("net1", "ext0");
    ns.addr("net1", "10.100.0.11/24");
    ns.wait_running("net1");
    settle(ns);
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

/// F18: host network, `enp73s0` with the default route, `docker0` 172.17.0.1/16 with a running port.
pub fn f18(ns: &Netns) {
    ns.bridge("docker0");
    ns.addr("docker0", "172.17.0.1/16");
    ns.plug("enp73s0");
    ns.addr("enp73s0", "10.1.239.200/16");
    ns.route("default via 10.1.0.1 dev enp73s0");
    settle(ns);
}

/// F27: `eth0` 10.30.0.11/24 with the default route, `net1` with only fd00:20::12/64.
pub fn f27(ns: &Netns) {
    ns.plug("eth0");
    ns.addr("eth0", "10.30.0.11/24");
    ns.route("default via 10.30.0.1 dev eth0");
    ns.plug("net1");
    ns.addr("net1", "fd00:20::12/64");
    settle(ns);
}

/// F28: `ens5` and `ens6`, the default route only in table 300 (`ip rule … lookup 300`).
pub fn f28(ns: &Netns) {
    ns.plug("ens5");
    ns.addr("ens5", "10.7.1.10/24");
    ns.plug("ens6");
    ns.addr("ens6", "10.7.2.10/24");
    ns.ip(&[
        "rule", "add", "from", "all", "lookup", "300", "pref", "1000",
    ]);
    ns.ip(&[
        "route", "add", "default", "via", "10.7.2.1", "dev", "ens6", "table", "300",
    ]);
    settle(ns);
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
