//! doctor (stub).
