//! /dev/shm rules (stub until the probe work lands).
use crate::{config::Config, plan::Plan, snapshot::Snapshot};
/// /dev/shm decisions; no-op stub.
pub fn decide_shm(_snap: &Snapshot, _cfg: &Config, _plan: &mut Plan) {}
