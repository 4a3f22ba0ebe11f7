"""Dataflows hosted by a Spark barrier stage on a real local SparkSession: results, failures, leftovers."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytimely.errors import InputFormatError, SparkError, SparkSlotsError, SparkTaskError
from pytimely.spark import collect, read, run_dataflow, save, to_record_batch
from pytimely.spark.output import task_message, translate
from tests.algorithms.test_components_kernel import union_find_roots
from tests.profiles import examples

pytestmark = pytest.mark.timeout(300)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wcc = _example("wcc")
wordcount = _example("wordcount")

SPARK_SETTINGS = settings(
    max_examples=examples(4),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def _edges_frame(spark: Any, edges: np.ndarray, epochs: np.ndarray | None = None) -> Any:
    columns = {"src": edges[:, 0], "dst": edges[:, 1]}
    if epochs is not None:
        columns["epoch"] = epochs
    return spark.createDataFrame(pa.table(columns).to_pandas())


# -- the jobs on Spark equal the in-process jobs -------------------------------------------------------


@SPARK_SETTINGS
@given(
    edges=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), min_size=1, max_size=120),
    layout=st.sampled_from([(1, 1), (2, 1), (2, 2)]),
)
def test_wcc_on_spark_equals_the_in_process_job(spark: Any, tmp_path: Path, edges: list[Any], layout: Any) -> None:
    array = np.array(edges, dtype=np.int64)
    path = tmp_path / "edges.csv"
    np.savetxt(path, array, fmt="%d", delimiter=",")
    expected = wcc.run(str(path), 2)
    processes, workers = layout
    got = collect(wcc.run_on_spark(spark, _edges_frame(spark, array), processes, workers))
    rows = sorted(zip(got.column("vertex").to_pylist(), got.column("label").to_pylist(), strict=True))
    assert rows == [tuple(r) for r in expected.tolist()]


@pytest.mark.parametrize("meeting", ["driver", "gather"])
def test_both_ways_of_meeting_give_the_same_components(spark: Any, meeting: str) -> None:
    rng = np.random.default_rng(5)
    array = rng.integers(0, 3000, size=(4000, 2), dtype=np.int64)
    frame = _edges_frame(spark, array)
    got = collect(run_dataflow(wcc._components, frame, "vertex long, label long", processes=2, meeting=meeting))
    rows = dict(zip(got.column("vertex").to_pylist(), got.column("label").to_pylist(), strict=True))
    roots = union_find_roots(3000, [tuple(e) for e in array.tolist()])
    assert rows == {v: roots[v] for v in np.unique(array).tolist()}


@SPARK_SETTINGS
@given(
    edges=st.lists(
        st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(0, 5)), min_size=1, max_size=100
    ),
)
def test_incremental_wcc_on_spark_equals_the_in_process_job(spark: Any, tmp_path: Path, edges: list[Any]) -> None:
    array = np.array(edges, dtype=np.int64)
    path = tmp_path / "edges.csv"
    np.savetxt(path, array, fmt="%d", delimiter=",")
    expected = wcc.run(str(path), 2, epochs=True)
    got = collect(wcc.run_on_spark(spark, _edges_frame(spark, array[:, :2], array[:, 2]), 2, 2, epochs=True))
    rows = sorted(zip(*(got.column(c).to_pylist() for c in ("epoch", "vertex", "label")), strict=True))
    assert rows == [tuple(r) for r in expected.tolist()]


@SPARK_SETTINGS
@given(
    lines=st.lists(
        st.lists(st.sampled_from(["a", "b", "cé", "\"q\"", "d-d", "zz", "Ω"]), max_size=8).map(" ".join),
        min_size=1,
        max_size=30,
    )
)
def test_wordcount_on_spark_equals_the_in_process_job(spark: Any, tmp_path: Path, lines: list[str]) -> None:
    path = tmp_path / "text.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    expected = wordcount.run(str(path), 2)
    got = collect(wordcount.run_on_spark(spark, spark.read.text(str(path)), 2, 2))
    assert sorted(zip(got.column("word").to_pylist(), got.column("count").to_pylist(), strict=True)) == expected


@pytest.mark.parametrize("name", ["out.csv", "out.parquet"])
def test_wcc_command_on_spark_writes_the_same_file(tmp_path: Path, name: str) -> None:
    """The example's own command line: Spark reads, pytimely computes, Spark writes; files are equal."""
    edges = np.random.default_rng(7).integers(0, 500, size=(800, 2))
    source = tmp_path / "edges.csv"
    np.savetxt(source, edges, fmt="%d", delimiter=",")
    reference, on_spark = tmp_path / "ref" / name, tmp_path / "spark" / name
    reference.parent.mkdir()
    on_spark.parent.mkdir()
    assert wcc.main(["--edges", str(source), "--output", str(reference), "-w", "2"]) == 0
    spark_flags = ["--spark", "local[4]", "-n", "2", "-w", "2"]
    assert wcc.main([*spark_flags, "--edges", str(source), "--output", str(on_spark)]) == 0
    if name.endswith(".csv"):
        assert on_spark.read_bytes() == reference.read_bytes()
    else:
        import pyarrow.parquet as pq

        assert pq.read_table(on_spark).to_pylist() == pq.read_table(reference).to_pylist()
    assert sorted(p.name for p in on_spark.parent.iterdir()) == [name], "no staging or checksum files left"


