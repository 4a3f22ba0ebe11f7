"""Clocks: a watermark made from the data (:class:`EventClock`) or from the wall clock (:class:`SystemClock`).

Without a clock, a window's watermark is its input's frontier: the input's owner advances it by hand. A clock
takes that job. It is an operator between the records and the windows (``clock=`` on ``tumbling``, ``sliding``,
``session`` and ``join``) that sends every record on at a dataflow time *of event time*, the watermark, and
holds its capability there; the windows after it close when every worker's watermark has passed them. Its
output is disconnected from its input's timestamps: the watermark, not the input's epochs, is what holds
downstream frontiers back, and when the input ends the clock lets go (every open window closes).

**Event clock** (``EventClock(delay, idle=None)``; Flink's ``forBoundedOutOfOrderness``, Bytewax's
``EventClock``): each worker's clock takes the records reaching it in order (from a source on the same
worker: the order they were sent in). Its watermark is the highest event time it has seen less ``delay``
(never below the scope's minimum, never going back). A record whose event time is below the watermark as it
arrives is **late**: it goes to ``late=`` (dropped and counted, or sent on the side stream) and no window
sees it. Every other record is sent on at the watermark, which is at or before its event time, so the windows
take it. A window ``[start, end)`` closes once every worker's watermark is past ``end - 1``. All of this
depends only on the order each worker's clock receives its records, not on scheduling: the same input in the
same order gives the same late records and the same windows on any number of workers.

With ``idle`` (seconds), a worker whose clock has had no record for that long stops holding windows open: its
watermark moves past the highest event time any worker's clock has seen (each worker reports its highest to
every other), so a quiet worker follows the busy ones (Flink's ``withIdleness``), and when every worker is
quiet every window that ends at or before that highest time closes (the window holding it stays open: a
record may still come for it). A record a worker receives after that is judged against the moved watermark.
This is the one part that depends on the wall clock.

**System clock** (``SystemClock(unit=1.0)``; Bytewax's ``SystemClock``, Flink's processing time): each record
is stamped with the wall-clock time it reaches the clock, in ``unit`` seconds since the Unix epoch, and sent on
at that time; windows then group records by it (their ``time`` is the dataflow time). Nothing is late. The
clock wakes at least every ``unit`` seconds (and no more than 100 times a second) to move its watermark,
so windows close as time passes even when no record comes.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytimely.container as container
from pytimely.dataflow.operators.fields import Field, check, column, column_errors, reader, rows
from pytimely.dataflow.operators.windowing import event_times, not_an_int
from pytimely.errors import InvalidArgument

if TYPE_CHECKING:
    from pytimely.dataflow.stream import Stream

__all__ = ["EventClock", "EventWatermark", "SystemClock", "clocked", "event_clock", "system_clock"]


@dataclass(frozen=True, slots=True)
class EventClock:
    """The watermark is the highest event time seen less ``delay``; ``idle`` seconds without records stop a
    worker from holding it back (module doc). ``now`` is the clock ``idle`` is measured with."""

    delay: int = 0
    idle: float | None = None
    now: Callable[[], float] = field(default=_time.monotonic, repr=False)


@dataclass(frozen=True, slots=True)
class SystemClock:
    """Records are stamped with the wall-clock time they arrive, in ``unit`` seconds since the Unix epoch."""

    unit: float = 1.0
    now: Callable[[], float] = field(default=_time.time, repr=False)


def _check(clock: Any, name: str) -> None:
    if isinstance(clock, EventClock):
        if type(clock.delay) is not int or clock.delay < 0:
            raise InvalidArgument(f"{name!r}: an event clock's delay must be an int >= 0, got {clock.delay!r}")
        if clock.idle is not None and not (isinstance(clock.idle, int | float) and clock.idle > 0):
            raise InvalidArgument(f"{name!r}: an event clock's idle must be seconds > 0 or None, got {clock.idle!r}")
    elif isinstance(clock, SystemClock):
        if not (isinstance(clock.unit, int | float) and clock.unit > 0):
            raise InvalidArgument(f"{name!r}: a system clock's unit must be seconds > 0, got {clock.unit!r}")
    else:
        raise InvalidArgument(f"{name!r}: clock must be an EventClock or a SystemClock, got {clock!r}")
    if not callable(clock.now):
        raise InvalidArgument(f"{name!r}: a clock's now must be a function giving seconds, got {clock.now!r}")


class EventWatermark:
    """One worker's event clock without I/O: feed it event times in arrival order and the wall-clock time.

    ``watermark`` starts at ``minimum`` and never goes back; ``highest`` is the highest event time seen (None
    before any); ``reported`` the highest any worker reported.
    """

    def __init__(self, delay: int, idle: float | None, minimum: int, now: float) -> None:
        self.delay = delay
        self.idle = idle
        self.watermark = minimum
        self.highest: int | None = None
        self.reported: int | None = None
        self.heard = now
        """When this worker's clock last got a record (the start, before any)."""

    def late(self, xs: Any, now: float) -> Any:
        """Take a batch of event times (an int64 array) in order; return which were late as a bool array."""
        import numpy as np

        if not len(xs):
            return np.zeros(0, dtype=bool)
        self.heard = now
        low = np.iinfo(np.int64).min + self.delay
        start = low if self.highest is None else self.highest
        running = np.maximum.accumulate(np.concatenate(([start], xs)))
        before = np.maximum(running[:-1] - self.delay, self.watermark)
        late = xs < before
        self.highest = int(running[-1])
        self._raise(self.highest - self.delay)
        self.report(self.highest)
        return late

    def take(self, x: int, now: float) -> bool:
        """Take one event time; return whether it was late."""
        self.heard = now
        late = x < self.watermark
        if self.highest is None or x > self.highest:
            self.highest = x
            self._raise(x - self.delay)
            self.report(x)
        return late

    def report(self, highest: int) -> None:
        """A worker (this one or another) has seen event times up to ``highest``."""
        if self.reported is None or highest > self.reported:
            self.reported = highest

    def quiet(self, now: float) -> float | None:
        """Move the watermark past every reported event time if no record came for ``idle`` seconds; return the
        seconds left until that happens (None: it has, or there is no idle timeout)."""
        if self.idle is None:
            return None
        left = self.heard + self.idle - now
        if left > 0:
            return left
        if self.reported is not None:
            self._raise(self.reported + 1)
        return None

    def _raise(self, to: int) -> None:
        if to > self.watermark:
            self.watermark = to


