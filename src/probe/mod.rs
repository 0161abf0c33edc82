//! Probes: read the world into plain data. A probe never aborts: it records its error in the snapshot.

pub mod host;
pub mod job;
pub mod nccl;
pub mod net;
pub mod rdma;
