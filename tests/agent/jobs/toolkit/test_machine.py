"""The machine's readers (`agent.jobs.toolkit.machine`) on recorded output
(tests/data/tool_output/)."""

from __future__ import annotations

from pathlib import Path

from agent.jobs.toolkit.machine import meminfo
from tests.helpers.recorded_systemd import RECORDED

# --- /proc and /etc files --------------------------------------------------------------------------


def test_meminfo_in_bytes_and_used_memory() -> None:
    memory = meminfo(str(RECORDED / "proc_meminfo.txt"))
    assert memory == {
        "total": 8142404 * 1024,
        "free": 512344 * 1024,
        "available": 4123456 * 1024,
        "buffers": 102400 * 1024,
        "cached": 3000000 * 1024,
        "swap_total": 2097148 * 1024,
        "swap_free": 2097148 * 1024,
        "used": (8142404 - 4123456) * 1024,
    }


def test_meminfo_without_available_memory_has_no_used_figure(tmp_path: Path) -> None:
    old = tmp_path / "meminfo"
    old.write_text("MemTotal:        1024 kB\nMemFree: x kB\nOdd line\n")
    assert meminfo(str(old)) == {"total": 1024 * 1024}
