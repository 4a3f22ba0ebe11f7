"""The stream examples hosted on the executors of a real standalone cluster (``spark://``), two processes."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from pytimely.spark.epoch_output import EpochOutput
from tests.spark.standalone import run_example as _run_example
from tests.spark.test_hosted_stream import assert_running_counts, drop_texts

pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A master and one worker of three cores: two hosted processes and a slot for the feed jobs."""
    from tests.spark.standalone import start_standalone

    started = start_standalone(tmp_path_factory.mktemp("standalone3"), cores=3)
    yield started
    started.stop()


def test_stream_wordcount_on_two_hosted_processes_over_rounds_of_files(cluster: Any, tmp_path: Path) -> None:
    """Two rounds of files, each round a driver of its own with ``--processes 2`` on ``spark://``: every micro-batch
    is committed once with each word's running count (the rerun resumed from the snapshots). ~150 s."""
    rng = random.Random(29)
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    args = ["--spark", cluster.url, "--processes", "2", "--text-dir", str(incoming), "--output", str(out),
            "--checkpoint", str(ck), "--available-now", "--files-per-batch", "1"]
    for rounds in (range(2), range(2, 4)):
        drop_texts(incoming, rng, rounds)
        done = _run_example("stream_wordcount", args)
        assert done.returncode == 0, done.stderr[-3000:]
    schema = pa.schema([("epoch", pa.int64()), ("word", pa.string()), ("count", pa.int64())])
    output = EpochOutput(out, schema, format="csv")
    assert output.committed() == [0, 1, 2, 3]
    assert_running_counts(output, incoming)
    for epoch in output.committed():
        names = {p.name for p in out.glob(f"part-{epoch:012d}-*")}
        assert {n.split("-p")[-1] for n in names} == {"00000.csv", "00001.csv"}, names
