#!/usr/bin/env bash
# Write docs/doctor-samples.md: `ncclenv doctor` on three layouts built in throwaway network namespaces:
#   1. F1  Docker bridge: eth0 172.17.0.2/16 with the default route.
#   2. F7  inherited NCCL_SOCKET_IFNAME=bond0 beside a macvlan child bond0.2973.
#   3. F14 host network with a RoCE HCA visible in sysfs (a fake tree) but no /dev/infiniband.
#   4. F22 a Kubernetes RDMA pod given one of its two HCAs' verbs nodes, an inherited NCCL_IB_GID_INDEX.
# usage: sudo scripts/doctor-samples.sh [--stdout] [path/to/ncclenv]      (root: network namespaces, mounts)
#   --stdout   print the document instead of writing docs/doctor-samples.md (tests/it/doctor_schema.rs compares)
#
# The file is this script's output, never edited by hand. What would differ between machines is pinned here:
# the interfaces' MAC addresses (and so their fe80 addresses), /dev/shm (a private 1 GiB tmpfs in a mount
# namespace), RLIMIT_MEMLOCK (8 MiB, as Docker gives) without CAP_IPC_LOCK (Docker's default capability set;
# the F22 pod keeps root's, as a Kubernetes RDMA pod has it), and the fake sysfs/dev trees' temporary path,
# printed as /fake. What the script cannot pin, the GPU driver entry and the NCCL installations of the machine, the
# test leaves out of its comparison.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=docs/doctor-samples.md
if [ "${1:-}" = "--stdout" ]; then OUT=/dev/stdout; shift; fi
BIN=${1:-${CARGO_TARGET_DIR:-target}/debug/ncclenv}
[ -x "$BIN" ] || cargo build -q --bin ncclenv
BIN=$(realpath "$BIN")
T=$(mktemp -d /tmp/ncclenv-doctor.XXXXXX)
NS=ncdoc$$; P=ncdocp$$
cleanup() { ip netns del "$NS" 2>/dev/null || true; ip netns del "$P" 2>/dev/null || true; }
trap 'cleanup; rm -rf "$T"' EXIT
fresh() {
  cleanup; rm -rf "${T:?}/sys" "${T:?}/dev"; mkdir -p "$T/sys" "$T/dev"
  ip netns add "$NS"; ip netns add "$P"; ip -n "$NS" link set lo up
  ip netns exec "$NS" sysctl -qw net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.accept_dad=0
}
plug() { # name mac cidr
  ip link add "$1" address "$2" netns "$NS" type veth peer name "p-$1" netns "$P"
  ip -n "$P" link set "p-$1" up; ip -n "$NS" link set "$1" up; ip -n "$NS" addr add "$3" dev "$1"
}
settle() { # every interface but lo RUNNING and with its fe80 address
  for _ in $(seq 200); do
    local n_up n_ll
    n_up=$(ip -n "$NS" -o link show | grep -v ' lo:' | grep -c 'LOWER_UP' || true)
    n_ll=$(ip -n "$NS" -o -6 addr show scope link | wc -l)
    [ "$n_up" -gt 0 ] && [ "$n_up" = "$n_ll" ] && return
    sleep 0.05
  done
  echo "doctor-samples: the layout did not settle" >&2; exit 1
}
CAPS=(setpriv --bounding-set -ipc_lock)
doctor() { # VAR=value… : one sample, as the reader would type it
  echo '```text'
  echo "\$ ${*:+$* }ncclenv doctor"
  ip netns exec "$NS" unshare -m --propagation private sh -c \
    'mount -t tmpfs -o size=1g ncclenv-shm /dev/shm && exec "$@"' sh \
    prlimit --memlock=8388608:8388608 "${CAPS[@]}" \
    env -i PATH=/usr/bin:/bin NCCLENV_SYSFS="$T/sys" NCCLENV_DEVFS="$T/dev" "$@" "$BIN" doctor \
    | sed "s|$T|/fake|g" || echo "(exit $?)"
  echo '```'
}

