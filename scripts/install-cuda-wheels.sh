#!/usr/bin/env bash
# Install the CUDA headers and runtime of pinned PyPI wheels for tests/it/c_interface.rs, which compiles the
# helper's C declarations (src/bin/ncclenv-check/decls.rs) against the real cuda.h, cuda_runtime_api.h and
# nccl.h, and runs the allreduce path against the real libcudart on a machine without a GPU:
#   cuda-12.9: nvidia-cuda-runtime-cu12 12.9.79 (cuda.h, cuda_runtime_api.h, libcudart.so.12),
#              nvidia-cuda-nvcc-cu12 12.9.86 (only include/crt: crt/host_config.h, which cuda_runtime.h includes),
#              nvidia-cuda-cccl-cu12 12.9.27 (only include/nv: nv/target, which cuda_fp16.h includes)
#   cuda-13.0: nvidia-cuda-runtime 13.0.96, nvidia-cuda-crt 13.0.88, nvidia-cuda-cccl 13.0.85 (the same
#              files; CUDA 13's wheels put them under nvidia/cu13/). 13.0 is the CUDA of the lent GPU machine.
# (nccl.h itself comes with the nvidia-nccl-cu12 wheels of scripts/install-nccl-wheels.sh.)
# Each set goes to $NCCLENV_TEST_NCCL_ROOT/cuda-<ver>/{include,lib} (default /opt/ncclenv): `pip download
# --no-deps` into a temporary folder, then only those members are unpacked. A set already installed is skipped
# (the folder is a cache: CI reruns on the same machine).
set -euo pipefail
ROOT="${NCCLENV_TEST_NCCL_ROOT:-/opt/ncclenv}"
PIP="${PIP:-$(command -v pip3 || command -v pip)}"
PY="${PYTHON:-python3}"

# set name | wheel==version:member prefix (inside the wheel):destination (inside the set) ...
SETS=(
  "cuda-12.9|nvidia-cuda-runtime-cu12==12.9.79:nvidia/cuda_runtime/include/:include/ nvidia-cuda-runtime-cu12==12.9.79:nvidia/cuda_runtime/lib/libcudart.so.12:lib/libcudart.so.12 nvidia-cuda-nvcc-cu12==12.9.86:nvidia/cuda_nvcc/include/crt/:include/crt/ nvidia-cuda-cccl-cu12==12.9.27:nvidia/cuda_cccl/include/nv/:include/nv/"
  "cuda-13.0|nvidia-cuda-runtime==13.0.96:nvidia/cu13/include/:include/ nvidia-cuda-runtime==13.0.96:nvidia/cu13/lib/libcudart.so.13:lib/libcudart.so.13 nvidia-cuda-crt==13.0.88:nvidia/cu13/include/crt/:include/crt/ nvidia-cuda-cccl==13.0.85:nvidia/cu13/include/nv/:include/nv/"
)

mkdir -p "$ROOT"
for entry in "${SETS[@]}"; do
  name=${entry%%|*}
  dest="$ROOT/$name"
  if [ -f "$dest/.ncclenv-installed" ]; then
    echo "$name: already installed in $dest"
    continue
  fi
  tmp="$dest.partial.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp/wheels"
  echo "$name: installing into $dest"
  for part in ${entry#*|}; do
    req=${part%%:*}
    rest=${part#*:}
    prefix=${rest%%:*}
    to=${rest#*:}
    pkg=${req%%==*}
    ver=${req#*==}
    whl=$(find "$tmp/wheels" -maxdepth 1 -name "$(echo "$pkg" | tr - _)-$ver-*.whl" | head -1)
    if [ -z "$whl" ]; then
      "$PIP" download --quiet --disable-pip-version-check --no-deps --no-cache-dir --only-binary=:all: \
        -d "$tmp/wheels" "$req"
      whl=$(find "$tmp/wheels" -maxdepth 1 -name "$(echo "$pkg" | tr - _)-$ver-*.whl" | head -1)
    fi
    [ -n "$whl" ] || { echo "$name: no wheel for $req" >&2; exit 1; }
    "$PY" - "$whl" "$prefix" "$tmp/$to" <<'PY'
import os, shutil, sys, zipfile
whl, prefix, to = sys.argv[1:]
n = 0
with zipfile.ZipFile(whl) as z:
    for m in z.infolist():
        if m.is_dir() or not m.filename.startswith(prefix):
            continue
        rel = m.filename[len(prefix):]
        out = os.path.join(to, rel) if rel else to
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(m) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
        n += 1
if n == 0:
    sys.exit(f"{whl}: nothing under {prefix}")
PY
  done
  rm -rf "$tmp/wheels"
  chmod 755 "$tmp"/lib/libcudart.so.* 2>/dev/null || true
  echo "${entry#*|}" | tr ' ' '\n' | cut -d: -f1 | sort -u >"$tmp/.ncclenv-installed"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  echo "$name: done"
done
