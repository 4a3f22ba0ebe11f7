"""Capturing a stream's batches, and replaying them as a stream: in memory, or through files and sockets.

In memory, ``capture`` fills a list with ``(time, batch)`` and ``replay`` sends them again at their times.

Through an event stream (:mod:`pytimely.dataflow.operators.event_stream`, timely's ``EventWriter`` and
``EventReader``), every worker's capture writes its messages *and its progress*: each change of the captured
stream's frontier at that worker. ``replay_events`` on any number of workers shares the captured workers'
streams among its workers and holds, for each, capabilities at exactly the times that worker's frontier held,
so the replayed stream has the original's frontier: a probe after it finishes epoch ``t`` when the original had
finished it, and a replay that tails a live capture (a socket) moves forward as the original did. Batches come
back as what they were (numpy arrays stay numpy arrays).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytimely.dataflow.capability import Capability
from pytimely.dataflow.channels import Broadcast
from pytimely.dataflow.operators.event_stream import (
    MAX_FRAME,
    Binding,
    Event,
    EventReader,
    EventWriter,
    FileEventReader,
    FileEventWriter,
    SocketEventWriter,
    read_binding,
)
from pytimely.dataflow.state import Log, declare
from pytimely.errors import CapabilityError, CorruptEventStreamError, EventStreamError, MembershipError

if TYPE_CHECKING:
    from pytimely.dataflow.scope import Scope
    from pytimely.dataflow.stream import Stream

__all__ = [
    "capture",
    "capture_into",
    "capture_to_files",
    "capture_to_socket",
    "check_capture",
    "replay",
    "replay_events",
    "replay_files",
]

EVENT_SUFFIX = ".events"


def capture(stream: Stream[Any], into: list[tuple[Any, list[Any]]], name: str) -> list[tuple[Any, list[Any]]]:
    """Append ``(time, records)`` for every batch that reaches this worker's copy of the stream.

    Lists are copied; numpy arrays and Arrow batches are kept as they are. The list is declared state (a
    :class:`~pytimely.dataflow.state.Log` ``"batches"``): with recovery on, a resumed run's list starts with
    what the snapshot holds, so each batch is in it once. It is this worker's: gather the stream to one worker
    first (``exchange(lambda _: 0)``) to have everything in one list.
    """
    op = stream.scope.add_operator(name, [(stream, None)], 0)
    declare(op, "batches", Log(into), layout="capture/1")
    port = op.inputs[0]
    append = into.append

    def logic() -> None:
        for time, batch in port.batches():
            append((time, list(batch) if isinstance(batch, list) or not hasattr(batch, "__len__") else batch))

    op.logic = logic
    return into


def replay(scope: Scope[Any], events: Iterable[tuple[Any, Any]], name: str) -> Stream[Any]:
    """Send each captured ``(time, batch)`` again at its time, then finish."""
    op = scope.add_operator(name, [], 1)
    op.initial_caps = True
    output = op.outputs[0]
    cap = Capability(scope.minimum, output, counted=True)
    items = list(events)

    def logic() -> None:
        if not cap.valid:
            return
        for time, batch in items:
            if not cap.time <= time:
                raise CapabilityError(f"{name}: event time {time!r} is before the scope's minimum {cap.time!r}")
            if len(batch):
                output._push(time, list(batch))
        cap.drop()

    op.logic = logic
    return scope.stream(output)


# -- event streams ------------------------------------------------------------------------------------------


def _capture_id(scope: Scope[Any], name: str, before: Callable[[], None] | None) -> Stream[Any]:
    """A stream on which worker 0 sends, once, 16 random bytes every worker's capture is bound to.

    ``before`` runs on worker 0 first: nothing of this capture is written anywhere until the id arrives.
    """
    op = scope.add_operator(f"{name} id", [], 1)
    op.initial_caps = True
    output = op.outputs[0]
    cap = Capability(scope.minimum, output, counted=True)

    def logic() -> None:
        if not cap.valid:
            return
        if scope.index == 0:
            if before is not None:
                before()
            output._push(scope.minimum, [os.urandom(16)])
        cap.drop()

    op.logic = logic
    return scope.stream(output)


def capture_into(
    stream: Stream[Any],
    open_writer: Callable[[Binding], EventWriter],
    name: str,
    *,
    before: Callable[[], None] | None = None,
) -> None:
    """Write this worker's messages and frontier changes to ``open_writer(binding)``; end when the stream does.

    The :class:`Binding` names the capture (an id worker 0 draws and broadcasts), this worker's index and the
    count of workers, so every stream of one capture says it belongs to it. ``before`` runs on worker 0 before
    the id goes out, so before any worker opens its writer (``capture_to_files`` clears the folder there).
    """
    scope = stream.scope
    if scope.index >= scope.peers:
        raise MembershipError(
            f"{name}: worker {scope.index} joined the computation after it started, and a capture is bound to the "
            f"{scope.peers} workers it started with: capture from a dataflow built before processes join"
        )
    ident = _capture_id(scope, name, before)
    op = scope.add_operator(name, [(stream, None), (ident, Broadcast())], 0)
    op.notify = True
    port, ids = op.inputs
    # What the reader assumes before the first progress event: the frontier is the scope's minimum.
    recorded: set[Any] = {scope.minimum}
    writers: list[EventWriter] = []
    open_ = [True]

    def logic() -> None:
        if not writers:
            capture = next((batch[0] for _, batch in ids.batches() if len(batch)), None)
            if capture is None:
                return  # the records wait in the port until the capture has its id
            writers.append(open_writer(Binding(bytes(capture), scope.index, scope.peers)))
        for _ in ids.batches():
            pass
        writer = writers[0]
        if not open_[0]:
            for _ in port.batches():
                pass
            return
        for time, batch in port.batches():
            writer.write("messages", (time, list(batch) if isinstance(batch, list) else batch))
        now = set(port.frontier.frontier_elements())
        if now != recorded:
            changes = [(t, 1) for t in now - recorded] + [(t, -1) for t in recorded - now]
            writer.write("progress", changes)
            recorded.clear()
            recorded.update(now)
        if not now:
            writer.write("end", None)
            writer.close()
            open_[0] = False

    op.logic = logic


def _captured_files(folder: Path) -> list[Path]:
    """The files of a capture in ``folder``, finished or not."""
    return sorted([*folder.glob(f"*{EVENT_SUFFIX}"), *folder.glob(f"*{EVENT_SUFFIX}.partial")])


def capture_to_files(stream: Stream[Any], directory: str | os.PathLike[str], secret: bytes | None, name: str) -> None:
    """Each worker writes ``directory/worker-NNNN.events`` (named so only once complete); see ``replay_files``.

    The capture replaces whatever capture the folder held: worker 0 removes its ``.events`` files (finished or
    not) before any worker of this capture writes, and every file is bound to this capture.
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)

    def clear() -> None:
        for old in _captured_files(folder):
            with contextlib.suppress(FileNotFoundError):
                old.unlink()

    capture_into(
        stream,
        lambda b: FileEventWriter(folder / f"worker-{b.index:04d}{EVENT_SUFFIX}", secret=secret, binding=b),
        name,
        before=clear,
    )


