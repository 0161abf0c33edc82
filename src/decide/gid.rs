//! The GID index of a RoCE port: which entry of the port's GID table NCCL uses, and whether an inherited
//! `NCCL_IB_GID_INDEX` points at one that works here. Pure: reads the GID table the probe copied from sysfs
//! (`ports/<n>/gids/<i>`, `gid_attrs/types/<i>`, `gid_attrs/ndevs/<i>`).
//!
//! NCCL's own selection (`ncclIbGetGidIndex` with `ncclUpdateGidIndex`, `getGidAddrFamily`, `validGid`,
//! `ncclIbRoceGetVersionNum`, `matchGidAddrPrefix`; src/transport/net_ib.cc in 2.21.5, src/transport/net_ib/
//! connect.cc in 2.30.7) runs only for RoCE (Ethernet link layer) ports, and only when `NCCL_IB_GID_INDEX` is
//! negative (its default, -1, since 2.21; before 2.21 the default was 0). It starts at index 0 and walks the
//! table once: a candidate of the wanted address family (`NCCL_IB_ADDR_FAMILY`, default `AF_INET`, i.e. an
//! IPv4-mapped GID `::ffff:a.b.c.d`) replaces a current entry of the other family; a valid candidate (neither
//! empty nor link-local `fe80::/64`) of the wanted family replaces the current one when their RoCE versions
//! differ (or the current is not valid) and the candidate has the wanted version (`NCCL_IB_ROCE_VERSION_NUM`,
//! default 2). `NCCL_IB_ADDR_RANGE` (`addr/len`) restricts candidates to a prefix. It never looks at the
//! netdev a GID belongs to.
//!
//! A forced index (`NCCL_IB_GID_INDEX` ≥ 0) is used as is. One that names an empty slot, a RoCE v1 entry or a
//! GID whose netdev is not in this network namespace fails when the queue pair is connected
//! (`Call to ibv_modify_qp failed`; NVIDIA/nccl#718, #551, #925), and NCCL's own hint then says to set
//! `NCCL_IB_GID_INDEX=-1` (src/misc/ibvwrap.cc, `wrap_ibv_modify_qp`, 2.30.7).

use crate::nccl_rules::effective;
use crate::nccl_rules::param_value;
use crate::snapshot::{Family, RdmaGid, RdmaPort, Snapshot};
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv6Addr};

/// What NCCL's GID selection is told by the environment (`NCCL_IB_ADDR_FAMILY`, `NCCL_IB_ROCE_VERSION_NUM`,
/// `NCCL_IB_ADDR_RANGE`), with NCCL's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidPrefs {
    /// Wanted address family: `AF_INET` (IPv4-mapped GIDs) unless `NCCL_IB_ADDR_FAMILY=AF_INET6`
    /// (`envIbAddrFamily`: any other value keeps `AF_INET`).
    pub family: Family,
    /// Wanted RoCE version (`NCCL_IB_ROCE_VERSION_NUM`, default 2).
    pub roce_version: i64,
    /// `NCCL_IB_ADDR_RANGE` as (prefix address, length), when valid for the family (`envIbAddrRange`).
    pub range: Option<(IpAddr, u8)>,
}

impl Default for GidPrefs {
    fn default() -> Self {
        GidPrefs {
            family: Family::Inet,
            roce_version: 2,
            range: None,
        }
    }
}

/// Read [`GidPrefs`] from the variables NCCL sees (environment first, then its config files).
pub fn gid_prefs(snap: &Snapshot) -> GidPrefs {
    let get = |n: &str| effective(n, &snap.env, &snap.conf_files).map(|(v, _)| v);
    let family = match get("NCCL_IB_ADDR_FAMILY") {
        Some("AF_INET6") => Family::Inet6,
        _ => Family::Inet,
    };
    let roce_version = get("NCCL_IB_ROCE_VERSION_NUM")
        .and_then(param_value)
        .unwrap_or(2);
    let range = get("NCCL_IB_ADDR_RANGE").and_then(|v| {
        let (a, m) = v.split_once('/')?;
        let addr: IpAddr = match family {
            Family::Inet => IpAddr::V4(a.parse().ok()?),
            Family::Inet6 => IpAddr::V6(a.parse().ok()?),
        };
        let len = param_value(m).unwrap_or(0);
        let max = if family == Family::Inet { 32 } else { 128 };
        (0..=max).contains(&len).then_some((addr, len as u8))
    });
    GidPrefs {
        family,
        roce_version,
        range,
    }
}

