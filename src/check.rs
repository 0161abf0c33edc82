//! check (stub).
