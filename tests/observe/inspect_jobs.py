"""Worker functions for the graph-view and explain tests (importable by ``pytimely show``/``explain``)."""

from __future__ import annotations

from typing import Any

from pytimely import Scope, Worker
from pytimely.algorithms.connected_components import connected_components
from tests.cluster.misuse_jobs import hoarding


def wordcount(worker: Worker) -> Any:
    """The word-count dataflow of examples/wordcount.py, fed nothing."""

    def build(scope: Scope[int]) -> Any:
        handle, stream = scope.new_input(name="words")
        return handle, stream.count_by().exchange(lambda _: 0, name="gather").capture()

    handle, captured = worker.dataflow(build)
    handle.send_batch(["a", "b", "a"])
    return captured


def wcc(worker: Worker) -> Any:
    """The connected-components dataflow of examples/wcc.py; steps until its probe passes 0 (show stops there)."""

    def build(scope: Scope[int]) -> Any:
        handle, stream = scope.new_input(name="edges")
        return handle, connected_components(stream).exchange(lambda b: b, name="gather").probe()

    handle, probe = worker.dataflow(build)
    handle.close()
    worker.step_while(lambda: not probe.done(), timeout=60)


def held_at_zero(worker: Worker) -> None:
    """A probe behind an operator that keeps its capability at time 0 for ever; step_while stalls."""
    handle, probe = hoarding(worker)
    handle.advance_to(3)
    worker.step_while(lambda: probe.less_than(3), timeout=120)


def held_after_downgrade(worker: Worker) -> None:
    """As :func:`held_at_zero`, but the operator first moves its capability to time 1 (a change it must report)."""
    handle, probe = hoarding(worker, downgrade=1)
    handle.advance_to(3)
    worker.step_while(lambda: probe.less_than(3), timeout=120)
