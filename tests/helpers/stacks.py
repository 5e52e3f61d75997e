"""Which `fleetdeck local` processes run on a data folder: a stack the TUI starts outlives it, so a
test that starts one must find and stop it, and the session checks none is left behind."""

from __future__ import annotations

from pathlib import Path

from fleetdeck import running


def stack_processes(under: Path) -> list[int]:
    """The live `fleetdeck local` processes whose data folder is `under` or inside it."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "fleetdeck" not in argv or "local" not in argv or "--data-dir" not in argv:
            continue
        data_dir = Path(argv[argv.index("--data-dir") + 1])
        if data_dir.is_relative_to(under) and running.process_lives(int(entry.name)):
            found.append(int(entry.name))
    return found


def stop_stacks(under: Path) -> list[int]:
    """Stop every stack still running on `under` or below it (SIGTERM, then SIGKILL); their pids."""
    left = stack_processes(under)
    for pid in left:
        running.terminate(pid, 15)
    return left
