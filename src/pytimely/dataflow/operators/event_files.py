"""Event streams in files: a writer, a decoder of a file's bytes (its header, then frames) and a reader."""

from __future__ import annotations

import hmac
import os
import struct
import zlib
from pathlib import Path
from typing import Any, Literal

from pytimely.communication.handshake import check_secret
from pytimely.dataflow.operators.event_codec import (
    CRC,
    FILE_HEADER,
    FILE_MAGIC,
    HMAC,
    MAX_FRAME,
    NONCE,
    PREFIX,
    TAGS,
    VERSION,
    Binding,
    Decoder,
    Event,
    Sealer,
    derive,
)
from pytimely.errors import (
    CorruptEventStreamError,
    EventStreamAuthError,
    EventStreamError,
    InvalidArgument,
    TruncatedEventStreamError,
)

__all__ = ["EventFileDecoder", "FileEventReader", "FileEventWriter", "read_binding"]


def _file_keys(header: bytes, mode: int, secret: bytes | None) -> tuple[bytes, bytes | None, int]:
    """A file header's tag, the key of its frames (``None``: CRC) and the seed of their CRCs."""
    if mode == HMAC:
        assert secret is not None
        return derive(secret, b"file-header", header), derive(secret, b"file", header), 0
    crc = zlib.crc32(header)
    return struct.pack("<I", crc), None, crc


