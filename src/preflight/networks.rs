//! The networks every node shares (#23): each node's hello lists its usable interfaces ([`Iface`], at most
//! [`MAX_IFACES`] with at most [`MAX_ADDRS`] addresses each); the master groups them into networks every
//! node holds an address in ([`shared`]: one address and prefix, per family, so interface names may differ
//! between nodes), measures them ([`super::measure`]) and picks one ([`choose`]): a network wins over the
//! current choice only when its slowest pair is at least [`MARGIN`] times the current one's. A node far
//! slower than the fleet on the chosen network, by measurement or by its sysfs link speed, is named
//! ([`slow_links`], `preflight-slow-link`).
//!
//! Pure: no I/O here but [`local`], which reads the snapshot; tested with plain values.

use super::agree::Member;
use super::protocol::{Figure, FleetVerdict, MeasureLeg, NetChoice};
use crate::config::Config;
use crate::findings::Finding;
use crate::plan::{Note, Plan, Severity};
use crate::snapshot::{Family, Snapshot};
use std::net::{IpAddr, SocketAddr};

pub use super::protocol::{Cidr, Iface, MAX_ADDRS, MAX_IFACES, MAX_IFNAME};

/// Most candidate networks measured (the current choice included).
pub const MAX_NETWORKS: usize = 8;
/// How much faster a measured network's slowest pair must be than the current choice's for the fleet to
/// move to it: 2×, a margin that the noise of a 150 ms measurement (slow start, a busy core) cannot cross.
pub const MARGIN: u64 = 2;
/// A pair under the fleet's median divided by this is slow (`preflight-slow-link`).
pub const SLOW_FRACTION: u64 = 4;

/// This node's usable interfaces: RUNNING, not loopback, not in `NCCLENV_EXCLUDE`, not a container bridge,
/// with a usable address; at most [`MAX_IFACES`], in link order, each with at most [`MAX_ADDRS`] addresses.
pub fn local(snap: &Snapshot, cfg: &Config) -> Vec<Iface> {
    let Ok(net) = &snap.net else {
        return Vec::new();
    };
    let rdma_netdevs: Vec<String> = snap
        .rdma
        .iter()
        .flat_map(|r| &r.devices)
        .flat_map(|d| &d.ports)
        .flat_map(|p| &p.gids)
        .filter_map(|g| g.ndev.clone())
        .collect();
    let mut out = Vec::new();
    for l in net.links.iter().filter(|l| {
        l.is_candidate(&cfg.exclude)
            && !l.is_bridge_like()
            && !l.name_escaped
            && l.name.len() <= MAX_IFNAME
    }) {
        let addrs: Vec<Cidr> = net
            .addrs
            .iter()
            .filter(|a| a.index == l.index && a.usable())
            .take(MAX_ADDRS)
            .map(|a| Cidr {
                addr: a.addr,
                prefix: a.prefix_len,
            })
            .collect();
        if addrs.is_empty() {
            continue;
        }
        out.push(Iface {
            name: l.name.clone(),
            addrs,
            mtu: l.mtu,
            speed_mbps: crate::decide::faster::nominal_speed(snap, l),
            rdma: rdma_netdevs.contains(&l.name),
        });
        if out.len() == MAX_IFACES {
            break;
        }
    }
    out
}

/// One node's interface and address on a network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leg {
    /// The interface name on that node.
    pub ifname: String,
    /// Its address on the network.
    pub addr: IpAddr,
    /// Its nominal speed, Mbit/s, when known.
    pub speed_mbps: Option<u64>,
}

/// A network the fleet could use: one leg per node, in member order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The network (`10.2.0.0/24`), or `None` for the current choice when it is no network every node holds
    /// an address in (routed bootstrap addresses).
    pub net: Option<Cidr>,
    /// One leg per node.
    pub legs: Vec<Leg>,
    /// True for the interfaces and addresses the nodes use today.
    pub current: bool,
}

impl Candidate {
    /// The family of its addresses.
    pub fn family(&self) -> Family {
        self.legs
            .first()
            .map_or(Family::Inet, |l| Family::of(&l.addr))
    }
    /// Its interface names, each once in order of first use (`ens5/enp1s0`).
    pub fn names(&self) -> String {
        let mut names: Vec<&str> = Vec::new();
        for l in &self.legs {
            if !names.contains(&l.ifname.as_str()) {
                names.push(&l.ifname);
            }
        }
        names.join("/")
    }
    /// `ens5/enp1s0 (10.2.0.0/24)`: how messages name it.
    pub fn label(&self) -> String {
        match self.net {
            Some(n) => format!("{} ({n})", self.names()),
            None => format!("{} (the bootstrap addresses)", self.names()),
        }
    }
}

