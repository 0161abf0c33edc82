//! Decision rules: shm (stub).
