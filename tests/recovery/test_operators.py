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
from pytimely.recovery.runtime import WorkerRecovery
from tests.recovery.jobs import Crash

EPOCHS = 10
TTL = 7


def _events(epoch: int) -> list[tuple[int, int]]:
    """``(event time, key)`` at ``epoch``; a few are late (event time before the epoch)."""
    rng = random.Random(epoch)
    return [(max(0, 2 * epoch + rng.randrange(-3, 4)), rng.randrange(6)) for _ in range(20)]


def _await_durable(worker: Worker, epoch: int) -> None:
    """Worker 0 steps until the snapshot of ``epoch`` is durable: under load the writer may not have finished it when
    the crash comes, and a run that resumes from nothing shows nothing of what restoring does."""
    hook = worker._recovery
    if isinstance(hook, WorkerRecovery) and epoch >= 0:
        worker.step_while(lambda: not hook.holds(epoch), timeout=120)


def _run(
    store: Path,
    workers: int,
    build: Callable[[Any], Any],
    crash: int | None = None,
    *,
    sink: bool = False,
    events: Callable[[int], list[Any]] = _events,
) -> list[Any]:
    """Feed ``_events`` epoch by epoch into ``build(stream) -> (stream out, extra state to return)``; worker 0's
    gathered output, with what each worker's extra reports and the epoch the run started at. ``sink``: the output
    is gathered by a sink (what this run sent), not by a capture (declared state: what every run sent);
    ``events``: what each epoch sends instead of ``_events``."""

    def job(worker: Worker) -> Any:
        def dataflow(scope: Any) -> Any:
            handle, stream = scope.new_input(name="events")
            out, extra = build(stream)
            gathered = out.exchange(lambda _: 0, name="gather")
            if sink:
                seen: list[tuple[Any, list[Any]]] = []
                gathered.sink(lambda t, batch: seen.append((t, list(batch))), name="seen")
            else:
                seen = gathered.capture()
            # The input's probe paces the loop: a session holds its first time until it closes, far later.
            return handle, stream.probe(), seen, extra

        handle, probe, captured, extra = worker.dataflow(dataflow)
        for epoch in range(EPOCHS):
            handle.send_batch(events(epoch)[worker.index :: worker.peers])
            if crash == epoch and worker.index == 0:
                _await_durable(worker, epoch - 1)
                raise Crash(f"dies at epoch {epoch}")
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(handle.time))
            time.sleep(0.005)
            worker.step()
        handle.close()
        worker.finish()
        # Ordered by time, then by text: records may hold None beside numbers (an outer join's).
        rows = sorted(((t, r) for t, batch in captured for r in batch), key=lambda tr: (tr[0], repr(tr[1])))
        return rows, extra() if extra else None, worker.resume_epoch

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


def _extremes(stream: Any) -> Any:
    pairs = stream.map(lambda r: (r[1], r[0]), name="key by")
    latest = pairs.max_final(name="latest").map(lambda kv: (kv[0] + 100, kv[1]), name="apart")
    return pairs.min_final(name="earliest").concat(latest), None


def _collect(keyed: bool) -> Callable[[Any], Any]:
    def build(stream: Any) -> Any:
        records = stream.map(lambda r: (r[1], r[0]), name="key by") if keyed else stream
        return records.collect(keyed=keyed, every=3, name="every 3"), None

    return build


def _canonical(name: str, rows: list[Any]) -> Any:
    """What a run must reproduce: windows' rows as they are; a running sum's changes per key and epoch counted,
    with the last (within an epoch a key's values arrive in any order, so the sums between vary); collections
    in order (gathered in the order of arrival)."""
    if name == "collect keyed":
        return sorted((t, k, sorted(vs)) for t, (k, vs) in rows)
    if name == "collect":
        return sorted((t, sorted(map(tuple, r))) for t, r in rows)
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
        ("collect keyed", _collect(True)),
        ("collect", _collect(False)),
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
        assert sum(r[1] for r in resumed) == sum(r[1] for r in expected)


def _lone_events(epoch: int) -> list[tuple[int, int]]:
    """One event a epoch, of keys in turn, three units of event time apart: every session is one event and
    closes mid-run, four epochs after it (its gap) once the frontier passes its last event plus the gap."""
    return [(3 * epoch, epoch % 3)]


