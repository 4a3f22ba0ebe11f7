"""Processes on one host move big payloads through shared-memory rings: the same bytes arrive, rings are used only
when both sides allow them, and no ring file outlives the processes, however they end."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytimely.communication.ring import shared_memory_dir
from tests.cluster.helpers import Cluster, report
from tests.cluster.jobs import ring_batches, ring_digest
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(shared_memory_dir() is None, reason="needs /dev/shm")
EPOCHS, ROWS = 12, 200_000  # 1.6 MB a batch: well over the size that goes through a ring


def rings() -> set[str]:
    """The ring files in /dev/shm now."""
    return {p.name for p in Path("/dev/shm").glob("pytimely-ring-*")}


@pytest.fixture
def no_leftover_rings() -> Iterator[None]:
    before = rings()
    yield
    wait_until(lambda: not rings() - before, 30, "every ring file of the run to leave /dev/shm")


def expected(workers: int) -> dict[int, tuple[int, str]]:
    """What each worker must receive: the values every worker sent that it owns (value % workers)."""
    sent = np.concatenate([b for w in range(workers) for b in ring_batches(w, EPOCHS, ROWS)])
    return {w: (int(np.sum(sent % workers == w)), ring_digest(sent[sent % workers == w])) for w in range(workers)}


def run(
    tmp_path: Path, workers: int = 1, env: dict[int, dict[str, str]] | None = None, keep: bool = True
) -> list[dict[str, Any]]:
    cluster = Cluster(2, workers=str(workers))
    args = [str(tmp_path / "out"), str(EPOCHS), str(ROWS), "keep" if keep else "copy"]
    try:
        cluster.start(["tests.cluster.jobs:ring_exchange", *args], env=env)
        results = cluster.wait(timeout=120)
    finally:
        cluster.kill()
    assert [r[0] for r in results] == [0, 0], report(results)
    return [json.loads(p.read_text()) for p in tmp_path.glob("out.*.json")]


@pytest.mark.usefixtures("no_leftover_rings")
@pytest.mark.parametrize(("workers", "keep"), [(1, False), (2, True)], ids=["1-letting-go", "2-keeping"])
def test_payloads_cross_through_rings_and_arrive_whole(tmp_path: Path, workers: int, keep: bool) -> None:
    # A 2 MiB ring holds two of the ~0.8 MB payloads a process sends per epoch: it wraps several times, and its
    # writer can reuse it only by reading what the reader published in its own ring's control block. A consumer
    # that lets go of what it receives is lent payloads in the ring, and their places come back; one that keeps
    # it all holds the places lent to it, and its peer sends the rest on the socket once the ring is full: either
    # way every value arrives unchanged, none written over while an array still lives on it.
    small = {"PYTIMELY_SHARED_MEMORY": str(2 << 20)}
    records = run(tmp_path, workers, env={0: small, 1: small}, keep=keep)
    want = expected(2 * workers)
    assert {r["worker"]: (r["count"], r["digest"]) for r in records} == want
    for record in records:
        for peer, link in record["links"].items():
            assert link["ring"] == "ready" and link["ring_lent"] > 0, (record["worker"], peer, link)
            if not keep:
                assert link["ring_frames"] > 2, (record["worker"], peer, link)
                assert link["ring_published"] > 0 and link["ring_learned"] > 0, (record["worker"], peer, link)


@pytest.mark.usefixtures("no_leftover_rings")
def test_a_process_without_rings_makes_its_peer_send_on_the_socket(tmp_path: Path) -> None:
    records = run(tmp_path, env={1: {"PYTIMELY_SHARED_MEMORY": "0"}})
    assert {r["worker"]: (r["count"], r["digest"]) for r in records} == expected(2)
    assert [(link["ring"], link["ring_frames"]) for r in records for link in r["links"].values()] == [("none", 0)] * 2


@pytest.mark.usefixtures("no_leftover_rings")
def test_a_killed_process_leaves_no_ring_behind(tmp_path: Path) -> None:
    cluster = Cluster(2)
    try:
        cluster.start(["tests.cluster.jobs:ring_exchange", str(tmp_path / "out"), "100000", str(ROWS)])
        # Once the link is up (both rings mapped, their names gone), in mid-stream: kill a process. Waited for
        # rather than slept on: a loaded machine may take seconds to start both processes.
        streaming = [tmp_path / f"out.{worker}.streaming" for worker in (0, 1)]
        wait_until(lambda: all(path.exists() for path in streaming), 60, "both workers streaming")
        assert [p.poll() for p in cluster.procs] == [None, None]
        os.kill(cluster.procs[1].pid, signal.SIGKILL)
        results = cluster.wait(timeout=60)
    finally:
        cluster.kill()
    assert results[0][0] == 1 and "process 1" in results[0][2], report(results)
