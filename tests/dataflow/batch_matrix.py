"""Every operator on every batch kind against a pure-Python reference: the job and the references.

The job (:func:`run`) builds one dataflow holding every operator of :data:`OPERATORS` over the same input,
sent as lists of tuples, as a two-dimensional numpy array, or as Arrow record batches with int, float, string,
nullable int and timestamp columns. Each operator's output is caught per worker, and :func:`check` compares
it with the operator's reference, computed from the input's records by plain Python only (no pytimely code).
``python -m pytimely run tests.dataflow.batch_matrix:job KIND OUT`` runs it in real processes; each process
writes what its workers caught to ``OUT.<process>``.
"""

from __future__ import annotations

import datetime as dt
import pickle
import random
import sys
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from pytimely import Scope, Stream, Worker
from pytimely.dataflow.operators.clock import EventClock
from pytimely.dataflow.operators.folds import Fold, Reduce
from pytimely.dataflow.operators.join import Interval
from pytimely.dataflow.operators.window import Session, Sliding, Tumbling
from tests.dataflow.test_folds import groups
from tests.dataflow.test_windows import reference as window_reference

EPOCHS = 3
ROWS = 48
KEY, VALUE, TIME, WORD, MAYBE, STAMP = range(6)
"""Column positions: the numpy kind has the first three, lists and Arrow all six."""
WORDS = ["ant", "bee", "cat", "dog", "eel"]
KINDS = ["list", "numpy", "arrow"]


def records(kind: str, seed: int = 5) -> dict[int, list[tuple[Any, ...]]]:
    """Each epoch's records as plain Python tuples, the way the kind's rows read (the reference's input)."""
    rng = random.Random(seed)
    epochs: dict[int, list[tuple[Any, ...]]] = {}
    for t in range(EPOCHS):
        rows = []
        for _ in range(ROWS):
            key = rng.randrange(6)
            time = t + rng.randrange(-1, 7)  # a few late records (event time before the epoch)
            if kind == "numpy":
                rows.append((key, rng.randrange(-20, 50), time))
                continue
            value = rng.randrange(-40, 100) / 2  # halves add up exactly in any order
            maybe = None if rng.random() < 0.25 else rng.randrange(3)
            stamp = dt.datetime(2026, 1, 1) + dt.timedelta(milliseconds=rng.randrange(10**6))
            rows.append((key, value, time, rng.choice(WORDS), maybe, stamp))
        epochs[t] = rows
    return epochs


def batch(kind: str, rows: list[tuple[Any, ...]]) -> Any:
    """``rows`` as a batch of ``kind``."""
    if kind == "list":
        return list(rows)
    if kind == "numpy":
        return np.array(rows, dtype=np.int64).reshape(-1, 3)
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in range(6)]
    return pa.record_batch(
        [
            pa.array(columns[KEY], pa.int64()),
            pa.array(columns[VALUE], pa.float64()),
            pa.array(columns[TIME], pa.int64()),
            pa.array(columns[WORD], pa.string()),
            pa.array(columns[MAYBE], pa.int64()),
            pa.array(columns[STAMP], pa.timestamp("ms")),
        ],
        names=["key", "value", "time", "word", "maybe", "stamp"],
    )


Expected = Counter[tuple[Any, Any]]
"""``(time, record)`` with multiplicity."""


@dataclass(frozen=True)
class Operator:
    """An operator under test: how to build it, its reference, and which kinds it applies to."""

    name: str
    build: Callable[[Stream[Any]], Stream[Any]]
    reference: Callable[[dict[int, list[tuple[Any, ...]]], int], Expected]
    kinds: tuple[str, ...] = tuple(KINDS)
    normal: Callable[[Any], Any] = lambda r: r
    """Makes one output record comparable (e.g. sorts a collected list)."""


def per_record(f: Callable[[tuple[Any, ...]], list[Any]]) -> Callable[[dict[int, list[Any]], int], Expected]:
    """The reference of an operator that maps each record to some records at the same time."""
    return lambda epochs, peers: Counter((t, out) for t, rows in epochs.items() for r in rows for out in f(r))


def per_time(f: Callable[[list[Any]], list[Any]]) -> Callable[[dict[int, list[Any]], int], Expected]:
    """The reference of an operator that maps each time's records to records at that time."""
    return lambda epochs, peers: Counter((t, out) for t, rows in epochs.items() for out in f(rows))


