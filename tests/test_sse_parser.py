"""The client's bulk SSE parser: the SSE rules, and any split of the byte stream gives the same events."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from api_client.sse import Event, SSEParser

STREAM = (
    b"retry: 2000\nid: e:0\nevent: ready\ndata: {}\n\n"
    b": keep-alive\n\n"
    b'id: 1\nevent: line\ndata: {"seq":1,"text":"a"}\n\n'
    b'id: 2\nevent: line\ndata: {"seq":2,"text":"b: c"}\n\n'
    b"event: multi\ndata: [1,\ndata: 2]\n\n"
    b'data: "no name, keeps the last id"\n\n'
    b'id: 3\nevent: exit\ndata: {"exit_code":0}\n\n'
)

EXPECTED = [
    Event("ready", "e:0", {}),
    Event("line", "1", {"seq": 1, "text": "a"}),
    Event("line", "2", {"seq": 2, "text": "b: c"}),
    Event("multi", "2", [1, 2]),
    Event("message", "2", "no name, keeps the last id"),
    Event("exit", "3", {"exit_code": 0}),
]


def parse_in_pieces(data: bytes, cuts: list[int]) -> tuple[list[Event], SSEParser]:
    parser = SSEParser()
    events: list[Event] = []
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        events += parser.feed(data[start:cut])
        start = cut
    return events, parser


def test_whole_stream() -> None:
    events, parser = parse_in_pieces(STREAM, [])
    assert events == EXPECTED
    assert parser.retry_ms == 2000 and parser.last_event_id == "3"


def test_crlf_line_endings() -> None:
    events, _ = parse_in_pieces(STREAM.replace(b"\n", b"\r\n"), [7, 100])
    assert events == EXPECTED


@settings(max_examples=300)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split_gives_the_same_events(cuts: list[int]) -> None:
    assert parse_in_pieces(STREAM, cuts)[0] == EXPECTED


def test_many_canonical_events_in_one_chunk() -> None:
    lines = [
        {"seq": i, "stream": "stdout", "text": f"line {i}\twith tab", "at": "2026-11-22T00:00:00Z"} for i in range(5000)
    ]
    data = b"".join(b"id: %d\nevent: line\ndata: %s\n\n" % (line["seq"], orjson.dumps(line)) for line in lines)
    events, parser = parse_in_pieces(data, [len(data) // 3])
    assert [e.data for e in events] == lines and parser.last_event_id == "4999"


def test_bad_json_in_one_event_still_raises() -> None:
    parser = SSEParser()
    try:
        parser.feed(b'id: 1\nevent: line\ndata: {"ok":1}\n\nid: 2\nevent: line\ndata: {nope\n\n')
    except orjson.JSONDecodeError:
        return
    raise AssertionError("invalid JSON data was accepted")
