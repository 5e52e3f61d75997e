"""The client's bulk SSE parser: the SSE rules, and any split of the byte stream gives the same events."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api_client import Event, SSEParser

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
    assert SSEParser()._canonical(data) == events


def test_bad_json_in_one_event_still_raises() -> None:
    parser = SSEParser()
    try:
        parser.feed(b'id: 1\nevent: line\ndata: {"ok":1}\n\nid: 2\nevent: line\ndata: {nope\n\n')
    except orjson.JSONDecodeError:
        return
    raise AssertionError("invalid JSON data was accepted")


def reference(data: bytes) -> list[Event]:
    """The SSE specification, line by line (data decoded as JSON), to check the bulk parser by."""
    events: list[Event] = []
    name, lines, last_id = "", [], ""
    for line in data.decode().split("\n"):
        if not line:
            if lines:
                events.append(Event(name or "message", last_id, orjson.loads("\n".join(lines))))
            name, lines = "", []
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            name = value
        elif field == "data":
            lines.append(value)
        elif field == "id" and "\0" not in value:
            last_id = value
    return events


ID_TEXT = st.text(st.characters(blacklist_characters="\n\r\0", blacklist_categories=["Cs"]), min_size=1, max_size=8)
SCALARS = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text()
JSON = st.recursive(SCALARS, lambda x: st.lists(x) | st.dictionaries(st.text(), x), max_leaves=8)


@settings(max_examples=300)
@given(
    st.lists(st.tuples(ID_TEXT, ID_TEXT, JSON), min_size=1, max_size=30),
    st.lists(st.integers(min_value=0, max_value=10**4), max_size=5),
)
def test_canonical_blocks_of_any_ids_names_and_data_parse_as_the_specification_says(
    events: list[tuple[str, str, Any]], cuts: list[int]
) -> None:
    data = b"".join(
        b"id: %s\nevent: %s\ndata: %s\n\n" % (i.encode(), n.encode(), orjson.dumps(d)) for i, n, d in events
    )
    parsed, parser = parse_in_pieces(data, cuts)
    assert parsed == reference(data)
    assert parser.last_event_id == events[-1][0]
    assert SSEParser()._canonical(data) == parsed  # the bulk path took all of it


@pytest.mark.parametrize(
    "data",
    [
        b'id: a\\u006e\nevent: li\\u006ee\ndata: "x"\n\nid: "q"\nevent: "\ndata: 1\n\n',  # escapes stay as sent
        b"id: 1\nevent: line\ndata: 1,2\n\nid: 2\nevent: line\ndata: 3\n\n",  # two values on a data line
        b"id: 1\nevent: line\ndata: 1\n\n: keep-alive\n\nid: 2\nevent: line\ndata: 2\n\n",
        b"id: 1\nevent: line\ndata: 1\n\nid: 2\nevent: line\ndata: 2\nretry: 5\n\n",
        b"id: 1\nevent: line\ndata:1\n\nid:2\nevent:line\ndata: 2\n\n",  # no space after the colon
        b'id: 1\nevent: \xc3\xa9t\xc3\xa9\ndata: {"t":"\\u00e9"}\n\n',
    ],
)
def test_blocks_near_the_canonical_form(data: bytes) -> None:
    try:
        expected = reference(data)
    except orjson.JSONDecodeError:
        with pytest.raises(orjson.JSONDecodeError):
            parse_in_pieces(data, [])
        return
    assert parse_in_pieces(data, [])[0] == expected