def test_parquet_input_is_read_by_extension(spark: Any, tmp_path: Path) -> None:
    edges = np.array([[1, 2], [2, 3], [7, 8], [10**12, 8]], dtype=np.int64)
    path = tmp_path / "edges.parquet"
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"dst": edges[:, 1], "src": edges[:, 0], "note": ["x"] * 4}), path)
    frame = read(spark, str(path), "src long, dst long")
    got = collect(wcc.run_on_spark(spark, frame, 2, 1))
    assert dict(zip(got.column("vertex").to_pylist(), got.column("label").to_pylist(), strict=True)) == {
        1: 1, 2: 1, 3: 1, 7: 7, 8: 7, 10**12: 7
    }
    with pytest.raises(InputFormatError, match="no column weight"):
        read(spark, str(path), "src long, weight long")


# -- failures: the task's own error, whole re-runs, output once or not at all -----------------------------


def _fails_on_worker_one(stream: Any) -> Any:
    def check(batch: Any) -> Any:
        if stream.scope.index == 1:
            raise ValueError("boom on worker one")
        return batch

    return stream.map_batch(check)


def test_a_failing_task_fails_the_run_with_its_own_error(spark: Any, tmp_path: Path) -> None:
    frame = spark.range(0, 100).selectExpr("id as x")
    result = run_dataflow(_fails_on_worker_one, frame, "x long", processes=2, workers=1)
    started = time.monotonic()
    with pytest.raises(SparkTaskError, match="ValueError: boom on worker one"):
        save(result, str(tmp_path / "out.parquet"))
    assert time.monotonic() - started < 60
    assert list(tmp_path.iterdir()) == [], "nothing written, not even a staging directory"


class _DiesOnce:
    """A build whose process 0 kills its own Python worker the first time (a marker file remembers)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __call__(self, stream: Any) -> Any:
        marker = self.marker

        def maybe_die(batch: Any) -> Any:
            if stream.scope.index == 0 and not os.path.exists(marker):
                Path(marker).touch()
                os._exit(17)
            return batch

        return wcc._components(stream.map_batch(maybe_die))


def test_a_task_killed_on_its_first_attempt_is_rerun_whole_with_retries(spark: Any, tmp_path: Path) -> None:
    edges = np.random.default_rng(3).integers(0, 300, size=(600, 2))
    source = tmp_path / "edges.csv"
    np.savetxt(source, edges, fmt="%d", delimiter=",")
    expected = wcc.run(str(source), 1)
    frame = _edges_frame(spark, edges)
    schema = "vertex long, label long"

    marker = tmp_path / "marker-a"
    with pytest.raises(SparkTaskError):
        collect(run_dataflow(_DiesOnce(str(marker)), frame, schema, processes=2))
    assert marker.exists(), "without retries, a barrier result stage fails clearly"

    # Before a shuffle (the single file's), Spark itself re-runs a failed barrier stage whole, all its tasks.
    marker = tmp_path / "marker-c"
    out = tmp_path / "by-spark.csv"
    save(run_dataflow(_DiesOnce(str(marker)), frame, schema, processes=2), str(out), order_by=["vertex"])
    assert marker.exists()
    assert np.loadtxt(out, dtype=np.int64, delimiter=",", ndmin=2).tolist() == expected.tolist()

    marker = tmp_path / "marker-b"
    out = tmp_path / "retried.csv"
    result = run_dataflow(_DiesOnce(str(marker)), frame, schema, processes=2, workers=2)
    save(result, str(out), order_by=["vertex"], retries=1)
    assert marker.exists(), "the first attempt did die"
    got = np.loadtxt(out, dtype=np.int64, delimiter=",", ndmin=2)
    assert got.tolist() == expected.tolist(), "exactly the reference rows: none missing, none twice"


def test_too_many_processes_for_the_slots_fails_at_once_with_a_clear_error(spark: Any) -> None:
    frame = spark.range(0, 10)
    started = time.monotonic()
    with pytest.raises(SparkSlotsError, match=r"8 pytimely processes need 8 Spark task slots.*has 4"):
        run_dataflow(lambda s: s, frame, "id long", processes=8)
    assert time.monotonic() - started < 5


def test_spark_refuses_a_barrier_stage_larger_than_its_slots_within_seconds(spark: Any) -> None:
    """Spark's own check (for masters whose slots pytimely cannot count) is set to fail in seconds."""
    rdd = spark.sparkContext.parallelize(range(8), 8).barrier().mapPartitions(lambda rows: rows)
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        rdd.collect()
    assert isinstance(translate(info.value), SparkSlotsError)
    assert time.monotonic() - started < 60