/// True for a RoCE port (Ethernet link layer), the only kind NCCL picks a GID index for.
pub fn is_roce(p: &RdmaPort) -> bool {
    p.link_layer.eq_ignore_ascii_case("ethernet")
}

/// The GID as an IPv6 address (sysfs writes it as eight groups of four hex digits).
pub fn gid_addr(g: &RdmaGid) -> Option<Ipv6Addr> {
    g.gid.parse().ok()
}

/// `getGidAddrFamily`: IPv4 for an IPv4-mapped GID (`::ffff:a.b.c.d`) or its multicast form
/// (`ff0e::ffff:a.b.c.d`), else IPv6 (an empty slot included).
fn family_of(a: &Ipv6Addr) -> Family {
    let s = a.segments();
    let mapped = s[..5] == [0, 0, 0, 0, 0] && s[5] == 0xffff;
    let mapped_mc = s[..5] == [0xff0e, 0, 0, 0, 0] && s[5] == 0xffff;
    if mapped || mapped_mc {
        Family::Inet
    } else {
        Family::Inet6
    }
}

/// `validGid`: neither empty nor link-local (`fe80::/64`, and NCCL's "unconfigured" `fe80::` with nothing
/// after it).
fn valid(a: &Ipv6Addr) -> bool {
    let s = a.segments();
    let link_local = s[0] == 0xfe80 && s[1..4] == [0, 0, 0];
    !(a.is_unspecified() || link_local)
}

/// `ncclIbRoceGetVersionNum`: 1 for `IB/RoCE v1` and `RoCE v1`, 2 for `RoCE v2`, `None` when unknown.
fn roce_version(g: Option<&RdmaGid>) -> Option<i64> {
    let k = g?.kind.as_deref()?;
    if k.starts_with("IB/RoCE v1") || k.starts_with("RoCE v1") {
        Some(1)
    } else if k.starts_with("RoCE v2") {
        Some(2)
    } else {
        None
    }
}

/// `matchGidAddrPrefix`: an IPv4 range compares the GID's last 32 bits; an IPv6 range its leading bits.
fn in_range(a: &Ipv6Addr, range: Option<(IpAddr, u8)>) -> bool {
    match range {
        None => true,
        Some((IpAddr::V4(net), len)) => {
            let o = a.octets();
            let low = IpAddr::from([o[12], o[13], o[14], o[15]]);
            crate::snapshot::prefix_contains(&IpAddr::V4(net), len, &low)
        }
        Some((net @ IpAddr::V6(_), len)) => {
            crate::snapshot::prefix_contains(&net, len, &IpAddr::V6(*a))
        }
    }
}

/// The entry at `index` (empty slots are not recorded by the probe).
fn entry(p: &RdmaPort, index: u32) -> Option<&RdmaGid> {
    p.gids.iter().find(|g| g.index == index)
}

fn addr_at(p: &RdmaPort, index: u32) -> Ipv6Addr {
    entry(p, index)
        .and_then(gid_addr)
        .unwrap_or(Ipv6Addr::UNSPECIFIED)
}

/// The GID index NCCL ≥ 2.21 picks by itself for a RoCE port (`NCCL_IB_GID_INDEX` unset or negative), walking
/// the table as `ncclIbGetGidIndex` does (see the module docs). `None` for an InfiniBand port (no GID index is
/// chosen there) or a port without a GID table.
pub fn nccl_auto_index(port: &RdmaPort, prefs: &GidPrefs) -> Option<u32> {
    if !is_roce(port) {
        return None;
    }
    let len = port
        .gid_tbl_len
        .max(port.gids.iter().map(|g| g.index + 1).max().unwrap_or(0));
    if len == 0 {
        return None;
    }
    let mut cur: u32 = 0;
    for cand in 1..len {
        let g = addr_at(port, cur);
        let c = addr_at(port, cand);
        let (gf, cf) = (family_of(&g), family_of(&c));
        let matches = in_range(&c, prefs.range);
        if cf != gf && cf == prefs.family && matches {
            cur = cand;
            continue;
        }
        if cf != prefs.family || !valid(&c) || !matches {
            continue;
        }
        let (gv, cv) = (
            roce_version(entry(port, cur)),
            roce_version(entry(port, cand)),
        );
        if (gv != cv || !valid(&g)) && cv == Some(prefs.roce_version) {
            cur = cand;
        }
    }
    Some(cur)
}