def _group(rows: list[Any], key: Callable[[Any], Any]) -> dict[Any, list[Any]]:
    groups: dict[Any, list[Any]] = defaultdict(list)
    for r in rows:
        groups[key(r)].append(r)
    return groups


def _windows(kind: Any, key: int, value: int, aggregate: str) -> Callable[[dict[int, list[Any]], int], Expected]:
    def reference(epochs: dict[int, list[Any]], peers: int) -> Expected:
        on_time = [(r[TIME], r[key], 1 if aggregate == "count" else r[value]) for t, rows in epochs.items()
                   for r in rows if r[TIME] >= t]
        # The reference sorts its windows: keys go in as codes (None does not compare with ints).
        keys = sorted({k for _, k, _ in on_time}, key=repr)
        code = {k: i for i, k in enumerate(keys)}
        coded = [(x, code[k], v) for x, k, v in on_time]
        gap = kind.gap if isinstance(kind, Session) else 0  # a session goes out at last + gap
        return Counter((e - 1 + gap, (s, e, keys[k], a)) for s, e, k, a in window_reference(kind, coded, aggregate))

    return reference


def _final(how: Callable[[list[Any]], Any], key: int) -> Callable[[dict[int, list[Any]], int], Expected]:
    def reference(epochs: dict[int, list[Any]], peers: int) -> Expected:
        values: dict[Any, list[Any]] = defaultdict(list)
        last: dict[Any, int] = {}
        for t, rows in epochs.items():
            for r in rows:
                values[r[key]].append(r[VALUE])
                last[r[key]] = t
        return Counter((last[k], (k, how(vs))) for k, vs in values.items())

    return reference


def _stateful(epochs: dict[int, list[Any]], peers: int) -> Expected:
    seen: Counter[Any] = Counter()
    out: Expected = Counter()
    for t in sorted(epochs):
        for k, n in Counter(r[KEY] for r in epochs[t]).items():
            out.update((t, (k, seen[k] + i + 1)) for i in range(n))
            seen[k] += n
    return out


def _join(epochs: dict[int, list[Any]], peers: int) -> Expected:
    out: Expected = Counter()
    for t, rows in epochs.items():
        for a in rows:
            for b in rows:
                if a[KEY] == b[KEY]:
                    out[t, (a[KEY], (a[VALUE], b[TIME]))] += 1
    return out


def _sorted_values(record: Any) -> Any:
    k, vs = record
    return k, tuple(sorted(vs, key=repr))


def _rows_of(collection: Any) -> Any:
    from pytimely import container

    rows = collection if type(collection) is tuple else container.records(collection)
    return tuple(sorted(rows, key=repr))


def _window(kind: Any, key: int, aggregate: str) -> Callable[[Stream[Any]], Stream[Any]]:
    def build(stream: Stream[Any]) -> Stream[Any]:
        if isinstance(kind, Tumbling):
            return stream.tumbling(kind.size, time=TIME, key=key, value=VALUE, aggregate=aggregate)
        if isinstance(kind, Sliding):
            return stream.sliding(kind.size, kind.step, time=TIME, key=key, value=VALUE, aggregate=aggregate)
        return stream.session(kind.gap, time=TIME, key=key, value=VALUE, aggregate=aggregate)

    return build


def _final_op(how: str, key: int) -> Callable[[Stream[Any]], Stream[Any]]:
    return lambda stream: getattr(stream, f"{how}_final")(key=key, value=VALUE)  # type: ignore[no-any-return]


def _pairs(stream: Stream[Any], key: int = KEY) -> Stream[Any]:
    return stream.map(lambda r: (r[key], r[VALUE]), name="pairs")


