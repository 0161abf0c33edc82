//! Probe: links, addresses and routes of the current network namespace, read from the kernel over rtnetlink.
//!
//! One `NETLINK_ROUTE` socket (`rtnetlink::new_connection`, no strict checking) on a current-thread tokio
//! runtime built for the call. Requests go one after the other, never two dumps at once on one socket (the
//! kernel answers a second concurrent dump with `EBUSY`):
//!
//! 1. `RTM_GETLINK` dump with `IFLA_EXT_MASK` = `RTEXT_FILTER_SKIP_STATS` → [`Link`]s;
//! 2. `RTM_GETADDR` dump, family `AF_UNSPEC` → [`Addr`]s (the kernel walks `AF_INET` before `AF_INET6`,
//!    `rtnl_dump_all`, net/core/rtnetlink.c);
//! 3. `RTM_GETROUTE` dumps for `AF_INET`, then `AF_INET6` → [`Route`]s of table main (254), filtered here
//!    rather than in the request (NCCL-FACTS §9: rtnetlink's `RouteMessageBuilder` defaults act as filters);
//! 4. one `RTM_GETROUTE` request with `RTA_DST` per peer address (what `ip route get ADDR` sends) →
//!    [`RouteLookup`]s.
//!
//! A dump the kernel marks `NLM_F_DUMP_INTR` (the table changed while it was read) is read again, up to three
//! times in all.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use futures_util::StreamExt;
use rtnetlink::packet_core::{
    ErrorMessage, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST,
};
use rtnetlink::packet_route::address::{AddressAttribute, AddressFlags, AddressMessage};
use rtnetlink::packet_route::link::{
    LinkAttribute, LinkExtentMask, LinkFlags, LinkInfo, LinkMessage, State,
};
use rtnetlink::packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteNextHopFlags,
    RouteType, RouteVia,
};
use rtnetlink::packet_route::{AddressFamily, RouteNetlinkMessage};
use rtnetlink::Handle;

use crate::snapshot::{Addr, Family, Link, NetSnapshot, NextHop, Route, RouteLookup};

/// How many times a dump is read when the kernel flags it as interrupted (`NLM_F_DUMP_INTR`).
const DUMP_ATTEMPTS: usize = 3;

/// Reads links, addresses, main-table routes and the route towards each peer address from the kernel.
///
/// * `peer_addrs`: addresses of the job's peer (master); for each one, in the same order, the result holds a
///   [`RouteLookup`] in [`NetSnapshot::peer_routes`]. Pass `&[]` when there is no peer.
/// * Returns the [`NetSnapshot`] filled as the docstrings of `crate::snapshot` describe: links in kernel order
///   (ascending index); addresses in kernel order (every IPv4 address before every IPv6 one); routes of table
///   main (254), IPv4 then IPv6, each in kernel order, every route type kept (`Route::kind`), cache clones
///   (`RTM_F_CLONED`) skipped.
/// * Errors: `Err(one sentence)` when the socket or runtime cannot be set up or any of the three dumps fails
///   (the kernel's errno is in the text). A failed peer lookup (`ENETUNREACH`, `EHOSTUNREACH`, …) is not an
///   error: it is recorded in [`RouteLookup::error`].
///
/// Never panics on kernel data; runs in the calling thread's network namespace.
pub fn probe(peer_addrs: &[IpAddr]) -> Result<NetSnapshot, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| format!("cannot start the runtime for the netlink probe: {e}"))?;
    // The socket registers with the runtime's reactor, so it is created inside the runtime's context.
    let _context = runtime.enter();
    let (connection, handle, _) = rtnetlink::new_connection()
        .map_err(|e| format!("cannot open a netlink route socket: {e}"))?;
    let connection = runtime.spawn(connection);
    let result = runtime.block_on(probe_with(handle, peer_addrs, || connection.is_finished()));
    connection.abort();
    result
}

