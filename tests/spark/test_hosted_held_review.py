"""Held rows and signed checkpoint files under crashes, a changed process count and a hostile checkpoint folder.

No Spark here: the files are what the hosted processes, the feed tasks and the driver write and a later run reads
back, and each test plays one of the runs that would write or read them.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")

import pyarrow as pa

from pytimely.errors import CheckpointFileError, CheckpointLocationError, StreamFencedError
from pytimely.spark import signed_files
from pytimely.spark.signed_files import read_signed_arrow, write_signed_arrow
from pytimely.spark.stream_checkpoint import StreamCheckpoint
from pytimely.spark.stream_held import clear_held, load_held, write_held
from pytimely.spark.watermark import late_folder


def rows(*pairs: tuple[str, int]) -> pa.Table:
    return pa.table({"word": [w for w, _ in pairs], "epoch": pa.array([e for _, e in pairs], pa.int64())})


def listed(table: pa.Table | None) -> list[tuple[str, int]]:
    if table is None:
        return []
    return sorted(zip(table.column("word").to_pylist(), table.column("epoch").to_pylist(), strict=True))


def run_batches(own: Path, key: bytes, processes: int) -> None:
    """Three committed micro-batches on ``processes`` processes (frontiers 2, 4, 6), each adding held rows."""
    added = {
        0: [rows(("a", 1), ("b", 2), ("c", 5)), rows(("d", 2), ("e", 9))],
        1: [rows(("f", 4), ("g", 7)), rows(("h", 4), ("i", 6))],
        2: [rows(("j", 6), ("k", 8)), rows(("l", 11))],
    }
    frontiers = {0: 2, 1: 4, 2: 6}
    for batch, tables in added.items():
        for process in range(processes):
            mine = tables[process::processes]
            if mine:
                write_held(own, key, batch, process, pa.concat_tables(mine), "epoch", frontiers[batch])
        clear_held(own, batch, frontiers[batch])


@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 3), (2, 3), (3, 2)])
def test_every_held_row_is_taken_up_once_when_the_process_count_changes(
    tmp_path: Path, before: int, after: int
) -> None:
    """Run ``before`` processes, restart on ``after``: the rows at or past the committed frontier (6) come back,
    each exactly once across the new processes (a file is read by one of them), rows below it do not."""
    own = tmp_path / "ck" / "pytimely"
    key = StreamCheckpoint(tmp_path / "ck").key()
    run_batches(own, key, before)
    shares = [load_held(own, key, 2, 6, p, after, "epoch") for p in range(after)]
    together = sorted(r for share in shares for r in listed(share))
    assert together == sorted([("e", 9), ("g", 7), ("i", 6), ("j", 6), ("k", 8), ("l", 11)])
    # c@5 lies below the frontier: it entered epoch 5 and is in the snapshot, not held.
    assert ("c", 5) not in together


def test_a_row_at_the_frontier_is_held_and_one_below_it_has_entered(tmp_path: Path) -> None:
    """The frontier F is the first epoch not complete: a row at F waits (written, kept, taken up), a row at F-1
    entered (not written; its file goes once the frontier passes its largest epoch)."""
    own = tmp_path / "ck" / "pytimely"
    key = StreamCheckpoint(tmp_path / "ck").key()
    write_held(own, key, 0, 0, rows(("below", 3), ("at", 4)), "epoch", 4)
    names = sorted(p.name for p in (own / "held").iterdir())
    assert names == ["batch-000000000000-p00000-until4.arrow"]
    assert listed(read_signed_arrow(own / "held" / names[0], key)) == [("at", 4)]
    clear_held(own, 0, 4)
    assert listed(load_held(own, key, 0, 4, 0, 1, "epoch")) == [("at", 4)]
    clear_held(own, 1, 5)  # the next micro-batch moved the frontier past 4: the row entered epoch 4
    assert not list((own / "held").iterdir())
    assert load_held(own, key, 1, 5, 0, 1, "epoch") is None


def test_a_retried_micro_batch_replaces_its_held_file_whole(tmp_path: Path) -> None:
    """A micro-batch sent again (its first attempt crashed after writing) writes a file of the same name: the new
    rows replace the old ones whole, and no temporary file is left beside it."""
    own = tmp_path / "ck" / "pytimely"
    key = StreamCheckpoint(tmp_path / "ck").key()
    write_held(own, key, 0, 0, rows(("first", 7), ("attempt", 7)), "epoch", 2)
    write_held(own, key, 0, 0, rows(("second", 7)), "epoch", 2)
    assert [p.name for p in (own / "held").iterdir()] == ["batch-000000000000-p00000-until7.arrow"]
    assert listed(load_held(own, key, 0, 2, 0, 1, "epoch")) == [("second", 7)]


def test_a_lost_key_is_refused_while_signed_files_need_it(tmp_path: Path) -> None:
    """A key file removed (or lost) while held rows or staged inputs signed with it are kept: no new key is made
    silently (it would refuse every one of them as planted); the error names the key file and a file that needs
    it. A checkpoint with nothing signed makes its key as before."""
    checkpoint = StreamCheckpoint(tmp_path / "ck")
    key = checkpoint.key()
    write_held(checkpoint.own, key, 0, 1, rows(("x", 9)), "epoch", 3)
    (checkpoint.own / "key").unlink()
    with pytest.raises(CheckpointFileError, match=r"pytimely/key is missing.*batch-000000000000-p00001-until9"):
        StreamCheckpoint(tmp_path / "ck").key()
    assert not (checkpoint.own / "key").exists()  # nothing made
    shutil.rmtree(checkpoint.own / "held")
    staged = StreamCheckpoint(tmp_path / "ck2")
    staged.stage(0, rows(("y", 1)))
    (staged.own / "key").unlink()
    with pytest.raises(CheckpointFileError, match=r"key is missing.*batch-000000000000\.arrow"):
        StreamCheckpoint(tmp_path / "ck2").staged(0)
    assert len(StreamCheckpoint(tmp_path / "ck").key()) == 32  # nothing signed left: a new key
    # An unsigned input of an earlier pytimely is no reason to refuse a key: reading it is refused, naming why.
    earlier = StreamCheckpoint(tmp_path / "ck3")
    earlier.inputs.mkdir(parents=True)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, rows(("z", 1)).schema) as writer:
        writer.write_table(rows(("z", 1)))
    earlier.input_path(0).write_bytes(sink.getvalue().to_pybytes())
    with pytest.raises(CheckpointFileError, match="written by an earlier pytimely"):
        earlier.staged(0)


def test_a_key_readable_by_others_is_not_answered_with_remove_it(tmp_path: Path) -> None:
    """A key file others can read is refused, and the advice is not to remove it (that would orphan every signed
    file) but to tighten its mode, or start on a new checkpoint."""
    checkpoint = StreamCheckpoint(tmp_path / "ck")
    checkpoint.key()
    os.chmod(checkpoint.own / "key", 0o640)
    with pytest.raises(CheckpointFileError, match="readable by it only") as refused:
        StreamCheckpoint(tmp_path / "ck").key()
    assert "remove it" not in str(refused.value) and "chmod 600" in str(refused.value)


def test_drivers_racing_to_make_the_key_all_get_the_one_that_won(tmp_path: Path) -> None:
    """Several runs make the key of one checkpoint at once: one link wins and every run reads that key."""
    for trial in range(5):
        where = tmp_path / f"ck{trial}"
        start = threading.Barrier(4)
        keys: list[bytes] = []

        def make(where: Path = where, start: threading.Barrier = start, keys: list[bytes] = keys) -> None:
            checkpoint = StreamCheckpoint(where)
            start.wait(10.0)
            keys.append(checkpoint.key())

        threads = [threading.Thread(target=make) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30.0)
        assert len(keys) == 4 and len(set(keys)) == 1
        assert sorted(p.name for p in (where / "pytimely").iterdir()) == ["key"]  # nothing left aside


def test_an_object_store_checkpoint_is_refused_before_a_key_is_made(tmp_path: Path) -> None:
    """An ``s3://`` checkpoint (no mode bits, no links, no locks) is refused when named, so no key is ever kept
    where others could read it."""
    with pytest.raises(CheckpointLocationError, match="s3://"):
        StreamCheckpoint("s3://bucket/ck")


def test_a_signed_file_copied_into_another_micro_batchs_folder_is_refused(tmp_path: Path) -> None:
    """Late rows are ``late/batch-<b>/s<sender>.arrow`` and parts ``parts/epoch-<e>/part-<p>.arrow``: the same
    name in every micro-batch's folder. The signature binds the folder too, so a genuine file of micro-batch 3
    copied into micro-batch 5's folder is refused, not committed to 5's side output."""
    own = tmp_path / "ck" / "pytimely"
    key = StreamCheckpoint(tmp_path / "ck").key()
    three = late_folder(own, 3) / "s00000.arrow"
    write_signed_arrow(three, rows(("late", 1)), key)
    five = late_folder(own, 5) / "s00000.arrow"
    five.parent.mkdir(parents=True)
    shutil.copyfile(three, five)
    assert listed(read_signed_arrow(three, key)) == [("late", 1)]
    with pytest.raises(CheckpointFileError, match=r"batch-000000000005/s00000\.arrow is not signed"):
        read_signed_arrow(five, key)


def test_a_fifo_or_a_device_planted_as_a_signed_file_is_refused_at_once(tmp_path: Path) -> None:
    """A named pipe planted under a held file's name would block the read for ever, a link to a device would
    read without end: only regular files are read, within a deadline of no waiting at all."""
    own = tmp_path / "ck" / "pytimely"
    key = StreamCheckpoint(tmp_path / "ck").key()
    (own / "held").mkdir()
    fifo = own / "held" / "batch-000000000000-p00000-until9.arrow"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def load() -> None:
        try:
            load_held(own, key, 0, 0, 0, 1, "epoch")
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=load, daemon=True)
    reader.start()
    reader.join(20.0)
    if reader.is_alive():  # blocked in open(): let it go before failing
        with open(fifo, "wb"):
            pass
        reader.join(10.0)
        pytest.fail("reading a planted named pipe blocked")
    assert isinstance(outcome[0], CheckpointFileError) and "not a regular file" in str(outcome[0])
    assert "until9" in str(outcome[0])
    device = own / "held" / "batch-000000000001-p00000-until9.arrow"
    device.symlink_to("/dev/null")
    with pytest.raises(CheckpointFileError, match=r"until9\.arrow is not a regular file"):
        read_signed_arrow(device, key)


def test_a_signed_file_larger_than_the_bound_is_neither_written_nor_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads are bounded (a planted huge file is refused by its size, unread), and a writer refuses a file above
    the same bound, so nothing is written that a restart would refuse."""
    own = tmp_path / "ck" / "pytimely"
    key = StreamCheckpoint(tmp_path / "ck").key()
    path = own / "held" / "batch-000000000000-p00000-until9.arrow"
    write_signed_arrow(path, rows(("small", 9)), key)
    size = path.stat().st_size
    monkeypatch.setattr(signed_files, "SIGNED_FILE_LIMIT", size - 1)
    with pytest.raises(CheckpointFileError, match=rf"until9\.arrow is {size} bytes, more than"):
        read_signed_arrow(path, key)
    big = own / "held" / "batch-000000000001-p00000-until9.arrow"
    with pytest.raises(CheckpointFileError, match=r"batch-000000000001-p00000-until9\.arrow would be"):
        write_signed_arrow(big, rows(("small", 9)), key)
    assert not big.exists() and sorted(p.name for p in big.parent.iterdir()) == [path.name]