def event_clock(
    stream: Stream[Any], clock: EventClock, time: Field, late: Any, name: str
) -> tuple[Stream[Any], Stream[Any] | None]:
    """The records of ``stream`` at the event clock's watermark, and its late records (with a side output)."""
    from pytimely.dataflow.channels import Broadcast
    from pytimely.dataflow.operators.windowing import SideOutput

    _check(clock, name)
    check(time, "time")
    if time is None:
        raise InvalidArgument(f"{name!r}: an event clock reads each record's event time: give time=")
    scope = stream.scope
    if type(scope.minimum) is not int:
        raise InvalidArgument(f"{name!r}: an event clock needs integer timestamps, not {type(scope.minimum).__name__}")
    side = isinstance(late, SideOutput)
    inputs: list[tuple[Stream[Any], Any]] = [(stream, None)]
    if clock.idle is not None:
        # Each worker's highest event time, reported to every worker (idle clocks follow it).
        highest = stream.map_batch(lambda b: _highest(b, time), name=f"{name}.highest")
        inputs.append((highest, Broadcast()))
    outputs = 2 if side else 1
    # No path from the inputs' timestamps to the outputs: the clock holds its own capability at the watermark.
    op = scope.add_operator(f"{name}.clock", inputs, outputs, summary={})
    op.notify = True
    # Recovery cuts snapshots at epochs; the clock's output runs on event time, so no epoch cuts the windows after
    # it consistently with it (docs/recovery.md, "Clocks"): a job with a clock is refused before any snapshot.
    op.undeclared_state = "its watermark, and sends records on at event times rather than epochs,"
    ports, outs = op.inputs, op.outputs
    from pytimely.dataflow.capability import Capability

    caps = [Capability(scope.minimum, out, counted=True) for out in outs]
    op.initial_caps = True
    mark = EventWatermark(clock.delay, clock.idle, scope.minimum, clock.now())
    alarm = scope._info(op).sync_activator() if clock.idle is not None else None
    from pytimely.dataflow.activate import Alarm

    clocked = _Clocked(mark, clock.now, time, caps, outs, late if not side else None)
    timer = Alarm(alarm) if alarm is not None else None
    op.logic = lambda: clocked.step(ports, timer)
    late_stream = scope.stream(outs[1]) if side else None
    return scope.stream(outs[0]), late_stream


