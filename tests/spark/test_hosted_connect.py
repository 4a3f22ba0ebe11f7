"""A stream hosted on the executors through Spark Connect: the handler lives in the server's Python process."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pytimely.spark.epoch_output import EpochOutput
from pytimely.spark.streaming import CsvDirectorySink, run_stream
from pytimely.spark.watermark import Watermark
from tests.spark.test_hosted_eventtime import run as run_event_time
from tests.spark.test_hosted_stream import (
    ROOT,
    SCHEMA,
    assert_running_counts,
    changelog,
    count_words,
    drop_texts,
    output_changelog,
)
from tests.spark.test_streaming import load
from tests.spark.test_watermark import BATCHES, drop_file, read_rows, reference

pytestmark = pytest.mark.timeout(900)


def test_hosted_word_count_through_connect_equals_the_driver_hosted_path(
    connect: Any, spark: Any, tmp_path: Path
) -> None:
    """Two hosted processes started from the server's foreachBatch process, two runs of the client: the same
    changelog as the driver-hosted path in this process; the client stops the processes when its query ends. Then
    an event-time query with a watermark and a side output through the same server (one hosted process): the same
    changelog and side output as the driver-hosted path."""
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
        names = sorted(p.name for p in (tmp_path / "out").glob(f"part-{epoch:012d}-*"))
        assert [n.split("-p")[-1] for n in names] == ["00000.csv", "00001.csv"], names  # both hosted processes
    driver_out = tmp_path / "driver"
    count_words(spark, incoming, driver_out, tmp_path / "driver-ck")
    assert output_changelog(output) == changelog(driver_out)
    # Event time through Connect on the same server: delay 2, late rows to a side output (the held and late rows'
    # files signed with the checkpoint's key on the server's side), as the driver-hosted path in this process.
    events = tmp_path / "events"
    for k, rows in enumerate(BATCHES):
        drop_file(events, f"b{k}.csv", rows, k)
    # One hosted process here: the word count above is the two-process run through Connect; this one adds the
    # watermark, the held rows and the side output on the server's side, which one process shows as well.
    for session, name, hosting in ((connect, "connect", {"processes": 1}), (spark, "driver", {})):
        side = CsvDirectorySink(tmp_path / f"{name}-side", order_by=["epoch", "value"])
        run_event_time(session, events, tmp_path / f"{name}-events", tmp_path / f"{name}-events-ck",
                       Watermark(delay=2, late="side", side=side), **hosting)  # fmt: skip
    files = {kind: [read_rows(p) for p in sorted((tmp_path / kind).glob("batch-*.csv"))]
             for kind in ("connect-events", "connect-side", "driver-events", "driver-side")}  # fmt: skip
    assert files["connect-events"] == files["driver-events"] and files["connect-side"] == files["driver-side"]
    late, outputs = reference(BATCHES, 2)
    assert files["connect-events"] == [[[str(e), w, str(c)] for e, w, c in batch] for batch in outputs]
    assert sum(map(len, files["connect-side"])) == sum(map(len, late)) > 0


def test_a_connect_client_killed_mid_micro_batch_is_taken_over_by_the_next(
    connect: Any, connect_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kill -9 of the word-count example's client (a process of its own) while its query runs on the server: the
    next client, the example's ``main()`` in this process on the module's Connect session, takes the checkpoint
    over (the orphaned query and its hosted processes are fenced and stop) and the output holds every micro-batch
    once with its running counts."""
    rng = random.Random(47)
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    drop_texts(incoming, rng, range(6))
    args = ["--spark", connect_server.url, "--text-dir", str(incoming), "--output", str(out), "--checkpoint", str(ck),
            "--available-now", "--files-per-batch", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, str(ROOT / "examples" / "stream_wordcount.py"), *args]
    log = (tmp_path / "client.log").open("w")
    client = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
    commits = out / "_pytimely" / "commits"
    deadline = time.monotonic() + 300
    try:
        while len(list(commits.glob("epoch-*.json")) if commits.exists() else []) < 1:
            assert client.poll() is None, (tmp_path / "client.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the client committed nothing within 300 s"
            time.sleep(0.05)
    finally:
        os.killpg(client.pid, signal.SIGKILL)
        client.wait(60)
        log.close()
    capsys.readouterr()
    assert load("stream_wordcount").main(args) == 0, capsys.readouterr().err[-3000:]
    output = EpochOutput(out, SCHEMA, format="csv")
    committed = output.committed()
    assert committed == list(range(len(committed))) and committed[-1] == 5, committed
    assert_running_counts(output, incoming)
