"""``python -m simulations``: see :mod:`simulations.cli`."""

from __future__ import annotations

import sys

from simulations.cli import main

if __name__ == "__main__":
    sys.exit(main())
