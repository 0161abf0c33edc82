//! Probe: job (stub).