def capture_to_socket(stream: Stream[Any], address: tuple[str, int], secret: bytes, timeout: float, name: str) -> None:
    """Each worker connects to the replaying process at ``address`` and sends its events, authenticated."""
    capture_into(stream, lambda b: SocketEventWriter.connect(address, secret, binding=b, timeout=timeout), name)


class _Replayed:
    """The counts of the frontiers of the readers one replaying worker holds, and a capability per time."""

    def __init__(self, readers: Sequence[EventReader], minimum: Any, cap: Capability[Any]) -> None:
        self.readers = list(readers)
        self.own: list[dict[Any, int]] = [{minimum: 1} for _ in self.readers]
        self.counts: dict[Any, int] = {minimum: len(self.readers)} if self.readers else {}
        self.caps: dict[Any, Capability[Any]] = {minimum: cap} if self.readers else {}
        if not self.readers:
            cap.drop()

    def cap_for(self, time: Any, source: str) -> Capability[Any]:
        for t, cap in self.caps.items():
            if t <= time:
                return cap
        raise CorruptEventStreamError(
            f"event stream {source}: an event at {time!r}, which its captured frontier had already passed",
            source=source,
        )

    def progress(self, i: int, changes: list[tuple[Any, int]]) -> None:
        source = self.readers[i].name
        own = self.own[i]
        # Additions first: a new frontier element is minted from a capability the old elements still hold.
        for t, diff in sorted(changes, key=lambda c: -c[1]):
            own[t] = own.get(t, 0) + diff
            if own[t] < 0:
                raise CorruptEventStreamError(f"event stream {source}: its frontier lost {t!r} it never had")
            if own[t] == 0:
                del own[t]
            count = self.counts.get(t, 0) + diff
            if count > 0 and t not in self.caps:
                self.caps[t] = self.cap_for(t, source).delayed(t)
            if count == 0:
                del self.counts[t]
                self.caps.pop(t).drop()
            else:
                self.counts[t] = count

    def ended(self, i: int) -> None:
        if self.own[i]:
            raise CorruptEventStreamError(
                f"event stream {self.readers[i].name} ended with its frontier still at {sorted(self.own[i])!r}",
                source=self.readers[i].name,
            )


