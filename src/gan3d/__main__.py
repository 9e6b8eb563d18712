"""``python -m gan3d`` is the ``gan3d`` command (used by launchers that need an explicit Python)."""

import sys

from .cli import main

sys.exit(main())
