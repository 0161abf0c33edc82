#!/usr/bin/env bash
# Build ncclenv for this machine and put both binaries side by side in dist/:
#   dist/ncclenv        the static entrypoint (musl: <uname -m>-unknown-linux-musl)
#   dist/ncclenv-check  the glibc helper behind `ncclenv check` (it looks for it beside ncclenv)
# Adds the musl target with rustup when it is missing (once). Honours CARGO_TARGET_DIR.
#
#   scripts/build.sh && dist/ncclenv -- COMMAND
#
# env: MUSL_TARGET=<triple> overrides the musl target; OUT=<dir> the output folder (default dist).
# For arm64 nodes from an x86_64 machine use scripts/build-arm64.sh (the helper must be built on arm64).
set -euo pipefail
cd "$(dirname "$0")/.."
T=${MUSL_TARGET:-$(uname -m)-unknown-linux-musl}
OUT=${OUT:-dist}

if ! command -v cargo >/dev/null; then
  echo "build.sh: cargo not found: install Rust with rustup (rustup.rs), then run this again" >&2
  exit 1
fi
if command -v rustup >/dev/null; then
  if ! rustup target list --installed | grep -qx "$T"; then
    echo "build.sh: adding the Rust target $T (needed once, for the static binary)"
    rustup target add "$T"
  fi
else
  echo "build.sh: no rustup: the Rust standard library for $T must come with your toolchain" >&2
fi

cargo build --release --locked --target "$T" --bin ncclenv
cargo build --release --locked --bin ncclenv-check

# Where cargo put them: CARGO_TARGET_DIR or build.target-dir, as cargo itself reports it.
TD=$(cargo metadata --no-deps --format-version 1 | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
mkdir -p "$OUT"
for pair in "$TD/$T/release/ncclenv:ncclenv" "$TD/release/ncclenv-check:ncclenv-check"; do
  src=${pair%:*}
  dst="$OUT/${pair##*:}"
  # Through a temporary file and a rename: a dist/ncclenv that is running keeps working.
  cp "$src" "$dst.tmp.$$"
  chmod 755 "$dst.tmp.$$"
  mv -f "$dst.tmp.$$" "$dst"
done
echo "build.sh: $OUT/ncclenv (static, $T) and $OUT/ncclenv-check (glibc, beside it for ncclenv check)"
