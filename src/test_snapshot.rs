//! The chaining front the unit tests in `src/` use (built only for them) over the one snapshot builder,
//! [`crate::test_machine::SnapshotBuilder`] (`tests/it/common/snapshot.rs`, which the integration tests
//! compile too): every part is made there; this only lets a test write the machine in one expression and
//! starts with no network read, as [`Snapshot::default`] does.
//!
//! ```ignore
//! let s = SnapshotBuilder::new()
//!     .links(&["eth0", "ib0"])
//!     .env("NCCL_IB_HCA", "mlx5_0")
//!     .rdma(rdma)
//!     .build();
//! ```

use crate::snapshot::{GpuInfo, Network, RdmaSnapshot, ShmInfo, Snapshot};
use crate::test_machine;

/// A [`Snapshot`] put together part by part; what is not set stays as [`Snapshot::default`] (the network
/// "not probed" until [`Self::links`] or [`Self::plug`]).
#[derive(Default)]
pub(crate) struct SnapshotBuilder {
    machine: test_machine::SnapshotBuilder,
    network_read: bool,
}

impl SnapshotBuilder {
    /// An empty machine: no network read, nothing found, an empty environment.
    pub(crate) fn new() -> SnapshotBuilder {
        SnapshotBuilder {
            machine: test_machine::SnapshotBuilder::bare(),
            network_read: false,
        }
    }

    /// The inherited variable `k` set to `v`.
    pub(crate) fn env(mut self, k: &str, v: &str) -> SnapshotBuilder {
        self.machine.env(k, v);
        self
    }

    /// Every `(name, value)` of `vars` inherited.
    pub(crate) fn envs(self, vars: &[(&str, &str)]) -> SnapshotBuilder {
        vars.iter().fold(self, |b, (k, v)| b.env(k, v))
    }

    /// A network read with the links `names` (indices from 1, up, no carrier, no address) and nothing else.
    pub(crate) fn links(mut self, names: &[&str]) -> SnapshotBuilder {
        self.machine.net = Network::default();
        for n in names {
            self.machine.link(n, false, None);
        }
        self.network_read = true;
        self
    }

    /// One more link `name`, a RUNNING veth holding the addresses `cidrs` (`"10.0.0.5/24"`, `"fe80::1/64"`)
    /// and their connected routes ([`test_machine::SnapshotBuilder::plug`]). Starts a network read when
    /// there is none yet. Panics on a malformed CIDR (test data).
    pub(crate) fn plug(mut self, name: &str, cidrs: &[&str]) -> SnapshotBuilder {
        self.machine.plug(name, cidrs);
        self.network_read = true;
        self
    }

    /// The RDMA devices and limits read.
    pub(crate) fn rdma(mut self, r: RdmaSnapshot) -> SnapshotBuilder {
        self.machine.rdma = Some(r);
        self
    }

    /// `/dev/shm` as read.
    pub(crate) fn shm(mut self, shm: ShmInfo) -> SnapshotBuilder {
        self.machine.shm = Some(shm);
        self
    }

    /// The GPUs the job sees.
    pub(crate) fn gpus(mut self, gpus: GpuInfo) -> SnapshotBuilder {
        self.machine.gpus = Some(gpus);
        self
    }

    /// One more NCCL installation found: `path`, of `version` when known (source `test`).
    pub(crate) fn nccl(mut self, path: &str, version: Option<&str>) -> SnapshotBuilder {
        self.machine.found_nccl(path, version);
        self
    }

    /// The snapshot.
    pub(crate) fn build(self) -> Snapshot {
        let mut snap = self.machine.snapshot();
        if !self.network_read {
            snap.net = Snapshot::default().net;
        }
        snap
    }
}
