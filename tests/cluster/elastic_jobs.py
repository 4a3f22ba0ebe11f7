"""Jobs for the rescaling tests: ``python -m pytimely run tests.cluster.elastic_jobs:JOB OUT EPOCHS ROWS PLAN``.

``PLAN`` is ``E:+1,E2:-1``-style (see :class:`pytimely.membership.RescalePlan`); every member worker sends
``ROWS`` records per epoch. ``word_count``: worker 0 writes each word's last count and how many counts each
worker emitted. ``components``: worker 0 writes each epoch's ``(vertex, label)`` changes.
"""

from __future__ import annotations

import json
import os
import random
import sys
from typing import Any

import numpy as np

from pytimely import Worker
from pytimely.algorithms.rescaling import components_while_rescaling, count_while_rescaling
from pytimely.io import atomic_output
from pytimely.membership import RescalePlan
from tests.cluster.bins_jobs import words_for


def bins_per_epoch() -> int | None:
    """The fluid migration's group size: ``BINS_PER_EPOCH`` (``all``: every bin at once), else the default."""
    text = os.environ.get("BINS_PER_EPOCH", "16")
    return None if text == "all" else int(text)


def word_count(worker: Worker) -> None:
    """Count words while processes join and leave as the plan says; worker 0 writes the counts."""
    out, epochs, rows, text = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    per = worker.workers_per_process
    plan = RescalePlan.parse(text, initial=worker.peers // per, workers=per)
    linger = float(os.environ.get("PYTIMELY_LEAVE_DELAY", "0"))
    result = count_while_rescaling(
        worker, lambda w, e, _: words_for(w, e, rows), epochs, plan, linger=linger, bins_per_epoch=bins_per_epoch()
    )
    if os.environ.get("RING_STATES"):
        # Each worker says, per peer process, whether its process offered that peer a ring the peer mapped.
        links = worker.communication_stats().get("links", {})
        with atomic_output(f"{out}.rings.{worker.index}") as f:
            json.dump({str(peer): link["ring"] for peer, link in links.items()}, f)
    if result is not None:
        counts, emitters = result
        with atomic_output(out) as f:
            json.dump({"counts": counts, "emitters": emitters}, f)


VERTICES = 4000
"""Edges join vertices below this, so components merge across epochs and workers."""


def edges_for(worker: int, epoch: int, rows: int) -> np.ndarray:
    """The edges worker ``worker`` sends at ``epoch``: an ``(n, 2)`` int64 array."""
    rng = random.Random(epoch * 1000 + worker)
    return np.array([(rng.randrange(VERTICES), rng.randrange(VERTICES)) for _ in range(rows)], dtype=np.int64)


def components(worker: Worker) -> None:
    """Label components while processes join and leave as the plan says; worker 0 writes the changes."""
    out, epochs, rows, text = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    per = worker.workers_per_process
    plan = RescalePlan.parse(text, initial=worker.peers // per, workers=per)
    result = components_while_rescaling(
        worker, lambda w, e, _: edges_for(w, e, rows), epochs, plan, bins_per_epoch=bins_per_epoch()
    )
    if result is not None:
        with atomic_output(out) as f:
            json.dump({"changes": result}, f)


def leave_held_back(worker: Worker) -> None:
    """Process 1's worker leaves at time 5 while process 0's keeps its input open at time 0: process 1 cannot leave
    (time 0 can still reach it), so its leave runs out of time (``sys.argv[1]`` seconds)."""
    import time

    def build(scope: Any) -> Any:
        handle, stream = scope.new_input()
        return handle, stream.probe()

    _handle, _ = worker.dataflow(build)  # kept: process 0 holds its input open at time 0
    if worker.index == 1:
        worker.leave(at=5, timeout=float(sys.argv[1]))
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        worker.step()
        time.sleep(0.01)


def bootstrap_starved(worker: Worker) -> None:
    """The first process's worker builds a dataflow, then sleeps ``sys.argv[1]`` s without stepping: a process that
    joins meanwhile gets no progress state from it."""
    import time

    def build(scope: Any) -> Any:
        handle, stream = scope.new_input()
        return handle, stream.probe()

    _handle, _ = worker.dataflow(build)
    if not worker.joined:
        time.sleep(float(sys.argv[1]))