OPERATORS: list[Operator] = [
    Operator("map", lambda s: s.map(lambda r: (r[KEY], r[VALUE])), per_record(lambda r: [(r[KEY], r[VALUE])])),
    Operator(
        "filter", lambda s: s.filter(lambda r: r[KEY] % 2 == 0), per_record(lambda r: [r] if r[KEY] % 2 == 0 else [])
    ),
    Operator(
        "flat_map",
        lambda s: s.flat_map(lambda r: [r[KEY]] * (r[KEY] % 3)),
        per_record(lambda r: [r[KEY]] * (r[KEY] % 3)),
    ),
    Operator(
        "branch",
        lambda s: (lambda yes_no: yes_no[0].map(lambda r: ("yes", r)).concat(yes_no[1].map(lambda r: ("no", r))))(
            s.branch(lambda r: r[KEY] > 2)
        ),
        per_record(lambda r: [("yes" if r[KEY] > 2 else "no", r)]),
    ),
    Operator(
        "partition",
        lambda s: (lambda parts: parts[0].map(lambda r: (0, r)).concat(
            parts[1].map(lambda r: (1, r)), parts[2].map(lambda r: (2, r))))(s.partition(3, lambda r: r[KEY] % 3)),
        per_record(lambda r: [(r[KEY] % 3, r)]),
    ),
    Operator("inspect", lambda s: s.inspect(lambda r: r[KEY]), per_record(lambda r: [r])),
    Operator("exchange", lambda s: s.exchange(lambda r: r[KEY]), per_record(lambda r: [r])),
    Operator("broadcast", lambda s: s.broadcast(), lambda e, peers: Counter(
        {k: n * peers for k, n in per_record(lambda r: [r])(e, peers).items()})),
    Operator("concat", lambda s: s.concat(s.map(lambda r: r)), per_record(lambda r: [r, r])),
    Operator("redistribute", lambda s: s.redistribute(), per_record(lambda r: [r])),
    Operator("key_on column", lambda s: s.key_on(KEY), per_record(lambda r: [(r[KEY], r)])),
    Operator("key_on function", lambda s: s.key_on(lambda r: r[KEY] * 10), per_record(lambda r: [(r[KEY] * 10, r)])),
    Operator("key_on word", lambda s: s.key_on(WORD), per_record(lambda r: [(r[WORD], r)]), ("list", "arrow")),
    Operator(
        "map_value", lambda s: _pairs(s).map_value(lambda v: v * 2), per_record(lambda r: [(r[KEY], r[VALUE] * 2)])
    ),
    Operator(
        "enrich_cached",
        lambda s: s.enrich_cached(lambda k: k * 100, lambda cache, r: (r[KEY], cache.get(r[KEY]))),
        per_record(lambda r: [(r[KEY], r[KEY] * 100)]),
    ),
    Operator("count", lambda s: s.count(), per_time(lambda rows: [len(rows)])),
    Operator("count_by record", lambda s: s.count_by(), per_time(lambda rows: list(Counter(rows).items()))),
    Operator(
        "count_by key",
        lambda s: s.count_by(lambda r: r[KEY]),
        per_time(lambda rows: list(Counter(r[KEY] for r in rows).items())),
    ),
    Operator(
        "count_by nullable",
        lambda s: s.count_by(lambda r: r[MAYBE]),
        per_time(lambda rows: list(Counter(r[MAYBE] for r in rows).items())),
        ("list", "arrow"),
    ),
    Operator(
        "count_by column",
        lambda s: s.count_by(KEY),
        per_time(lambda rows: list(Counter(r[KEY] for r in rows).items())),
    ),
    Operator(
        "count_by word column",
        lambda s: s.count_by(WORD),
        per_time(lambda rows: list(Counter(r[WORD] for r in rows).items())),
        ("list", "arrow"),
    ),
    Operator(
        "count_by nullable column",
        lambda s: s.count_by(MAYBE),
        per_time(lambda rows: list(Counter(r[MAYBE] for r in rows).items())),
        ("list", "arrow"),
    ),
    Operator(
        "count_by named column",
        lambda s: s.count_by("word"),
        per_time(lambda rows: list(Counter(r[WORD] for r in rows).items())),
        ("arrow",),
    ),
    Operator(
        "tumbling sum by named columns",
        lambda s: s.tumbling(4, time="time", key="word", value="value", aggregate="sum"),
        _windows(Tumbling(4), WORD, VALUE, "sum"),
        ("arrow",),
    ),
    Operator("key_on named column", lambda s: s.key_on("word"), per_record(lambda r: [(r[WORD], r)]), ("arrow",)),
    Operator(
        "sum_by columns",
        lambda s: s.sum_by(KEY, VALUE),
        per_time(lambda rows: [(k, sum(r[VALUE] for r in g)) for k, g in _group(rows, lambda r: r[KEY]).items()]),
    ),
    Operator(
        "sum_by word column",
        lambda s: s.sum_by(WORD, VALUE),
        per_time(lambda rows: [(k, sum(r[VALUE] for r in g)) for k, g in _group(rows, lambda r: r[WORD]).items()]),
        ("list", "arrow"),
    ),
    Operator(
        "sum_by",
        lambda s: s.sum_by(lambda r: r[KEY], lambda r: r[VALUE]),
        per_time(lambda rows: [(k, sum(r[VALUE] for r in g)) for k, g in _group(rows, lambda r: r[KEY]).items()]),
    ),
    Operator(
        "fold_by",
        lambda s: s.fold_by(lambda r: r[KEY], lambda: 0, lambda acc, r: acc + 1),
        per_time(lambda rows: [(k, len(g)) for k, g in _group(rows, lambda r: r[KEY]).items()]),
    ),
    Operator(
        "reduce_by",
        lambda s: s.reduce_by(lambda r: r[KEY], lambda k, rs: max(r[VALUE] for r in rs)),
        per_time(lambda rows: [(k, max(r[VALUE] for r in g)) for k, g in _group(rows, lambda r: r[KEY]).items()]),
    ),
    Operator(
        "join",
        lambda s: _pairs(s).join(s.map(lambda r: (r[KEY], r[TIME]))),
        _join,
    ),
    Operator("stateful_map", lambda s: s.map(lambda r: (r[KEY], 1)).stateful_map(
        lambda state, v: ((state or 0) + 1, (state or 0) + 1)), _stateful),
    Operator(
        "collect keyed",
        lambda s: _pairs(s).collect(),
        per_time(lambda rows: [(k, tuple(sorted((r[VALUE] for r in g), key=repr)))
                               for k, g in _group(rows, lambda r: r[KEY]).items()]),
        normal=_sorted_values,
    ),
    Operator(
        "collect keyed by word",
        lambda s: _pairs(s, WORD).collect(),
        per_time(lambda rows: [(k, tuple(sorted((r[VALUE] for r in g), key=repr)))
                               for k, g in _group(rows, lambda r: r[WORD]).items()]),
        ("list", "arrow"),
        normal=_sorted_values,
    ),
    Operator(
        "collect all",
        lambda s: s.collect(keyed=False),
        per_time(lambda rows: [tuple(sorted(rows, key=repr))]),
        normal=_rows_of,
    ),
    Operator(
        "collect columns",
        lambda s: s.map_batch(lambda b: b).collect(keyed=False),
        per_time(lambda rows: [tuple(sorted(rows, key=repr))]),
        normal=_rows_of,
    ),
    *(
        Operator(
            f"{label} {aggregate} by {key_name}",
            _window(kind, key, aggregate),
            _windows(kind, key, VALUE, aggregate),
            ("list", "numpy", "arrow") if key == KEY else ("list", "arrow"),
        )
        for label, kind in (("tumbling", Tumbling(4)), ("sliding", Sliding(4, 2)), ("session", Session(2)))
        for aggregate in ("count", "sum", "min", "max")
        for key_name, key in (("key", KEY), ("word", WORD), ("nullable", MAYBE))
        if key != MAYBE or aggregate == "count"
    ),
    *(
        Operator(
            f"{how}_final by {key_name}",
            _final_op(how, key),
            _final(min if how == "min" else max, key),
            ("list", "numpy", "arrow") if key == KEY else ("list", "arrow"),
        )
        for how in ("min", "max")
        for key_name, key in (("key", KEY), ("word", WORD), ("nullable", MAYBE))
    ),
]


