"""The ``gan3d`` command (``python -m gan3d`` too, for launchers that need an explicit Python).

:func:`main` first checks that the packages the command starts with are installed: in an
environment that lacks them (gan3d installed with ``--no-deps`` into a site's environment) it says
which to add instead of a traceback; ``gan3d doctor`` then lists the rest.
"""

import importlib.util
import sys

# Distributions the command needs before it can even parse its arguments (distribution, module).
_START = (("numpy", "numpy"), ("pyyaml", "yaml"), ("tqdm", "tqdm"), ("psutil", "psutil"))


def main() -> int:
    missing = [dist for dist, module in _START if importlib.util.find_spec(module) is None]
    if missing:
        print(f"gan3d: cannot start: {', '.join(missing)} not installed in {sys.prefix}; add "
              f"them (pip install {' '.join(missing)}), then run `gan3d doctor` for the rest",
              file=sys.stderr)
        return 2
    from .cli import main as command

    return command()


if __name__ == "__main__":
    sys.exit(main())
