//! RDMA rules (stub until the probe work lands).
use crate::{config::Config, plan::Plan, snapshot::Snapshot};
/// RDMA decisions; no-op stub.
pub fn decide_rdma(_snap: &Snapshot, _cfg: &Config, _plan: &mut Plan) {}
