//! Decision rules: rdma (stub).
