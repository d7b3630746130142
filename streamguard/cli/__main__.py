"""``python -m streamguard.cli``."""

import sys

from . import main

sys.exit(main())