/// The requests of [`probe`], one after the other on `handle`. `closed` tells whether the connection task
/// has ended (its socket failed), which would otherwise look like a short dump.
async fn probe_with(
    mut handle: Handle,
    peer_addrs: &[IpAddr],
    closed: impl Fn() -> bool,
) -> Result<NetSnapshot, String> {
    let mut snap = NetSnapshot::default();

    retry_dump(
        &mut handle,
        "interface (RTM_GETLINK)",
        &closed,
        &mut snap.links,
        || {
            // IFLA_EXT_MASK = RTEXT_FILTER_SKIP_STATS: the kernel leaves out IFLA_STATS, IFLA_STATS64 and the
            // IPv6 statistics, which the probe does not read (net/core/rtnetlink.c, `rtnl_fill_ifinfo`).
            let mut m = LinkMessage::default();
            m.attributes
                .push(LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats]));
            RouteNetlinkMessage::GetLink(m)
        },
        |msg, links| {
            if let RouteNetlinkMessage::NewLink(m) = msg {
                links.push(link_from(m));
            }
        },
    )
    .await?;

    retry_dump(
        &mut handle,
        "address (RTM_GETADDR)",
        &closed,
        &mut snap.addrs,
        || RouteNetlinkMessage::GetAddress(AddressMessage::default()),
        |msg, addrs| {
            if let RouteNetlinkMessage::NewAddress(m) = msg {
                if let Some(a) = addr_from(m) {
                    addrs.push(a);
                }
            }
        },
    )
    .await?;

    for family in [AddressFamily::Inet, AddressFamily::Inet6] {
        let mut routes = Vec::new();
        retry_dump(
            &mut handle,
            "route (RTM_GETROUTE)",
            &closed,
            &mut routes,
            || {
                let mut m = RouteMessage::default();
                m.header.address_family = family;
                RouteNetlinkMessage::GetRoute(m)
            },
            |msg, routes| {
                if let RouteNetlinkMessage::NewRoute(m) = msg {
                    if let Some(r) = route_from(m) {
                        routes.push(r);
                    }
                }
            },
        )
        .await?;
        snap.routes.append(&mut routes);
    }

    snap.peer_routes.reserve_exact(peer_addrs.len());
    for dest in peer_addrs {
        snap.peer_routes.push(route_get(&mut handle, *dest).await);
    }
    Ok(snap)
}

/// Runs one dump into `out` (cleared first), again when the kernel flags it as interrupted.
async fn retry_dump<T>(
    handle: &mut Handle,
    what: &str,
    closed: &impl Fn() -> bool,
    out: &mut Vec<T>,
    request: impl Fn() -> RouteNetlinkMessage,
    mut each: impl FnMut(RouteNetlinkMessage, &mut Vec<T>),
) -> Result<(), String> {
    for attempt in 1..=DUMP_ATTEMPTS {
        out.clear();
        let interrupted = dump(handle, what, request(), |m| each(m, out)).await?;
        if closed() {
            return Err(format!("the netlink socket closed during the {what} dump"));
        }
        if !interrupted || attempt == DUMP_ATTEMPTS {
            // A dump still interrupted after the last attempt is kept: it is consistent message by message.
            break;
        }
    }
    Ok(())
}

/// Sends `request` as a dump (`NLM_F_REQUEST | NLM_F_DUMP`) and hands each answer to `each`, in order.
/// Returns whether any part carried `NLM_F_DUMP_INTR`.
async fn dump(
    handle: &mut Handle,
    what: &str,
    request: RouteNetlinkMessage,
    mut each: impl FnMut(RouteNetlinkMessage),
) -> Result<bool, String> {
    let mut req = NetlinkMessage::from(request);
    req.header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    let mut answers = handle
        .request(req)
        .map_err(|e| format!("cannot send the {what} dump request over netlink: {e}"))?;
    let mut interrupted = false;
    while let Some(msg) = answers.next().await {
        interrupted |= msg.header.flags & NLM_F_DUMP_INTR != 0;
        match msg.payload {
            NetlinkPayload::InnerMessage(m) => each(m),
            NetlinkPayload::Error(e) if e.code.is_some() => {
                return Err(format!(
                    "the kernel refused the {what} dump: {}",
                    errno_text(&e)
                ));
            }
            NetlinkPayload::Overrun(_) => {
                return Err(format!("the {what} dump overran the netlink socket buffer"));
            }
            _ => {}
        }
    }
    Ok(interrupted)
}

/// `ip route get DEST`: an `RTM_GETROUTE` request (no dump flag) with `RTA_DST` = `dest` and the host prefix
/// length, all other header fields 0 (no table, protocol, scope or type filter). The kernel answers with
/// the route it would use (a FIB lookup through the policy rules, net/ipv4/route.c `inet_rtm_getroute`,
/// net/ipv6/route.c `inet6_rtm_getroute`) or an errno, which lands in [`RouteLookup::error`].
async fn route_get(handle: &mut Handle, dest: IpAddr) -> RouteLookup {
    let mut lookup = RouteLookup {
        dest,
        oif: None,
        prefsrc: None,
        gateway: None,
        local: false,
        error: None,
    };
    let mut m = RouteMessage::default();
    m.header.address_family = match dest {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    };
    m.header.destination_prefix_length = if dest.is_ipv4() { 32 } else { 128 };
    m.attributes
        .push(RouteAttribute::Destination(RouteAddress::from(dest)));
    let mut req = NetlinkMessage::from(RouteNetlinkMessage::GetRoute(m));
    req.header.flags = NLM_F_REQUEST;
    let mut answers = match handle.request(req) {
        Ok(a) => a,
        Err(e) => {
            lookup.error = Some(format!("cannot send the route lookup over netlink: {e}"));
            return lookup;
        }
    };
    let mut answered = false;
    while let Some(msg) = answers.next().await {
        match msg.payload {
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(r)) if !answered => {
                answered = true;
                lookup.local = r.header.kind == RouteType::Local;
                for attr in r.attributes {
                    match attr {
                        RouteAttribute::Oif(i) => lookup.oif = Some(i),
                        RouteAttribute::PrefSource(a) => lookup.prefsrc = ip_of(&a),
                        RouteAttribute::Gateway(a) => lookup.gateway = ip_of(&a),
                        RouteAttribute::Via(v) => lookup.gateway = via_ip(&v),
                        _ => {}
                    }
                }
            }
            NetlinkPayload::Error(e) if e.code.is_some() => {
                lookup.error = Some(errno_text(&e));
            }
            _ => {}
        }
    }
    if !answered && lookup.error.is_none() {
        lookup.error = Some("the kernel gave no answer to the route lookup".into());
    }
    lookup
}

