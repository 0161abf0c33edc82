//! Probe: host (stub).
