"""Helpers for testing dataflows: a source fed epoch by epoch, a sink collecting per epoch, one-call runners.

* :func:`testing_source` sends ``epochs[i]`` at time ``i`` (or each ``{time: batch}`` item at its time), one
  epoch per step, each worker its share; :data:`EOF` ends the input there and :data:`ABORT` makes the source
  fail with :class:`~pytimely.errors.SimulatedAbortError`, as a crash would.
* :class:`TestingSink` collects what reaches it on every worker: ``by_epoch()`` merges them per time.
* :func:`run_dataflow` builds and runs a dataflow on N in-process workers (optionally in a seeded order);
  :func:`run_simulated` runs it on a seeded simulated cluster of N processes whose messages between processes
  are pickled and delayed (:mod:`pytimely.communication.simulated`): the same seed gives the same schedule.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import pytimely.container as container
from pytimely.communication.simulated import Delivery, SimulatedCluster
from pytimely.errors import InvalidArgument, SimulatedAbortError

if TYPE_CHECKING:
    from pytimely.dataflow.capability import Capability
    from pytimely.dataflow.operator import OperatorInfo
    from pytimely.dataflow.ports import OutputPort
    from pytimely.dataflow.scope import Scope
    from pytimely.dataflow.stream import Stream
    from pytimely.worker import Worker

__all__ = [
    "ABORT",
    "EOF",
    "SimulatedRun",
    "TestingSink",
    "run_dataflow",
    "run_simulated",
    "testing_source",
]

R = TypeVar("R")


class _Marker:
    """A sentinel in a testing source's input."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


EOF = _Marker("EOF")
"""In a testing source's input: the input ends here (what follows is never sent)."""
ABORT = _Marker("ABORT")
"""In a testing source's input: the source fails here with :class:`SimulatedAbortError`."""


def _share(batch: Any, index: int, peers: int) -> Any:
    """Worker ``index``'s share of ``batch``: every ``peers``-th row, in the batch's own kind."""
    if peers == 1:
        return batch
    if type(batch) is list:
        return batch[index::peers]
    import numpy as np

    return container.take(batch, np.arange(index, container.length(batch), peers, dtype=np.int64))


def testing_source(
    scope: Scope[Any],
    epochs: Sequence[Any] | Mapping[Any, Any],
    *,
    split: bool = True,
    name: str = "testing_source",
) -> Stream[Any]:
    """A source sending each epoch's batch at its time, one epoch per step; see the module doc.

    ``epochs`` is a sequence (item ``i`` at time ``scope.minimum + i``; only int-timed scopes) or a mapping
    from time to batch, sent in time order; :data:`EOF` and :data:`ABORT` may stand for a batch. With
    ``split`` every worker sends its share of each batch (every ``peers``-th record), so the stream holds each
    record once whatever the worker count; without, every worker sends everything.
    """
    if isinstance(epochs, Mapping):
        items = sorted(epochs.items(), key=lambda kv: kv[0])
    elif isinstance(epochs, Sequence) and not isinstance(epochs, (str, bytes)):
        if type(scope.minimum) is not int:
            raise InvalidArgument(f"{name}: a sequence of epochs needs int times; give a mapping of times instead")
        items = [(scope.minimum + i, batch) for i, batch in enumerate(epochs)]
    else:
        raise InvalidArgument(f"{name}: epochs must be a sequence of batches or a mapping from time to batch")
    _check_epochs(items, scope.minimum, name)
    index, peers = scope.index, scope.peers

    def constructor(cap: Capability[Any], info: OperatorInfo) -> Callable[[OutputPort[Any, Any]], None]:
        position = [0]

        def logic(output: OutputPort[Any, Any]) -> None:
            if not cap.valid:
                return
            i = position[0]
            if i >= len(items) or items[i][1] is EOF:
                cap.drop()
                return
            time, batch = items[i]
            if batch is ABORT:
                raise SimulatedAbortError(
                    f"{name}: simulated abort on worker {index} at time {time!r} (the input's ABORT)",
                    operator=name,
                    worker=index,
                    time=time,
                )
            cap.downgrade(time)
            part = _share(batch, index, peers) if split else batch
            if len(part):
                output.give(cap, part)
            position[0] = i + 1
            info.activate()

        return logic

    return scope.source(constructor, name=name)


