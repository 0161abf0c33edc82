#!/usr/bin/env bash
# Print `ncclenv doctor` on three layouts built in throwaway network namespaces (the README's samples):
#   1. F1  Docker bridge: eth0 172.17.0.2/16 with the default route.
#   2. F7  inherited NCCL_SOCKET_IFNAME=bond0 beside macvlan children bond0.2973 and bond0.2973.1.
#   3. F14 host network with a RoCE HCA visible in sysfs (a fake tree) but no /dev/infiniband.
# usage: sudo scripts/doctor-samples.sh [path/to/ncclenv]      (root: network namespaces)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/debug/ncclenv}
[ -x "$BIN" ] || cargo build -q --bin ncclenv
T=$(mktemp -d /tmp/ncclenv-doctor.XXXXXX)
NS=ncdoc$$; P=ncdocp$$
cleanup() { ip netns del "$NS" 2>/dev/null || true; ip netns del "$P" 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT
fresh() {
  cleanup; mkdir -p "$T/sys" "$T/dev"
  ip netns add "$NS"; ip netns add "$P"; ip -n "$NS" link set lo up
  ip netns exec "$NS" sysctl -qw net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.accept_dad=0
}
plug() { # name cidr
  ip link add "$1" netns "$NS" type veth peer name "p-$1" netns "$P"
  ip -n "$P" link set "p-$1" up; ip -n "$NS" link set "$1" up; ip -n "$NS" addr add "$2" dev "$1"
}
doctor() {
  echo "\$ $* ncclenv doctor"
  ip netns exec "$NS" env -i PATH=/usr/bin:/bin NCCLENV_SYSFS="$T/sys" NCCLENV_DEVFS="$T/dev" "$@" "$BIN" doctor || echo "(exit $?)"
  echo
}
sleep_until_running() { for _ in $(seq 50); do ip -n "$NS" -o link | grep -q "LOWER_UP" && return; sleep 0.1; done; }

fresh; plug eth0 172.17.0.2/16; ip -n "$NS" route add default via 172.17.0.1; sleep_until_running
doctor

fresh; plug bond0 10.42.0.11/27; ip -n "$NS" route add default via 10.42.0.1
ip -n "$NS" link add bond0.2973 link bond0 type macvlan mode bridge; ip -n "$NS" link set bond0.2973 up
ip -n "$NS" addr add 10.0.106.11/16 dev bond0.2973; sleep_until_running
doctor NCCL_SOCKET_IFNAME=bond0

fresh; plug bond0 10.200.93.11/24; ip -n "$NS" route add default via 10.200.93.1; sleep_until_running
port=$T/sys/class/infiniband/mlx5_bond_0/ports/1
mkdir -p "$port/gids" "$port/gid_attrs/types" "$port/gid_attrs/ndevs"
echo "4: ACTIVE" > "$port/state"; echo "5: LinkUp" > "$port/phys_state"; echo Ethernet > "$port/link_layer"
echo "25 Gb/sec (1X EDR)" > "$port/rate"; echo "fe80:0000:0000:0000:0a5c:12ff:fe34:5678" > "$port/gids/0"
echo "RoCE v2" > "$port/gid_attrs/types/0"; echo bond0 > "$port/gid_attrs/ndevs/0"
doctor CUDA_VISIBLE_DEVICES=0,1,2,3
