"""``python -m firmware_sim``: see :mod:`firmware_sim.cli`."""

import sys

from .cli import main

sys.exit(main())
