//! Probe: links, addresses and routes of the current network namespace, read from the kernel over rtnetlink.
//!
//! Both probes ([`probe_full`] for `doctor`, [`probe_start`] before every job start) use one small blocking
//! client (`Rtnl`): a `NETLINK_ROUTE` socket from `netlink-sys` (no strict checking), one reused 32 KiB
//! receive buffer, requests sent one after the other (the kernel answers a second concurrent dump on one
//! socket with `EBUSY`), messages read with `netlink-packet-core`/`netlink-packet-route`. The full probe sends:
//!
//! 1. `RTM_GETLINK` dump with `IFLA_EXT_MASK` = `RTEXT_FILTER_SKIP_STATS` → [`Link`]s;
//! 2. `RTM_GETADDR` dump, family `AF_UNSPEC` → [`Addr`]s (the kernel walks `AF_INET` before `AF_INET6`,
//!    `rtnl_dump_all`, net/core/rtnetlink.c);
//! 3. `RTM_GETROUTE` dumps for `AF_INET`, then `AF_INET6` → [`Route`]s of table main (254), filtered here
//!    rather than in the request (a strict-checking kernel treats request fields as filters: rtnetlink 0.24's
//!    `RouteMessageBuilder` defaults, protocol static, type unicast, table main, made a dump return nothing);
//! 4. one `RTM_GETROUTE` request with `RTA_DST` per peer address (what `ip route get ADDR` sends) →
//!    [`RouteLookup`]s;
//! 5. the same request for one off-link destination per family ([`offlink_dest`]): the route the kernel
//!    takes to a host no connected prefix covers, through every `ip rule` (policy routing).
//!
//! A dump the kernel marks `NLM_F_DUMP_INTR` (the table changed while it was read) is read again, up to three
//! times in all.
//!
//! The client is blocking and sequential (no `rtnetlink` crate, no async runtime); requests are written as a
//! hand-made `nlmsghdr` plus the message's own `Emitable`, answers read by message type with the
//! `netlink-packet-route` parsers (`tests::requests_encode_like_netlink_message` checks the bytes). Why, with
//! the sizes measured: `docs/performance.md`, "The netlink probe".

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netlink_packet_core::{
    parse_u32, parse_u8, Emitable, ErrorBuffer, ErrorMessage, NetlinkBuffer, NlaBuffer,
    NlasIterator, Parseable, ParseableParametrized, NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP,
    NLMSG_OVERRUN, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_MULTIPART, NLM_F_REQUEST,
};
use netlink_packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeader, AddressMessage,
};
use netlink_packet_route::link::{LinkFlags, LinkHeader, State};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteLwEnCapType, RouteMessage,
    RouteNextHopFlags, RouteType, RouteVia,
};
use netlink_packet_route::AddressFamily;
use nix::libc;

use crate::snapshot::{Addr, Family, Link, Network, NextHop, Route, RouteLookup};

/// Length of `struct nlmsghdr` (`NLMSG_HDRLEN`, include/uapi/linux/netlink.h).
const NLMSG_HDRLEN: usize = 16;

/// How many times a dump is read when the kernel flags it as interrupted (`NLM_F_DUMP_INTR`).
const DUMP_ATTEMPTS: usize = 3;

/// Reads links, addresses, main-table routes and the route towards each peer address from the kernel.
///
/// * `peer_addrs`: addresses of the job's peer (master); for each one, in the same order, the result holds a
///   [`RouteLookup`] in [`Network::peer_routes`]. Pass `&[]` when there is no peer.
/// * Returns the [`Network`] filled as the docstrings of `crate::snapshot` describe: links in kernel order
///   (ascending index); addresses in kernel order (every IPv4 address before every IPv6 one); routes of table
///   main (254), IPv4 then IPv6, each in kernel order, every route type kept (`Route::kind`), cache clones
///   (`RTM_F_CLONED`) skipped; the kernel's lookup of one off-link destination per family ([`offlink_dest`])
///   in [`Network::default_lookups`] (IPv4, then IPv6).
/// * Errors: `Err(one sentence)` when the socket cannot be opened or any of the dumps fails (the kernel's
///   errno is in the text). A failed peer lookup (`ENETUNREACH`, `EHOSTUNREACH`, …) is not an
///   error: it is recorded in [`RouteLookup::error`].
///
/// Never panics on kernel data; runs in the calling thread's network namespace.
pub fn probe_full(peer_addrs: &[IpAddr]) -> Result<Network, String> {
    let mut nl = Rtnl::new()?;
    let mut snap = Network {
        ipv6_routes_probed: true,
        ..Network::default()
    };

    nl.dump(
        "interface (RTM_GETLINK)",
        &mut snap.links,
        libc::RTM_GETLINK,
        &LinkRequest { index: 0 },
        libc::RTM_NEWLINK,
        |payload, links| {
            if let Some(l) = link_from(payload) {
                links.push(l);
            }
        },
    )?;
    addr_dump(&mut nl, &mut snap.addrs)?;
    route_dump(&mut nl, AddressFamily::Inet, &mut snap.routes)?;
    append_ipv6_routes(&mut nl, &mut snap.routes)?;
    snap.peer_routes = peer_lookups(&mut nl, peer_addrs);
    snap.default_lookups = [Family::Inet, Family::Inet6]
        .into_iter()
        .map(|f| nl.route_get(offlink_dest(f, &snap.routes, &snap.addrs)))
        .collect();
    drop_plain_labels(&mut snap);
    Ok(snap)
}

/// A destination no connected prefix and no non-default main-table route covers, for the default-route
/// lookups ([`Network::default_lookups`]): the first of the documentation prefixes (RFC 5737 for IPv4:
/// 198.51.100.1, 203.0.113.1, 192.0.2.1; RFC 3849 and RFC 9637 for IPv6: 2001:db8::1, 3fff::1) that no
/// address prefix and no route of table main other than a default route contains. Labs and test machines
/// use the documentation prefixes on real links, hence the check; when all are taken the first is returned
/// (the answer is then that link's route, which the decision only follows from a table other than main).
pub fn offlink_dest(family: Family, routes: &[Route], addrs: &[Addr]) -> IpAddr {
    let cands: &[IpAddr] = match family {
        Family::Inet => &[
            IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1)),
            IpAddr::V4(Ipv4Addr::new(203, 0, 113, 1)),
            IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
        ],
        Family::Inet6 => &[
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
            IpAddr::V6(Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 1)),
        ],
    };
    cands
        .iter()
        .copied()
        .find(|d| {
            !addrs.iter().any(|a| a.covers(d))
                && !routes.iter().any(|r| {
                    r.dst
                        .is_some_and(|(n, l)| crate::snapshot::prefix_contains(&n, l, d))
                })
        })
        .unwrap_or(cands[0])
}

/// The IPv6 main-table routes, appended after the IPv4 ones (the order `ip route` prints them in).
fn append_ipv6_routes(nl: &mut Rtnl, routes: &mut Vec<Route>) -> Result<(), String> {
    let mut v6 = Vec::new();
    route_dump(nl, AddressFamily::Inet6, &mut v6)?;
    routes.append(&mut v6);
    Ok(())
}

