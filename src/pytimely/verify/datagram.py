"""The data-exchange mechanism of seed ``003_f357c44874202187.txt`` (Chisholm 1993): Send, Transport, Receive.

The ASLAN specification has, per ``Location``, an ``Out_Buffer``, an
``In_Buffer`` and ``Action_Items``, one shared ``Network``, and three
transitions:

* ``Send(Sender, Receivers, M)`` appends one datagram per receiver to
  ``Out_Buffer(Sender)`` (one message at a time: the seed's "sequentially
  processing messages from an application");
* ``Transport(D)`` moves a datagram of the highest precedence eligible anywhere
  (in an ``Out_Buffer`` or the ``Network``) one hop: out of an ``Out_Buffer``
  straight into the receiver's ``In_Buffer`` if the two are neighbours, else into
  the ``Network``; out of the ``Network`` into the receiver's ``In_Buffer``;
* ``Receive(Receiver, D)`` removes a datagram of the highest precedence in
  ``In_Buffer(Receiver)``; a ``Well_Formed`` one goes to
  ``Action_Items(Receiver)``, any other is dropped (here: kept in ``discarded``
  so that it can be accounted for).

The environment adds one transition, ``corrupt(D)``: a datagram in transit (in
the ``Network``, or arrived on a direct link and not yet checked by
``Receive``) is damaged and no longer ``Well_Formed``; a configured budget
bounds how often.

Beyond the seed, the model states what a transport of ``pytimely`` promises:
FIFO order within a stream ``(channel, sender, receiver)`` (``Transport`` and
``Receive`` take the oldest datagram of a stream at its place), and
conservation (every datagram ever sent is in exactly one place: the sender's
``Out_Buffer``, the ``Network``, the receiver's ``In_Buffer``, its
``Action_Items`` or its ``discarded``).

ASLAN writes the value *before* a transition primed (``Out_Buffer'``) and the
value after it unprimed; the transition invariants follow that reading of the
seed's ``CONSTRAINT``. Every enabling condition reads the configuration's
:class:`~pytimely.verify.mutants.Mutant` switch, so the deliberately broken
variants run through this same code.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import combinations
from typing import NamedTuple

from pytimely.verify.model import Action, Invariant, TransitionInvariant, fmt_value
from pytimely.verify.mutants import DATAGRAM_MUTANTS, Mutant

__all__ = [
    "CONTROL",
    "DATA",
    "PROGRESS",
    "Conservation",
    "Datagram",
    "DatagramConfig",
    "DatagramModel",
    "FifoPerChannel",
    "Init",
    "OnePlace",
    "OnlyWellFormedReceived",
    "State",
    "consistent_message",
    "corrupt",
    "corrupt_enabled",
    "deliver_precedence",
    "eligible",
    "initial_states",
    "neighbor",
    "receive",
    "receive_enabled",
    "receive_precedence",
    "receive_well_formed",
    "send",
    "send_enabled",
    "transport",
    "transport_enabled",
    "transport_precedence",
]

DATA, PROGRESS, CONTROL = 1, 2, 3
"""``Precedence_Level`` (``1..3``), higher first: control > progress > data."""

Ident = tuple[str, int, int, int]
"""A datagram's identity ``(channel, sender, receiver, seq)``: damage does not change it."""
Stream = tuple[str, int, int]
"""``(channel, sender, receiver)``: the unit of FIFO order."""


class Datagram(NamedTuple):
    """A ``DataGram``: ``FROM``, ``TO``, the channel and number of its message, ``Precedence(Data)``, ``Well_Formed``.

    The message number stands for the seed's ``Timestamp`` (``Now`` never
    changes in the specification): it counts the messages of one
    ``(channel, sender)``, so the datagrams one ``Send`` makes for different
    receivers share it.
    """

    channel: str
    sender: int
    receiver: int
    seq: int
    precedence: int
    well_formed: bool = True

    def __repr__(self) -> str:
        bad = "" if self.well_formed else "!"
        return f"{self.channel}:{self.sender}>{self.receiver}#{self.seq}{bad}"

    @property
    def ident(self) -> Ident:
        """Which datagram this is, whatever damage it took."""
        return (self.channel, self.sender, self.receiver, self.seq)

    @property
    def stream(self) -> Stream:
        """The FIFO stream the datagram belongs to."""
        return (self.channel, self.sender, self.receiver)


