"""Capture to files and sockets and replay: same records, same batch kinds, the captured progress; typed errors
on truncated, corrupted and unauthenticated streams."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytimely import Scope, Worker, execute
from pytimely.dataflow.operators.capture import replay_events
from pytimely.dataflow.operators.event_stream import (
    FileEventReader,
    FileEventWriter,
    SocketEventWriter,
    accept_event_streams,
)
from pytimely.errors import (
    CorruptEventStreamError,
    EventStreamAuthError,
    EventStreamError,
    EventStreamTimeoutError,
    TruncatedEventStreamError,
)
from tests.dataflow.capture_jobs import EPOCHS, epoch_batches

ROOT = Path(__file__).resolve().parents[2]


def _observe(stream: Any, frontiers: list[list[Any]], events: list[tuple[Any, Any]]) -> None:
    """Record every batch and every frontier the stream's consumer sees (a frontier each time it changes)."""

    def constructor(cap: Any, info: Any) -> Any:
        cap.drop()

        def logic(port: Any, out: Any) -> None:
            for time, batch in port.batches():
                events.append((time, batch))
            now = sorted(port.frontier.frontier_elements())
            if not frontiers or frontiers[-1] != now:
                frontiers.append(now)

        return logic

    stream.unary(constructor, name="observe")


def _capture_files(directory: Path, workers: int) -> list[tuple[int, Any]]:
    """Capture numpy batches over epochs on ``workers`` workers into ``directory``; what was sent."""

    def job(worker: Worker) -> list[tuple[int, Any]]:
        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            stream.capture_to_files(str(directory))
            return handle, stream.probe()

        handle, probe = worker.dataflow(build)
        sent = []
        for epoch in range(EPOCHS):
            handle.advance_to(epoch)
            # Let the frontier reach each epoch, so the capture records it moving epoch by epoch.
            worker.step_while(lambda: probe.less_than(handle.time), timeout=60)
            batch = epoch_batches(worker.index, epoch)
            handle.send_batch(batch)
            sent.append((epoch, batch))
        return sent

    return [item for sent in execute(job, workers) for item in sent]


def _replay(directory: Path, workers: int, **kw: Any) -> tuple[list[tuple[Any, Any]], list[list[list[Any]]]]:
    def job(worker: Worker) -> tuple[list[tuple[Any, Any]], list[list[Any]]]:
        events: list[tuple[Any, Any]] = []
        frontiers: list[list[Any]] = []
        worker.dataflow(lambda scope: _observe(scope.replay_files(directory, **kw), frontiers, events))
        return events, frontiers

    results = execute(job, workers)
    return [e for events, _ in results for e in events], [f for _, f in results]


def _rows(events: list[tuple[Any, Any]]) -> Counter[tuple[int, int, int]]:
    return Counter((t, *row) for t, batch in events for row in batch.tolist())


