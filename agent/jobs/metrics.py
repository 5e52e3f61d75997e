"""``metrics get|history|alert-set|alert-list|alert-delete``: load, CPU, memory, disk, network.

Figures come from /proc and statvfs. The agent records a sample in ``<state_dir>/metrics.jsonl``,
a ring of the last `MAX_SAMPLES` lines, every ``--metrics-interval`` seconds (`keep_sampling`, a
task of its nursery), and so does each ``get`` (and each ``history`` or ``alert-list``): the
history is what was sampled, CPU use and network rates are the change between two samples. The
alert rules live in ``<state_dir>/alerts.json`` (one rule per metric) and are evaluated against
the samples when they are listed: a rule fires when every sample of its last ``duration_min``
minutes, the current one included, is above its threshold. Sending the e-mail is the control
plane's part.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import trio

from agent.jobs.toolkit.base import JobContext, handler, rfc3339
from agent.jobs.toolkit.machine import disk, meminfo, uptime_s
from agent.jobs.toolkit.output import JobError, Output
from agent.sites import write_atomically
from agent.state import open_lock_file
from contract.job_kinds.base import IdArgs, NoArgs
from contract.job_kinds.metrics import AlertSet, MetricsHistory

log = logging.getLogger("fleetdeck.agent.jobs")


def cpu_times(path: str = "/proc/stat") -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot (idle and iowait are not busy)."""
    with open(path) as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])  # guest time is already inside user and nice
    return total - idle, total


def network_bytes(path: str = "/proc/net/dev") -> tuple[int, int]:
    """(received, sent) bytes of every interface but the loopback."""
    rx = tx = 0
    with open(path) as f:
        for line in f.readlines()[2:]:
            name, _, rest = line.partition(":")
            fields = rest.split()
            if name.strip() != "lo" and len(fields) >= 9:
                rx, tx = rx + int(fields[0]), tx + int(fields[8])
    return rx, tx


def metrics(home: str) -> dict[str, Any]:
    load1, load5, load15 = os.getloadavg()
    rx, tx = network_bytes()
    return {
        "load": {"1m": load1, "5m": load5, "15m": load15},
        "cpu_count": os.cpu_count(),
        "memory": meminfo(),
        "disk": disk(home),
        "network": {"rx_bytes": rx, "tx_bytes": tx},
        "uptime_s": uptime_s(),
    }


# --- samples -------------------------------------------------------------------------------

SAMPLES_FILE = "metrics.jsonl"
MAX_SAMPLES = 10_000  # a sample a minute: a week
SAMPLE_EVERY_S = 60.0  # the agent's sampler, when --metrics-interval does not say
PERIODS = {"1h": 3600, "6h": 6 * 3600, "24h": 86400, "7d": 7 * 86400, "30d": 30 * 86400}
UNITS = {"cpu": "percent", "memory": "percent", "disk": "percent", "load": "percent", "network": "bytes/s"}


def sample_of(figures: dict[str, Any], now: float) -> dict[str, Any]:
    memory, cpus = figures["memory"], figures["cpu_count"] or 1
    busy, total = cpu_times()
    return {
        "at": now,
        "cpu": [busy, total],
        "memory": round(100 * memory["used"] / memory["total"], 1) if memory.get("total") else None,
        "disk": figures["disk"]["used_percent"],
        "load": round(100 * figures["load"]["1m"] / cpus, 1),
        "network": [figures["network"]["rx_bytes"], figures["network"]["tx_bytes"]],
    }


