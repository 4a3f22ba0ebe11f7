"""Rows fed to hosted processes by key: each row goes to the process owning its key's bin, so the dataflow's first
exchange moves nothing between processes, and the results are those of rows spread evenly."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from pytimely.errors import InputFormatError, InvalidArgument
from pytimely.spark.record_batches import owners, split_by_owner
from pytimely.spark.signed_files import read_signed_arrow
from pytimely.spark.stream_hosted import HostedDataflow
from pytimely.spark.streaming import CsvDirectorySink, run_stream
from tests.spark.test_hosted_stream import changelog
from tests.spark.test_streaming import drop
from tests.waiting import wait_until

SCHEMA = pa.schema([("epoch", pa.int64()), ("word", pa.string()), ("count", pa.int64())])
DDL = "epoch long, word string, count long"
WORDS = [f"w{i}" for i in range(40)] + ["é", ""]


def add(word: Any, count: int, total: int | None) -> tuple[int, list[tuple[Any, int]]]:
    """A word's running total, and it as this epoch's row."""
    total = count + (total or 0)
    return total, [(word, total)]


def running_totals(stream: Any) -> Any:
    """Rows ``(word, n)`` -> every word's running total at each epoch: its first exchange is keyed by ``word``."""
    return stream.state_machine(add, name="running")


CROSSED = "<crossed>"


def crossing_totals(stream: Any) -> Any:
    """``running_totals``, each row tagged with the worker it was fed to: past the keyed exchange a row that came
    from another worker (one worker a process: another process) also gives a row ``(CROSSED, 1)``."""
    here = stream.scope.index

    def tag(batch: Any) -> list[tuple[Any, int, int]]:
        words, counts = batch.column("word").to_pylist(), batch.column("n").to_pylist()
        return [(w, n, here) for w, n in zip(words, counts, strict=True)]

    def fold(word: Any, record: tuple[Any, int, int], total: int | None) -> tuple[int, list[tuple[Any, int, int]]]:
        total = record[1] + (total or 0)
        return total, [(word, total, record[2])]

    totals = stream.map_batch(tag, name="tag").state_machine(fold, key=lambda r: r[0], name="running")
    return totals.flat_map(lambda r: [(r[0], r[1])] + ([(CROSSED, 1)] if r[2] != here else []), name="crossed")


def epochs(seed: int, count: int) -> list[pa.Table]:
    """``count`` micro-batches of ``(word, n)`` rows."""
    rng = random.Random(seed)
    tables = []
    for _ in range(count):
        rows = [(rng.choice(WORDS), rng.randint(1, 5)) for _ in range(rng.randint(20, 200))]
        tables.append(pa.table({"word": [w for w, _ in rows], "n": pa.array([n for _, n in rows], pa.int64())}))
    return tables


def reference(tables: list[pa.Table]) -> list[dict[str, int]]:
    """Each epoch's result: every word of the micro-batch with its running total at the epoch's end."""
    totals: dict[str, int] = {}
    out = []
    for table in tables:
        words = table.column("word").to_pylist()
        for word, n in zip(words, table.column("n").to_pylist(), strict=True):
            totals[word] = totals.get(word, 0) + n
        out.append({w: totals[w] for w in set(words)})
    return out


def last_totals(rows: Any) -> dict[str, int]:
    """A word's last total among an epoch's rows (the fold emits one row per record, totals only grow)."""
    last: dict[str, int] = {}
    for word, total in rows:
        last[word] = max(total, last.get(word, total))
    return last


def hosted(spark: Any, own: Path, processes: int, key: str | None) -> HostedDataflow:
    """The hosted processes (one worker each) of ``crossing_totals``, not yet started."""
    from pytimely.spark.hosting import ship_by_value

    ship_by_value(crossing_totals)
    own.mkdir(parents=True, exist_ok=True)
    return HostedDataflow(
        spark, crossing_totals, own, processes=processes, workers=1, schema=SCHEMA, job="routing",
        parameters={"input": "word string, n long"}, describe="routing test", key=key, start_timeout=180.0,
    )  # fmt: skip


