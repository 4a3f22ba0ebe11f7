"""Every operator on lists, numpy arrays and Arrow batches, on 1-3 workers and on 2 processes, against a
pure-Python reference (:mod:`tests.dataflow.batch_matrix`), and the batch container's own contract."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from pytimely import Worker, execute
from pytimely.errors import InvalidArgument
from tests.cluster.helpers import Cluster, report
from tests.dataflow import batch_matrix


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("kind", batch_matrix.KINDS)
def test_every_operator_on_every_batch_kind_equals_the_reference(kind: str, workers: int) -> None:
    def job(worker: Worker) -> Any:
        return batch_matrix.run(worker, kind)

    caught = execute(job, workers, seed=workers)
    assert batch_matrix.check(kind, caught, workers) == []


@pytest.mark.parametrize("kind", batch_matrix.KINDS)
def test_every_operator_on_every_batch_kind_across_two_processes(kind: str, tmp_path: Path) -> None:
    out = tmp_path / "caught"
    cluster = Cluster(2, workers="1")
    try:
        cluster.start(["tests.dataflow.batch_matrix:job", kind, str(out)])
        results = cluster.wait(timeout=120)
    finally:
        cluster.kill()
    assert all(code == 0 for code, _, _ in results), report(results)
    caught = [pickle.loads((tmp_path / f"caught.{i}").read_bytes()) for i in range(2)]
    assert batch_matrix.check(kind, caught, 2) == []


def _run(build: Any, feed: Any, workers: int = 1) -> list[Any]:
    """Run a one-input dataflow: ``build(stream)`` gives the stream to catch; ``feed(handle)`` sends the input."""
    from pytimely import container

    def job(worker: Worker) -> list[Any]:
        caught: list[Any] = []

        def dataflow(scope: Any) -> Any:
            handle, stream = scope.new_input()
            build(stream).sink(lambda t, b: caught.extend((t, r) for r in container.records(b)))
            return handle

        handle = worker.dataflow(dataflow)
        if worker.index == 0:
            feed(handle)
        return caught

    return sorted((x for part in execute(job, workers) for x in part), key=repr)


def test_per_record_operators_see_the_rows_of_an_arrow_batch() -> None:
    words = pa.record_batch({"n": [1, 2, 3], "word": ["x", "y", "x"]})
    assert _run(lambda s: s.map(lambda r: r[1] * r[0]), lambda h: h.send_batch(words)) == [
        (0, "x"), (0, "xxx"), (0, "yy")
    ]
    assert _run(lambda s: s.filter(lambda r: r[1] == "x"), lambda h: h.send_batch(words)) == [
        (0, (1, "x")), (0, (3, "x"))
    ]
    assert _run(lambda s: s.flat_map(lambda r: [r[1]] * r[0]), lambda h: h.send_batch(words), 2) == [
        (0, "x"), (0, "x"), (0, "x"), (0, "x"), (0, "y"), (0, "y")
    ]
    assert _run(lambda s: s.count_by(), lambda h: h.send_batch(words.select(["word"])), 2) == [
        (0, (("x",), 2)), (0, (("y",), 1))
    ]
    assert _run(lambda s: s.count_by(lambda r: r[1]).map(lambda kv: kv), lambda h: h.send_batch(words), 3) == [
        (0, ("x", 2)), (0, ("y", 1))
    ]


def test_the_file_source_example_of_the_docs_counts_csv_rows(tmp_path: Path) -> None:
    from pytimely.connectors import file_sink, file_source

    (tmp_path / "a.csv").write_text("n,word\n1,x\n2,y\n3,x\n")
    (tmp_path / "b.csv").write_text("n,word\n4,x\n5,z\n")

    def job(worker: Worker) -> None:
        def build(scope: Any) -> None:  # docs/connectors.md, "Files"
            events = file_source(scope, [tmp_path / "a.csv", tmp_path / "b.csv"], epoch_per_file=True)
            counts = events.count_by(lambda row: row[1])
            file_sink(counts, tmp_path / "counts.csv", columns=["key", "count"])

        worker.dataflow(build)

    execute(job, 2)
    lines = (tmp_path / "counts.csv").read_text().splitlines()
    assert lines[0] == "key,count"
    assert sorted(lines[1:3]) == ["x,2", "y,1"]  # epoch 0 (in arrival order within an epoch)
    assert sorted(lines[3:]) == ["x,1", "z,1"]  # epoch 1


def test_a_batch_of_no_known_kind_is_refused_where_it_enters() -> None:
    from pytimely.errors import BatchKindError

    with pytest.raises(BatchKindError, match=r"operator 'input' at time 0: a batch of type builtins.tuple") as info:
        _run(lambda s: s, lambda h: h.send_batch((1, 2)))
    assert info.value.kind == "builtins.tuple"


def test_a_map_batch_giving_no_known_kind_is_named() -> None:
    from pytimely.errors import BatchKindError

    with pytest.raises(BatchKindError, match="operator 'to set' on worker 0 at time 0") as info:
        _run(lambda s: s.map_batch(set, name="to set"), lambda h: h.send_batch([1, 2]))
    assert info.value.operator == "to set"


@pytest.mark.parametrize("kind", ["list", "numpy", "arrow"])
def test_a_missing_column_names_the_operator_the_kind_and_the_column(kind: str) -> None:
    from pytimely.errors import ColumnError

    rows = batch_matrix.batch(kind, batch_matrix.records(kind)[0][:5])
    with pytest.raises(ColumnError, match=f"operator 'counts' on worker 0 at time 0: .*{kind}.*column 9") as info:
        _run(lambda s: s.count_by(9, name="counts"), lambda h: h.send_batch(rows))
    assert (info.value.operator, info.value.kind, info.value.column) == ("counts", kind, 9)


@pytest.mark.parametrize(
    ("rows", "column", "holds"),
    [
        (pa.record_batch({"t": [1.5, 2.0], "k": [1, 2]}), "t", "float64"),
        (pa.record_batch({"t": ["a", "b"], "k": [1, 2]}), "t", "string"),
        ([(1.5, 1), (2.0, 2)], 0, "float"),
        (np.array([[1.5, 1.0]]), 0, "float64"),
    ],
)
def test_event_times_that_are_not_integers_are_refused_naming_the_column(rows: Any, column: Any, holds: str) -> None:
    from pytimely.errors import ColumnError, InputFormatError

    with pytest.raises(ColumnError, match=f"operator 'windows'.*event times must be integers.*{holds}") as info:
        _run(lambda s: s.tumbling(2, time=column, key=1, name="windows"), lambda h: h.send_batch(rows))
    assert isinstance(info.value, InputFormatError) and info.value.column == column


def test_the_container_knows_every_kind() -> None:
    from pytimely import container

    table = pa.table({"k": [3, 1, 3], "w": ["a", None, "a"]})
    assert container.records(table) == [(3, "a"), (1, None), (3, "a")]
    assert container.records(container.with_dict_records(table)) == [
        {"k": 3, "w": "a"}, {"k": 1, "w": None}, {"k": 3, "w": "a"}
    ]
    assert container.records(np.array([[1, 2], [3, 4]])) == [(1, 2), (3, 4)]
    assert container.records(np.array([1, 2])) == [1, 2] and type(container.records(np.array([1]))[0]) is int
    codes, distinct = container.encoded(table, "w")
    assert [distinct[c] for c in codes.tolist()] == ["a", None, "a"]
    parts = container.split(table, np.array([1, 0, 1]), 2)
    assert [container.records(p) for p in parts] == [[(1, None)], [(3, "a"), (3, "a")]]
    assert container.records(container.concat([table, table])) == container.records(table) * 2
    assert container.records(container.concat([[1], np.array([2])])) == [1, 2]
    back = container.convert(container.convert(table, "list"), "arrow", table.schema)
    assert back.schema == table.schema and container.records(back) == container.records(table)
    assert container.convert([(1, 2), (3, 4)], "numpy").tolist() == [[1, 2], [3, 4]]
    assert container.routes(table, "w").tolist() == container.routes(container.records(table), 1).tolist()
    assert container.routes(pa.table({"k": [5, 2]}), "k").tolist() == [5, 2]


@pytest.mark.parametrize("schema", [pa.schema([("k", pa.int64()), ("v", pa.int64())]), np.dtype("int64")])
def test_records_sent_to_an_input_with_a_schema_travel_as_columns(schema: Any) -> None:
    from pytimely import container

    kinds: set[str] = set()

    def job(worker: Worker) -> list[Any]:
        out: list[Any] = []

        def dataflow(scope: Any) -> Any:
            handle, stream = scope.new_input(schema=schema)
            routed = stream.exchange(lambda r: r[0]).inspect_batch(lambda t, b: kinds.add(container.kind_of(b).name))
            routed.sum_by(0, 1).sink(lambda t, b: out.extend((t, kv) for kv in container.records(b)))
            return handle

        handle = worker.dataflow(dataflow)
        for t in range(2):
            handle.advance_to(t)
            for i in range(worker.index, 50, worker.peers):
                handle.send((i % 4, i * (t + 1)))
        return out

    got = sorted(x for part in execute(job, 2) for x in part)
    expected = sorted((t, (k, sum(i * (t + 1) for i in range(50) if i % 4 == k))) for t in range(2) for k in range(4))
    assert got == expected
    assert kinds == {"arrow" if isinstance(schema, pa.Schema) else "numpy"}


def test_a_record_that_does_not_fit_the_schema_names_the_input_and_the_column() -> None:
    from pytimely.errors import ColumnError

    def job(worker: Worker) -> None:
        handle, _ = worker.dataflow(lambda scope: scope.new_input("events", schema=pa.schema([("k", pa.int64())])))
        handle.send((1,))
        handle.send(("x",))
        handle.flush()

    with pytest.raises(ColumnError, match="operator 'events' at time 0: column 'k' cannot hold") as info:
        execute(job)
    assert info.value.column == "k"
    with pytest.raises(InvalidArgument, match=r"schema must be a pyarrow\.Schema or a numpy dtype"):
        execute(lambda w: w.dataflow(lambda scope: scope.new_input(schema="nonsense")))


def test_file_source_can_give_csv_records_as_dicts(tmp_path: Path) -> None:
    from pytimely.connectors import file_source

    (tmp_path / "a.csv").write_text("n,word\n1,x\n2,y\n")
    seen: list[Any] = []

    def job(worker: Worker) -> None:
        def build(scope: Any) -> None:
            rows = file_source(scope, [tmp_path / "a.csv"], records="dict")
            rows.map(lambda r: (r["word"], r["n"])).inspect(seen.append).exchange(lambda r: 0).count_by(0)

        worker.dataflow(build)

    execute(job, 2)
    assert sorted(seen) == [("x", 1), ("y", 2)]