/// `ip route get` for each peer address, in order.
fn peer_lookups(nl: &mut Rtnl, peer_addrs: &[IpAddr]) -> Vec<RouteLookup> {
    peer_addrs.iter().map(|dest| nl.route_get(*dest)).collect()
}

/// The body of an `RTM_GETLINK` request: a `struct ifinfomsg` (include/uapi/linux/rtnetlink.h) all zero but
/// `ifi_index` = `index` (0 in a dump), then one attribute `IFLA_EXT_MASK` (29, include/uapi/linux/if_link.h)
/// = `RTEXT_FILTER_SKIP_STATS` (1 << 3, include/uapi/linux/rtnetlink.h): the kernel leaves out IFLA_STATS,
/// IFLA_STATS64 and the IPv6 statistics, which the probe does not read (net/core/rtnetlink.c,
/// `rtnl_fill_ifinfo`). Written by hand: `LinkMessage`'s emitter handles every link attribute (≈ 40 KiB of
/// code for this one request).
struct LinkRequest {
    index: u32,
}

impl Emitable for LinkRequest {
    fn buffer_len(&self) -> usize {
        16 + 8
    }

    fn emit(&self, buf: &mut [u8]) {
        buf[..24].fill(0);
        buf[4..8].copy_from_slice(&self.index.to_ne_bytes());
        // struct nlattr: nla_len = 8 (4-byte header + u32 value), nla_type, then the value.
        buf[16..18].copy_from_slice(&8u16.to_ne_bytes());
        buf[18..20].copy_from_slice(&29u16.to_ne_bytes());
        buf[20..24].copy_from_slice(&(1u32 << 3).to_ne_bytes());
    }
}

/// The `RTM_GETADDR` dump (family `AF_UNSPEC`) into `out` (cleared first).
fn addr_dump(nl: &mut Rtnl, out: &mut Vec<Addr>) -> Result<(), String> {
    nl.dump(
        "address (RTM_GETADDR)",
        out,
        libc::RTM_GETADDR,
        &AddressMessage::default(),
        libc::RTM_NEWADDR,
        |payload, addrs| {
            if let Some(a) = address_message(payload).and_then(addr_from) {
                addrs.push(a);
            }
        },
    )
}

/// The `RTM_GETROUTE` dump of `family` into `out` (cleared first), main-table routes only ([`route_from`]).
fn route_dump(nl: &mut Rtnl, family: AddressFamily, out: &mut Vec<Route>) -> Result<(), String> {
    let mut m = RouteMessage::default();
    m.header.address_family = family;
    nl.dump(
        "route (RTM_GETROUTE)",
        out,
        libc::RTM_GETROUTE,
        &m,
        libc::RTM_NEWROUTE,
        |payload, routes| {
            if let Some(r) = route_message(payload).and_then(route_from) {
                routes.push(r);
            }
        },
    )
}

/// A [`RouteLookup`] for `dest` with nothing found yet.
fn empty_lookup(dest: IpAddr) -> RouteLookup {
    RouteLookup {
        dest,
        oif: None,
        prefsrc: None,
        gateway: None,
        local: false,
        error: None,
        table: None,
    }
}

/// The `RTM_GETROUTE` request of `ip route get DEST` (see [`Rtnl::route_get`]): family, host prefix length,
/// `RTM_F_LOOKUP_TABLE`, `RTA_DST`.
fn route_get_request(dest: IpAddr) -> RouteMessage {
    let mut m = RouteMessage::default();
    m.header.address_family = match dest {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    };
    m.header.destination_prefix_length = if dest.is_ipv4() { 32 } else { 128 };
    // RTM_F_LOOKUP_TABLE: report the table the FIB lookup used (net/ipv4/route.c `inet_rtm_getroute`;
    // without it RTA_TABLE says main whatever `ip rule` chose). iproute2's `ip route get` sets it too.
    m.header.flags = RouteFlags::LookupTable;
    m.attributes
        .push(RouteAttribute::Destination(RouteAddress::from(dest)));
    m
}

/// Copies the kernel's answer to a route lookup into `lookup`: `RTA_OIF`, `RTA_PREFSRC`, `RTA_GATEWAY` or
/// `RTA_VIA`, `RTA_TABLE` (else `rtm_table`), and whether it is a `local` route.
fn fill_lookup(lookup: &mut RouteLookup, r: RouteMessage) {
    lookup.local = r.header.kind == RouteType::Local;
    lookup.table = Some(u32::from(r.header.table));
    for attr in r.attributes {
        match attr {
            RouteAttribute::Table(t) => lookup.table = Some(t),
            RouteAttribute::Oif(i) => lookup.oif = Some(i),
            RouteAttribute::PrefSource(a) => lookup.prefsrc = ip_of(&a),
            RouteAttribute::Gateway(a) => lookup.gateway = ip_of(&a),
            RouteAttribute::Via(v) => lookup.gateway = via_ip(&v),
            _ => {}
        }
    }
}

/// The kernel's errno of a netlink error message as `ENAME: description` (e.g.
/// `ENETUNREACH: Network is unreachable`).
fn errno_text(e: &ErrorMessage) -> String {
    let code = e.code.map_or(0, |c| c.get());
    nix::errno::Errno::from_raw(code.saturating_abs()).to_string()
}

// ---------------------------------------------------------------------------------------------------------
// Reading answers leniently: one attribute at a time.
//
// `netlink-packet-route` parses a message's attributes as a whole and fails the whole message when one of
// them does not parse (an interface name or an address label that is not UTF-8, an attribute of a newer
// kernel in an unexpected shape). Dropping the message would shrink the world ncclenv sees (a NIC missing,
// "only lo"). So each answer is read here as its fixed header plus its attributes one by one: only the
// attributes the probe uses are parsed (link attributes from their bytes, the others by the crate's parser
// for that one attribute), one that does not parse is skipped alone, names are read from their bytes, and a message is dropped only when its fixed
// header is too short to hold an index.
// ---------------------------------------------------------------------------------------------------------

