#!/usr/bin/env bash
# The allreduce check on a machine with a GPU, as that machine is: no Rust toolchain, no network. It runs the
# binaries built beforehand by scripts/build.sh (dist/ncclenv, the static entrypoint, and
# dist/ncclenv-check, the helper) and never builds anything. Steps (each with its own timeout, all within
# $NCCLENV_GPU_CHECK_BUDGET seconds, default 270, under the 5 minutes one device call may take):
#   1. the machine: nvidia-smi, and the NCCL it has: NCCLENV_NCCL_LIB when given, else the libnccl PyTorch
#      loads, else python3's nvidia-nccl wheel (nvidia/nccl/lib, cu12 and cu13 alike), else PyTorch's
#      bundled torch/lib/libnccl.so.2, else the helper's own search; it says which it used;
#   2. `ncclenv doctor` (recorded, not judged);
#   3. the bootstrap check (`ncclenv check bootstrap`);
#   4. a one-rank allreduce (NCCL allows nranks=1), every element verified;
#   5. the repair path: an inherited NCCL_SOCKET_IFNAME that names no interface makes NCCL itself fail (the
#      helper alone: "Bootstrap : no socket interface found"); through the entrypoint it is replaced
#      ([inherited-ifname-repaired]) and the allreduce check then passes before the command runs;
#   6. the two-rank allreduce: with two GPUs or more it must pass with its bandwidth; with one it must say
#      that a 2-rank allreduce needs 2 GPUs (NCCL refuses two ranks on one GPU) instead of failing.
# Everything goes to $OUT (a new temporary folder when unset); the last lines are one verdict block, and the
# exit status is 0 when the verdict is PASSED, 1 otherwise.
#   (unset OUT; bash scripts/build.sh)            # on the build machine: dist/ncclenv, dist/ncclenv-check
#   OUT=/tmp/out bash scripts/gpu-check.sh        # on the GPU machine, with dist/ carried there (3.2 MB;
#                                                 # dist/ is git-ignored, so a device call must carry it)
# (build.sh reads OUT as its output folder, hence unset there.) dist/ncclenv-check needs glibc >= 2.34.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIST=${NCCLENV_DIST:-$ROOT/dist}
OUT=${OUT:-$(mktemp -d /tmp/ncclenv-gpu-check.XXXXXX)}
BUDGET=${NCCLENV_GPU_CHECK_BUDGET:-270}
PY=${PYTHON:-python3}
BAD_IFNAME=ncclenv-none0
T0=$(date +%s)
mkdir -p "$OUT"

declare -A RES DETAIL

# Seconds left of the budget.
left() { echo $((BUDGET - ($(date +%s) - T0))); }

# step MAX NAME CMD...: say so on fd 3 (the log) and run CMD under `timeout` (MAX seconds, or what is left of the budget); 124 when it
# timed out, 125 when no time was left to start it.
step() {
  local max=$1 name=$2 t
  shift 2
  t=$(left)
  ((t > max)) && t=$max
  echo "== $name ($(($(date +%s) - T0)) s, at most $t s)" >&3
  if ((t < 5)); then
    echo "   not run: the ${BUDGET} s budget is spent" >&3
    return 125
  fi
  timeout -k 5 "$t" "$@"
}