{
cat <<'EOF'
# `ncclenv doctor` samples

Written by `sudo scripts/doctor-samples.sh` (do not edit by hand: `tests/it/doctor_schema.rs` fails when this file
and the script's output differ; rerun the script after changing what doctor prints). Each sample is a
throwaway network namespace; the fake sysfs and dev trees are shown as `/fake`; `/dev/shm` is a private 1 GiB
tmpfs and memlock 8 MiB without `CAP_IPC_LOCK` (the F22 pod keeps it), as the script sets them. Exit status: 0
NCCL should work, 1 a warning applies, 78 ncclenv would refuse.

## F1: a Docker bridge

`eth0` 172.17.0.2/16 with the default route: ncclenv exports its choice and the companions.

EOF
fresh; plug eth0 02:42:ac:11:00:02 172.17.0.2/16; ip -n "$NS" route add default via 172.17.0.1; settle
doctor
cat <<'EOF'

## F7: an inherited prefix that also matches a VLAN child

`bond0` with the default route and a macvlan child `bond0.2973`; the image sets `NCCL_SOCKET_IFNAME=bond0`,
which NCCL reads as a prefix: kept, with a warning (NET/Socket would stripe over both).

EOF
fresh; plug bond0 02:00:0a:2a:00:0b 10.42.0.11/27; ip -n "$NS" route add default via 10.42.0.1
ip -n "$NS" link add bond0.2973 link bond0 address 02:00:0a:00:6a:0b type macvlan mode bridge
ip -n "$NS" link set bond0.2973 up; ip -n "$NS" addr add 10.0.106.11/16 dev bond0.2973; settle
doctor NCCL_SOCKET_IFNAME=bond0
cat <<'EOF'

## F14: a RoCE HCA without its verbs device nodes

Host network, `bond0` with the default route; sysfs shows an ACTIVE RoCE port whose GID is bound to `bond0`,
but the container has no `/dev/infiniband`: NCCL would silently fall back to sockets.

EOF
fresh; plug bond0 02:00:0a:c8:5d:0b 10.200.93.11/24; ip -n "$NS" route add default via 10.200.93.1; settle
port=$T/sys/class/infiniband/mlx5_bond_0/ports/1
mkdir -p "$port/gids" "$port/gid_attrs/types" "$port/gid_attrs/ndevs"
echo "4: ACTIVE" > "$port/state"; echo "5: LinkUp" > "$port/phys_state"; echo Ethernet > "$port/link_layer"
echo "25 Gb/sec (1X EDR)" > "$port/rate"; echo "fe80:0000:0000:0000:0a5c:12ff:fe34:5678" > "$port/gids/0"
echo "RoCE v2" > "$port/gid_attrs/types/0"; echo bond0 > "$port/gid_attrs/ndevs/0"
doctor CUDA_VISIBLE_DEVICES=0,1,2,3
cat <<'EOF'

## F22: a device plugin admitted one of two HCAs

A Kubernetes RDMA pod (root with `CAP_IPC_LOCK`): `eth0` with the default route, Multus `net1` and `net2`;
sysfs shows `erdma_0` and `erdma_1`, ACTIVE RoCE ports with their GIDs on `net1`/`net2`, but only `erdma_0`'s
verbs node is in the container. The image also forces `NCCL_IB_GID_INDEX=2`, a RoCE v1 entry. See
docs/rdma-shm.md.

EOF
fresh; plug eth0 02:00:0a:f4:02:05 10.244.2.5/24; ip -n "$NS" route add default via 10.244.2.1
plug net1 02:00:0a:0a:00:05 10.10.0.5/24; plug net2 02:00:0a:14:00:05 10.20.0.5/24; settle
for i in 0 1; do
  net=net$((i + 1)); port=$T/sys/class/infiniband/erdma_$i/ports/1; map=$T/sys/class/infiniband_verbs/uverbs$i
  mkdir -p "$port/gids" "$port/gid_attrs/types" "$port/gid_attrs/ndevs" "$map"
  echo "4: ACTIVE" > "$port/state"; echo "5: LinkUp" > "$port/phys_state"; echo Ethernet > "$port/link_layer"
  echo "100 Gb/sec (4X EDR)" > "$port/rate"; echo "erdma_$i" > "$map/ibdev"
  for g in 0 1 2 3 4 5 6 7; do echo "0000:0000:0000:0000:0000:0000:0000:0000" > "$port/gids/$g"; done
  ll=fe80:0000:0000:0000:0a5c:12ff:fe34:567$i
  v4=0000:0000:0000:0000:0000:ffff:$([ "$i" = 0 ] && echo 0a0a || echo 0a14):0005
  gid() { echo "$2" > "$port/gids/$1"; echo "$3" > "$port/gid_attrs/types/$1"; echo "$net" > "$port/gid_attrs/ndevs/$1"; }
  gid 0 "$ll" "IB/RoCE v1"; gid 1 "$ll" "RoCE v2"; gid 2 "$v4" "IB/RoCE v1"; gid 3 "$v4" "RoCE v2"
done
# A node that opens read-write (/dev/null's numbers) for erdma_0 only.
mkdir -p "$T/dev/infiniband"; mknod "$T/dev/infiniband/uverbs0" c 1 3; mknod "$T/dev/infiniband/rdma_cm" c 1 3
CAPS=()
doctor CUDA_VISIBLE_DEVICES=0,1 NCCL_IB_GID_INDEX=2
} > "$T/doc.md"
if [ "$OUT" = /dev/stdout ]; then cat "$T/doc.md"; else cp "$T/doc.md" "$OUT"; fi
