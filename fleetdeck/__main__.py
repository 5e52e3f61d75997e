"""`python -m fleetdeck`: the same as the `fleetdeck` command."""

import sys

from fleetdeck.cli import main

sys.exit(main())