/// Why the GID at `index` does not work on this port, or `None` when it does: beyond the table, an empty
/// slot, not RoCE v2 (NCCL's default version), or bound to a netdev that is not in this network namespace
/// (`links`, when known).
pub fn index_problem(p: &RdmaPort, index: i64, links: Option<&BTreeSet<&str>>) -> Option<String> {
    let len = i64::from(p.gid_tbl_len);
    if p.gid_tbl_len > 0 && index >= len {
        return Some(format!(
            "index {index} is beyond the GID table ({len} entries)"
        ));
    }
    let Some(g) = u32::try_from(index).ok().and_then(|i| entry(p, i)) else {
        return Some(format!("GID slot {index} is empty"));
    };
    match roce_version(Some(g)) {
        Some(2) => {}
        Some(v) => return Some(format!("GID {index} is RoCE v{v}, not RoCE v2")),
        None => {
            if let Some(k) = &g.kind {
                return Some(format!("GID {index} is of type {k:?}, not RoCE v2"));
            }
        }
    }
    if let (Some(links), Some(n)) = (links, g.ndev.as_deref()) {
        if !links.contains(n) {
            return Some(format!(
                "GID {index} belongs to netdev {n}, which is not in this network namespace"
            ));
        }
    }
    None
}

/// The index that works here, preferring what NCCL prefers: NCCL's own pick when it works
/// ([`nccl_auto_index`]), else the lowest valid (not link-local) RoCE v2 GID whose netdev is here, of the
/// wanted family (IPv4-mapped by default) first. `None` when no entry works.
pub fn best_index(p: &RdmaPort, prefs: &GidPrefs, links: Option<&BTreeSet<&str>>) -> Option<u32> {
    if let Some(i) = nccl_auto_index(p, prefs) {
        if index_problem(p, i64::from(i), links).is_none()
            && entry(p, i).and_then(gid_addr).is_some_and(|a| valid(&a))
        {
            return Some(i);
        }
    }
    let works = |g: &&RdmaGid| {
        gid_addr(g).is_some_and(|a| valid(&a))
            && index_problem(p, i64::from(g.index), links).is_none()
    };
    let wanted = |g: &&RdmaGid| gid_addr(g).is_some_and(|a| family_of(&a) == prefs.family);
    p.gids
        .iter()
        .filter(works)
        .find(wanted)
        .or_else(|| p.gids.iter().find(works))
        .map(|g| g.index)
}

