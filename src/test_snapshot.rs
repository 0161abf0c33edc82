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

use crate::snapshot::{GpuInfo, Link, NcclInstall, Network, RdmaSnapshot, ShmInfo, Snapshot};

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