class Samples:
    """The ring file of samples (blocking; call it from a worker thread)."""

    def __init__(self, state_dir: str) -> None:
        self.path = os.path.join(state_dir, SAMPLES_FILE)

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return []
        samples = []
        for line in lines:
            try:
                sample = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a line cut by a crash
            if isinstance(sample, dict) and isinstance(sample.get("at"), int | float):
                samples.append(sample)
        return samples

    def record(self, sample: dict[str, Any]) -> list[dict[str, Any]]:
        """Append `sample` (trimming the ring when it is full); every sample, oldest first."""
        with open_lock_file(self.path + ".lock") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            samples = [*self.read(), sample]
            if len(samples) > MAX_SAMPLES + MAX_SAMPLES // 10:  # rewrite now and then, not each time
                samples = samples[-MAX_SAMPLES:]
                write_atomically(self.path, b"".join(orjson.dumps(s) + b"\n" for s in samples))
            else:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
                with os.fdopen(fd, "ab") as f:
                    f.write(orjson.dumps(sample) + b"\n")
            return samples


def measure_and_record(ctx: JobContext) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The metrics now, and every sample with the one they made appended."""
    now = time.time()
    figures = metrics(ctx.home)
    samples = Samples(ctx.state_dir).record(sample_of(figures, now))
    return figures, samples


async def keep_sampling(ctx: JobContext, every_s: float = SAMPLE_EVERY_S) -> None:
    """The agent's sampler (in its nursery): a sample every `every_s` seconds, whether or not
    anyone asks for the metrics, so that ``metrics.history`` and the alerts have a past."""
    while True:
        try:
            await trio.to_thread.run_sync(measure_and_record, ctx)
        except OSError as exc:  # a full disk, a state folder gone: try again next time
            log.warning("metrics sample not recorded: %s", exc)
        await trio.sleep(every_s)


class Pulses:
    """The figures of the link's ``pulse`` frames (`contract.link.params.Pulse`): a sample as the
    sampler takes it, not recorded (a pulse every few seconds would flood the ring of minutes),
    its CPU use the change since the pulse before (blocking; call it from a worker thread)."""

    def __init__(self, home: str) -> None:
        self.home = home
        self._before: dict[str, Any] | None = None

    def take(self) -> dict[str, Any]:
        sample = sample_of(metrics(self.home), time.time())
        cpu = series([self._before, sample] if self._before else [sample], "cpu")
        self._before = sample
        return {
            "at": sample["at"],
            "cpu": cpu[-1][1] if cpu else None,
            "memory": sample["memory"],
            "disk": sample["disk"],
        }


def series(samples: list[dict[str, Any]], metric: str) -> list[tuple[float, float]]:
    """(time, value) of `metric`; CPU and network are the change from the sample before."""
    points: list[tuple[float, float]] = []
    for before, after in zip([None, *samples], samples, strict=False):
        if metric in ("cpu", "network"):
            if before is None or not isinstance(before.get(metric), list) or not isinstance(after.get(metric), list):
                continue
            if metric == "cpu":
                busy, total = (a - b for a, b in zip(after["cpu"], before["cpu"], strict=True))
                if total > 0:
                    points.append((after["at"], round(100 * busy / total, 1)))
            else:
                elapsed = after["at"] - before["at"]
                moved = sum(after["network"]) - sum(before["network"])
                if elapsed > 0 and moved >= 0:
                    points.append((after["at"], round(moved / elapsed, 1)))
        elif isinstance(after.get(metric), int | float):
            points.append((after["at"], float(after[metric])))
    return points


async def _get(args: NoArgs, ctx: JobContext, out: Output) -> int:
    figures, samples = await trio.to_thread.run_sync(measure_and_record, ctx)
    cpu = series(samples[-2:], "cpu")
    figures["cpu_percent"] = cpu[-1][1] if cpu else None  # since the sample before (None: the first)
    out.result(figures, as_json=ctx.as_json)
    return 0


async def _history(args: MetricsHistory, ctx: JobContext, out: Output) -> int:
    _, samples = await trio.to_thread.run_sync(measure_and_record, ctx)
    since = time.time() - PERIODS[args.period]
    points = [{"at": rfc3339(at), "value": value} for at, value in series(samples, args.metric) if at >= since]
    result = {"metric": args.metric, "period": args.period, "unit": UNITS[args.metric], "points": points}
    out.result(result, as_json=ctx.as_json)
    return 0


# --- alerts --------------------------------------------------------------------------------

ALERTS_FILE = "alerts.json"


@contextmanager
def editing_alerts(state_dir: str) -> Iterator[list[dict[str, Any]]]:
    path = os.path.join(state_dir, ALERTS_FILE)
    with open_lock_file(path + ".lock") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        alerts = read_alerts(state_dir)
        yield alerts
        write_atomically(path, orjson.dumps({"alerts": alerts}, option=orjson.OPT_INDENT_2) + b"\n")


def read_alerts(state_dir: str) -> list[dict[str, Any]]:
    try:
        with open(os.path.join(state_dir, ALERTS_FILE), "rb") as f:
            document = orjson.loads(f.read())
    except FileNotFoundError:
        return []
    except orjson.JSONDecodeError as exc:
        raise JobError(f"{ALERTS_FILE} in the agent's state folder is not valid JSON ({exc}); fix it first") from None
    alerts = document.get("alerts") if isinstance(document, dict) else None
    return [a for a in alerts if isinstance(a, dict)] if isinstance(alerts, list) else []


def evaluate(alert: dict[str, Any], samples: list[dict[str, Any]], now: float) -> dict[str, Any]:
    """The rule with its metric's current value and whether it fires."""
    points = series(samples, str(alert.get("metric")))
    window = [value for at, value in points if at >= now - 60 * int(alert.get("duration_min", 5))]
    threshold = alert.get("threshold_percent", 100)
    value = points[-1][1] if points else None
    return {**alert, "value": value, "firing": bool(window) and all(v > threshold for v in window)}


