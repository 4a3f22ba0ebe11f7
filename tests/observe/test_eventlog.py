"""The event log counts what really happens: records sent and taken per operator, schedules, frontiers."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pytimely import Scope, Worker, execute
from pytimely.observe.eventlog import Event, JsonLines, tee, to_logging
from pytimely.observe.logsummary import format_table, read_events, summarize
from tests.cluster.helpers import Cluster, report


def _job(epochs: int, rows: int, seen: list[int]) -> Any:
    def job(worker: Worker) -> None:
        def build(scope: Scope[int]) -> tuple[Any, Any]:
            handle, stream = scope.new_input(name="rows")
            squared = stream.exchange(lambda x: x, name="spread").map(lambda x: x * x, name="square")
            probe = squared.inspect_batch(lambda _t, b: seen.append(len(b)), name="seen").probe()
            return handle, probe

        handle, probe = worker.dataflow(build)
        for epoch in range(epochs):
            handle.send_batch([x for x in range(rows) if x // 7 % worker.peers == worker.index])
            handle.advance_to(epoch + 1)
            worker.step_while(lambda e=epoch: probe.less_equal(e), timeout=60)

    return job


def _records(events: list[Event], name: str, direction: str) -> int:
    ops = {(e["worker"], e["op"]) for e in events if e["event"] == "operates" and e["name"] == name}
    assert ops, f"no operator named {name!r} in the log"
    return sum(
        e["records"] for e in events
        if e["event"] == "messages" and e["direction"] == direction and (e["worker"], e["op"]) in ops
    )


@pytest.mark.parametrize("workers", [1, 3])
def test_counts_equal_records_sent(workers: int) -> None:
    events: list[Event] = []
    seen: list[int] = []
    execute(_job(4, 1000, seen), workers, log=events.append)
    total = sum(seen)
    assert total == 4 * 1000
    assert _records(events, "rows", "sent") == total
    assert _records(events, "square", "received") == total
    assert _records(events, "square", "sent") == total
    assert _records(events, "seen", "received") == total
    kinds = Counter(e["event"] for e in events)
    assert kinds["schedule"] > 0 and kinds["progress"] > 0 and kinds["frontier"] > 0 and kinds["capability"] > 0
    assert all(e["duration"] >= 0 and e["stop"] >= e["start"] for e in events if e["event"] == "schedule")
    # The probe's frontier moved through every epoch, in order, on every worker.
    probe_ops = {(e["worker"], e["op"]) for e in events if e["event"] == "operates" and e["name"] == "probe"}
    for w, op in probe_ops:
        fronts = [e["frontier"] for e in events if e["event"] == "frontier" and (e["worker"], e["op"]) == (w, op)]
        assert fronts[-1] == []
        assert [f[0] for f in fronts[:-1]] == sorted(f[0] for f in fronts[:-1])
        assert {1, 2, 3, 4} <= {f[0] for f in fronts[:-1]}


def test_off_by_default_logs_nothing() -> None:
    seen: list[int] = []
    w: list[Worker] = []

    def job(worker: Worker) -> None:
        w.append(worker)
        _job(1, 10, seen)(worker)

    execute(job)
    assert w[0].log is None and sum(seen) == 10


def test_json_lines_per_worker_and_summary(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    seen: list[int] = []
    with JsonLines(tmp_path / "run") as files:
        caplog.set_level(logging.DEBUG, logger="pytimely.events")
        execute(_job(3, 500, seen), 2, log=tee(files, to_logging()))
    paths = sorted(tmp_path.glob("run.w*.jsonl"))
    assert [p.name for p in paths] == ["run.w0.jsonl", "run.w1.jsonl"]
    events = read_events(paths)
    assert {json.loads(line)["worker"] for line in paths[1].read_text().splitlines()} == {1}
    assert {e["worker"] for e in events} == {0, 1}
    assert len(caplog.records) == len(events)
    rows = {r.name: r for r in summarize(events)}
    assert rows["square"].records_in == rows["square"].records_out == 1500
    assert rows["rows"].records_out == 1500 and rows["rows"].records_in == 0
    assert rows["square"].schedules > 0 and rows["square"].busy > 0
    assert rows["probe"].held_at  # the probe's frontier was held at some epoch for a while
    table = format_table(list(rows.values()))
    assert "square" in table and "1500" in table


def test_summary_names_a_bad_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"event": "schedule", "worker": 0}\nnot json\n')
    from pytimely.observe.logsummary import main

    assert main([str(bad)]) == 2


def test_counts_across_two_processes(tmp_path: Path) -> None:
    cluster = Cluster(2, PYTIMELY_LOG=str(tmp_path / "log"))
    try:
        cluster.start(["tests.observe.jobs:counted", "3", "2000"])
        results = cluster.wait(120)
    finally:
        cluster.kill()
    assert all(code == 0 for code, _, _ in results), report(results)
    lines = [line for _, out, _ in results for line in out.splitlines() if line.startswith("worker")]
    seen = sum(int(line.split(": ")[1]) for line in lines)
    assert seen == 3 * 2000
    paths = sorted(tmp_path.glob("log.w*.jsonl"))
    assert [p.name for p in paths] == ["log.w0.jsonl", "log.w1.jsonl"]
    events = read_events(paths)
    assert _records(events, "rows", "sent") == seen
    assert _records(events, "square", "received") == seen
    assert _records(events, "seen", "received") == seen
    # Each worker sent blocks of 7 numbers and took in those of its parity: records crossed between processes.
    square = {e["worker"]: e["op"] for e in events if e["event"] == "operates" and e["name"] == "square"}
    taken: Counter[int] = Counter()
    for e in events:
        if e["event"] == "messages" and e["direction"] == "received" and e["op"] == square[e["worker"]]:
            taken[e["worker"]] += e["records"]
    assert taken == {0: 3 * 1000, 1: 3 * 1000}