def test_a_session_closed_after_a_snapshot_of_an_epoch_inside_its_gap_is_sent_once(tmp_path: Path) -> None:
    # Sent at its last event, the session of epoch 0 came back twice: the windows' snapshot of epoch 0 held it
    # open while the capture's held its result (sent at time 0 once the frontier passed 4). Sent at last + gap.
    build = _windows(Session(4))
    expected = _run(tmp_path / "clean", 2, build, events=_lone_events)
    with pytest.raises(Crash):
        _run(tmp_path / "store", 2, build, crash=6, events=_lone_events)
    resumed = _run(tmp_path / "store", 3, build, events=_lone_events)
    assert resumed[0][2] > 0, "the resumed run started after a committed epoch"
    assert resumed[0][0] == expected[0][0]
    assert [t for t, _ in expected[0][0]] == [3 * e + 4 for e in range(EPOCHS)]


@pytest.mark.parametrize(("before", "after", "crash"), [(2, 3, 6), (3, 1, 4)])
def test_final_extremes_resume_with_what_they_had(tmp_path: Path, before: int, after: int, crash: int) -> None:
    # Results go out at the end, at the keys' latest times: a capture downstream could commit nothing before, so
    # a sink shows what the resumed run sends, every result, from the state restored and the epochs replayed.
    expected = _run(tmp_path / "clean", 2, _extremes, sink=True)
    with pytest.raises(Crash):
        _run(tmp_path / "store", before, _extremes, crash=crash, sink=True)
    resumed = _run(tmp_path / "store", after, _extremes, sink=True)
    assert resumed[0][2] > 0, "the resumed run started after a committed epoch"
    assert resumed[0][0] == expected[0][0]


def _enrich(fetched: list[tuple[int, int]]) -> Callable[[Any], Any]:
    """Records with a value looked up per key; the lookup answers with the epoch it was made at, so a run that
    looked up again what the interrupted one had cached would show it."""

    def build(stream: Any) -> Any:
        now = [0]

        def getter(key: int) -> tuple[int, int]:
            fetched.append((key, now[0]))
            return key, now[0]

        def mapper(cache: Any, record: tuple[int, int]) -> Any:
            now[0] = cache.now
            return record, cache.get(record[1])

        # A ttl longer than the epoch a crash at 6 can resume at: the resumed epoch is never one at which
        # every entry expires, so a cold cache would look up every key there and a restored one fewer.
        return stream.enrich_cached(getter, mapper, ttl=TTL, name="lookup"), None

    return build


@pytest.mark.parametrize(("before", "after"), [(2, 2), (2, 1)])
def test_a_resumed_enrich_answers_from_the_cache_the_interrupted_run_had(
    tmp_path: Path, before: int, after: int
) -> None:
    clean: list[tuple[int, int]] = []
    expected = _run(tmp_path / "clean", after, _enrich(clean))[0][0]
    with pytest.raises(Crash):
        _run(tmp_path / "store", before, _enrich([]), crash=6)
    again: list[tuple[int, int]] = []
    run = _run(tmp_path / "store", after, _enrich(again))
    resumed, start = run[0][0], run[0][2]
    assert start > 0, "the resumed run started after a committed epoch"
    assert all(at >= start for _, at in again)
    if before == after:
        # Each worker holds its own cache, filled from its own share of the records: the same share again, so
        # the same answers, and only the lookups the uninterrupted run made from the resumed epoch on.
        assert resumed == expected
        assert sorted(again) == sorted(f for f in clean if f[1] >= start)
    else:
        # Merged caches: every answer was looked up within the ttl, by either run.
        assert [r for _, (r, _) in resumed] == [r for _, (r, _) in expected]
        assert all(t - at < TTL and k == kk for t, ((_, k), (kk, at)) in resumed)
    # Keys looked up by the interrupted run within the ttl are not looked up again at the epoch resumed at.
    keys_then = {k for _, ((_, k), _) in [r for r in expected if r[0] == start]}
    assert len({k for k, at in again if at == start}) < len(keys_then)


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
                _await_durable(worker, epoch - 1)
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