async def _alert_set(args: AlertSet, ctx: JobContext, out: Output) -> int:
    def change() -> tuple[dict[str, Any], bool]:
        with editing_alerts(ctx.state_dir) as alerts:
            rule = {
                "metric": args.metric,
                "threshold_percent": args.threshold_percent,
                "duration_min": args.duration_min,
                "email": args.email,
            }
            for alert in alerts:
                if alert.get("metric") == args.metric:
                    alert.update(rule)
                    return alert, True
            numbers = [int(str(a.get("id", ""))[3:]) for a in alerts if str(a.get("id", ""))[3:].isdigit()]
            alert = {"id": f"al-{max(numbers, default=0) + 1}", **rule, "created_at": rfc3339(time.time())}
            alerts.append(alert)
            return alert, False

    alert, replaced = await trio.to_thread.run_sync(change)
    out.result({"alert": alert, "replaced": replaced}, as_json=ctx.as_json)
    return 0


async def _alert_list(args: NoArgs, ctx: JobContext, out: Output) -> int:
    _, samples = await trio.to_thread.run_sync(measure_and_record, ctx)
    now = time.time()
    alerts = [evaluate(a, samples, now) for a in await trio.to_thread.run_sync(read_alerts, ctx.state_dir)]
    out.result({"alerts": alerts}, as_json=ctx.as_json)
    return 0


async def _alert_delete(args: IdArgs, ctx: JobContext, out: Output) -> int:
    def change() -> dict[str, Any]:
        with editing_alerts(ctx.state_dir) as alerts:
            for alert in alerts:
                if alert.get("id") == args.id:
                    alerts.remove(alert)
                    return alert
        raise JobError(f"no metric alert {args.id} on this server")

    alert = await trio.to_thread.run_sync(change)
    message = f"metric alert {alert['id']} ({alert.get('metric')} above {alert.get('threshold_percent')}%) deleted"
    out.result({"deleted": alert, "message": message}, as_json=ctx.as_json)
    return 0


KINDS = [
    handler("metrics.get", _get),
    handler("metrics.history", _history),
    handler("metrics.alert-set", _alert_set),
    handler("metrics.alert-list", _alert_list),
    handler("metrics.alert-delete", _alert_delete),
]
