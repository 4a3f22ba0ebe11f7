"""A pytimely dataflow as a simple module's function (:func:`dataflow_step`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytimely.errors import InvalidArgument


class DataflowStep:
    """A simple module's function that runs a pytimely dataflow: ``step(**inputs)`` gives the collected output.

    ``build(scope, **streams)`` gets one stream per input (named like the inputs) and returns the stream to
    collect, or a mapping of name to stream (the step then returns a dict of name to output). Each input value
    — a list or tuple of records, a numpy array, or an Arrow table or batch — is split into contiguous shares,
    one per worker, sent in batches at time 0; the dataflow runs to completion on ``workers`` workers of this
    process (:func:`pytimely.execute`). An output is a list of records, or one numpy array / Arrow table when
    every batch is one; the order of records is not specified.

    Picklable when ``build`` is a module-level function, so a :class:`ProcessExecutor` can run it. Its code
    fingerprint is that of ``build`` (the number of workers does not change the result).
    """

    def __init__(
        self, build: Callable[..., Any], workers: int = 1, *, seed: int | None = None, batch_size: int = 1 << 16
    ) -> None:
        if type(workers) is not int or workers < 1:
            raise InvalidArgument(f"workers must be a positive int, got {workers!r}")
        if batch_size < 1:
            raise InvalidArgument(f"batch_size must be positive, got {batch_size!r}")
        self.build = build
        self.workers = workers
        self.seed = seed
        self.batch_size = batch_size

    def __repr__(self) -> str:
        return f"DataflowStep({getattr(self.build, '__qualname__', self.build)!r}, workers={self.workers})"

    def __code_fingerprint__(self) -> str:
        """The code fingerprint of ``build`` (used by :func:`pytimely.workflow.fingerprint.code_fingerprint`)."""
        from pytimely.workflow.fingerprint import code_fingerprint

        return code_fingerprint(self.build)

    def __call__(self, **inputs: Any) -> Any:
        """Run the dataflow over ``inputs`` and return its output."""
        from pytimely import execute

        names = sorted(inputs)
        build = self.build
        batch_size = self.batch_size

        def job(worker: Any) -> Any:
            def dataflow(scope: Any) -> tuple[dict[str, Any], Any]:
                handles, streams = {}, {}
                for name in names:
                    handles[name], streams[name] = scope.new_input(name=name)
                out = build(scope, **streams)
                if isinstance(out, Mapping):
                    return handles, {key: stream.capture() for key, stream in out.items()}
                return handles, out.capture()

            handles, captured = worker.dataflow(dataflow)
            for name in names:
                for batch in _batches(_share(inputs[name], worker.index, worker.peers), batch_size):
                    handles[name].send_batch(batch)
            return captured

        parts = execute(job, self.workers, seed=self.seed)
        if parts and isinstance(parts[0], Mapping):
            return {key: _gather([part[key] for part in parts]) for key in parts[0]}
        return _gather(parts)


def dataflow_step(
    build: Callable[..., Any], workers: int = 1, *, seed: int | None = None, batch_size: int = 1 << 16
) -> DataflowStep:
    """A simple module's function running the dataflow ``build(scope, **streams)``; see :class:`DataflowStep`."""
    return DataflowStep(build, workers, seed=seed, batch_size=batch_size)


def _share(records: Any, index: int, peers: int) -> Any:
    """Worker ``index``'s contiguous share of ``records``."""
    kind = type(records)
    if kind.__module__.startswith("pyarrow") and kind.__name__ in ("Table", "RecordBatch"):
        n = records.num_rows
        lo, hi = n * index // peers, n * (index + 1) // peers
        return records.slice(lo, hi - lo)
    if not isinstance(records, Sequence) and not hasattr(records, "__array__"):
        records = list(records)
    n = len(records)
    return records[n * index // peers : n * (index + 1) // peers]


def _batches(records: Any, size: int) -> list[Any]:
    kind = type(records)
    if kind.__module__.startswith("pyarrow") and kind.__name__ == "Table":
        return [b for b in records.to_batches(max_chunksize=size) if b.num_rows]
    return [records[start : start + size] for start in range(0, len(records), size)]


def _gather(parts: list[list[tuple[Any, Any]]]) -> Any:
    batches = [batch for captured in parts for _, batch in captured]
    if batches and all(type(b).__module__ == "numpy" for b in batches):
        import numpy as np

        return np.concatenate(batches)
    if batches and all(type(b).__name__ == "RecordBatch" and type(b).__module__.startswith("pyarrow") for b in batches):
        import pyarrow as pa

        return pa.Table.from_batches(batches)
    records: list[Any] = []
    for batch in batches:
        records.extend(batch)
    return records
