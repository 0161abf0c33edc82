//! report (stub).
