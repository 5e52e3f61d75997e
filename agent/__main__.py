"""``python -m agent``: ``fleetdeck agent`` without its defaults (pass --token and --state-dir).

It reads no environment and picks no folder: that is the composition root's job. It stays for
the SSH forced command of a cross-server copy, ``python -m agent receive <id> --state-dir DIR``,
which must not load more than the agent.
"""

import sys

from agent.cli import main

raise SystemExit(main(sys.argv[1:]))
