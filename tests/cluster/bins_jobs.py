"""A job for the bins cluster test: ``python -m pytimely run tests.cluster.bins_jobs:moving_count OUT EPOCHS ROWS``.

Every worker sends ``ROWS`` words per epoch to a word-counting state machine; worker 0 moves bins between
workers on the control stream at two epochs. Worker 0 writes, as JSON, each word's last count and which
worker emitted the word's counts at each epoch.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

from pytimely import Scope, Worker
from pytimely.dataflow.bins import Move
from pytimely.io import atomic_output

VOCABULARY = [f"w{i}" for i in range(300)] + ["é", "naïve", "日本"]


def words_for(worker: int, epoch: int, rows: int) -> list[str]:
    """The words worker ``worker`` sends at ``epoch``."""
    return random.Random(epoch * 1000 + worker).choices(VOCABULARY, k=rows)


def moves_at(epoch: int, peers: int) -> list[Move]:
    """The moves worker 0 sends at ``epoch``: every bin to the next worker at 2, half of them back at 4."""
    if epoch == 2:
        return [Move(3, b, (b + 1) % peers) for b in range(256)]
    if epoch == 4:
        return [Move(5, b, b % peers) for b in range(0, 256, 2)]
    return []


def _count(key: Any, value: int, state: int | None) -> tuple[int, list[tuple[str, int, int]]]:
    total = (state or 0) + value
    return total, [(key, total, 0)]


def moving_count(worker: Worker) -> None:
    """Count words with bins moving between the processes mid-stream; worker 0 writes the result."""
    out, epochs, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

    def build(scope: Scope[int]) -> Any:
        handle, words = scope.new_input(name="words")
        control_handle, control = scope.new_input(name="control")
        me = worker.index
        counts = words.map(lambda w: (w, 1)).state_machine(_count, control=control)
        tagged = counts.map(lambda r: (r[0], r[1], me)).exchange(lambda _: 0, name="gather")
        return handle, control_handle, tagged.capture(), tagged.probe()

    handle, control_handle, captured, probe = worker.dataflow(build)
    for epoch in range(epochs):
        handle.send_batch(words_for(worker.index, epoch, rows))
        if worker.index == 0:
            control_handle.send_batch(moves_at(epoch, worker.peers))
        handle.advance_to(epoch + 1)
        control_handle.advance_to(epoch + 1)
        worker.step_while(lambda: probe.less_than(handle.time))
    handle.close()
    control_handle.close()
    worker.step_while(lambda: not probe.done())
    if worker.index == 0:
        counts: dict[str, int] = {}
        emitters: dict[str, set[tuple[int, int]]] = {}
        for t, batch in captured:
            for word, total, emitter in batch:
                counts[word] = max(counts.get(word, 0), total)
                emitters.setdefault(word, set()).add((t, emitter))
        with atomic_output(out) as f:
            json.dump({"counts": counts, "emitters": {w: sorted(e) for w, e in emitters.items()}}, f)
