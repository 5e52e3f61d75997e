"""Job output as runs in the control plane: the same SSE bytes, storage and resume as line objects."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from api_client import SSEParser
from control_plane.jobs import lines, store
from control_plane.jobs.lines import BadOutput, Run
from control_plane.jobs.runner import LiveJob, output_size
from control_plane.storage.schema import job_output, jobs, metadata


def line_event(line: dict[str, Any]) -> bytes:
    """The SSE of one line as the contract spells it (how each line used to be encoded)."""
    return b"id: %d\nevent: line\ndata: %s\n\n" % (line["seq"], orjson.dumps(line))


ODD_TEXTS = ["", '"', '","', '\\","\\', "a\\", "\\", "%s %d %%", "tab\tnul\0", "é ü 雪 🎉", "\u2028", " ", "}\n\n"]


def test_the_sse_of_a_run_is_that_of_its_lines_one_by_one() -> None:
    for texts in ([t] for t in ODD_TEXTS), [ODD_TEXTS], [ODD_TEXTS[::-1] * 3]:
        for chunk in texts:
            run = Run(41, "stderr", '2026-11-22T10:00:00.001Z"%d', chunk)
            assert run.sse() == b"".join(map(line_event, run.lines()))
            events = SSEParser().feed(run.sse())
            assert [e.data for e in events] == run.lines() and [e.id for e in events] == [
                str(s) for s in range(41, 41 + len(chunk))
            ]


@given(st.lists(st.text(), min_size=1, max_size=20), st.integers(1, 10**9), st.sampled_from(["stdout", "stderr"]))
def test_any_texts_encode_as_their_lines(texts: list[str], seq: int, stream: str) -> None:
    run = Run(seq, stream, "2026-11-22T10:00:00.000Z", texts)
    assert run.sse() == b"".join(map(line_event, run.lines()))


def test_items_from_the_agent_runs_or_old_line_items() -> None:
    at = "2026-11-22T10:00:00.000Z"
    runs = lines.from_items(
        [
            {"seq": 1, "stream": "stdout", "at": at, "texts": ["a", "b", "c"]},
            {"seq": 4, "stream": "stderr", "at": at, "texts": ["d"]},
        ],
        after=1,
    )
    assert [r.wire() for r in runs] == [
        {"seq": 2, "stream": "stdout", "at": at, "texts": ["b", "c"]},
        {"seq": 4, "stream": "stderr", "at": at, "texts": ["d"]},
    ]
    # An older agent's line items: joined into runs where stream and time agree; repeats dropped.
    old = [{"seq": s, "stream": "stdout" if s < 4 else "stderr", "text": f"l{s}", "at": at} for s in range(1, 7)]
    runs = lines.from_items(old, after=1)
    assert [r.wire() for r in runs] == [
        {"seq": 2, "stream": "stdout", "at": at, "texts": ["l2", "l3"]},
        {"seq": 4, "stream": "stderr", "at": at, "texts": ["l4", "l5", "l6"]},
    ]
    assert [line for r in runs for line in r.lines()] == old[1:]
    assert lines.from_items(old, after=6) == []


@pytest.mark.parametrize(
    "item",
    [
        "line",
        {"seq": 0, "stream": "stdout", "at": "t", "texts": ["a"]},
        {"seq": True, "stream": "stdout", "at": "t", "texts": ["a"]},
        {"seq": 1, "stream": "stdin", "at": "t", "texts": ["a"]},
        {"seq": 1, "stream": "stdout", "at": 5, "texts": ["a"]},
        {"seq": 1, "stream": "stdout", "at": "t", "texts": []},
        {"seq": 1, "stream": "stdout", "at": "t", "texts": ["a", ["p", "q", "r"], "b"]},
        {"seq": 1, "stream": "stdout", "at": "t", "texts": "abc"},
        {"seq": 1, "stream": "stdout", "at": "t", "text": None},
    ],
)
def test_bad_items_are_refused(item: Any) -> None:
    with pytest.raises(BadOutput):
        lines.from_items([item], after=0)


def test_chunks_cut_runs_at_the_size() -> None:
    runs = [
        Run(1, "stdout", "t", [str(i) for i in range(7)]),
        Run(8, "stderr", "t", ["x"]),
        Run(9, "stdout", "u", list("abcd")),
    ]
    groups = lines.chunks(runs, 3)
    assert [lines.line_count(g) for g in groups] == [3, 3, 3, 3]
    assert [line for g in groups for r in g for line in r.lines()] == [line for r in runs for line in r.lines()]
    assert lines.chunks(runs, 100) == [runs]


def test_stored_chunks_read_back_from_any_seq_with_old_rows_too() -> None:
    engine = sa.create_engine("sqlite://")
    metadata.create_all(engine, tables=[jobs, job_output])  # insert_lines locks the job's row (none here)
    at = "2026-11-22T10:00:00.000Z"
    with engine.begin() as conn:
        conn.execute(sa.text("PRAGMA foreign_keys = OFF"))
        # A row written before runs: a list of line objects.
        old = [{"seq": s, "stream": "stdout", "text": f"line {s}", "at": at} for s in range(1, 101)]
        conn.execute(job_output.insert().values(job_id="j", first_seq=1, last_seq=100, lines=orjson.dumps(old)))
        texts = [f"line {s}" for s in range(101, 101 + 3 * store.CHUNK_LINES)]
        store.insert_lines(conn, "j", [Run(101, "stdout", at, texts[:7000]), Run(7101, "stdout", at, texts[7000:])])
        assert conn.execute(sa.select(sa.func.count()).select_from(job_output)).scalar() == 4
        total = 100 + 3 * store.CHUNK_LINES
        for after in (0, 1, 99, 100, 101, 5099, 7100, total - 1, total):
            found = [line for run in store.lines_after(conn, "j", after, 10**6) for line in run.lines()]
            assert [line["seq"] for line in found] == list(range(after + 1, total + 1)), after
            assert [line["text"] for line in found] == [f"line {s}" for s in range(after + 1, total + 1)]


def test_a_live_job_holds_no_more_than_its_cap_and_counts_the_rest() -> None:
    live = LiveJob("j", cap=1000)
    texts = [f"line {i} é" for i in range(500)]  # 12 to 14 bytes each, with the newline
    runs = [Run(1 + 100 * n, "stdout", "t", texts[100 * n : 100 * (n + 1)]) for n in range(5)]
    kept = [run for batch in runs for run in live.admit([batch])]
    live.extend(kept)
    held = [text for run in live.runs for text in run.texts]
    assert held == texts[: len(held)] and 1000 - 14 < output_size(held) == live.kept_bytes <= 1000
    assert live.left_out_lines == 500 - len(held) and live.left_out_bytes == output_size(texts[len(held) :])
    assert live.received_seq == 500 and live.last_seq == len(held)
    note = live.note("left out")  # our own line comes after the agent's last one
    assert note[0].seq == 501 and live.last_seq == 501
