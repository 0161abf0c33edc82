//! Netlink probe (stub until the netprobe branch lands).
use crate::snapshot::NetSnapshot;
/// Probe links, addresses, routes and the route to each peer address.
pub fn probe(_peer_addrs: &[std::net::IpAddr]) -> Result<NetSnapshot, String> {
    Err("not implemented".into())
}
