#!/usr/bin/env bash
# Build the pip wheels of ncclenv, one per architecture (default: x86_64 and aarch64):
#   dist/ncclenv-<version>-py3-none-manylinux_2_<N>_<arch>.musllinux_1_1_<arch>.whl
# Each carries, as scripts that pip puts on the venv's (or the image's) PATH side by side:
#   - the static musl `ncclenv` (maturin builds it: `bindings = "bin"` in pyproject.toml, maturin pinned in
#     scripts/tools.sh), which needs no libc;
#   - the glibc helper `ncclenv-check` (`check`, `explain`), built here for the gnu target and put in the
#     wheel's data folder (pyproject.toml's `data`, its `scripts/` folder): a static binary cannot dlopen libnccl.
# The manylinux tag is the newest glibc symbol version the helper really needs (its GLIBC_x.y version needs,
# read with readelf from binutils; a helper linked on glibc 2.34 or later needs 2.34 at least, for
# __libc_start_main): pip on an older glibc refuses the wheel rather than install a helper that cannot start.
# The static ncclenv allows musllinux_1_1 too; there `ncclenv check` says that ncclenv-check needs glibc.
# The `ncclenv` Python package (python/ncclenv) makes `python -m ncclenv` exec the binary.
#
# usage: scripts/build-wheel.sh [x86_64|aarch64 ...]
# env:   OUT=<dir> (default dist); MATURIN=<path> (default: scripts/tools.sh installs the pinned one);
#        CARGO_TARGET_DIR is honoured. aarch64 on another host: gcc-aarch64-linux-gnu links the helper.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-dist}
ARCHS=("$@")
[ ${#ARCHS[@]} -gt 0 ] || ARCHS=(x86_64 aarch64)
MATURIN=${MATURIN:-$(bash scripts/tools.sh maturin)/maturin}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
DATA=.whl/data # pyproject.toml's tool.maturin.data
mkdir -p "$OUT"

add_target() {
  if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx "$1"; then
    rustup target add "$1"
  fi
}

# The libraries a manylinux wheel may need from the system (PEP 600's policies: manylinux-policy.json).
ALLOWED='^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libgcc_s\.so\.1|ld-linux-(x86-64|aarch64)\.so\.[12])$'

for arch in "${ARCHS[@]}"; do
  case "$arch" in
    x86_64 | aarch64) ;;
    *) echo "build-wheel.sh: unknown architecture $arch (x86_64 or aarch64)" >&2; exit 2 ;;
  esac
  MUSL=$arch-unknown-linux-musl GNU=$arch-unknown-linux-gnu
  add_target "$MUSL"
  add_target "$GNU"
  if [ "$arch" = aarch64 ] && [ "$(uname -m)" != aarch64 ]; then
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=${CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER:-aarch64-linux-gnu-gcc}
  fi
  cargo build --release --locked --quiet --target "$GNU" --bin ncclenv-check
  HELPER=$TARGET_DIR/$GNU/release/ncclenv-check
  bad=$(readelf -d -W "$HELPER" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | grep -Ev "$ALLOWED" || true)
  if [ -n "$bad" ]; then
    echo "build-wheel.sh: $HELPER needs libraries no manylinux system is sure to have: $bad" >&2
    exit 1
  fi
  glibc=$(readelf -V -W "$HELPER" | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2 -n | tail -n 1)
  minor=${glibc#GLIBC_2.}
  [ -n "$minor" ] || { echo "build-wheel.sh: no GLIBC_2.x version need in $HELPER" >&2; exit 1; }
  [ "$minor" -ge 17 ] || minor=17 # manylinux starts at glibc 2.17
  echo "build-wheel.sh: $HELPER needs $glibc: manylinux_2_${minor}_$arch" >&2
  rm -rf "$DATA"
  mkdir -p "$DATA/scripts"
  install -m 755 "$HELPER" "$DATA/scripts/ncclenv-check"
  # aarch64's ncclenv is cross-linked with rust-lld (.cargo/config.toml), as scripts/build-arm64.sh does.
  "$MATURIN" build --release --locked --target "$MUSL" \
    --compatibility "manylinux_2_$minor" musllinux_1_1 --out "$OUT"
done
rm -rf "$DATA"
ls -1 "$OUT"/ncclenv-*.whl