# Read the reports (JSON) and print "STATUS<TAB>detail" for one step: py_judge KIND FILE [ARG].
py_judge() {
  "$PY" - "$@" <<'PY'
import json, sys
kind, path = sys.argv[1], sys.argv[2]
arg = sys.argv[3] if len(sys.argv) > 3 else ""
def say(status, detail):
    print(f"{status}\t{detail}")
    sys.exit(0)
try:
    text = open(path, encoding="utf-8", errors="replace").read()
except OSError as e:
    say("FAILED", f"no report: {e}")
if kind == "raw":
    # The helper's protocol lines; the last is the result.
    res = None
    for line in text.splitlines():
        try:
            m = json.loads(line)
        except ValueError:
            continue
        if m.get("ev") == "result":
            res = m
    if res is None:
        say("FAILED", "the helper wrote no result")
    if res.get("ok"):
        say("FAILED", f"NCCL accepted NCCL_SOCKET_IFNAME={arg}: the repair path proves nothing here")
    e = res.get("error") or {}
    say("FAILS-AS-EXPECTED", f"{e.get('message', '?')}: {e.get('last_error') or e.get('error_string') or ''}")
try:
    d = json.loads(text)
except ValueError:
    say("FAILED", "the report is not JSON: " + text.strip()[-300:])
r = d.get("result") or {}
summary = d.get("summary", "")
if not d.get("passed"):
    say("FAILED", summary)
if kind == "bootstrap":
    say("PASSED", summary)
if d.get("mode") != "allreduce":
    say("FAILED", "no allreduce ran: " + summary)
n = r.get("nranks") or 0
ranks = r.get("ranks") or []
bad = [x for x in ranks if x.get("mismatches") != 0 or not x.get("ok")]
if len(ranks) != n or bad or not r.get("bytes"):
    say("FAILED", f"{len(ranks)} of {n} ranks verified: {summary}")
floats = r["bytes"] // 4
speed = f"{r.get('seconds', 0) * 1e3:.2f} ms, algbw {r.get('algbw_gbps', 0):.2f} GB/s, busbw {r.get('busbw_gbps', 0):.2f} GB/s"
if kind == "one":
    ok = n == 1
    say("PASSED" if ok else "FAILED", f"{n} rank(s), {floats} float32 each verified (0 mismatches), {speed}")
if kind == "two":
    if n >= 2:
        say("PASSED", f"{n} ranks, {floats} float32 each verified, {speed}")
    note = r.get("note") or ""
    if "needs 2 GPUs" in note:
        say("NEEDS-2-GPUS", note)
    say("FAILED", f"{n} rank(s) and no word of the missing GPU: {summary}")
say("FAILED", f"unknown step {kind}")
PY
}

