"""pytimely on a Spark Connect session (``sc://``): no ``sparkContext``, no JVM in the client.

A real Connect server (``SparkConnectServer`` started with PySpark's own ``spark-submit``) runs the barrier
stages; its Python workers import this tree of pytimely.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytimely.errors import InvalidArgument, SparkConnectError, SparkTaskError
from pytimely.spark import collect, read, run_dataflow, save
from pytimely.spark.figures import Figures
from pytimely.spark.session import is_connect, master_of, slots_of
from tests.spark.test_hosting import _edges_frame, wcc


def _doubled(stream: Any) -> Any:
    return stream.map_batch(lambda b: [(x * 2,) for x in b.column("x").to_pylist()])


def _boom(stream: Any) -> Any:
    def check(batch: Any) -> Any:
        if stream.scope.index == 1:
            raise ValueError("boom on worker one")
        return batch

    return stream.map_batch(check)


def test_a_connect_session_is_told_apart_and_its_slots_are_known(connect: Any, spark: Any) -> None:
    assert is_connect(connect) and not is_connect(spark)
    assert master_of(connect) == "local[4]" and slots_of(connect) == 4


def test_components_on_connect_equal_the_in_process_job(connect: Any, tmp_path: Path) -> None:
    """Connected components over a DataFrame of the Connect session, 2 processes x 2 workers, met by allGather."""
    edges = np.random.default_rng(5).integers(0, 400, size=(1500, 2))
    source = tmp_path / "edges.csv"
    np.savetxt(source, edges, fmt="%d", delimiter=",")
    expected = wcc.run(str(source), 1)
    table = collect(wcc.run_on_spark(connect, _edges_frame(connect, edges), 2, 2))
    got = sorted(zip(table.column("vertex").to_pylist(), table.column("label").to_pylist(), strict=True))
    assert got == [tuple(row) for row in expected.tolist()]


def test_read_run_and_save_one_file_through_connect(connect: Any, tmp_path: Path) -> None:
    rng = random.Random(3)
    values = [rng.randrange(1000) for _ in range(500)]
    source = tmp_path / "in.csv"
    source.write_text("x\n" + "".join(f"{v}\n" for v in values), encoding="utf-8")
    frame = read(connect, str(source), schema="x long")
    out = tmp_path / "out.csv"
    save(run_dataflow(_doubled, frame, "y long", processes=2, workers=2), str(out), order_by=["y"])
    with out.open(newline="", encoding="utf-8") as handle:
        assert [int(row[0]) for row in csv.reader(handle)] == sorted(2 * v for v in values)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [], "a staging folder was left"


def test_a_failing_task_on_connect_is_the_tasks_own_error_and_nothing_is_written(
    connect: Any, tmp_path: Path
) -> None:
    frame = connect.range(0, 100).selectExpr("id as x")
    with pytest.raises(SparkTaskError, match="ValueError: boom on worker one"):
        save(run_dataflow(_boom, frame, "x long", processes=2), str(tmp_path / "out.parquet"))
    assert list(tmp_path.iterdir()) == []


def test_what_needs_a_classic_session_is_refused_by_name(connect: Any) -> None:
    frame = connect.range(0, 10).selectExpr("id as x")
    with pytest.raises(InvalidArgument, match="meeting='driver' needs a classic session"):
        run_dataflow(_doubled, frame, "y long", meeting="driver")
    with pytest.raises(SparkConnectError, match="figures= needs a classic session"):
        run_dataflow(_doubled, frame, "y long", figures=Figures.__new__(Figures))


def test_a_stream_on_connect_is_refused_saying_why(connect: Any, tmp_path: Path) -> None:
    from pytimely.spark.streaming import CsvDirectorySink, run_stream

    (tmp_path / "in").mkdir()
    source = connect.readStream.schema("src long, dst long").csv(str(tmp_path / "in"))
    with pytest.raises(SparkConnectError, match="run_stream needs a classic session"):
        run_stream(_doubled, source, "y long", sink=CsvDirectorySink(tmp_path / "out"), checkpoint=tmp_path / "ck")
    assert not (tmp_path / "ck").exists() and not (tmp_path / "out").exists()


def test_the_wcc_command_runs_on_a_connect_server(connect_server: Any, tmp_path: Path) -> None:
    """``wcc.py --spark sc://...`` writes the same file as the in-process job."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    edges = np.random.default_rng(9).integers(0, 200, size=(400, 2))
    source = tmp_path / "edges.csv"
    np.savetxt(source, edges, fmt="%d", delimiter=",")
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    outputs = {}
    for name, extra in (("here", []), ("connect", ["--spark", connect_server.url, "-n", "2"])):
        out = tmp_path / f"{name}.csv"
        done = subprocess.run(
            [sys.executable, str(root / "examples" / "wcc.py"), "--edges", str(source), "--output", str(out), *extra],
            env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        outputs[name] = out.read_text()
    assert outputs["connect"] == outputs["here"]
