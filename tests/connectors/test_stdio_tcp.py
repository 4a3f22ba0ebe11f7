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
from pytimely.errors import BadSignatureError, InputFormatError, PytimelyError, SourceTimeoutError
from pytimely.signed_lines import encode, read_line
from pytimely.testing import TestingSink, run_dataflow
from tests.waiting import wait_until

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


def _stranger_with_another_secret(address: Any) -> None:
    _quietly(send_lines, address, ["x"], secret=secrets.token_bytes(16), timeout=10)


def _stranger_unsigned(address: Any) -> None:
    with socket.create_connection(address, timeout=10) as sock:
        _quietly(sock.sendall, b"not signed\n")
        _quietly(sock.recv, 100)


def _stranger_replaying(address: Any, secret: bytes) -> None:
    # A line signed for an earlier connection's nonce is worthless on a new connection.
    with socket.create_connection(address, timeout=10) as sock:
        read_line(sock, timeout=10)
        _quietly(sock.sendall, encode(secret, f"socket-source-{'0' * 32}", {"seq": 0, "line": "x"}))
        _quietly(sock.recv, 100)


def test_strangers_are_dropped_and_logged_without_taking_a_senders_place(caplog: pytest.LogCaptureFixture) -> None:
    """Why: a stranger's connect-and-close took the only connection slot and ended the stream (0 of 100 lines)."""
    secret = secrets.token_bytes(16)
    lines = [f"line {i}" for i in range(100)]
    sink: TestingSink[Any] = TestingSink()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        address = listener.getsockname()
        socket.create_connection(address).close()  # first in the queue: connect and close
        silent = socket.create_connection(address)

        def dropped() -> list[str]:
            return [r.getMessage() for r in list(caplog.records) if "dropped the connection" in r.getMessage()]

        def sender() -> None:
            # Only once every stranger has been turned away: one that came after the sender could find the source
            # already finished, and never be dropped.
            wait_until(lambda: len(dropped()) >= 4, 60, "the source to drop four strangers")
            _quietly(send_lines, address, lines, secret=secret, timeout=10)

        clients = [
            lambda: _stranger_with_another_secret(address),
            lambda: _stranger_unsigned(address),
            lambda: _stranger_replaying(address, secret),
            sender,
        ]
        threads = [threading.Thread(target=client) for client in clients]
        for thread in threads:
            thread.start()
        try:
            run_dataflow(
                lambda scope: sink.attach(
                    socket_source(scope, listener, connections=1, secret=secret, timeout=30)
                )
            )
        finally:
            for thread in threads:
                thread.join(30)
            silent.close()
    assert sorted(sink.records()) == sorted(lines)
    assert len(dropped()) >= 4, dropped()  # connect-and-close, another secret, unsigned, replayed


def _cutting_proxy(listener: socket.socket, target: tuple[str, int], lines: int, extra: int = 0) -> None:
    """Forward one connection to ``target``, and cut it after ``lines`` whole lines from the client (and ``extra``
    bytes of the next)."""
    client, _ = listener.accept()
    with client, socket.create_connection(target, timeout=10) as server:
        client.sendall(read_line(server, timeout=10) + b"\n")  # the source's nonce
        data = b""
        while data.count(b"\n") < lines:
            chunk = client.recv(1 << 16)
            if not chunk:
                break
            data += chunk
        cut = 0
        for _ in range(lines):
            cut = data.index(b"\n", cut) + 1
        server.sendall(data[: cut + extra])  # then both ends close: the stream is cut


@pytest.mark.parametrize("extra", [0, 10])
def test_a_stream_cut_at_a_line_boundary_is_an_error_naming_the_sender(extra: int) -> None:
    """Why: a signed stream cut at a line boundary ended quietly with 40 of 100 lines (``extra``: cut 10 bytes into
    the next line instead)."""
    from pytimely.errors import InputError

    secret = secrets.token_bytes(16)
    with socket.create_server(("127.0.0.1", 0)) as listener, socket.create_server(("127.0.0.1", 0)) as front:
        proxy = threading.Thread(target=_cutting_proxy, args=(front, listener.getsockname(), 40, extra))
        sender = threading.Thread(
            target=_quietly, args=(send_lines, front.getsockname(), [f"l{i}" for i in range(100)]),
            kwargs={"secret": secret, "timeout": 10},
        )
        proxy.start()
        sender.start()
        try:
            with pytest.raises(InputError, match=r"the sender at 127\.0\.0\.1:\d+ went away .* after 40 lines") as info:
                run_dataflow(lambda scope: socket_source(scope, listener, secret=secret, timeout=30).probe())
        finally:
            proxy.join(30)
            sender.join(30)
    assert type(info.value).__name__ == "SenderLostError"


def test_a_senders_forged_or_reordered_line_is_refused_naming_it() -> None:
    secret = secrets.token_bytes(16)

    def source(scope: Scope[int], listener: socket.socket) -> Any:
        return socket_source(scope, listener, secret=secret, timeout=30)

    def sender(second: Any) -> Any:
        def client(address: Any) -> None:
            with socket.create_connection(address, timeout=10) as sock:
                purpose = f"socket-source-{read_line(sock, timeout=10).decode()}"
                _quietly(sock.sendall, encode(secret, purpose, {"seq": 0, "line": "fine"}) + second(purpose))
                _quietly(sock.recv, 100)

        return client

    with pytest.raises(BadSignatureError, match=r"the sender at 127\.0\.0\.1:\d+: line 2: a signed line out of order"):
        _serve(source, [sender(lambda p: encode(secret, p, {"seq": 5, "line": "early"}))])
    with pytest.raises(BadSignatureError, match=r"the sender at .*: line 2: .*not signed with this run's secret"):
        _serve(source, [sender(lambda p: encode(secrets.token_bytes(16), p, {"seq": 1, "line": "forged"}))])


def test_a_sender_silent_before_its_end_times_out_naming_it() -> None:
    secret = secrets.token_bytes(16)

    def one_line_then_silence(sock: socket.socket) -> None:
        purpose = f"socket-source-{read_line(sock, timeout=10).decode()}"
        _quietly(sock.sendall, encode(secret, purpose, {"seq": 0, "line": "x"}))

    with (
        socket.create_server(("127.0.0.1", 0)) as listener,
        socket.create_connection(listener.getsockname()) as sock,
        pytest.raises(SourceTimeoutError, match=r"the sender at 127\.0\.0\.1:\d+ sent nothing for 0.5 s after 1 lines"),
    ):
        sender = threading.Thread(target=one_line_then_silence, args=(sock,))
        sender.start()
        try:
            run_dataflow(lambda scope: socket_source(scope, listener, secret=secret, timeout=0.5).probe())
        finally:
            sender.join(30)


def _quietly(f: Any, *args: Any, **kw: Any) -> None:
    """Call ``f``; the server may close the connection under the client, which is what these tests want."""
    with contextlib.suppress(OSError, PytimelyError):
        f(*args, **kw)


def test_long_lines_and_silence_are_typed_errors() -> None:
    with pytest.raises(InputFormatError, match="longer than the limit"):
        _serve(
            lambda scope, listener: socket_source(scope, listener, max_line=100, timeout=60),
            [lambda address: _quietly(send_lines, address, ["y" * 1000])],
        )
    with socket.create_server(("127.0.0.1", 0)) as listener, pytest.raises(SourceTimeoutError):
        run_dataflow(lambda scope: socket_source(scope, listener, timeout=0.3).probe())