def _fold_build(kind: Any, key: int, aggregate: Any) -> Callable[[Stream[Any]], Stream[Any]]:
    def build(stream: Stream[Any]) -> Stream[Any]:
        common: dict[str, Any] = {"time": TIME, "key": key, "value": VALUE, "aggregate": aggregate}
        if isinstance(kind, Tumbling):
            return stream.tumbling(kind.size, **common)
        if isinstance(kind, Sliding):
            return stream.sliding(kind.size, kind.step, **common)
        return stream.session(kind.gap, **common)

    return build


FOLDS: dict[str, tuple[Any, Callable[[list[Any]], Any], Callable[[Any], Any]]] = {
    # name: (aggregate, reference over a window's records, normal form of one result)
    "collect": ("collect", lambda rs: tuple(sorted((r[VALUE] for r in rs), key=repr)),
                lambda vs: tuple(sorted(vs, key=repr))),
    "max_by": ("max_by", lambda rs: max(r[VALUE] for r in rs), lambda r: r[VALUE] if type(r) is tuple else r),
    "min_by": ("min_by", lambda rs: min(r[VALUE] for r in rs), lambda r: r[VALUE] if type(r) is tuple else r),
    "fold": (Fold(lambda: 0, lambda acc, v: acc + v, lambda a, b: a + b), lambda rs: sum(r[VALUE] for r in rs),
             lambda x: x),
    "reduce": (Reduce(max), lambda rs: max(r[VALUE] for r in rs), lambda x: x),
}


