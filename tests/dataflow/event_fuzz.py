"""Damaged event streams, file and socket: every damaged stream is refused with a typed error, every intact one
replays exactly.

The tests run a seeded sample (``test_event_stream_fuzz.py``); a longer run is
``python -m tests.dataflow.event_fuzz --cases 100000 [--seed N]``.
"""

from __future__ import annotations

import argparse
import random
import secrets
import socket
import struct
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pytimely.dataflow.operators.event_stream import Binding, EventFileDecoder, FileEventWriter
from pytimely.errors import EventStreamError

FRAME = struct.Struct("<BQQ")
HEADER = 62
"""Bytes of an event file's header before its tag (magic, version, mode, nonce, binding)."""
KINDS = ("truncate", "flip", "splice", "insert", "swap", "drop", "repeat", "header", "append", "unsealed", "intact")


def frames(data: bytes, start: int, tag: int) -> list[tuple[int, int]]:
    """The ``(start, end)`` byte ranges of the frames of an intact stream whose frames begin at ``start``."""
    out = []
    at = start
    while at < len(data):
        _, _, length = FRAME.unpack_from(data, at)
        end = at + FRAME.size + length + tag
        out.append((at, end))
        at = end
    return out


@dataclass(frozen=True)
class Stream:
    """An intact stream: its bytes, where its frames start, its tag size and its events as a reader gives them."""

    data: bytes
    start: int
    tag: int
    events: list[tuple[str, Any]]

    @property
    def spans(self) -> list[tuple[int, int]]:
        """Its frames' byte ranges."""
        return frames(self.data, self.start, self.tag)


def sample_events(rng: random.Random) -> list[tuple[str, Any]]:
    """A capture's events: lists and numpy batches over a few epochs, its frontier moving, then the end."""
    events: list[tuple[str, Any]] = []
    for epoch in range(rng.randint(1, 4)):
        for _ in range(rng.randint(0, 3)):
            n = rng.randint(0, 40)
            batch = np.arange(n, dtype=np.int64) * epoch if rng.random() < 0.5 else [(epoch, i) for i in range(n)]
            events.append(("messages", (epoch, batch)))
        events.append(("progress", [(epoch + 1, 1), (epoch, -1)]))
    events.append(("progress", [(epoch + 1, -1)]))
    events.append(("end", None))
    return events


def write_file(folder: Path, events: list[tuple[str, Any]], secret: bytes | None, binding: Binding) -> Stream:
    """The bytes of an event file holding ``events``."""
    path = folder / f"{secrets.token_hex(4)}.events"
    writer = FileEventWriter(path, secret=secret, binding=binding)
    for kind, body in events:
        writer.write(kind, body)  # type: ignore[arg-type]
    writer.close()
    data = path.read_bytes()
    path.unlink()
    tag = 4 if secret is None else 32
    stream = Stream(data, HEADER + tag, tag, events)
    assert data[stream.spans[-1][0]] == 3 and len(stream.spans) == len(events)  # the frames are where we think
    return stream


def damage(
    rng: random.Random, intact: Stream, donors: Sequence[Stream], kind: str, *, header: bool = True,
    unsealed: Sequence[Stream] = (),
) -> bytes:
    """``intact`` damaged as ``kind`` says (``donors``: other streams, for splices; ``unsealed``: streams written
    without a secret, for a reader that has one); may give it back unchanged."""
    data, spans = intact.data, intact.spans
    if kind == "unsealed" and unsealed:
        return rng.choice(unsealed).data
    if kind == "truncate":
        return data[: rng.randrange(len(data))]
    if kind == "flip":
        out = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(out) if header else len(out) - intact.start) + (0 if header else intact.start)
            out[at] ^= 1 << rng.randrange(8)
        return bytes(out)
    if kind in ("splice", "insert"):
        donor = rng.choice(donors)
        lo, hi = rng.choice(donor.spans)
        a, b = rng.choice(spans)
        piece = donor.data[lo:hi]
        return data[:a] + piece + data[b if kind == "splice" else a :]
    if kind == "swap" and len(spans) > 1:
        i, j = sorted(rng.sample(range(len(spans)), 2))
        (a0, a1), (b0, b1) = spans[i], spans[j]
        return data[:a0] + data[b0:b1] + data[a1:b0] + data[a0:a1] + data[b1:]
    if kind == "drop":
        a, b = rng.choice(spans)
        return data[:a] + data[b:]
    if kind == "repeat":
        a, b = rng.choice(spans)
        return data[:b] + data[a:b] + data[b:]
    if kind == "header" and header and donors:
        return rng.choice(donors).data[: intact.start] + data[intact.start :]
    if kind == "append":
        return data + bytes(rng.randrange(256) for _ in range(rng.randint(1, 40)))
    return data


def same(a: list[tuple[str, Any]], b: list[tuple[str, Any]]) -> bool:
    """Whether two event lists hold the same events (numpy batches compared by value and type)."""
    if len(a) != len(b):
        return False
    for (ka, va), (kb, vb) in zip(a, b, strict=True):
        if ka != kb:
            return False
        if ka == "messages":
            (ta, ba), (tb, bb) = va, vb
            if ta != tb or type(ba) is not type(bb) or not np.array_equal(np.asarray(ba), np.asarray(bb)):
                return False
        elif va != vb:
            return False
    return True


