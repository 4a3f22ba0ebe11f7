"""A stream hosted on the executors through Spark Connect: the handler lives in the server's Python process."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pytimely.spark.epoch_output import EpochOutput
from pytimely.spark.streaming import run_stream
from tests.spark.test_hosted_stream import SCHEMA, changelog, count_words, drop_texts, output_changelog
from tests.spark.test_streaming import load

pytestmark = pytest.mark.timeout(900)


def test_hosted_word_count_through_connect_equals_the_driver_hosted_path(
    connect: Any, spark: Any, tmp_path: Path
) -> None:
    """Two hosted processes started from the server's foreachBatch process, two runs of the client: the same
    changelog as the driver-hosted path in this process; the client stops the processes when its query ends."""
    rng = random.Random(43)
    incoming = tmp_path / "in"
    output = EpochOutput(tmp_path / "out", SCHEMA, format="csv", order_by=["word"])
    wordcount = load("stream_wordcount")
    for rounds in (range(2), range(2, 3)):
        drop_texts(incoming, rng, rounds)
        source = connect.readStream.option("maxFilesPerTrigger", 1).text(str(incoming))
        run_stream(wordcount.running_counts, source, wordcount.SCHEMA, sink=output, checkpoint=tmp_path / "ck",
                   query="connect_hosted", available_now=True, processes=2)
    assert output.committed() == [0, 1, 2]
    for epoch in range(3):
        names = sorted(p.name for p in (tmp_path / "out" / f"epoch-{epoch:012d}").iterdir())
        assert [n.split("-p")[-1] for n in names] == ["00000.csv", "00001.csv"], names  # both hosted processes
    driver_out = tmp_path / "driver"
    count_words(spark, incoming, driver_out, tmp_path / "driver-ck")
    assert output_changelog(output) == changelog(driver_out)
