//! nccl_rules (stub).