def test_an_uncommitted_micro_batch_completing_several_epochs_keeps_the_committed_snapshot(tmp_path: Path) -> None:
    """Micro-batch 0 completes epoch 0 (frontier 1) and is committed; micro-batch 1 completes epochs 1..4 (frontier
    5), each snapshotted by the hosted processes' own recovery policy, and dies before its commit. The restart
    resumes from the snapshot before the committed frontier (epoch 0): it must still be there."""
    from pytimely import Worker, execute
    from pytimely.spark.stream_host import HostPlan
    from tests.recovery.jobs import Crash, running_sums

    checkpoint = StreamCheckpoint(tmp_path / "ck")
    identity = {"query": "q", "input": "struct<k:bigint>", "output": "struct<k:bigint,total:bigint>"}
    plan = HostPlan(
        build=running_sums, processes=1, workers=1, generation=1, secret=b"s" * 32, own=str(checkpoint.own),
        schema=pa.schema([]), job=identity["query"], local=True, resume_at=-1,
        parameters={"input": identity["input"], "output": identity["output"]},
    )  # fmt: skip
    checkpoint.own.mkdir(parents=True)
    manifests = checkpoint.state / "manifests"

    def durable(worker: Worker, epoch: int) -> None:
        deadline = time.monotonic() + 60.0
        while not (manifests / f"{epoch:020d}").exists():
            assert time.monotonic() < deadline, f"epoch {epoch}'s snapshot never became durable"
            worker.step()
            time.sleep(0.005)

    def build(scope: Any) -> Any:
        handle, stream = scope.new_input(name="records")
        running_sums(scope, stream)
        return handle

    def job(worker: Worker) -> None:
        handle = worker.dataflow(build)
        handle.send_batch([(1, 1)])
        handle.advance_to(1)
        durable(worker, 0)
        checkpoint.commit(0, frontier=1)
        for epoch in range(1, 5):  # the held rows of several event-time epochs enter in one micro-batch
            handle.advance_to(epoch)
            handle.send_batch([(epoch, epoch)])
            handle.advance_to(epoch + 1)
            durable(worker, epoch)
        raise Crash("killed before micro-batch 1's commit record")

    with pytest.raises(Crash):
        execute(job, 1, recovery=plan.recovery())
    assert checkpoint.resume_bound() == 0
    checkpoint.check_state(identity)  # a snapshot at or before epoch 0 is still there
    # Beside it the newest three: retention still removes the others.
    assert sorted(int(p.name) for p in manifests.iterdir()) == [0, 2, 3, 4]


