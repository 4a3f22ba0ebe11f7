"""How long hosted processes live: they stop by themselves when the control side goes quiet, and come back."""

from __future__ import annotations

import csv
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pytimely.errors import InvalidArgument, PytimelyError
from pytimely.spark.stream_checkpoint import _identity
from pytimely.spark.stream_feed import dial
from pytimely.spark.stream_host import await_exits, hosts_path
from pytimely.spark.stream_hosted_handler import HostedHandler
from pytimely.spark.stream_hosted_run import _hosted_maker
from pytimely.spark.streaming import CsvDirectorySink, StreamCheckpoint, run_stream
from tests.spark.test_streaming import load


def wait_until(condition: Any, what: str, deadline: float = 180.0) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``deadline`` s (generous: a loaded machine)."""
    end = time.monotonic() + deadline
    while not condition():
        assert time.monotonic() < end, f"{what} within {deadline:g} s"
        time.sleep(0.2)


def hosted_word_count(spark: Any, tmp_path: Path, idle_timeout: float) -> tuple[HostedHandler, Any, Path]:
    """A hosted word count's handler over static frames (one process), as ``run_stream`` makes it."""
    from pytimely.spark.hosting import ship_by_value

    wordcount = load("stream_wordcount")
    ship_by_value(wordcount.running_counts)
    frame = spark.createDataFrame([("a a b",)], "value string")
    checkpoint = StreamCheckpoint(tmp_path / "ck")
    identity = _identity("lifetime", frame, wordcount.SCHEMA, None, "running_counts")
    out = tmp_path / "out"
    sink = CsvDirectorySink(out, order_by=["word"])
    sink.prepare()
    make = _hosted_maker(
        wordcount.running_counts, spark, wordcount.SCHEMA, sink, checkpoint, identity, 1, 1, secrets.token_bytes(32),
        idle_timeout=idle_timeout,
    )  # fmt: skip
    return HostedHandler(make(spark), sink, checkpoint, identity), frame, out


def test_hosted_processes_stop_by_themselves_when_nothing_comes_and_start_again_for_the_next_micro_batch(
    spark: Any, tmp_path: Path
) -> None:
    """A control side that goes quiet (a Spark Connect client that died, or cannot reach the feed ports, never sends
    STOP): after the idle deadline (3 s for the generation started quiet here) the process stops, writes its exit
    marker, its feed port closes and the hosting job ends (no Spark job left active). The next micro-batch starts
    the next generation, restored from the snapshot, and counts on from the state. ~50 s."""
    handler, frame, out = hosted_word_count(spark, tmp_path, idle_timeout=600.0)
    try:
        handler(frame, 0)
        # A generation that hears nothing: the deadline runs from its start (no feed job races it here).
        handler.hosted.idle_timeout = 3.0
        handler.restart()
        handler.hosted.idle_timeout = 600.0
        feeds, generation = list(handler.hosted.feeds), handler.generation
        own = handler.checkpoint.own
        wait_until(lambda: not handler.hosted.running, "the idle hosted process stopped")
        assert hosts_path(own, generation).with_suffix(".exit-0").exists() and await_exits(own, 0.0)
        with pytest.raises((PytimelyError, OSError)):
            dial(feeds[0], b"x" * 32, 0, timeout=5.0).close()
        wait_until(lambda: not spark.sparkContext.statusTracker().getActiveJobsIds(), "no Spark job left active")
        assert not [t for t in threading.enumerate() if t.name.startswith("pytimely-hosting")]
        handler(spark.createDataFrame([("a c",)], "value string"), 1)
        assert handler.generation == generation + 1 and handler.processed == [0, 1]
    finally:
        handler.close()
    with (out / "batch-000000000001.csv").open(newline="", encoding="utf-8") as file:
        assert {r["word"]: int(r["count"]) for r in csv.DictReader(file)} == {"a": 3, "c": 1}
    assert not handler.hosted.running


def test_a_bad_idle_deadline_is_refused_before_anything_starts(spark: Any, tmp_path: Path) -> None:
    """``idle_timeout`` must be seconds > 0 (or None: never): InvalidArgument, nothing made."""
    source = spark.readStream.text(str(tmp_path))
    for bad in (0, -1.0, "soon"):
        with pytest.raises(InvalidArgument, match="idle_timeout"):
            run_stream(
                lambda s: s, source, "word string", sink=CsvDirectorySink(tmp_path / "o"), checkpoint=tmp_path / "c",
                processes=1, idle_timeout=bad,
            )  # fmt: skip
    assert not (tmp_path / "c").exists()
