"""Write environment.yml, the conda recipe, from requirements.txt: one list of pins for both.

    python tools/environment_yml.py           # rewrite environment.yml
    python tools/environment_yml.py --check   # exit 1 if environment.yml is not what it would write

conda brings Python 3.11 and the tools that Horovod's source build needs; every Python package,
Open MPI included, comes from PyPI with requirements.txt's pins (the same as `make env` and Binder),
and gan3d itself with them. Horovod cannot be in the same pip step, as its build imports the
TensorFlow that step installs: tools/finish_env.sh builds it next (see the file's first lines).
Standard library only, so that it runs before any environment exists.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HEADER = """\
# Conda environment of gan3d. Written by tools/environment_yml.py from requirements.txt: do not
# edit, change requirements.txt and run `python tools/environment_yml.py` (a test checks the two).
# conda brings Python 3.11 and Horovod's build tools; pip installs requirements.txt's pins (Open MPI
# from PyPI, as in `make env`) and gan3d itself. Two steps, from the repository's root:
#
#   conda env create -f environment.yml
#   conda run -n gan3d bash tools/finish_env.sh
#
# The second builds Horovod against this TensorFlow and Open MPI (its build imports TensorFlow, so
# it cannot share the first step's pip run) and registers the Jupyter kernel "gan3d".
"""

# conda's part: the interpreter and what compiles Horovod (CMake 3: 4 rejects Gloo's files).
CONDA = ["python=3.11", "pip", "cmake>=3.13,<4", "make", "cxx-compiler"]


def pins(text: str) -> list[str]:
    """The requirement lines of requirements.txt, comments and blank lines left out; each must be
    pinned with ==."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not name.strip() or not version.strip():
            raise SystemExit(f"requirements.txt: {line!r} is not pinned with ==")
        out.append(f"{name.strip()}=={version.strip()}")
    return out


def render(requirements: str) -> str:
    lines = [HEADER.rstrip("\n"), "name: gan3d", "channels:", "  - conda-forge", "dependencies:"]
    lines += [f'  - "{dep}"' if any(c in dep for c in "<>,") else f"  - {dep}" for dep in CONDA]
    lines += ["  - pip:"]
    lines += [f"      - {pin}" for pin in pins(requirements)]
    lines += ["      # gan3d itself, editable, like `make env` (its dependencies are the pins above)",
              "      - -e ."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="only check that environment.yml is up to date (exit 1 if not)")
    args = ap.parse_args(argv)
    want = render((root / "requirements.txt").read_text())
    path = root / "environment.yml"
    if args.check:
        if path.read_text() != want:
            print("environment.yml differs from requirements.txt's pins: "
                  "run `python tools/environment_yml.py`", file=sys.stderr)
            return 1
        return 0
    path.write_text(want)
    return 0


if __name__ == "__main__":
    sys.exit(main())
