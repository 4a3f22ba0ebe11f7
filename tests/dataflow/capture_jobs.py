"""A capturing process for the socket tests: ``python -m tests.dataflow.capture_jobs HOST PORT SECRET_HEX WORKERS``
sends the events of :func:`epoch_batches` (numpy batches over epochs) to a replaying process."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from pytimely import Scope, Worker, execute

EPOCHS = 5


def epoch_batches(worker: int, epoch: int) -> Any:
    """What worker ``worker`` sends at ``epoch`` (nothing at epoch 2: its progress must still pass)."""
    if epoch == 2:
        return np.zeros((0, 2), dtype=np.int64)
    rows = np.arange(3 + worker + epoch, dtype=np.int64)
    return np.stack([rows % 4, rows * 10 + worker], axis=1)


def main(argv: list[str]) -> None:
    """Run the capture described in the module doc."""
    host, port, secret, workers = argv[0], int(argv[1]), bytes.fromhex(argv[2]), int(argv[3])

    def job(worker: Worker) -> None:
        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            stream.capture_to_socket((host, port), secret, timeout=60)
            return handle, stream.probe()

        handle, probe = worker.dataflow(build)
        for epoch in range(EPOCHS):
            handle.advance_to(epoch)
            worker.step_while(lambda: probe.less_than(handle.time), timeout=60)
            handle.send_batch(epoch_batches(worker.index, epoch))

    execute(job, workers)


if __name__ == "__main__":
    main(sys.argv[1:])