/// The networks every node holds a usable address in, given each node's interfaces in member order: each
/// prefix (network address and length) of the first node's addresses, in its order, that every other node
/// has an address in (the first such address of each); the addresses must differ (every node has
/// `172.17.0.1/16` on a Docker bridge: no shared network). Each network once.
pub fn shared(nodes: &[&[Iface]]) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::new();
    let Some(first) = nodes.first() else {
        return out;
    };
    for c in first.iter().flat_map(|i| &i.addrs) {
        let net = c.network();
        if out.iter().any(|x| x.net == Some(net)) {
            continue;
        }
        let legs: Option<Vec<Leg>> = nodes
            .iter()
            .map(|ifaces| {
                ifaces.iter().find_map(|i| {
                    i.addrs.iter().find(|a| a.network() == net).map(|a| Leg {
                        ifname: i.name.clone(),
                        addr: a.addr,
                        speed_mbps: i.speed_mbps,
                    })
                })
            })
            .collect();
        let Some(legs) = legs else { continue };
        let mut addrs: Vec<IpAddr> = legs.iter().map(|l| l.addr).collect();
        addrs.sort_unstable();
        addrs.dedup();
        if addrs.len() != legs.len() {
            continue;
        }
        out.push(Candidate {
            net: Some(net),
            legs,
            current: false,
        });
    }
    out
}

/// The candidates to measure: the current choice first (the nodes' bootstrap interfaces and addresses,
/// `current`, in member order; the shared network they are all on when there is one), then every other
/// shared network ([`shared`]), at most [`MAX_NETWORKS`] in all.
pub fn candidates(current: &[(String, IpAddr)], nodes: &[&[Iface]]) -> Vec<Candidate> {
    let mut nets = shared(nodes);
    let at = nets
        .iter()
        .position(|c| c.legs.iter().zip(current).all(|(l, (_, a))| l.addr == *a));
    let mut now = match at {
        Some(i) => nets.remove(i),
        None => Candidate {
            net: None,
            legs: current
                .iter()
                .map(|(n, a)| Leg {
                    ifname: n.clone(),
                    addr: *a,
                    speed_mbps: None,
                })
                .collect(),
            current: true,
        },
    };
    // The bootstrap interface names are what NCCL uses today.
    for (l, (n, _)) in now.legs.iter_mut().zip(current) {
        l.ifname = n.clone();
    }
    now.current = true;
    let mut out = vec![now];
    out.extend(nets.into_iter().take(MAX_NETWORKS - 1));
    out
}

/// One pair's measured throughput (node `i` sending to node `i + 1`), kbit/s; `Err` with why it failed.
pub type Pair = Result<u64, String>;

/// A candidate and what its ring measured, one [`Pair`] per node (node `i` to its successor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Measured {
    /// The network.
    pub cand: Candidate,
    /// Node `i`'s pair is `pairs[i]`.
    pub pairs: Vec<Pair>,
}

impl Measured {
    /// The slowest pair in kbit/s: the network's figure; `None` when a pair failed (its path is not proven).
    pub fn slowest(&self) -> Option<u64> {
        if self.pairs.is_empty() {
            return None;
        }
        self.pairs
            .iter()
            .map(|p| p.as_ref().ok().copied())
            .collect::<Option<Vec<u64>>>()
            .and_then(|v| v.into_iter().min())
    }
}

/// `11.0 Gbit/s`, `19.8 Mbit/s`, `850 kbit/s`: a throughput in kbit/s, in words. Every rate the preflight
/// says goes through it (a sysfs link speed in Mbit/s through [`link_rate`]).
pub fn rate(kbps: u64) -> String {
    if kbps >= 1_000_000 {
        format!("{:.1} Gbit/s", kbps as f64 / 1e6)
    } else if kbps >= 1_000 {
        format!("{:.1} Mbit/s", kbps as f64 / 1e3)
    } else {
        format!("{kbps} kbit/s")
    }
}

/// A link speed as sysfs says it (`class/net/<name>/speed`, Mbit/s: the speed the port negotiated, not a
/// measurement) in the words of [`rate`]: `10000` is `10.0 Gbit/s`.
pub fn link_rate(mbps: u64) -> String {
    rate(mbps.saturating_mul(1000))
}

/// `eth0 (10.1.0.0/24): slowest pair 19.8 Mbit/s` or `…: not proven (why)`: one network's figure in words.
pub fn figure_text(m: &Measured) -> String {
    match m.slowest() {
        Some(k) => format!("{}: slowest pair {}", m.cand.label(), rate(k)),
        None => {
            let why = m
                .pairs
                .iter()
                .find_map(|p| p.as_ref().err().cloned())
                .unwrap_or_else(|| "not measured".into());
            format!("{}: not proven ({why})", m.cand.label())
        }
    }
}

/// The network the fleet moves to, as an index into `ms`: the fastest proven candidate (every pair
/// measured) whose slowest pair is at least [`MARGIN`] times the current choice's (`ms`' entry with
/// `current`); `None` when none is, or when the current choice's own figure is unknown (nothing to compare).
pub fn choose(ms: &[Measured]) -> Option<usize> {
    let base = ms.iter().find(|m| m.cand.current)?.slowest()?;
    ms.iter()
        .enumerate()
        .filter(|(_, m)| !m.cand.current)
        .filter_map(|(i, m)| m.slowest().map(|s| (i, s)))
        .filter(|(_, s)| *s >= base.saturating_mul(MARGIN).max(1))
        .max_by_key(|(i, s)| (*s, std::cmp::Reverse(*i)))
        .map(|(i, _)| i)
}

