"""stdin/stdout through real pipes of a real process, and the TCP socket source over real connections."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from pytimely import Scope
from pytimely.connectors import send_lines, socket_source
from pytimely.errors import BadSignatureError, InputFormatError, MalformedLineError, SourceTimeoutError
from pytimely.signed_lines import encode, read_line
from pytimely.testing import TestingSink, run_dataflow

ROOT = Path(__file__).resolve().parents[2]


def _stdio(workers: int, data: bytes) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    return subprocess.run(
        [sys.executable, "-m", "tests.connectors.stdio_job", str(workers)],
        input=data,
        capture_output=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize("workers", [1, 2])
def test_stdin_to_stdout_counts_words_per_epoch_in_time_order(workers: int) -> None:
    text = "a b a\nc\nb b\nc a\nz\n"
    done = _stdio(workers, text.encode())
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    # Lines 1-2 are epoch 0, lines 3-4 epoch 1, line 5 epoch 2; output in time order.
    epochs = [int(line.split()[0]) for line in lines]
    assert epochs == sorted(epochs)
    assert sorted(lines) == sorted(["0 a 2", "0 b 1", "0 c 1", "1 a 1", "1 b 2", "1 c 1", "2 z 1"])


def test_bad_stdin_is_one_line_naming_the_line_and_status_2() -> None:
    done = _stdio(1, b"fine\nalso\n\xff\xfe\n")
    assert done.returncode == 2
    assert (
        done.stderr.decode().strip() == "error: InputFormatError: <stdin>, line 3: not UTF-8 text (invalid start byte)"
    )


def _serve(build_source: Any, clients: list[Any], workers: int = 1) -> TestingSink[Any]:
    sink: TestingSink[Any] = TestingSink()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        address = listener.getsockname()
        threads = [threading.Thread(target=client, args=(address,)) for client in clients]
        for thread in threads:
            thread.start()
        try:
            run_dataflow(lambda scope: sink.attach(build_source(scope, listener)), workers=workers)
        finally:
            for thread in threads:
                thread.join(60)
    return sink


@pytest.mark.parametrize("workers", [1, 3])
def test_socket_source_reads_lines_from_two_connections(workers: int) -> None:
    def client(lines: list[str]) -> Any:
        return lambda address: send_lines(address, lines)

    sink = _serve(
        lambda scope, listener: socket_source(scope, listener, connections=2, timeout=60),
        [client([f"a{i}" for i in range(100)]), client([f"b{i}" for i in range(50)])],
        workers,
    )
    assert sorted(sink.records()) == sorted([f"a{i}" for i in range(100)] + [f"b{i}" for i in range(50)])
    assert {c.worker for c in sink.caught} == {0}


def test_socket_source_epochs_by_lines() -> None:
    sink = _serve(
        lambda scope, listener: socket_source(scope, listener, epoch_lines=3, timeout=60),
        [lambda address: send_lines(address, [str(i) for i in range(8)])],
    )
    assert sink.by_epoch() == {0: ["0", "1", "2"], 1: ["3", "4", "5"], 2: ["6", "7"]}


def test_signed_lines_are_accepted_with_the_secret() -> None:
    secret = secrets.token_bytes(16)
    sink = _serve(
        lambda scope, listener: socket_source(scope, listener, secret=secret, timeout=60),
        [lambda address: send_lines(address, ["hello", "wörld", ""], secret=secret)],
    )
    assert sorted(sink.records()) == ["", "hello", "wörld"]


def test_wrong_secret_unsigned_and_replayed_lines_are_refused() -> None:
    secret = secrets.token_bytes(16)

    def source(scope: Scope[int], listener: socket.socket) -> Any:
        return socket_source(scope, listener, secret=secret, timeout=60)

    with pytest.raises(BadSignatureError):
        _serve(source, [lambda address: _quietly(send_lines, address, ["x"], secret=secrets.token_bytes(16))])
    with pytest.raises(MalformedLineError):
        _serve(source, [lambda address: _quietly(send_lines, address, ["not signed"])])

    def replaying(address: Any) -> None:
        # A line signed for an earlier connection's nonce is worthless on a new connection.
        with socket.create_connection(address, timeout=30) as sock:
            read_line(sock, timeout=30)
            old_nonce = "0" * 32
            _quietly(sock.sendall, encode(secret, f"socket-source-{old_nonce}", {"seq": 0, "line": "x"}))

    with pytest.raises(BadSignatureError):
        _serve(source, [replaying])


def _quietly(f: Any, *args: Any, **kw: Any) -> None:
    """Call ``f``; the server may close the connection under the client, which is what these tests want."""
    with contextlib.suppress(OSError):
        f(*args, **kw)


def test_long_lines_and_silence_are_typed_errors() -> None:
    with pytest.raises(InputFormatError, match="longer than the limit"):
        _serve(
            lambda scope, listener: socket_source(scope, listener, max_line=100, timeout=60),
            [lambda address: _quietly(send_lines, address, ["y" * 1000])],
        )
    with socket.create_server(("127.0.0.1", 0)) as listener, pytest.raises(SourceTimeoutError):
        run_dataflow(lambda scope: socket_source(scope, listener, timeout=0.3).probe())