@pytest.mark.parametrize("remembered", [True, False])
def test_retention_keeps_the_protected_snapshot_besides_the_newest(tmp_path: Path, remembered: bool) -> None:
    """The recovery store keeps its newest ``keep`` snapshots and the newest at or before the protected epoch (the
    committed one), with the files it reads, whether the committer removes what it remembers committing or lists
    the store; the others go."""
    from pytimely.recovery import LocalStore, Manifest, Seal, Snapshots
    from pytimely.recovery.manifest import epoch_of
    from pytimely.recovery.snapshots import Retained

    snapshots = Snapshots(LocalStore(tmp_path / "state"), Seal(None))
    retained = Retained() if remembered else None

    def snapshot(epoch: int, committed: int) -> list[int | None]:
        file = snapshots.put_payload(snapshots.payload_name(epoch, 0, 0), f"state {epoch}".encode())
        snapshots.commit(Manifest(epoch, "id", 1, [file]), 2, retained, lambda: committed)
        return [epoch_of(n) for n in snapshots.store.list("manifests")]

    for epoch in range(5):  # epoch 1 committed; the next commit is late
        snapshot(epoch, 1)
    assert snapshot(5, 1) == [1, 4, 5]
    opened = snapshots.latest("id", at_most=3)
    assert opened is not None and opened.manifest.epoch == 1  # whole: every file it reads is there
    assert snapshot(6, 4) == [4, 5, 6]  # the commit moved on: epoch 1's snapshot is needed no more
    assert snapshots.latest("id", at_most=3) is None