/// The slow links of a network, each in words for `preflight-slow-link` (`names[i]` names node `i`):
/// - measured (three nodes or more): a node whose figure (the faster of its two pairs, from its predecessor
///   and to its successor: a slow node slows both, a slow neighbour only one) is under the fleet's median
///   node figure divided by [`SLOW_FRACTION`]; a pair under the median pair so divided, neither of whose
///   nodes is so named, is named as a pair (one direction slow);
/// - nominal: a node whose sysfs speed on this network is below the fastest node's there (both known).
pub fn slow_links(measurement: &Measured, names: &[String]) -> Vec<String> {
    let leg_count = measurement.cand.legs.len();
    let mut out = Vec::new();
    let speeds = nominal(&measurement.cand);
    let fig: Vec<Option<u64>> = measurement
        .pairs
        .iter()
        .map(|p| p.as_ref().ok().copied())
        .collect();
    let mut known: Vec<u64> = fig.iter().flatten().copied().collect();
    known.sort_unstable();
    let name = |i: usize| names.get(i).cloned().unwrap_or_else(|| format!("node {i}"));
    if leg_count >= 3 && known.len() == leg_count {
        let pair_median = known[leg_count / 2];
        let f = |i: usize| fig[i].unwrap_or(0);
        // A node's figure is the faster of its two pairs: a slow node slows both, a slow neighbour one.
        let node: Vec<u64> = (0..leg_count)
            .map(|k| f(k).max(f((k + leg_count - 1) % leg_count)))
            .collect();
        let mut sorted = node.clone();
        sorted.sort_unstable();
        let node_median = sorted[leg_count / 2];
        let named: Vec<bool> = node
            .iter()
            .map(|x| x.saturating_mul(SLOW_FRACTION) < node_median)
            .collect();
        for k in (0..leg_count).filter(|&k| named[k]) {
            let pred = (k + leg_count - 1) % leg_count;
            out.push(format!(
                "node {} ({}) measured {} to {} and {} from {}, under a quarter of the fleet's median {} on {}; \
                 {speeds}",
                name(k),
                measurement.cand.legs[k].ifname,
                rate(f(k)),
                name((k + 1) % leg_count),
                rate(f(pred)),
                name(pred),
                rate(node_median),
                measurement.cand.label()
            ));
        }
        let slow = |i: usize| f(i).saturating_mul(SLOW_FRACTION) < pair_median;
        for i in (0..leg_count).filter(|&i| slow(i) && !named[i] && !named[(i + 1) % leg_count]) {
            out.push(format!(
                "the pair {} ({}) to {} ({}) measured {}, under a quarter of the fleet's median pair {} on {}; \
                 {speeds}",
                name(i),
                measurement.cand.legs[i].ifname,
                name((i + 1) % leg_count),
                measurement.cand.legs[(i + 1) % leg_count].ifname,
                rate(f(i)),
                rate(pair_median),
                measurement.cand.label()
            ));
        }
    }
    let top = measurement
        .cand
        .legs
        .iter()
        .filter_map(|l| l.speed_mbps)
        .max();
    for (i, l) in measurement.cand.legs.iter().enumerate() {
        if let (Some(s), Some(top)) = (l.speed_mbps, top) {
            if s < top {
                let measured = fig.get(i).copied().flatten().map_or_else(
                    || "not measured".to_string(),
                    |k| format!("measured {}", rate(k)),
                );
                out.push(format!(
                    "node {} ({}) links at {} where the fastest node on {} links at {} (negotiated link speed, \
                     sysfs, not a measurement: a port that negotiated a lower speed); {measured}; {speeds}",
                    name(i),
                    l.ifname,
                    link_rate(s),
                    measurement.cand.label(),
                    link_rate(top)
                ));
            }
        }
    }
    out
}

/// The link speeds of a network's legs as sysfs says them, in words: `link speeds (sysfs, negotiated, not
/// measured): 25.0 Gbit/s on 2 node(s), 10.0 Gbit/s on 1 node(s)` (or `… unknown: sysfs reports none`).
fn nominal(c: &Candidate) -> String {
    let mut counts: Vec<(u64, usize)> = Vec::new();
    for s in c.legs.iter().filter_map(|l| l.speed_mbps) {
        match counts.iter_mut().find(|(v, _)| *v == s) {
            Some((_, n)) => *n += 1,
            None => counts.push((s, 1)),
        }
    }
    let head = "link speeds (sysfs, negotiated, not measured)";
    if counts.is_empty() {
        return format!("{head}: unknown (sysfs reports none)");
    }
    counts.sort_unstable_by_key(|c| std::cmp::Reverse(c.0));
    let each: Vec<String> = counts
        .iter()
        .map(|(s, n)| format!("{} on {n} node(s)", link_rate(*s)))
        .collect();
    format!("{head}: {}", each.join(", "))
}

