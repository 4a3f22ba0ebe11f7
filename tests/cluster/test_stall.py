"""A computation stalled across processes is reported by every process, and a slow one is not taken for stalled.

Real processes over TCP: a stall needs every process quiet, with nothing sent, for the stall timeout
(``PYTIMELY_STALL_TIMEOUT``), which their heartbeats report to each other.
"""

from __future__ import annotations

import time

from tests.cluster.helpers import Cluster, report


def test_a_capability_held_for_ever_is_a_stall_on_every_process() -> None:
    cluster = Cluster(2, PYTIMELY_STALL_TIMEOUT="1")
    started = time.monotonic()
    try:
        cluster.start(["tests.cluster.misuse_jobs:hold_forever"])
        results = cluster.wait(timeout=120)
    finally:
        cluster.kill()
    elapsed = time.monotonic() - started
    assert all(code == 1 for code, _, _ in results), report(results)
    # Every process names the operator and the time it holds, whether it found the stall or heard of it first.
    for _, _, err in results:
        assert "StalledError" in err, report(results)
        assert "'hoarder' capability on output 0 at [0]" in err, report(results)
    assert "Traceback" not in "".join(err for _, _, err in results), report(results)
    assert elapsed < 60, report(results)


def test_step_while_ends_in_a_stall_before_its_deadline() -> None:
    cluster = Cluster(2, PYTIMELY_STALL_TIMEOUT="1")
    started = time.monotonic()
    try:
        cluster.start(["tests.cluster.misuse_jobs:wait_for_held_time", "300"])
        results = cluster.wait(timeout=120)
    finally:
        cluster.kill()
    assert all(code == 1 for code, _, _ in results), report(results)
    assert all("StalledError" in err and "'hoarder'" in err for _, _, err in results), report(results)
    assert time.monotonic() - started < 60, report(results)


def test_a_process_busy_in_its_own_code_longer_than_the_stall_timeout_is_not_a_stall() -> None:
    cluster = Cluster(2, workers="2", PYTIMELY_STALL_TIMEOUT="1")
    try:
        cluster.start(["tests.cluster.misuse_jobs:slow_last_process", "3"])
        results = cluster.wait(timeout=120)
    finally:
        cluster.kill()
    assert all(code == 0 for code, _, _ in results), report(results)
    assert not any("Stalled" in err for _, _, err in results), report(results)
