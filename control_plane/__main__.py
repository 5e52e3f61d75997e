import sys

from control_plane.cli import main

sys.exit(main(sys.argv[1:]))