/// Why the fleet does not measure, when it does not (`None`: measure): nothing to compare (fewer than two
/// candidates, or a node absent or lost: it would not get the verdict, and the fleet would split), a node
/// with `NCCLENV_PREFLIGHT_MEASURE=0`, NCCL's data over InfiniBand/RoCE on every node (the socket interface
/// carries only the bootstrap), a vendor network profile that owns NCCL's transport, or a node without a
/// measurement listener (an older ncclenv: it would not understand [`super::protocol::Msg::Measure`]). The second of the
/// pair is true when the reason is worth saying in the verdict.
pub fn skip(
    members: &[Member],
    expected: u32,
    lost: usize,
    cands: usize,
) -> Option<(String, bool)> {
    let named = |f: &dyn Fn(&Member) -> bool| {
        let names: Vec<String> = members
            .iter()
            .filter(|m| f(m))
            .map(|m| m.report.name())
            .collect();
        super::agree::list(&names)
    };
    if cands < 2 {
        return Some(("one network every node shares".into(), false));
    }
    if (members.len() as u32) < expected || lost > 0 {
        return Some(("not every node is present".into(), false));
    }
    let deaf = |m: &Member| m.report.sink_ports == (None, None);
    if members.iter().any(deaf) {
        return Some((
            format!(
                "no measurement listener on {} (an older ncclenv, or it could not listen)",
                named(&deaf)
            ),
            true,
        ));
    }
    if members.iter().any(|m| !m.report.measure) {
        return Some((
            format!(
                "NCCLENV_PREFLIGHT_MEASURE=0 on {}",
                named(&|m| !m.report.measure)
            ),
            true,
        ));
    }
    if members.iter().all(|m| m.report.ib_usable) {
        return Some((
            "NCCL's data goes over InfiniBand/RoCE on every node (IB enabled, an ACTIVE RDMA port): the socket \
             interface carries only the bootstrap"
                .into(),
            true,
        ));
    }
    if members.iter().any(|m| m.report.vendor_profile) {
        return Some((
            format!(
                "a vendor network profile owns NCCL's transport on {}",
                named(&|m| m.report.vendor_profile)
            ),
            true,
        ));
    }
    None
}

/// Each member's pairs, in member order: to its ring successor on every candidate (its address there and
/// its measurement port of that family).
pub fn legs(cands: &[Candidate], members: &[Member]) -> Vec<Vec<MeasureLeg>> {
    let n = members.len();
    (0..n)
        .map(|k| {
            let j = (k + 1) % n;
            let r = &members[j].report;
            cands
                .iter()
                .enumerate()
                .map(|(ci, c)| {
                    let port = match c.family() {
                        Family::Inet => r.sink_ports.0,
                        Family::Inet6 => r.sink_ports.1,
                    };
                    MeasureLeg {
                        net: ci as u32,
                        to: c
                            .legs
                            .get(j)
                            .zip(port)
                            .map(|(l, p)| SocketAddr::new(l.addr, p)),
                        nonce: r.nonce,
                    }
                })
                .collect()
        })
        .collect()
}

/// The candidates with their pairs, from each member's figures (`figures[k]`: member `k`'s, `None` when it
/// sent none).
pub fn assemble(cands: Vec<Candidate>, figures: &[Option<Vec<Figure>>]) -> Vec<Measured> {
    cands
        .into_iter()
        .enumerate()
        .map(|(ci, cand)| {
            let pairs = (0..cand.legs.len())
                .map(|k| {
                    let f = figures
                        .get(k)
                        .and_then(|f| f.as_ref())
                        .and_then(|f| f.iter().find(|x| x.net == ci as u32));
                    match f {
                        Some(Figure { kbps: Some(k), .. }) => Ok(*k),
                        Some(Figure { error, .. }) => Err(error.as_deref().map_or_else(
                            || "failed".to_string(),
                            |e| super::protocol::clean(e, 200),
                        )),
                        None => Err("no figure came".into()),
                    }
                })
                .collect();
            Measured { cand, pairs }
        })
        .collect()
}

