"""``collect``: the records of each time (or of each window of epochs) gathered into one, per key or in all.

Keyed (records are ``(key, value)`` pairs, or rows of a two-column numpy or Arrow batch): ``(key, [values])`` per
key that had records, sent from the key's worker (a columnar batch is grouped by key at once). Unkeyed: one record
holding everything, sent from worker 0 — a numpy array when every batch was numpy (``np.concatenate``, no
Python call per record), an Arrow table when every batch was Arrow, else a list. With ``every=n`` (integer
epochs) the window ``[k*n, (k+1)*n)`` is gathered and sent at time ``(k+1)*n - 1`` once the frontier has
passed it; without, each time on its own. Order within a collection is the order of arrival, which varies
with the worker count.

With ``every=n`` a window gathers over several epochs, so what it holds is declared state
(:mod:`pytimely.dataflow.state`), written whole at a snapshot whenever it changed: keyed, the windows by the bins
of their keys (records are then routed by bin, so a run restored on any number of workers finds a key's values
where its records arrive); unkeyed, worker 0's windows as its own value. Without ``every`` nothing outlives its
time and nothing is declared.

With ``max_size`` or ``timeout`` (keyed only; Bytewax's ``collect``) a key's values are gathered across times
instead: ``(key, [values])`` goes out as soon as the key holds ``max_size`` values (at the time of the value
that filled it), or ``timeout`` seconds of wall clock after its first value came (at the earliest epoch still
open then, or its first value's time if later), and whatever is left when the input ends goes out then, at its
first value's time. Sizes follow arrival order: the same input sent by one worker in the same order gives the
same lists. What a key gathered is declared state too (by the bins of the keys, records routed by them), with
the time of its first value; the wall clock is not: a key restored from a snapshot starts its timeout again.
A timeout fires at an epoch no pending snapshot has passed, so a snapshot holds a key's values or a capture
downstream their list, never both.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import pytimely.container as container
from pytimely.dataflow.bins import DEFAULT_BINS, binner
from pytimely.dataflow.capability import Capability
from pytimely.dataflow.channels import Exchange
from pytimely.dataflow.operators.binned import bin_exchange
from pytimely.dataflow.operators.fields import key_route
from pytimely.dataflow.operators.generic import Notificator
from pytimely.dataflow.operators.windowing import frontier_bound
from pytimely.dataflow.state import KeyedState, declare
from pytimely.errors import InvalidArgument
from pytimely.order import sort_key

if TYPE_CHECKING:
    from pytimely.dataflow.ports import InputPort, OutputPort
    from pytimely.dataflow.stream import Stream

__all__ = ["collect", "gather"]


def _to_zero(batch: Any) -> Any:
    import numpy as np

    return np.zeros(container.length(batch), dtype=np.int64)


def gather(batches: list[Any]) -> Any:
    """One collection of ``batches``: a numpy array, an Arrow table, or a list, as the batches allow."""
    return container.concat(batches)


def _group(state: dict[Any, list[Any]], batch: Any) -> None:
    """Add a batch of ``(key, value)`` pairs to ``state``: a columnar batch is split by key at once."""
    kind = container.kind_of(batch)
    if kind.columnar:
        keys = kind.numeric(batch, 0)
        distinct: list[Any] | None = None
        if keys is None:
            encoded = kind.encoded(batch, 0)
            if encoded is not None:
                keys, distinct = encoded
        if keys is not None:
            _group_columns(state, keys, distinct, kind, batch)
            return
    for k, v in kind.records(batch):
        group = state.get(k)
        if group is None:
            state[k] = [v]
        else:
            group.append(v)


def _group_columns(state: dict[Any, list[Any]], keys: Any, distinct: list[Any] | None, kind: Any, batch: Any) -> None:
    """Group by a key column (numbers, or codes into ``distinct``): one sort, then one Python step per key."""
    from pytimely.dataflow.operators.grouping import group_starts

    order, starts = group_starts(keys)
    numbers = kind.numeric(batch, 1)
    if numbers is not None:
        ordered = numbers[order].tolist()
    else:
        values = kind.values(batch, 1)
        ordered = [values[j] for j in order.tolist()]
    firsts = keys[order[starts]].tolist()
    bounds = [*starts.tolist(), len(ordered)]
    for i, k in enumerate(firsts):
        if distinct is not None:
            k = distinct[k]
        chunk = ordered[bounds[i] : bounds[i + 1]]
        group = state.get(k)
        if group is None:
            state[k] = chunk
        else:
            group.extend(chunk)


class _Windows:
    """The windows of epochs gathered and not sent yet (``window end -> gathered``), as declared state: a
    :class:`~pytimely.dataflow.state.BinnedState` by the bins of the keys when keyed, else a
    :class:`~pytimely.dataflow.state.WorkerState`; written whole whenever it changed."""

    def __init__(self, keyed: bool) -> None:
        self.keyed = keyed
        self.states: dict[Any, Any] = {}
        self.changed_since = False
        """Whether anything was gathered or sent since the last snapshot."""
        self.bins = DEFAULT_BINS
        self._find = binner(DEFAULT_BINS)
        self._reported: set[int] = set()

    def send(self, held: Capability[Any], out: OutputPort[Any, Any]) -> None:
        """Send the window that ends at ``held``'s time (its groups, or its records) and forget it."""
        self.changed_since = True
        state = self.states.pop(held.time)
        out.give(held, list(state.items()) if self.keyed else [gather(state)])
        held.drop()

    def next_change(self) -> int | None:
        """The earliest window end: the state changes there without input (the window is sent)."""
        return min(self.states) if self.states else None

    # -- WorkerState (unkeyed) ---------------------------------------------------------------------------

    def snapshot_value(self) -> dict[Any, list[Any]]:
        """Every window's batches (lists copied: gathering goes on after the snapshot)."""
        self.changed_since = False
        return {w: list(batches) for w, batches in self.states.items()}

    def restore_values(self, values: Sequence[dict[Any, list[Any]]]) -> None:
        """The windows of the old workers this worker stands in for, merged."""
        for value in values:
            for w, batches in value.items():
                self.states.setdefault(w, []).extend(batches)

    # -- BinnedState (keyed) -----------------------------------------------------------------------------

    def _bins(self) -> set[int]:
        find = self._find
        return {find(k) for groups in self.states.values() for k in groups}

    def changed(self) -> set[int]:
        """Every bin held, and every bin held before, when anything changed (the state is written whole)."""
        return self._bins() | self._reported if self.changed_since else set()

    def held(self) -> list[int]:
        """The bins of the keys with values in a pending window."""
        return sorted(self._bins())

    def snapshot(self, bins: Iterable[int]) -> dict[int, Any]:
        """Each bin's ``{window end: {key: values}}`` (``None`` for an empty one)."""
        self.changed_since = False
        find = self._find
        out: dict[int, Any] = dict.fromkeys(bins)
        for w, groups in self.states.items():
            for k, values in groups.items():
                b = find(k)
                if b in out:
                    part = out[b] = out[b] or {}
                    part.setdefault(w, {})[k] = list(values)
        return out

    def capture(self, turn: int, rewrite_every: int) -> list[tuple[tuple[int, ...], Any]]:
        """One piece for every bin held, when anything changed (a ``PiecewiseState``)."""
        if not self.changed_since:
            return []
        self.changed_since = False
        held = self._bins()
        pieces: list[tuple[tuple[int, ...], Any]] = [((b,), None) for b in sorted(self._reported - held)]
        if held:
            value = {w: {k: list(vs) for k, vs in groups.items()} for w, groups in self.states.items()}
            pieces.append((tuple(sorted(held)), value))
        self._reported = held
        return pieces

    def restore(self, bin: int, value: Any) -> None:
        """Install one bin's windows."""
        self.restore_piece((bin,), value)

    def restore_piece(self, bins: Iterable[int], value: Any) -> None:
        """Install the values of the keys of ``bins`` in ``value``."""
        if not value:
            return
        wanted, find = set(bins), self._find
        for w, groups in value.items():
            ours = {k: vs for k, vs in groups.items() if find(k) in wanted}
            if ours:
                mine = self.states.setdefault(w, {})
                for k, vs in ours.items():
                    mine.setdefault(k, []).extend(vs)
        self._reported.update(wanted)