Buffers = tuple[frozenset[Datagram], ...]


class State(NamedTuple):
    """The seed's ``VARIABLE``s, plus ``discarded`` and the ghosts ``sent``, ``next_seq`` and ``faults``."""

    out: Buffers
    """``Out_Buffer(L)``."""
    network: frozenset[Datagram]
    """``Network``."""
    inbuf: Buffers
    """``In_Buffer(L)``."""
    action: Buffers
    """``Action_Items(L)``."""
    discarded: Buffers
    """Malformed datagrams ``Receive`` removed from ``In_Buffer(L)`` and reported instead of handing on."""
    sent: frozenset[Ident]
    """Ghost: every datagram ever sent."""
    next_seq: tuple[tuple[int, ...], ...]
    """``next_seq[L][k]``: the number of the next message ``L`` sends on channel ``k`` (= messages sent so far)."""
    faults: int
    """Ghost: how many datagrams the environment has damaged."""


@dataclass(frozen=True)
class DatagramConfig:
    """Locations, channels, the ``Neighbor`` relation, bounds and the mutant switch."""

    locations: int = 2
    channels: tuple[tuple[str, int], ...] = (("data", DATA), ("progress", PROGRESS), ("control", CONTROL))
    """Each channel and the precedence of its messages (``Precedence(Message)``)."""
    neighbors: frozenset[tuple[int, int]] = frozenset()
    """Pairs of distinct neighbouring locations (symmetric); every location is its own neighbour (loopback)."""
    consistent: frozenset[tuple[str, int]] | None = None
    """``Consistent_Message``: the ``(channel, sender)`` pairs ``Send`` accepts (``None``: all)."""
    max_messages: int = 2
    """``Send`` is disabled once a location has sent this many messages."""
    max_total: int | None = None
    """If set, ``Send`` is disabled once all locations together have sent this many messages."""
    max_receivers: int | None = None
    """If set, a ``Send`` names at most this many receivers."""
    max_faults: int = 1
    """``corrupt`` is disabled once this many datagrams have been damaged."""
    mutant: Mutant | None = None
    depth: int = 30
    """Default exploration depth."""
    name: str = ""
    receiver_sets: tuple[frozenset[int], ...] = field(init=False, compare=False, repr=False)
    """Every ``Receivers`` argument ``Send`` may take."""
    precedence: dict[str, int] = field(init=False, compare=False, repr=False)
    channel_index: dict[str, int] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.mutant is not None and self.mutant not in DATAGRAM_MUTANTS:
            raise ValueError(f"mutant {self.mutant} does not apply to the data-exchange model")
        if self.locations < 1:
            raise ValueError("at least one location is needed")
        if not {CONTROL, PROGRESS, DATA} >= {p for _, p in self.channels}:
            raise ValueError("a precedence is one of 1 (data), 2 (progress), 3 (control)")
        most = self.locations if self.max_receivers is None else self.max_receivers
        sets = tuple(frozenset(c) for k in range(1, most + 1) for c in combinations(range(self.locations), k))
        object.__setattr__(self, "receiver_sets", sets)
        object.__setattr__(self, "precedence", dict(self.channels))
        object.__setattr__(self, "channel_index", {name: k for k, (name, _) in enumerate(self.channels)})


def neighbor(cfg: DatagramConfig, a: int, b: int) -> bool:
    """``Neighbor(a, b)``: a location is its own neighbour; others as configured, in either order."""
    return a == b or (a, b) in cfg.neighbors or (b, a) in cfg.neighbors


def consistent_message(cfg: DatagramConfig, channel: str, sender: int) -> bool:
    """``Consistent_Message(Type_of_Message(M), Type_of_Site(Sender))``."""
    return cfg.consistent is None or (channel, sender) in cfg.consistent


def eligible(s: State) -> frozenset[Datagram]:
    """The datagrams eligible for ``Transport``: those in some ``Out_Buffer`` or in the ``Network``."""
    out = s.network
    for buf in s.out:
        out = out | buf
    return out


def _top(ds: Iterable[Datagram]) -> int:
    return max((d.precedence for d in ds), default=0)


