//! A faster interface beside the chosen one (#23, item 5): without the preflight, one host cannot know which
//! networks the other nodes reach, so the choice stays the route to the master (`decide::interface`); but
//! where another usable interface is clearly faster by its nominal link speed, the recipe's rule ("when
//! several interfaces are usable, prefer the one with the higher throughput") is worth a word:
//! `faster-interface`, an info naming both interfaces and their speeds.
//!
//! Pure: reads the snapshot's link speeds (sysfs `class/net/<name>/speed`, Mb/s, `probe::host::link_speeds`)
//! and the plan's choice.

use crate::config::Config;
use crate::findings::Finding;
use crate::plan::{Action, Plan, Verdict};
use crate::snapshot::{Family, Link, Snapshot};

/// How much faster by nominal speed another interface must be: a 1 GbE management port beside a 10 or 25
/// GbE data port crosses it, 10 vs 12.5 or 40 vs 50 does not (nominal speeds say nothing about the path, so
/// only a clear gap is worth a line).
pub const MARGIN: u64 = 2;

/// The speed of `link` when it says something about its network, in Mb/s: `None` when sysfs gave none, and
/// for veths and bridges, whose figure is not their own (a veth reports a constant 10000,
/// `veth_get_link_ksettings` in drivers/net/veth.c; a bridge reports its fastest port,
/// `br_get_link_ksettings` in net/bridge/br_device.c, Linux 6.x).
pub fn nominal_speed(snap: &Snapshot, link: &Link) -> Option<u64> {
    if link.kind.as_deref() == Some("veth") || link.is_bridge_like() {
        return None;
    }
    snap.link_speeds.get(&link.name).copied()
}

/// `faster-interface` (info) when the job may span nodes (not known to be single-node: one node's ranks talk
/// over SHM/P2P, not sockets), ncclenv chose the interface itself (an inherited `NCCL_SOCKET_IFNAME` that is
/// kept is the user's choice) and another candidate interface — RUNNING, not loopback, not in
/// `NCCLENV_EXCLUDE`, with a usable address of the chosen address's family ([`crate::snapshot::Addr::usable`])
/// — is at least [`MARGIN`] times faster by [`nominal_speed`], both speeds known. The fastest such one is
/// named (the lowest index among equals). Nothing changes: the preflight is what can prove that every node
/// shares its network.
pub fn faster_interface(snap: &Snapshot, cfg: &Config, plan: &mut Plan) {
    if snap.job.is_single_node() || plan.hands_off || matches!(plan.verdict, Verdict::Refuse { .. })
    {
        return;
    }
    let Ok(net) = &snap.net else { return };
    let Some(choice) = plan.choice.clone() else {
        return;
    };
    // ncclenv's own choice: it set NCCL_SOCKET_IFNAME, or nothing counting was inherited.
    let set_by_ncclenv = plan
        .changes
        .iter()
        .any(|c| c.name == "NCCL_SOCKET_IFNAME" && matches!(c.action, Action::Set { .. }));
    let inherited =
        crate::nccl_rules::effective("NCCL_SOCKET_IFNAME", &snap.env, &snap.conf_files).is_some();
    if inherited && !set_by_ncclenv {
        return;
    }
    let (Some(fam), Some(chosen)) = (
        choice.addr.as_ref().map(Family::of),
        net.links.iter().find(|l| l.name == choice.ifname),
    ) else {
        return;
    };
    let Some(base) = nominal_speed(snap, chosen) else {
        return;
    };
    let best = net
        .links
        .iter()
        .filter(|l| l.index != chosen.index && l.is_candidate(&cfg.exclude))
        .filter(|l| {
            net.addrs
                .iter()
                .any(|a| a.index == l.index && a.usable() && a.family() == fam)
        })
        .filter_map(|l| nominal_speed(snap, l).map(|s| (l, s)))
        .filter(|(_, s)| *s >= base.saturating_mul(MARGIN))
        .min_by_key(|(l, s)| (std::cmp::Reverse(*s), l.index));
    let Some((link, speed)) = best else { return };
    plan.finding(
        Finding::FasterInterface,
        format!(
            "{} ({}) is faster by its nominal link speed than the chosen {} ({}, {}); one host cannot tell whether every node reaches the others over {}'s network, so the choice stays {}",
            link.name,
            speed_text(speed),
            chosen.name,
            speed_text(base),
            choice.how.split(" (").next().unwrap_or(&choice.how),
            link.name,
            chosen.name
        ),
        format!(
            "NCCLENV_PREFLIGHT=1 proves whether every node shares that network and picks it when its measured throughput is at least twice the route's (docs/policy.md); or, if every node reaches the others over it, set NCCL_SOCKET_IFNAME to each node's interface there ({} here)",
            link.name
        ),
    );
}

