#!/usr/bin/env bash
# Install the pinned CPU wheel of PaddlePaddle into its own virtual environment for tests/it/paddle_e2e.rs:
#   $NCCLENV_TEST_PADDLE_ROOT/paddle-<ver> (default /opt/ncclenv/paddle-3.2.2), python from $PYTHON (python3).
# The folder is a cache (CI reruns on the same machine): when it is complete (stamp file) and its python
# imports paddle at the pinned version, nothing is downloaded. A venv hard-codes its own path, so it is built
# in place; the stamp is written last, so an interrupted install is redone.
set -euo pipefail
ROOT="${NCCLENV_TEST_PADDLE_ROOT:-/opt/ncclenv}"
VERSION="${NCCLENV_TEST_PADDLE_VERSION:-3.2.2}"
PYTHON="${PYTHON:-python3}"
dest="$ROOT/paddle-$VERSION"
stamp="$dest/.ncclenv-installed"
imports() {
  "$dest/bin/python" -c "import paddle, sys; sys.exit(paddle.__version__ != '$VERSION')" >/dev/null 2>&1
}
if [ -f "$stamp" ] && imports; then
  echo "paddle $VERSION: already installed in $dest"
  exit 0
fi
echo "paddle $VERSION: installing into $dest ($("$PYTHON" --version 2>&1))"
rm -rf "$dest"
mkdir -p "$ROOT"
"$PYTHON" -m venv "$dest"
"$dest/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir "paddlepaddle==$VERSION"
if ! imports; then
  echo "paddle $VERSION: installed, but 'import paddle' fails:" >&2
  "$dest/bin/python" -c "import paddle; print(paddle.__version__)" >&2 || true
  exit 1
fi
touch "$stamp"
echo "paddle $VERSION: done"
