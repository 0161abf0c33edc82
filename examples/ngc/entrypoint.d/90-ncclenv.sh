# shellcheck shell=bash
# ncclenv as a part of NGC's entrypoint: copy to /opt/nvidia/entrypoint.d/90-ncclenv.sh and keep NVIDIA's
# ENTRYPOINT (examples/ngc/Dockerfile.entrypoint-d). /opt/nvidia/nvidia_entrypoint.sh (bash) sources each
# entrypoint.d/*.sh in name order in its own shell, so "$@" here is the container's command, and then runs
# `exec "$@"` (or `exec /bin/bash` when there is none, so `docker run -it IMG` gets the decision too).
#
# `ncclenv env -- COMMAND` reads the job's command (its launcher arguments) without running it and prints
# `export NAME='value'` lines, each decision logged on stderr with its reason; on a refusal it prints
# `exit 78`, which ends the entrypoint before the command starts. If ncclenv is missing or prints nothing,
# the command runs with the environment untouched. What only the `ncclenv --` entrypoint does (the fleet
# preflight, NCCLENV_CHECK) does not run from here.
if command -v ncclenv >/dev/null 2>&1; then
  _ncclenv_lines="$(ncclenv env -- "$@")" || true
  eval "$_ncclenv_lines"
  unset _ncclenv_lines
fi
