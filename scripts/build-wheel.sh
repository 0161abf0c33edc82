#!/usr/bin/env bash
# Build the pip wheels of ncclenv, one per architecture (default: x86_64 and aarch64):
#   dist/ncclenv-<version>-py3-none-manylinux2014_<arch>.manylinux_2_17_<arch>.musllinux_1_1_<arch>.whl
# Each carries the static musl `ncclenv` as a script entry: pip puts it on the venv's (or the image's) PATH.
# A static binary needs no libc, so one wheel is tagged for glibc (manylinux2014: glibc 2.17 and later) and
# musl (musllinux_1_1) systems alike, as ruff and uv ship theirs. Built by maturin with `bindings = "bin"`
# (pyproject.toml), pinned in scripts/tools.sh. The wheel holds ncclenv only: ncclenv-check must be linked
# against glibc to dlopen libnccl; `ncclenv check` says how to get it.
#
# usage: scripts/build-wheel.sh [x86_64|aarch64 ...]
# env:   OUT=<dir> (default dist); MATURIN=<path> (default: scripts/tools.sh installs the pinned one)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-dist}
ARCHS=("$@")
[ ${#ARCHS[@]} -gt 0 ] || ARCHS=(x86_64 aarch64)
MATURIN=${MATURIN:-$(bash scripts/tools.sh maturin)/maturin}
mkdir -p "$OUT"
for arch in "${ARCHS[@]}"; do
  case "$arch" in
    x86_64 | aarch64) T=$arch-unknown-linux-musl ;;
    *) echo "build-wheel.sh: unknown architecture $arch (x86_64 or aarch64)" >&2; exit 2 ;;
  esac
  if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx "$T"; then
    rustup target add "$T"
  fi
  # aarch64 is cross-linked with rust-lld (.cargo/config.toml), as scripts/build-arm64.sh does.
  "$MATURIN" build --release --locked --target "$T" --compatibility manylinux2014 musllinux_1_1 --out "$OUT"
done
ls -1 "$OUT"/ncclenv-*.whl