def _fold_reference(kind: Any, key: int, how: str) -> Callable[[dict[int, list[tuple[Any, ...]]], int], Expected]:
    reference = FOLDS[how][1]

    def expected(epochs: dict[int, list[Any]], peers: int) -> Expected:
        on_time = [(r[TIME], r[key], r) for t, rows in epochs.items() for r in rows if r[TIME] >= t]
        out: Expected = Counter()
        for (s, e, k), members in groups(kind, on_time).items():  # type: ignore[arg-type]
            when = e - 1 if not isinstance(kind, Session) else max(m[0] for m in members) + kind.gap
            out[when, (s, e, k, reference([m[2] for m in members]))] += 1
        return out

    return expected


def _fold_normal(how: str) -> Callable[[Any], Any]:
    normal = FOLDS[how][2]
    return lambda w: (w[0], w[1], w[2], normal(w[3]))


DELAY = 3


def _clocked(epochs: dict[int, list[Any]], peers: int) -> Expected:
    """Tumbling counts of 4 by key behind an event clock: each worker's clock takes its share in epoch order."""
    on_time = []
    for i in range(peers):
        watermark, highest = 0, None
        for t in sorted(epochs):
            for r in epochs[t][i::peers]:
                if r[TIME] >= watermark:
                    on_time.append((r[TIME], r[KEY], 1))
                highest = r[TIME] if highest is None else max(highest, r[TIME])
                watermark = max(watermark, highest - DELAY)
    return Counter((e - 1, w) for w in window_reference(Tumbling(4), on_time) for e in [w[1]])


def _left_join(epochs: dict[int, list[Any]], peers: int) -> Expected:
    out: Expected = Counter()
    for t, rows in epochs.items():
        for a in rows:
            partners = [b for b in rows if b[KEY] == a[KEY] and b[KEY] % 2 == 0]
            for b in partners:
                out[t, (a[KEY], (a[VALUE], b[TIME]))] += 1
            if not partners:
                out[t, (a[KEY], (a[VALUE], None))] += 1
    return out


def _window_join(epochs: dict[int, list[Any]], peers: int) -> Expected:
    on_time = [(r[TIME], r[KEY], r) for t, rows in epochs.items() for r in rows if r[TIME] >= t]
    out: Expected = Counter()
    for (_, e, k), members in groups(Tumbling(4), on_time).items():  # type: ignore[arg-type]
        for a in members:
            for b in members:
                out[e - 1, (k, ((a[0], a[2][VALUE]), (b[0], b[2][KEY] * 2)))] += 1
    return out


def _interval_join(epochs: dict[int, list[Any]], peers: int) -> Expected:
    on_time = [r for t, rows in epochs.items() for r in rows if r[TIME] >= t]
    return Counter(
        (max(ta, tb), (a[KEY], ((a[TIME], a[VALUE]), (b[TIME], b[KEY] * 2))))
        for ta, rows_a in epochs.items() for a in rows_a if a[TIME] >= ta
        for tb, rows_b in epochs.items() for b in rows_b if b[TIME] >= tb
        if a[KEY] == b[KEY] and a[TIME] - 1 <= b[TIME] <= a[TIME] + 1
    ) if on_time else Counter()


def _finals(how: str) -> Callable[[dict[int, list[Any]], int], Expected]:
    def reference(epochs: dict[int, list[Any]], peers: int) -> Expected:
        values: dict[Any, list[Any]] = defaultdict(list)
        last: dict[Any, int] = {}
        for t, rows in epochs.items():
            for r in rows:
                values[r[KEY]].append(r[VALUE])
                last[r[KEY]] = t
        combine = {"count": len, "fold": sum, "reduce": max}[how]
        return Counter((last[k], (k, combine(vs))) for k, vs in values.items())

    return reference


