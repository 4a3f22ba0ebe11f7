"""The rescaling model's state: workers' statuses, bootstraps and leaves in progress, sequenced links and
ghost histories (:class:`State`), the bounds (:class:`RescaleConfig`), the initial states, and the helpers
every transition shares.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from itertools import product
from typing import Any, NamedTuple

from pytimely.verify import exchange as E
from pytimely.verify.mutants import RESCALE_MUTANTS, Mutant
from pytimely.verify.poset import Poset
from pytimely.verify.zmset import ZMSet, multisets_upto

OUT, JOINING, MEMBER, LEAVING, LEFT = "-", "j", "m", "l", "x"
"""A worker's status, one character per id in ``State.status``: not joined yet, bootstrapping, member, leaving, left."""

Batch = tuple[int, ZMSet[Any]]
"""A progress batch on a link: the sender's sequence number and the updates."""
Link = tuple[Batch, ...]


class Boot(NamedTuple):
    """A bootstrap in progress (§3.4): the newcomer, its server and what the newcomer has learnt so far."""

    newcomer: int
    server: int
    hello: tuple[int | None, ...]
    """Per sender: the bootstrap message at the head of its link to the newcomer (the next number), if any."""
    base: tuple[int, ...] | None
    """Per sender: how many of its batches the server's state includes (``None`` until the state arrived)."""
    pending: frozenset[tuple[int, int, int]]
    """Range requests ``(sender, lo, hi)`` the server has not answered yet."""
    filled: frozenset[int]
    """Senders whose missing range the server has answered."""
    announced: int
    """How many capabilities the server has handed to the newcomer (§6.2)."""


class Leave(NamedTuple):
    """A leave in progress (§6.1): who leaves, who inherits its capabilities, whether they were handed over."""

    leaver: int
    heir: int
    handed: bool
    dropped: ZMSet[Any]
    """Under ``leave-drops-early``: the capabilities the leaver dropped before handing its state over."""


class State(NamedTuple):
    """The exchange configuration over every id, plus membership, sequenced links and the ghosts."""

    exch: E.State
    """``caps``, ``data``, ``temp``, ``glob`` and the ghost ``vacated`` (its ``msg`` stays empty: see ``links``)."""
    status: str
    links: tuple[tuple[Link, ...], ...]
    """``links[s][r]``: the batches on their way from sender ``s`` (a worker, or an aggregate sender numbered after the
    workers) to worker ``r``, oldest first."""
    recvd: tuple[tuple[int, ...], ...]
    """``recvd[r][s]``: the number of the next batch ``r`` will apply from ``s``."""
    hist: tuple[tuple[ZMSet[Any], ...], ...]
    """``hist[s][k]``: batch ``k`` of ``s`` (what ``s`` retains; also the ghost history)."""
    total: ZMSet[Any]
    """Ghost: the initial capabilities plus every batch ever sent."""
    boots: tuple[Boot, ...]
    """The bootstraps in progress, oldest first (more than one: newcomers joining at once)."""
    leave: Leave | None
    leaves: int
    """How many workers have started to leave (bounded by ``max_leaves``)."""
    out: tuple[tuple[tuple[int, ZMSet[Any]], ...], ...] = ()
    """With aggregated senders: per process, the ``(worker, batch)`` pairs in its outbox, oldest first."""

    @property
    def boot(self) -> Boot | None:
        """The oldest bootstrap in progress, if any."""
        return self.boots[0] if self.boots else None