/// `preflight-network` for a measurement: the network the fleet moves to (set in `v.network`, and
/// returned), the faster network beside a kept `NCCL_SOCKET_IFNAME`, or the choice that stays; with every
/// network's figure.
fn decide(
    verdict: &mut FleetVerdict,
    members: &[Member],
    measured: &[Measured],
    plan: &mut Plan,
) -> Option<Measured> {
    let figures: Vec<String> = measured.iter().map(figure_text).collect();
    let now = measured.iter().find(|m| m.cand.current);
    let won = choose(measured).map(|i| &measured[i]);
    let kept: Vec<String> = members
        .iter()
        .filter(|m| !m.report.own_ifname)
        .map(|m| m.report.name())
        .collect();
    let mut used = None;
    let (message, remedy) = match (won, now) {
        (Some(w), Some(now)) if kept.is_empty() => {
            let how = format!(
                "every pair proven: slowest {} vs {} {} (the preflight's ring over every network the nodes \
                 share; a network wins with {MARGIN}x the current choice's slowest pair)",
                rate(w.slowest().unwrap_or(0)),
                now.cand.names(),
                rate(now.slowest().unwrap_or(0)),
            );
            verdict.network = w.cand.net.map(|net| NetChoice { net, how });
            used = Some(w.clone());
            (
                format!(
                    "every node moves to {}: slowest pair {}, at least {MARGIN}x the current choice {}'s {} ({})",
                    w.cand.label(),
                    rate(w.slowest().unwrap_or(0)),
                    now.cand.names(),
                    rate(now.slowest().unwrap_or(0)),
                    figures.join("; ")
                ),
                "nothing to do".to_string(),
            )
        }
        (Some(w), Some(_)) => (
            format!(
                "{} is faster than the NCCL_SOCKET_IFNAME kept on {} (policy: keep what works): {}",
                w.cand.label(),
                super::agree::list(&kept),
                figures.join("; ")
            ),
            format!(
                "to use it, unset NCCL_SOCKET_IFNAME on every node (ncclenv then chooses it) or set it to the \
                 interfaces of {}",
                w.cand.label()
            ),
        ),
        _ => (
            format!(
                "the choice stays: no network every node shares reaches {MARGIN}x the current choice's slowest \
                 pair ({})",
                figures.join("; ")
            ),
            "nothing to do".to_string(),
        ),
    };
    plan.finding(Finding::PreflightNetwork, message, remedy);
    used
}

