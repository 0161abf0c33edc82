//! Probe: nccl (stub).
