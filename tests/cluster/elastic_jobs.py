"""Jobs for the rescaling tests: ``python -m pytimely run tests.cluster.elastic_jobs:word_count OUT EPOCHS ROWS PLAN``.

``PLAN`` is ``E:+1,E2:-1``-style: a process joins after epoch ``E`` and the newest process leaves after ``E2``.
Every member worker sends ``ROWS`` words per epoch to a word-counting state machine whose bins follow the
members; worker 0 writes each word's last count.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from pytimely import Scope, Worker
from pytimely.io import atomic_output
from pytimely.membership import RescalePlan, balanced_moves
from tests.cluster.bins_jobs import words_for


def _count(key: Any, value: int, state: int | None) -> tuple[int, list[tuple[str, int, int]]]:
    total = (state or 0) + value
    return total, [(key, total, 0)]


def word_count(worker: Worker) -> None:
    """Count words while processes join and leave as the plan says; worker 0 writes the counts."""
    out, epochs, rows, text = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    initial = worker.peers // worker.workers_per_process
    plan = RescalePlan.parse(text, initial=initial, workers=worker.workers_per_process)

    def build(scope: Scope[int]) -> Any:
        handle, words = scope.new_input(name="words")
        control_handle, control = scope.new_input(name="control")
        me = worker.index
        counts = words.map(lambda w: (w, 1)).state_machine(_count, control=control)
        gathered = counts.map(lambda r: (r[0], r[1], me)).exchange(lambda _: 0, name="gather")
        return handle, control_handle, gathered.capture(), gathered.probe()

    handle, control_handle, captured, probe = worker.dataflow(build)
    me = worker.index
    start = handle.time if worker.joined else 0
    if worker.joined:
        # A newcomer takes part from the epoch after the join; it takes its bins then.
        epoch = plan.joins_at(me)
        handle.advance_to(epoch)
        control_handle.advance_to(epoch)
        control_handle.send_batch(balanced_moves(epoch, plan.members_at(epoch)))
        start = epoch
    for epoch in range(start, epochs):
        members = plan.members_at(epoch)
        if me not in members:
            # This worker's process leaves: its bins go to the others at this epoch.
            control_handle.send_batch(balanced_moves(epoch, members))
            # Lingering lets the others run ahead, so this worker holds the only capability at the frontier.
            time.sleep(float(os.environ.get("ELASTIC_LEAVE_DELAY", "0")))
            worker.leave(at=epoch)
            return
        if epoch in plan.join_epochs:
            wanted = set(members)
            worker.step_while(lambda: not wanted <= set(worker.members))  # noqa: B023 - used at once
        handle.send_batch(words_for(me, epoch, rows))
        handle.advance_to(epoch + 1)
        control_handle.advance_to(epoch + 1)
        worker.step_while(lambda: probe.less_than(handle.time))
    handle.close()
    control_handle.close()
    worker.step_while(lambda: not probe.done())
    if me == 0:
        counts: dict[str, int] = {}
        emitters: dict[int, int] = {}
        for _, batch in captured:
            for word, total, emitter in batch:
                counts[word] = max(counts.get(word, 0), total)
                emitters[emitter] = emitters.get(emitter, 0) + 1
        with atomic_output(out) as f:
            json.dump({"counts": counts, "emitters": emitters}, f)
