"""Event streams: a captured stream's messages and progress as bytes, in files or over TCP (timely's
``EventWriter`` and ``EventReader``).

A captured worker's events are ``progress`` (changes ``[(time, diff)]`` to the captured stream's frontier at
that worker, which starts as ``{minimum: 1}``), ``messages`` (``(time, batch)``, the batch pickled with
protocol 5 so numpy arrays and Arrow batches come back as what they were) and a final ``end``. Each is a frame::

    kind u8 | sequence u64 | length u64 | body (payload.dumps) | tag

Every stream is bound to its capture by a :class:`Binding`: the capture's id (16 random bytes drawn by worker 0
and shared with the others), the capturing worker's index and the count of capturing workers. A file starts with
``PTEV | version | mode | nonce | binding`` and a tag over those bytes; over TCP the writer's hello carries the
binding. With a secret, tags are HMAC-SHA256 under keys derived from the secret and those bytes, so a frame is
good only at its place in the stream it was written into: a file copied under another worker's name, renamed,
truncated, spliced from another stream or reordered is refused, and so is a stream cut anywhere, since only an
``end`` frame sealed at its place ends it. Without a secret the tags are CRC-32s (seeded with the header's, so a
frame from another file is still found out): they find corruption, not forgery, and a file written without a
secret is trusted like code, since its frames are unpickled.

Reading is bounded and checked before anything is unpickled: a reader given a secret refuses a file that is not
sealed with one before reading past its first six bytes; a frame longer than ``max_frame`` is refused before it
is read; nothing is unpickled before its tag checks out. A wrong tag, a sequence out of order or an unknown kind
raise :class:`CorruptEventStreamError`; bytes ending inside a frame, or a stream ending without its ``end``,
:class:`TruncatedEventStreamError`.

Over TCP the capturing side connects to the replaying side, which authenticates it before reading any frame:
the writer sends ``PTEC | version | writer nonce | binding``, the reader a fresh nonce of its own, and the writer
proves it knows the secret with ``HMAC(secret, "writer" | hello | reader nonce)``, which the reader acknowledges
with one byte. The reader's nonce makes each proof good for one connection only, and the reader reveals nothing
that depends on the secret. Frame keys are derived from the secret, the hello and the reader's nonce, so recorded
frames cannot be replayed into another connection. :func:`accept_event_streams` serves any number of handshakes
at once, drops and logs a connection that does not complete one within its deadline (a stranger) without giving
it a place, and returns the streams of the first capture all of whose workers arrived.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pytimely.dataflow.operators.event_codec import MAX_FRAME, Binding, Event
from pytimely.dataflow.operators.event_files import EventFileDecoder, FileEventReader, FileEventWriter, read_binding
from pytimely.dataflow.operators.event_sockets import SocketEventReader, SocketEventWriter, accept_event_streams

__all__ = [
    "MAX_FRAME",
    "Binding",
    "Event",
    "EventFileDecoder",
    "EventReader",
    "EventWriter",
    "FileEventReader",
    "FileEventWriter",
    "SocketEventReader",
    "SocketEventWriter",
    "accept_event_streams",
    "read_binding",
]


class EventWriter(Protocol):
    """Where a capture operator writes one worker's events."""

    def write(self, kind: Literal["progress", "messages", "end"], body: Any) -> None:
        """Append one event."""
        ...

    def close(self) -> None:
        """Finish: after an ``end`` event the stream is complete (a file appears under its name)."""
        ...


class EventReader(Protocol):
    """Where a replay operator reads one captured worker's events."""

    name: str

    def poll(self) -> list[Event]:
        """The events that have arrived (possibly none), without waiting long."""
        ...

    @property
    def ended(self) -> bool:
        """Whether the ``end`` event has been read."""
        ...

    def close(self) -> None:
        """Release the file or socket."""
        ...