class _WorkerWindows:
    """The unkeyed windows as a :class:`~pytimely.dataflow.state.WorkerState`."""

    def __init__(self, windows: _Windows) -> None:
        self.windows = windows

    def snapshot(self) -> dict[Any, list[Any]]:
        """Every window's batches."""
        return self.windows.snapshot_value()

    def restore(self, values: Sequence[dict[Any, list[Any]]]) -> None:
        """The old workers' windows, merged."""
        self.windows.restore_values(values)

    def next_change(self) -> int | None:
        """The earliest window end."""
        return self.windows.next_change()


def _check_settings(name: str, keyed: bool, every: int | None, max_size: int | None, timeout: float | None) -> None:
    """:class:`InvalidArgument` for settings of :func:`collect` that are out of range or do not go together."""
    if every is not None and (type(every) is not int or every < 1):
        raise InvalidArgument(f"{name}: every must be a positive int (epochs per window) or None, got {every!r}")
    if max_size is None and timeout is None:
        return
    if max_size is not None and (type(max_size) is not int or max_size < 1):
        raise InvalidArgument(f"{name}: max_size must be a positive int or None, got {max_size!r}")
    if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
        raise InvalidArgument(f"{name}: timeout must be seconds > 0 or None, got {timeout!r}")
    if not keyed or every is not None:
        raise InvalidArgument(
            f"{name}: max_size= and timeout= gather keyed values across times; not with keyed=False or every="
        )


