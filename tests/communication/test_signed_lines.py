"""Signed JSON lines over real socket pairs: purposes, tampering, and the bounds on every read."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest

from pytimely.errors import BadSignatureError, LineTimeoutError, LineTooLongError, MalformedLineError
from pytimely.signed_lines import MAX_LINE, LineBuffer, decode, encode, read_line


def test_a_line_round_trips_and_is_bound_to_its_secret_and_purpose() -> None:
    body = {"op": "add", "process": None, "n": [1, 2]}
    line = encode(b"k" * 32, "control", body)
    assert line.endswith(b"\n") and decode(b"k" * 32, "control", line) == body
    with pytest.raises(BadSignatureError):
        decode(b"j" * 32, "control", line)
    with pytest.raises(BadSignatureError):
        decode(b"k" * 32, "rendezvous", line)
    with pytest.raises(BadSignatureError):
        decode(b"k" * 32, "control", line.replace(b'"add"', b'"remove"'))
    for bad in (b"not json", b"[1, 2]", b'{"op": "add"}', b'{"mac": 5}'):
        with pytest.raises(MalformedLineError):
            decode(b"k" * 32, "control", bad)


def test_a_trickling_peer_cannot_stretch_the_overall_deadline() -> None:
    ours, theirs = socket.socketpair()
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(0.1):
            try:
                theirs.sendall(b"x")
            except OSError:
                return

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(LineTimeoutError):
            read_line(ours, timeout=1.0)
        # A deadline per read would never fire: a byte comes every 0.1 s.
        assert time.monotonic() - started < 10
    finally:
        stop.set()
        thread.join(timeout=5)
        ours.close()
        theirs.close()


def test_a_line_past_the_limit_is_refused_before_more_is_kept() -> None:
    ours, theirs = socket.socketpair()

    def flood() -> None:
        with contextlib.suppress(OSError):  # refused part-way: what was read is gone
            theirs.sendall(b"y" * (16 * MAX_LINE))

    thread = threading.Thread(target=flood, daemon=True)
    thread.start()
    with ours, theirs:
        with pytest.raises(LineTooLongError):
            read_line(ours, timeout=30.0)
        ours.shutdown(socket.SHUT_RDWR)
    thread.join(timeout=5)
    buffer = LineBuffer(5.0, limit=10)
    assert buffer.feed(b"12345") is None
    assert buffer.feed(b"67\nrest") == b"1234567"
    with pytest.raises(LineTooLongError):
        LineBuffer(5.0, limit=10).feed(b"x" * 11)
