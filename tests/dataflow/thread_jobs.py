"""Worker functions run in real processes (``python -m pytimely run tests.dataflow.thread_jobs:NAME OUT``)."""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from pytimely import Scope, Worker

EPOCHS = 6


def thread_fed(worker: Worker) -> None:
    """A thread of each process feeds per-epoch records; worker 0 writes the count per epoch to OUT as JSON."""
    out = sys.argv[1]

    def build(scope: Scope[int]) -> tuple[Any, Any, Any]:
        feed, stream = scope.new_sync_input("from_thread", type=int)
        counted = stream.exchange(lambda r: r).count()
        return feed, counted.capture(), counted.probe()

    feed, captured, probe = worker.dataflow(build)
    sent = threading.Event()

    def producer() -> None:
        for epoch in range(EPOCHS):
            feed.send(epoch, list(range(epoch + 1)))
            feed.advance_to(epoch + 1)
            if epoch == EPOCHS // 2:
                sent.wait(30)  # half the epochs wait until the worker has seen the first ones
        feed.close()

    thread = threading.Thread(target=producer, name=f"producer-{worker.index}")
    thread.start()
    worker.step_while(lambda: probe.less_than(EPOCHS // 2), timeout=60)
    sent.set()
    worker.step_while(lambda: not probe.done(), timeout=60)
    thread.join(60)
    if worker.index == 0:
        counts = {str(t): sum(batch) for t, batch in captured}
        with open(out, "w") as f:
            json.dump(counts, f)
