"""The C allocator's thresholds for a process that moves bulk bytes through Python.

Every chunk of a transfer is a fresh `bytes` object of up to a few MiB: received from a socket,
framed, masked, joined. glibc serves allocations above its mmap threshold (128 KiB at first,
raised as such blocks are freed) from fresh mappings, and gives freed memory at the top of its
heap back to the kernel beyond the trim threshold (twice that). Either way the next chunk lands
on pages the kernel has to fault in and zero again: 256 page faults per MiB, several times per
MiB relayed. Measured on a WebSocket sink of 256 MiB in 1 MiB messages: 440 MiB/s as glibc
starts, 880 to 980 MiB/s with the thresholds below; a streamed upload through the control plane
went from some 200 to 280 MiB/s (`benchmarks/files.py`).

`keep_buffers_mapped` raises the mmap threshold to its maximum (32 MiB on 64-bit) and keeps up to
64 MiB of freed heap: the few MiB a transfer has in flight are reused instead of remapped. What
stays mapped is bounded by that; a process's RSS still follows what it holds, not the size of
what it moved. The fleetdeck, control-plane and agent entry points call it once. It does nothing
on a C library without `mallopt` (musl, macOS) or when the environment sets glibc's own
``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` (the operator's choice stands).
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD = -1  # glibc's <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: larger is refused
TRIM_THRESHOLD = 64 * 1024 * 1024


def keep_buffers_mapped() -> bool:
    """Set the thresholds (see the module); whether they are in effect."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