def test_capture_on_two_workers_replay_on_three(tmp_path: Path) -> None:
    sent = _capture_files(tmp_path, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["worker-0000.events", "worker-0001.events"]
    events, frontiers = _replay(tmp_path, 3)
    assert _rows(events) == _rows(sent)
    assert all(type(batch) is np.ndarray and batch.dtype == np.int64 for _, batch in events)
    batch = events[0][1]
    batch[0, 0] = 99  # replayed arrays are the reader's own, writable
    # Every replaying worker's frontier moved through the captured epochs in order, to the end.
    for seen in frontiers:
        assert seen[-1] == []
        times = [f[0] for f in seen if f]
        assert times == sorted(times) and set(times) <= set(range(EPOCHS))
    assert any(len(seen) > 2 for seen in frontiers)  # not one jump from the minimum to the end


def test_replay_keeps_the_captured_progress(tmp_path: Path) -> None:
    """Written by hand: the frontier goes 0 -> 3 -> done, so the replay's consumer never sees 1 or 2."""
    writer = FileEventWriter(tmp_path / "one.events")
    writer.write("messages", (0, np.array([1, 2])))
    writer.write("progress", [(3, 1), (0, -1)])
    writer.write("messages", (3, np.array([3])))
    writer.write("progress", [(3, -1)])
    writer.write("end", None)
    writer.close()
    for workers in (1, 2):
        events, frontiers = _replay(tmp_path, workers)
        assert sorted((t, b.tolist()) for t, b in events) == [(0, [1, 2]), (3, [3])]
        assert [[0], [3], []] in frontiers


def test_a_message_behind_the_captured_frontier_is_corrupt(tmp_path: Path) -> None:
    writer = FileEventWriter(tmp_path / "bad.events")
    writer.write("progress", [(3, 1), (0, -1)])
    writer.write("messages", (1, [5]))
    writer.write("progress", [(3, -1)])
    writer.write("end", None)
    writer.close()
    with pytest.raises(CorruptEventStreamError, match="already passed"):
        _replay(tmp_path, 1)


def test_truncated_and_corrupted_files_raise_typed_errors(tmp_path: Path) -> None:
    _capture_files(tmp_path, 1)
    path = tmp_path / "worker-0000.events"
    data = path.read_bytes()
    for cut in (10, len(data) // 2, len(data) - 1):
        path.write_bytes(data[:cut])
        with pytest.raises(TruncatedEventStreamError):
            _replay(tmp_path, 1)
    for where in (len(data) // 3, len(data) - 40):
        corrupt = bytearray(data)
        corrupt[where] ^= 0x40
        path.write_bytes(bytes(corrupt))
        with pytest.raises(CorruptEventStreamError):
            _replay(tmp_path, 1)
    path.write_bytes(data)
    assert _replay(tmp_path, 1)[0]


def test_an_impossible_length_is_refused_before_reading(tmp_path: Path) -> None:
    writer = FileEventWriter(tmp_path / "big.events")
    writer.write("messages", (0, list(range(1000))))
    writer.write("end", None)
    writer.close()
    reader = FileEventReader(tmp_path / "big.events", max_frame=100)
    with pytest.raises(CorruptEventStreamError, match="longer than the limit"):
        reader.poll()
    reader.close()


def test_signed_files_need_their_secret(tmp_path: Path) -> None:
    secret = secrets.token_bytes(16)

    def job(worker: Worker) -> None:
        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            stream.capture_to_files(str(tmp_path), secret=secret)
            return handle

        worker.dataflow(build).send(7)

    execute(job)
    with pytest.raises(EventStreamAuthError):
        _replay(tmp_path, 1)
    with pytest.raises(CorruptEventStreamError):
        _replay(tmp_path, 1, secret=secrets.token_bytes(16))
    events, _ = _replay(tmp_path, 1, secret=secret)
    assert events == [(0, [7])]


class _Planted:
    """A record whose unpickling creates a file: what a planted event file would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (Path.touch, (self.marker,))


def test_an_unsealed_file_is_refused_unread_when_a_secret_is_given(tmp_path: Path) -> None:
    """Why: a file whose header said "CRC, unsigned" was unpickled by ``replay_files(dir, secret=S)``."""
    folder, marker = tmp_path / "capture", tmp_path / "ran"
    folder.mkdir()
    writer = FileEventWriter(folder / "worker-0000.events")  # no secret: CRC frames, forgeable by anyone
    writer.write("messages", (0, [_Planted(marker)]))
    writer.write("progress", [(0, -1)])
    writer.write("end", None)
    writer.close()
    with pytest.raises(EventStreamAuthError, match="not sealed"):
        _replay(folder, 1, secret=secrets.token_bytes(16))
    assert not marker.exists(), "the planted record was unpickled"


def _capture_signed(directory: Path, workers: int, secret: bytes, rows: int = 1000) -> None:
    """Each of ``workers`` workers captures ``rows`` records of its own at time 0, signed."""

    def job(worker: Worker) -> None:
        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            stream.capture_to_files(str(directory), secret=secret)
            return handle

        worker.dataflow(build).send_batch([(worker.index, i) for i in range(rows)])

    execute(job, workers)


def test_a_signed_file_copied_under_another_workers_name_is_refused(tmp_path: Path) -> None:
    """Why: a copy of worker 0's signed file named worker-0001 was replayed too (2,000 records, not 1,000)."""
    secret = secrets.token_bytes(16)
    _capture_signed(tmp_path, 1, secret)
    assert sum(len(b) for _, b in _replay(tmp_path, 1, secret=secret)[0]) == 1000
    (tmp_path / "worker-0001.events").write_bytes((tmp_path / "worker-0000.events").read_bytes())
    with pytest.raises(CorruptEventStreamError, match="named for worker 1"):
        _replay(tmp_path, 1, secret=secret)


def test_files_renamed_or_left_from_another_capture_are_refused(tmp_path: Path) -> None:
    secret = secrets.token_bytes(16)
    first, second = tmp_path / "first", tmp_path / "second"
    _capture_signed(first, 2, secret, rows=10)
    _capture_signed(second, 2, secret, rows=10)
    # Worker 1's file of another capture of the same width, in place of this one's.
    (second / "worker-0001.events").write_bytes((first / "worker-0001.events").read_bytes())
    with pytest.raises(CorruptEventStreamError, match="a folder holds one capture"):
        _replay(second, 1, secret=secret)
    # One worker's file gone, and the other renamed into its place.
    (first / "worker-0000.events").unlink()
    (first / "worker-0001.events").rename(first / "worker-0000.events")
    with pytest.raises(CorruptEventStreamError, match="named for worker 0"):
        _replay(first, 1, secret=secret)
    (first / "worker-0000.events").rename(first / "worker-0001.events")
    with pytest.raises(CorruptEventStreamError, match="worker 0's is missing"):
        _replay(first, 1, secret=secret)


def test_a_file_cut_between_events_is_truncated_not_ended(tmp_path: Path) -> None:
    from tests.dataflow.event_fuzz import HEADER, frames

    secret = secrets.token_bytes(16)
    _capture_signed(tmp_path, 1, secret, rows=10)
    path = tmp_path / "worker-0000.events"
    data = path.read_bytes()
    # Every event but the end: the bytes stop exactly where an event ends.
    last, _ = frames(data, HEADER + 32, 32)[-1]
    assert data[last] == 3  # the end event's kind
    path.write_bytes(data[:last])
    with pytest.raises(TruncatedEventStreamError, match="without its end event"):
        _replay(tmp_path, 1, secret=secret)


def test_a_capture_replaces_the_wider_capture_its_folder_held(tmp_path: Path) -> None:
    """Why: a capture into a folder that held a wider one left its worker-0002/0003 files, and replay mixed them in."""
    _capture_files(tmp_path, 4)
    sent = _capture_files(tmp_path, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["worker-0000.events", "worker-0001.events"]
    events, _ = _replay(tmp_path, 2)
    assert _rows(events) == _rows(sent)


def test_unfinished_or_missing_captures_are_refused(tmp_path: Path) -> None:
    with pytest.raises(EventStreamError, match=r"no \.events files"):
        _replay(tmp_path, 1)
    FileEventWriter(tmp_path / "half.events").write("messages", (0, [1]))
    with pytest.raises(EventStreamError, match="unfinished capture"):
        _replay(tmp_path, 1)


# -- over TCP, from another process ------------------------------------------------------------------------


def _capturing_process(port: int, secret: bytes, workers: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.dataflow.capture_jobs", "127.0.0.1", str(port), secret.hex(), str(workers)],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
    )


def test_capture_over_a_socket_from_another_process_replayed_on_three() -> None:
    secret = secrets.token_bytes(16)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        proc = _capturing_process(listener.getsockname()[1], secret, 2)
        try:
            readers = accept_event_streams(listener, 2, secret, timeout=60)

            def job(worker: Worker) -> tuple[list[tuple[Any, Any]], list[list[Any]]]:
                events: list[tuple[Any, Any]] = []
                frontiers: list[list[Any]] = []
                mine = readers[worker.index :: worker.peers]
                worker.dataflow(lambda scope: _observe(replay_events(scope, mine), frontiers, events))
                return events, frontiers

            results = execute(job, 3)
        finally:
            _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
    events = [e for r, _ in results for e in r]
    expected = [(e, epoch_batches(w, e)) for w in range(2) for e in range(EPOCHS)]
    assert _rows(events) == _rows(expected)
    assert all(type(b) is np.ndarray for _, b in events)
    assert all(f[-1] == [] for _, f in results)


def test_a_writer_with_the_wrong_secret_is_dropped_and_told_so(caplog: pytest.LogCaptureFixture) -> None:
    import threading

    secret = secrets.token_bytes(16)
    refused: list[Exception] = []

    def writers(address: tuple[str, int]) -> None:
        try:
            SocketEventWriter.connect(address, secrets.token_bytes(16), timeout=30)
        except EventStreamAuthError as exc:
            refused.append(exc)
        _send_events(address, secret, [5])  # then the real capture

    with socket.create_server(("127.0.0.1", 0)) as listener:
        thread = threading.Thread(target=writers, args=(listener.getsockname(),))
        thread.start()
        try:
            readers = accept_event_streams(listener, 1, secret, timeout=30)
        finally:
            thread.join(30)
    assert [(t, list(b)) for t, b in _replay_readers(readers)] == [(0, [5])]
    assert len(refused) == 1 and "refused this capture" in str(refused[0])  # the writer is told it was refused
    assert "did not prove it knows the shared secret" in caplog.text


def _send_events(address: tuple[str, int], secret: bytes, records: list[int]) -> None:
    """A capturing worker written out by hand: its records at time 0, then the frontier passes, then the end."""
    writer = SocketEventWriter.connect(address, secret, timeout=30)
    writer.write("messages", (0, records))
    writer.write("progress", [(0, -1)])
    writer.write("end", None)
    writer.close()


def _replay_readers(readers: list[Any]) -> list[tuple[Any, Any]]:
    def job(worker: Worker) -> list[tuple[Any, Any]]:
        events: list[tuple[Any, Any]] = []
        worker.dataflow(lambda scope: _observe(replay_events(scope, readers), [], events))
        return events

    return [e for events in execute(job) for e in events]


def test_strangers_are_dropped_and_the_real_capture_is_still_accepted(caplog: pytest.LogCaptureFixture) -> None:
    """Why: one stranger's connection raised EventStreamAuthError for the whole replay."""
    import threading

    secret = secrets.token_bytes(16)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        address = listener.getsockname()
        pickler = socket.create_connection(address)
        pickler.sendall(b"\x80\x05" + b"x" * 100)  # a pickle, where a hello belongs
        socket.create_connection(address).close()  # connect and close
        silent = socket.create_connection(address)
        writer = threading.Thread(target=_send_events, args=(address, secret, [1, 2, 3]))
        writer.start()
        try:
            readers = accept_event_streams(listener, 1, secret, timeout=30)
        finally:
            writer.join(30)
            pickler.close()
            silent.close()
    assert [(t, list(b)) for t, b in _replay_readers(readers)] == [(0, [1, 2, 3])]
    assert "not a pytimely capture" in caplog.text and "closed before it proved" in caplog.text


def test_a_silent_stranger_alone_times_out() -> None:
    with (
        socket.create_server(("127.0.0.1", 0)) as listener,
        socket.create_connection(listener.getsockname()),
        pytest.raises(EventStreamTimeoutError, match="0 of 1"),
    ):
        accept_event_streams(listener, 1, secrets.token_bytes(16), timeout=0.5)


def test_a_connection_dropped_inside_an_event_is_truncated() -> None:
    secret = secrets.token_bytes(16)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        address = listener.getsockname()
        import threading

        def write() -> None:
            writer = SocketEventWriter.connect(address, secret, timeout=30)
            writer.write("messages", (0, np.arange(10)))
            writer._sock.sendall(b"\x02\x01\x00")  # the start of a second event, then the connection drops
            writer.close()

        thread = threading.Thread(target=write)
        thread.start()
        [reader] = accept_event_streams(listener, 1, secret, timeout=30)
        thread.join(30)

        def job(worker: Worker) -> None:
            worker.dataflow(lambda scope: replay_events(scope, [reader]).probe())

        with pytest.raises(TruncatedEventStreamError):
            execute(job)
