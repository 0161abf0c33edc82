"""Worker for tests/it/paddle_e2e.rs, started by `python -m paddle.distributed.launch` on each "node".

Initialises Paddle's parallel environment (gloo on CPU), all-reduces rank + 1 and writes one JSON object to
$E2E_OUT_DIR/rank<R>.json: the sum and the variables this worker saw. Never prints the environment.
"""

import json
import os
import socket
import sys

SEEN = (
    "NCCL_SOCKET_IFNAME",
    "NCCL_SOCKET_FAMILY",
    "GLOO_SOCKET_IFNAME",
    "TP_SOCKET_IFNAME",
    "POD_IP",
    "PADDLE_CURRENT_ENDPOINT",
    "PADDLE_TRAINER_ENDPOINTS",
    "PADDLE_TRAINER_ID",
    "PADDLE_TRAINERS_NUM",
    "PADDLE_DISTRI_BACKEND",
)


def main():
    out_dir = os.environ["E2E_OUT_DIR"]
    import paddle
    import paddle.distributed as dist

    paddle.set_device("cpu")
    dist.init_parallel_env()
    rank = dist.get_rank()
    world = dist.get_world_size()
    x = paddle.to_tensor([float(rank + 1)], dtype="float32")
    dist.all_reduce(x)
    result = {
        "rank": rank,
        "world_size": world,
        "sum": float(x.numpy()[0]),
        "hostname": socket.gethostname(),
        "paddle": paddle.__version__,
        "env": {k: os.environ.get(k) for k in SEEN},
    }
    path = os.path.join(out_dir, f"rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(result, f)
    os.rename(path + ".tmp", path)
    print(f"rank {rank}/{world}: sum {result['sum']}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
