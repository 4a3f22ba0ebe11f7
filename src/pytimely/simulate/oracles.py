"""What is checked while a simulation runs: the model's safety property, frontiers, output, memory.

An :class:`Observer` is told, by *watch* operators placed in a workload's
dataflows (:func:`watch`), every batch each worker takes and each frontier it
sees, as it happens; it is shared by every simulated process (they run in one
Python process), so it sees the whole system at once:

* **Safe** (seed ``000_306a8e6bd5c43d47.txt``, ``Safe`` of :mod:`pytimely.verify.combined`): no record is
  ever taken at a time that some worker's input frontier at the same operator has already passed. A frontier
  at an operator's input covers every worker's records on their way to that operator, wherever they are, so
  once one worker's frontier has passed ``t`` no record at ``t`` may reach the operator on any worker;
* **no frontier goes back**: each worker's frontier at each watched input only moves forward;
* **exact output** (:func:`compare`): the output of a run that completed equals the reference, record for
  record and time for time; a run that failed produced nothing the reference does not have;
* **bounded memory** (:func:`memory_bound`): what a process queued for a peer and holds received but untaken
  stays within its flow-control windows.

The predicates are those of the reference models: a time is passed by a frontier when no element of the
frontier is ``<=`` it (``implied_frontier``'s order in :mod:`pytimely.verify`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytimely.config import Config
    from pytimely.dataflow.capability import Capability
    from pytimely.dataflow.operator import OperatorInfo
    from pytimely.dataflow.ports import InputPort, OutputPort
    from pytimely.dataflow.stream import Stream

__all__ = ["Observer", "Violation", "compare", "memory_bound", "passed", "watch"]


@dataclass(frozen=True, slots=True)
class Violation:
    """A property that failed: which, what was seen, when (simulated seconds)."""

    property: str
    detail: str
    at: float

    def __str__(self) -> str:
        return f"{self.property}: {self.detail} (at {self.at:.6f} s)"


def passed(frontier: Iterable[Any], t: Any) -> bool:
    """Whether ``frontier`` has passed time ``t``: none of its elements is ``<= t``."""
    return not any(f <= t for f in frontier)


def _behind(new: Iterable[Any], old: Iterable[Any]) -> bool:
    """Whether frontier ``new`` is behind ``old``: some element of ``new`` is at a time ``old`` has passed."""
    old = list(old)
    return any(passed(old, e) for e in new)


class Observer:
    """The whole system's view of every watched operator: frontiers seen and batches taken, checked as they come."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._frontiers: dict[tuple[int, str], dict[int, list[Any]]] = {}
        """Per (attempt, watch point): each worker's latest frontier there."""
        self.violations: list[Violation] = []
        self.takes = 0
        """Batches checked against every worker's frontier."""
        self.attempt = 0
        """The run of the computation under way (a run restarted after a failure is a new attempt)."""

    def _violate(self, prop: str, detail: str) -> None:
        self.violations.append(Violation(prop, detail, self._now()))

    def took(self, point: str, worker: int, t: Any, records: int) -> None:
        """Worker ``worker`` took ``records`` records at time ``t`` at ``point``."""
        self.takes += 1
        seen = self._frontiers.get((self.attempt, point))
        if not seen:
            return
        for other, frontier in seen.items():
            if passed(frontier, t):
                self._violate(
                    "Safe",
                    f"worker {worker} took {records} record(s) at time {t!r} at {point!r} after worker {other}'s "
                    f"frontier there had passed it ({frontier!r})",
                )
                return

    def frontier(self, point: str, worker: int, elements: list[Any]) -> None:
        """Worker ``worker`` sees ``elements`` as its input frontier at ``point``."""
        seen = self._frontiers.setdefault((self.attempt, point), {})
        before = seen.get(worker)
        if before is not None and before != elements and _behind(elements, before):
            self._violate(
                "FrontierMonotone",
                f"worker {worker}'s frontier at {point!r} went back from {before!r} to {elements!r}",
            )
        seen[worker] = elements


def watch(stream: Stream[Any], observer: Observer, point: str) -> Stream[Any]:
    """``stream`` passed through an operator that tells ``observer`` what it takes and the frontier it sees."""
    worker = stream.scope.index

    def constructor(cap: Capability[Any], info: OperatorInfo) -> Callable[[InputPort[Any, Any], Any], None]:
        def logic(port: InputPort[Any, Any], output: OutputPort[Any, Any]) -> None:
            if cap.valid:
                cap.drop()
            for incap, batch in port:
                observer.took(point, worker, incap.time, len(batch))
                output.give(incap, batch)
            observer.frontier(point, worker, port.frontier.frontier_elements())

        return logic

    return stream.unary(constructor, name=f"watch {point}")


def compare(
    got: Mapping[Any, Counter[Any]], want: Mapping[Any, Counter[Any]], *, complete: bool
) -> str | None:
    """What differs between output ``got`` and reference ``want`` (per time, a multiset of records), or ``None``.

    ``complete``: the run finished, so ``got`` must equal ``want``; otherwise it may lack records but hold none
    the reference does not (every record at most as often as there).
    """
    for t in sorted(set(got) | set(want), key=repr):
        have, need = got.get(t, Counter()), want.get(t, Counter())
        extra = have - need
        if extra:
            sample = sorted(extra.items(), key=repr)[:3]
            return f"at time {t!r} the output holds {sum(extra.values())} record(s) the reference does not: {sample}"
        if complete:
            missing = need - have
            if missing:
                sample = sorted(missing.items(), key=repr)[:3]
                return f"at time {t!r} the output lacks {sum(missing.values())} record(s) of the reference: {sample}"
    return None


def memory_bound(process: int, stats: Mapping[str, Any], config: Config) -> str | None:
    """What process ``process`` held beyond its flow-control bounds (from its communication ``stats``), or ``None``.

    A process reads from its peers only while less than ``recv_window + send_window`` is untaken (plus one read),
    and a worker queues data for a peer only while less than ``send_window`` is queued (plus what one step adds).
    """
    slack = 1 << 20
    hard = config.recv_window + config.send_window + slack
    held = int(stats.get("max_unconsumed", 0))
    if held > hard:
        return f"process {process} held {held} bytes received and not taken (bound {hard})"
    for peer, link in stats.get("links", {}).items():
        queued = int(link.get("max_queued", 0))
        if queued > config.send_window + 64 * slack:
            return f"process {process} queued {queued} bytes for process {peer} (send window {config.send_window})"
    return None
