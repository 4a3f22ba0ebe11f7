"""A job for the rescaling tests: ``python -m pytimely run tests.cluster.elastic_jobs:word_count OUT EPOCHS ROWS PLAN``.

``PLAN`` is ``E:+1,E2:-1``-style (see :class:`pytimely.membership.RescalePlan`); every member worker sends
``ROWS`` words per epoch; worker 0 writes each word's last count and how many counts each worker emitted.
"""

from __future__ import annotations

import json
import os
import sys

from pytimely import Worker
from pytimely.algorithms.elastic_count import count_while_rescaling
from pytimely.io import atomic_output
from pytimely.membership import RescalePlan
from tests.cluster.bins_jobs import words_for


def word_count(worker: Worker) -> None:
    """Count words while processes join and leave as the plan says; worker 0 writes the counts."""
    out, epochs, rows, text = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    per = worker.workers_per_process
    plan = RescalePlan.parse(text, initial=worker.peers // per, workers=per)
    linger = float(os.environ.get("PYTIMELY_LEAVE_DELAY", "0"))
    result = count_while_rescaling(worker, lambda w, e, _: words_for(w, e, rows), epochs, plan, linger=linger)
    if result is not None:
        counts, emitters = result
        with atomic_output(out) as f:
            json.dump({"counts": counts, "emitters": emitters}, f)
