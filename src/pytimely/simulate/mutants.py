"""Known-bad variants of the runtime, each one bug put back on purpose: the simulator must catch every one.

A mutant is applied for the length of a simulation (:func:`applied`) by swapping one function of the
runtime for a broken one, and put back after; nothing in the runtime knows of mutants. Each names the
workloads and faults it can show under, so ``pytimely simulate --mutant NAME`` runs those:

``mint-clone``
    A bootstrap server gives a newcomer a copy of its capability *at the same time* it holds (the minting race
    of issue 15), instead of one strictly later (seed ``000_306a8e6bd5c43d47.txt``, Fig. 4's ``perf_op``):
    a member can see the time vacant while the server still holds it.
``skip-sequence-check``
    The frame decoder believes whatever sequence number a frame carries: a duplicated frame is delivered twice,
    a lost one leaves a gap unnoticed (seed ``003_f357c44874202187.txt``: a datagram in exactly one place).
``output-before-manifest``
    Worker 0 commits an epoch's manifest, and with it the output its capture holds, as soon as its own part is
    written, before every worker's part is in: a run killed then resumes from a snapshot missing the others'
    state of that epoch.
``stale-bootstrap-range``
    A bootstrap server's state claims one more batch of each sender than its counts hold, so the newcomer asks
    for, and is answered with, ranges that start one batch late (seed ``002_640294948a1fdfd3.txt``, §4).
``leave-drops-bins``
    A leaving worker drops the state of the bins it gives away instead of shipping it to their new owners.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MUTANTS", "Mutant", "applied"]

_SEQ = struct.Struct("<Q")
_SEQ_AT = 20
"""Where a frame header's ``seq`` field starts (see :mod:`pytimely.communication.frame`)."""


@dataclass(frozen=True, slots=True)
class Mutant:
    """A bug put back: what it breaks, where it shows, and how it is put in."""

    name: str
    doc: str
    workloads: tuple[str, ...]
    faults: frozenset[str]
    patch: Callable[[contextlib.ExitStack], None]


def _swap(stack: contextlib.ExitStack, owner: Any, name: str, replacement: Any) -> None:
    """Set ``owner.name`` to ``replacement`` until ``stack`` closes."""
    original = getattr(owner, name)
    setattr(owner, name, replacement)
    stack.callback(setattr, owner, name, original)


def _mint_clone(stack: contextlib.ExitStack) -> None:
    from pytimely.order import sort_key
    from pytimely.progress import bootstrap

    def mint_time(held: Any) -> Any:
        times = list(held)
        return min(times, key=sort_key) if times else None

    _swap(stack, bootstrap, "mint_time", mint_time)


def _skip_sequence_check(stack: contextlib.ExitStack) -> None:
    from pytimely.communication.frame import FrameDecoder

    read_header = FrameDecoder._read_header

    def believing(self: FrameDecoder) -> None:
        # Whatever number the frame says is the one expected.
        (self.expected,) = _SEQ.unpack_from(self._buf, self._start + _SEQ_AT)
        read_header(self)

    _swap(stack, FrameDecoder, "_read_header", believing)


class _NeverPassed:
    """A frontier that has passed no epoch (but is empty when the real one is)."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def less_equal(self, t: Any) -> bool:
        return False

    def is_empty(self) -> bool:
        return bool(self._real.is_empty())


class _Port:
    def __init__(self, real: Any) -> None:
        self.frontier = _NeverPassed(real.frontier)


def _output_before_manifest(stack: contextlib.ExitStack) -> None:
    from pytimely.recovery.runtime import WorkerRecovery

    commit_reported = WorkerRecovery._commit_reported

    def eager(self: WorkerRecovery) -> bool:
        port = self._port
        self._port = _Port(port)  # type: ignore[assignment]
        try:
            return commit_reported(self)
        finally:
            self._port = port

    _swap(stack, WorkerRecovery, "_commit_reported", eager)


def _stale_bootstrap_range(stack: contextlib.ExitStack) -> None:
    from pytimely.progress.bootstrap import BootstrapServer, ProgressState

    state = BootstrapServer.state

    def stale(self: BootstrapServer, newcomer: int, updates: Any, receiver: Any, minted: Any = (), own: Any = None
              ) -> ProgressState:
        taken = state(self, newcomer, updates, receiver, minted, own)
        ahead = {sender: n + 1 for sender, n in taken.included.items() if n > 0}
        if not ahead:
            return taken
        log = self._logs[newcomer]
        log.start.update(ahead)
        return ProgressState(taken.server, taken.updates, {**taken.included, **ahead}, taken.minted)

    _swap(stack, BootstrapServer, "state", stale)


def _leave_drops_bins(stack: contextlib.ExitStack) -> None:
    from pytimely.dataflow.operators import state_machine

    held = state_machine._Held
    extract = held.extract

    def dropping(self: Any, leaving: set[int], owners: Sequence[int]) -> dict[int, list[Any]]:
        moved = extract(self, leaving, owners)
        router = self._router
        if router is not None and router.index not in owners:
            return {}  # the worker leaves: what it held is gone with it
        return moved

    _swap(stack, held, "extract", dropping)


MUTANTS: dict[str, Mutant] = {
    m.name: m
    for m in (
        Mutant(
            "mint-clone",
            "a newcomer's capability copied at the time its server holds (the old minting race)",
            ("joins", "rescaled"),
            frozenset({"join", "delay", "slow", "buggify"}),
            _mint_clone,
        ),
        Mutant(
            "skip-sequence-check",
            "frames believed whatever sequence number they carry (duplicates and gaps go unnoticed)",
            ("random",),
            frozenset({"duplicate", "loss", "delay"}),
            _skip_sequence_check,
        ),
        Mutant(
            "output-before-manifest",
            "an epoch's output committed with worker 0's part alone, before every worker's part is in",
            ("recovered",),
            frozenset({"kill", "delay", "slow"}),
            _output_before_manifest,
        ),
        Mutant(
            "stale-bootstrap-range",
            "a bootstrap server's state claims one batch more than it holds; its ranges start one batch late",
            ("joins", "rescaled"),
            frozenset({"join", "delay"}),
            _stale_bootstrap_range,
        ),
        Mutant(
            "leave-drops-bins",
            "a leaving worker drops the state of the bins it gives away",
            ("rescaled",),
            frozenset({"join", "leave", "delay"}),
            _leave_drops_bins,
        ),
    )
}
"""The known-bad variants, by name."""


@contextlib.contextmanager
def applied(name: str | None) -> Iterator[None]:
    """The runtime with mutant ``name`` put in (``None``: as it is), until the block ends."""
    with contextlib.ExitStack() as stack:
        if name is not None:
            MUTANTS[name].patch(stack)
        yield
