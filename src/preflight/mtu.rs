//! MTUs of every network NCCL uses, compared between nodes (#26, item 5; NVIDIA/nccl#1524: RoCE at 9000 on
//! one node and 1500 on another breaks the job, though the bootstrap interfaces agree). Self-contained: each
//! node adds [`local`] to its report ([`NodeReport::data_mtus`](super::protocol::NodeReport)), the master
//! compares them with [`differences`], naming the node and the interface.

use super::protocol::NodeReport;
use crate::snapshot::Snapshot;

/// The MTU of one network NCCL uses on this node. On the wire (`NodeReport::data_mtus`) one string
/// `network<TAB>ifname<TAB>mtu` ([`NetMtu::wire`], [`NetMtu::parse`]): the report's existing string-list
/// encoding, so the static binary carries no serde code for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetMtu {
    /// Which network, comparable between nodes: `rdma <hca>:<port>` (an ACTIVE RoCE port, by its HCA) or
    /// `socket <ifname>` (an interface NCCL's NET/Socket stripes over).
    pub network: String,
    /// The netdev carrying it here.
    pub ifname: String,
    /// Its MTU in bytes (`IFLA_MTU`).
    pub mtu: u32,
}

impl NetMtu {
    /// The wire form: `network<TAB>ifname<TAB>mtu`.
    pub fn wire(&self) -> String {
        format!("{}\t{}\t{}", self.network, self.ifname, self.mtu)
    }
    /// Reads the wire form; `None` when it is not one.
    pub fn parse(s: &str) -> Option<NetMtu> {
        let mut p = s.split('\t');
        let network = p.next()?.to_string();
        let ifname = p.next()?.to_string();
        let mtu = p.next()?.parse().ok()?;
        Some(NetMtu {
            network,
            ifname,
            mtu,
        })
    }
}

/// This node's data networks and their MTUs: the netdev of each ACTIVE RoCE port (its GIDs' `ndev`), and
/// every interface NCCL's NET/Socket transport would use with `ifname` (the final `NCCL_SOCKET_IFNAME`,
/// `nccl_rules::nccl_pick`, up to 16). Only links whose MTU the probe read.
pub fn local(snap: &Snapshot, ifname: Option<&str>) -> Vec<NetMtu> {
    let Ok(net) = &snap.net else {
        return Vec::new();
    };
    let mtu_of = |name: &str| {
        net.links
            .iter()
            .find(|l| l.name == name)
            .and_then(|l| l.mtu)
    };
    let mut out = Vec::new();
    for d in snap.rdma.iter().flat_map(|r| &r.devices) {
        for p in d.ports.iter().filter(|p| p.state == 4) {
            if let Some(ndev) = p.gids.iter().find_map(|g| g.ndev.clone()) {
                if let Some(mtu) = mtu_of(&ndev) {
                    out.push(NetMtu {
                        network: format!("rdma {}:{}", d.name, p.port),
                        ifname: ndev,
                        mtu,
                    });
                }
            }
        }
    }
    let target = crate::nccl_rules::nccl_target(snap);
    let pick = crate::nccl_rules::nccl_pick(net, ifname, None, target.era);
    for f in &pick.found {
        let link = net.links.iter().find(|l| l.index == f.index);
        if let Some((name, Some(mtu))) = link.map(|l| (l.name.clone(), l.mtu)) {
            if !out
                .iter()
                .any(|m| m.network == format!("socket {}", f.name))
            {
                out.push(NetMtu {
                    network: format!("socket {}", f.name),
                    ifname: name,
                    mtu,
                });
            }
        }
    }
    out
}

/// For each network that more than one MTU is reported for: one line naming each MTU with its nodes and
/// their interfaces (`rdma mlx5_0:1: 9000 on n1 (eth2), 1500 on n2 (eth2)`). Networks only one node has are
/// not compared. `reports`: the meeting's members' reports, in order of arrival.
pub fn differences(reports: &[&NodeReport]) -> Vec<String> {
    // (network, mtu, "node (ifname)"), sorted: each network's MTUs are then adjacent.
    let mut all: Vec<(String, u32, String)> = reports
        .iter()
        .flat_map(|r| {
            r.data_mtus
                .iter()
                .filter_map(|w| NetMtu::parse(w))
                .map(move |n| (n.network, n.mtu, format!("{} ({})", r.name(), n.ifname)))
        })
        .collect();
    all.sort();
    let mut out = Vec::new();
    for net in all
        .iter()
        .map(|e| e.0.clone())
        .collect::<std::collections::BTreeSet<_>>()
    {
        let rows: Vec<&(String, u32, String)> = all.iter().filter(|e| e.0 == net).collect();
        let mut parts: Vec<String> = Vec::new();
        let mut mtus: Vec<u32> = rows.iter().map(|e| e.1).collect();
        mtus.dedup();
        if mtus.len() < 2 {
            continue;
        }
        for mtu in mtus {
            let nodes: Vec<&str> = rows
                .iter()
                .filter(|e| e.1 == mtu)
                .map(|e| e.2.as_str())
                .collect();
            parts.push(format!("{mtu} on {}", nodes.join(", ")));
        }
        out.push(format!("{net}: {}", parts.join("; ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Addr, Link, Network, RdmaDevice, RdmaGid, RdmaPort, RdmaSnapshot};

    #[test]
    fn local_lists_roce_netdevs_and_net_socket_interfaces() {
        let link = |index: u32, name: &str, mtu: u32| Link {
            index,
            name: name.into(),
            up: true,
            running: true,
            mtu: Some(mtu),
            ..Link::default()
        };
        let addr = |index: u32, a: &str| Addr {
            index,
            addr: a.parse().expect("ip"),
            prefix_len: 24,
            scope: 0,
            tentative: false,
            deprecated: false,
            dad_failed: false,
            label: None,
        };
        let snap = Snapshot {
            net: Ok(Network {
                links: vec![link(2, "eth0", 1500), link(3, "eth2", 9000)],
                addrs: vec![addr(2, "10.0.0.1"), addr(3, "10.9.0.1")],
                ..Network::default()
            }),
            rdma: Some(RdmaSnapshot {
                devices: vec![RdmaDevice {
                    name: "mlx5_0".into(),
                    ports: vec![RdmaPort {
                        port: 1,
                        state: 4,
                        gids: vec![RdmaGid {
                            index: 3,
                            gid: "x".into(),
                            kind: Some("RoCE v2".into()),
                            ndev: Some("eth2".into()),
                        }],
                        ..RdmaPort::default()
                    }],
                    verbs: None,
                }],
                ..RdmaSnapshot::default()
            }),
            ..Snapshot::default()
        };
        let got = local(&snap, Some("=eth0"));
        let want = vec![
            NetMtu {
                network: "rdma mlx5_0:1".into(),
                ifname: "eth2".into(),
                mtu: 9000,
            },
            NetMtu {
                network: "socket eth0".into(),
                ifname: "eth0".into(),
                mtu: 1500,
            },
        ];
        assert_eq!(got, want);
    }
}
