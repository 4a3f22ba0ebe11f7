"""Faults of a stream hosted on the executors: a hosted process or the driver killed mid-micro-batch."""

from __future__ import annotations

import contextlib
import json
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
from tests.spark.standalone import quick_jvm
from tests.spark.test_hosted_stream import ROOT, SCHEMA, assert_batch_counts, changelog, count_words, drop_texts
from tests.spark.test_streaming import load
from tests.spark.test_watermark import SCHEMA as SCHEMA_DDL
from tests.spark.test_watermark import Rows, drop_file, read_rows, reference, source
from tests.spark.test_watermark import running_counts as eventtime_counts


class KillOnce:
    """A running count (the word-count example's, or the event-time one), whose hosted process kills itself
    (SIGKILL) on a line holding ``word`` while ``marker`` is there (it removes the marker first: the retried
    micro-batch passes)."""

    def __init__(self, marker: Path, word: str, *, event_time: bool = False) -> None:
        self.marker = marker
        self.word = word
        self.event_time = event_time

    def __call__(self, stream: Any) -> Any:
        # The example is loaded where the dataflow is built: a hosted process imports it by its path, not its name.
        counts = eventtime_counts if self.event_time else load("stream_wordcount").running_counts
        return counts(stream.map_batch(self.check, name="kill-once"))

    def check(self, batch: Any) -> Any:
        if self.marker.exists() and any(self.word in line for line in batch.column("value").to_pylist() if line):
            self.marker.unlink()
            os.kill(os.getpid(), signal.SIGKILL)
        return batch


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``--kill-trials N`` seeded trials of the hosted-process kill (2 by default; the issue asks for >= 10)."""
    if "seed" in metafunc.fixturenames:
        trials = int(metafunc.config.getoption("kill_trials", 2))
        metafunc.parametrize("seed", range(trials))


def test_a_hosted_process_killed_mid_batch_is_started_again_from_the_snapshot(
    spark: Any, tmp_path: Path, seed: int
) -> None:
    """kill -9 of a hosted process in a seeded micro-batch (of 5, on 1-3 processes of 1-2 workers): a new generation
    restores the snapshot of the batch before and the micro-batch is sent again; the changelog has no duplicate and
    no gap (equal to the driver-hosted one). By turns the word count and an event-time running count (a watermark of
    delay 2, late rows dropped, epochs held open across micro-batches: the held rows come back from the checkpoint
    too), whose changelog must also equal the plain-Python reference. ~40 s a trial."""
    rng = random.Random(1000 + seed)
    event_time = seed % 2 == 1
    incoming = tmp_path / "in"
    doomed = rng.randrange(5)
    if event_time:
        batches = event_batches(rng, 5, doomed)
    else:
        drop_texts(incoming, rng, range(5))
        kill_file = incoming / f"t{doomed:03d}.txt"
        kill_file.write_text(kill_file.read_text(encoding="utf-8") + "KILL here\n", encoding="utf-8")
    marker = tmp_path / "kill-marker"
    marker.write_text("armed", encoding="utf-8")
    out = tmp_path / "out"
    processes, workers = rng.choice([(2, 1), (2, 2), (3, 1), (1, 2)])
    hosting: dict[str, Any] = {"available_now": True, "processes": processes, "workers": workers}
    if event_time:
        for k, rows in enumerate(batches):
            drop_file(incoming, f"b{k}.csv", rows, k)
        done = run_stream(KillOnce(marker, "KILL", event_time=True), source(spark, incoming), SCHEMA_DDL,
                          sink=CsvDirectorySink(out, order_by=["epoch", "word"]), checkpoint=tmp_path / "ck",
                          query="killed", epoch="epoch", watermark=Watermark(delay=2), **hosting)  # fmt: skip
    else:
        wordcount = load("stream_wordcount")
        source_ = spark.readStream.option("maxFilesPerTrigger", 1).text(str(incoming))
        done = run_stream(KillOnce(marker, "KILL"), source_, wordcount.SCHEMA,
                          sink=CsvDirectorySink(out, order_by=["word"]), checkpoint=tmp_path / "ck", query="killed",
                          **hosting)  # fmt: skip
    assert not marker.exists(), "no hosted process reached the line that kills it"
    assert done.processed == [0, 1, 2, 3, 4] and done.restarts == 1, (doomed, processes, workers, event_time)
    driver_out = tmp_path / "driver"
    if event_time:
        run_stream(eventtime_counts, source(spark, incoming), SCHEMA_DDL,
                   sink=CsvDirectorySink(driver_out, order_by=["epoch", "word"]), checkpoint=tmp_path / "driver-ck",
                   query="driver", epoch="epoch", watermark=Watermark(delay=2), available_now=True)  # fmt: skip
        files = [read_rows(path) for path in sorted(out.glob("batch-*.csv"))]
        assert files == [read_rows(path) for path in sorted(driver_out.glob("batch-*.csv"))]
        late, outputs = reference(batches, 2)
        assert files == [[[str(e), w, str(c)] for e, w, c in batch] for batch in outputs]
        assert sum(map(len, late)) > 0 and any(row[1] == "KILL" for batch in files for row in batch)
    else:
        count_words(spark, incoming, driver_out, tmp_path / "driver-ck")
        assert changelog(out) == changelog(driver_out)


def event_batches(rng: random.Random, count: int, doomed: int) -> list[Rows]:
    """``count`` micro-batches of ``(word, epoch)`` rows for a watermark of delay 2. Batch ``k`` holds epochs
    ``3k-2 .. 3k+4``, always ``3k+4`` (it moves the frontier to ``3k+2``, closing epochs ``3k-1 .. 3k+1`` and
    holding the later ones open) and, after the first, a late row (epoch ``3k-2``, before ``3k-1``). The doomed
    batch holds ``KILL`` at epoch ``3k``: on time, and in an epoch that batch closes, so its hosted process reaches
    it in that micro-batch."""
    batches = []
    for k in range(count):
        rows = [(rng.choice("abcde"), rng.randint(max(0, 3 * k - 2), 3 * k + 4)) for _ in range(rng.randint(3, 9))]
        rows.append((rng.choice("abcde"), 3 * k + 4))
        if k > 0:
            rows.insert(rng.randrange(len(rows)), (rng.choice("abcde"), 3 * k - 2))
        if k == doomed:
            rows.insert(rng.randrange(len(rows)), ("KILL", 3 * k))
        batches.append(rows)
    return batches


WORDCOUNT = ROOT / "examples" / "stream_wordcount.py"

# The test's own driver: the word-count example, killed (SIGKILL) just before or just after the driver writes a
# seeded epoch's manifest. The seam is EpochOutput's write of that one file, patched in this process only.
SEAM_DRIVER = """
import os, runpy, signal, sys
from pytimely.spark.epoch_output import EpochOutput