/// Link attributes read from their bytes (include/uapi/linux/if_link.h): `IFLA_IFNAME`, `IFLA_LINKINFO` and
/// its nested `IFLA_INFO_KIND`.
const IFLA_IFNAME: u16 = 3;
const IFLA_LINKINFO: u16 = 18;
const IFLA_INFO_KIND: u16 = 1;
/// Link attributes read as numbers or bytes (include/uapi/linux/if_link.h): `IFLA_ADDRESS`, `IFLA_MTU`,
/// `IFLA_MASTER`, `IFLA_OPERSTATE`.
const IFLA_ADDRESS: u16 = 1;
const IFLA_MTU: u16 = 4;
const IFLA_MASTER: u16 = 10;
const IFLA_OPERSTATE: u16 = 16;
/// Address attributes used (include/uapi/linux/if_addr.h): `IFA_ADDRESS`, `IFA_LOCAL`, `IFA_FLAGS`; the
/// label (`IFA_LABEL`, [`IFA_LABEL`]) is read from its bytes.
const ADDR_PARSED: &[u16] = &[1, 2, 8];
/// `IFA_LABEL` (include/uapi/linux/if_addr.h): an IPv4 address's label, the name glibc's `getifaddrs`
/// reports it under (`ifa_name`; sysdeps/unix/sysv/linux/ifaddrs.c). Read from its bytes: a label that is not
/// UTF-8 must not drop the address.
const IFA_LABEL: u16 = 3;
/// Route attributes used (include/uapi/linux/rtnetlink.h): `RTA_DST`, `RTA_OIF`, `RTA_GATEWAY`,
/// `RTA_PRIORITY`, `RTA_PREFSRC`, `RTA_MULTIPATH`, `RTA_TABLE`, `RTA_VIA`.
const ROUTE_PARSED: &[u16] = &[1, 4, 5, 6, 7, 9, 15, 18];
/// Sizes of the fixed headers: `struct ifinfomsg`, `struct ifaddrmsg`, `struct rtmsg`.
const IFINFOMSG_LEN: usize = 16;
const IFADDRMSG_LEN: usize = 8;
const RTMSG_LEN: usize = 12;

/// The attributes after the first `header_len` bytes of `payload`, in order. Stops at an attribute whose
/// length is malformed (nothing after it can be located).
fn attributes(payload: &[u8], header_len: usize) -> impl Iterator<Item = NlaBuffer<&[u8]>> {
    NlasIterator::new(payload.get(header_len..).unwrap_or(&[])).map_while(Result::ok)
}

/// A name attribute's bytes (up to the first NUL) as text, and whether it had to be escaped (not UTF-8:
/// each invalid byte shown as `\xNN`, `text::bytes_text`).
fn name_text(raw: &[u8]) -> (String, bool) {
    let raw = raw.split(|b| *b == 0).next().unwrap_or(&[]);
    match std::str::from_utf8(raw) {
        Ok(s) => (s.to_string(), false),
        Err(_) => (crate::text::bytes_text(raw), true),
    }
}

/// `IFLA_INFO_KIND` inside an `IFLA_LINKINFO` attribute's value (`veth`, `bridge`, …), as text.
fn info_kind(linkinfo: &[u8]) -> Option<String> {
    attributes(linkinfo, 0)
        .find(|a| a.kind() == IFLA_INFO_KIND)
        .map(|a| name_text(a.value()).0)
        .filter(|k| !k.is_empty())
}

/// One [`Link`] from the payload of an `RTM_NEWLINK` message (`struct ifinfomsg` + `IFLA_*`,
/// include/uapi/linux/if_link.h), read leniently (see above). `None` only when the payload is shorter than
/// `struct ifinfomsg`.
fn link_from(payload: &[u8]) -> Option<Link> {
    let h = LinkHeader::parse(payload).ok()?;
    let flags = h.flags;
    let link_type = u16::from(h.link_layer_type);
    let mut link = Link {
        index: h.index,
        up: flags.contains(LinkFlags::Up),
        running: flags.contains(LinkFlags::Running),
        lower_up: flags.contains(LinkFlags::LowerUp),
        loopback: flags.contains(LinkFlags::Loopback),
        oper_state: "unknown".into(),
        link_type,
        ..Link::default()
    };
    for nla in attributes(payload, IFINFOMSG_LEN) {
        match nla.kind() {
            IFLA_IFNAME => (link.name, link.name_escaped) = name_text(nla.value()),
            IFLA_LINKINFO => link.kind = info_kind(nla.value()),
            // Each read as `LinkAttribute::parse_with_param` reads it (netlink-packet-route 0.34,
            // src/link/attribute.rs): the address as its bytes, the numbers in host byte order and of their
            // exact size (`parse_u32`, `parse_u8` of netlink-packet-core), else the attribute is skipped. The
            // crate's parser for the whole attribute set is not linked: it cost ~110 KiB of the static binary
            // (`docs/performance.md`, "What the binary is made of").
            IFLA_ADDRESS if !nla.value().is_empty() => {
                link.mac = Some(ll_addr_text(link_type, nla.value()))
            }
            IFLA_MTU => link.mtu = parse_u32(nla.value()).ok().or(link.mtu),
            IFLA_MASTER => link.master = parse_u32(nla.value()).ok().or(link.master),
            IFLA_OPERSTATE => {
                if let Ok(s) = parse_u8(nla.value()) {
                    link.oper_state = oper_state_name(State::from(s))
                }
            }
            _ => {}
        }
    }
    Some(link)
}

/// An `RTM_NEWADDR` payload as an [`AddressMessage`] holding the header and the attributes of
/// [`ADDR_PARSED`] that parse. `None` when the payload is shorter than `struct ifaddrmsg`.
fn address_message(payload: &[u8]) -> Option<AddressMessage> {
    let mut m = AddressMessage::default();
    m.header = AddressHeader::parse(payload).ok()?;
    m.attributes = attributes(payload, IFADDRMSG_LEN)
        .filter_map(|a| match a.kind() {
            // A label that is not UTF-8 cannot be written into a variable: it is left out (the address is
            // then modelled under its link's name, which a prefix of that name still matches in NCCL).
            IFA_LABEL => match name_text(a.value()) {
                (l, false) => Some(AddressAttribute::Label(l)),
                (_, true) => None,
            },
            k if ADDR_PARSED.contains(&k) => AddressAttribute::parse(&a).ok(),
            _ => None,
        })
        .collect();
    Some(m)
}

/// An `RTM_NEWROUTE` payload as a [`RouteMessage`] holding the header and the attributes of
/// [`ROUTE_PARSED`] that parse. `None` when the payload is shorter than `struct rtmsg`.
fn route_message(payload: &[u8]) -> Option<RouteMessage> {
    let mut m = RouteMessage::default();
    m.header = RouteHeader::parse(payload).ok()?;
    let param = (
        m.header.address_family,
        m.header.kind,
        RouteLwEnCapType::None,
    );
    m.attributes = attributes(payload, RTMSG_LEN)
        .filter(|a| ROUTE_PARSED.contains(&a.kind()))
        .filter_map(|a| RouteAttribute::parse_with_param(&a, param).ok())
        .collect();
    Some(m)
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
    let mut label = None;
    for attr in m.attributes {
        match attr {
            AddressAttribute::Label(l) if !l.is_empty() => label = Some(l),
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
        label,
    })
}

/// Keeps [`Addr::label`] only where it differs from the name of the address's link: the kernel sends every
/// IPv4 address's label, which is the link's name unless one was given (`inet_rtm_newaddr`,
/// net/ipv4/devinet.c). An address whose link is not in `net.links` keeps its label.
fn drop_plain_labels(net: &mut Network) {
    for a in &mut net.addrs {
        let plain = net
            .links
            .iter()
            .find(|l| l.index == a.index)
            .is_some_and(|l| a.label.as_deref() == Some(l.name.as_str()));
        if plain || a.addr.is_ipv6() {
            a.label = None;
        }
    }
}