@dataclass(frozen=True)
class RescaleConfig:
    """Initial members, joiners, leaves, the exchange bounds and the mutant switch."""

    poset: Poset
    members: int = 2
    """Workers ``0 .. members-1`` start in the cluster."""
    joiners: int = 1
    """Workers ``members .. members+joiners-1`` may join (``max_boots`` bootstraps at a time)."""
    max_leaves: int = 0
    init_caps: int = 1
    init_total: int | None = 1
    max_caps: int = 2
    max_data: int = 1
    max_neg: int = 1
    max_data_delta: int = 1
    max_self: int = 1
    max_op_size: int | None = 1
    """At most this many elements in one ``perf_op`` (``Δneg``, ``Δdata`` and ``Δself`` together)."""
    max_batches: int = 2
    """``send_upd`` is disabled once a worker has sent this many batches."""
    queue_bound: int = 2
    """``send_upd`` is disabled while a link of the sender holds this many batches."""
    max_announce: int = 1
    """At most this many capabilities the bootstrap server hands to one newcomer."""
    max_boots: int = 1
    """At most this many bootstraps at once: above 1, newcomers join while others still bootstrap."""
    processes: tuple[int, ...] | None = None
    """With aggregated senders: the process of every worker id (``None``: every batch goes to every worker)."""
    mutant: Mutant | None = None
    depth: int = 10
    name: str = ""
    exchange: E.ExchangeConfig = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.mutant is not None and self.mutant not in RESCALE_MUTANTS:
            raise ValueError(f"mutant {self.mutant} does not apply to the rescaling model")
        if self.members < 1:
            raise ValueError("at least one initial member is needed")
        if self.processes is not None:
            if len(self.processes) != self.members + self.joiners:
                raise ValueError("processes must name the process of every worker id")
            if set(self.processes[: self.members]) & set(self.processes[self.members :]):
                raise ValueError("a worker that joins comes in a process of its own, not one of an initial member")
        # queue_bound=0 switches the exchange part's own send_upd off: batches go out on the sequenced links
        exch = E.ExchangeConfig(
            self.poset,
            workers=self.workers,
            init_caps=self.init_caps,
            init_total=self.init_total,
            max_caps=self.max_caps,
            max_data=self.max_data,
            max_neg=self.max_neg,
            max_data_delta=self.max_data_delta,
            max_self=self.max_self,
            max_op_size=self.max_op_size,
            queue_bound=0,
            name=self.name,
        )
        object.__setattr__(self, "exchange", exch)

    @cached_property
    def workers(self) -> int:
        """Every worker id that may ever take part: initial members and joiners."""
        return self.members + self.joiners

    @cached_property
    def aggregated(self) -> bool:
        """Whether batches to other processes go through per-process outboxes and aggregate senders."""
        return self.processes is not None

    @cached_property
    def process_count(self) -> int:
        """How many processes there are (0 without aggregated senders)."""
        return 0 if self.processes is None else max(self.processes) + 1

    @cached_property
    def senders(self) -> int:
        """Every sender id: the workers, then (aggregated) one aggregate sender per process."""
        return self.workers + self.process_count

    def process(self, w: int) -> int:
        """The process of worker ``w`` (every worker its own without aggregated senders)."""
        return w if self.processes is None else self.processes[w]

    def aggregate(self, p: int) -> int:
        """The sender id of process ``p``'s combined batches."""
        return self.workers + p

    def feeds(self, sender: int, r: int) -> bool:
        """Whether ``sender``'s batches reach worker ``r`` at all: every worker's without aggregated senders; else
        those of the workers of ``r``'s own process and of the aggregate senders of the others."""
        return self._feeds[sender][r]

    @cached_property
    def _feeds(self) -> tuple[tuple[bool, ...], ...]:
        """:meth:`feeds` of every sender and worker, worked out once (the model asks it for every state)."""
        return tuple(tuple(self._reaches(sender, r) for r in range(self.workers)) for sender in range(self.senders))

    def _reaches(self, sender: int, r: int) -> bool:
        if self.processes is None:
            return sender < self.workers
        if sender < self.workers:
            return self.processes[sender] == self.processes[r]
        return sender - self.workers != self.processes[r]

    @cached_property
    def targets(self) -> tuple[tuple[int, Any], ...]:
        """Every ``(worker, pointstamp)`` a ``Δdata`` may name (members only are let through)."""
        return tuple((w, p) for w in range(self.workers) for p in self.poset.elements)


# --- helpers ----------------------------------------------------------------------------------------------


def _set(t: tuple[Any, ...], i: int, v: Any) -> tuple[Any, ...]:
    return (*t[:i], v, *t[i + 1 :])


def _status(s: State, w: int, st: str) -> str:
    return s.status[:w] + st + s.status[w + 1 :]


def _receivers(s: State) -> list[int]:
    """Who a batch goes to: members and the newcomer (a leaver's incoming links are closed)."""
    return [r for r, st in enumerate(s.status) if st in (MEMBER, JOINING)]


def _targets(cfg: RescaleConfig, s: State, sender: int) -> list[int]:
    """The receivers ``sender``'s next batch goes to (``aggregate-skips-newcomer``: an aggregate sender's, to
    members only)."""
    targets = [r for r in _receivers(s) if cfg.feeds(sender, r)]
    if sender >= cfg.workers and cfg.mutant is Mutant.AGGREGATE_SKIPS_NEWCOMER:
        return [r for r in targets if s.status[r] == MEMBER]
    return targets


def _vacated(cfg: RescaleConfig, e: E.State, w: int) -> E.State:
    """Extend the ``Safe`` ghost with the pointstamps at which member ``w``'s view is vacant."""
    return e._replace(vacated=e.vacated | E._vacant_in(cfg.poset, e.glob[w]))


def _quiet(s: State) -> bool:
    """No membership change in progress."""
    return not s.boots and s.leave is None


def _boot_of(s: State, n: int | None) -> Boot | None:
    """The bootstrap of newcomer ``n`` (``None``: the oldest), if in progress."""
    if n is None:
        return s.boot
    return next((b for b in s.boots if b.newcomer == n), None)


def _with_boot(s: State, b: Boot) -> State:
    """``s`` with the bootstrap of ``b.newcomer`` replaced by ``b``."""
    return s._replace(boots=tuple(b if x.newcomer == b.newcomer else x for x in s.boots))


# --- Init -------------------------------------------------------------------------------------------------


def initial_states(cfg: RescaleConfig) -> Iterator[State]:
    """Every initial configuration: members hold at most ``init_caps`` capabilities, every member's view is ``rec``."""
    n = cfg.workers
    empty_msg = tuple(tuple(() for _ in range(n)) for _ in range(n))
    links: tuple[tuple[Link, ...], ...] = tuple(tuple(() for _ in range(n)) for _ in range(cfg.senders))
    recvd = tuple((0,) * cfg.senders for _ in range(n))
    out: tuple[tuple[tuple[int, ZMSet[Any]], ...], ...] = ((),) * cfg.process_count
    for caps in product(multisets_upto(cfg.poset.elements, cfg.init_caps), repeat=cfg.members):
        if cfg.init_total is not None and sum(m.total() for m in caps) > cfg.init_total:
            continue
        allcaps = (*caps, *(ZMSet() for _ in range(cfg.joiners)))
        e = E.State(allcaps, ZMSet(), empty_msg, (ZMSet(),) * n, (), frozenset())
        r = E.rec(e)
        e = e._replace(glob=(r,) * cfg.members + (ZMSet(),) * cfg.joiners)
        e = _vacated(cfg, e, 0)
        status = MEMBER * cfg.members + OUT * cfg.joiners
        yield State(e, status, links, recvd, ((),) * cfg.senders, r, (), None, 0, out)
