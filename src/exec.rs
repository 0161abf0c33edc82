//! exec (stub).