/// Add the network's part to the fleet's verdict: `preflight-network` (info) with every network's figure
/// and what follows from it (the network the fleet moves to, [`FleetVerdict::network`], when [`choose`]
/// picks one and every node chose its interface itself; else the kept choice and the faster network), or
/// why nothing was measured (`skipped`, when worth saying); `preflight-slow-link` for each slow link on the
/// network the fleet uses ([`slow_links`]; by nominal speed also without a measurement), which refuses
/// when any node is strict and nothing refuses yet.
pub fn conclude(
    verdict: &mut FleetVerdict,
    members: &[Member],
    cands: Vec<Candidate>,
    measured: Vec<Measured>,
    skipped: Option<(String, bool)>,
) {
    let mut plan = Plan::default();
    let names: Vec<String> = members.iter().map(|m| m.report.name()).collect();
    let mut used: Option<Measured> = measured.iter().find(|m| m.cand.current).cloned();
    if let Some((why, true)) = &skipped {
        plan.finding(
            Finding::PreflightNetwork,
            format!("the networks every node shares were not measured: {why}; the choice stays"),
            "nothing to do (NCCLENV_PREFLIGHT_MEASURE=0 turns the measurement off)",
        );
    }
    if !measured.is_empty() {
        if let Some(w) = decide(verdict, members, &measured, &mut plan) {
            used = Some(w);
        }
    }
    // Without a measurement, the current network's nominal speeds still tell a slow port.
    let used = used.or_else(|| {
        cands
            .into_iter()
            .find(|c| c.current && c.net.is_some())
            .map(|cand| Measured {
                pairs: Vec::new(),
                cand,
            })
    });
    if let Some(u) = used {
        for line in slow_links(&u, &names) {
            plan.finding(
                Finding::PreflightSlowLink,
                line,
                "look at that node's link (its negotiated speed: ethtool; cabling; a busy or shaped port): the job \
                 runs at its pace; NCCLENV_STRICT=1 refuses",
            );
        }
    }
    let strict = members.iter().any(|m| m.report.strict);
    if strict && verdict.refuse.is_none() {
        if let Some(w) = plan.warnings.iter().find(|w| w.strict_refuses) {
            verdict.refuse = Some(Note {
                code: w.code.clone(),
                severity: Severity::Warn,
                message: format!(
                    "preflight [{}]: NCCLENV_STRICT=1 (on at least one node) refuses: {}",
                    w.code, w.message
                ),
                remedy: w.remedy.clone(),
                strict_refuses: false,
            });
            // A refusing fleet has not passed.
            verdict
                .findings
                .retain(|w| w.code != Finding::PreflightPassed.code());
        }
    }
    verdict.findings.extend(plan.warnings);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_machine::warnings;

    fn cidr(s: &str) -> Cidr {
        let (a, p) = s.split_once('/').expect("cidr");
        Cidr {
            addr: a.parse().expect("ip"),
            prefix: p.parse().expect("prefix"),
        }
    }

    fn iface(name: &str, addrs: &[&str], speed: Option<u64>) -> Iface {
        Iface {
            name: name.into(),
            addrs: addrs.iter().map(|a| cidr(a)).collect(),
            mtu: Some(1500),
            speed_mbps: speed,
            rdma: false,
        }
    }

    /// Three multi-homed nodes: eth0 on 10.1.0.0/24 (the route to the master), a data network 10.2.0.0/24
    /// named ens5 on two nodes and enp1s0 on the third, a Docker bridge address every node has.
    fn fleet() -> Vec<Vec<Iface>> {
        (1..=3)
            .map(|i| {
                let data = if i == 3 { "enp1s0" } else { "ens5" };
                vec![
                    iface("eth0", &[&format!("10.1.0.{i}/24")], Some(1000)),
                    iface("dock", &["172.17.0.1/16"], None),
                    iface(
                        data,
                        &[&format!("10.2.0.{i}/24"), "fd00::1/64"],
                        Some(25000),
                    ),
                ]
            })
            .collect()
    }

    fn current(n: u8) -> Vec<(String, IpAddr)> {
        (1..=n)
            .map(|i| {
                (
                    "eth0".to_string(),
                    format!("10.1.0.{i}").parse().expect("ip"),
                )
            })
            .collect()
    }

    #[test]
    fn networks_are_grouped_by_prefix_whatever_the_names() {
        let f = fleet();
        let nodes: Vec<&[Iface]> = f.iter().map(Vec::as_slice).collect();
        let s = shared(&nodes);
        // The Docker address is the same on every node; fd00::1 likewise: neither is a shared network.
        let nets: Vec<String> = s
            .iter()
            .filter_map(|c| c.net)
            .map(|n| n.to_string())
            .collect();
        assert_eq!(nets, ["10.1.0.0/24", "10.2.0.0/24"]);
        assert_eq!(s[1].names(), "ens5/enp1s0");
        assert_eq!(s[1].legs[2].addr, "10.2.0.3".parse::<IpAddr>().expect("ip"));
        let c = candidates(&current(3), &nodes);
        assert_eq!(c.len(), 2);
        assert!(c[0].current && c[0].net == Some(cidr("10.1.0.0/24")));
        assert_eq!(c[1].label(), "ens5/enp1s0 (10.2.0.0/24)");
        // A node without the data network: only the current choice.
        let mut f2 = fleet();
        f2[1].pop();
        let nodes: Vec<&[Iface]> = f2.iter().map(Vec::as_slice).collect();
        assert_eq!(candidates(&current(3), &nodes).len(), 1);
        // Bootstrap addresses on routed subnets: the current choice is named by its addresses.
        let routed = vec![
            ("eth0".to_string(), "10.9.1.1".parse().expect("ip")),
            ("eth0".to_string(), "10.9.2.1".parse().expect("ip")),
        ];
        let nodes: Vec<&[Iface]> = f.iter().take(2).map(Vec::as_slice).collect();
        let c = candidates(&routed, &nodes);
        assert!(c[0].current && c[0].net.is_none());
        assert_eq!(c.len(), 3);
    }

    fn measured(net: &str, current: bool, pairs: &[u64]) -> Measured {
        let n = pairs.len();
        Measured {
            cand: Candidate {
                net: Some(cidr(net)),
                legs: (0..n)
                    .map(|i| Leg {
                        ifname: "x".into(),
                        addr: format!("10.0.0.{i}").parse().expect("ip"),
                        speed_mbps: None,
                    })
                    .collect(),
                current,
            },
            pairs: pairs.iter().map(|p| Ok(*p)).collect(),
        }
    }

    #[test]
    fn a_network_wins_only_with_the_margin() {
        let now = measured("10.1.0.0/24", true, &[20_000, 19_000, 21_000]);
        let fast = measured("10.2.0.0/24", false, &[11_000_000, 9_000_000, 12_000_000]);
        assert_eq!(choose(&[now.clone(), fast.clone()]), Some(1));
        // 1.5× is noise.
        let close = measured("10.2.0.0/24", false, &[30_000, 28_500, 40_000]);
        assert_eq!(choose(&[now.clone(), close]), None);
        // Exactly 2×: wins.
        let twice = measured("10.2.0.0/24", false, &[38_000, 40_000, 50_000]);
        assert_eq!(choose(&[now.clone(), twice]), Some(1));
        // A network with a failed pair is not proven.
        let mut broken = fast.clone();
        broken.pairs[1] = Err("connection refused".into());
        assert_eq!(broken.slowest(), None);
        assert_eq!(choose(&[now.clone(), broken.clone()]), None);
        assert!(figure_text(&broken).contains("not proven (connection refused)"));
        // The current figure unknown: nothing to compare.
        let mut lost = now.clone();
        lost.pairs[0] = Err("timed out".into());
        assert_eq!(choose(&[lost, fast.clone()]), None);
        // The fastest of two that cross the margin.
        let faster = measured("10.3.0.0/24", false, &[20_000_000; 3]);
        assert_eq!(choose(&[now, fast, faster]), Some(2));
        assert_eq!(rate(11_000_000), "11.0 Gbit/s");
        assert_eq!(rate(19_800), "19.8 Mbit/s");
        assert_eq!(rate(850), "850 kbit/s");
    }

    #[test]
    fn a_slow_node_is_named_by_measure_and_by_nominal_speed() {
        let names: Vec<String> = ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect();
        // Node c (index 2) slow both ways: its pairs from b and to d.
        let m = measured(
            "10.2.0.0/24",
            false,
            &[9_000_000, 100_000, 90_000, 9_500_000],
        );
        let s = slow_links(&m, &names);
        assert_eq!(s.len(), 1, "{s:?}");
        assert!(
            s[0].starts_with("node c (x) measured 90.0 Mbit/s to d and 100.0 Mbit/s from b"),
            "{}",
            s[0]
        );
        // Three nodes, the middle one slow both ways: two of three pairs are slow, the node still stands out.
        let m = measured("10.2.0.0/24", false, &[200_000, 210_000, 9_000_000]);
        let s = slow_links(&m, &names);
        assert_eq!(s.len(), 1, "{s:?}");
        assert!(
            s[0].starts_with("node b (x) measured 210.0 Mbit/s to c and 200.0 Mbit/s from a"),
            "{}",
            s[0]
        );
        // Only one direction slow: the pair is named.
        let m = measured(
            "10.2.0.0/24",
            false,
            &[9_000_000, 9_000_000, 90_000, 9_500_000],
        );
        let s = slow_links(&m, &names);
        assert_eq!(s.len(), 1, "{s:?}");
        assert!(
            s[0].starts_with("the pair c (x) to d (x) measured 90.0 Mbit/s"),
            "{}",
            s[0]
        );
        // Even figures: nothing.
        let m = measured("10.2.0.0/24", false, &[9_000_000, 8_000_000, 9_100_000]);
        assert!(slow_links(&m, &names).is_empty());
        // A port that negotiated 10 GbE where the others run 100 GbE.
        let mut m = measured("10.2.0.0/24", false, &[9_000_000, 8_000_000, 9_100_000]);
        for (i, l) in m.cand.legs.iter_mut().enumerate() {
            l.speed_mbps = Some(if i == 1 { 10_000 } else { 100_000 });
        }
        let s = slow_links(&m, &names);
        assert_eq!(s.len(), 1, "{s:?}");
        assert!(
            s[0].contains(
                "node b (x) links at 10.0 Gbit/s where the fastest node on x (10.2.0.0/24) links at 100.0 Gbit/s \
                 (negotiated link speed, sysfs, not a measurement"
            ),
            "{}",
            s[0]
        );
        assert!(
            s[0].contains("measured 8.0 Gbit/s; link speeds (sysfs, negotiated, not measured): 100.0 Gbit/s on 2 node(s), 10.0 Gbit/s on 1 node(s)"),
            "{}",
            s[0]
        );
        // Without a measurement the figure is said to be missing, not a rate.
        let mut m = measured("10.2.0.0/24", false, &[9_000_000, 8_000_000, 9_100_000]);
        m.pairs.clear();
        for (i, l) in m.cand.legs.iter_mut().enumerate() {
            l.speed_mbps = Some(if i == 1 { 10_000 } else { 100_000 });
        }
        let s = slow_links(&m, &names);
        assert!(
            s[0].contains("a lower speed); not measured; link speeds (sysfs"),
            "{}",
            s[0]
        );
        // A measured slow node says its figure is measured, and sysfs' speeds are not.
        let m = measured("10.2.0.0/24", false, &[200_000, 210_000, 9_000_000]);
        let s = slow_links(&m, &names);
        assert!(
            s[0].ends_with(
                "; link speeds (sysfs, negotiated, not measured): unknown (sysfs reports none)"
            ),
            "{}",
            s[0]
        );
        assert_eq!(link_rate(25_000), "25.0 Gbit/s");
    }

    #[test]
    fn received_lists_are_bounded() {
        let mut many: Vec<Iface> = (0..40)
            .map(|i| {
                iface(
                    &format!("a-very-long-interface-name-{i}\n"),
                    &["10.0.0.1/8"; 9],
                    None,
                )
            })
            .collect();
        super::super::protocol::sanitize(&mut many);
        assert_eq!(many.len(), MAX_IFACES);
        assert!(many
            .iter()
            .all(|i| i.name.len() <= MAX_IFNAME && i.addrs.len() == MAX_ADDRS));
        assert!(many.iter().all(|i| !i.name.contains('\n')));
    }

    fn member(i: u8) -> Member {
        let addr: IpAddr = format!("10.1.0.{i}").parse().expect("ip");
        Member {
            report: super::super::protocol::NodeReport {
                hostname: format!("n{i}"),
                ifname: "eth0".into(),
                addr,
                family: Family::Inet,
                mtu: Some(1500),
                data_mtus: Vec::new(),
                probe_port: Some(40000),
                listen_error: None,
                nonce: u64::from(i),
                nccl_version: None,
                ncclenv_version: "0".into(),
                nccl_env: Default::default(),
                decided: Default::default(),
                vendor_profile: false,
                strict: false,
                refused: None,
                node_rank: None,
                ifaces: Vec::new(),
                sink_ports: (Some(5000 + u16::from(i)), None),
                measure: true,
                ib_usable: false,
                own_ifname: true,
            },
            seen_from: None,
            probe: None,
        }
    }

    #[test]
    fn what_is_measured_and_when_not() {
        let mut ms: Vec<Member> = (1..=3).map(member).collect();
        assert_eq!(skip(&ms, 3, 0, 2), None);
        assert_eq!(skip(&ms, 3, 0, 1).map(|s| s.1), Some(false));
        assert_eq!(skip(&ms, 4, 0, 2).map(|s| s.1), Some(false));
        ms[2].report.sink_ports = (None, None);
        assert!(skip(&ms, 3, 0, 2)
            .expect("deaf")
            .0
            .contains("no measurement listener on n3"));
        ms[2].report.sink_ports = (Some(5003), None);
        ms[1].report.measure = false;
        let (why, say) = skip(&ms, 3, 0, 2).expect("off");
        assert!(
            say && why.contains("NCCLENV_PREFLIGHT_MEASURE=0 on n2 (10.1.0.2)"),
            "{why}"
        );
        ms[1].report.measure = true;
        for m in &mut ms {
            m.report.ib_usable = true;
        }
        assert!(skip(&ms, 3, 0, 2).expect("ib").0.contains("InfiniBand"));
    }

    #[test]
    fn legs_figures_and_the_verdict() {
        let mut ms: Vec<Member> = (1..=3).map(member).collect();
        // Legs: node k to node k+1's address on each network, at its sink port.
        let f = fleet();
        let nodes: Vec<&[Iface]> = f.iter().map(Vec::as_slice).collect();
        let cands = candidates(&current(3), &nodes);
        let l = legs(&cands, &ms);
        assert_eq!(l[2][1].to, Some("10.2.0.1:5001".parse().expect("sa")));
        assert_eq!(
            (l[0][0].to, l[0][0].nonce),
            (Some("10.1.0.2:5002".parse().expect("sa")), 2)
        );
        let figs = |k: &[u64]| {
            Some(vec![
                Figure {
                    net: 0,
                    kbps: Some(k[0]),
                    error: None,
                },
                Figure {
                    net: 1,
                    kbps: Some(k[1]),
                    error: None,
                },
            ])
        };
        let measured = assemble(
            cands.clone(),
            &[
                figs(&[20_000, 9_000_000]),
                figs(&[19_000, 8_000_000]),
                figs(&[21_000, 9_500_000]),
            ],
        );
        let verdict = || FleetVerdict {
            present: 3,
            expected: 3,
            refuse: None,
            repairs: Vec::new(),
            findings: Vec::new(),
            network: None,
        };
        let mut v = verdict();
        conclude(&mut v, &ms, cands.clone(), measured.clone(), None);
        let net = v.network.as_ref().expect("moves");
        assert_eq!(net.net.to_string(), "10.2.0.0/24");
        assert!(
            net.how
                .starts_with("every pair proven: slowest 8.0 Gbit/s vs eth0 19.0 Mbit/s"),
            "{}",
            net.how
        );
        assert_eq!(v.findings.len(), 1);
        assert!(v.findings[0]
            .message
            .contains("every node moves to ens5/enp1s0 (10.2.0.0/24)"));
        // An inherited NCCL_SOCKET_IFNAME on one node: kept everywhere, the faster network named.
        ms[2].report.own_ifname = false;
        let mut v = verdict();
        conclude(&mut v, &ms, cands.clone(), measured, None);
        assert!(v.network.is_none());
        assert!(
            v.findings[0]
                .message
                .contains("is faster than the NCCL_SOCKET_IFNAME kept on n3"),
            "{:?}",
            v.findings
        );
        // One slow node on the data network; strict refuses.
        ms[2].report.own_ifname = true;
        ms[0].report.strict = true;
        let measured = assemble(
            cands.clone(),
            &[
                figs(&[20_000, 310_000]),
                figs(&[19_000, 300_000]),
                figs(&[21_000, 9_500_000]),
            ],
        );
        let mut v = verdict();
        conclude(&mut v, &ms, cands, measured, None);
        assert!(v.network.is_some());
        let slow: Vec<&Note> = warnings(&v, "preflight-slow-link").collect();
        assert_eq!(slow.len(), 1, "{:?}", v.findings);
        assert!(slow[0].message.starts_with("node n2 (10.1.0.2) (ens5) measured 300.0 Mbit/s to n3 (10.1.0.3) and 310.0 Mbit/s from n1"), "{}", slow[0].message);
        assert_eq!(
            v.refuse.as_ref().map(|r| r.code.as_str()),
            Some("preflight-slow-link")
        );
    }
}
