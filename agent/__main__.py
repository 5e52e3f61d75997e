"""``python -m agent``: the same as ``fleetdeck agent``."""

import sys

from agent.cli import main

raise SystemExit(main(sys.argv[1:]))