def _oldest_of_stream(d: Datagram, place: frozenset[Datagram]) -> bool:
    return not any(e.seq < d.seq and e.stream == d.stream for e in place)


def _set(bufs: Buffers, i: int, value: frozenset[Datagram]) -> Buffers:
    return (*bufs[:i], value, *bufs[i + 1 :])


def Init(cfg: DatagramConfig, s: State) -> bool:
    """``INITIAL``: every ``Out_Buffer`` and ``In_Buffer`` and the ``Network`` empty (and, here, nothing sent yet)."""
    return (
        not any(s.out)
        and not s.network
        and not any(s.inbuf)
        and not any(s.action)
        and not any(s.discarded)
        and not s.sent
        and all(n == 0 for row in s.next_seq for n in row)
        and s.faults == 0
        and len(s.out) == len(s.inbuf) == len(s.action) == len(s.discarded) == cfg.locations
    )


def initial_states(cfg: DatagramConfig) -> Iterator[State]:
    """The one ``INITIAL`` state (the seed leaves ``Action_Items`` unconstrained; it starts empty here)."""
    empty: Buffers = (frozenset(),) * cfg.locations
    seqs = ((0,) * len(cfg.channels),) * cfg.locations
    yield State(empty, frozenset(), empty, empty, empty, frozenset(), seqs, 0)


def send_enabled(cfg: DatagramConfig, s: State, sender: int, receivers: frozenset[int], channel: str) -> bool:
    """``Send(Sender, Receivers, M)``: ``Consistent_Message`` and, for finiteness, the sender's message budget."""
    return (
        bool(receivers)
        and consistent_message(cfg, channel, sender)
        and sum(s.next_seq[sender]) < cfg.max_messages
        and (cfg.max_total is None or sum(map(sum, s.next_seq)) < cfg.max_total)
    )


def send(cfg: DatagramConfig, s: State, sender: int, receivers: frozenset[int], channel: str) -> State:
    """Effect of ``Send``: ``Out_Buffer(Sender)`` gains one datagram of the next message per receiver."""
    k = cfg.channel_index[channel]
    seq = s.next_seq[sender][k]
    new = frozenset(Datagram(channel, sender, r, seq, cfg.precedence[channel]) for r in receivers)
    row = s.next_seq[sender]
    return s._replace(
        out=_set(s.out, sender, s.out[sender] | new),
        sent=s.sent | {d.ident for d in new},
        next_seq=_set_row(s.next_seq, sender, (*row[:k], seq + 1, *row[k + 1 :])),
    )