def test_a_held_file_that_cannot_be_written_is_a_typed_error_naming_it(tmp_path: Path) -> None:
    """A held file that cannot be written (here its folder's name is taken by a file; a full disk alike) is a
    :class:`CheckpointFileError` naming it, which a hosted process answers ``CLOSE`` with, not a bare ``OSError``
    that ends its connection; nothing is left half-written."""
    own = tmp_path / "ck" / "pytimely"
    key = StreamCheckpoint(tmp_path / "ck").key()
    (own / "held").write_bytes(b"")
    with pytest.raises(CheckpointFileError, match=r"held/batch-000000000000-p00000-until9\.arrow cannot be written"):
        write_held(own, key, 0, 0, rows(("x", 9)), "epoch", 3)
    assert (own / "held").read_bytes() == b""


def test_a_cancelled_generations_late_held_write_is_not_taken_up_with_the_committed_attempts(tmp_path: Path) -> None:
    """Micro-batch 1's first attempt (generation 2) fails; its process 0, not yet killed, writes its held file after
    the retry (generation 3) began and cleared the attempt's files. The retry commits. A restart takes micro-batch
    1's held rows from generation 3's files only (not twice), and the orphan's file is removed."""
    own = tmp_path / "ck" / "pytimely"
    key = StreamCheckpoint(tmp_path / "ck").key()
    write_held(own, key, 0, 0, rows(("a", 8)), "epoch", 2, generation=2)  # micro-batch 0, committed
    clear_held(own, 0, 2)
    write_held(own, key, 1, 0, rows(("b", 7), ("c", 9)), "epoch", 3, generation=3)  # the retry's processes
    write_held(own, key, 1, 1, rows(("d", 6)), "epoch", 3, generation=3)
    write_held(own, key, 1, 0, rows(("b", 7), ("d", 6)), "epoch", 3, generation=2)  # the orphan, after the clear
    together = sorted(r for p in range(2) for r in listed(load_held(own, key, 1, 3, p, 2, "epoch")))
    assert together == [("a", 8), ("b", 7), ("c", 9), ("d", 6)]
    clear_held(own, 1, 3)
    assert sorted(p.name for p in (own / "held").iterdir()) == [
        "batch-000000000000-g2-p00000-until8.arrow",
        "batch-000000000001-g3-p00000-until9.arrow",
        "batch-000000000001-g3-p00001-until6.arrow",
    ]
    # Files named without a generation (written before they were named): taken up as before.
    other = tmp_path / "ck2" / "pytimely"
    write_held(other, key, 0, 0, rows(("e", 5)), "epoch", 2)
    write_held(other, key, 0, 1, rows(("f", 6)), "epoch", 2)
    assert listed(load_held(other, key, 0, 2, 0, 1, "epoch")) == [("e", 5), ("f", 6)]