/// One line for a GID: the address as NCCL would print it (`::ffff:10.1.0.5`), its type and netdev.
pub fn describe(p: &RdmaPort, index: u32) -> String {
    match entry(p, index) {
        None => format!("{index} (empty)"),
        Some(g) => {
            let addr = gid_addr(g).map_or_else(|| g.gid.clone(), |a| a.to_string());
            let mut s = format!("{index} ({addr}");
            if let Some(k) = &g.kind {
                s.push_str(&format!(", {k}"));
            }
            if let Some(n) = &g.ndev {
                s.push_str(&format!(", {n}"));
            }
            s.push(')');
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gid(index: u32, gid: &str, kind: &str, ndev: &str) -> RdmaGid {
        RdmaGid {
            index,
            gid: gid.into(),
            kind: Some(kind.into()),
            ndev: Some(ndev.into()),
        }
    }

    /// The usual mlx5 RoCE table: link-local v1/v2, then the IPv4-mapped address v1/v2.
    fn mlx5_port(ndev: &str) -> RdmaPort {
        RdmaPort {
            port: 1,
            state: 4,
            phys_state: 5,
            link_layer: "Ethernet".into(),
            rate: "100 Gb/sec (4X EDR)".into(),
            gids: vec![
                gid(
                    0,
                    "fe80:0000:0000:0000:1c34:daff:fe5a:0001",
                    "IB/RoCE v1",
                    ndev,
                ),
                gid(
                    1,
                    "fe80:0000:0000:0000:1c34:daff:fe5a:0001",
                    "RoCE v2",
                    ndev,
                ),
                gid(
                    2,
                    "0000:0000:0000:0000:0000:ffff:0a0a:0005",
                    "IB/RoCE v1",
                    ndev,
                ),
                gid(
                    3,
                    "0000:0000:0000:0000:0000:ffff:0a0a:0005",
                    "RoCE v2",
                    ndev,
                ),
            ],
            gid_tbl_len: 16,
        }
    }

    #[test]
    fn nccl_picks_the_ipv4_mapped_v2_entry() {
        let p = mlx5_port("net1");
        let prefs = GidPrefs::default();
        assert_eq!(nccl_auto_index(&p, &prefs), Some(3));
        // RoCE v1 wanted: the IPv4-mapped v1 entry.
        let v1 = GidPrefs {
            roce_version: 1,
            ..GidPrefs::default()
        };
        assert_eq!(nccl_auto_index(&p, &v1), Some(2));
        // AF_INET6 wanted: only link-local IPv6 entries, which are not valid: index 0 stays.
        let v6 = GidPrefs {
            family: Family::Inet6,
            ..GidPrefs::default()
        };
        assert_eq!(nccl_auto_index(&p, &v6), Some(0));
        // A range that excludes the address: no IPv4 candidate matches.
        let other = GidPrefs {
            range: Some(("10.20.0.0".parse().expect("ip"), 16)),
            ..GidPrefs::default()
        };
        assert_eq!(nccl_auto_index(&p, &other), Some(0));
        // InfiniBand: no GID index is chosen.
        let mut ib = p.clone();
        ib.link_layer = "InfiniBand".into();
        assert_eq!(nccl_auto_index(&ib, &prefs), None);
    }

    #[test]
    fn forced_indices_judged() {
        let p = mlx5_port("net1");
        let here: BTreeSet<&str> = ["lo", "eth0", "net1"].into_iter().collect();
        let gone: BTreeSet<&str> = ["lo", "eth0"].into_iter().collect();
        assert_eq!(index_problem(&p, 3, Some(&here)), None);
        assert!(index_problem(&p, 2, Some(&here)).is_some_and(|e| e.contains("RoCE v1")));
        assert!(index_problem(&p, 5, Some(&here)).is_some_and(|e| e.contains("empty")));
        assert!(index_problem(&p, 16, Some(&here)).is_some_and(|e| e.contains("beyond")));
        assert!(index_problem(&p, 3, Some(&gone)).is_some_and(|e| e.contains("net1")));
        assert_eq!(index_problem(&p, 3, None), None);
        assert_eq!(best_index(&p, &GidPrefs::default(), Some(&here)), Some(3));
        assert_eq!(best_index(&p, &GidPrefs::default(), Some(&gone)), None);
        assert_eq!(describe(&p, 3), "3 (::ffff:10.10.0.5, RoCE v2, net1)");
        assert_eq!(describe(&p, 7), "7 (empty)");
    }

    #[test]
    fn best_skips_nccls_pick_when_its_netdev_is_missing() {
        let mut p = mlx5_port("net1");
        p.gids.push(gid(
            4,
            "fd00:0000:0000:0000:0000:0000:0000:0005",
            "RoCE v2",
            "net2",
        ));
        let here: BTreeSet<&str> = ["net2"].into_iter().collect();
        assert_eq!(nccl_auto_index(&p, &GidPrefs::default()), Some(3));
        assert_eq!(best_index(&p, &GidPrefs::default(), Some(&here)), Some(4));
    }

    #[test]
    fn prefs_from_the_environment() {
        let mut s = Snapshot::default();
        assert_eq!(gid_prefs(&s), GidPrefs::default());
        s.env
            .insert("NCCL_IB_ADDR_FAMILY".into(), "AF_INET6".into());
        s.env.insert("NCCL_IB_ROCE_VERSION_NUM".into(), "1".into());
        s.env.insert("NCCL_IB_ADDR_RANGE".into(), "fd00::/8".into());
        let p = gid_prefs(&s);
        assert_eq!((p.family, p.roce_version), (Family::Inet6, 1));
        assert_eq!(p.range.map(|r| r.1), Some(8));
        s.env.insert("NCCL_IB_ADDR_RANGE".into(), "fd00::".into());
        assert_eq!(gid_prefs(&s).range, None);
    }
}