/// The kernel's errno of a netlink error message as `ENAME: description` (e.g.
/// `ENETUNREACH: Network is unreachable`).
fn errno_text(e: &ErrorMessage) -> String {
    let code = e.code.map_or(0, |c| c.get());
    nix::errno::Errno::from_raw(code.saturating_abs()).to_string()
}

/// One [`Link`] from an `RTM_NEWLINK` message (`struct ifinfomsg` + `IFLA_*`, include/uapi/linux/if_link.h).
fn link_from(m: LinkMessage) -> Link {
    let flags = m.header.flags;
    let link_type = u16::from(m.header.link_layer_type);
    let mut link = Link {
        index: m.header.index,
        up: flags.contains(LinkFlags::Up),
        running: flags.contains(LinkFlags::Running),
        lower_up: flags.contains(LinkFlags::LowerUp),
        loopback: flags.contains(LinkFlags::Loopback),
        oper_state: "unknown".into(),
        link_type,
        ..Link::default()
    };
    for attr in m.attributes {
        match attr {
            LinkAttribute::IfName(n) => link.name = n,
            LinkAttribute::Mtu(v) => link.mtu = Some(v),
            LinkAttribute::OperState(s) => link.oper_state = oper_state_name(s),
            LinkAttribute::Controller(i) => link.master = Some(i),
            LinkAttribute::Address(a) if !a.is_empty() => {
                link.mac = Some(ll_addr_text(link_type, &a))
            }
            LinkAttribute::LinkInfo(infos) => {
                for info in infos {
                    if let LinkInfo::Kind(k) = info {
                        link.kind = Some(k.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    link
}

/// `IF_OPER_*` in lower case, as `ip` prints it (upper case there; iproute2 ip/ipaddress.c `oper_states`).
fn oper_state_name(s: State) -> String {
    match s {
        State::Unknown => "unknown".into(),
        State::NotPresent => "notpresent".into(),
        State::Down => "down".into(),
        State::LowerLayerDown => "lowerlayerdown".into(),
        State::Testing => "testing".into(),
        State::Dormant => "dormant".into(),
        State::Up => "up".into(),
        other => u8::from(other).to_string(),
    }
}

/// A link-layer address as `ip` prints it (iproute2 lib/ll_addr.c `ll_addr_n2a`): IPv4 text for 4-byte
/// addresses of IPv4 tunnels (ARPHRD_TUNNEL 768, SIT 776, IPGRE 778), IPv6 text for 16-byte addresses of
/// IPv6 tunnels (ARPHRD_TUNNEL6 769, IP6GRE 823), else lower-case hex bytes joined by `:`.
fn ll_addr_text(link_type: u16, a: &[u8]) -> String {
    match (link_type, a.len()) {
        (768 | 776 | 778, 4) => Ipv4Addr::new(a[0], a[1], a[2], a[3]).to_string(),
        (769 | 823, 16) => {
            let mut b = [0u8; 16];
            b.copy_from_slice(a);
            Ipv6Addr::from(b).to_string()
        }
        _ => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            let mut s = String::with_capacity(a.len() * 3);
            for (i, byte) in a.iter().enumerate() {
                if i > 0 {
                    s.push(':');
                }
                s.push(char::from(HEX[usize::from(byte >> 4)]));
                s.push(char::from(HEX[usize::from(byte & 0xf)]));
            }
            s
        }
    }
}

/// One [`Addr`] from an `RTM_NEWADDR` message (`struct ifaddrmsg` + `IFA_*`, include/uapi/linux/if_addr.h).
/// The address is `IFA_LOCAL` when present, else `IFA_ADDRESS` (as iproute2 prints `local`: for a
/// point-to-point address `IFA_ADDRESS` is the far end). The flags are the 32-bit `IFA_FLAGS` attribute when
/// present, else the 8-bit `ifa_flags`. `None` for a message without an IP address.
fn addr_from(m: AddressMessage) -> Option<Addr> {
    let mut local = None;
    let mut address = None;
    let mut flags = AddressFlags::from_bits_retain(u32::from(m.header.flags.bits()));
    for attr in m.attributes {
        match attr {
            AddressAttribute::Local(a) => local = Some(a),
            AddressAttribute::Address(a) => address = Some(a),
            AddressAttribute::Flags(f) => flags = f,
            _ => {}
        }
    }
    Some(Addr {
        index: m.header.index,
        addr: local.or(address)?,
        prefix_len: m.header.prefix_len,
        scope: u8::from(m.header.scope),
        tentative: flags.contains(AddressFlags::Tentative),
        deprecated: flags.contains(AddressFlags::Deprecated),
        dad_failed: flags.contains(AddressFlags::Dadfailed),
    })
}

/// One [`Route`] from an `RTM_NEWROUTE` message (`struct rtmsg` + `RTA_*`, include/uapi/linux/rtnetlink.h),
/// or `None` when it is not an IPv4/IPv6 route of table main (`RTA_TABLE` when present, else `rtm_table`),
/// or is a cache clone (`RTM_F_CLONED`). `RTNH_F_LINKDOWN` or `RTNH_F_DEAD` in `rtm_flags` (single path) or
/// in a next hop's `rtnh_flags` (`RTA_MULTIPATH`) mark that path as link-down.
fn route_from(m: RouteMessage) -> Option<Route> {
    let h = &m.header;
    let family = match h.address_family {
        AddressFamily::Inet => Family::Inet,
        AddressFamily::Inet6 => Family::Inet6,
        _ => return None,
    };
    if h.flags.contains(RouteFlags::Cloned) {
        return None;
    }
    let mut table = u32::from(h.table);
    let dead = RouteFlags::Linkdown | RouteFlags::Dead;
    let mut route = Route {
        family,
        dst: None,
        metric: 0,
        oif: None,
        gateway: None,
        linkdown: h.flags.intersects(dead),
        nexthops: Vec::new(),
        kind: u8::from(h.kind),
        scope: u8::from(h.scope),
        prefsrc: None,
    };
    let dst_len = h.destination_prefix_length;
    for attr in m.attributes {
        match attr {
            RouteAttribute::Table(t) => table = t,
            RouteAttribute::Destination(a) if dst_len > 0 => {
                route.dst = ip_of(&a).map(|ip| (ip, dst_len))
            }
            RouteAttribute::Priority(p) => route.metric = p,
            RouteAttribute::Oif(i) => route.oif = Some(i),
            RouteAttribute::Gateway(a) => route.gateway = ip_of(&a),
            RouteAttribute::Via(v) => route.gateway = via_ip(&v),
            RouteAttribute::PrefSource(a) => route.prefsrc = ip_of(&a),
            RouteAttribute::MultiPath(hops) => {
                route.nexthops = hops
                    .into_iter()
                    .map(|nh| {
                        let mut gateway = None;
                        for attr in nh.attributes {
                            match attr {
                                RouteAttribute::Gateway(a) => gateway = ip_of(&a),
                                RouteAttribute::Via(v) => gateway = via_ip(&v),
                                _ => {}
                            }
                        }
                        NextHop {
                            oif: nh.interface_index,
                            gateway,
                            linkdown: nh
                                .flags
                                .intersects(RouteNextHopFlags::Linkdown | RouteNextHopFlags::Dead),
                        }
                    })
                    .collect();
            }
            _ => {}
        }
    }
    (table == u32::from(RouteHeader::RT_TABLE_MAIN)).then_some(route)
}

/// The IP address of a route attribute (`None` for MPLS labels and unknown families).
fn ip_of(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

/// The gateway of an `RTA_VIA` attribute (a gateway of the other family, `via inet6 …`).
fn via_ip(v: &RouteVia) -> Option<IpAddr> {
    match v {
        RouteVia::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteVia::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ll_addr_like_ip() {
        assert_eq!(
            ll_addr_text(1, &[0x02, 0xab, 0, 1, 0x10, 0xff]),
            "02:ab:00:01:10:ff"
        );
        assert_eq!(ll_addr_text(768, &[10, 0, 0, 1]), "10.0.0.1");
        assert_eq!(ll_addr_text(769, &[0; 16]), "::");
        assert_eq!(ll_addr_text(32, &[1, 2]), "01:02");
    }

    #[test]
    fn errno_text_names_the_errno() {
        let mut e = ErrorMessage::default();
        e.code = std::num::NonZeroI32::new(-libc_enetunreach());
        assert!(
            errno_text(&e).starts_with("ENETUNREACH"),
            "{}",
            errno_text(&e)
        );
    }

    fn libc_enetunreach() -> i32 {
        nix::errno::Errno::ENETUNREACH as i32
    }
}
