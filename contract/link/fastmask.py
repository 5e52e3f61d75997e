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

`install` also swaps in `lean_frame`, which builds the same frame as wsproto's
`FrameProtocol._serialize_frame` with two copies of the payload instead of eight (wsproto copies
it into bytearrays four times, and `Connection.send` once more into bytes): a megabyte frame of a
streamed upload is copied by the client, and by the control plane on to the agent. It is checked
against wsproto's own frames first (server frames byte for byte; client frames once unmasked with
their key), and frames of a connection with an extension (permessage-deflate) keep wsproto's code.
"""

from __future__ import annotations

import logging
import os
import struct
from typing import Any

log = logging.getLogger("fleetdeck.link")

_installed = False
WSPROTO_MASKER: Any = None  # wsproto's own masker class, once `install` replaced it
WSPROTO_SERIALIZE: Any = None  # wsproto's own `FrameProtocol._serialize_frame`, once replaced


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


def lean_frame(self: Any, opcode: Any, payload: bytes | bytearray = b"", fin: bool = True) -> bytes:
    """wsproto's `FrameProtocol._serialize_frame` for a connection without extensions: the same
    frame, as bytes (which `Connection.send` then passes on without copying it again)."""
    if self.extensions:
        return bytes(WSPROTO_SERIALIZE(self, opcode, payload, fin))
    length = len(payload)
    first = (0x80 if fin else 0) | int(opcode)
    mask_bit = 0x80 if self.client else 0
    if length <= 125:
        header = struct.pack("!BB", first, mask_bit | length)
    elif opcode.iscontrol():
        raise ValueError("payload too long for control frame")
    elif length <= 0xFFFF:
        header = struct.pack("!BBH", first, mask_bit | 126, length)
    else:
        header = struct.pack("!BBQ", first, mask_bit | 127, length)
    if not self.client:
        return b"".join((header, payload))
    key = os.urandom(4)  # RFC 6455 5.3: a fresh, unpredictable key per frame
    return b"".join((header, key, _apply_mask(payload, key) if payload else b""))


def _lean_frame_agrees() -> bool:
    """`lean_frame` builds wsproto's frames: the same bytes from a server, the same header and
    payload (once unmasked) from a client."""
    from wsproto.frame_protocol import FrameProtocol, Opcode

    for client in (False, True):
        protocol = FrameProtocol(client=client, extensions=[])
        for opcode, payload, fin in (
            (Opcode.BINARY, bytes(range(256)) * 300, True),
            (Opcode.TEXT, b'{"done": true}', True),
            (Opcode.BINARY, b"x" * 126, False),
            (Opcode.CONTINUATION, b"", True),
            (Opcode.PING, b"p", True),
        ):
            theirs = bytes(WSPROTO_SERIALIZE(protocol, opcode, payload, fin))
            ours = lean_frame(protocol, opcode, payload, fin)
            if client:
                at = len(theirs) - len(payload) - 4  # the key sits between header and payload
                unmasked = _apply_mask(ours[at + 4 :], ours[at : at + 4]) if payload else b""
                if ours[:at] != theirs[:at] or len(ours) != len(theirs) or unmasked != payload:
                    return False
            elif ours != theirs:
                return False
    return True


def install() -> bool:
    """Use `CMasker` in wsproto from now on (in this process); whether it is in use."""
    global _installed, _apply_mask, WSPROTO_MASKER, WSPROTO_SERIALIZE
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
    WSPROTO_SERIALIZE = frame_protocol.FrameProtocol._serialize_frame
    if _lean_frame_agrees():
        frame_protocol.FrameProtocol._serialize_frame = lean_frame  # type: ignore[method-assign,assignment]
    else:
        log.warning("wsproto frames differently than fastmask.lean_frame expects: its own framing kept")
    return True