/// One [`Route`] from an `RTM_NEWROUTE` message (`struct rtmsg` + `RTA_*`, include/uapi/linux/rtnetlink.h),
/// or `None` when it is not an IPv4/IPv6 route of table main (`RTA_TABLE` when present, else `rtm_table`),
/// or is a cache clone (`RTM_F_CLONED`). `RTNH_F_LINKDOWN` or `RTNH_F_DEAD` in `rtm_flags` (single path) or
/// in a next hop's `rtnh_flags` (`RTA_MULTIPATH`) mark that path as link-down.
fn route_from(msg: RouteMessage) -> Option<Route> {
    let header = &msg.header;
    let family = match header.address_family {
        AddressFamily::Inet => Family::Inet,
        AddressFamily::Inet6 => Family::Inet6,
        _ => return None,
    };
    if header.flags.contains(RouteFlags::Cloned) {
        return None;
    }
    let mut table = u32::from(header.table);
    let dead = RouteFlags::Linkdown | RouteFlags::Dead;
    let mut route = Route {
        family,
        dst: None,
        metric: 0,
        oif: None,
        gateway: None,
        linkdown: header.flags.intersects(dead),
        nexthops: Vec::new(),
        kind: u8::from(header.kind),
        scope: u8::from(header.scope),
        prefsrc: None,
    };
    let dst_len = header.destination_prefix_length;
    for attr in msg.attributes {
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

// ---------------------------------------------------------------------------------------------------------
// The start path: what the decision needs before every job start, without a link dump.
// ---------------------------------------------------------------------------------------------------------

/// What [`probe_start`] needs besides the peer addresses, to know which parts of the full probe the decision
/// can do without (see [`probe_start`]).
#[derive(Debug, Clone, Default)]
pub struct StartNeeds<'a> {
    /// The effective `NCCL_SOCKET_FAMILY` is `AF_INET6` (environment or NCCL configuration file): the
    /// decision then looks only at IPv6 default routes (`decide::interface`), so they are always probed.
    pub ipv6_family: bool,
    /// `NCCLENV_EXCLUDE`: interfaces the decision never picks. An IPv4 default route over one of them does
    /// not count when judging whether the IPv6 routes are needed.
    pub exclude: &'a [String],
    /// Interface names the decision looks up by name even without an address (the netdevs of RoCE GIDs,
    /// `decide::rdma`): each one that exists gets an entry in [`Network::links`] (`SIOCGIFINDEX`).
    pub names: &'a [String],
}

/// Size of the receive buffer in bytes. The kernel sizes a dump's datagrams by the reader's buffer, capped at
/// 32 KiB (`netlink_recvmsg`/`netlink_dump`, net/netlink/af_netlink.c), so 32 KiB takes a dump in the fewest
/// `recv` calls and holds any single `RTM_NEWLINK` reply without VF information.
const RECV_BUF: usize = 32 * 1024;

/// A blocking `NETLINK_ROUTE` socket with one reused receive buffer: the start path's netlink client.
struct Rtnl {
    sock: netlink_sys::Socket,
    seq: u32,
    buf: Vec<u8>,
    out: Vec<u8>,
}

/// How a request ended (see [`Rtnl::request`]).
enum RequestEnd {
    /// The answer is complete; `interrupted` when a dump part carried `NLM_F_DUMP_INTR`.
    Done { interrupted: bool },
    /// The kernel answered with an errno (`NLMSG_ERROR`, negative code), as [`errno_text`] writes it.
    Refused(String),
}

impl Rtnl {
    /// Opens the socket (`SOCK_CLOEXEC`, netlink-sys); the kernel binds it on the first send.
    fn new() -> Result<Rtnl, String> {
        let sock = netlink_sys::Socket::new(netlink_sys::protocols::NETLINK_ROUTE)
            .map_err(|e| format!("cannot open a netlink route socket: {e}"))?;
        Ok(Rtnl {
            sock,
            seq: 0,
            buf: Vec::with_capacity(RECV_BUF),
            out: Vec::with_capacity(64),
        })
    }

    /// Sends a message of type `kind` (`RTM_GET*`) with `flags` and `body` (the `struct ifinfomsg`,
    /// `ifaddrmsg` or `rtmsg` and its attributes), and hands the payload of each answer of type `answer`
    /// (`RTM_NEW*`) to `each`, in order, until `NLMSG_DONE`, an error, or (without `NLM_F_DUMP`) the single
    /// answer; other message types are skipped. `Err` only for a socket failure or an answer that cannot be
    /// read.
    fn request(
        &mut self,
        what: &str,
        kind: u16,
        body: &dyn Emitable,
        flags: u16,
        answer: u16,
        each: &mut dyn FnMut(&[u8]),
    ) -> Result<RequestEnd, String> {
        self.seq = self.seq.wrapping_add(1);
        encode(&mut self.out, kind, flags, self.seq, body);
        self.sock
            .send(&self.out, 0)
            .map_err(|e| format!("cannot send the {what} request over netlink: {e}"))?;
        let mut interrupted = false;
        loop {
            self.buf.clear();
            let n = self
                .sock
                .recv(&mut self.buf, libc::MSG_TRUNC)
                .map_err(|e| format!("cannot read the {what} answer from netlink: {e}"))?;
            if n > self.buf.len() {
                return Err(format!(
                    "a netlink answer to the {what} request ({n} bytes) did not fit the {RECV_BUF}-byte buffer"
                ));
            }
            let mut off = 0;
            while off < n {
                let part = NetlinkBuffer::new_checked(&self.buf[off..n])
                    .map_err(|e| format!("unreadable netlink answer to the {what} request: {e}"))?;
                let len = part.length() as usize;
                off += (len + 3) & !3;
                if part.sequence_number() != self.seq {
                    continue; // an answer to an earlier request (cannot happen with one request at a time)
                }
                interrupted |= part.flags() & NLM_F_DUMP_INTR != 0;
                match part.message_type() {
                    NLMSG_DONE => return Ok(RequestEnd::Done { interrupted }),
                    NLMSG_ERROR => {
                        let payload = part.payload();
                        let e = ErrorBuffer::new_checked(&payload)
                            .and_then(|b| ErrorMessage::parse(&b))
                            .map_err(|e| {
                                format!("unreadable netlink error for the {what} request: {e}")
                            })?;
                        return Ok(match e.code {
                            Some(_) => RequestEnd::Refused(errno_text(&e)),
                            None => RequestEnd::Done { interrupted },
                        });
                    }
                    NLMSG_NOOP => {}
                    NLMSG_OVERRUN => {
                        return Err(format!(
                            "the {what} answer overran the netlink socket buffer"
                        ))
                    }
                    t => {
                        if t == answer {
                            each(part.payload());
                        }
                        if part.flags() & NLM_F_MULTIPART == 0 {
                            return Ok(RequestEnd::Done { interrupted });
                        }
                    }
                }
            }
        }
    }

    /// A dump into `out` (cleared first), read again when the kernel flags it as interrupted, up to
    /// [`DUMP_ATTEMPTS`] times (the last one is kept: it is consistent message by message).
    /// `kind`, `body`, `answer` as in [`Rtnl::request`]; `each` parses one answer's payload into `out`.
    #[allow(clippy::too_many_arguments)]
    fn dump<T>(
        &mut self,
        what: &str,
        out: &mut Vec<T>,
        kind: u16,
        body: &dyn Emitable,
        answer: u16,
        mut each: impl FnMut(&[u8], &mut Vec<T>),
    ) -> Result<(), String> {
        for attempt in 1..=DUMP_ATTEMPTS {
            out.clear();
            match self.request(
                what,
                kind,
                body,
                NLM_F_REQUEST | NLM_F_DUMP,
                answer,
                &mut |p| each(p, out),
            )? {
                RequestEnd::Refused(e) => {
                    return Err(format!("the kernel refused the {what} dump: {e}"))
                }
                RequestEnd::Done { interrupted } => {
                    if !interrupted || attempt == DUMP_ATTEMPTS {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// `ip route get DEST`: an `RTM_GETROUTE` request (no dump flag) with `RTA_DST` = `dest`, the host
    /// prefix length and `RTM_F_LOOKUP_TABLE`, all other header fields 0 (no table, protocol, scope or type
    /// filter). The kernel answers
    /// with the route it would use (a FIB lookup through the policy rules, net/ipv4/route.c
    /// `inet_rtm_getroute`, net/ipv6/route.c `inet6_rtm_getroute`) or an errno, which lands in
    /// [`RouteLookup::error`].
    fn route_get(&mut self, dest: IpAddr) -> RouteLookup {
        let mut lookup = empty_lookup(dest);
        let mut answered = false;
        match self.request(
            "route lookup",
            libc::RTM_GETROUTE,
            &route_get_request(dest),
            NLM_F_REQUEST,
            libc::RTM_NEWROUTE,
            &mut |p| {
                if !answered {
                    if let Some(r) = route_message(p) {
                        answered = true;
                        fill_lookup(&mut lookup, r);
                    }
                }
            },
        ) {
            Ok(RequestEnd::Done { .. }) if !answered => {
                lookup.error = Some("the kernel gave no answer to the route lookup".into())
            }
            Ok(RequestEnd::Done { .. }) => {}
            Ok(RequestEnd::Refused(e)) | Err(e) => lookup.error = Some(e),
        }
        lookup
    }

    /// One link by index (`RTM_GETLINK` without `NLM_F_DUMP`, `IFLA_EXT_MASK` = `RTEXT_FILTER_SKIP_STATS`:
    /// `rtnl_getlink`, net/core/rtnetlink.c). `Ok(None)` when the kernel answers with an errno (`ENODEV`: the
    /// link went away since the address dump).
    fn link(&mut self, index: u32) -> Result<Option<Link>, String> {
        let mut link = None;
        let outcome = self.request(
            "interface (RTM_GETLINK)",
            libc::RTM_GETLINK,
            &LinkRequest { index },
            NLM_F_REQUEST,
            libc::RTM_NEWLINK,
            &mut |p| {
                if let Some(l) = link_from(p).filter(|l| l.index == index) {
                    link = Some(l);
                }
            },
        )?;
        Ok(match outcome {
            RequestEnd::Done { .. } => link,
            RequestEnd::Refused(_) => None,
        })
    }

    /// `SIOCGIFNAME` then `SIOCGIFFLAGS` for `index` on the netlink socket (any socket serves: the kernel
    /// hands interface ioctls a protocol does not handle to `dev_ioctl`, net/socket.c `sock_do_ioctl`).
    /// `None` when the link is gone (`ENODEV`).
    fn ioctl_link(&self, index: u32) -> Option<Link> {
        use std::os::fd::AsRawFd;
        let fd = self.sock.as_raw_fd();
        // SAFETY: `ifreq` is plain old data; the kernel writes at most `IFNAMSIZ` bytes into `ifr_name`,
        // NUL-terminated (dev_ifname → netdev_get_name), and a `c_short` into `ifr_flags`.
        unsafe {
            let mut ifr: libc::ifreq = std::mem::zeroed();
            ifr.ifr_ifru.ifru_ifindex = i32::try_from(index).ok()?;
            if libc::ioctl(fd, libc::SIOCGIFNAME as _, &mut ifr) != 0 {
                return None;
            }
            let (name, escaped) = ifr_name(&ifr);
            if libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut ifr) != 0 {
                return None;
            }
            // SIOCGIFFLAGS returns `(short) dev_get_flags(dev)` (net/core/dev_ioctl.c): the low 16 bits only,
            // so IFF_LOWER_UP (0x10000) and IFF_DORMANT (0x20000) are cut off. See `flags_link`.
            let flags = ifr.ifr_ifru.ifru_flags as u16 as u32;
            let mut link = flags_link(index, name, flags);
            link.name_escaped = escaped;
            Some(link)
        }
    }

    /// `SIOCGIFINDEX` for `name`: its index, `None` when no such interface exists here.
    fn index_of(&self, name: &str) -> Option<u32> {
        use std::os::fd::AsRawFd;
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
            return None;
        }
        // SAFETY: `ifreq` is plain old data; the name is NUL-terminated (zeroed, shorter than IFNAMSIZ).
        unsafe {
            let mut ifr: libc::ifreq = std::mem::zeroed();
            for (d, s) in ifr.ifr_name.iter_mut().zip(bytes) {
                *d = *s as libc::c_char;
            }
            if libc::ioctl(self.sock.as_raw_fd(), libc::SIOCGIFINDEX as _, &mut ifr) != 0 {
                return None;
            }
            u32::try_from(ifr.ifr_ifru.ifru_ifindex).ok()
        }
    }
}

/// Writes one netlink message into `out` (replacing its contents): a `struct nlmsghdr`
/// (include/uapi/linux/netlink.h: length, `kind`, `flags`, `seq`, port id 0 = the kernel; host byte order)
/// and `body` after it at `NLMSG_HDRLEN`. The same bytes as `netlink_packet_core::NetlinkMessage::serialize`
/// after `finalize`, without linking `RouteNetlinkMessage`'s emitters for every message family.
fn encode(out: &mut Vec<u8>, kind: u16, flags: u16, seq: u32, body: &dyn Emitable) {
    let len = NLMSG_HDRLEN + body.buffer_len();
    out.clear();
    out.resize(len, 0);
    out[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
    out[4..6].copy_from_slice(&kind.to_ne_bytes());
    out[6..8].copy_from_slice(&flags.to_ne_bytes());
    out[8..12].copy_from_slice(&seq.to_ne_bytes());
    body.emit(&mut out[NLMSG_HDRLEN..]);
}

/// The NUL-terminated name in `ifr_name`, as [`name_text`] gives it.
fn ifr_name(ifr: &libc::ifreq) -> (String, bool) {
    let bytes: Vec<u8> = ifr
        .ifr_name
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    name_text(&bytes)
}

/// A [`Link`] from the interface flags alone (`SIOCGIFFLAGS`, low 16 bits of `dev_get_flags`,
/// net/core/dev.c): `up` = IFF_UP, `running` = IFF_RUNNING, `loopback` = IFF_LOOPBACK. The rest is derived
/// the way the kernel sets it in the common cases (exact values come from [`Rtnl::link`] for the links the
/// decision looks at closely):
///
/// * `oper_state`: `down` when not up (`rtnl_fill_ifinfo` reports `IF_OPER_DOWN` for a device that is not
///   running); `unknown` for an up loopback (lo has no carrier events, its operstate stays
///   `IF_OPER_UNKNOWN`); `up` when running (IFF_RUNNING is `netif_oper_up`: operstate UP or UNKNOWN; devices
///   without carrier management such as dummy, vxlan or tunnels really say `unknown`); `down` when up but
///   not running (no carrier: `default_operstate`, net/core/link_watch.c; `lowerlayerdown`, `dormant` and
///   `testing` are not told apart).
/// * `lower_up` (IFF_LOWER_UP, cut off by the ioctl): true when running or an up loopback (carrier on),
///   false otherwise (dev_get_flags sets it only for a running device with carrier).
/// * `kind`, `mtu`, `master`, `mac`: unknown (`None`); `link_type`: 772 (ARPHRD_LOOPBACK) for loopback,
///   else 0 (unknown).
fn flags_link(index: u32, name: String, flags: u32) -> Link {
    let up = flags & libc::IFF_UP as u32 != 0;
    let running = flags & libc::IFF_RUNNING as u32 != 0;
    let loopback = flags & libc::IFF_LOOPBACK as u32 != 0;
    let oper_state = match (up, running, loopback) {
        (false, _, _) => "down",
        (true, _, true) => "unknown",
        (true, true, false) => "up",
        (true, false, false) => "down",
    };
    Link {
        index,
        name,
        up,
        running,
        lower_up: running || (up && loopback),
        loopback,
        oper_state: oper_state.into(),
        link_type: if loopback { 772 } else { 0 },
        ..Link::default()
    }
}

/// The network facts the start-up decision needs, read cheaply: the cost grows with the number of addresses
/// (one `RTM_GETADDR` dump), not with a link dump's ~1 KiB per link. Fills the same [`Network`] as
/// [`probe_full`], with these differences:
///
/// 1. `addrs`: the same `RTM_GETADDR` dump (all families), same order.
/// 2. `links`: only the links that own an address — NCCL walks `getifaddrs()` and considers only its
///    `AF_INET`/`AF_INET6` entries (`ncclFindInterfaces`, src/misc/socket.cc), so a link without an address
///    can never be NCCL's interface — plus the output interfaces of default and peer routes and the
///    interfaces named in [`StartNeeds::names`]. Name and flags come from `SIOCGIFNAME`/`SIOCGIFFLAGS`
///    (about 1 µs each, see `flags_link` for what is derived); links with a usable address (not
///    link-local, not loopback) and the output interfaces of default routes and peer lookups — normally 1 to
///    3 — get their details (`kind`, `mtu`, `master`, `mac`, `link_type`, exact `oper_state` and
///    `lower_up`) from one `RTM_GETLINK` request by index each. Ascending index order, as in the full probe.
/// 3. `routes`: IPv4 routes of table main always (a small dump). IPv6 routes only when the decision can
///    reach them (`decide::interface`: IPv6 default routes are consulted only when no IPv4 default route
///    gives a candidate): when no IPv4 unicast default route has a path that is not link-down through a
///    RUNNING, non-loopback, non-excluded link with a usable IPv4 address; or when a peer address is IPv6;
///    or when [`StartNeeds::ipv6_family`]. [`Network::ipv6_routes_probed`] records which.
/// 4. `peer_routes`: as in the full probe (one `RTM_GETROUTE` lookup per peer address).
/// 5. `default_lookups`: one `RTM_GETROUTE` lookup of an off-link IPv4 destination ([`offlink_dest`]), and
///    of an IPv6 one when the IPv6 routes are read: the policy-routing answer of the default-route step. A
///    default route that lives in another table than main (`ip rule … lookup 300`) also settles the
///    interface, so the IPv6 routes are not read then either.
///
/// One blocking `NETLINK_ROUTE` socket, no runtime. Errors as [`probe_full`]. Never panics on kernel data.
///
/// **Addresses still in duplicate-address detection** (#26): when an IPv6 address the decision needs is
/// tentative (the only address of the peer's family on the interface the route to the master leaves
/// through, or, with no usable address anywhere, any global one), the probe is repeated every 50 ms until
/// DAD has ended, bounded by that interface's own DAD time ([`dad_time`]); the decision then sees the
/// address as it is (usable, `dadfailed`, or still tentative: `address-tentative`).
pub fn probe_start(peer_addrs: &[IpAddr], needs: &StartNeeds) -> Result<Network, String> {
    let started = std::time::Instant::now();
    loop {
        let snap = probe_start_once(peer_addrs, needs)?;
        let pending = dad_pending(&snap, peer_addrs);
        let bound = pending.iter().map(|n| dad_time(n)).max();
        match bound {
            Some(b) if started.elapsed() < b => {
                std::thread::sleep(std::time::Duration::from_millis(50))
            }
            _ => return Ok(snap),
        }
    }
}

/// The interfaces whose tentative IPv6 addresses the decision waits for: each interface a peer lookup
/// leaves through that holds a tentative, non-link-local address of the peer's family and no usable one of
/// it; and, when no RUNNING non-loopback interface has a usable address, every such interface holding a
/// tentative non-link-local address. Names in index order, without repeats.
fn dad_pending(net: &Network, peer_addrs: &[IpAddr]) -> Vec<String> {
    let waits = |index: u32, fam: Option<Family>| {
        let of = |a: &&Addr| a.index == index && fam.is_none_or(|f| a.family() == f);
        net.addrs
            .iter()
            .filter(of)
            .any(|a| a.tentative && !a.dad_failed && !a.is_link_local())
            && !net.addrs.iter().filter(of).any(Addr::usable)
    };
    let live = |l: &&Link| l.running && !l.loopback && !l.name_escaped;
    let mut out: Vec<u32> = net
        .peer_routes
        .iter()
        .filter(|r| peer_addrs.contains(&r.dest) && !r.local)
        .filter_map(|r| r.oif.map(|o| (o, Family::of(&r.dest))))
        .filter(|(o, f)| waits(*o, Some(*f)))
        .map(|(o, _)| o)
        .collect();
    let any_usable = net
        .links
        .iter()
        .filter(live)
        .any(|l| net.addrs.iter().any(|a| a.index == l.index && a.usable()));
    if !any_usable {
        out.extend(
            net.links
                .iter()
                .filter(live)
                .filter(|l| waits(l.index, None))
                .map(|l| l.index),
        );
    }
    out.sort_unstable();
    out.dedup();
    out.iter()
        .filter_map(|i| net.links.iter().find(|l| l.index == *i))
        .filter(live)
        .map(|l| l.name.clone())
        .collect()
}

/// How long duplicate-address detection can take on interface `name`, from its own settings: the random
/// delay before the first probe (below `conf/NAME/router_solicitation_delay` seconds, `addrconf_dad_kick`,
/// net/ipv6/addrconf.c), then `conf/NAME/dad_transmits` probes `neigh/NAME/retrans_time_ms` apart (under
/// `/proc/sys/net/ipv6/`), plus a 250 ms margin; at most 10 s. Defaults (1 s, 1, 1000 ms) where a
/// file cannot be read.
pub fn dad_time(name: &str) -> std::time::Duration {
    let read = |key: &str, default: u64| -> u64 {
        std::fs::read_to_string(format!("/proc/sys/net/ipv6/{key}"))
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .map_or(default, |v| u64::try_from(v).unwrap_or(0))
    };
    let delay_ms = read(&format!("conf/{name}/router_solicitation_delay"), 1).saturating_mul(1000);
    let probes_ms = read(&format!("conf/{name}/dad_transmits"), 1)
        .saturating_mul(read(&format!("neigh/{name}/retrans_time_ms"), 1000));
    let ms = delay_ms
        .saturating_add(probes_ms)
        .saturating_add(250)
        .min(10_000);
    std::time::Duration::from_millis(ms)
}

/// One pass of [`probe_start`] (see there), without waiting for duplicate-address detection.
fn probe_start_once(peer_addrs: &[IpAddr], needs: &StartNeeds) -> Result<Network, String> {
    let mut nl = Rtnl::new()?;
    let mut snap = Network::default();

    addr_dump(&mut nl, &mut snap.addrs)?;

    // Links owning an address: name and flags by ioctl. Kept sorted by index.
    let mut links: Vec<Link> = Vec::new();
    for a in &snap.addrs {
        if let Err(at) = links.binary_search_by_key(&a.index, |l| l.index) {
            if let Some(l) = nl.ioctl_link(a.index) {
                links.insert(at, l);
            }
        }
    }
    for name in needs.names {
        if links.iter().any(|l| &l.name == name) {
            continue;
        }
        if let Some(index) = nl.index_of(name) {
            if let Err(at) = links.binary_search_by_key(&index, |l| l.index) {
                if let Some(l) = nl.ioctl_link(index) {
                    links.insert(at, l);
                }
            }
        }
    }

    // Loopback without an address (down, or never brought up): the decision must still know it is there
    // and down. It is interface 1 in every network namespace (the first device registered,
    // net/core/dev.c); one ioctl pair, only on a start where lo owns no address.
    if !links.iter().any(|l| l.loopback) {
        if let Some(lo) = nl.ioctl_link(1).filter(|l| l.loopback) {
            links.insert(0, lo);
        }
    }

    route_dump(&mut nl, AddressFamily::Inet, &mut snap.routes)?;
    let v4 = nl.route_get(offlink_dest(Family::Inet, &snap.routes, &snap.addrs));
    snap.ipv6_routes_probed = needs.ipv6_family
        || peer_addrs.iter().any(IpAddr::is_ipv6)
        || !(ipv4_default_decides(&snap.routes, &links, &snap.addrs, needs.exclude)
            || policy_default_decides(&v4, &links, &snap.addrs, needs.exclude));
    snap.default_lookups.push(v4);
    if snap.ipv6_routes_probed {
        append_ipv6_routes(&mut nl, &mut snap.routes)?;
        let v6 = offlink_dest(Family::Inet6, &snap.routes, &snap.addrs);
        snap.default_lookups.push(nl.route_get(v6));
    }
    snap.peer_routes = peer_lookups(&mut nl, peer_addrs);

    // Details for the links the decision looks at closely.
    let mut detail: Vec<u32> = snap
        .addrs
        .iter()
        .filter(|a| !a.is_link_local() && !a.is_loopback())
        .map(|a| a.index)
        .chain(
            snap.routes
                .iter()
                .filter(|r| r.is_default())
                .flat_map(|r| r.paths())
                .map(|p| p.oif),
        )
        .chain(snap.peer_routes.iter().filter_map(|r| r.oif))
        .chain(snap.default_lookups.iter().filter_map(|r| r.oif))
        .collect();
    detail.sort_unstable();
    detail.dedup();
    for index in detail {
        if let Some(l) = nl.link(index)? {
            match links.binary_search_by_key(&index, |l| l.index) {
                Ok(at) => links[at] = l,
                Err(at) => links.insert(at, l),
            }
        }
    }
    snap.links = links;
    drop_plain_labels(&mut snap);
    Ok(snap)
}

/// True when an IPv4 default route settles the interface, so that the decision never reads IPv6 routes: a
/// unicast default route of table main with a path that is not link-down through a usable IPv4 link
/// ([`usable_v4_link`]). Mirrors the candidate test of `decide::interface` (`Net::candidate`).
fn ipv4_default_decides(
    routes: &[Route],
    links: &[Link],
    addrs: &[Addr],
    exclude: &[String],
) -> bool {
    routes
        .iter()
        .filter(|r| r.family == Family::Inet && r.is_default() && r.kind == 1)
        .flat_map(|r| r.paths())
        .filter(|p| !p.linkdown)
        .any(|p| usable_v4_link(p.oif, links, addrs, exclude))
}

/// True when the kernel's IPv4 lookup of an off-link destination came from a table other than main (an
/// `ip rule` steered it) through a usable IPv4 link: `decide::interface` then takes that interface.
fn policy_default_decides(
    lookup: &RouteLookup,
    links: &[Link],
    addrs: &[Addr],
    exclude: &[String],
) -> bool {
    lookup.error.is_none()
        && !lookup.local
        && lookup
            .table
            .is_some_and(|t| t != u32::from(RouteHeader::RT_TABLE_MAIN))
        && lookup
            .oif
            .is_some_and(|oif| usable_v4_link(oif, links, addrs, exclude))
}

/// A candidate link ([`Link::is_candidate`]: RUNNING, non-loopback, outside `exclude`) with a usable IPv4
/// address ([`Addr::usable`]).
fn usable_v4_link(oif: u32, links: &[Link], addrs: &[Addr], exclude: &[String]) -> bool {
    links.iter().any(|l| {
        l.index == oif
            && l.is_candidate(exclude)
            && addrs
                .iter()
                .any(|a| a.index == l.index && a.family() == Family::Inet && a.usable())
    })
}

/// Generated cases of each netlink parser property test (docs/reliability.md).
#[cfg(test)]
pub(crate) const PROPTEST_NETLINK_CASES: u32 = 3000;

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

    /// The hand-written requests are byte for byte what `NetlinkMessage<RouteNetlinkMessage>` would send.
    #[test]
    fn requests_encode_like_netlink_message() {
        use netlink_packet_core::NetlinkMessage;
        use netlink_packet_route::link::LinkMessage;
        use netlink_packet_route::link::{LinkAttribute, LinkExtentMask};
        use netlink_packet_route::RouteNetlinkMessage as M;
        let link_request = |index| {
            let mut m = LinkMessage::default();
            m.header.index = index;
            m.attributes
                .push(LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats]));
            M::GetLink(m)
        };
        let cases = [
            (
                libc::RTM_GETLINK,
                link_request(0),
                NLM_F_REQUEST | NLM_F_DUMP,
            ),
            (libc::RTM_GETLINK, link_request(7), NLM_F_REQUEST),
            (libc::RTM_GETLINK, link_request(0x0102_0304), NLM_F_REQUEST),
            (
                libc::RTM_GETADDR,
                M::GetAddress(AddressMessage::default()),
                NLM_F_REQUEST | NLM_F_DUMP,
            ),
            (
                libc::RTM_GETROUTE,
                M::GetRoute(route_get_request("10.1.2.3".parse().unwrap())),
                NLM_F_REQUEST,
            ),
            (
                libc::RTM_GETROUTE,
                M::GetRoute(route_get_request("fd00::1".parse().unwrap())),
                NLM_F_REQUEST,
            ),
        ];
        for (seq, (kind, msg, flags)) in cases.into_iter().enumerate() {
            let mut ours = Vec::new();
            match &msg {
                M::GetLink(m) => {
                    let index = m.header.index;
                    encode(&mut ours, kind, flags, seq as u32, &LinkRequest { index })
                }
                M::GetAddress(m) => encode(&mut ours, kind, flags, seq as u32, m),
                M::GetRoute(m) => encode(&mut ours, kind, flags, seq as u32, m),
                _ => unreachable!(),
            }
            let mut theirs = NetlinkMessage::from(msg);
            theirs.header.flags = flags;
            theirs.header.sequence_number = seq as u32;
            theirs.finalize();
            let mut bytes = vec![0; theirs.buffer_len()];
            theirs.serialize(&mut bytes);
            assert_eq!(ours, bytes, "request {seq}");
        }
    }

    /// One netlink attribute: `struct nlattr` (length, kind) and the value, padded to 4 bytes.
    fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(value);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    fn ifinfomsg(index: u32, flags: u32) -> Vec<u8> {
        let mut v = vec![0u8, 0];
        v.extend_from_slice(&1u16.to_ne_bytes());
        v.extend_from_slice(&index.to_ne_bytes());
        v.extend_from_slice(&flags.to_ne_bytes());
        v.extend_from_slice(&0u32.to_ne_bytes());
        v
    }

    #[test]
    fn names_and_labels_that_are_not_utf8_keep_the_link_and_the_address() {
        let mut p = ifinfomsg(7, 0x41); // IFF_UP | IFF_RUNNING
        p.extend(nla(IFLA_IFNAME, b"\xff\xfe\0"));
        p.extend(nla(4, &1500u32.to_ne_bytes()));
        p.extend(nla(20, b"\xff alias\0")); // IFLA_IFALIAS, not UTF-8: the crate would reject the message
        let mut info = nla(IFLA_INFO_KIND, b"veth\0");
        info.extend(nla(2, b"\x01")); // IFLA_INFO_DATA the crate cannot read
        p.extend(nla(IFLA_LINKINFO, &info));
        let l = link_from(&p).expect("link");
        assert_eq!(
            (l.index, l.name.as_str(), l.name_escaped),
            (7, "\\xff\\xfe", true)
        );
        assert_eq!(
            (l.mtu, l.kind.as_deref(), l.running),
            (Some(1500), Some("veth"), true)
        );

        let mut a = vec![2u8, 24, 0, 0];
        a.extend_from_slice(&7u32.to_ne_bytes());
        a.extend(nla(2, &[10, 9, 0, 2])); // IFA_LOCAL
        a.extend(nla(3, b"eth0\xff\0")); // IFA_LABEL
        let addr = address_message(&a).and_then(addr_from).expect("address");
        assert_eq!(
            (addr.index, addr.addr.to_string()),
            (7, "10.9.0.2".to_string())
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(PROPTEST_NETLINK_CASES))]

        /// Any bytes: the parsers never panic, and a payload long enough for its header always gives a
        /// link, an address message and a route message.
        #[test]
        fn any_bytes_never_panic(p in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            let l = link_from(&p);
            proptest::prop_assert_eq!(l.is_some(), p.len() >= IFINFOMSG_LEN);
            proptest::prop_assert_eq!(address_message(&p).is_some(), p.len() >= IFADDRMSG_LEN);
            let r = route_message(&p);
            proptest::prop_assert_eq!(r.is_some(), p.len() >= RTMSG_LEN);
            if let Some(m) = address_message(&p) { let _ = addr_from(m); }
            if let Some(m) = r {
                let _ = route_from(m.clone());
                let mut lk = empty_lookup(IpAddr::V4(Ipv4Addr::LOCALHOST));
                fill_lookup(&mut lk, m);
            }
        }

        /// A link with any name bytes and any other attributes is kept with its index, and its name is the
        /// name (UTF-8) or its escaped form.
        #[test]
        fn a_link_is_never_dropped_for_its_attributes(
            index in 1u32..100_000,
            name in proptest::collection::vec(1u8..=255, 1..16),
            other in proptest::collection::vec(
                (0u16..64, proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24)), 0..8),
        ) {
            let mut p = ifinfomsg(index, 0);
            for (k, v) in &other {
                if *k != IFLA_IFNAME {
                    p.extend(nla(*k, v));
                }
            }
            let mut n = name.clone();
            n.push(0);
            p.extend(nla(IFLA_IFNAME, &n));
            let l = link_from(&p).expect("link");
            proptest::prop_assert_eq!(l.index, index);
            match std::str::from_utf8(&name) {
                Ok(s) => proptest::prop_assert!(l.name == s && !l.name_escaped),
                Err(_) => proptest::prop_assert!(l.name == crate::text::bytes_text(&name) && l.name_escaped),
            }
        }

        /// An IPv4 address with any label and other attributes is kept with its index and address.
        #[test]
        fn an_address_is_never_dropped_for_its_attributes(
            index in 1u32..100_000,
            ip in proptest::prelude::any::<[u8; 4]>(),
            label in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..20),
            other in proptest::collection::vec(
                (3u16..64, proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24)), 0..8),
        ) {
            let mut a = vec![2u8, 24, 0, 0];
            a.extend_from_slice(&index.to_ne_bytes());
            a.extend(nla(3, &label));
            for (k, v) in &other {
                if *k != 8 {
                    a.extend(nla(*k, v));
                }
            }
            a.extend(nla(2, &ip));
            let got = address_message(&a).and_then(addr_from).expect("address");
            proptest::prop_assert_eq!(got.index, index);
            proptest::prop_assert_eq!(got.addr, IpAddr::V4(Ipv4Addr::from(ip)));
        }
    }

    fn libc_enetunreach() -> i32 {
        nix::errno::Errno::ENETUNREACH as i32
    }
}