def test_a_held_name_that_cannot_be_removed_is_a_typed_error_naming_it(tmp_path: Path) -> None:
    """A folder planted under a held file's name (past the frontier, so clearing removes it) stops the clearing with
    :class:`CheckpointFileError` naming it, not a bare ``IsADirectoryError``; reading it is refused the same way."""
    own = tmp_path / "ck" / "pytimely"
    key = StreamCheckpoint(tmp_path / "ck").key()
    planted = own / "held" / "batch-000000000000-p00000-until1.arrow"
    planted.mkdir(parents=True)
    with pytest.raises(CheckpointFileError, match=r"until1\.arrow is not a regular file"):
        load_held(own, key, 0, 0, 0, 1, "epoch")
    with pytest.raises(CheckpointFileError, match=r"until1\.arrow cannot be removed"):
        clear_held(own, 0, 5)


def test_a_run_taken_over_removes_no_held_file(tmp_path: Path) -> None:
    """A run that lost the checkpoint to another (its query orphaned on a Spark Connect server, still triggered)
    knows an older last commit: clearing with its ownership token is refused, so it cannot remove the held rows of
    micro-batches the new owner committed since; the new owner clears as before."""
    checkpoint = StreamCheckpoint(tmp_path / "ck")
    key = checkpoint.key()
    orphan = checkpoint.take_ownership()
    owner = StreamCheckpoint(tmp_path / "ck").take_ownership()
    write_held(checkpoint.own, key, 3, 0, rows(("x", 9)), "epoch", 5)  # micro-batch 3, committed by the new owner
    checkpoint.commit(3, frontier=5)
    with pytest.raises(StreamFencedError, match="taken over by another run"):
        clear_held(checkpoint.own, 1, 2, owner=orphan)  # the orphan's view: micro-batch 1 committed
    assert [p.name for p in (checkpoint.own / "held").iterdir()] == ["batch-000000000003-p00000-until9.arrow"]
    clear_held(checkpoint.own, 3, 5, owner=owner)
    assert listed(load_held(checkpoint.own, key, 3, 5, 0, 1, "epoch")) == [("x", 9)]


def test_a_key_that_cannot_be_made_is_a_typed_error_naming_it(tmp_path: Path) -> None:
    """The key's folder cannot be made (its name is taken by a file; a share without hard links fails alike at the
    link): :class:`CheckpointFileError` naming the key, not a bare ``OSError``."""
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "pytimely").write_bytes(b"")
    with pytest.raises(CheckpointFileError, match=r"pytimely/key: the checkpoint's key cannot be made"):
        StreamCheckpoint(tmp_path / "ck").key()


