//! One builder of plain-data [`Snapshot`]s for the unit tests in `src/` (built only for them). The
//! integration tests have their own, richer one in `tests/it/common/snapshot.rs`: the library's `cfg(test)`
//! code is not compiled for them.
//!
//! ```ignore
//! let s = SnapshotBuilder::new()
//!     .links(&["eth0", "ib0"])
//!     .env("NCCL_IB_HCA", "mlx5_0")
//!     .rdma(rdma)
//!     .build();
//! ```

use std::net::IpAddr;

use crate::snapshot::{Addr, GpuInfo, Link, NcclInstall, Network, RdmaSnapshot, ShmInfo, Snapshot};

/// A [`Snapshot`] put together part by part; what is not set stays as [`Snapshot::default`].
#[derive(Default)]
pub(crate) struct SnapshotBuilder {
    snap: Snapshot,
}

impl SnapshotBuilder {
    /// An empty machine: no network read, nothing found, an empty environment.
    pub(crate) fn new() -> SnapshotBuilder {
        SnapshotBuilder::default()
    }

    /// The inherited variable `k` set to `v`.
    pub(crate) fn env(mut self, k: &str, v: &str) -> SnapshotBuilder {
        self.snap.env.insert(k.to_string(), v.to_string());
        self
    }

    /// Every `(name, value)` of `vars` inherited.
    pub(crate) fn envs(self, vars: &[(&str, &str)]) -> SnapshotBuilder {
        vars.iter().fold(self, |b, (k, v)| b.env(k, v))
    }

    /// A network read with the links `names` (indices from 1, every other field its default: down, no
    /// address) and nothing else.
    pub(crate) fn links(mut self, names: &[&str]) -> SnapshotBuilder {
        self.snap.net = Ok(Network {
            links: names
                .iter()
                .enumerate()
                .map(|(i, n)| Link {
                    index: i as u32 + 1,
                    name: n.to_string(),
                    ..Link::default()
                })
                .collect(),
            ..Network::default()
        });
        self
    }

    /// One more link `name`, UP, RUNNING and with carrier, holding the addresses `cidrs` (`"10.0.0.5/24"`,
    /// `"fe80::1/64"`; scope from the address: host for loopback, link for link-local, else global). Starts
    /// a network read when there is none yet. Panics on a malformed CIDR (test data).
    pub(crate) fn plug(mut self, name: &str, cidrs: &[&str]) -> SnapshotBuilder {
        if self.snap.net.is_err() {
            self.snap.net = Ok(Network::default());
        }
        let Ok(net) = &mut self.snap.net else {
            return self;
        };
        let index = net.links.iter().map(|l| l.index).max().unwrap_or(0) + 1;
        net.links.push(Link {
            index,
            name: name.to_string(),
            up: true,
            running: true,
            lower_up: true,
            oper_state: "up".into(),
            ..Link::default()
        });
        for c in cidrs {
            let (a, len) = c.split_once('/').expect("a CIDR");
            let addr: IpAddr = a.parse().expect("an address");
            let scope = if addr.is_loopback() {
                254
            } else if crate::snapshot::is_link_local_ip(&addr) {
                253
            } else {
                0
            };
            net.addrs.push(Addr {
                index,
                addr,
                prefix_len: len.parse().expect("a prefix length"),
                scope,
                tentative: false,
                deprecated: false,
                dad_failed: false,
                label: None,
            });
        }
        self
    }

    /// The RDMA devices and limits read.
    pub(crate) fn rdma(mut self, r: RdmaSnapshot) -> SnapshotBuilder {
        self.snap.rdma = Some(r);
        self
    }

    /// `/dev/shm` as read.
    pub(crate) fn shm(mut self, shm: ShmInfo) -> SnapshotBuilder {
        self.snap.shm = Some(shm);
        self
    }

    /// The GPUs the job sees.
    pub(crate) fn gpus(mut self, gpus: GpuInfo) -> SnapshotBuilder {
        self.snap.gpus = Some(gpus);
        self
    }

    /// One more NCCL installation found: `path`, of `version` when known (source `test`).
    pub(crate) fn nccl(mut self, path: &str, version: Option<&str>) -> SnapshotBuilder {
        self.snap.nccl_installs.push(NcclInstall {
            path: path.to_string(),
            version: version.map(String::from),
            source: "test".into(),
        });
        self
    }

    /// The snapshot.
    pub(crate) fn build(self) -> Snapshot {
        self.snap
    }
}
