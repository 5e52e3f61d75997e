"""`python -m tui`: the same as the `fleetdeck` command."""

import sys

from .cli import main

sys.exit(main())
