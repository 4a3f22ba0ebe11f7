"""Deliberately broken variants of the protocols, to show that the checker catches real bugs.

Each mutant is a switch read inside the model functions themselves (the
enabling conditions of seed ``000_306a8e6bd5c43d47.txt`` Fig. 4 and Fig. 6),
not a copy of them:

* ``send-unjustified`` — ``send_upd`` (Fig. 4) without ``justified (caps c w) (temp c w - γ)``.
* ``mint-equal`` — ``perf_op`` (Fig. 4) lets a worker send a capability for ``p``
  to another worker while holding ``p'`` with ``p' ≤ p`` (instead of ``p' < p``).
* ``mint-by-glob`` — ``perf_op`` checks the ``Δdata`` and ``Δself`` conditions against
  the worker's ``glob`` instead of its own ``caps``.
* ``propagate-nonminimal`` — ``propagate`` (Fig. 6) may take any worklist entry, not
  only a minimal one.
* ``drop-summary`` — local propagation runs on a graph that forgot one edge
  weight, while ``Safe`` is judged on the true graph.

And of the data-exchange mechanism of seed ``003_f357c44874202187.txt``
(``Transport`` and ``Receive``):

* ``transport-ignores-precedence`` — ``Transport`` without its precedence ``ENTRY`` conjunct.
* ``transport-reorders`` — ``Transport`` may take any datagram of a stream, not the oldest.
* ``transport-duplicates`` — ``Transport`` out of an ``Out_Buffer`` leaves the datagram there.
* ``transport-loses`` — ``Transport`` out of the ``Network`` drops the datagram.
* ``receive-ignores-precedence`` — ``Receive`` without its precedence ``ENTRY`` conjunct.
* ``receive-reorders`` — ``Receive`` may take any datagram of a stream, not the oldest.
* ``receive-accepts-malformed`` — ``Receive`` hands malformed datagrams to ``Action_Items``.

And of rescaling (seed ``002_640294948a1fdfd3.txt``, the bootstrap protocol and leaving):

* ``range-off-by-one`` — the newcomer requests a sender's missing batches from one past the first missing number.
* ``no-bootstrap-message`` — the links into a newcomer do not start with their next sequence number, and the
  newcomer takes a link without one to miss nothing beyond the server's state.
* ``leave-drops-early`` — a leaving worker drops its capabilities before handing its state over; they are
  minted again for the heir.
* ``announce-at-view-frontier`` — the bootstrap server mints the newcomer's capability at the frontier of its
  own view (§6.2 as worded) instead of handing over one it holds.
* ``announce-clone`` — the bootstrap server mints the newcomer's capability as a copy of one it holds, at the
  same pointstamp (``p' ≤ p`` instead of ``p' < p``): the rule the cluster runtime followed before issue 15.
* ``state-unflushed`` — with aggregated senders, the bootstrap server takes its state while its process's outbox
  still holds batches, or before it has applied every batch of its process's workers, and still says the state
  includes every combined batch its process sent.
* ``aggregate-skips-newcomer`` — with aggregated senders, a combined batch goes to members only, not to a newcomer
  still bootstrapping (the outbox learns of the newcomer late).

And of progress aggregated per process (seed 002 footnote 4, :mod:`pytimely.verify.aggregate`):

* ``aggregate-reorders`` — ``agg_send`` may send any one batch of a process's outbox, not the oldest ones.

:func:`mutant_cases` lists, for each mutant, the model and configuration where
it shows, the depth needed and the invariant expected to catch it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["Mutant", "MutantCase", "mutant_cases", "parse_mutant"]


class Mutant(Enum):
    """A named deliberate bug in one enabling condition or one input of a model."""

    SEND_UNJUSTIFIED = "send-unjustified"
    MINT_EQUAL = "mint-equal"
    MINT_BY_GLOB = "mint-by-glob"
    PROPAGATE_NONMINIMAL = "propagate-nonminimal"
    DROP_SUMMARY = "drop-summary"
    TRANSPORT_IGNORES_PRECEDENCE = "transport-ignores-precedence"
    TRANSPORT_REORDERS = "transport-reorders"
    TRANSPORT_DUPLICATES = "transport-duplicates"
    TRANSPORT_LOSES = "transport-loses"
    RECEIVE_IGNORES_PRECEDENCE = "receive-ignores-precedence"
    RECEIVE_REORDERS = "receive-reorders"
    RECEIVE_ACCEPTS_MALFORMED = "receive-accepts-malformed"
    RANGE_OFF_BY_ONE = "range-off-by-one"
    NO_BOOTSTRAP_MESSAGE = "no-bootstrap-message"
    LEAVE_DROPS_EARLY = "leave-drops-early"
    ANNOUNCE_AT_VIEW_FRONTIER = "announce-at-view-frontier"
    ANNOUNCE_CLONE = "announce-clone"
    AGGREGATE_REORDERS = "aggregate-reorders"
    STATE_UNFLUSHED = "state-unflushed"
    AGGREGATE_SKIPS_NEWCOMER = "aggregate-skips-newcomer"

    def __str__(self) -> str:
        return self.value


EXCHANGE_MUTANTS = frozenset({Mutant.SEND_UNJUSTIFIED, Mutant.MINT_EQUAL, Mutant.MINT_BY_GLOB})
"""Mutants of the exchange protocol (Fig. 4); they apply to ``exchange`` and ``combined``."""

PROPAGATION_MUTANTS = frozenset({Mutant.PROPAGATE_NONMINIMAL, Mutant.DROP_SUMMARY})
"""Mutants of local propagation (Fig. 6); they apply to ``propagation`` and ``combined``."""

DATAGRAM_MUTANTS = frozenset(
    {
        Mutant.TRANSPORT_IGNORES_PRECEDENCE,
        Mutant.TRANSPORT_REORDERS,
        Mutant.TRANSPORT_DUPLICATES,
        Mutant.TRANSPORT_LOSES,
        Mutant.RECEIVE_IGNORES_PRECEDENCE,
        Mutant.RECEIVE_REORDERS,
        Mutant.RECEIVE_ACCEPTS_MALFORMED,
    }
)
"""Mutants of the data-exchange mechanism (seed 003); they apply to ``datagram``."""

RESCALE_MUTANTS = frozenset(
    {
        Mutant.RANGE_OFF_BY_ONE,
        Mutant.NO_BOOTSTRAP_MESSAGE,
        Mutant.LEAVE_DROPS_EARLY,
        Mutant.ANNOUNCE_AT_VIEW_FRONTIER,
        Mutant.ANNOUNCE_CLONE,
        Mutant.STATE_UNFLUSHED,
        Mutant.AGGREGATE_SKIPS_NEWCOMER,
    }
)
"""Mutants of rescaling (seed 002: bootstrap and leave, with aggregated senders); they apply to ``rescale``."""

AGGREGATE_MUTANTS = frozenset({Mutant.AGGREGATE_REORDERS})
"""Mutants of progress aggregated per process; they apply to ``aggregate``."""


def parse_mutant(name: str) -> Mutant:
    """The mutant called ``name`` (e.g. ``"mint-equal"``)."""
    for m in Mutant:
        if m.value == name:
            return m
    raise ValueError(f"unknown mutant {name!r}; known: {', '.join(m.value for m in Mutant)}")


@dataclass(frozen=True, slots=True)
class MutantCase:
    """Where a mutant shows: model, configuration, exploration depth and the invariant that fails."""

    mutant: Mutant
    model: str
    config: str
    depth: int
    invariant: str
    only: tuple[str, ...] = ()
    """If non-empty, check only these invariants (to show that this one alone catches the mutant)."""


_PROGRESS_CASES: tuple[MutantCase, ...] = (
    MutantCase(Mutant.SEND_UNJUSTIFIED, "exchange", "chain3+1", 3, "Safe", ("Safe",)),
    MutantCase(Mutant.SEND_UNJUSTIFIED, "exchange", "chain3+1", 2, "InvTempJustified"),
    MutantCase(Mutant.SEND_UNJUSTIFIED, "combined", "pair", 5, "Safe", ("Safe",)),
    MutantCase(Mutant.MINT_EQUAL, "exchange", "chain3+1", 5, "Safe", ("Safe",)),
    MutantCase(Mutant.MINT_EQUAL, "exchange", "chain3+1", 1, "InvTempJustified"),
    MutantCase(Mutant.MINT_EQUAL, "combined", "pair", 7, "Safe", ("Safe",)),
    MutantCase(Mutant.MINT_BY_GLOB, "exchange", "chain3+1", 4, "Safe", ("Safe",)),
    MutantCase(Mutant.MINT_BY_GLOB, "exchange", "chain3+1", 1, "InvTempJustified"),
    MutantCase(Mutant.MINT_BY_GLOB, "combined", "pair", 6, "Safe", ("Safe",)),
    MutantCase(Mutant.PROPAGATE_NONMINIMAL, "propagation", "chain", 1, "PropagateMonotone"),
    MutantCase(Mutant.PROPAGATE_NONMINIMAL, "combined", "nested", 1, "PropagateMonotone"),
    MutantCase(Mutant.DROP_SUMMARY, "propagation", "wcc", 2, "Safe", ("Safe",)),
    MutantCase(Mutant.DROP_SUMMARY, "combined", "pair", 1, "Safe", ("Safe",)),
)
"""Mutants of the progress exchange and of propagation."""

_DATAGRAM_CASES: tuple[MutantCase, ...] = (
    MutantCase(Mutant.TRANSPORT_IGNORES_PRECEDENCE, "datagram", "far", 3, "DeliverPrecedence"),
    MutantCase(
        Mutant.TRANSPORT_IGNORES_PRECEDENCE, "datagram", "far", 3, "TransportPrecedence", ("TransportPrecedence",)
    ),
    MutantCase(Mutant.TRANSPORT_REORDERS, "datagram", "far", 4, "FifoPerChannel"),
    MutantCase(Mutant.TRANSPORT_DUPLICATES, "datagram", "far", 2, "OnePlace"),
    MutantCase(Mutant.TRANSPORT_DUPLICATES, "datagram", "far", 2, "Conservation", ("Conservation",)),
    MutantCase(Mutant.TRANSPORT_LOSES, "datagram", "far", 3, "Conservation"),
    MutantCase(Mutant.RECEIVE_IGNORES_PRECEDENCE, "datagram", "far", 5, "ReceivePrecedence"),
    MutantCase(Mutant.RECEIVE_REORDERS, "datagram", "far", 5, "FifoPerChannel"),
    MutantCase(Mutant.RECEIVE_ACCEPTS_MALFORMED, "datagram", "far", 4, "ReceiveWellFormed"),
    MutantCase(
        Mutant.RECEIVE_ACCEPTS_MALFORMED,
        "datagram",
        "far",
        4,
        "OnlyWellFormedReceived",
        ("OnlyWellFormedReceived",),
    ),
)
"""Mutants of the transport and of the receiving end."""

_RESCALE_CASES: tuple[MutantCase, ...] = (
    MutantCase(Mutant.RANGE_OFF_BY_ONE, "rescale", "join", 5, "BootstrapView"),
    MutantCase(Mutant.RANGE_OFF_BY_ONE, "rescale", "join", 8, "Safe", ("Safe",)),
    MutantCase(Mutant.NO_BOOTSTRAP_MESSAGE, "rescale", "join", 5, "BootstrapView"),
    MutantCase(Mutant.NO_BOOTSTRAP_MESSAGE, "rescale", "join", 5, "NoGap", ("NoGap",)),
    MutantCase(Mutant.NO_BOOTSTRAP_MESSAGE, "rescale", "join", 8, "Safe", ("Safe",)),
    MutantCase(Mutant.LEAVE_DROPS_EARLY, "rescale", "leave", 3, "InvTempJustified"),
    MutantCase(Mutant.LEAVE_DROPS_EARLY, "rescale", "leave", 4, "Safe", ("Safe",)),
    MutantCase(Mutant.LEAVE_DROPS_EARLY, "rescale", "churn", 4, "Safe", ("Safe",)),
    MutantCase(Mutant.ANNOUNCE_AT_VIEW_FRONTIER, "rescale", "join", 2, "InvTempJustified"),
    MutantCase(Mutant.ANNOUNCE_AT_VIEW_FRONTIER, "rescale", "join", 5, "Safe", ("Safe",)),
    MutantCase(Mutant.ANNOUNCE_CLONE, "rescale", "join", 2, "InvTempJustified"),
    MutantCase(Mutant.ANNOUNCE_CLONE, "rescale", "join", 8, "Safe", ("Safe",)),
)
"""Mutants of joining and leaving."""

_AGGREGATE_CASES: tuple[MutantCase, ...] = (
    MutantCase(Mutant.AGGREGATE_REORDERS, "aggregate", "pair", 5, "Safe"),
    MutantCase(Mutant.STATE_UNFLUSHED, "rescale", "join-aggregated", 6, "BootstrapView"),
    MutantCase(Mutant.STATE_UNFLUSHED, "rescale", "join-apart", 10, "Safe", ("Safe",)),
    MutantCase(Mutant.AGGREGATE_SKIPS_NEWCOMER, "rescale", "join-apart", 10, "Safe", ("Safe",)),
    MutantCase(Mutant.AGGREGATE_SKIPS_NEWCOMER, "rescale", "join-aggregated", 6, "BootstrapView"),
    MutantCase(Mutant.AGGREGATE_SKIPS_NEWCOMER, "rescale", "join-aggregated", 6, "NoGap", ("NoGap",)),
)
"""Mutants of aggregated progress, newcomers among the aggregated processes included."""


def mutant_cases() -> list[MutantCase]:
    """For every mutant, the runs that catch it, with the (minimal) depth of the counterexample.

    ``propagate-nonminimal`` is never caught by ``Safe``, the ``implied_frontier``
    lemma or the auxiliary invariants: with the ``work_vacant`` guard they do not
    depend on the order of propagation. It is caught by ``PropagateMonotone``,
    the property minimality exists for (see docs/verify.md).

    ``transport-loses`` is invisible to the seed's own ``INVARIANT`` and
    ``CONSTRAINT`` (a datagram in no place is in no two places); only
    ``Conservation`` catches it.

    ``range-off-by-one`` keeps the sequence numbers right (``NoGap`` holds) and
    loses a batch's content: ``BootstrapView`` and, later, ``Safe`` catch it.
    """
    return [*_PROGRESS_CASES, *_DATAGRAM_CASES, *_RESCALE_CASES, *_AGGREGATE_CASES]
