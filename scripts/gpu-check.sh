#!/usr/bin/env bash
# On a machine with a GPU: build ncclenv and its check helper (release), run `ncclenv doctor` (tolerated if
# missing), then the bootstrap check and the allreduce check against the machine's NCCL (its python's
# site-packages, or the loader's search), and print one verdict block. Every step has a timeout; the whole
# script stays under 5 minutes.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
T0=$(date +%s)
OUT=${OUT:-$(mktemp -d)}
step() { echo "== $* ($(( $(date +%s) - T0 )) s)"; }

step "build (release)"
if ! timeout 200 cargo build --release --bin ncclenv --bin ncclenv-check --example check_driver >"$OUT/build.log" 2>&1; then
  tail -30 "$OUT/build.log"; echo "VERDICT: build failed"; exit 1
fi

# The machine's NCCL: python site-packages first (what the jobs use), else let the helper search.
if [ -z "${NCCLENV_NCCL_LIB:-}" ]; then
  for py in python3 python; do
    lib=$(timeout 20 "$py" - <<'PY' 2>/dev/null
import glob, site, sys
dirs = list(sys.path) + site.getsitepackages() + [site.getusersitepackages()]
for d in dirs:
    for rel in ("nvidia/nccl/lib/libnccl.so.2", "torch/lib/libnccl.so.2", "paddle/libs/libnccl.so.2"):
        for p in glob.glob(f"{d}/{rel}"):
            print(p); raise SystemExit
PY
    ) && [ -n "$lib" ] && { export NCCLENV_NCCL_LIB="$lib"; break; }
  done
fi
echo "NCCL library: ${NCCLENV_NCCL_LIB:-<helper search>}"
timeout 10 nvidia-smi -L 2>/dev/null || echo "(nvidia-smi not available)"
GPUS=$(timeout 10 nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${GPUS:-0}" -ge 1 ] || GPUS=2
export NCCLENV_CHECK_GPUS=${NCCLENV_CHECK_GPUS:-$GPUS}
export NCCLENV_CHECK_MIB=${NCCLENV_CHECK_MIB:-64}
export NCCLENV_CHECK_TIMEOUT=${NCCLENV_CHECK_TIMEOUT:-60}

step "ncclenv doctor"
timeout 30 target/release/ncclenv doctor >"$OUT/doctor.txt" 2>&1; echo "doctor exit $?"; head -40 "$OUT/doctor.txt"

step "bootstrap check"
timeout 40 target/release/examples/check_driver bootstrap --json-out "$OUT/bootstrap.json" >"$OUT/bootstrap.txt" 2>&1; B=$?

step "allreduce check ($NCCLENV_CHECK_GPUS GPU(s), $NCCLENV_CHECK_MIB MiB)"
timeout 90 target/release/examples/check_driver allreduce --json-out "$OUT/allreduce.json" >"$OUT/allreduce.txt" 2>&1; A=$?

step "verdict"
echo "================ ncclenv GPU check ================"
cat "$OUT/bootstrap.txt" "$OUT/allreduce.txt"
echo "bootstrap exit $B, allreduce exit $A; details in $OUT"
if [ "$B" = 0 ] && [ "$A" = 0 ]; then echo "VERDICT: PASSED"; exit 0; else echo "VERDICT: FAILED"; exit 1; fi
