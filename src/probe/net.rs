//! Probe: net (stub).
