"""The Prometheus endpoint, scraped over HTTP while a computation runs, counts what the dataflow did."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from typing import Any

from pytimely import Scope, Worker, execute
from pytimely.observe.metrics import Metrics
from tests.cluster.helpers import ROOT


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def _value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"^{name}\{{(.*)\}} (\S+)$", line)
        if match and all(f'{k}="{v}"' in match.group(1) for k, v in labels.items()):
            total += float(match.group(2))
    return total


def test_scraped_in_process_during_a_run() -> None:
    metrics = Metrics()
    port = metrics.serve(0)
    scrapes: list[str] = []

    def job(worker: Worker) -> None:
        def build(scope: Scope[int]) -> tuple[Any, Any]:
            handle, stream = scope.new_input(name="rows")
            return handle, stream.map(lambda x: x + 1, name="plus").probe()

        handle, probe = worker.dataflow(build)
        for epoch in range(5):
            handle.send_batch(list(range(100)))
            handle.advance_to(epoch + 1)
            worker.step_while(lambda e=epoch: probe.less_equal(e), timeout=60)
            scrapes.append(_scrape(port))

    try:
        execute(job, log=metrics)
    finally:
        metrics.close()
    # Every scrape, taken between epochs, shows exactly the records of the epochs done so far.
    for epoch, text in enumerate(scrapes):
        done = 100 * (epoch + 1)
        assert _value(text, "pytimely_records_total", operator="1:plus", direction="received") == done
        assert _value(text, "pytimely_records_total", operator="0:rows", direction="sent") == done
    last = scrapes[-1]
    assert _value(last, "pytimely_operator_schedules_total", operator="1:plus") > 0
    assert _value(last, "pytimely_epoch_latency_seconds_count", probe="2:probe") >= 4
    assert "pytimely_probe_frontier_lag_seconds{" in last


def test_pytimely_run_serves_metrics_while_running() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytimely", "run", "--metrics-port", "0", "tests.observe.jobs:counted", "60", "500",
         "0.05"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
        assert match, line
        port = int(match.group(1))
        deadline = time.monotonic() + 60
        taken = 0.0
        while time.monotonic() < deadline:
            text = _scrape(port)
            taken = _value(text, "pytimely_records_total", operator="2:square", direction="received")
            if taken >= 1000:
                break
            time.sleep(0.05)
        running = proc.poll() is None
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert running, "the scrape should have happened while the run went on"
    assert 1000 <= taken < 60 * 500 and taken % 500 == 0  # whole epochs so far, not yet all of them
    assert out.strip() == f"worker 0: {60 * 500}"


def _consecutive_free_ports(count: int) -> int:
    """A port P such that P .. P + count - 1 were free a moment ago (launch binds them again soon after)."""
    import socket

    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count > 65535:
            continue
        held = []
        try:
            for p in range(base, base + count):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise AssertionError("no run of free ports")


def test_launch_gives_each_process_its_metrics_port() -> None:
    base = _consecutive_free_ports(2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytimely", "launch", "-n", "2", "--metrics-port", str(base), "--",
         sys.executable, "-m", "pytimely", "run", "tests.observe.jobs:counted", "60", "400", "0.05"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 90
        taken: dict[int, float] = {}
        while time.monotonic() < deadline and len(taken) < 2:
            for index in (0, 1):
                try:
                    text = _scrape(base + index)
                except OSError:
                    continue  # not serving yet
                value = _value(text, "pytimely_records_total", operator="2:square", direction="received")
                crossed = _value(text, "pytimely_link_bytes_sent_total")
                if value > 0 and crossed > 0:  # records arrived, and bytes went to the other process
                    taken[index] = value
            time.sleep(0.05)
        running = proc.poll() is None
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert running and set(taken) == {0, 1}, (taken, err)
    assert "rec/s" not in err  # the launcher's stderr is not a terminal here: no progress line
    assert sorted(line.split("] ")[1] for line in out.splitlines()) == ["worker 0: 12000", "worker 1: 12000"]
