"""``python -m ncclenv ARGS``: replace this process with the installed ``ncclenv`` binary, as ``python -m ruff``
does, so that signals, the exit status and the environment are the binary's own (ncclenv then finds its
helper ``ncclenv-check`` beside itself)."""

import os
import sys

from ncclenv import find_ncclenv_bin


def main() -> None:
    """Exec the binary with this process's arguments (``sys.argv[1:]``); no return."""
    path = os.fsdecode(find_ncclenv_bin())
    os.execv(path, [path, *sys.argv[1:]])


if __name__ == "__main__":
    main()
