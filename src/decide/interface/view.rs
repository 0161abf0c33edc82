//! [`NetworkView`]: the network snapshot indexed once (links, usable addresses, the links where the job's
//! peer makes an IPv4 link-local address usable, the uplinks), and the questions every step asks of it: is
//! this link a candidate, why not, which `NCCL_SOCKET_IFNAME` value names it.

use crate::nccl_rules::{self, Era};
use crate::snapshot::{is_link_local_ip, Addr, Family, Link, Network, Snapshot};
use std::collections::HashMap;
use std::net::IpAddr;

/// Read-only helpers over the network snapshot, with links and usable addresses indexed once (the cost
/// stays linear in interfaces and addresses: a host can have thousands of veths).
pub(super) struct NetworkView<'a> {
    pub(super) net: &'a Network,
    pub(super) exclude: &'a [String],
    links: HashMap<u32, &'a Link>,
    /// Usable addresses per link index, IPv4 before IPv6, kernel order within a family.
    usable: HashMap<u32, Vec<&'a Addr>>,
    /// The first IPv4 link-local address per link index (not tentative or DAD-failed).
    ll4: HashMap<u32, &'a Addr>,
    /// Links on which an IPv4 link-local address is usable: the kernel's route to a link-local (169.254/16)
    /// peer leaves through them with no gateway (the peer is on that link, F16), or the peer is this host's
    /// own link-local address there. Filled by [`NetworkView::for_job`].
    ll_ok: Vec<u32>,
    /// Output interfaces of the default routes of table main and of the kernel's off-link lookups: the
    /// uplinks (a bridge among them carries the host's own traffic; it is no container bridge).
    uplinks: Vec<u32>,
    /// Output interfaces of the kernel's routes to the peer (lookups that succeeded, not `local`): an
    /// interface the master is reached through is never one "another node cannot reach" (#26, item 8).
    peer_links: Vec<u32>,
}

