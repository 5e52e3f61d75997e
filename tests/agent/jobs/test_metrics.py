"""``metrics.*`` through the API against the real root agent: samples, their history and
alerts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.files.entries import rfc3339
from tests.conftest import AgentProcess, Stack
from tests.helpers import wait_until
from tests.helpers.hosting import Hosting, JobRun


def outcome(run: JobRun) -> Any:
    """A change's JSON result: the last line of its stdout."""
    return json.loads(run.ok().stdout[-1])


# --- metrics -------------------------------------------------------------------------------


def test_each_get_records_a_sample_and_history_reads_them(hosting: Hosting) -> None:
    hosting.run("metrics.get").ok()
    second = hosting.run("metrics.get").ok().result
    assert second["cpu_percent"] is not None and 0 <= second["cpu_percent"] <= 100
    assert second["network"]["rx_bytes"] >= 0
    samples = (hosting.state / "metrics.jsonl").read_text().splitlines()
    assert len(samples) >= 2
    cpu = hosting.run("metrics.history", metric="cpu", period="1h").ok().result
    assert cpu["unit"] == "percent" and len(cpu["points"]) >= 2
    assert all(0 <= p["value"] <= 100 for p in cpu["points"])
    disk = hosting.run("metrics.history", metric="disk", period="1h").ok().result
    assert len(disk["points"]) >= 3 and all(0 < p["value"] < 100 for p in disk["points"])


def test_the_agent_samples_on_its_own_and_history_returns_those_samples(stack: Stack, tmp_path: Path) -> None:
    with stack.http() as http:
        created = http.post("/v1/servers", json={"name": f"sampled-{tmp_path.name[-8:]}", "kind": "full"}).json()
    home, state = tmp_path / "home", tmp_path / "state"
    home.mkdir()
    state.mkdir()
    server_id = created["server"]["id"]
    agent = AgentProcess(stack, server_id, created["agent_token"], home, state, "--metrics-interval", "0.1")
    try:
        samples = state / "metrics.jsonl"
        # no job has asked for the metrics yet: these samples are the sampler's
        wait_until(lambda: samples.exists() and len(samples.read_text().splitlines()) >= 3, timeout=30)
        sampled = [json.loads(line)["at"] for line in samples.read_text().splitlines()]
        server = Hosting(stack, stack.token, server_id, home, state, tmp_path, state / "layout.json", agent)
        history = server.run("metrics.history", metric="memory", period="1h").ok().result
        assert {rfc3339(at) for at in sampled} <= {point["at"] for point in history["points"]}
        assert len(history["points"]) > len(sampled)  # and the sample the history job took itself
        assert all(0 < point["value"] < 100 for point in history["points"])
    finally:
        agent.stop()


def test_alerts_are_stored_evaluated_and_deleted(hosting: Hosting) -> None:
    made = outcome(hosting.run("metrics.alert-set", metric="disk", threshold_percent=1, duration_min=5))
    alert_id = made["alert"]["id"]
    again = outcome(hosting.run("metrics.alert-set", metric="disk", threshold_percent=2, duration_min=5))
    assert again["replaced"] is True and again["alert"]["id"] == alert_id
    quiet = outcome(hosting.run("metrics.alert-set", metric="memory", threshold_percent=100))
    listed = {a["metric"]: a for a in hosting.run("metrics.alert-list").ok().result["alerts"]}
    assert listed["disk"]["firing"] is True and listed["disk"]["value"] > 2  # any disk in use is above 2%
    assert listed["memory"]["firing"] is False
    assert outcome(hosting.run("metrics.alert-delete", id=alert_id))["deleted"]["metric"] == "disk"
    hosting.run("metrics.alert-delete", id=quiet["alert"]["id"]).ok()
    assert hosting.run("metrics.alert-list").ok().result["alerts"] == []
    missing = hosting.run("metrics.alert-delete", id=alert_id)
    assert missing.exit_code == 1 and f"no metric alert {alert_id}" in missing.text


def test_an_alert_fires_only_when_its_whole_window_is_above() -> None:
    from agent.jobs.metrics import evaluate

    rule = {"metric": "memory", "threshold_percent": 80, "duration_min": 5}
    now = 10_000.0
    samples = [{"at": now - 400, "memory": 50.0}, {"at": now - 200, "memory": 90.0}, {"at": now, "memory": 95.0}]
    assert evaluate(rule, samples, now) == {**rule, "value": 95.0, "firing": True}
    samples[1]["memory"] = 70.0
    assert evaluate(rule, samples, now)["firing"] is False
