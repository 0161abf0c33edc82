//! Decision rules: interface (stub).
