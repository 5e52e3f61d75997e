"""WebSocket masking in C for wsproto, the protocol library under trio-websocket (the agent's
end of the link), hypercorn (the control plane's end of it and of the client's WebSockets) and
httpx-ws (the API client's streamed uploads).

RFC 6455 makes a client mask every frame it sends (XOR with a 4-byte key), so every byte of a
download crosses wsproto's pure-Python masker twice: masked by the agent, unmasked by the
control plane, at well under 1 GB/s each, the largest cost of a transfer; and every byte of a
streamed upload likewise, masked by the client, unmasked by the control plane. Each process
that speaks WebSocket through wsproto calls `install` once (the agent's link, the control
plane's app, the client's first WebSocket). `install` swaps in a
masker built on the C `apply_mask` of the `websockets` package (the same XOR, ~40x faster),
after checking that it gives wsproto's own result; without `websockets`, or with a wsproto
whose masker looks different, nothing changes.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("fleetdeck.link")

_installed = False
WSPROTO_MASKER: Any = None  # wsproto's own masker class, once `install` replaced it


class CMasker:
    """wsproto's `XorMaskerSimple` interface: `process` masks the next part of one payload,
    the key rotating so that parts continue where the previous part ended."""

    def __init__(self, masking_key: bytes | bytearray) -> None:
        self._masking_key = bytes(masking_key)

    def process(self, data: Any) -> bytes:
        if not data:
            return bytes(data)
        masked: bytes = _apply_mask(data, self._masking_key)
        rotation = len(data) % 4
        if rotation:
            self._masking_key = self._masking_key[rotation:] + self._masking_key[:rotation]
        return masked


def _apply_mask(data: Any, mask: bytes) -> bytes:  # replaced by install()
    raise RuntimeError("fastmask is not installed")


def install() -> bool:
    """Use `CMasker` in wsproto from now on (in this process); whether it is in use."""
    global _installed, _apply_mask, WSPROTO_MASKER
    if _installed:
        return True
    try:
        from websockets.speedups import apply_mask  # type: ignore[import-not-found,unused-ignore]
        from wsproto import frame_protocol
    except ImportError:
        return False
    simple = getattr(frame_protocol, "XorMaskerSimple", None)
    if simple is None or not callable(getattr(simple, "process", None)):
        return False
    _apply_mask = apply_mask
    sample, key = bytes(range(256)) * 41 + b"odd", b"\x8f\x01\xfe\x5a"
    reference, candidate = simple(key), CMasker(key)
    for part in (sample[:7], sample[7:1000], sample[1000:], b""):
        if bytes(reference.process(bytearray(part))) != candidate.process(bytearray(part)):
            log.warning("the C WebSocket masker disagrees with wsproto's: not used")
            return False
    frame_protocol.XorMaskerSimple = CMasker  # type: ignore[misc,assignment]
    WSPROTO_MASKER, _installed = simple, True
    return True
