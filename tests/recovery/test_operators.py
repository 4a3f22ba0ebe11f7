"""Every stateful operator is durable: a run that dies mid-way and resumes on another number of workers gives
the output of a run that never died. The jobs know nothing of recovery but ``execute(..., recovery=)``."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytimely import Worker, execute
from pytimely.dataflow.operators.window import DropLate, Session, Sliding, Tumbling, window
from pytimely.recovery import Recovery
from tests.recovery.jobs import Crash

EPOCHS = 10


def _events(epoch: int) -> list[tuple[int, int]]:
    """``(event time, key)`` at ``epoch``; a few are late (event time before the epoch)."""
    rng = random.Random(epoch)
    return [(max(0, 2 * epoch + rng.randrange(-3, 4)), rng.randrange(6)) for _ in range(20)]


def _run(store: Path, workers: int, build: Callable[[Any], Any], crash: int | None = None) -> list[Any]:
    """Feed ``_events`` epoch by epoch into ``build(stream) -> (stream out, extra state to return)``; worker 0's
    gathered output, with what each worker's extra reports."""

    def job(worker: Worker) -> Any:
        def dataflow(scope: Any) -> Any:
            handle, stream = scope.new_input(name="events")
            out, extra = build(stream)
            # The input's probe paces the loop: a session holds its first time until it closes, far later.
            return handle, stream.probe(), out.exchange(lambda _: 0, name="gather").capture(), extra

        handle, probe, captured, extra = worker.dataflow(dataflow)
        for epoch in range(EPOCHS):
            handle.send_batch(_events(epoch)[worker.index :: worker.peers])
            if crash == epoch and worker.index == 0:
                raise Crash(f"dies at epoch {epoch}")
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(handle.time))
            time.sleep(0.005)
            worker.step()
        handle.close()
        worker.finish()
        return sorted((t, r) for t, batch in captured for r in batch), extra() if extra else None

    return execute(job, workers, recovery=Recovery(store, job="ops"))


def _windows(kind: Any) -> Callable[[Any], Any]:
    def build(stream: Any) -> Any:
        late = DropLate()
        out = window(stream, kind, time=0, key=1, value=None, aggregate="count", late=late, name="windows")
        return out, lambda: late.dropped

    return build


def _stateful_map(stream: Any) -> Any:
    pairs = stream.map(lambda r: (r[1], r[0]), name="key by")

    def mapper(state: Any, value: int) -> tuple[Any, Any]:
        seen = (state or 0) + value
        return seen, seen

    return pairs.stateful_map(mapper, name="running sum"), None


def _canonical(name: str, rows: list[Any]) -> Any:
    """What a run must reproduce: windows' rows as they are; a running sum's changes per key and epoch counted,
    with the last (within an epoch a key's values arrive in any order, so the sums between vary)."""
    if name != "stateful_map":
        return rows
    seen: dict[tuple[int, int], list[int]] = {}
    for t, (k, total) in rows:
        seen.setdefault((t, k), []).append(total)
    return sorted((t, k, len(v), max(v)) for (t, k), v in seen.items())


@pytest.mark.parametrize(
    ("name", "build"),
    [
        ("tumbling", _windows(Tumbling(5))),
        ("sliding", _windows(Sliding(6, 2))),
        ("sessions", _windows(Session(3))),
        ("stateful_map", _stateful_map),
    ],
)
@pytest.mark.parametrize(("before", "after", "crash"), [(2, 3, 6), (3, 1, 4)])
def test_a_resumed_run_gives_what_an_uninterrupted_one_gives(
    tmp_path: Path, name: str, build: Callable[[Any], Any], before: int, after: int, crash: int
) -> None:
    expected = _run(tmp_path / "clean", 2, build)
    with pytest.raises(Crash):
        _run(tmp_path / "store", before, build, crash=crash)
    assert (tmp_path / "store" / "manifests").is_dir(), "a snapshot was committed before the crash"
    resumed = _run(tmp_path / "store", after, build)
    assert _canonical(name, resumed[0][0]) == _canonical(name, expected[0][0])
    if name in ("tumbling", "sliding", "sessions"):
        # Late records dropped: counted once, whichever worker counted them.
        assert sum(d for _, d in resumed) == sum(d for _, d in expected)


def _edges() -> Any:
    import numpy as np

    rng = random.Random(16)
    return np.array([(rng.randrange(300), rng.randrange(300), rng.randrange(EPOCHS)) for _ in range(400)],
                    dtype=np.int64)  # fmt: skip


def _components(store: Path, workers: int, crash: int | None = None) -> Any:
    """Connected components of ``_edges`` epoch by epoch; worker 0's ``(epoch, vertex, label)`` changes."""
    import numpy as np

    from pytimely.algorithms import connected_components

    edges = _edges()

    def job(worker: Worker) -> Any:
        mine = edges[worker.index :: worker.peers]

        def build(scope: Any) -> Any:
            handle, stream = scope.new_input(name="edges")
            labels = connected_components(stream)
            gathered = labels.exchange(lambda b: np.zeros(len(b), dtype=np.int64), vectorized=True, name="gather")
            return handle, gathered.capture(), labels.probe()

        handle, captured, probe = worker.dataflow(build)
        for epoch in range(EPOCHS):
            handle.advance_to(epoch)
            handle.send_batch(mine[mine[:, 2] == epoch, :2])
            if crash == epoch and worker.index == 0:
                raise Crash(f"dies at epoch {epoch}")
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(handle.time))
            time.sleep(0.005)
            worker.step()
        return captured

    parts = execute(job, workers, recovery=Recovery(store, job="components"))
    return sorted((t, *row) for t, batch in parts[0] for row in np.asarray(batch).tolist())


@pytest.mark.parametrize(("before", "after", "crash"), [(2, 3, 5), (2, 1, 8), (3, 2, 4)])
def test_components_resume_on_another_number_of_workers(tmp_path: Path, before: int, after: int, crash: int) -> None:
    expected = _components(tmp_path / "clean", 2)
    with pytest.raises(Crash):
        _components(tmp_path / "store", before, crash=crash)
    assert _components(tmp_path / "store", after) == expected
