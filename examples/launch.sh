#!/usr/bin/env bash
# An existing launch script that keeps its own structure and asks ncclenv only for the NCCL variables.
# `ncclenv env` prints `export NAME='value'` lines (each decision is logged on stderr with its reason); when
# ncclenv refuses (exit 78: e.g. a 2-node job in a container with no network) it prints a line that makes
# this script stop there with exit 78 instead of hanging in NCCL's bootstrap.
#
#   MASTER_ADDR=10.0.0.1 NNODES=2 NODE_RANK=0 examples/launch.sh train.py --epochs 3
#   examples/launch.sh --print-env        # show what the job would get, then stop
set -euo pipefail

: "${MASTER_ADDR:=127.0.0.1}" "${MASTER_PORT:=29500}" "${NNODES:=1}" "${NODE_RANK:=0}" "${NPROC_PER_NODE:=8}"
export MASTER_ADDR MASTER_PORT

# Tell ncclenv about the job the way the launcher will see it: the peer, and the number of nodes.
export NCCLENV_PEER="$MASTER_ADDR" NCCLENV_NNODES="$NNODES"
eval "$(ncclenv env)"

if [ "${1:-}" = "--print-env" ]; then
  env | grep -E '^(NCCL_[A-Z0-9_]*|GLOO_SOCKET_IFNAME|TP_SOCKET_IFNAME|POD_IP)=' | sort
  exit 0
fi

exec torchrun --nnodes="$NNODES" --node-rank="$NODE_RANK" --nproc-per-node="$NPROC_PER_NODE" \
  --master-addr="$MASTER_ADDR" --master-port="$MASTER_PORT" "$@"
