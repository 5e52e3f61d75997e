"""The job screen's pieces that need no stack: how a job's state is written."""

from __future__ import annotations

from typing import get_args

from contract.models import JobStatus
from tui.jobs.run import status_text


def test_every_job_state_has_a_glyph_of_its_own() -> None:
    """Its colour aside (NO_COLOR, a 16-colour terminal, an eye that tells red from green badly),
    a job's state shows in its glyph and its word, in the job list and on the job's screen."""
    shown = {status: status_text(status).plain for status in get_args(JobStatus)}
    glyphs = [text.split(" ")[0] for text in shown.values()]
    assert len(set(glyphs)) == len(shown) and "?" not in glyphs
    assert all(text.endswith(f" {status}") for status, text in shown.items())
