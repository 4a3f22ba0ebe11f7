"""Turning messages into payload bytes and back: pickle protocol 5 with out-of-band buffers.

Numpy arrays and Arrow tables/arrays hand their memory to pickle as
out-of-band buffers (PEP 574), so a columnar batch goes on the wire as its own
buffers, written by scatter-gather I/O without being copied into one string,
and on the way in is rebuilt on top of the received bytes. Everything else is
pickled in-band. A payload is::

    count u32 | count x length u64 | pickle bytes | buffer 0 | buffer 1 | ...

Only payloads of frames received from authenticated peers are ever decoded.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any

from pytimely.collector import burst

__all__ = ["dumps", "has_buffers", "loads"]

_COUNT = struct.Struct("<I")


def dumps(message: Any) -> tuple[list[bytes | memoryview], int]:
    """The payload parts of ``message`` and their total length."""
    buffers: list[pickle.PickleBuffer] = []
    body = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
    if not buffers:
        head = b"\x00\x00\x00\x00"
        return [head, body], 4 + len(body)
    views = [b.raw() for b in buffers]
    head = _COUNT.pack(len(views)) + struct.pack(f"<{len(views)}Q", *(v.nbytes for v in views))
    parts: list[bytes | memoryview] = [head, body, *views]
    return parts, len(head) + len(body) + sum(v.nbytes for v in views)


def has_buffers(payload: memoryview | bytes) -> bool:
    """Whether a payload carries out-of-band buffers (a message decoded from it is built on top of its bytes)."""
    return bytes(payload[:4]) != b"\x00\x00\x00\x00"


def loads(payload: memoryview | bytes) -> Any:
    """The message a payload holds (its buffers are read in place, not copied).

    The message is rebuilt as a burst (:func:`pytimely.collector.burst`): a batch of records is thousands of
    new tuples at once, which would otherwise set off a young collection every 700 of them and promote the
    batch generation by generation until full collections walk every long-lived object of the process (the
    input, operator state) for garbage that reference counting frees anyway.
    """
    with burst():
        return _loads(payload)


def _loads(payload: memoryview | bytes) -> Any:
    view = memoryview(payload)
    (count,) = _COUNT.unpack_from(view, 0)
    if count == 0:
        return pickle.loads(view[4:])
    lengths = struct.unpack_from(f"<{count}Q", view, 4)
    end = len(view)
    offset = end - sum(lengths)
    buffers = []
    for n in lengths:
        buffers.append(view[offset : offset + n])
        offset += n
    return pickle.loads(view[4 + 8 * count : end - sum(lengths)], buffers=buffers)
