#!/usr/bin/env bash
# Install the pinned DeepSpeed and the PyTorch it needs into their own virtual environment for the real
# `deepspeed` CLI test (tests/it/launcher_forms.rs, deepspeed_real_runner_copies_no_node_local_value):
#   $NCCLENV_TEST_DEEPSPEED_ROOT/deepspeed-<ver> (default /opt/ncclenv/deepspeed-0.19.8), python from $PYTHON.
# DeepSpeed's runner needs torch to import; torch's Linux wheel on PyPI pulls its CUDA libraries (about 5 GiB
# installed, no GPU needed: DeepSpeed picks its CPU accelerator, or the CUDA one under DS_ACCELERATOR=cuda).
# The folder is a cache: when it is complete (stamp file) and `import deepspeed, torch` gives the pinned
# versions, nothing is downloaded. The stamp is written last, so an interrupted install is redone.
set -euo pipefail
ROOT="${NCCLENV_TEST_DEEPSPEED_ROOT:-/opt/ncclenv}"
VERSION="${NCCLENV_TEST_DEEPSPEED_VERSION:-0.19.8}"
TORCH="${NCCLENV_TEST_TORCH_VERSION:-2.15.0}"
PYTHON="${PYTHON:-python3}"
dest="$ROOT/deepspeed-$VERSION"
stamp="$dest/.ncclenv-installed"
imports() {
  "$dest/bin/python" -c "import sys, torch, deepspeed; sys.exit(deepspeed.__version__ != '$VERSION' or not torch.__version__.startswith('$TORCH'))" >/dev/null 2>&1
}
if [ -f "$stamp" ] && imports; then
  echo "deepspeed $VERSION: already installed in $dest"
  exit 0
fi
echo "deepspeed $VERSION (torch $TORCH): installing into $dest ($("$PYTHON" --version 2>&1))"
rm -rf "$dest"
mkdir -p "$ROOT"
"$PYTHON" -m venv "$dest"
"$dest/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir \
  "torch==$TORCH" "deepspeed==$VERSION"
if ! imports; then
  echo "deepspeed $VERSION: installed, but 'import torch, deepspeed' fails:" >&2
  "$dest/bin/python" -c "import torch, deepspeed; print(torch.__version__, deepspeed.__version__)" >&2 || true
  exit 1
fi
touch "$stamp"
echo "deepspeed $VERSION: done"
