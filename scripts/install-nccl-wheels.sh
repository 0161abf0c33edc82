#!/usr/bin/env bash
# Install pinned nvidia-nccl-cu12 wheels side by side for tests/it/check_real_nccl.rs:
#   2.21.5 (≤2.23: "no socket interface found" is ncclInternalError = 3)
#   2.27.7 (≥2.24: the same failure is ncclInvalidUsage = 5)
#   2.29.7 (NCCL_COMM_ID bootstraps on lo, NVIDIA/nccl#2047; src/nccl_defects.rs)
#   2.30.7 (fixed in 2.30.3; 2.28+ rules)
# Each goes to $NCCLENV_TEST_NCCL_ROOT/nccl-<ver> (default /opt/ncclenv) with `pip install --no-deps --target`.
# A version already installed is skipped (the folder is a cache: CI reruns on the same machine).
set -euo pipefail
ROOT="${NCCLENV_TEST_NCCL_ROOT:-/opt/ncclenv}"
VERSIONS="${NCCLENV_TEST_NCCL_VERSIONS:-2.21.5 2.27.7 2.29.7 2.30.7}"
PIP="${PIP:-$(command -v pip3 || command -v pip)}"
mkdir -p "$ROOT"
for v in $VERSIONS; do
  dest="$ROOT/nccl-$v"
  if [ -f "$dest/nvidia/nccl/lib/libnccl.so.2" ]; then
    echo "nccl $v: already installed in $dest"
    continue
  fi
  tmp="$dest.partial.$$"
  rm -rf "$tmp"
  echo "nccl $v: installing into $dest"
  "$PIP" install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --no-cache-dir \
    --target "$tmp" "nvidia-nccl-cu12==$v"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  echo "nccl $v: done"
done
