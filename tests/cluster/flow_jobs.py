"""Worker functions for the flow-control and fault tests: ``python -m pytimely run tests.cluster.flow_jobs:NAME``.

Arguments arrive in ``sys.argv``: ``OUT EPOCHS ROWS DELAY``.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from typing import Any

import numpy as np

from pytimely import Scope, Worker


def flood_both(worker: Worker) -> None:
    """Every worker sends ``EPOCHS`` batches of ``ROWS`` int64s to the next worker, which takes ``DELAY`` s each.

    Writes ``OUT.<pid>.json``: the worker's communication counters, its peak RSS and how many rows it received.
    """
    out, epochs, rows, delay = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    peers = worker.peers
    received = [0]

    def take(_: Any, batch: Any) -> None:
        received[0] += len(batch)
        time.sleep(delay)

    def build(scope: Scope[int]) -> Any:
        handle, stream = scope.new_input()
        slow = stream.exchange(
            lambda b: np.full(len(b), (worker.index + 1) % peers, dtype=np.int64), vectorized=True
        ).inspect_batch(take)
        return handle, slow.probe()

    handle, probe = worker.dataflow(build)
    batch = np.ones(rows, dtype=np.int64)
    for _ in range(epochs):
        handle.send_batch(batch)
        worker.step()
    handle.close()
    worker.step_while(lambda: not probe.done())
    stats = worker.communication_stats()
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with open(f"{out}.{os.getpid()}.json", "w", encoding="utf-8") as f:
        json.dump({"worker": worker.index, "received": received[0], "max_rss_kib": peak_kib, **stats}, f)
