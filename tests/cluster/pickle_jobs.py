"""A worker function sending a record that cannot be pickled through an exchange: ``pytimely run`` runs it."""

from __future__ import annotations

import threading
from typing import Any

from pytimely import Scope, Worker


def lock_through_exchange(worker: Worker) -> None:
    """Every worker sends ``(i, lock)`` pairs keyed to every worker: some must cross to the other process."""

    def build(scope: Scope[int]) -> Any:
        handle, stream = scope.new_input(name="locks")
        stream.map(lambda pair: pair, name="tag").exchange(lambda pair: pair[0], name="by key").probe()
        return handle

    handle = worker.dataflow(build)
    for i in range(worker.peers):
        handle.send((i, threading.Lock()))