class FileEventWriter:
    """Writes events to ``path + ".partial"`` and renames it to ``path`` after the end: never a half file.

    ``binding`` says which capture and worker the file belongs to (by default a capture of its own, by one worker).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, secret: bytes | None = None, binding: Binding | None = None
    ) -> None:
        self.path = Path(path)
        self.binding = Binding.single() if binding is None else binding
        self._partial = self.path.with_name(self.path.name + ".partial")
        mode = CRC if secret is None else HMAC
        b = self.binding
        header = FILE_HEADER.pack(FILE_MAGIC, VERSION, mode, os.urandom(NONCE), b.capture, b.index, b.count)
        tag, key, seed = _file_keys(header, mode, None if secret is None else check_secret(secret))
        self._sealer = Sealer(key, seed)
        self._file = open(self._partial, "wb")  # noqa: SIM115 - closed in close()
        self._file.write(header + tag)

    def write(self, kind: Literal["progress", "messages", "end"], body: Any) -> None:
        """Append one event (progress and the end are flushed, so a follower sees them)."""
        self._file.writelines(self._sealer.frame(kind, body))
        if kind != "messages":
            self._file.flush()

    def close(self) -> None:
        """Close; the file takes its name only if the end event was written."""
        if self._file.closed:
            return
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self._partial, self.path)


class EventFileDecoder:
    """An event file's bytes in, its events out (no I/O): the header and its seal first, then the frames.

    With ``secret``, a file not sealed with one is refused (:class:`EventStreamAuthError`) from its first six
    bytes; with ``expect``, a file bound to another capture or worker is refused
    (:class:`CorruptEventStreamError`).
    """

    def __init__(
        self, name: str, *, secret: bytes | None = None, max_frame: int = MAX_FRAME, expect: Binding | None = None
    ) -> None:
        self.name = name
        self._secret = None if secret is None else check_secret(secret)
        self._max = max_frame
        self._expect = expect
        self._head = bytearray()
        self._frames: Decoder | None = None
        self.binding: Binding | None = None
        """Which capture and worker the file belongs to, once its header is read."""

    @property
    def ended(self) -> bool:
        """Whether the end event has been read."""
        return self._frames is not None and self._frames.ended

    def want(self) -> int:
        """How many more bytes complete the header or the frame being read (at least 1)."""
        if self._frames is None:
            if len(self._head) < PREFIX.size:
                return PREFIX.size - len(self._head)
            mode = self._head[PREFIX.size - 1]
            return max(1, FILE_HEADER.size + TAGS.get(mode, 4) - len(self._head))
        return self._frames.want()

    def pending(self) -> int:
        """Bytes received and not yet part of the header or a whole frame."""
        return len(self._head) if self._frames is None else self._frames.pending()

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[Event]:
        """Add ``chunk``; the events it completes."""
        if self._frames is not None:
            return self._frames.feed(chunk)
        self._head += chunk
        rest = self._header()
        return [] if rest is None or self._frames is None else self._frames.feed(rest)

    def finish(self) -> None:
        """The bytes have all been fed: :class:`TruncatedEventStreamError` unless the end event was among them."""
        if self._frames is None:
            raise TruncatedEventStreamError(f"event file {self.name} is shorter than its header", source=self.name)
        if not self._frames.ended:
            raise self._frames.truncated("ends")

    def _header(self) -> bytes | None:
        head = self._head
        if len(head) < PREFIX.size:
            return None
        magic, version, mode = PREFIX.unpack_from(head)
        if magic != FILE_MAGIC or mode not in TAGS:
            raise CorruptEventStreamError(f"{self.name} is not a pytimely event file", source=self.name, offset=0)
        if version != VERSION:
            raise CorruptEventStreamError(
                f"{self.name} is an event file of version {version}; this pytimely reads version {VERSION}",
                source=self.name,
                offset=0,
            )
        if mode == CRC and self._secret is not None:
            raise EventStreamAuthError(
                f"event file {self.name} is not sealed with a secret, and a secret was given: it is refused unread "
                "(an unsealed file is trusted like code, since its events are unpickled)",
                source=self.name,
                offset=0,
            )
        if mode == HMAC and self._secret is None:
            raise EventStreamAuthError(
                f"event file {self.name} is sealed: give the secret to read it", source=self.name
            )
        size = FILE_HEADER.size + TAGS[mode]
        if len(head) < size:
            return None
        header, tag = bytes(head[: FILE_HEADER.size]), bytes(head[FILE_HEADER.size : size])
        want, key, seed = _file_keys(header, mode, self._secret)
        if not hmac.compare_digest(want, tag):
            raise CorruptEventStreamError(
                f"event file {self.name}: its header fails its seal (written with another secret, or changed)",
                source=self.name,
                offset=0,
            )
        _, _, _, _, capture, index, count = FILE_HEADER.unpack(header)
        try:
            self.binding = Binding(capture, index, count)
        except InvalidArgument as exc:
            raise CorruptEventStreamError(f"event file {self.name}: {exc}", source=self.name, offset=0) from None
        if self._expect is not None and self.binding != self._expect:
            raise CorruptEventStreamError(
                f"event file {self.name} now holds {self.binding}, not the {self._expect} it held when the replay "
                "began (replaced while being read?)",
                source=self.name,
                offset=0,
            )
        self._frames = Decoder(key, self.name, self._max, seed, offset=size)
        rest = bytes(head[size:])
        self._head = bytearray()
        return rest


class FileEventReader:
    """Reads one captured worker's file, a bounded chunk per poll (see :class:`EventFileDecoder` for the checks)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        secret: bytes | None = None,
        max_frame: int = MAX_FRAME,
        chunk: int = 1 << 20,
        expect: Binding | None = None,
    ) -> None:
        self.path = Path(path)
        self.name = str(self.path)
        self._chunk = chunk
        self._decoder = EventFileDecoder(self.name, secret=secret, max_frame=max_frame, expect=expect)
        try:
            self._file = open(self.path, "rb")  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise EventStreamError(f"cannot open event file {self.name}: {exc}", source=self.name) from None
        self._queued: list[Event] = []
        try:
            # The header is read now, so a file of another capture or without its seal is refused at once.
            while self._decoder.binding is None:
                data = self._file.read(self._decoder.want())
                if not data:
                    self._decoder.finish()
                self._queued = self._decoder.feed(data)
        except BaseException:
            self._file.close()
            raise

    @property
    def binding(self) -> Binding:
        """Which capture and worker the file belongs to."""
        assert self._decoder.binding is not None
        return self._decoder.binding

    @property
    def ended(self) -> bool:
        """Whether the end event has been read."""
        return self._decoder.ended

    def poll(self) -> list[Event]:
        """The events in the next chunk of the file; the end of the file before the end event is an error."""
        if self._queued:
            events, self._queued = self._queued, []
            return events
        if self._decoder.ended:
            return []
        data = self._file.read(max(self._chunk, self._decoder.want()) if self._decoder.pending() else self._chunk)
        if not data:
            self.close()
            self._decoder.finish()
        return self._decoder.feed(data)

    def close(self) -> None:
        """Close the file."""
        self._file.close()


def read_binding(path: str | os.PathLike[str], *, secret: bytes | None = None) -> Binding:
    """Which capture and worker an event file belongs to, from its header (checked, as a reader would)."""
    reader = FileEventReader(path, secret=secret, chunk=1)
    reader.close()
    return reader.binding