def _set_row(rows: tuple[tuple[int, ...], ...], i: int, row: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    return (*rows[:i], row, *rows[i + 1 :])


def _transport_source(s: State, d: Datagram) -> int | None:
    """The location whose ``Out_Buffer`` holds ``d``, ``-1`` for the ``Network``, ``None`` if not eligible."""
    for loc, buf in enumerate(s.out):
        if d in buf:
            return loc
    return -1 if d in s.network else None


def transport_enabled(cfg: DatagramConfig, s: State, d: Datagram) -> bool:
    """``Transport(D)``: ``D`` is in an ``Out_Buffer`` or the ``Network`` and of the highest precedence eligible.

    Beyond the seed (FIFO per stream): no older datagram of ``D``'s stream waits
    at the same place. Under ``transport-ignores-precedence`` the precedence
    conjunct is dropped, under ``transport-reorders`` the FIFO one.
    """
    src = _transport_source(s, d)
    if src is None:
        return False
    if cfg.mutant is not Mutant.TRANSPORT_IGNORES_PRECEDENCE and d.precedence < _top(eligible(s)):
        return False
    place = s.network if src < 0 else s.out[src]
    return cfg.mutant is Mutant.TRANSPORT_REORDERS or _oldest_of_stream(d, place)


def transport(cfg: DatagramConfig, s: State, d: Datagram) -> State:
    """Effect of ``Transport``: one hop, ``Out_Buffer`` to ``In_Buffer(TO)`` (neighbours) or ``Network``, or
    ``Network`` to ``In_Buffer(TO)``.

    The seed's alternative ``NOCHANGE(In_Buffer, Network)`` for a datagram in the
    ``Network`` is a stutter step and is not produced. ``transport-duplicates``
    leaves the datagram in the ``Out_Buffer``; ``transport-loses`` takes it out
    of the ``Network`` without delivering it.
    """
    src = _transport_source(s, d)
    to = d.receiver
    if src is None:
        raise ValueError(f"{d!r} is not eligible for Transport")
    if src >= 0:
        out = s.out if cfg.mutant is Mutant.TRANSPORT_DUPLICATES else _set(s.out, src, s.out[src] - {d})
        if neighbor(cfg, to, src):
            return s._replace(out=out, inbuf=_set(s.inbuf, to, s.inbuf[to] | {d}))
        return s._replace(out=out, network=s.network | {d})
    if cfg.mutant is Mutant.TRANSPORT_LOSES:
        return s._replace(network=s.network - {d})
    return s._replace(network=s.network - {d}, inbuf=_set(s.inbuf, to, s.inbuf[to] | {d}))


def receive_enabled(cfg: DatagramConfig, s: State, receiver: int, d: Datagram) -> bool:
    """``Receive(Receiver, D)``: ``D ∈ In_Buffer(Receiver)`` of the highest precedence there.

    Beyond the seed (FIFO per stream): no older datagram of ``D``'s stream is in
    the ``In_Buffer``. ``receive-ignores-precedence`` and ``receive-reorders``
    drop one conjunct each.
    """
    buf = s.inbuf[receiver]
    if d not in buf:
        return False
    if cfg.mutant is not Mutant.RECEIVE_IGNORES_PRECEDENCE and d.precedence < _top(buf):
        return False
    return cfg.mutant is Mutant.RECEIVE_REORDERS or _oldest_of_stream(d, buf)


def receive(cfg: DatagramConfig, s: State, receiver: int, d: Datagram) -> State:
    """Effect of ``Receive``: ``D`` leaves ``In_Buffer(Receiver)``; if ``Well_Formed`` it joins
    ``Action_Items(Receiver)``, else ``discarded`` (``receive-accepts-malformed``: ``Action_Items`` regardless)."""
    inbuf = _set(s.inbuf, receiver, s.inbuf[receiver] - {d})
    if d.well_formed or cfg.mutant is Mutant.RECEIVE_ACCEPTS_MALFORMED:
        return s._replace(inbuf=inbuf, action=_set(s.action, receiver, s.action[receiver] | {d}))
    return s._replace(inbuf=inbuf, discarded=_set(s.discarded, receiver, s.discarded[receiver] | {d}))


def corrupt_enabled(cfg: DatagramConfig, s: State, d: Datagram) -> bool:
    """``corrupt(D)`` (environment): ``D`` is intact and in transit (``Network`` or an ``In_Buffer``), within budget."""
    return s.faults < cfg.max_faults and d.well_formed and (d in s.network or any(d in buf for buf in s.inbuf))


def corrupt(cfg: DatagramConfig, s: State, d: Datagram) -> State:
    """Effect of ``corrupt``: ``D`` stays where it is but is no longer ``Well_Formed``."""
    bad = d._replace(well_formed=False)
    if d in s.network:
        return s._replace(network=(s.network - {d}) | {bad}, faults=s.faults + 1)
    inbuf = tuple((buf - {d}) | {bad} if d in buf else buf for buf in s.inbuf)
    return s._replace(inbuf=inbuf, faults=s.faults + 1)


# --- invariants -------------------------------------------------------------------------------------------


def OnePlace(cfg: DatagramConfig, s: State) -> bool:
    """The seed's ``INVARIANT``: no datagram is in two of ``Out_Buffer(L1)``, ``In_Buffer(L2)``, ``Network``."""
    seen: set[Ident] = set()
    n = 0
    for buf in (*s.out, s.network, *s.inbuf):
        for d in buf:
            seen.add(d.ident)
            n += 1
    return n == len(seen)


def Conservation(cfg: DatagramConfig, s: State) -> bool:
    """Every datagram sent is in exactly one of ``Out_Buffer(FROM)``, ``Network``, ``In_Buffer(TO)``,
    ``Action_Items(TO)``, ``discarded(TO)``, and nothing unsent is anywhere: none lost, none duplicated."""
    seen: set[Ident] = set()
    n = 0
    for loc, buf in enumerate(s.out):
        for d in buf:
            if d.sender != loc:
                return False
            seen.add(d.ident)
            n += 1
    for d in s.network:
        seen.add(d.ident)
        n += 1
    for bufs in (s.inbuf, s.action, s.discarded):
        for loc, buf in enumerate(bufs):
            for d in buf:
                if d.receiver != loc:
                    return False
                seen.add(d.ident)
                n += 1
    return n == len(seen) and seen == s.sent


def OnlyWellFormedReceived(cfg: DatagramConfig, s: State) -> bool:
    """Only ``Well_Formed`` datagrams are in ``Action_Items``."""
    return all(d.well_formed for buf in s.action for d in buf)


def FifoPerChannel(cfg: DatagramConfig, s: State) -> bool:
    """What ``Receive`` has handled of a stream (``Action_Items`` or ``discarded``) is a prefix of what was sent.

    Since ``Receive`` only ever adds to that set, this means each stream reaches
    ``Action_Items`` in send order and with no gaps other than the reported
    malformed datagrams.
    """
    done: dict[Stream, list[int]] = {}
    for bufs in (s.action, s.discarded):
        for buf in bufs:
            for d in buf:
                done.setdefault(d.stream, []).append(d.seq)
    if not done:
        return True
    sent: dict[Stream, list[int]] = {}
    for ch, snd, rcv, seq in s.sent:
        if (ch, snd, rcv) in done:
            sent.setdefault((ch, snd, rcv), []).append(seq)
    for stream, seqs in done.items():
        order = sorted(sent.get(stream, ()))
        if sorted(seqs) != order[: len(seqs)]:
            return False
    return True


def _by_ident(bufs: Iterable[frozenset[Datagram]]) -> dict[Ident, Datagram]:
    return {d.ident: d for buf in bufs for d in buf}


def deliver_precedence(cfg: DatagramConfig, s: State, act: Action, s2: State) -> bool:
    """``CONSTRAINT`` clause 1: a datagram new in an ``In_Buffer`` came out of an ``Out_Buffer'`` or ``Network'``
    and is of precedence ``≥`` every datagram eligible for ``Transport`` before the step."""
    if s2.inbuf == s.inbuf:
        return True
    before = _by_ident([eligible(s)])
    top = _top(before.values())
    for loc in range(cfg.locations):
        if s2.inbuf[loc] == s.inbuf[loc]:
            continue
        old = {d.ident for d in s.inbuf[loc]}
        for d in s2.inbuf[loc]:
            if d.ident not in old and (d.ident not in before or before[d.ident].precedence < top):
                return False
    return True


def transport_precedence(cfg: DatagramConfig, s: State, act: Action, s2: State) -> bool:
    """``CONSTRAINT`` clause 2: a datagram that left an ``Out_Buffer`` is now in an ``In_Buffer`` or the
    ``Network``, and is of precedence ``≥`` every datagram eligible for ``Transport`` before the step."""
    if s2.out == s.out:
        return True
    top = _top(eligible(s))
    after: set[Ident] | None = None
    for loc in range(cfg.locations):
        if s2.out[loc] == s.out[loc]:
            continue
        now = {d.ident for d in s2.out[loc]}
        for d in s.out[loc]:
            if d.ident in now:
                continue
            if after is None:
                after = set(_by_ident([s2.network, *s2.inbuf]))
            if d.ident not in after or d.precedence < top:
                return False
    return True


def receive_precedence(cfg: DatagramConfig, s: State, act: Action, s2: State) -> bool:
    """``CONSTRAINT`` clause 3: a datagram that left ``In_Buffer(L)`` was of precedence ``≥`` all ``In_Buffer'(L)``."""
    if s2.inbuf == s.inbuf:
        return True
    for loc in range(cfg.locations):
        if s2.inbuf[loc] == s.inbuf[loc]:
            continue
        now = {d.ident for d in s2.inbuf[loc]}
        top = _top(s.inbuf[loc])
        if any(d.ident not in now and d.precedence < top for d in s.inbuf[loc]):
            return False
    return True


def receive_well_formed(cfg: DatagramConfig, s: State, act: Action, s2: State) -> bool:
    """``CONSTRAINT`` clause 4: a datagram new in ``Action_Items(L)`` is ``Well_Formed``."""
    if s2.action == s.action:
        return True
    for loc in range(cfg.locations):
        if s2.action[loc] == s.action[loc]:
            continue
        old = {d.ident for d in s.action[loc]}
        if any(d.ident not in old and not d.well_formed for d in s2.action[loc]):
            return False
    return True


class DatagramModel:
    """The data-exchange mechanism of seed 003 under the bounds of a :class:`DatagramConfig`."""

    name = "datagram"

    def __init__(self, cfg: DatagramConfig) -> None:
        self.cfg = cfg

    def initial_states(self) -> Iterator[State]:
        """See :func:`initial_states`."""
        return initial_states(self.cfg)

    def successors(self, s: State) -> Iterator[tuple[Action, State]]:
        """Every enabled ``send``, ``transport``, ``receive`` and ``corrupt`` within the bounds (no stutter)."""
        cfg = self.cfg
        for loc in range(cfg.locations):
            if sum(s.next_seq[loc]) >= cfg.max_messages:
                continue  # a cheap pre-filter: send_enabled is still the judge
            for channel, _ in cfg.channels:
                for rs in cfg.receiver_sets:
                    if send_enabled(cfg, s, loc, rs, channel):
                        m = f"{channel}#{s.next_seq[loc][cfg.channel_index[channel]]}"
                        act = Action("send", (("Sender", loc), ("Receivers", rs), ("M", m)))
                        yield act, send(cfg, s, loc, rs, channel)
        moves: list[tuple[Action, State]] = []
        for d in sorted(eligible(s)):
            if transport_enabled(cfg, s, d):
                moves.append((Action("transport", (("D", d),)), transport(cfg, s, d)))
        for loc in range(cfg.locations):
            for d in sorted(s.inbuf[loc]):
                if receive_enabled(cfg, s, loc, d):
                    moves.append((Action("receive", (("Receiver", loc), ("D", d))), receive(cfg, s, loc, d)))
        if s.faults < cfg.max_faults:
            transit = s.network.union(*s.inbuf)
            for d in sorted(transit):
                if corrupt_enabled(cfg, s, d):
                    moves.append((Action("corrupt", (("D", d),)), corrupt(cfg, s, d)))
        # transport-duplicates can re-deliver a datagram that is already there: that is a stutter step
        yield from ((a, s2) for a, s2 in moves if s2 != s)

    def invariants(self) -> list[Invariant[State]]:
        """``OnePlace`` (the seed's), ``Conservation``, ``OnlyWellFormedReceived``, ``FifoPerChannel``."""
        cfg = self.cfg
        return [
            Invariant("OnePlace", lambda s: OnePlace(cfg, s)),
            Invariant("Conservation", lambda s: Conservation(cfg, s)),
            Invariant("OnlyWellFormedReceived", lambda s: OnlyWellFormedReceived(cfg, s)),
            Invariant("FifoPerChannel", lambda s: FifoPerChannel(cfg, s)),
        ]

    def transition_invariants(self) -> list[TransitionInvariant[State]]:
        """The four clauses of the seed's ``CONSTRAINT``."""
        cfg = self.cfg
        return [
            TransitionInvariant("DeliverPrecedence", lambda s, a, s2: deliver_precedence(cfg, s, a, s2)),
            TransitionInvariant("TransportPrecedence", lambda s, a, s2: transport_precedence(cfg, s, a, s2)),
            TransitionInvariant("ReceivePrecedence", lambda s, a, s2: receive_precedence(cfg, s, a, s2)),
            TransitionInvariant("ReceiveWellFormed", lambda s, a, s2: receive_well_formed(cfg, s, a, s2)),
        ]

    def format_state(self, s: State) -> str:
        """Non-empty buffers on one line."""

        def bufs(label: str, b: Buffers) -> str:
            parts = [f"{loc}:{fmt_value(x)}" for loc, x in enumerate(b) if x]
            return f"{label}=[{', '.join(parts)}]"

        return " ".join(
            [
                bufs("out", s.out),
                f"net={fmt_value(s.network)}",
                bufs("in", s.inbuf),
                bufs("items", s.action),
                bufs("discarded", s.discarded),
                f"faults={s.faults}",
            ]
        )
