"""Job output in the control plane as runs of lines, never as one object per line.

A `Run` is consecutive lines that share a stream and a time: ``seq`` of the first, ``stream``,
``at`` and the texts. The agent sends runs (``"runs": true``); they are masked, kept in memory,
stored and turned into SSE a run at a time, so the control plane spends no Python work (and
makes no garbage-collected object) per line beyond formatting its event. 200,000 line objects
cost it more in decoding and in garbage-collector passes over them than everything else
together (0.95 s against 0.65 s with the collector held off, measured).

The SSE of a run is exactly what encoding each line on its own gave: ``id: seq``, ``event:
line``, ``data: {"seq", "stream", "text", "at"}`` (orjson, in that key order). The texts are
encoded by one ``orjson.dumps`` of their list and cut apart at ``","``: orjson writes compact
JSON and escapes every quote inside a string, so that sequence only ever separates two items.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import count
from typing import Any

import orjson

STREAMS = frozenset({"stdout", "stderr"})


class BadOutput(ValueError):
    """Items that are not job output (from an agent that breaks the job protocol)."""


class Run:
    """Lines ``seq``, ``seq + 1``, … of one stream, written at the same time."""

    __slots__ = ("at", "seq", "stream", "texts")

    def __init__(self, seq: int, stream: str, at: str, texts: list[str]) -> None:
        self.seq = seq
        self.stream = stream
        self.at = at
        self.texts = texts

    def __repr__(self) -> str:
        return f"Run({self.seq}, {self.stream!r}, {self.at!r}, {len(self.texts)} lines)"

    @property
    def last_seq(self) -> int:
        return self.seq + len(self.texts) - 1

    def after(self, seq: int) -> Run:
        """This run without its lines up to `seq` (itself when none are cut)."""
        if seq < self.seq:
            return self
        return Run(seq + 1, self.stream, self.at, self.texts[seq + 1 - self.seq :])

    def head(self, count: int) -> Run:
        """The first `count` lines of this run."""
        return self if count >= len(self.texts) else Run(self.seq, self.stream, self.at, self.texts[:count])

    def wire(self) -> dict[str, Any]:
        """The run as the agent sends it and the store keeps it."""
        return {"seq": self.seq, "stream": self.stream, "at": self.at, "texts": self.texts}

    def lines(self) -> list[dict[str, Any]]:
        """One ``{"seq", "stream", "text", "at"}`` per line (for tests and small outputs)."""
        return [
            {"seq": seq, "stream": self.stream, "text": text, "at": self.at}
            for seq, text in zip(range(self.seq, self.seq + len(self.texts)), self.texts, strict=True)
        ]

    def sse(self) -> bytes:
        """The `line` events of this run."""
        texts = self.texts
        parts = orjson.dumps(texts)[2:-2].split(b'","')
        if len(parts) != len(texts):  # cannot happen for a list of strings; never send a wrong cut
            parts = [orjson.dumps(text)[1:-1] for text in texts]
        stream = orjson.dumps(self.stream).replace(b"%", b"%%")
        at = orjson.dumps(self.at).replace(b"%", b"%%")
        template = b'id: %d\nevent: line\ndata: {"seq":%d,"stream":' + stream + b',"text":"%s","at":' + at + b"}\n\n"
        return b"".join([template % (seq, seq, part) for seq, part in zip(count(self.seq), parts)])

    def masked(self, mask: Callable[[list[str]], list[str]]) -> Run:
        return Run(self.seq, self.stream, self.at, mask(self.texts))


def sse(runs: Iterable[Run]) -> bytes:
    return b"".join([run.sse() for run in runs])


def line_count(runs: Iterable[Run]) -> int:
    return sum(len(run.texts) for run in runs)


def from_items(items: list[Any], after: int) -> list[Run]:
    """Agent items as runs, without the lines up to `after` (already received) and in order.

    Takes run items ``{"seq", "stream", "at", "texts"}`` and, from an agent that predates them,
    line items ``{"seq", "stream", "text", "at"}`` (consecutive ones joined into runs). Raises
    `BadOutput` for anything else.
    """
    runs: list[Run] = []
    for item in items:
        if not isinstance(item, dict):
            raise BadOutput("a job output item is not an object")
        seq, stream, at = item.get("seq"), item.get("stream"), item.get("at")
        texts = item["texts"] if "texts" in item else [item.get("text")]
        if type(seq) is not int or seq < 1 or stream not in STREAMS or type(at) is not str:
            raise BadOutput("a job output item has a bad seq, stream or at")
        if type(texts) is not list or not texts or set(map(type, texts)) != {str}:
            raise BadOutput("a job output item has bad texts")
        run = Run(seq, stream, at, texts)
        if run.last_seq <= after:
            continue  # sent again after a re-attach
        run = run.after(after)
        after = run.last_seq
        last = runs[-1] if runs else None
        if "texts" not in item and last is not None and (last.last_seq + 1, last.stream, last.at) == (seq, stream, at):
            last.texts.append(texts[0])  # an older agent's line items, joined into runs again
            continue
        runs.append(run)
    return runs


def chunks(runs: list[Run], size: int) -> list[list[Run]]:
    """The runs cut into consecutive groups of at most `size` lines (a run may be split)."""
    groups: list[list[Run]] = []
    group: list[Run] = []
    room = size
    for run in runs:
        while len(run.texts) > room:
            group.append(run.head(room))
            groups.append(group)
            run = run.after(run.seq + room - 1)
            group, room = [], size
        if run.texts:
            group.append(run)
            room -= len(run.texts)
        if room == 0:
            groups.append(group)
            group, room = [], size
    if group:
        groups.append(group)
    return groups
