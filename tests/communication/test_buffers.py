"""Receive buffers are used again only when nothing refers to them: a payload kept by a message, a view or an array
rebuilt on it is never overwritten by a later payload."""

from __future__ import annotations

import gc
import os
import pickle

import numpy as np

from pytimely.communication.buffers import PayloadBuffers
from pytimely.communication.frame import FrameDecoder, FrameEncoder, FrameKeys
from pytimely.communication.payload import dumps, loads


def test_a_buffer_still_referred_to_is_never_handed_out_again() -> None:
    pool = PayloadBuffers(minimum=1024, limit=1 << 20)
    first = pool.take(4096)
    first[:] = b"a" * 4096
    second = pool.take(4096)
    assert pool.reused == 0, "a buffer a view still refers to was handed out again"
    second[:] = b"b" * 4096
    assert bytes(first) == b"a" * 4096
    array = np.frombuffer(first, dtype=np.uint8)  # an array rebuilt on the buffer keeps it, as a message does
    del first, second
    gc.collect()
    third = pool.take(4096)  # the second buffer is free again, the first is the array's
    assert pool.reused == 1
    third[:] = b"c" * 4096
    assert bytes(array) == b"a" * 4096
    del array, third
    assert pool.take(3000) is not None and pool.reused == 2  # a free buffer up to twice the size serves


def test_small_sizes_are_not_pooled_and_the_pool_holds_at_most_its_limit() -> None:
    pool = PayloadBuffers(minimum=1024, limit=10_000)
    assert isinstance(pool.take(100), bytearray) and pool.held == 0
    kept = [pool.take(4000) for _ in range(5)]  # all in use: the oldest are forgotten, not reused
    assert pool.held <= 10_000 and pool.reused == 0
    assert len({id(k.obj) for k in kept}) == 5
    assert pool.take(20_000) is not None and pool.held <= 10_000  # bigger than the limit: handed out, not kept


def test_decoded_payloads_kept_by_the_receiver_stay_whole() -> None:
    keys = FrameKeys(os.urandom(32), os.urandom(32), encrypt=True)
    encoder, decoder = FrameEncoder(keys), FrameDecoder(0, keys)
    kept = []
    for i in range(40):
        array = np.full(100_000, i, dtype=np.int64)
        parts, length = dumps((i, array))
        wire = b"".join(bytes(b) for b in encoder.encode(1, 0, 1, 0, 1, parts, length))
        (frame,) = decoder.feed(wire)
        got = loads(frame.payload)
        if i % 2:
            kept.append(got)  # every other message is kept; the others' buffers are free for later payloads
    assert decoder.buffers.reused >= 10
    for i, array in kept:
        assert np.all(array == i), f"the payload of message {i} was overwritten"
    assert pickle.loads(pickle.dumps(kept[0][1])).sum() == 100_000
