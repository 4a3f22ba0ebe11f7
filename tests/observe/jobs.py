"""Worker functions the observability tests run in real processes (``python -m pytimely run tests.observe.jobs:NAME``).

Arguments arrive in ``sys.argv``: ``EPOCHS ROWS [DELAY]``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from pytimely import Scope, Worker


def counted(worker: Worker) -> int:
    """Send ``ROWS`` numbers per epoch, spread over the workers, exchange them, and return how many this worker saw.

    The records go through ``rows`` (an input), an exchange into ``square`` and ``seen``, then a probe.
    """
    epochs, rows = int(sys.argv[1]), int(sys.argv[2])
    delay = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    seen = [0]

    def tally(batch: Any) -> None:
        seen[0] += len(batch)

    def build(scope: Scope[int]) -> tuple[Any, Any]:
        handle, stream = scope.new_input(name="rows")
        squared = stream.exchange(lambda x: x, name="spread").map(lambda x: x * x, name="square")
        probe = squared.inspect_batch(lambda _t, b: tally(b), name="seen").probe()
        return handle, probe

    handle, probe = worker.dataflow(build)
    for epoch in range(epochs):
        handle.send_batch([x for x in range(rows) if x // 7 % worker.peers == worker.index])
        handle.advance_to(epoch + 1)
        worker.step_while(lambda e=epoch: probe.less_equal(e), timeout=120)
        if delay:
            time.sleep(delay)
    handle.close()
    worker.finish()
    return seen[0]
