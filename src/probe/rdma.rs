//! Probe: rdma (stub).