def _window_end(t: Any, every: int, name: str) -> int:
    """The last epoch of the window of ``every`` epochs that epoch ``t`` is in."""
    if type(t) is not int:
        raise InvalidArgument(f"{name}: every= groups integer epochs; time {t!r} is not one")
    return (t // every + 1) * every - 1


def collect(
    stream: Stream[Any],
    keyed: bool,
    every: int | None,
    name: str,
    max_size: int | None = None,
    timeout: float | None = None,
    now: Callable[[], float] = _time.monotonic,
) -> Stream[Any]:
    """Gather each time's (or window's) records, per key or in all; see the module doc."""
    _check_settings(name, keyed, every, max_size, timeout)
    if max_size is not None or timeout is not None:
        return _bounded(stream, max_size, timeout, now, name)
    scope = stream.scope
    if keyed and every is not None:
        pact = bin_exchange(0, DEFAULT_BINS)  # a restored window's keys are where their records arrive
    else:
        pact = Exchange(key_route(0) if keyed else _to_zero, vectorized=True)
    op = scope.add_operator(name, [(stream, pact)], 1)
    op.notify = True
    port, out = op.inputs[0], op.outputs[0]
    windows = _Windows(keyed)
    states = windows.states
    notificator: Notificator[Any] = Notificator()
    initial: list[Capability[Any]] = []
    if every is not None:
        declare(op, "windows", windows if keyed else _WorkerWindows(windows), layout="collect/1")
        # A capability at the scope's minimum until the first step: a restored copy keeps one per window it holds.
        op.initial_caps = True
        initial.append(Capability(scope.minimum, out, counted=True))

    may_change = scope._info(op).may_change

    def logic() -> None:
        if initial:
            start = initial.pop()
            for w in states:
                notificator.notify_at(start.delayed(w))
            start.drop()
        for cap, batch in port:
            windows.changed_since = True
            w = cap.time if every is None else _window_end(cap.time, every, name)
            if w not in states:
                states[w] = {} if keyed else []
                notificator.notify_at(cap.delayed(w) if w != cap.time else cap.retain())
            if keyed:
                _group(states[w], batch)
            else:
                states[w].append(batch)
        for held in notificator.ready(port.frontier):
            if not may_change(held.time):
                # Sending a window empties it: not at an epoch after a pending snapshot's (it is run again then).
                notificator.notify_at(held)
                continue
            windows.send(held, out)

    op.logic = logic
    return scope.stream(out)


def _bounded(
    stream: Stream[Any], max_size: int | None, timeout: float | None, now: Callable[[], float], name: str
) -> Stream[Any]:
    """Per key, lists of at most ``max_size`` values, or what came within ``timeout`` seconds of the first."""
    from pytimely.dataflow.activate import Alarm

    scope = stream.scope
    # Routed by the bins of the keys: a run restored on another number of workers finds a key's values where its
    # records arrive.
    op = scope.add_operator(name, [(stream, bin_exchange(0, DEFAULT_BINS))], 1)
    op.notify = True
    op.initial_caps = True
    declared: KeyedState[Any, list[Any]] = KeyedState(DEFAULT_BINS)
    declare(op, "buffers", declared, layout="collect_bounded/1")
    alarm = Alarm(scope._info(op).sync_activator()) if timeout is not None else None
    buffers = _Buffers(op.inputs[0], op.outputs[0], declared, max_size, timeout, now)
    # A capability at the scope's minimum until the first step: a restored copy holds capabilities at its keys'
    # first values' times.
    initial = [Capability(scope.minimum, op.outputs[0], counted=True)]
    subgraph, index = scope.subgraph, op.index

    def logic() -> None:
        if initial:
            buffers.restore(initial.pop())
        buffers.absorb()
        buffers.flush_due(subgraph.fences.get(index), alarm)

    op.logic = logic
    return scope.stream(op.outputs[0])


class _Buffers:
    """One worker's bounded collect: per key, the values gathered so far, and a capability per first time."""

    def __init__(
        self,
        port: InputPort[Any, Any],
        out: OutputPort[Any, Any],
        declared: KeyedState[Any, list[Any]],
        max_size: int | None,
        timeout: float | None,
        now: Callable[[], float],
    ) -> None:
        self.port = port
        self.out = out
        self.declared = declared
        self.buffers = declared.data
        """Per key: ``[values, time of the first, wall-clock time of the first]`` (the operator's declared state)."""
        self.caps: dict[Any, list[Any]] = {}
        """Time -> ``[capability, keys whose first value is at that time]``."""
        self.max_size = max_size
        self.timeout = timeout
        self.now = now

    def hold(self, t: Any, cap: Any) -> None:
        """Count one more key whose first value is at ``t`` (a capability at ``t`` is held while any is)."""
        held = self.caps.get(t)
        if held is None:
            self.caps[t] = [cap.delayed(t), 1]
        else:
            held[1] += 1

    def release(self, t: Any) -> None:
        """Count one key fewer at ``t``; the capability goes with the last."""
        held = self.caps[t]
        held[1] -= 1
        if held[1] == 0:
            held[0].drop()
            del self.caps[t]

    def restore(self, start: Capability[Any]) -> None:
        """Hold capabilities for the restored keys (from ``start``, at the scope's minimum), then drop ``start``."""
        moment = self.now()
        for buffer in self.buffers.values():
            buffer[2] = moment  # the old run's clock means nothing here: a restored key's timeout starts again
            self.hold(buffer[1], start)
        start.drop()

    def absorb(self) -> None:
        """Take the queued batches; send the lists that reach ``max_size``."""
        buffers, max_size = self.buffers, self.max_size
        for cap, batch in self.port:
            t = cap.time
            filled: list[Any] = []
            keys: list[Any] = []
            came_or_went: list[Any] = []
            for k, v in container.records(batch):
                keys.append(k)
                buffer = buffers.get(k)
                if buffer is None:
                    buffer = buffers[k] = [[], t, self.now()]
                    came_or_went.append(k)
                    self.hold(t, cap)
                buffer[0].append(v)
                if max_size is not None and len(buffer[0]) >= max_size:
                    filled.append((k, buffer[0]))
                    del buffers[k]
                    came_or_went.append(k)
                    self.release(buffer[1])
            self.declared.touch_batch(keys, came_or_went)
            if filled:
                self.out.give(cap, filled)

    def flush_due(self, fence: int | None, alarm: Any) -> None:
        """Send the lists whose timeout passed (all of them at the end of the input); set the alarm for the next."""
        timeout, buffers = self.timeout, self.buffers
        ended = self.port.frontier.is_empty()
        if timeout is None and not ended:
            return
        moment = self.now()
        due = [k for k, b in buffers.items() if ended or moment - b[2] >= timeout]
        if due:
            self.flush(due, ended, fence)
        if alarm is not None:
            if ended:
                alarm.close()
            elif buffers:
                alarm.arm(min(b[2] for b in buffers.values()) + timeout - moment)

    def flush(self, due: list[Any], ended: bool, fence: int | None) -> None:
        """Send the buffers of ``due``: at the end of the input at their first values' times; on a timeout at the
        earliest epoch still open (no earlier than the first value's time), which a snapshot has not passed."""
        buffers = self.buffers
        now_at = None
        if not ended:
            now_at = fence if fence is not None else frontier_bound(self.port.frontier)
        by_time: dict[Any, list[Any]] = {}
        for k in sorted(due, key=lambda k: sort_key(buffers[k][1])):
            values, t, _ = buffers.pop(k)
            at = t if now_at is None or not t <= now_at else now_at
            by_time.setdefault((t, at), []).append((k, values))
        for (t, at), rows in by_time.items():
            held = self.caps[t][0]
            if at == t:
                self.out.give(held, rows)
            else:
                later = held.delayed(at)
                self.out.give(later, rows)
                later.drop()
            for _ in rows:
                self.release(t)
        self.declared.touch_batch(due, due)
