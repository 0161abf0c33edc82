#!/usr/bin/env bash
# Build the static entrypoint for arm64 nodes (GH200/GB200): target/aarch64-unknown-linux-musl/release/ncclenv.
# Cross-linked on any host with the toolchain's own rust-lld (.cargo/config.toml): the musl target ships its
# crt objects and libc (self-contained), so no cross gcc is needed. Installs the target when missing.
# tests/it/arm64.rs runs the result under qemu-user (`qemu-aarch64`, Debian package qemu-user).
set -euo pipefail
cd "$(dirname "$0")/.."
T=aarch64-unknown-linux-musl
rustup target list --installed 2>/dev/null | grep -qx "$T" || rustup target add "$T"
cargo build --release --quiet --target "$T" --bin ncclenv
B="target/$T/release/ncclenv"
[ -n "${CARGO_TARGET_DIR:-}" ] && B="$CARGO_TARGET_DIR/$T/release/ncclenv"
if command -v file >/dev/null; then file -b "$B"; fi
echo "$B: $(stat -c %s "$B") bytes"
