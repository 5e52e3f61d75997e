"""A hostile user's race, as the tests run it: folders exchanged with a link to elsewhere, back and
forth (``renameat2(RENAME_EXCHANGE)``, atomic), in a thread, while the code under test walks them.
At any moment a victim's name is the folder or the link, each about half the time."""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from pathlib import Path

_libc = ctypes.CDLL(None, use_errno=True)
RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> bool:
    """Swap two names atomically (renameat2 RENAME_EXCHANGE)."""
    return bool(_libc.renameat2(-100, os.fsencode(a), -100, os.fsencode(b), RENAME_EXCHANGE) == 0)


class Flipper:
    """Swaps each folder in `victims` with a link to `target` (atomically, back and forth) in a
    thread, from entering the context to leaving it; `flips` counts the swaps done."""

    def __init__(self, victims: list[Path], target: Path) -> None:
        self.victims = victims
        self.target = target
        self.stop = threading.Event()
        self.flips = 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        for victim in victims:
            os.symlink(target, self.swap(victim))

    @staticmethod
    def swap(victim: Path) -> Path:
        return victim.with_name(victim.name + ".swap")

    def run(self) -> None:
        while not self.stop.is_set():
            for victim in self.victims:
                if exchange(victim, self.swap(victim)):
                    self.flips += 1

    def __enter__(self) -> Flipper:
        # Switch threads as often as possible, so swaps land between the walker's steps.
        self.interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)
        sys.setswitchinterval(self.interval)
