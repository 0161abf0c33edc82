#!/usr/bin/env bash
# Start-up benchmark: the time ncclenv adds to starting /bin/true, measured side by side in one run with
#   - a bare static exec shim (scripts/bench/shim.c: the floor for any entrypoint),
#   - the shell recipe blog guides publish (scripts/bench/recipe.sh),
# on a plain layout (one uplink with a default route) and with extra veth interfaces (default 500 and 2000).
# Also: peak RSS of ncclenv, binary sizes, the bootstrap check, and the fleet preflight
# (scripts/bench-preflight.sh: verdict time after the last node arrives, for 3, 24 and 500 namespace nodes).
# Needs root (network namespaces), gcc, hyperfine (apt-get install hyperfine).
#
# usage: sudo scripts/bench.sh [EXTRA_IFACE_COUNTS...]      (default: 500 2000)
# env:   NCCLENV_BIN=path (default: builds target/x86_64-unknown-linux-musl/release/ncclenv)
#        NCCLENV_BASELINE=path (optional: an older ncclenv binary timed in the same hyperfine run, reported as
#        new/baseline, so that a change's start-up cost is compared side by side)
#        RUNS=N (hyperfine runs per command, default 300)
#        PREFLIGHT_COUNTS="3 24 500" (fleet sizes for the preflight benchmark; empty skips it)
set -euo pipefail
cd "$(dirname "$0")/.."
COUNTS=("$@"); [ ${#COUNTS[@]} -gt 0 ] || COUNTS=(500 2000)
RUNS=${RUNS:-300}
command -v hyperfine >/dev/null || { echo "bench: hyperfine missing (apt-get install hyperfine)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "bench: needs root for network namespaces" >&2; exit 1; }

TARGET_DIR=$(realpath -m "${CARGO_TARGET_DIR:-target}")
BIN=${NCCLENV_BIN:-}
BASELINE=${NCCLENV_BASELINE:-}
if [ -z "$BIN" ]; then
  cargo build -q --release --target x86_64-unknown-linux-musl --bin ncclenv
  BIN=$TARGET_DIR/x86_64-unknown-linux-musl/release/ncclenv
fi
WORK=$(mktemp -d /tmp/ncclenv-bench.XXXXXX)
NS=ncbench$$
PEER=ncbenchp$$
cleanup() { ip netns del "$NS" 2>/dev/null || true; ip netns del "$PEER" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
gcc -static -O2 -o "$WORK/shim" scripts/bench/shim.c
gcc -static -O2 -o "$WORK/rss" scripts/bench/rss.c
cp scripts/bench/recipe.sh "$WORK/recipe.sh"

ip netns add "$NS"; ip netns add "$PEER"
ip -n "$NS" link set lo up
ip link add eth0 netns "$NS" type veth peer name up0 netns "$PEER"
ip -n "$PEER" link set up0 up
ip -n "$NS" link set eth0 up
ip -n "$NS" addr add 10.77.0.2/24 dev eth0
ip -n "$NS" route add default via 10.77.0.1 dev eth0

add_ifaces() { # add veth pairs up to a total of $1 extra interfaces in $NS (peers in $PEER)
  local have=$1 want=$2 f="$WORK/batch"
  : > "$f"
  for ((i = have; i < want; i++)); do
    echo "link add x$i netns $NS type veth peer name y$i netns $PEER" >> "$f"
  done
  [ -s "$f" ] && ip -batch "$f"
  : > "$f"
  for ((i = have; i < want; i++)); do echo "link set x$i up" >> "$f"; done
  [ -s "$f" ] && ip -n "$NS" -batch "$f"
  : > "$f"
  for ((i = have; i < want; i++)); do echo "link set y$i up" >> "$f"; done
  [ -s "$f" ] && ip -n "$PEER" -batch "$f"
  return 0
}

run_layout() { # $1 label
  local label=$1
  ip netns exec "$NS" env NCCLENV_LOG=off hyperfine -N -w 30 -r "$RUNS" --export-json "$WORK/$label.json" \
    -n true "/bin/true" \
    -n shim "$WORK/shim /bin/true" \
    -n ncclenv "$BIN -- /bin/true" \
    -n recipe "/bin/sh $WORK/recipe.sh /bin/true" \
    ${BASELINE:+-n baseline "$BASELINE -- /bin/true"} >/dev/null 2>&1
  # Peak RSS (KiB) of one ncclenv start that execs a static no-op (the shim with no argument exits at once, so
  # the peak is ncclenv's own), and of the shim alone for comparison.
  ip netns exec "$NS" env NCCLENV_LOG=off "$WORK/rss" "$BIN" -- "$WORK/shim" > "$WORK/$label.rss" || true
  ip netns exec "$NS" "$WORK/rss" "$WORK/shim" > "$WORK/$label.rss0" || true
}

have=0
run_layout plain
LAYOUTS=(plain)
for c in "${COUNTS[@]}"; do
  add_ifaces "$have" "$c"; have=$c
  run_layout "veth$c"; LAYOUTS+=("veth$c")
done

# Bootstrap check, time to verdict (`ncclenv check bootstrap` with the real libnccl of each installed wheel;
# scripts/install-nccl-wheels.sh), on the plain layout with a warm page cache.
HELPER=${NCCLENV_CHECK_HELPER:-$TARGET_DIR/release/ncclenv-check}
[ -x "$HELPER" ] || cargo build -q --release --bin ncclenv-check
: > "$WORK/check.txt"
for lib in /opt/ncclenv/nccl-*/nvidia/nccl/lib/libnccl.so.2; do
  [ -f "$lib" ] || continue
  ver=$(basename "$(dirname "$(dirname "$(dirname "$(dirname "$lib")")")")")
  ip netns exec "$NS" env NCCLENV_LOG=off NCCLENV_CHECK_HELPER="$HELPER" NCCLENV_NCCL_LIB="$lib" \
    hyperfine -N -w 3 -r 30 --export-json "$WORK/check-$ver.json" "$BIN check bootstrap" >/dev/null 2>&1 \
    && echo "$ver $WORK/check-$ver.json" >> "$WORK/check.txt"
done
ARM=$TARGET_DIR/aarch64-unknown-linux-musl/release/ncclenv

python3 - "$WORK" "$BIN" "$ARM" "${LAYOUTS[@]}" <<'EOF'
import json, os, sys
work, binary, arm, layouts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
print(f"ncclenv start-up cost (hyperfine, side by side; times are means, 'adds' = minus /bin/true alone)")
print(f"{'layout':<10} {'true ms':>8} {'shim adds':>10} {'ncclenv adds':>13} {'recipe adds':>12} {'ncclenv/shim':>13} {'ncclenv/recipe':>15} {'peak RSS':>9} {'shim RSS':>9}")
for l in layouts:
    r = {x["command"]: x for x in json.load(open(f"{work}/{l}.json"))["results"]}
    base = r["true"]["mean"]
    add = {k: (r[k]["mean"] - base) * 1e3 for k in ("shim", "ncclenv", "recipe")}
    rss = open(f"{work}/{l}.rss").read().strip()
    rss0 = open(f"{work}/{l}.rss0").read().strip()
    print(f"{l:<10} {base*1e3:>8.3f} {add['shim']:>10.3f} {add['ncclenv']:>13.3f} {add['recipe']:>12.3f} "
          f"{add['ncclenv']/add['shim']:>12.2f}x {add['ncclenv']/add['recipe']:>14.3f}x {rss:>6} KiB {rss0:>5} KiB")
    if "baseline" in r:
        b = (r["baseline"]["mean"] - base) * 1e3
        print(f"{'':<10} baseline adds {b:.3f} ms; ncclenv/baseline {add['ncclenv']/b:.3f}x")
for path in (binary, arm):
    if os.path.exists(path):
        print(f"binary: {path} {os.path.getsize(path)} bytes ({os.path.getsize(path)/1048576:.2f} MiB)")
for line in open(f"{work}/check.txt"):
    ver, path = line.split()
    r = json.load(open(path))["results"][0]
    print(f"bootstrap check to verdict ({ver}): mean {r['mean']*1e3:.1f} ms, max {r['max']*1e3:.1f} ms")
EOF

if [ -n "${PREFLIGHT_COUNTS-3 24 500}" ]; then
  # shellcheck disable=SC2086 # a list of counts
  NCCLENV_BIN="$BIN" RUNS=5 bash scripts/bench-preflight.sh ${PREFLIGHT_COUNTS-3 24 500}
fi