# judge NAME KIND FILE [ARG]: record the step's status and detail.
judge() {
  local name=$1 line
  shift
  line=$(py_judge "$@" 2>&1) || line=$'FAILED\tcannot read the report with '"$PY: $line"
  RES[$name]=${line%%$'\t'*}
  DETAIL[$name]=${line#*$'\t'}
  echo "   ${RES[$name]}: ${DETAIL[$name]}"
}

# Where the NCCL of this machine is: lines "how<TAB>path" (and "wheel<TAB>name version") from python3.
find_nccl() {
  "$PY" - <<'PY'
import os, site, sys
dirs = []
extra = []
try:
    extra = site.getsitepackages() + [site.getusersitepackages()]
except Exception:
    pass
for d in list(sys.path) + extra:
    if d and os.path.isdir(d) and d not in dirs:
        dirs.append(d)
for d in dirs:
    for rel, how in (("nvidia/nccl/lib/libnccl.so.2", "the nvidia-nccl wheel of " + sys.executable),
                     ("torch/lib/libnccl.so.2", "PyTorch's bundled NCCL (" + sys.executable + ")")):
        p = os.path.join(d, rel)
        if os.path.isfile(p):
            print(f"{how}\t{p}")
try:
    from importlib import metadata
    for name in ("nvidia-nccl-cu13", "nvidia-nccl-cu12"):
        try:
            print(f"wheel\t{name} {metadata.version(name)}")
        except Exception:
            pass
except Exception:
    pass
PY
}

# What PyTorch loads: "torch<TAB>versions<TAB>libnccl path (or 'linked in')".
TORCH_PY=$(
  cat <<'PY'
import torch
try:
    v = ".".join(map(str, torch.cuda.nccl.version()))
except Exception as e:
    v = f"unknown ({e})"
path = "linked in (no libnccl.so in the process)"
for line in open("/proc/self/maps"):
    if "libnccl.so" in line:
        path = line.split()[-1]
        break
print(f"torch\ttorch {torch.__version__} (CUDA {torch.version.cuda}, NCCL {v})\t{path}")
PY
)

machine() {
  echo "== the machine"
  { timeout 10 nvidia-smi -L && timeout 10 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } \
    >"$OUT/nvidia-smi.txt" 2>&1 || echo "(nvidia-smi failed or is missing)" >>"$OUT/nvidia-smi.txt"
  cat "$OUT/nvidia-smi.txt"
  GPUS=$(grep -c '^GPU [0-9]' "$OUT/nvidia-smi.txt" || true)
  "$DIST/ncclenv" --version 2>&1 | head -1
  HELPER_VERSION=$("$DIST/ncclenv-check" --version 2>&1 | grep -m1 '^ncclenv-check')
  echo "$HELPER_VERSION"
}

choose_nccl() {
  echo "== where NCCL is"
  find_nccl >"$OUT/nccl-found.txt" 2>&1 || true
  step 60 "what PyTorch loads" "$PY" -c "$TORCH_PY" >"$OUT/torch.txt" 2>&1 || echo "(no PyTorch here: $(tail -1 "$OUT/torch.txt"))" >>"$OUT/torch.txt"
  cat "$OUT/nccl-found.txt"
  tail -1 "$OUT/torch.txt"
  local torch_lib
  torch_lib=$(awk -F'\t' '$1 == "torch" && $3 ~ /^\// {print $3; exit}' "$OUT/torch.txt")
  if [ -n "${NCCLENV_NCCL_LIB:-}" ]; then
    NCCL_HOW="NCCLENV_NCCL_LIB, as given"
  elif [ -n "$torch_lib" ]; then
    NCCLENV_NCCL_LIB=$torch_lib
    NCCL_HOW="the libnccl PyTorch loads: $(awk -F'\t' '$1 == "torch" {print $2; exit}' "$OUT/torch.txt")"
  else
    local line
    line=$(grep -v '^wheel' "$OUT/nccl-found.txt" | head -1)
    if [ -n "$line" ]; then
      NCCLENV_NCCL_LIB=${line#*$'\t'}
      NCCL_HOW=${line%%$'\t'*}
    fi
  fi
  local wheels
  wheels=$(awk -F'\t' '$1 == "wheel" {printf "%s%s", sep, $2; sep=", "}' "$OUT/nccl-found.txt")
  [ -n "$wheels" ] && NCCL_HOW="$NCCL_HOW; installed: $wheels"
  if [ -n "${NCCLENV_NCCL_LIB:-}" ]; then
    export NCCLENV_NCCL_LIB
  else
    NCCL_HOW="none found by $PY: the helper's own search"
  fi
  echo "NCCL used: ${NCCLENV_NCCL_LIB:-(the helper searches)} ($NCCL_HOW)"
}

# The check steps; every report goes to $OUT.
checks() {
  local e=(env NCCLENV_CHECK_HELPER="$DIST/ncclenv-check" NCCLENV_CHECK_TIMEOUT=45 NCCLENV_CHECK_MIB="${NCCLENV_CHECK_MIB:-64}")
  step 20 "ncclenv doctor" "${e[@]}" "$DIST/ncclenv" doctor >"$OUT/doctor.txt" 2>&1
  echo "   doctor exit $? ($OUT/doctor.txt)"

  step 40 "bootstrap check" "${e[@]}" "$DIST/ncclenv" check bootstrap --json >"$OUT/bootstrap.json" 2>"$OUT/bootstrap.err"
  judge bootstrap bootstrap "$OUT/bootstrap.json"

  step 55 "one-rank allreduce" "${e[@]}" NCCLENV_CHECK_GPUS=1 "$DIST/ncclenv" check allreduce --json \
    >"$OUT/allreduce-1.json" 2>"$OUT/allreduce-1.err"
  judge one-rank one "$OUT/allreduce-1.json"

  step 30 "repair: NCCL alone with NCCL_SOCKET_IFNAME=$BAD_IFNAME" env NCCL_SOCKET_IFNAME="$BAD_IFNAME" \
    "$DIST/ncclenv-check" bootstrap >"$OUT/repair-raw.jsonl" 2>"$OUT/repair-raw.err"
  judge repair-raw raw "$OUT/repair-raw.jsonl" "$BAD_IFNAME"
  # shellcheck disable=SC2016 # the command's own shell expands it
  step 55 "repair: the entrypoint with the same inherited value" "${e[@]}" NCCL_SOCKET_IFNAME="$BAD_IFNAME" \
    NCCLENV_CHECK=allreduce NCCLENV_CHECK_GPUS=1 "$DIST/ncclenv" -- sh -c 'echo "command ran with NCCL_SOCKET_IFNAME=$NCCL_SOCKET_IFNAME"' \
    >"$OUT/repair.out" 2>"$OUT/repair.err"
  local rc=$? ran
  ran=$(sed -n 's/^command ran with NCCL_SOCKET_IFNAME=//p' "$OUT/repair.out")
  if [ "$rc" = 0 ] && grep -q '\[inherited-ifname-repaired\]' "$OUT/repair.err" &&
    grep -q 'check passed: allreduce check passed' "$OUT/repair.err" && [ -n "$ran" ] && [ "$ran" != "$BAD_IFNAME" ]; then
    RES[repair]=PASSED
    DETAIL[repair]="NCCL_SOCKET_IFNAME=$BAD_IFNAME replaced by $ran, the allreduce check passed, the command ran with it"
  else
    RES[repair]=FAILED
    DETAIL[repair]="exit $rc; $(grep -E 'replaced|check (passed|failed)' "$OUT/repair.err" | head -3 | tr '\n' ' ')"
  fi
  echo "   ${RES[repair]}: ${DETAIL[repair]}"

  step 70 "two-rank allreduce" "${e[@]}" NCCLENV_CHECK_GPUS=2 "$DIST/ncclenv" check allreduce --json \
    >"$OUT/allreduce-2.json" 2>"$OUT/allreduce-2.err"
  judge two-rank two "$OUT/allreduce-2.json"
}

verdict() {
  local ok=1 s
  echo
  echo "================ ncclenv GPU check ================"
  echo "machine:    ${GPUS:-0} GPU(s): $(grep '^GPU 0' "$OUT/nvidia-smi.txt" | head -1)"
  echo "            name, driver, memory: $(grep -v '^GPU [0-9]' "$OUT/nvidia-smi.txt" | head -1)"
  echo "binaries:   $DIST ($HELPER_VERSION)"
  echo "NCCL:       ${NCCLENV_NCCL_LIB:-(the helper searches)} ($NCCL_HOW)"
  for s in bootstrap one-rank repair-raw repair two-rank; do
    printf '%-11s %s: %s\n' "$s:" "${RES[$s]:-NOT-RUN}" "${DETAIL[$s]:-}"
  done
  [ "${RES[bootstrap]:-}" = PASSED ] || ok=0
  [ "${RES[one-rank]:-}" = PASSED ] || ok=0
  [ "${RES[repair-raw]:-}" = FAILS-AS-EXPECTED ] || ok=0
  [ "${RES[repair]:-}" = PASSED ] || ok=0
  case "${RES[two-rank]:-}" in
  PASSED) ;;
  NEEDS-2-GPUS) [ "${GPUS:-0}" -lt 2 ] || ok=0 ;;
  *) ok=0 ;;
  esac
  echo "details:    $OUT ($(($(date +%s) - T0)) s)"
  if [ "$ok" = 1 ]; then echo "VERDICT: PASSED"; else echo "VERDICT: FAILED"; fi
  [ "$ok" = 1 ]
}

main() {
  for b in ncclenv ncclenv-check; do
    if [ ! -x "$DIST/$b" ]; then
      echo "$DIST/$b is missing: run scripts/build.sh on the build machine and carry dist/ (this script builds nothing)"
      echo "VERDICT: FAILED"
      return 1
    fi
  done
  if ! "$DIST/ncclenv-check" --version >/dev/null 2>"$OUT/helper.err"; then
    echo "$DIST/ncclenv-check does not run here: $(head -3 "$OUT/helper.err")"
    echo "VERDICT: FAILED"
    return 1
  fi
  GPUS=0 HELPER_VERSION="" NCCL_HOW=""
  exec 3>&1
  machine
  choose_nccl
  checks
  verdict
}

main "$@" 2>&1 | tee "$OUT/gpu-check.log"
exit "${PIPESTATUS[0]}"
