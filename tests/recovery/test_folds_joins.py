"""The operators a Bytewax or Flink user moves over with are durable too: window folds, the running, windowed and
interval joins, ``collect(max_size=)`` and the ``*_final`` aggregates. A run killed mid-way resumes on another
number of workers with the output of a run that never died (the harness of ``test_operators``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytimely.dataflow.operators.folds import Fold, Reduce
from pytimely.dataflow.operators.join import Interval
from pytimely.dataflow.operators.window import DropLate, Session, Sliding, Tumbling, window
from tests.recovery.jobs import Crash
from tests.recovery.test_operators import _events, _run

RUNS = [(2, 3, 6), (3, 1, 4)]
"""``(workers before, workers after, epoch of the crash)``."""


def _folds(kind: Any, aggregate: Any, time: Any = 0) -> Callable[[Any], Any]:
    def build(stream: Any) -> Any:
        late = DropLate()
        out = window(stream, kind, time=time, key=1, value=0, aggregate=aggregate, late=late, name="folds")
        return out, lambda: late.dropped

    return build


_SUM = Fold(lambda: 0, lambda acc, x: acc + x, lambda a, b: a + b)

FOLDS = {
    "fold tumbling": _folds(Tumbling(5), _SUM),
    "collect sliding": _folds(Sliding(6, 2), "collect"),  # event-time order; equal times are equal values
    # Over epochs, windows close every other epoch: a restored pane still serves an open window after one of
    # its windows closed before the snapshot (which must not come out again).
    "sum sliding epochs": _folds(Sliding(4, 2), _SUM, time=None),
    "reduce sessions": _folds(Session(3), Reduce(max)),
    "max_by tumbling": _folds(Tumbling(4), "max_by"),  # the record: ties are equal records
}


@pytest.mark.parametrize("name", sorted(FOLDS))
@pytest.mark.parametrize(("before", "after", "crash"), RUNS)
def test_window_folds_resume_on_another_number_of_workers(
    tmp_path: Path, name: str, before: int, after: int, crash: int
) -> None:
    build = FOLDS[name]
    expected = _run(tmp_path / "clean", 2, build)
    with pytest.raises(Crash):
        _run(tmp_path / "store", before, build, crash=crash)
    resumed = _run(tmp_path / "store", after, build)
    assert resumed[0][2] > 0, "the resumed run started after a committed epoch"
    assert resumed[0][0] == expected[0][0]
    assert sum(r[1] for r in resumed) == sum(r[1] for r in expected)  # late records: counted once


def _keyed_events(epoch: int) -> list[tuple[int, int]]:
    """``(event time, key)``: each of six keys once an epoch (so which value is latest within a time is fixed)."""
    return [(epoch * 10 + 3 * k % 10, k) for k in range(6)]


def _joins(over: Any, how: str) -> Callable[[Any], Any]:
    def build(stream: Any) -> Any:
        left = stream.map(lambda r: (r[1], (r[0], "l")), name="left")
        right = stream.filter(lambda r: r[0] % 3 == 0, name="thirds").map(lambda r: (r[1], (r[0], "r")), name="right")
        options: dict[str, Any] = {} if over == "latest" else {"time": 0, "late": DropLate()}
        return left.join(right, over=over, how=how, name="join", **options), None

    return build


JOINS = {
    "running left": _joins("latest", "left"),
    "window inner": _joins(Tumbling(25), "inner"),
    "session outer": _joins(Session(4), "outer"),
    "interval outer": _joins(Interval(-12, 5), "outer"),
}


@pytest.mark.parametrize("name", sorted(JOINS))
@pytest.mark.parametrize(("before", "after", "crash"), RUNS)
def test_joins_resume_on_another_number_of_workers(
    tmp_path: Path, name: str, before: int, after: int, crash: int
) -> None:
    build = JOINS[name]
    expected = _run(tmp_path / "clean", 2, build, events=_keyed_events)
    with pytest.raises(Crash):
        _run(tmp_path / "store", before, build, crash=crash, events=_keyed_events)
    resumed = _run(tmp_path / "store", after, build, events=_keyed_events)
    assert resumed[0][2] > 0, "the resumed run started after a committed epoch"
    assert resumed[0][0] == expected[0][0]


def _bounded(stream: Any) -> Any:
    return stream.map(lambda r: (r[1], r[0]), name="key by").collect(max_size=3, name="threes"), None


def _lists(rows: list[Any]) -> Any:
    """Per key: every value it gathered, and the sizes of its lists (which values share a list depends on the
    order they arrive in within a time; how many lists of which size does not)."""
    keys: dict[Any, tuple[list[Any], list[int]]] = {}
    for _, (k, values) in rows:
        got = keys.setdefault(k, ([], []))
        got[0].extend(values)
        got[1].append(len(values))
    return sorted((k, sorted(vs), sorted(sizes)) for k, (vs, sizes) in keys.items())


@pytest.mark.parametrize(("before", "after", "crash"), RUNS)
def test_collect_by_size_resumes_on_another_number_of_workers(
    tmp_path: Path, before: int, after: int, crash: int
) -> None:
    expected = _run(tmp_path / "clean", 2, _bounded)
    with pytest.raises(Crash):
        _run(tmp_path / "store", before, _bounded, crash=crash)
    resumed = _run(tmp_path / "store", after, _bounded)
    assert resumed[0][2] > 0, "the resumed run started after a committed epoch"
    assert _lists(resumed[0][0]) == _lists(expected[0][0])


def _finals(stream: Any) -> Any:
    pairs = stream.map(lambda r: (r[1], r[0]), name="key by")
    counts = stream.count_final(key=1, name="counts").map(lambda kv: ("count", kv), name="c")
    sums = pairs.fold_final(lambda: 0, lambda acc, x: acc + x, name="sums").map(lambda kv: ("sum", kv), name="s")
    highest = pairs.reduce_final(max, name="highest").map(lambda kv: ("max", kv), name="m")
    return counts.concat(sums, highest), None


def _early_key_events(epoch: int) -> list[tuple[int, int]]:
    """``_events``, and key 100 in the first two epochs only: its latest time comes from the snapshot alone."""
    return _events(epoch) + ([(epoch, 100)] if epoch < 2 else [])


@pytest.mark.parametrize(("before", "after", "crash"), RUNS)
def test_final_aggregates_resume_with_what_they_had(tmp_path: Path, before: int, after: int, crash: int) -> None:
    # Results go out at the end, at the keys' latest times (as min_final's): a sink shows what the resumed run
    # sends, every result, from the state restored and the epochs replayed.
    expected = _run(tmp_path / "clean", 2, _finals, sink=True, events=_early_key_events)
    with pytest.raises(Crash):
        _run(tmp_path / "store", before, _finals, crash=crash, sink=True, events=_early_key_events)
    resumed = _run(tmp_path / "store", after, _finals, sink=True, events=_early_key_events)
    assert resumed[0][2] > 2, "the resumed run started after the early key's last epoch"
    assert resumed[0][0] == expected[0][0]
    assert len(expected[0][0]) == 21  # seven keys, three aggregates


def test_the_events_have_late_records_and_the_keyed_ones_none() -> None:
    assert any(x < e for e in range(10) for x, _ in _events(e))
    assert all(x >= e for e in range(10) for x, _ in _keyed_events(e))


@pytest.mark.parametrize("clock", ["event", "system"])
def test_a_job_with_a_clock_is_refused_before_any_snapshot_naming_the_clock(tmp_path: Path, clock: str) -> None:
    # A clock sends records on at event (or wall-clock) times, not epochs: no snapshot cut at an epoch holds the
    # windows after it consistently with the clock (docs/recovery.md, "Clocks").
    from pytimely.dataflow.operators.clock import EventClock, SystemClock
    from pytimely.errors import RecoveryError

    def build(stream: Any) -> Any:
        if clock == "event":
            return stream.tumbling(5, time=0, key=1, clock=EventClock(2), name="per five"), None
        return stream.tumbling(5, key=1, clock=SystemClock(), name="per five"), None

    with pytest.raises(RecoveryError, match=r"operator 'per five\.clock'.*cannot use recovery"):
        _run(tmp_path / "store", 2, build)
    assert not (tmp_path / "store" / "manifests").exists() or not any((tmp_path / "store" / "manifests").iterdir())
