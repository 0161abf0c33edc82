"""ncclenv from pip: the wheel installs the binaries ``ncclenv`` (static) and ``ncclenv-check`` (glibc) as
scripts, on the environment's PATH; ``python -m ncclenv ARGS`` runs the first (``__main__``)."""

import os
import sys
import sysconfig


def find_ncclenv_bin() -> str:
    """The path of the ``ncclenv`` binary this package was installed with.

    Looked for where pip puts a wheel's ``.data/scripts`` files: the scripts folder of the install scheme
    (a venv's or the system's ``bin``), the user scheme's (``pip install --user``), and ``bin`` beside the
    package's folder (``pip install --target DIR``). Raises FileNotFoundError naming the first place.
    """
    name = "ncclenv" + (sysconfig.get_config_var("EXE") or "")
    places = [os.path.join(sysconfig.get_path("scripts"), name)]
    if sys.version_info >= (3, 10):
        user = sysconfig.get_preferred_scheme("user")
    else:
        user = "posix_user"
    places.append(os.path.join(sysconfig.get_path("scripts", scheme=user), name))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    places.append(os.path.join(root, "bin", name))
    for p in places:
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    raise FileNotFoundError(places[0])