def _check_epochs(items: list[tuple[Any, Any]], minimum: Any, name: str) -> None:
    """Refuse, before anything is sent, an epoch that is not a batch and a time not of the scope's kind."""
    from pytimely.dataflow.capability import same_kind
    from pytimely.errors import BatchKindError

    for i, (time, batch) in enumerate(items):
        same_kind(minimum, time, f"{name}: epoch {i}")
        if batch is EOF or batch is ABORT:
            continue
        try:
            container.kind_of(batch)
        except BatchKindError:
            raise InvalidArgument(
                f"{name}: epoch {i} (time {time!r}) is {batch!r}, not a batch (a list, numpy array or Arrow batch "
                f"of records); to send one record per epoch write [[1], [2], [3]], to send them all at once [[1, 2, 3]]"
            ) from None


testing_source.__test__ = False  # type: ignore[attr-defined]  # pytest would collect it as a test by its name


@dataclass(frozen=True, slots=True)
class Caught:
    """One batch a :class:`TestingSink` received: on which worker, at which time."""

    worker: int
    time: Any
    batch: Any


def _plain(batch: Any) -> list[Any]:
    """A batch's records as plain Python values (rows of numpy and Arrow batches as tuples)."""
    return list(container.records(batch))


class TestingSink(Generic[R]):
    """Collects every batch that reaches it on any worker; create it outside ``execute`` and attach it inside."""

    __test__ = False  # not a pytest test class despite its name

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.caught: list[Caught] = []
        """Every batch received, in the order received (batch kinds as they were: numpy stays numpy)."""

    def attach(self, stream: Stream[Any], *, name: str = "testing_sink") -> None:
        """End ``stream`` in this sink (call it in each worker's build function)."""
        worker = stream.scope.index

        def take(time: Any, batch: Any) -> None:
            with self._lock:
                self.caught.append(Caught(worker, time, batch))

        stream.sink(take, name=name)

    def by_epoch(self) -> dict[Any, list[Any]]:
        """``{time: records}`` over every worker, each time's records sorted (as ``repr`` when unorderable)."""
        out: dict[Any, list[Any]] = {}
        with self._lock:
            for c in self.caught:
                out.setdefault(c.time, []).extend(_plain(c.batch))
        for records in out.values():
            try:
                records.sort()
            except TypeError:
                records.sort(key=repr)
        return out

    def records(self) -> list[Any]:
        """Every record received, in time order, each time's sorted like :meth:`by_epoch`."""
        from pytimely.order import sort_key

        return [r for _, rs in sorted(self.by_epoch().items(), key=lambda kv: sort_key(kv[0])) for r in rs]


def run_dataflow(
    build: Callable[[Scope[Any]], R],
    *,
    workers: int = 1,
    seed: int | None = None,
    check_serialization: bool = True,
) -> list[R]:
    """Build ``build(scope)`` on ``workers`` in-process workers, run it to the end; what ``build`` returned on each.

    Records crossing an exchange are pickled even in process (``check_serialization``), as they would be
    between processes; ``seed`` picks a random but reproducible order of the workers' steps.
    """
    from pytimely.execute import execute

    return execute(lambda worker: worker.dataflow(build), workers, seed=seed, check_serialization=check_serialization)


@dataclass(frozen=True, slots=True)
class SimulatedRun(Generic[R]):
    """What :func:`run_simulated` gives back: each worker's result and the deliveries the seed chose."""

    results: list[R]
    trace: list[Delivery]


def run_simulated(
    build: Callable[[Scope[Any]], R],
    *,
    processes: int = 2,
    workers_per_process: int = 1,
    seed: int = 0,
    max_delay: int = 8,
) -> SimulatedRun[R]:
    """Run ``build`` on a seeded simulated cluster (:class:`SimulatedCluster`) and return results and schedule.

    The seed chooses both the order of the workers' steps and every message's delay between processes, so a
    run is replayed exactly by the same seed.
    """
    from pytimely.execute import run_workers
    from pytimely.worker import Worker

    cluster = SimulatedCluster(processes, workers_per_process, seed, max_delay)
    workers = [Worker(a) for a in cluster.allocators()]

    def job(worker: Worker) -> R:
        return worker.dataflow(build)

    results = run_workers(job, workers, seed)
    return SimulatedRun(results, list(cluster.trace))