impl<'a> NetworkView<'a> {
    pub(super) fn new(net: &'a Network, exclude: &'a [String]) -> NetworkView<'a> {
        let links = net.links.iter().map(|l| (l.index, l)).collect();
        let mut usable: HashMap<u32, Vec<&'a Addr>> = HashMap::new();
        for a in net.addrs.iter().filter(|a| a.usable()) {
            usable.entry(a.index).or_default().push(a);
        }
        // A deprecated address is usable but ranks after a preferred one of its family on the same link
        // (the kernel's source selection prefers a preferred address, RFC 6724 rule 3; #26, item 7).
        for addrs in usable.values_mut() {
            addrs.sort_by_key(|a| (a.family(), a.deprecated));
        }
        let mut ll4: HashMap<u32, &'a Addr> = HashMap::new();
        for a in net.addrs.iter().filter(|a| a.usable_link_local_v4()) {
            ll4.entry(a.index).or_insert(a);
        }
        let uplinks = net
            .routes
            .iter()
            .filter(|r| r.is_default())
            .flat_map(|r| r.paths())
            .map(|p| p.oif)
            .chain(
                net.default_lookups
                    .iter()
                    .filter(|l| l.error.is_none() && !l.local)
                    .filter_map(|l| l.oif),
            )
            .collect();
        NetworkView {
            net,
            exclude,
            links,
            usable,
            ll4,
            ll_ok: Vec::new(),
            uplinks,
            peer_links: Vec::new(),
        }
    }
    /// The links where the job's peer makes an IPv4 link-local address usable (see [`NetworkView::ll_ok`]).
    pub(super) fn for_job(mut self, snap: &Snapshot) -> NetworkView<'a> {
        if snap.peer.as_ref().is_some_and(|p| !p.addrs.is_empty()) {
            for l in self.net.peer_routes.iter().filter(|l| l.error.is_none()) {
                if let (false, Some(oif)) = (l.local, l.oif) {
                    self.peer_links.push(oif);
                }
                // Only a link-local master makes a link-local address usable (F16): a master at a routable
                // address on the same link cannot be answered from 169.254/16 (a label such as
                // `eno1:avahi` beside `eno1`'s own address, #26).
                if !(l.dest.is_ipv4() && is_link_local_ip(&l.dest)) {
                    continue;
                }
                if l.local {
                    if let Some(a) = self.net.addrs.iter().find(|a| a.addr == l.dest) {
                        self.ll_ok.push(a.index);
                    }
                } else if let (Some(oif), None) = (l.oif, l.gateway) {
                    self.ll_ok.push(oif);
                }
            }
        }
        self
    }
    /// A candidate for the route to the peer: [`NetworkView::candidate`], or, on a link where the peer makes it
    /// usable ([`NetworkView::ll_ok`]), a RUNNING, non-loopback, non-excluded link's IPv4 link-local address.
    pub(super) fn candidate_for_peer(
        &self,
        link: &Link,
        family: Option<Family>,
    ) -> Option<&'a Addr> {
        self.candidate(link, family).or_else(|| {
            if family == Some(Family::Inet6)
                || !self.ll_ok.contains(&link.index)
                || !link.is_candidate(self.exclude)
            {
                return None;
            }
            self.ll4.get(&link.index).copied()
        })
    }
    /// True when an address NCCL would use on the link `index` is fine although link-local: IPv4 on a link
    /// where the peer is ([`NetworkView::ll_ok`]). By index: NCCL's name for an address may be a label.
    pub(super) fn link_local_ok(&self, index: u32, addr: &IpAddr) -> bool {
        addr.is_ipv4() && self.ll_ok.contains(&index)
    }
    /// A container or virtualisation bridge that is not an uplink ([`NetworkView::uplinks`]) and that the
    /// route to the master does not leave through ([`NetworkView::peer_links`]): a host's `br0` that carries
    /// the default route is the host's own network, and an overlay (`flannel.1`) that reaches the master
    /// reaches it.
    pub(super) fn container_bridge(&self, link: &Link) -> bool {
        link.is_bridge_like()
            && !self.uplinks.contains(&link.index)
            && !self.peer_links.contains(&link.index)
    }
    pub(super) fn link(&self, index: u32) -> Option<&'a Link> {
        self.links.get(&index).copied()
    }
    pub(super) fn link_by_name(&self, name: &str) -> Option<&'a Link> {
        self.net.links.iter().find(|l| l.name == name)
    }
    /// The first usable address of `link` in the allowed family (IPv4 before IPv6 when `family` is `None`).
    fn usable_addr(&self, link: &Link, family: Option<Family>) -> Option<&'a Addr> {
        self.usable
            .get(&link.index)?
            .iter()
            .find(|a| family.is_none_or(|f| a.family() == f))
            .copied()
    }
    /// A candidate: [`Link::is_candidate`] with a usable address ([`Addr::usable`]) of the family.
    pub(super) fn candidate(&self, link: &Link, family: Option<Family>) -> Option<&'a Addr> {
        if !link.is_candidate(self.exclude) {
            return None;
        }
        self.usable_addr(link, family)
    }
    /// Why `link` is not a candidate, in words.
    pub(super) fn why_not(&self, link: &Link, family: Option<Family>) -> String {
        if self.exclude.iter().any(|e| e == &link.name) {
            "it is in NCCLENV_EXCLUDE".into()
        } else if link.loopback {
            "it is the loopback interface".into()
        } else if !link.running {
            format!("it is not RUNNING (state {}, no carrier)", link.oper_state)
        } else if self.usable_addr(link, family).is_none() {
            "it has no usable address (only link-local, tentative or none)".into()
        } else {
            "unknown".into()
        }
    }
    pub(super) fn candidates(&self, family: Option<Family>) -> Vec<(&'a Link, &'a Addr)> {
        self.net
            .links
            .iter()
            .filter_map(|l| self.candidate(l, family).map(|a| (l, a)))
            .collect()
    }
    /// `NCCL_SOCKET_IFNAME` for `name`: the plain name, or `=name` when the plain name would also
    /// prefix-match another interface present (`matchIf`, src/misc/utils.cc).
    pub(super) fn nccl_value(&self, name: &str) -> String {
        if self
            .net
            .links
            .iter()
            .any(|l| l.name != name && l.name.starts_with(name))
        {
            format!("={name}")
        } else {
            name.to_string()
        }
    }
    /// The `NCCL_SOCKET_IFNAME` that makes NCCL bootstrap on `addr` of `link` (#26): NCCL's name for the
    /// address is its label when it has one ([`Addr::label`], `nccl_rules::ifaddrs`), and a plain prefix
    /// may match a label first (`eno1` matches `eno1:avahi`). Tried in order, each checked with NCCL's own
    /// model (`nccl_rules::nccl_pick` with `family`, the family the command will have, and `era`): the
    /// plain name when nothing else starts with it, `=name`; for a label (a name with `:`, which NCCL's
    /// list syntax reads as a port, `parseStringList` in src/misc/utils.cc, so it cannot be written) `^=`
    /// and every other NCCL name, then the link's name as a prefix. The first value whose first match is
    /// that name and address wins; when none does (or without an address), [`NetworkView::nccl_value`].
    pub(super) fn nccl_value_for(
        &self,
        link: &Link,
        addr: Option<&Addr>,
        family: Option<Family>,
        era: Era,
    ) -> String {
        let Some(a) = addr else {
            return self.nccl_value(&link.name);
        };
        let entries = nccl_rules::ifaddrs(self.net);
        let name = a.label.clone().unwrap_or_else(|| link.name.clone());
        let mut names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        names.extend(self.net.links.iter().map(|l| l.name.as_str()));
        names.sort_unstable();
        names.dedup();
        let mut tries: Vec<String> = Vec::new();
        if !name.contains(':') {
            if !names
                .iter()
                .any(|n| *n != name && n.starts_with(name.as_str()))
            {
                tries.push(name.clone());
            }
            tries.push(format!("={name}"));
        } else {
            let others: Vec<&str> = entries
                .iter()
                .map(|e| e.name.as_str())
                .filter(|n| *n != name)
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            if !others.is_empty()
                && others.len() <= nccl_rules::MAX_IFS
                && others.iter().all(|n| !n.contains(':') && !n.contains(','))
            {
                tries.push(format!("^={}", others.join(",")));
            }
            tries.push(link.name.clone());
        }
        let fam = family.or(Some(a.family()));
        tries
            .into_iter()
            .find(|t| {
                nccl_rules::nccl_pick(self.net, Some(t), fam, era)
                    .found
                    .first()
                    .is_some_and(|f| f.name == name && f.addr == a.addr)
            })
            .unwrap_or_else(|| self.nccl_value(&link.name))
    }
    pub(super) fn usable_list(&self, family: Option<Family>) -> String {
        let c = self.candidates(family);
        if c.is_empty() {
            "none but lo".into()
        } else {
            c.iter()
                .map(|(l, a)| format!("{} ({})", l.name, a.addr))
                .collect::<Vec<_>>()
                .join(", ")
        }
    }
}