/// A speed in Mb/s as text: `100 Gbit/s`, `2.5 Gbit/s`, `100 Mbit/s`.
pub fn speed_text(mbps: u64) -> String {
    match mbps {
        m if m >= 1000 && m % 1000 == 0 => format!("{} Gbit/s", m / 1000),
        m if m >= 1000 => format!("{}.{} Gbit/s", m / 1000, (m % 1000) / 100),
        m => format!("{m} Mbit/s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Addr, Link};
    use crate::test_snapshot::SnapshotBuilder;

    fn link(b: &mut Snapshot, name: &str, kind: Option<&str>, addr: &str, mbps: Option<u64>) {
        let Ok(net) = &mut b.net else {
            panic!("no network")
        };
        let index = net.links.len() as u32 + 1;
        net.links.push(Link {
            index,
            name: name.into(),
            up: true,
            running: true,
            lower_up: true,
            oper_state: "up".into(),
            kind: kind.map(String::from),
            ..Link::default()
        });
        let ip: std::net::IpAddr = addr.parse().expect("address");
        net.addrs.push(Addr {
            index,
            addr: ip,
            prefix_len: 24,
            scope: if ip.is_ipv6() && addr.starts_with("fe80") {
                253
            } else {
                0
            },
            tentative: false,
            deprecated: false,
            dad_failed: false,
            label: None,
        });
        if let Some(s) = mbps {
            b.link_speeds.insert(name.into(), s);
        }
    }

    /// eth0 (the choice) and one more interface; the job is two nodes unless `nnodes` says.
    fn world(other: (&str, Option<&str>, &str, Option<u64>), eth0: Option<u64>) -> Snapshot {
        let mut s = SnapshotBuilder::new().links(&[]).build();
        link(&mut s, "eth0", None, "10.0.0.2", eth0);
        link(&mut s, other.0, other.1, other.2, other.3);
        s.job.nnodes = Some(2);
        s
    }

    fn plan_with(choice: &str, addr: &str) -> Plan {
        let mut p = Plan::default();
        p.set("NCCL_SOCKET_IFNAME", choice, "test");
        p.choice = Some(crate::plan::Choice {
            ifname: choice.into(),
            addr: addr.parse().ok(),
            how: "route to peer 10.0.0.1 (MASTER_ADDR)".into(),
        });
        p
    }

    fn codes(s: &Snapshot) -> Vec<String> {
        let mut p = plan_with("eth0", "10.0.0.2");
        faster_interface(s, &Config::default(), &mut p);
        crate::test_machine::codes(&p)
            .into_iter()
            .map(String::from)
            .collect()
    }

    #[test]
    fn names_a_clearly_faster_interface() {
        let s = world(("ens5", None, "192.168.5.2", Some(100_000)), Some(1000));
        let mut p = plan_with("eth0", "10.0.0.2");
        faster_interface(&s, &Config::default(), &mut p);
        let w = p.warnings.first().expect("a finding");
        assert_eq!(w.code, "faster-interface");
        assert!(
            w.message
                .starts_with("ens5 (100 Gbit/s) is faster by its nominal link speed than the chosen eth0 (1 Gbit/s, route to peer 10.0.0.1)"),
            "{}",
            w.message
        );
        assert!(w.remedy.contains("NCCLENV_PREFLIGHT=1"), "{}", w.remedy);
        assert_eq!(p.verdict, Verdict::Proceed, "an info changes nothing");
        assert_eq!(p.changes.len(), 1);
    }

    #[test]
    fn silent_below_the_margin_or_when_a_speed_is_unknown() {
        let c = |s| codes(&s);
        assert!(c(world(("ens5", None, "192.168.5.2", Some(1999)), Some(1000))).is_empty());
        assert_eq!(
            c(world(("ens5", None, "192.168.5.2", Some(2000)), Some(1000))),
            ["faster-interface"]
        );
        assert!(c(world(("ens5", None, "192.168.5.2", None), Some(1000))).is_empty());
        assert!(c(world(("ens5", None, "192.168.5.2", Some(100_000)), None)).is_empty());
    }

    #[test]
    fn veths_bridges_other_families_and_excluded_do_not_count() {
        let c = |s| codes(&s);
        let v = world(
            ("veth1", Some("veth"), "192.168.5.2", Some(10_000)),
            Some(1000),
        );
        assert!(c(v).is_empty(), "a veth's 10000 is a constant");
        let b = world(("docker0", None, "172.17.0.1", Some(10_000)), Some(1000));
        assert!(c(b).is_empty(), "a bridge reports its ports");
        let six = world(("ens5", None, "fd00::2", Some(100_000)), Some(1000));
        assert!(c(six).is_empty(), "no address of the chosen family");
        let ll = world(("ens5", None, "fe80::2", Some(100_000)), Some(1000));
        assert!(c(ll).is_empty(), "link-local only");
        let s = world(("ens5", None, "192.168.5.2", Some(100_000)), Some(1000));
        let cfg = Config {
            exclude: vec!["ens5".into()],
            ..Config::default()
        };
        let mut p = plan_with("eth0", "10.0.0.2");
        faster_interface(&s, &cfg, &mut p);
        assert!(p.warnings.is_empty(), "NCCLENV_EXCLUDE");
        let mut down = s.clone();
        if let Ok(n) = &mut down.net {
            n.links[1].running = false;
        }
        assert!(c(down).is_empty(), "not RUNNING");
    }

    #[test]
    fn single_node_and_kept_inherited_values_are_silent() {
        let mut one = world(("ens5", None, "192.168.5.2", Some(100_000)), Some(1000));
        one.job.nnodes = Some(1);
        assert!(codes(&one).is_empty(), "a single-node job uses SHM/P2P");
        let mut unknown = one.clone();
        unknown.job.nnodes = None;
        assert_eq!(codes(&unknown), ["faster-interface"], "may be multi-node");
        let mut kept = unknown.clone();
        kept.env.insert("NCCL_SOCKET_IFNAME".into(), "eth0".into());
        let mut p = Plan {
            choice: plan_with("eth0", "10.0.0.2").choice,
            ..Plan::default()
        };
        faster_interface(&kept, &Config::default(), &mut p);
        assert!(p.warnings.is_empty(), "the user's kept choice");
    }

    #[test]
    fn the_fastest_is_named() {
        let mut s = world(("ens5", None, "192.168.5.2", Some(25_000)), Some(1000));
        link(&mut s, "ens6", None, "192.168.6.2", Some(100_000));
        link(&mut s, "ens7", None, "192.168.7.2", Some(100_000));
        let mut p = plan_with("eth0", "10.0.0.2");
        faster_interface(&s, &Config::default(), &mut p);
        assert!(p.warnings[0].message.starts_with("ens6 (100 Gbit/s)"));
        assert_eq!(p.warnings.len(), 1, "one line");
    }

    #[test]
    fn speeds_as_text() {
        assert_eq!(speed_text(100), "100 Mbit/s");
        assert_eq!(speed_text(2500), "2.5 Gbit/s");
        assert_eq!(speed_text(25_000), "25 Gbit/s");
    }
}
