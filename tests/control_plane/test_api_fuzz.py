"""Schemathesis against the real stack: every operation of the OpenAPI document, with generated
valid and invalid input, must never answer a 5xx. Bounded to a couple of minutes a database; it
runs on a stack of its own (one on SQLite, one on PostgreSQL), since generated writes may reach
that stack's demo workspace."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig
from schemathesis.core import NotSet

from tests.conftest import STACK_VARIANTS, Stack, start_local


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def fuzzed_stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack of its own of each variant (the stack variants' environments, not their stacks)."""
    variant_env = STACK_VARIANTS[request.param](request)
    running = start_local(tmp_path_factory.mktemp(f"fuzz-{request.param}"), env=variant_env)
    yield running
    died = running.process.poll()
    running.stop()
    assert died is None, f"fleetdeck local exited with {died}:\n{running.log()[-4000:]}"


# Operations left on generated server ids only: on the real server they would delete it, or run
# jobs with generated arguments on this machine (restart a service, create a system user).
NOT_ON_THE_REAL_SERVER = {("DELETE", "/v1/servers/{server_id}"), ("POST", "/v1/servers/{server_id}/jobs")}

# An event stream (`GET /v1/servers/events`) never ends: its answer is whole once its status and its
# first event (`ready`) came. Schemathesis would otherwise read on until 20 events, i.e. for the
# whole request timeout (a minute of keep-alives a database, for one case).
FUZZ_CONFIG = SchemathesisConfig.from_dict({"max-stream-events": 1})


def on_real_server(case: Any) -> bool:
    """Half of the cases of an operation on a server run on the stack's real server."""
    if "server_id" not in (case.path_parameters or {}):
        return False
    if (case.operation.method.upper(), case.operation.path) in NOT_ON_THE_REAL_SERVER:
        return False
    return zlib.crc32(f"{_stable(case.body)!r}{_stable(case.query)!r}".encode()) % 2 == 0


def _stable(part: Any) -> Any:
    """A case's body or query as its hash may take it: schemathesis's NOT_SET (no body) prints with
    its memory address, which would pick the real server for an operation on one run and not on
    the next (its 25 cases all at once: a run with no 200 from the real server at all)."""
    return None if isinstance(part, NotSet) else part


def _operations(stack: Stack) -> list[Any]:
    schema = schemathesis.openapi.from_url(f"{stack.base_url}/v1/openapi.json", config=FUZZ_CONFIG)
    results: list[Any] = list(schema.get_all_operations())  # Ok or Err: `.ok()` raises on an Err
    return [result.ok() for result in results]


def test_no_operation_answers_a_server_error(fuzzed_stack: Stack) -> None:
    headers = {"Authorization": f"Bearer {fuzzed_stack.token}"}
    server_errors: list[str] = []
    statuses: dict[int, int] = {}

    for operation in _operations(fuzzed_stack):

        @given(
            case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE)
            | operation.as_strategy(generation_mode=GenerationMode.NEGATIVE)
        )
        @settings(
            max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None
        )
        def call(case: Any) -> None:
            if on_real_server(case):
                case.path_parameters["server_id"] = fuzzed_stack.server_id
            response = case.call(headers=headers, timeout=60)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            if response.status_code >= 500 or "Traceback" in response.text:
                server_errors.append(f"{case.operation.label}: {response.status_code} for {case.as_curl_command()}")

        call()
    assert server_errors == [], "\n".join(server_errors[:20])
    # The input reached the routes' own checks and the agent, not only the 404 of an unknown server.
    assert statuses.get(200, 0) > 30 and statuses.get(422, 0) > 100, statuses


def test_the_stack_logged_no_traceback(fuzzed_stack: Stack) -> None:
    """Runs after the fuzz (same module, declared last): a 4xx that logged a traceback is a bug too."""
    assert "Traceback" not in fuzzed_stack.log()