class _Clocked:
    """One worker's event clock: sends records on at its watermark, and its late ones aside."""

    def __init__(
        self, mark: EventWatermark, now: Any, time: Field, caps: list[Any], outs: list[Any], drop: Any
    ) -> None:
        self.mark = mark
        self.now = now
        self.time = time
        self.caps = caps
        self.outs = outs
        self.drop = drop
        """The :class:`DropLate` counting late records, or ``None`` when they go to the side output."""

    def step(self, ports: list[Any], timer: Any) -> None:
        """Send what arrived, take the other workers' highest event times, and move the watermark."""
        mark, caps = self.mark, self.caps
        if not caps[0].valid:
            for port in ports:
                port.batches()
            return
        for _, batch in ports[0].batches():
            self.send(batch)
        if len(ports) > 1:
            for _, reports in ports[1].batches():
                for h in reports:
                    mark.report(h)
            left = mark.quiet(self.now())
            if left is not None and timer is not None:
                timer.arm(left)
        if all(port.frontier.is_empty() for port in ports):
            for cap in caps:
                cap.drop()
            if timer is not None:
                timer.close()
            return
        for cap in caps:
            if cap.time < mark.watermark:
                cap.downgrade(mark.watermark)

    def send(self, batch: Any) -> None:
        """Send a batch's on-time records at the watermark; its late ones aside."""
        time, mark, now = self.time, self.mark, self.now
        if type(batch) is not list:
            xs = event_times(batch, time)
            if xs is not None:
                late_mask = mark.late(xs, now())
                if late_mask.any():
                    import numpy as np

                    lost = container.take(batch, np.flatnonzero(late_mask))
                    on_time = container.take(batch, np.flatnonzero(~late_mask))
                    self._late(lost)
                    batch = on_time
                if container.length(batch):
                    self.outs[0].give(self.caps[0], batch)
                return
        get = reader(batch, time)
        assert get is not None
        kept: list[Any] = []
        lost_records: list[Any] = []
        t = now()
        with column_errors(batch, time):
            for r in rows(batch):
                x = get(r)
                if type(x) is not int:
                    raise not_an_int(x, r, time, batch)
                (lost_records if mark.take(x, t) else kept).append(r)
        if lost_records:
            self._late(lost_records)
        if kept:
            self.outs[0].give(self.caps[0], kept)

    def _late(self, records: Any) -> None:
        if self.drop is None:
            self.outs[1].give(self.caps[1], records)
        else:
            self.drop.dropped += container.length(records)


def _highest(batch: Any, time: Field) -> list[int]:
    """The highest event time of a batch, as a one-record list (empty for an empty batch)."""
    if type(batch) is not list:
        xs = column(batch, time)
        if xs is not None and len(xs) and xs.dtype.kind in "iu":
            return [int(xs.max())]
    get = reader(batch, time)
    assert get is not None
    found = [x for x in map(get, rows(batch)) if type(x) is int]
    return [max(found)] if found else []


def system_clock(stream: Stream[Any], clock: SystemClock, name: str) -> Stream[Any]:
    """The records of ``stream`` at the wall-clock time they reach the clock, in ``clock.unit`` seconds."""
    _check(clock, name)
    scope = stream.scope
    if type(scope.minimum) is not int:
        raise InvalidArgument(f"{name!r}: a system clock needs integer timestamps, not {type(scope.minimum).__name__}")
    op = scope.add_operator(f"{name}.clock", [(stream, None)], 1, summary={})
    op.notify = True
    op.undeclared_state = "records re-timed by the wall clock, a timeline replayed records cannot follow,"
    port, out = op.inputs[0], op.outputs[0]
    from pytimely.dataflow.activate import Alarm
    from pytimely.dataflow.capability import Capability

    cap = Capability(scope.minimum, out, counted=True)
    op.initial_caps = True
    unit, now = clock.unit, clock.now
    timer = Alarm(scope._info(op).sync_activator())
    tick = min(max(unit, 0.01), 1.0)

    minimum: int = scope.minimum

    def stamp() -> int:
        return max(int(now() // unit), minimum)

    def logic() -> None:
        if not cap.valid:
            port.batches()
            return
        t = stamp()
        if t > cap.time:
            cap.downgrade(t)
        for _, batch in port.batches():
            out.give(cap, batch)
        if port.frontier.is_empty():
            cap.drop()
            timer.close()
            return
        timer.arm(tick)

    op.logic = logic
    return scope.stream(out)


def clocked(stream: Stream[Any], clock: Any, time: Field, late: Any, name: str) -> tuple[Stream[Any], Field, Any]:
    """``(records at the clock's watermark, the time field windows read after it, the clock's late records)``."""
    _check(clock, name)
    if isinstance(clock, SystemClock):
        if time is not None:
            raise InvalidArgument(
                f"{name!r}: a system clock stamps each record with the time it arrives; leave time= out"
            )
        return system_clock(stream, clock, name), None, None
    on_time, late_stream = event_clock(stream, clock, time, late, name)
    return on_time, time, late_stream