def feed(
    spark: Any, dataflow: HostedDataflow, tables: list[pa.Table], first: int
) -> list[tuple[dict[str, int], int, int]]:
    """Each table as an epoch (from ``first`` on, two sender partitions): each word's last total in its output, the
    rows that crossed processes in the keyed exchange, and the data bytes the workers had sent each other by then."""
    results = []
    for k, table in enumerate(tables):
        frame = spark.createDataFrame(table.to_pandas()).repartition(2)
        parts = dataflow.epoch(frame, first + k)
        rows: list[tuple[str, int]] = []
        for path in parts:
            out = read_signed_arrow(Path(path), dataflow.files_key)
            assert set(out.column("epoch").to_pylist()) <= {first + k}
            rows += zip(out.column("word").to_pylist(), out.column("count").to_pylist(), strict=True)
        crossed = sum(n for w, n in rows if w == CROSSED)
        results.append((last_totals(r for r in rows if r[0] != CROSSED), crossed, dataflow.exchanged))
    return results


def test_owners_are_the_keyed_exchanges_workers() -> None:
    """The feed's owner of a key is the worker the dataflow's keyed exchange sends it to: the same function."""
    from pytimely.dataflow.operators.binned import bin_exchange

    batch = pa.RecordBatch.from_pydict({"word": WORDS, "n": list(range(len(WORDS)))})
    pairs = [(w, n) for w, n in zip(WORDS, range(len(WORDS)), strict=True)]
    by_record = bin_exchange(lambda r: r[0], 256).route(pairs)  # the route of state_machine's (key, value) records
    assert owners(batch, "word", 6, 256).tolist() == [b % 6 for b in by_record.tolist()]
    parts = split_by_owner(batch, "word", 6, 256, parts=3, per=2)
    assert sorted(w for p in parts for w in p.column("word").to_pylist()) == sorted(WORDS)
    for process, part in enumerate(parts):
        assert {o // 2 for o in owners(part, "word", 6, 256).tolist()} <= {process}
    with pytest.raises(InputFormatError, match="'nope'"):
        owners(batch, "nope", 6, 256)
    with pytest.raises(InputFormatError, match="outside"):
        split_by_owner(batch, "word", 6, 256, parts=1, per=2, first=2)


def test_routed_rows_cross_no_process_and_give_the_unrouted_results(spark: Any, tmp_path: Path) -> None:
    """Two processes: routed by key, the first exchange sends nothing between them; spread evenly, it does; the
    output is the reference either way."""
    tables = epochs(3, 2)
    expected = reference(tables)
    seen = {}
    for key in ("word", None):
        dataflow = hosted(spark, tmp_path / f"own-{key}", 2, key)
        dataflow.start(0, -1)
        try:
            seen[key] = feed(spark, dataflow, tables, 0)
        finally:
            dataflow.stop()
    assert [rows for rows, _, _ in seen["word"]] == expected
    assert [rows for rows, _, _ in seen[None]] == expected
    assert [crossed for _, crossed, _ in seen["word"]] == [0, 0]
    assert sum(crossed for _, crossed, _ in seen[None]) > 0
    # Rows are counted, not the cluster's byte counters: with so few rows, the snapshots' commits to worker 0 (whose
    # size varies from run to run) outweigh the rows that cross, so the byte totals do not tell the two runs apart.


def test_routing_follows_the_owners_after_the_processes_change(spark: Any, tmp_path: Path) -> None:
    """Two processes, then three restored from the snapshot (bins move): the running totals carry on, and rows still
    reach their new owners directly."""
    tables = epochs(5, 4)
    expected = reference(tables)
    own = tmp_path / "own"
    first = hosted(spark, own, 2, "word")
    first.start(0, -1)
    try:
        before = feed(spark, first, tables[:2], 0)
    finally:
        first.stop()
    second = hosted(spark, own, 3, "word")
    second.start(1, 1)
    try:
        after = feed(spark, second, tables[2:], 2)
    finally:
        second.stop()
    assert [rows for rows, _, _ in before + after] == expected
    assert [crossed for _, crossed, _ in before + after] == [0, 0, 0, 0]


def test_run_stream_routes_by_key(spark: Any, tmp_path: Path) -> None:
    """``run_stream(..., key=)`` over files of ``word,n`` rows on two processes: the reference changelog; a key that
    is not a column is refused before anything starts."""
    incoming = tmp_path / "in"
    tables = epochs(7, 3)
    for k, table in enumerate(tables):
        text = "\n".join(f"{w},{n}" for w, n in zip(table.column("word").to_pylist(),
                                                       table.column("n").to_pylist(), strict=True))  # fmt: skip
        drop(incoming, f"t{k:03d}.csv", "word,n\n" + text + "\n", k)
    source = spark.readStream.option("maxFilesPerTrigger", 1).option("header", True).schema(
        "word string, n long").csv(str(incoming))  # fmt: skip
    with pytest.raises(InvalidArgument, match="'nope'"):
        run_stream(running_totals, source, DDL, sink=CsvDirectorySink(tmp_path / "never"), checkpoint=tmp_path / "x",
                   processes=2, key="nope")  # fmt: skip
    done = run_stream(
        running_totals, source, DDL, sink=CsvDirectorySink(tmp_path / "out", order_by=["word"]),
        checkpoint=tmp_path / "ck", query="routed", available_now=True, processes=2, key="word",
    )  # fmt: skip
    assert done.processed == [0, 1, 2]
    rows = changelog(tmp_path / "out")
    # CSV reads an empty word as null, written back as an empty field: the reference's empty word.
    got = [last_totals((w, int(c)) for e, w, c in rows if int(e) == epoch) for epoch in range(3)]
    assert got == reference(tables)


def test_a_kept_feed_connection_serves_the_next_task_until_its_process_closes_it() -> None:
    """A feed task's connection is kept for the next task of the same generation; once the process closes it, the
    next task connects again; a large frame goes through whole."""
    import os
    import socket
    import threading

    from pytimely.spark.stream_control import _LINKS, _pooled
    from pytimely.spark.stream_feed import Kind, answer, arrow_batches, arrow_bytes

    secret = os.urandom(32)
    server = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{server.getsockname()[1]}"
    served: list[Any] = []
    received: list[Any] = []

    def serve() -> None:
        for _ in range(2):
            sock, _ = server.accept()
            link = answer(sock, secret, 0)
            served.append(link)
            received.append(link.receive(60.0))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        table = pa.table({"word": [f"w{i}" for i in range(300_000)]})
        first = _pooled(address, secret, 0, generation=7)
        assert _pooled(address, secret, 0, generation=7) is first
        first.send(Kind.DATA, {"seq": 0}, arrow_bytes(table.to_batches(), table.schema))
        wait_until(lambda: received, 60.0, "the first frame")
        assert arrow_batches(received[0].body)[0].num_rows == 300_000
        served[0].close()
        wait_until(lambda: not first.open(), 60.0, "the process's close seen by the kept connection")
        again = _pooled(address, secret, 0, generation=7)
        assert again is not first
        again.send(Kind.DATA, {"seq": 1}, b"")
        thread.join(60.0)
        assert received[1].header == {"seq": 1}
    finally:
        for link in list(_LINKS.values()):
            link.close()
        _LINKS.clear()
        server.close()


def test_routing_by_key_with_event_time_on_the_executors_is_refused(spark: Any, tmp_path: Path) -> None:
    """``key=`` with an event-time ``epoch=`` column on the executors: InvalidArgument naming both, before the
    checkpoint or the sink is made (held rows would not follow their keys' owners across a restart)."""
    incoming = tmp_path / "in"
    drop(incoming, "t000.csv", "word,n,ts\na,1,0\n", 0)
    source = spark.readStream.option("header", True).schema("word string, n long, ts long").csv(str(incoming))
    with pytest.raises(InvalidArgument, match="key='word' with epoch='ts' on the executors"):
        run_stream(running_totals, source, DDL, sink=CsvDirectorySink(tmp_path / "out"), checkpoint=tmp_path / "ck",
                   processes=2, key="word", epoch="ts")  # fmt: skip
    assert not (tmp_path / "ck").exists() and not (tmp_path / "out").exists()
