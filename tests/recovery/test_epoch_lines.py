"""A replayable file source: any epoch's lines read from its recorded byte offset, equal to a full read's."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytimely.errors import InputFormatError, InvalidArgument
from pytimely.io import EpochLines


def test_each_epoch_read_on_its_own_equals_the_slice_of_a_full_read(tmp_path: Path) -> None:
    lines = [f"line {i} é" for i in range(23)]
    path = tmp_path / "t.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    source = EpochLines(path, 5)
    assert (source.lines, source.epochs) == (23, 5)
    for epoch in reversed(range(source.epochs)):  # backwards: nothing depends on what was read before
        assert source.read(epoch) == lines[epoch * 5 : (epoch + 1) * 5]
        assert source.read(epoch, part=1, parts=2) == lines[epoch * 5 : (epoch + 1) * 5][1::2]
        with open(path, "rb") as handle:
            handle.seek(source.offset(epoch))
            assert handle.readline().decode().rstrip("\n") == lines[epoch * 5]
    assert source.read(source.epochs) == []


def test_bad_bytes_name_the_line_and_bad_epochs_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(b"a\nb\nc\n\xff\n")
    source = EpochLines(path, 2)
    assert source.read(0) == ["a", "b"]
    with pytest.raises(InputFormatError, match="line 4"):
        source.read(1)
    with pytest.raises(InvalidArgument):
        source.read(3)
    with pytest.raises(InvalidArgument):
        EpochLines(path, 0)


def test_as_a_source_it_resumes_without_reading_committed_epochs_and_records_its_position(tmp_path: Path) -> None:
    import json
    import time

    from pytimely import execute
    from pytimely.errors import RecoveryMismatchError
    from pytimely.recovery import Recovery, SnapshotPolicy
    from tests.recovery.jobs import Crash, durable_sink

    path = tmp_path / "t.txt"
    path.write_text("".join(f"line {i}\n" for i in range(40)))
    read: list[int] = []

    class Spy(EpochLines):
        def read(self, epoch: int, *, part: int = 0, parts: int = 1) -> list[str]:
            read.append(epoch)
            return super().read(epoch, part=part, parts=parts)

    def job(crash: bool) -> object:
        def run(worker: object) -> object:
            log: list[object] = []

            def build(scope: object) -> object:
                lines = Spy(path, 4).source(scope)

                def slow(t: int, batch: object) -> None:
                    time.sleep(0.01)
                    if crash and t == 7:
                        raise Crash("dies at epoch 7")

                durable_sink(scope, lines.inspect_batch(slow).exchange(lambda _: 0), log)
                return lines.probe()

            probe = worker.dataflow(build)  # type: ignore[attr-defined]
            worker.step_while(lambda: not probe.done())  # type: ignore[attr-defined]
            return log

        return run

    store = tmp_path / "s"
    with pytest.raises(Exception, match="dies at epoch 7"):
        execute(job(True), 2, recovery=Recovery(store, policy=SnapshotPolicy(keep=100)))
    newest = max((p for p in (store / "manifests").iterdir()), key=lambda p: int(p.name))
    positions = json.loads(newest.read_bytes())["body"]["positions"]
    committed = int(newest.name)
    where = {"epoch": committed + 1, "offset": EpochLines(path, 4).offset(committed + 1), "path": str(path)}
    assert positions == {"0/lines#0/position": {"0": where}}
    # A control plane reads the same without running anything: the epoch a run starts at, and the positions.
    standing = Recovery(store).committed()
    assert standing.resume_epoch == committed + 1
    assert standing.positions == {"0/lines#0/position": {0: where}}
    assert Recovery(tmp_path / "empty").committed().resume_epoch == 0
    with pytest.raises(RecoveryMismatchError, match="job"):
        Recovery(store, job="another").committed()
    read.clear()
    results = execute(job(False), 3, recovery=Recovery(store, policy=SnapshotPolicy(keep=100)))
    assert min(read) == committed + 1
    rows = sorted(line for _, line in results[0])  # type: ignore[index]
    assert rows == sorted(f"line {i}" for i in range(40))
