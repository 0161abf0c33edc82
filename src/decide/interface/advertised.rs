//! The addresses the launcher advertises for this node, against the bound interface: the address this node
//! declares ([`declared_differs`]) and `--ips` ([`ips_differ`]); Paddle's `POD_IP` is a companion
//! (`super::companions::COMPANIONS`).

use super::view::NetworkView;
use crate::findings::Finding;
use crate::plan::Plan;
use crate::snapshot::Snapshot;
use std::net::IpAddr;

/// The address this node declares (`VLLM_HOST_IP`, Ray's `--node-ip-address`, torchrun's `--local-addr`;
/// `POD_IP` is a companion's) disagrees with the interface chosen, or belongs to no interface here:
/// `advertised-address-differs`.
pub(super) fn declared_differs(
    view: &NetworkView,
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
    let owner = view
        .net
        .addrs
        .iter()
        .find(|a| a.addr == ip)
        .and_then(|a| view.link(a.index));
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
