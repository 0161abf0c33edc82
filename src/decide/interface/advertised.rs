//! The addresses the launcher advertises for this node, against the bound interface: Paddle's `POD_IP`
//! ([`pod_ip`]), the address this node declares ([`declared_differs`]) and `--ips` ([`ips_differ`]).

use super::fix::{Fix, Repair};
use super::view::NetworkView;
use crate::findings::Finding;
use crate::plan::Plan;
use crate::snapshot::Snapshot;
use std::net::IpAddr;

/// `POD_IP`, Paddle's node address (IPv4 only): set when unset; a loopback value in a multi-node job is a
/// certain failure (Paddle advertises it and the other nodes connect to their own loopback): repaired to the
/// chosen address, or unset when that is not IPv4 (`pod-ip-repaired`); any other difference is warned.
pub(super) fn pod_ip(
    snap: &Snapshot,
    ifname: &str,
    addr: Option<IpAddr>,
    multi: bool,
    fix: &Fix,
    plan: &mut Plan,
) {
    let inherited = snap.env.get("POD_IP");
    match (inherited, addr) {
        (None, Some(a @ IpAddr::V4(_))) if !a.is_loopback() => plan.set(
            "POD_IP",
            a.to_string(),
            format!("Paddle advertises POD_IP as this node's address: {ifname}'s address"),
        ),
        (Some(p), _) if multi && p.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()) => {
            let new = addr.filter(|a| a.is_ipv4() && !a.is_loopback());
            let nodes = snap.job.nnodes.unwrap_or(2);
            fix.apply(
                plan,
                Repair {
                    name: "POD_IP",
                    old: p,
                    new: new.map(|a| a.to_string()),
                    reason: format!(
                        "inherited POD_IP={p} is a loopback address in a {nodes}-node job: Paddle would advertise it to the other nodes"
                    ),
                    code: Finding::PodIpRepaired,
                    message: format!(
                        "POD_IP={p} is a loopback address, which Paddle advertises as this node's address in a {nodes}-node job: the other nodes would connect to themselves; {}",
                        match new {
                            Some(a) => format!("replaced by {ifname}'s address {a}"),
                            None => "unset (the chosen address is not IPv4)".to_string(),
                        }
                    ),
                    remedy: "do not set POD_IP to a loopback address (Kubernetes: status.podIP; under host networking, give the host name its real address in /etc/hosts)".into(),
                },
            );
        }
        (Some(p), Some(a)) if p.parse::<IpAddr>().ok() != Some(a) => plan.finding(
            Finding::AdvertisedAddressDiffers,
            format!("POD_IP={p} is what Paddle advertises, but NCCL binds {a} on {ifname}"),
            "unset POD_IP or make it the address of the chosen interface",
        ),
        _ => {}
    }
}

/// The address this node declares (`VLLM_HOST_IP`, Ray's `--node-ip-address`, torchrun's `--local-addr`;
/// `POD_IP` is [`pod_ip`]'s) disagrees with the interface chosen, or belongs to no interface here:
/// `advertised-address-differs`.
pub(super) fn declared_differs(
    v: &NetworkView,
    snap: &Snapshot,
    ifname: &str,
    addr: Option<IpAddr>,
    plan: &mut Plan,
) {
    let (Some(text), Some(src)) = (&snap.job.self_addr, &snap.job.self_addr_source) else {
        return;
    };
    if src == "POD_IP" {
        return;
    }
    let Ok(ip) = text.parse::<IpAddr>() else {
        return;
    };
    let owner = v
        .net
        .addrs
        .iter()
        .find(|a| a.addr == ip)
        .and_then(|a| v.link(a.index));
    let bound = addr.map_or(String::new(), |a| format!(" {a}"));
    match owner {
        None => plan.finding(
            Finding::AdvertisedAddressDiffers,
            format!("{src}={ip} names this node's address, but no interface here has it: the launcher will advertise an address this node does not own; NCCL binds{bound} on {ifname}"),
            format!("set {src} to this node's address on {ifname}, or unset it"),
        ),
        Some(l) if l.name != ifname => plan.finding(
            Finding::AdvertisedAddressDiffers,
            format!("{src}={ip} names this node's address, which is on {}, but NCCL binds{bound} on {ifname}: the job would use two networks", l.name),
            format!("set {src} to this node's address on {ifname}, or make the route to the master leave through {}", l.name),
        ),
        _ => {}
    }
}

/// `--ips` (Paddle's list of the addresses the launcher advertises, checked when every entry is an address)
/// does not contain `addr`, the address
/// NCCL binds on `ifname`: `advertised-address-differs`.
pub(super) fn ips_differ(snap: &Snapshot, ifname: &str, addr: Option<IpAddr>, plan: &mut Plan) {
    if let (false, Some(a)) = (snap.job.ips.is_empty(), addr) {
        let ips: Vec<IpAddr> = snap.job.ips.iter().filter_map(|h| h.parse().ok()).collect();
        if ips.len() == snap.job.ips.len() && !ips.contains(&a) {
            plan.finding(
                Finding::AdvertisedAddressDiffers,
                format!(
                    "--ips {} does not contain {a}, the address NCCL binds on {ifname}: the launcher will advertise another address",
                    snap.job.ips.join(",")
                ),
                "list this node's address of the chosen interface in --ips",
            );
        }
    }
}