def decode_file(data: bytes, secret: bytes | None, rng: random.Random) -> list[tuple[str, Any]]:
    """Every event of an event file's bytes, fed in random chunks; raises as a reader would."""
    decoder = EventFileDecoder("fuzzed.events", secret=secret, max_frame=1 << 20)
    events: list[tuple[str, Any]] = []
    at = 0
    while at < len(data):
        step = rng.choice((1, 7, 64, 4096, len(data)))
        events.extend(decoder.feed(data[at : at + step]))
        at += step
    decoder.finish()
    return events


def check(
    decode: Callable[[bytes], list[tuple[str, Any]]], intact: Stream, damaged: bytes, counts: dict[str, int]
) -> None:
    """``damaged`` is refused with an :class:`EventStreamError` (only intact events before), or is ``intact``."""
    try:
        events = decode(damaged)
    except EventStreamError as exc:
        counts[type(exc).__name__] = counts.get(type(exc).__name__, 0) + 1
        if damaged == intact.data:
            raise AssertionError(f"an intact stream was refused: {exc}") from exc
        return
    if damaged != intact.data:
        raise AssertionError(f"a damaged stream of {len(damaged)} bytes was accepted")
    if not same(events, intact.events):
        raise AssertionError("an intact stream replayed other events")
    counts["intact"] = counts.get("intact", 0) + 1


def fuzz_files(cases: int, seed: int) -> dict[str, int]:
    """``cases`` damaged (and intact) event files, with and without a secret; how each ended, by error type."""
    rng = random.Random(seed)
    secret = secrets.token_bytes(32)
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        streams: dict[bytes | None, list[Stream]] = {}
        for key in (secret, None):
            capture = secrets.token_bytes(16)
            # Two workers of one capture, and a capture of its own: donors of frames and headers.
            streams[key] = [
                write_file(folder, sample_events(rng), key, Binding(capture, 0, 2)),
                write_file(folder, sample_events(rng), key, Binding(capture, 1, 2)),
                write_file(folder, sample_events(rng), key, Binding.single()),
            ]
    for n in range(cases):
        key = secret if n % 4 else None  # most cases sealed; a quarter with CRCs
        pool = streams[key]
        intact = rng.choice(pool)
        donors = [s for s in pool if s is not intact]
        kind = KINDS[n % len(KINDS)]
        damaged = damage(rng, intact, donors, kind, unsealed=streams[None] if key else [])
        check(lambda data, key=key: decode_file(data, key, rng), intact, damaged, counts)  # type: ignore[misc]
    return counts


def sealed_stream(sealer: Any, events: list[tuple[str, Any]]) -> Stream:
    """The frames ``sealer`` (a socket writer's, or another key's) makes of ``events``, as a stream of no header."""
    data = b"".join(bytes(p) for kind, body in events for p in sealer.frame(kind, body))
    stream = Stream(data, 0, 32, events)
    assert len(stream.spans) == len(events)
    return stream


def fuzz_sockets(cases: int, seed: int) -> dict[str, int]:
    """``cases`` damaged (and intact) capture streams over real loopback TCP; how each ended, by error type."""
    from pytimely.dataflow.operators.event_codec import Sealer
    from pytimely.dataflow.operators.event_stream import SocketEventWriter, accept_event_streams

    rng = random.Random(seed)
    secret = secrets.token_bytes(32)
    counts: dict[str, int] = {}
    # Frames sealed under other keys (other connections): the donors of splices.
    donors = [sealed_stream(Sealer(secrets.token_bytes(32)), sample_events(rng)) for _ in range(2)]
    with socket.create_server(("127.0.0.1", 0)) as listener:
        address = listener.getsockname()
        for n in range(cases):
            kind = KINDS[n % len(KINDS)]
            events = sample_events(rng)
            sent: list[Stream] = []
            damaged: list[bytes] = []

            def write(
                kind: str = kind, events: list[tuple[str, Any]] = events, sent: list[Stream] = sent,
                damaged: list[bytes] = damaged,
            ) -> None:
                writer = SocketEventWriter.connect(address, secret, timeout=10)
                intact = sealed_stream(writer._sealer, events)
                sent.append(intact)
                damaged.append(damage(rng, intact, donors, kind, header=False))
                writer._sock.sendall(damaged[0])
                writer.close()

            thread = threading.Thread(target=write)
            thread.start()
            [reader] = accept_event_streams(listener, 1, secret, timeout=10)
            thread.join(10)

            def read(_: bytes, reader: Any = reader) -> list[tuple[str, Any]]:
                got: list[tuple[str, Any]] = []
                try:
                    while not reader.ended:
                        got.extend(reader.poll())
                finally:
                    reader.close()
                return got

            check(read, sent[0], damaged[0], counts)
    return counts


def main(argv: list[str] | None = None) -> int:
    """Run the file fuzz for as many cases as asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--socket-cases", type=int, default=1000)
    args = parser.parse_args(argv)
    for what, counts in (
        ("files", fuzz_files(args.cases, args.seed)),
        ("sockets", fuzz_sockets(args.socket_cases, args.seed)),
    ):
        print(f"{what}: " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