def test_bad_requests_are_refused_before_anything_runs(spark: Any) -> None:
    frame = spark.range(0, 10)
    with pytest.raises(InputFormatError, match="epoch column 'when'"):
        run_dataflow(lambda s: s, frame, "id long", epoch="when")
    with pytest.raises(ValueError, match="processes"):
        run_dataflow(lambda s: s, frame, "id long", processes=0)
    with pytest.raises(ValueError, match="workers"):
        run_dataflow(lambda s: s, frame, "id long", workers=-1)
    with pytest.raises(ValueError, match="retries"):
        save(frame, "/nonexistent/x.csv", retries=-1)
    with pytest.raises(SparkError, match="one string column"):
        save(frame.selectExpr("id", "id as b"), "/nonexistent/x.txt")


def test_negative_epochs_are_a_clear_task_error(spark: Any) -> None:
    frame = spark.createDataFrame([(1, 2, -1), (2, 3, 0)], "src long, dst long, epoch long")
    with pytest.raises(SparkTaskError, match="negative values"):
        collect(wcc.run_on_spark(spark, frame, 2, 1, epochs=True))


# -- output conversion ---------------------------------------------------------------------------------


def test_output_batches_of_every_kind_become_rows_of_the_schema() -> None:
    schema = pa.schema([("epoch", pa.int64()), ("k", pa.string()), ("n", pa.int64())])
    by_tuple = to_record_batch([("a", 1), ("b", 2)], schema, time=3, epoch="epoch")
    by_dict = to_record_batch([{"k": "a", "n": 1}, {"k": "b", "n": 2}], schema, time=3, epoch="epoch")
    by_arrow = to_record_batch(pa.record_batch({"n": [1, 2], "k": ["a", "b"]}), schema, time=3, epoch="epoch")
    for batch in (by_tuple, by_dict, by_arrow):
        assert batch.to_pylist() == [{"epoch": 3, "k": "a", "n": 1}, {"epoch": 3, "k": "b", "n": 2}]
    numeric = pa.schema([("v", pa.int64()), ("l", pa.int64())])
    assert to_record_batch(np.array([[1, 2]]), numeric).to_pylist() == [{"v": 1, "l": 2}]
    with pytest.raises(SparkError, match="3 columns does not fit"):
        to_record_batch(np.zeros((2, 3), dtype=np.int64), numeric)
    with pytest.raises(SparkError, match="'n' cannot be int64"):
        to_record_batch([("a", "x")], schema, time=0, epoch="epoch")
    with pytest.raises(SparkError, match="cannot turn an output batch of type int"):
        to_record_batch(5, numeric)


def test_the_task_message_is_found_in_a_spark_error_text() -> None:
    text = (
        "An error occurred while calling o123.save.\n: org.apache.spark.SparkException: Job aborted.\n"
        "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n    raise KeyError('k')\n"
        "KeyError: 'k'\n\tat org.apache.spark.api.python.BasePythonRunner"
    )
    assert task_message(text) == "KeyError: 'k'"
    assert task_message("plain failure\nmore") == "plain failure"


# -- nothing left behind in reused Python workers -----------------------------------------------------------


def _leftovers(batches: Any) -> Any:
    for _ in batches:
        pass
    names = [t.name for t in threading.enumerate() if t.name.startswith("pytimely")]
    sockets = 0
    for fd in os.listdir("/proc/self/fd"):
        # The descriptor listdir itself used is gone by now.
        with contextlib.suppress(OSError):
            sockets += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    yield pa.record_batch({"pid": [os.getpid()], "names": [",".join(names)], "sockets": [sockets]})


def _probe(spark: Any) -> list[dict[str, Any]]:
    """Threads and sockets of the Python workers that run Arrow tasks (the kind pytimely's tasks are)."""
    frame = spark.range(0, 4, numPartitions=4).mapInArrow(_leftovers, "pid long, names string, sockets long")
    return collect(frame).to_pylist()  # type: ignore[no-any-return]


def _pid_of_process(stream: Any) -> Any:
    return stream.map_batch(lambda batch: [(os.getpid(),)]).exchange(lambda row: 0)


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="reads /proc to count sockets")
def test_no_python_worker_keeps_pytimely_threads_or_sockets_after_a_run(spark: Any) -> None:
    before = _probe(spark)
    baseline = max(row["sockets"] for row in before)
    frame = _edges_frame(spark, np.random.default_rng(5).integers(0, 200, size=(400, 2)))
    hosts: set[int] = set()
    for _ in range(2):
        collect(wcc.run_on_spark(spark, frame, 4, 2))
        ran = collect(run_dataflow(_pid_of_process, frame.repartition(4), "pid long", processes=4))
        hosts.update(ran.column("pid").to_pylist())
        with pytest.raises(SparkTaskError):
            collect(run_dataflow(_fails_on_worker_one, frame.selectExpr("src as x"), "x long", processes=2))
    after = _probe(spark)
    assert hosts & {row["pid"] for row in after}, "the probe ran in Python workers that hosted pytimely"
    assert [row["names"] for row in after if row["names"]] == [], "pytimely threads survived into the next stage"
    assert max(row["sockets"] for row in after) <= baseline, (before, after)
