"""The event log: what a worker's dataflows did, as a stream of events (timely's ``logging`` module).

Off by default. A worker given a sink (``Worker(..., log=sink)``, ``execute(..., log=sink)``) hands
it one event per operator schedule, per message batch sent or taken, per progress batch, per frontier
and capability change and per membership change. Each event is a plain ``dict`` with ``event`` (its
kind), ``worker``, ``dataflow`` and ``at`` (wall-clock seconds), and the fields of its kind:

========== ==========================================================================================
operates   ``op``, ``name``, ``inputs``, ``outputs``, ``scope`` (once, when the dataflow is built)
schedule   ``op``, ``name``, ``start``, ``stop``, ``duration`` (seconds; one run of the logic)
messages   ``op``, ``port``, ``direction`` (``sent`` at an output / ``received`` at an input),
           ``records``, ``bytes`` (``None`` unless the batch knows its size), ``time``, ``channels``
progress   ``direction`` (``sent``/``received``), ``updates`` (pointstamp changes in the batch)
frontier   ``op``, ``port``, ``frontier`` (the input port's new frontier, as a list)
capability ``op``, ``port``, ``time``, ``diff`` (this worker's capabilities, as it reports them)
membership ``kind`` (``join``/``leave``/…), ``workers``
========== ==========================================================================================

Times are kept as they are for callbacks; the JSON-lines sink writes non-JSON values with ``repr``.
When no sink is given the dataflow code pays one ``is not None`` test per step or per batch, never
per record (see bench/bench_dataflow.py, row ``log``).

Sinks: any ``Callable[[dict], None]``; :func:`to_logging` (Python :mod:`logging`); :class:`JsonLines`
(one file per worker); :func:`tee` (several at once: a file and the metrics of
:mod:`pytimely.observe.metrics`, for instance).
"""

from __future__ import annotations

import json
import logging as _logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from pytimely.errors import InvalidArgument

__all__ = ["Event", "EventLogger", "JsonLines", "Sink", "batch_bytes", "combine", "tee", "to_logging"]

Event = dict[str, Any]
Sink = Callable[[Event], None]
"""Where events go: called with each event, on the thread of the worker that made it."""


def batch_bytes(batch: Any) -> int | None:
    """The size in bytes of a numpy array or Arrow batch; ``None`` for a list (its size is not known cheaply)."""
    size = getattr(batch, "nbytes", None)
    return size if isinstance(size, int) else None


class EventLogger:
    """One worker's view of a sink, for one dataflow: stamps events with the worker, dataflow and time."""

    __slots__ = ("_offset", "dataflow", "sink", "worker")

    def __init__(self, sink: Sink, worker: int, dataflow: str) -> None:
        self.sink = sink
        self.worker = worker
        self.dataflow = dataflow
        # perf_counter for durations, shifted to wall-clock seconds so logs of several processes line up.
        self._offset = time.time() - time.perf_counter()

    def emit(self, kind: str, /, **fields: Any) -> None:
        """Send one event of ``kind`` with ``fields``."""
        fields["event"] = kind
        fields["worker"] = self.worker
        fields["dataflow"] = self.dataflow
        fields["at"] = time.perf_counter() + self._offset
        self.sink(fields)

    def operates(self, op: int, name: str, inputs: int, outputs: int, scope: str) -> None:
        """An operator exists (logged when its dataflow is built)."""
        self.emit("operates", op=op, name=name, inputs=inputs, outputs=outputs, scope=scope)

    def schedule(self, op: int, name: str, start: float, stop: float) -> None:
        """An operator's logic ran from ``start`` to ``stop`` (``perf_counter`` seconds)."""
        offset = self._offset
        self.emit("schedule", op=op, name=name, start=start + offset, stop=stop + offset, duration=stop - start)

    def messages(self, op: int, port: int, direction: str, time: Any, batch: Any, channels: int = 1) -> None:
        """A batch was sent at an output port (to ``channels`` channels) or taken at an input port."""
        self.emit(
            "messages", op=op, port=port, direction=direction, records=len(batch), bytes=batch_bytes(batch),
            time=time, channels=channels,
        )

    def progress(self, direction: str, updates: int) -> None:
        """A progress batch of ``updates`` pointstamp changes was sent or applied."""
        self.emit("progress", direction=direction, updates=updates)

    def frontier(self, op: int, port: int, frontier: list[Any]) -> None:
        """An input port's frontier moved to ``frontier``."""
        self.emit("frontier", op=op, port=port, frontier=frontier)

    def capability(self, op: int, port: int, time: Any, diff: int) -> None:
        """This worker's count of capabilities at ``time`` on an output changed by ``diff``."""
        self.emit("capability", op=op, port=port, time=time, diff=diff)

    def membership(self, kind: str, workers: Iterable[int]) -> None:
        """Workers joined or left the computation."""
        self.emit("membership", kind=kind, workers=list(workers))


def tee(*sinks: Sink) -> Sink:
    """A sink that hands every event to each of ``sinks`` in turn."""
    if not sinks:
        raise InvalidArgument("tee needs at least one sink")

    def sink(event: Event) -> None:
        for s in sinks:
            s(event)

    return sink


def combine(*sinks: Sink | None) -> Sink | None:
    """The sinks that are not ``None`` as one (``None`` if none is left, so the log stays off)."""
    given = [s for s in sinks if s is not None]
    if not given:
        return None
    return given[0] if len(given) == 1 else tee(*given)


def to_logging(logger: _logging.Logger | str = "pytimely.events", level: int = _logging.DEBUG) -> Sink:
    """A sink that logs every event as one JSON line through Python's :mod:`logging` (at ``level``)."""
    log = _logging.getLogger(logger) if isinstance(logger, str) else logger

    def sink(event: Event) -> None:
        if log.isEnabledFor(level):
            log.log(level, "%s", json.dumps(event, default=repr))

    return sink


class JsonLines:
    """A sink writing each worker's events as JSON lines to a file of its own: ``PATH.w<worker>.jsonl``.

    Files are opened on a worker's first event and written only by that worker's thread; call
    :meth:`close` (or use ``with``) when the computation has finished to flush them.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.parent.is_dir():
            raise InvalidArgument(f"event log: the directory of {str(self.path)!r} does not exist")
        self._files: dict[int, IO[str]] = {}
        self._lock = threading.Lock()

    def file_for(self, worker: int) -> Path:
        """The file worker ``worker``'s events go to."""
        return self.path.with_name(f"{self.path.name}.w{worker}.jsonl")

    def _open(self, worker: int) -> IO[str]:
        with self._lock:
            handle = self._files.get(worker)
            if handle is None:
                handle = open(self.file_for(worker), "w", encoding="utf-8")  # noqa: SIM115 - closed by close()
                self._files[worker] = handle
            return handle

    def __call__(self, event: Event) -> None:
        """Write ``event`` to its worker's file."""
        worker = event["worker"]
        handle = self._files.get(worker)
        if handle is None:
            handle = self._open(worker)
        handle.write(json.dumps(event, default=repr) + "\n")

    def close(self) -> None:
        """Flush and close every file."""
        with self._lock:
            for handle in self._files.values():
                handle.close()
            self._files.clear()

    def __enter__(self) -> JsonLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