def replay_events(scope: Scope[Any], readers: Sequence[EventReader], *, name: str = "replay_events") -> Stream[Any]:
    """Replay ``readers`` (this worker's share of the captured workers) with their messages and progress."""
    op = scope.add_operator(name, [], 1)
    op.initial_caps = True
    output = op.outputs[0]
    state = _Replayed(readers, scope.minimum, Capability(scope.minimum, output, counted=True))
    info = scope._info(op)
    live = list(range(len(state.readers)))
    queued: list[deque[Event]] = [deque() for _ in state.readers]

    def logic() -> None:
        for i in list(live):
            reader, queue = state.readers[i], queued[i]
            if not queue:
                queue.extend(reader.poll())
            # Up to one progress event per reader and step: downstream sees each frontier the capture saw.
            while queue:
                kind, body = queue.popleft()
                if kind == "messages":
                    time, batch = body
                    state.cap_for(time, reader.name)  # a capability at or before ``time`` is held
                    if len(batch):
                        output._push(time, batch)
                elif kind == "progress":
                    state.progress(i, body)
                    break
                else:
                    state.ended(i)
                    live.remove(i)
        if live:
            info.activate()

    op.logic = logic
    return scope.stream(output)


_WORKER_FILE = re.compile(r"worker-(\d+)" + re.escape(EVENT_SUFFIX))


def check_capture(files: Sequence[Path], bindings: Sequence[Binding], name: str) -> None:
    """:class:`CorruptEventStreamError` unless ``files`` (with their bindings) are every stream of one capture."""
    for path, b in zip(files, bindings, strict=True):
        named = _WORKER_FILE.fullmatch(path.name)
        if named is not None and int(named.group(1)) != b.index:
            raise CorruptEventStreamError(
                f"{name}: {path} is named for worker {int(named.group(1))} but holds the stream of {b}: a copied "
                "or renamed file",
                source=str(path),
            )
    first, b0 = files[0], bindings[0]
    for path, b in zip(files, bindings, strict=True):
        if b.capture != b0.capture:
            raise CorruptEventStreamError(
                f"{name}: {path} belongs to capture {b.capture.hex()[:8]}, and {first} to capture "
                f"{b0.capture.hex()[:8]}: a folder holds one capture (left over from another run?)",
                source=str(path),
            )
    seen: dict[int, Path] = {}
    for path, b in zip(files, bindings, strict=True):
        if b.index in seen:
            raise CorruptEventStreamError(
                f"{name}: {seen[b.index]} and {path} are both the stream of worker {b.index}: one is a copy",
                source=str(path),
            )
        seen[b.index] = path
    if b0.count != len(files):
        missing = sorted(set(range(b0.count)) - set(seen))
        raise CorruptEventStreamError(
            f"{name}: capture {b0.capture.hex()[:8]} was written by {b0.count} workers, and the folder holds "
            f"{len(files)} of its streams" + (f" (worker {missing[0]}'s is missing)" if missing else ""),
            source=str(first),
        )


def replay_files(
    scope: Scope[Any],
    directory: str | os.PathLike[str],
    *,
    secret: bytes | None = None,
    name: str = "replay_files",
    max_frame: int = MAX_FRAME,
) -> Stream[Any]:
    """Replay the capture in ``directory``; worker ``j`` of ``n`` reads the streams of captured workers ``j, j+n, ...``.

    Every ``*.events`` file's header is checked first (see :func:`check_capture`): the files must be every
    stream of one capture, each under its own worker's name. With ``secret``, a file not sealed with it is
    refused before anything in it is unpickled; without, the files are trusted like code.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise EventStreamError(f"{name}: {folder} is not a directory of captured events", source=str(folder))
    partial = sorted(folder.glob(f"*{EVENT_SUFFIX}.partial"))
    if partial:
        raise EventStreamError(
            f"{name}: {partial[0]} is an unfinished capture (its dataflow did not end); replay only a complete one",
            source=str(partial[0]),
        )
    files = sorted(folder.glob(f"*{EVENT_SUFFIX}"))
    if not files:
        raise EventStreamError(f"{name}: no {EVENT_SUFFIX} files in {folder}", source=str(folder))
    bindings = [read_binding(f, secret=secret) for f in files]
    check_capture(files, bindings, name)
    order = sorted(range(len(files)), key=lambda i: bindings[i].index)
    mine = order[scope.index :: scope.peers]
    readers: list[EventReader] = []
    try:
        for i in mine:
            readers.append(FileEventReader(files[i], secret=secret, max_frame=max_frame, expect=bindings[i]))
    except BaseException:
        for reader in readers:
            reader.close()
        raise
    return replay_events(scope, readers, name=name)