def _timed(stream: Stream[Any], value: int) -> Stream[Any]:
    return stream.map(lambda r: (r[KEY], (r[TIME], r[value] if value != KEY else r[KEY] * 2)), name="timed")


OPERATORS += [
    *(
        Operator(
            f"{label} {how} by {key_name}",
            _fold_build(kind, key, FOLDS[how][0]),
            _fold_reference(kind, key, how),
            ("list", "numpy", "arrow") if key == KEY else ("list", "arrow"),
            normal=_fold_normal(how),
        )
        for label, kind in (("tumbling", Tumbling(4)), ("sliding", Sliding(4, 2)), ("session", Session(2)))
        for how in FOLDS
        for key_name, key in (("key", KEY), ("word", WORD))
    ),
    Operator(
        "event clock tumbling count",
        lambda s: s.tumbling(4, time=TIME, key=KEY, clock=EventClock(DELAY)),
        _clocked,
    ),
    Operator(
        "left join",
        lambda s: _pairs(s).join(s.filter(lambda r: r[KEY] % 2 == 0).map(lambda r: (r[KEY], r[TIME])), how="left"),
        _left_join,
    ),
    Operator(
        "window join",
        lambda s: _timed(s, VALUE).join(_timed(s, KEY), over=Tumbling(4), time=0),
        _window_join,
    ),
    Operator(
        "interval join",
        lambda s: _timed(s, VALUE).join(_timed(s, KEY), over=Interval(-1, 1), time=0),
        _interval_join,
    ),
    Operator("count_final", lambda s: s.count_final(KEY), lambda e, p: Counter(
        {(t, (k, n)): c for (t, (k, n)), c in _finals("count")(e, p).items()})),
    Operator("fold_final", lambda s: s.fold_final(lambda: 0, lambda a, v: a + v, key=KEY, value=VALUE),
             _finals("fold")),
    Operator("reduce_final", lambda s: s.reduce_final(max, key=KEY, value=VALUE), _finals("reduce")),
]


Caught = dict[str, list[tuple[int, Any, list[Any]]]]
"""Per operator: ``(worker, time, records)`` of every batch it output."""


def run(worker: Worker, kind: str) -> Caught:
    """Build every operator over the kind's input, feed this worker's share, and return what it caught."""
    from pytimely import container

    caught: Caught = {op.name: [] for op in OPERATORS if kind in op.kinds}

    def build(scope: Scope[int]) -> Any:
        handle, stream = scope.new_input(name="matrix input")
        for op in OPERATORS:
            if kind in op.kinds:
                catch = caught[op.name]
                op.build(stream).sink(
                    lambda t, b, catch=catch: catch.append((worker.index, t, list(container.records(b)))),
                    name=f"catch {op.name}",
                )
        return handle

    handle = worker.dataflow(build)
    for t, rows in records(kind).items():
        handle.advance_to(t)
        mine = rows[worker.index :: worker.peers]
        if mine:
            handle.send_batch(batch(kind, mine))
    handle.close()
    worker.finish()
    return caught


def check(kind: str, caught: list[Caught], peers: int) -> list[str]:
    """What differs from the references, one line per operator (empty when every operator is right)."""
    epochs = records(kind)
    problems = []
    for op in OPERATORS:
        if kind not in op.kinds:
            continue
        got: Expected = Counter(
            (t, op.normal(r)) for per_worker in caught for _, t, rs in per_worker[op.name] for r in rs
        )
        expected = Counter({(t, op.normal(r)): n for (t, r), n in op.reference(epochs, peers).items()})
        if got != expected:
            extra, missing = got - expected, expected - got
            problems.append(
                f"{op.name} on {kind} with {peers} workers: {sum(extra.values())} unexpected, e.g. "
                f"{list(extra)[:2]}; {sum(missing.values())} missing, e.g. {list(missing)[:2]}"
            )
    return problems


def job(worker: Worker) -> None:
    """The matrix in real processes: ``KIND OUT`` in ``sys.argv``; writes ``OUT.<process>``."""
    kind, out = sys.argv[1], sys.argv[2]
    caught = run(worker, kind)
    with open(f"{out}.{worker.index}", "wb") as f:
        pickle.dump(caught, f)
