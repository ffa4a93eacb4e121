"""`codefy kernel-setup`: put the IPython startup file that loads `%codefy` into a profile.

IPython runs every file in `<profile>/startup/` when a shell or kernel of that profile starts. The
file (kernels/ipython_startup/00-codefy.py in the repository; a test keeps the two identical) loads
the extension only where codefy-jupyter can be imported, so kernels of other environments that
share the profile start as usual.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

FILE_NAME = "00-codefy.py"
STARTUP_CODE = '''\
# codefy-jupyter: load the %codefy magics in every IPython shell and kernel of this profile,
# wherever codefy-jupyter is installed (an environment without it starts as usual).
# `codefy kernel-setup` copies this file into the profile's startup folder.
def _codefy_load() -> None:
    try:
        import codefy_jupyter  # noqa: F401
    except ImportError:
        return
    get_ipython().extension_manager.load_extension("codefy_jupyter")  # noqa: F821 - IPython's global


_codefy_load()
del _codefy_load
'''


def startup_dir(profile: str = "default", ipython_dir: str | None = None) -> Path:
    """The profile's startup folder ($IPYTHONDIR, else ~/.ipython), created when missing."""
    from IPython.core.profiledir import ProfileDir
    from IPython.paths import get_ipython_dir

    return Path(ProfileDir.create_profile_dir_by_name(ipython_dir or get_ipython_dir(), profile).startup_dir)


def install(profile: str = "default", ipython_dir: str | None = None) -> Path:
    path = startup_dir(profile, ipython_dir) / FILE_NAME
    path.write_text(STARTUP_CODE, encoding="utf-8")
    return path


def uninstall(profile: str = "default", ipython_dir: str | None = None) -> Path | None:
    path = startup_dir(profile, ipython_dir) / FILE_NAME
    if not path.exists():
        return None
    path.unlink()
    return path


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("kernel-setup", help="load %%codefy in every IPython kernel of a profile",
                       description="Install the IPython startup file that loads the %codefy magics in every "
                       "shell and kernel of an IPython profile (in <IPYTHONDIR>/profile_<name>/startup/).")
    p.add_argument("--profile", default="default", help="the IPython profile (default: default)")
    p.add_argument("--remove", action="store_true", help="remove the startup file instead")


def command(args: argparse.Namespace) -> int:
    try:
        if args.remove:
            path = uninstall(args.profile)
            print(f"removed {path}" if path else f"nothing to remove: no {FILE_NAME} in profile {args.profile!r}")
            return 0
        path = install(args.profile)
    except ImportError:
        print("error: kernel-setup needs IPython in this environment (pip install ipykernel)", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"error: cannot write the startup file: {err}", file=sys.stderr)
        return 1
    print(f"installed {path}\n  new IPython shells and kernels of profile {args.profile!r} load %codefy; "
          "`codefy kernel-setup --remove` undoes it")
    return 0