seam, manifest = sys.argv[1], sys.argv[2]
put = EpochOutput._put

def _put(self, relative, data, *, durable):
    if relative == manifest and seam == "parts":
        os.kill(os.getpid(), signal.SIGKILL)
    put(self, relative, data, durable=durable)
    if relative == manifest and seam == "manifest":
        os.kill(os.getpid(), signal.SIGKILL)

EpochOutput._put = _put
sys.argv = sys.argv[3:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def wordcount_args(incoming: Path, out: Path, ck: Path) -> list[str]:
    """The word-count example on two hosted processes under ``local[3]``, one file per micro-batch, until done."""
    return ["--spark", "local[3]", "--text-dir", str(incoming), "--output", str(out), "--checkpoint", str(ck),
            "--available-now", "--files-per-batch", "1"]  # fmt: skip


def driver_env() -> dict[str, str]:
    """The environment of a driver of its own: this tree of pytimely, its JVM started as the suite's others are."""
    return quick_jvm({**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYSPARK_PYTHON": sys.executable})


def kill_group(job: subprocess.Popen[Any]) -> None:
    """SIGKILL what is left of the job's process group (its JVM and hosted processes outlive a killed driver)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(job.pid, signal.SIGKILL)
    job.wait(60)


def spark_batches(ck: Path) -> list[list[Path]]:
    """The files each micro-batch read, from Spark's offset log and its file source's log under the checkpoint.

    A rerun's first micro-batch may read more than one file: Spark's file source lists files the killed run had
    already logged as one batch, whatever ``maxFilesPerTrigger`` says; the expected changelog follows Spark's batches.
    """
    spark = ck / "spark"
    logged: dict[int, list[Path]] = {}
    for entry in (e for e in (spark / "sources" / "0").iterdir() if e.name.isdigit()):
        lines = entry.read_text(encoding="utf-8").splitlines()[1:]
        logged[int(entry.name)] = [Path(json.loads(line)["path"].removeprefix("file://")) for line in lines]
    batches, start = [], 0
    for entry in sorted((e for e in (spark / "offsets").iterdir() if e.name.isdigit()), key=lambda e: int(e.name)):
        end = json.loads(entry.read_text(encoding="utf-8").splitlines()[-1])["logOffset"] + 1
        batches.append([path for n in range(start, end) for path in logged[n]])
        start = end
    return batches


def rerun_and_check(args: list[str], incoming: Path, out: Path, ck: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Run the job again to the end: every micro-batch committed once, each with the running counts of the words
    of the files Spark gave it, every file in one micro-batch, and no part in OUT that no manifest names.

    The rerun is the example's ``main()`` with the same arguments, on the suite's session: what it must do is read
    the checkpoint and the output the killed driver left, which are files; the killed run was the command line in a
    driver of its own (a driver must die), and a second such driver would only start another JVM.
    """
    capsys.readouterr()
    status = load("stream_wordcount").main(args)
    err = capsys.readouterr().err
    assert status == 0, err[-3000:]
    batches = spark_batches(ck)
    assert sorted(p for batch in batches for p in batch) == sorted(incoming.glob("t*.txt")), batches
    output = EpochOutput(out, SCHEMA, format="csv")
    assert output.committed() == list(range(len(batches))), err[-3000:]
    assert_batch_counts(output, batches)
    named = {part.path for epoch in output.committed() for part in output.parts(epoch)}
    assert {p.name for p in out.glob("part-*")} == named


def test_a_killed_driver_is_resumed_by_the_rerun(
    spark: Any, tmp_path: Path, seed: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGKILL the word-count example's whole process group (driver, JVM, hosted processes) at a seeded moment after
    a seeded number of committed micro-batches (of 5); the rerun continues, and the output holds every running count
    once. ~70 s a trial."""
    rng = random.Random(11 + seed)
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    drop_texts(incoming, rng, range(5))
    args = wordcount_args(incoming, out, ck)
    command = [sys.executable, str(WORDCOUNT), *args]
    log = (tmp_path / "job.log").open("w")
    job = subprocess.Popen(command, env=driver_env(), stdout=log, stderr=log, start_new_session=True)
    target = rng.randint(1, 3)
    commits = out / "_pytimely" / "commits"
    deadline = time.monotonic() + 300
    try:
        while len(list(commits.glob("epoch-*.json")) if commits.exists() else []) < target:
            assert job.poll() is None, (tmp_path / "job.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the job committed nothing within 300 s"
            time.sleep(0.05)
        time.sleep(rng.random() * 1.5)  # inside a later micro-batch, or between two
    finally:
        kill_group(job)
        log.close()
    rerun_and_check(args, incoming, out, ck, capsys)


def test_a_driver_killed_at_the_output_commit_is_resumed_by_the_rerun(
    spark: Any, tmp_path: Path, seed: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """The driver dies (SIGKILL) at a seeded micro-batch (of 4), by turns after its parts are written but before its
    manifest, and after the manifest but before Spark's log and pytimely's commit record; the rerun discards the
    unlisted parts (or takes the manifest as the commit) and the output holds every running count once. ~60 s a
    trial."""
    rng = random.Random(500 + seed)
    seam = ("parts", "manifest")[seed % 2]
    incoming, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    drop_texts(incoming, rng, range(4))
    doomed = rng.randrange(4)
    manifest = f"_pytimely/commits/epoch-{doomed:012d}.json"
    args = wordcount_args(incoming, out, ck)
    command = [sys.executable, str(WORDCOUNT), *args]
    # A log file, not a pipe: the driver's JVM keeps its end open after the driver is killed.
    with (tmp_path / "job.log").open("w") as log:
        job = subprocess.Popen([sys.executable, "-c", SEAM_DRIVER, seam, manifest, *command[1:]], env=driver_env(),
                               stdout=log, stderr=log, start_new_session=True)  # fmt: skip
        try:
            job.wait(300)
        finally:
            kill_group(job)
    assert job.returncode == -signal.SIGKILL, (tmp_path / "job.log").read_text()[-3000:]
    committed = EpochOutput(out, SCHEMA, format="csv").committed()
    assert committed == list(range(doomed + (seam == "manifest"))), (seam, doomed)
    if seam == "parts":
        assert list(out.glob(f"part-{doomed:012d}-*")), "the killed run wrote no part of the doomed micro-batch"
    rerun_and_check(args, incoming, out, ck, capsys)