def test_a_held_write_cut_short_by_a_kill_leaves_nothing_for_long(tmp_path: Path) -> None:
    """A process killed while writing its held file leaves the temporary file (never the held file's name); its
    name is its own each micro-batch, so no later write of it tidies it: the next clearing removes the temporary
    files of writers that no longer run, and keeps a running writer's."""
    import socket
    import subprocess
    import sys

    from pytimely.atomic import temporary_name

    own = tmp_path / "ck" / "pytimely"
    key = StreamCheckpoint(tmp_path / "ck").key()
    write_held(own, key, 0, 0, rows(("a", 9)), "epoch", 2)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()  # fmt: skip
    target = own / "held" / "batch-000000000001-p00001-until9.arrow"
    host = "".join(c if c.isalnum() or c in "_-" else "_" for c in socket.gethostname()) or "host"
    cut = target.with_name(f".{target.name}.{host}.{dead}.{'0' * 16}.tmp")
    cut.write_bytes(b"PYTIMELY-SIGNED-ARROW-2\n half")
    running = temporary_name(target)  # this process's: still writing
    running.write_bytes(b"")
    clear_held(own, 0, 2)
    assert sorted(p.name for p in (own / "held").iterdir()) == sorted(
        [running.name, "batch-000000000000-p00000-until9.arrow"]
    )


def test_a_hosted_checkpoint_file_error_reaches_the_control_side_typed_whatever_way_it_came(tmp_path: Path) -> None:
    """A held file refused in a hosted process reaches the control side as the process's ``FAILED`` answer (its
    type's name and message), as a worker's result (``process P, epoch E: Kind: message``) or as the hosting
    task's traceback inside Spark's error: each is the :class:`CheckpointFileError` naming the file again (no
    restart reads it differently); any other failure is not one (a new generation may get past it)."""
    import traceback

    from pytimely.errors import CheckpointMismatchError, StreamFeedError
    from pytimely.spark.stream_hosted import _feed_failure, checkpoint_failure
    from pytimely.spark.stream_query import _typed

    own = tmp_path / "ck" / "pytimely"
    key = StreamCheckpoint(tmp_path / "ck").key()
    write_held(own, key, 0, 0, rows(("x", 9)), "epoch", 3, generation=1)
    (path,) = (own / "held").iterdir()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointFileError) as refused:
        load_held(own, key, 0, 3, 0, 1, "epoch")
    message = str(refused.value)
    assert path.name in message
    task = "".join(traceback.format_exception(refused.value))
    spark_text = (
        "org.apache.spark.api.python.PythonException: An exception was thrown from the Python worker.\n"
        f"{task}\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(...)\n"
    )
    reported = [
        (message, "CheckpointFileError"),
        (f"process 1, epoch 4: CheckpointFileError: {message}", "StreamHostError"),
        (spark_text, None),
        (spark_text.replace("pytimely.errors.CheckpointFileError", "pytimely.errors.spark.CheckpointFileError"), None),
    ]
    for text, kind in reported:
        found = checkpoint_failure(text, kind)
        assert isinstance(found, CheckpointFileError), text
        assert path.name in str(found) and "Traceback" not in str(found) and " at org." not in str(found)
    assert str(checkpoint_failure(*reported[1])).startswith("process 1, epoch 4: ")
    assert isinstance(_typed(reported[3][0]), CheckpointFileError)
    # A feed task refusing a file (late rows' signing key) fails the feed job: the same error, not a feed failure.
    assert isinstance(_feed_failure(RuntimeError(spark_text), 3), CheckpointFileError)
    assert type(_feed_failure(RuntimeError("Task 0 in stage 3.0 failed 1 times"), 3)) is StreamFeedError
    mismatch = checkpoint_failure("process 0, epoch 2: CheckpointMismatchError: CK/pytimely/held/x is odd")
    assert isinstance(mismatch, CheckpointMismatchError)
    assert str(mismatch) == "process 0, epoch 2: CK/pytimely/held/x is odd"
    for other, kind in [
        ("process 0, epoch 2: a frame arrived twice", "StreamFeedError"),
        ("process 0 did not complete epoch 3 within 600 s", "StreamHostError"),
        ("pytimely.errors.StreamHostError: process 0, epoch 2: RuntimeError: boom", None),
        ("Job 12 cancelled part of cancelled job group pytimely-hosted-ab12-g3", None),
    ]:
        assert checkpoint_failure(other, kind) is None, other
