#!/usr/bin/env bash
# Fleet preflight benchmark (NCCLENV_PREFLIGHT=1): N network namespaces as nodes on one bridge, all started at
# once with `ncclenv -- /bin/true` and `--master=<node 1>:29500 --nnodes=N`. Reports, per fleet size:
#   - the verdict time after the last node arrived (the master's own measure, from its log line), and
#   - the time until every node has exited, with the preflight and without it (the same start, side by side),
#     whose difference is what the preflight adds to a job's start.
# Node counts default to 3, 24 and 500: 500 is as many as a 2-core VM runs cleanly (at 1000 the one software
# bridge floods every ARP request to 1000 namespaces on 2 cores and ARP resolution times out; a bridge takes
# at most 1024 ports).
# The kernel's ARP table is one table for all network namespaces (net.ipv4.neigh.default.gc_thresh3, 1024
# by default): hundreds of namespace nodes overflow it ("neighbor table overflow", connections that fail with
# EHOSTUNREACH), which a real cluster of hosts never does. The script raises the thresholds for its run and
# restores them on exit.
#
# usage: sudo scripts/bench-preflight.sh [COUNTS...]
# env:   NCCLENV_BIN=path (default: builds target/x86_64-unknown-linux-musl/release/ncclenv)
#        RUNS=N (starts per count and mode, default 5)
#        KEEP=1 (keep every node's log in the work folder and print where)
set -euo pipefail
cd "$(dirname "$0")/.."
COUNTS=("$@"); [ ${#COUNTS[@]} -gt 0 ] || COUNTS=(3 24 500)
RUNS=${RUNS:-5}
[ "$(id -u)" = 0 ] || { echo "bench-preflight: needs root for network namespaces" >&2; exit 1; }
BIN=${NCCLENV_BIN:-}
if [ -z "$BIN" ]; then
  cargo build -q --release --target x86_64-unknown-linux-musl --bin ncclenv
  BIN=$PWD/target/x86_64-unknown-linux-musl/release/ncclenv
fi
WORK=$(mktemp -d /tmp/ncclenv-bench-pf.XXXXXX)
P=ncpf$$
SW=${P}sw
made=0
NEIGH=/proc/sys/net/ipv4/neigh/default
SAVED=$(cat $NEIGH/gc_thresh1 $NEIGH/gc_thresh2 $NEIGH/gc_thresh3 | tr '\n' ' ')
cleanup() {
  read -r t1 t2 t3 <<< "$SAVED"
  echo "$t3" > $NEIGH/gc_thresh3; echo "$t2" > $NEIGH/gc_thresh2; echo "$t1" > $NEIGH/gc_thresh1
  for ((i = 1; i <= made; i++)); do echo "netns del $P-$i"; done > "$WORK/del"
  if [ -s "$WORK/del" ]; then ip -batch "$WORK/del" 2>/dev/null || true; fi
  ip netns del "$SW" 2>/dev/null || true
  if [ -n "${KEEP:-}" ]; then echo "bench-preflight: logs kept in $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

max=0; for c in "${COUNTS[@]}"; do [ "$c" -gt "$max" ] && max=$c; done
need=$((16 * max + 1024))
if [ "$need" -gt "$(cat $NEIGH/gc_thresh3)" ]; then
  echo "$need" > $NEIGH/gc_thresh3; echo $((need * 3 / 4)) > $NEIGH/gc_thresh2; echo $((need / 2)) > $NEIGH/gc_thresh1
fi
ip netns add "$SW"
ip -n "$SW" link add br0 type bridge forward_delay 0
ip -n "$SW" link set br0 up

grow() { # add nodes made+1..$1: netns, a veth into the bridge, 10.(100+i/250).(i%250)… as /16
  local want=$1 f="$WORK/batch"
  [ "$want" -le "$made" ] && return 0
  : > "$f"; for ((i = made + 1; i <= want; i++)); do echo "netns add $P-$i"; done >> "$f"; ip -batch "$f"
  : > "$f"; for ((i = made + 1; i <= want; i++)); do
    echo "link add sw$i netns $SW type veth peer name eth0 netns $P-$i"; done >> "$f"; ip -batch "$f"
  : > "$f"; for ((i = made + 1; i <= want; i++)); do
    echo "link set sw$i master br0"; echo "link set sw$i up"; done >> "$f"; ip -n "$SW" -batch "$f"
  for ((i = made + 1; i <= want; i++)); do
    printf 'link set lo up\naddr add 10.77.%d.%d/16 dev eth0\nlink set eth0 up\n' $((i / 250)) $((i % 250 + 1)) \
      | ip -n "$P-$i" -batch -
  done
  made=$want
  sleep 1 # carrier and bridge ports settle
}

start_all() { # $1 N, $2 on|off, $3 run tag: every node at once; prints the seconds until all exited
  local n=$1 mode=$2 tag=$3 t0 t1
  local pf=0; [ "$mode" = on ] && pf=1
  t0=$(date +%s.%N)
  for ((i = 1; i <= n; i++)); do
    ip netns exec "$P-$i" env -i PATH=/usr/bin:/bin NCCLENV_PREFLIGHT=$pf NCCLENV_PREFLIGHT_TIMEOUT=120 \
      NCCLENV_SHM_MIN=0 "$BIN" -- /bin/true --master=10.77.0.2:29500 --nnodes="$n" 2> "$WORK/$tag.$i.err" &
  done
  wait
  t1=$(date +%s.%N)
  echo "$t0 $t1" | awk '{printf "%.4f\n", $2 - $1}'
}

: > "$WORK/results"
for n in "${COUNTS[@]}"; do
  grow "$n"
  for ((r = 1; r <= RUNS; r++)); do
    off=$(start_all "$n" off "off-$n-$r")
    on=$(start_all "$n" on "on-$n-$r")
    verdict=$(grep -ho 'verdict for [0-9]* of [0-9]* nodes, [0-9.]* ms after the last arrival: [a-z]*' \
      "$WORK/on-$n-$r.1.err" || echo "verdict missing")
    bad=$(cat "$WORK"/on-"$n"-"$r".*.err | grep -c "refused\|warning" || true)
    echo "$n $r $off $on $bad $verdict" >> "$WORK/results"
  done
done

python3 - "$WORK/results" "$BIN" <<'PY'
import re, statistics, sys, os
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    n, off, on, bad = int(f[0]), float(f[2]), float(f[3]), int(f[4])
    m = re.search(r"verdict for (\d+) of (\d+) nodes, ([\d.]+) ms", line)
    rows.setdefault(n, []).append((off, on, bad, float(m.group(3)) if m and m.group(1) == m.group(2) else None))
print("fleet preflight (all nodes started at once; 'all exited' = launch of the first to exit of the last)")
print(f"{'nodes':>5} {'runs':>4} {'verdict after last arrival ms (mean/max)':>41} {'all exited s, off':>18} {'on':>7} {'preflight adds s':>17} {'warnings':>9}")
for n, rs in rows.items():
    v = [r[3] for r in rs if r[3] is not None]
    off = statistics.mean(r[0] for r in rs); on = statistics.mean(r[1] for r in rs)
    vtxt = f"{statistics.mean(v):.1f} / {max(v):.1f}" if v else "missing"
    print(f"{n:>5} {len(rs):>4} {vtxt:>41} {off:>18.3f} {on:>7.3f} {on - off:>17.3f} {sum(r[2] for r in rs):>9}")
print(f"binary: {sys.argv[2]} {os.path.getsize(sys.argv[2])} bytes")
PY
