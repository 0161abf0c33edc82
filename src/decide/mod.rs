//! The pure decision: `decide(&Snapshot, &Config) -> Plan`. No I/O here.

pub mod interface;
pub mod rdma;
pub mod shm;
