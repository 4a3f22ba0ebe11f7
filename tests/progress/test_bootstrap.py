"""Property tests for the bootstrap of a joining worker (:mod:`pytimely.progress.bootstrap`, seed 002 §3.4)."""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from pytimely.errors import BootstrapError
from pytimely.order import Product
from pytimely.progress.bootstrap import (
    Bootstrap,
    BootstrapServer,
    Hello,
    ProgressState,
    RangeReply,
    RangeRequest,
    mint,
    mint_time,
    successor,
)
from pytimely.progress.broadcast import ProgressBatch, ProgressReceiver
from pytimely.verify.configs import rescale_config
from pytimely.verify.mutants import Mutant
from pytimely.verify.rescale import Boot, RescaleConfig, missing_range
from tests.profiles import examples

NEWCOMER = 50
FRESH_IDS = (60, 61)
LATE = 70
"""A worker that joins while the newcomer bootstraps."""
MAX_BATCHES = 4
"""How many batches one sender sends at most in a simulated run."""
JOIN = rescale_config("join")

Update = tuple[Any, Any, int]
Acc = dict[tuple[Any, Any], int]

updates_st = st.lists(
    st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3), st.sampled_from([-2, -1, 1, 2])), max_size=3
).map(tuple)


def accumulate(updates: Iterable[Update]) -> Acc:
    """Sum the diffs per ``(location, time)`` and drop the zeros."""
    acc: Acc = {}
    for loc, t, d in updates:
        acc[loc, t] = acc.get((loc, t), 0) + d
    return {p: c for p, c in acc.items() if c != 0}


def snapshot(obj: object) -> dict[str, Any]:
    """A deep copy of an object's attributes, to show that a refused input changed nothing."""
    return copy.deepcopy(vars(obj))


# --- a simulated join ------------------------------------------------------------------------------------------


class Run:
    """Members and fresh siblings sending batches, a bootstrap server applying them, and the newcomer."""

    def __init__(
        self,
        members: list[int],
        server: int,
        fresh: list[int],
        server_knows_fresh: bool,
        late: bool = False,
        unmet: Iterable[int] = (),
    ) -> None:
        """Nothing sent yet; the server's receiver knows the members but ``unmet`` (and the fresh siblings if told
        so). The server meets the others during the run, and applies their batches from then on.

        With ``late``, worker :data:`LATE` joins during the run: the server and the newcomer learn of it in
        either order, and it sends (from zero, to both) once both know it.
        """
        self.members = members
        self.fresh = fresh
        self.late = [LATE] if late else []
        self.knows_late: set[str] = set()
        self.senders = members + fresh + self.late
        known = [m for m in members if m not in set(unmet)] + (fresh if server_knows_fresh else [])
        self.unmet = [s for s in members + fresh if s not in known]
        self.next = {s: 0 for s in self.senders}
        self.sent: list[ProgressBatch[Any]] = []
        self.to_server: dict[int, deque[ProgressBatch[Any]]] = {s: deque() for s in members + fresh}
        self.receiver = ProgressReceiver(known)
        self.server = BootstrapServer(server)
        self.applied_updates: list[Update] = []
        self.greeted: set[int] = set()
        self.hellos: dict[int, int] = {}
        self.link: dict[int, deque[Hello | ProgressBatch[Any]]] = {s: deque() for s in self.senders}
        self.state: ProgressState | None = None
        self.state_delivered = False
        self.requests: deque[RangeRequest] = deque()
        self.replies: deque[RangeReply] = deque()
        self.boot = Bootstrap(NEWCOMER, server, members, fresh)
        self.asked: RangeRequest | None = None

    def truth(self) -> Acc:
        """The accumulation of every batch ever sent."""
        return accumulate(u for b in self.sent for u in b.updates)

    def actions(self) -> list[tuple[str, int]]:
        """Every step the protocol allows now."""
        acts: list[tuple[str, int]] = []
        acts += [("send", s) for s in self.senders if self.next[s] < MAX_BATCHES and self.may_send(s)]
        if self.late:
            acts += [(who, LATE) for who in ("late_server", "late_newcomer") if who not in self.knows_late]
        acts += [("learn", m) for m in self.members if m not in self.greeted]
        acts += [("meet", s) for s in self.unmet]
        acts += [("apply", s) for s, q in self.to_server.items() if q and s not in self.unmet]
        acts += [("link", s) for s, q in self.link.items() if q]
        if self.state is None:
            acts.append(("state", 0))
        elif not self.state_delivered:
            acts.append(("deliver_state", 0))
        if self.requests:
            acts.append(("request", 0))
        if self.replies:
            acts.append(("reply", 0))
        return acts

    def do(self, act: tuple[str, int], data: st.DataObject | None = None) -> None:
        """Take one step (``data`` draws a sent batch's updates)."""
        kind, s = act
        if kind == "send":
            assert data is not None
            batch = ProgressBatch(s, self.next[s], data.draw(updates_st, label=f"batch {self.next[s]} of {s}"))
            self.next[s] += 1
            self.sent.append(batch)
            self.to_server[s].append(batch)
            if s in self.greeted or s in self.fresh or s in self.late:
                self.link[s].append(batch)
        elif kind == "late_server":
            self.knows_late.add(kind)
            self.receiver.add(s, 0)
            self.to_server[s] = deque()
        elif kind == "meet":
            self.unmet.remove(s)
            self.receiver.add(s, 0)
        elif kind == "late_newcomer":
            self.knows_late.add(kind)
            self.boot.joined([s])
        elif kind == "learn":
            self.greeted.add(s)
            self.hellos[s] = self.next[s]
            self.link[s].append(Hello(s, self.next[s]))
        elif kind == "apply":
            batch = self.to_server[s].popleft()
            self.applied_updates.extend(self.receiver.accept(batch))
            self.server.applied(batch)
            self.poll_server()
        elif kind == "state":
            counts = [(loc, t, c) for (loc, t), c in accumulate(self.applied_updates).items()]
            self.state = self.server.state(NEWCOMER, counts, self.receiver)
        elif kind == "deliver_state":
            assert self.state is not None
            self.state_delivered = True
            self.boot.state(self.state)
            self.poll_newcomer()
        elif kind == "link":
            message = self.link[s].popleft()
            if isinstance(message, Hello):
                self.boot.hello(message)
            else:
                self.boot.batch(message)
            self.poll_newcomer()
        elif kind == "request":
            self.server.request(self.requests.popleft())
            self.poll_server()
        elif kind == "reply":
            self.boot.reply(self.replies.popleft())
        else:  # pragma: no cover
            raise AssertionError(act)

    def may_send(self, s: int) -> bool:
        """Whether ``s`` sends yet (a late joiner only once the server and the newcomer both know it)."""
        return s not in self.late or len(self.knows_late) == 2

    def poll_newcomer(self) -> None:
        """The newcomer sends its range request once it can."""
        request = self.boot.request()
        if request is not None:
            assert self.asked is None, "the newcomer asked twice"
            self.asked = request
            self.requests.append(request)

    def poll_server(self) -> None:
        """The server sends the replies that are complete."""
        for newcomer, reply in self.server.replies(self.receiver):
            assert newcomer == NEWCOMER
            self.replies.append(reply)

    def complete(self, data: st.DataObject, drain_links: bool) -> None:
        """Run the protocol to its end in a drawn order without more sends (links drained, or only their hellos)."""
        for m in self.members:
            if m not in self.greeted:
                self.do(("learn", m))
        for who in ("late_server", "late_newcomer"):
            if self.late and who not in self.knows_late:
                self.do((who, LATE))
        for s in list(self.unmet):
            self.do(("meet", s))
        for _ in range(1000):
            if self.boot.done and not self.requests:
                break
            acts = [a for a in self.actions() if a[0] not in ("send", "learn", "meet", "late_server", "late_newcomer")]
            if not drain_links:
                acts = [a for a in acts if a[0] != "link" or isinstance(self.link[a[1]][0], Hello)]
            assert acts, "the bootstrap is stuck"
            self.do(data.draw(st.sampled_from(acts)))
        assert self.boot.done
        if drain_links:
            for s, q in self.link.items():
                while q:
                    self.do(("link", s))


def simulate(data: st.DataObject, drain_links: bool) -> tuple[Run, list[Update], ProgressReceiver, ProgressState]:
    """Draw a run, play a random interleaving, complete the bootstrap and finish it."""
    k = data.draw(st.integers(1, 4), label="members")
    members = list(range(k))
    server = data.draw(st.sampled_from(members), label="server")
    fresh = list(FRESH_IDS[: data.draw(st.integers(0, 2), label="fresh")])
    late = data.draw(st.booleans(), label="a worker joins during the bootstrap")
    others = [m for m in members if m != server]
    unmet = data.draw(
        st.sets(st.sampled_from(others)) if others else st.just(set()), label="members the server meets later"
    )
    run = Run(members, server, fresh, data.draw(st.booleans(), label="server knows fresh"), late, unmet)
    for _ in range(data.draw(st.integers(0, 40), label="steps")):
        acts = run.actions()
        if not acts:
            break
        run.do(data.draw(st.sampled_from(acts)), data)
    run.complete(data, drain_links)
    updates, receiver, state = run.boot.finish()
    assert state == run.state
    if run.asked is not None and run.asked.ranges:
        event("some range was requested")
    if state.included.get(LATE, 0) > 0:
        event("the state includes batches of a worker that joined during the bootstrap")
    if any(state.included.get(m, 0) > n for m, n in run.hellos.items()):
        event("the state runs ahead of some hello")
    if run.asked is not None and any(s not in state.included for s, _, _ in run.asked.ranges):
        event("a range was requested of a member the state does not name")
    return run, updates, receiver, state


@settings(max_examples=examples(150), deadline=None)
@given(data=st.data())
def test_view_after_finish_is_every_batch_sent(data: st.DataObject) -> None:
    """With every link drained before finish(), the view is the accumulation of all batches ever sent."""
    run, updates, receiver, _ = simulate(data, drain_links=True)
    assert accumulate(updates) == run.truth()
    assert receiver.numbers() == run.next
    assert not run.server.serving  # the server closed the newcomer's log


@settings(max_examples=examples(150), deadline=None)
@given(data=st.data())
def test_view_with_batches_still_in_flight_at_finish(data: st.DataObject) -> None:
    """Link batches arriving after finish() complete the view, those in the state discarded (as in ``recv_upd``)."""
    run, updates, receiver, _ = simulate(data, drain_links=False)
    view = list(updates)
    for q in run.link.values():
        for message in q:
            assert isinstance(message, ProgressBatch)
            got = receiver.accept(message)
            if message.updates and not got:
                event("a batch in flight at finish() was already in the state")
            view.extend(got)
    assert accumulate(view) == run.truth()
    assert receiver.numbers() == run.next


def test_batches_in_flight_at_finish_through_the_strict_receiver() -> None:
    """Driven as ``Subgraph`` drives it (finish once done, then ``accept`` every batch), the view is still exact."""
    rx = ProgressReceiver([0, 1])
    server = BootstrapServer(1)
    b0 = ProgressBatch(0, 0, (("a", 0, 1),))
    rx.accept(b0)  # 0 greeted the newcomer before it sent b0; the server applied b0 before its state
    server.applied(b0)
    state = server.state(2, [("a", 0, 1)], rx)
    boot = Bootstrap(2, 1, [0, 1], [])
    view: list[Update] = []
    receiver: ProgressReceiver | None = None
    arrivals: list[Hello | ProgressState | ProgressBatch[Any]] = [Hello(0, 0), Hello(1, 0), state, b0]
    for message in arrivals:
        if receiver is not None:
            assert isinstance(message, ProgressBatch)
            view.extend(receiver.accept(message))
            continue
        if isinstance(message, Hello):
            boot.hello(message)
        elif isinstance(message, ProgressState):
            boot.state(message)
        else:
            boot.batch(message)
        request = boot.request()
        if request is not None:
            server.request(request)
        if boot.done:
            updates, receiver, _ = boot.finish()
            view.extend(updates)
    assert receiver is not None
    assert accumulate(view) == {("a", 0): 1}
    assert receiver.numbers() == {0: 1, 1: 0}


# --- against the reference model ---------------------------------------------------------------------------------


@settings(max_examples=examples(200), deadline=None)
@given(data=st.data())
def test_request_matches_the_models_missing_ranges(data: st.DataObject) -> None:
    """``Bootstrap.request()`` names exactly the model's non-empty ``missing_range`` of each member."""
    k = data.draw(st.integers(1, 4), label="members")
    nfresh = data.draw(st.integers(0, 2), label="fresh")
    newcomer = k
    fresh = list(range(k + 1, k + 1 + nfresh))
    workers = k + 1 + nfresh
    server = data.draw(st.sampled_from(range(k)), label="server")
    base = tuple(0 if w == newcomer else data.draw(st.integers(0, 5), label=f"base {w}") for w in range(workers))
    hello = tuple(data.draw(st.integers(0, 5), label=f"hello {w}") if w < k else None for w in range(workers))
    cfg = RescaleConfig(JOIN.poset, members=k, joiners=1 + nfresh)
    b = Boot(newcomer, server, hello, base, frozenset(), frozenset(), 0)
    want = []
    for m in range(workers):
        rng = missing_range(cfg, b, m)
        if rng is not None and rng[0] < rng[1]:
            want.append((m, *rng))

    senders = [w for w in range(workers) if w != newcomer]
    rx = ProgressReceiver({w: base[w] for w in senders})
    srv = BootstrapServer(server)
    state = srv.state(newcomer, (), rx)
    if data.draw(st.booleans(), label="omit zeros"):  # a state may leave out senders it has no batch of
        state = ProgressState(server, (), {w: n for w, n in state.included.items() if n})
    boot = Bootstrap(newcomer, server, range(k), fresh)
    inputs: list[Hello | ProgressState] = [Hello(m, n) for m, n in enumerate(hello) if n is not None]
    inputs.append(state)
    for message in data.draw(st.permutations(inputs), label="order"):
        assert boot.request() is None  # not before the state and every hello are in
        if isinstance(message, Hello):
            boot.hello(message)
        else:
            boot.state(message)
    request = boot.request()
    assert request is not None and request.newcomer == newcomer
    assert list(request.ranges) == want
    assert boot.request() is None  # asked once
    assert boot.done == (not want)
    srv.request(request)  # the server, holding the same numbers, accepts it
    off = RescaleConfig(JOIN.poset, members=k, joiners=1 + nfresh, mutant=Mutant.RANGE_OFF_BY_ONE)
    if want:  # the off-by-one mutant of the model names other ranges than the module
        assert [missing_range(off, b, m) for m, _, _ in want] != [(lo, hi) for _, lo, hi in want]


# --- bad inputs: refused with BootstrapError, nothing changed ------------------------------------------------------


B = [ProgressBatch(0, k, (("a", k, 1), ("b", 0, -1) if k % 2 else ("b", 1, 1))) for k in range(5)]
"""Batches 0..4 of worker 0."""


def scenario() -> tuple[BootstrapServer, ProgressReceiver, Bootstrap]:
    """Server 1's state holds batch 0 of worker 0; 0 greets newcomer 2 at 3, so 2 asks for 1..2; 1 applied them."""
    rx = ProgressReceiver([0, 1])
    server = BootstrapServer(1)
    for b in B[:1]:
        rx.accept(b)
        server.applied(b)
    state = server.state(2, [("a", 0, 1), ("b", 1, 1)], rx)
    for b in B[1:3]:
        rx.accept(b)
        server.applied(b)
    boot = Bootstrap(2, 1, [0, 1], [])
    boot.hello(Hello(0, 3))
    boot.hello(Hello(1, 0))
    boot.state(state)
    boot.batch(B[3])
    boot.batch(B[4])
    return server, rx, boot


def truth() -> Acc:
    """The accumulation of every batch of :func:`scenario`."""
    return accumulate(u for b in B for u in b.updates)


def finish_scenario(server: BootstrapServer, rx: ProgressReceiver, boot: Bootstrap) -> Acc:
    """Complete :func:`scenario`'s bootstrap the right way and return the view's accumulation."""
    request = boot.request()
    assert request == RangeRequest(2, ((0, 1, 3),))
    server.request(request)
    [(newcomer, reply)] = server.replies(rx)
    assert newcomer == 2 and reply == RangeReply((B[1], B[2]))
    boot.reply(reply)
    updates, receiver, _ = boot.finish()
    assert receiver.numbers() == {0: 5, 1: 0}
    return accumulate(updates)


def test_scenario_is_exact() -> None:
    """The hand-made scenario bootstraps to the ground truth (the baseline of the tests below)."""
    server, rx, boot = scenario()
    assert not boot.done
    assert finish_scenario(server, rx, boot) == truth()


def test_hello_from_a_non_member() -> None:
    """A hello from a worker that is not a member is refused."""
    server, rx, boot = scenario()
    before = snapshot(boot)
    with pytest.raises(BootstrapError, match="not a member"):
        boot.hello(Hello(7, 0))
    assert snapshot(boot) == before
    assert finish_scenario(server, rx, boot) == truth()


def test_second_hello() -> None:
    """A second hello from the same member is refused and the first one stands."""
    server, rx, boot = scenario()
    before = snapshot(boot)
    with pytest.raises(BootstrapError, match="second hello"):
        boot.hello(Hello(0, 1))
    assert snapshot(boot) == before
    assert finish_scenario(server, rx, boot) == truth()


def test_state_from_the_wrong_server_or_twice() -> None:
    """A state from another worker than the server, or a second state, is refused."""
    server, rx, boot = scenario()
    before = snapshot(boot)
    with pytest.raises(BootstrapError):
        boot.state(ProgressState(0, (), {0: 4, 1: 0}))
    with pytest.raises(BootstrapError):
        boot.state(ProgressState(1, (), {0: 4, 1: 0}))
    assert snapshot(boot) == before
    assert finish_scenario(server, rx, boot) == truth()
    fresh = Bootstrap(2, 1, [0], [])
    with pytest.raises(BootstrapError):
        fresh.state(ProgressState(0, (), {}))
    fresh.hello(Hello(0, 0))
    assert fresh.request() is None  # the refused state was not taken


@pytest.mark.parametrize(
    "batches",
    [
        pytest.param((B[1],), id="missing-one"),
        pytest.param((B[1], B[2], B[3]), id="extra-one"),
        pytest.param((B[0], B[1], B[2]), id="extra-one-below"),
        pytest.param((B[2], B[3]), id="off-by-one"),
        pytest.param((B[0], B[1]), id="off-by-one-below"),
        pytest.param((B[2], B[1]), id="out-of-order"),
        pytest.param((B[1], ProgressBatch(1, 2, ())), id="other-sender"),
        pytest.param((), id="empty"),
    ],
)
def test_reply_with_other_batches(batches: tuple[ProgressBatch[Any], ...]) -> None:
    """A reply that does not hold exactly the requested batches is refused; the right one is taken afterwards."""
    _, _, boot = scenario()
    request = boot.request()
    assert request is not None
    before = snapshot(boot)
    with pytest.raises(BootstrapError):
        boot.reply(RangeReply(batches))
    assert snapshot(boot) == before and not boot.done
    boot.reply(RangeReply((B[1], B[2])))
    updates, _, _ = boot.finish()
    assert accumulate(updates) == truth()


def test_reply_not_asked_for() -> None:
    """A reply before the request, or a second reply, is refused."""
    _, _, boot = scenario()
    with pytest.raises(BootstrapError, match="did not ask"):
        boot.reply(RangeReply((B[1], B[2])))
    assert boot.request() is not None
    boot.reply(RangeReply((B[1], B[2])))
    before = snapshot(boot)
    with pytest.raises(BootstrapError, match="did not ask"):
        boot.reply(RangeReply((B[1], B[2])))
    assert snapshot(boot) == before


@pytest.mark.parametrize("lo", [0, 2])
def test_server_refuses_a_wrong_lo(lo: int) -> None:
    """The server refuses a range that does not start where the newcomer's state ended."""
    server, rx, boot = scenario()
    before = snapshot(server)
    with pytest.raises(BootstrapError, match="ends at 1"):
        server.request(RangeRequest(2, ((1, 0, 0), (0, lo, 3))))
    assert snapshot(server) == before
    assert server.replies(rx) == []  # no request was taken
    assert finish_scenario(server, rx, boot) == truth()


def test_server_refuses_a_newcomer_without_state() -> None:
    """The server refuses a request from a newcomer it sent no state to."""
    server, rx, _ = scenario()
    before = snapshot(server)
    with pytest.raises(BootstrapError, match="no progress state"):
        server.request(RangeRequest(9, ((0, 1, 3),)))
    assert snapshot(server) == before
    assert server.serving and server.replies(rx) == []


@pytest.mark.parametrize(
    ("sender", "seqs"),
    [
        pytest.param(0, (3, 5), id="member-skips"),
        pytest.param(0, (4,), id="member-starts-late"),
        pytest.param(0, (3, 3), id="member-duplicate"),
        pytest.param(5, (1,), id="fresh-starts-late"),
        pytest.param(5, (0, 2), id="fresh-skips"),
    ],
)
def test_link_gap_detected_at_finish(sender: int, seqs: tuple[int, ...]) -> None:
    """A link whose batches do not follow on from its hello (or from 0, for a fresh sibling) fails finish()."""
    boot = Bootstrap(2, 1, [0, 1], [5])
    boot.hello(Hello(0, 3))
    boot.hello(Hello(1, 0))
    boot.state(ProgressState(1, (), {0: 3, 1: 0, 5: 0}))
    assert boot.request() == RangeRequest(2, ())
    for seq in seqs:
        boot.batch(ProgressBatch(sender, seq, (("a", seq, 1),)))
    before = snapshot(boot)
    with pytest.raises(BootstrapError, match="was due"):
        boot.finish()
    assert snapshot(boot) == before


def test_batch_from_an_unknown_worker_and_early_finish() -> None:
    """A batch from a worker neither member nor fresh is refused; finish() before the view is complete is too."""
    _, _, boot = scenario()
    before = snapshot(boot)
    with pytest.raises(BootstrapError, match="unknown worker"):
        boot.batch(ProgressBatch(9, 0, ()))
    with pytest.raises(BootstrapError, match="cannot finish"):
        boot.finish()
    assert snapshot(boot) == before


# --- the property is sensitive: an off-by-one range --------------------------------------------------------------


def test_off_by_one_range_gives_a_wrong_view() -> None:
    """Asking ``[included+1, hello)`` instead of ``[included, hello)`` loses a batch: the view then differs."""
    server, rx, boot = scenario()
    request = boot.request()
    assert request is not None
    [(sender, lo, hi)] = request.ranges
    state_updates = B[0].updates  # what scenario()'s state holds
    links = [B[3], B[4]]

    def view(lo: int) -> Acc:
        """The state, plus batches ``lo .. hi-1`` of the sender as the server recorded them, plus the links."""
        ranged = [b for b in B if b.sender == sender and lo <= b.seq < hi]
        return accumulate([*state_updates, *(u for b in [*ranged, *links] for u in b.updates)])

    assert view(lo) == truth()
    assert view(lo + 1) != truth()  # batch 1 of worker 0 is in neither the state, the range nor the link
    # the model's own off-by-one mutant names that same wrong range, and the module refuses a reply for it
    b = Boot(2, 1, (3, 0, None), (1, 0, 0), frozenset(), frozenset(), 0)
    off = RescaleConfig(JOIN.poset, mutant=Mutant.RANGE_OFF_BY_ONE)
    assert missing_range(JOIN, b, 0) == (lo, hi) and missing_range(off, b, 0) == (lo + 1, hi)
    with pytest.raises(BootstrapError):
        boot.reply(RangeReply((B[2],)))
    server.request(request)
    [(_, reply)] = server.replies(rx)
    boot.reply(reply)
    updates, _, state = boot.finish()
    assert accumulate(updates) == view(lo) and accumulate(state.updates) == accumulate(state_updates)


# --- minting for a newcomer (seed 000 Fig. 4: strictly above a held capability) -------------------------------


@given(st.lists(st.integers(0, 50), min_size=1, max_size=6))
def test_mint_time_is_strictly_above_the_least_held_time(held: list[int]) -> None:
    assert mint_time(held) == min(held) + 1


def test_mint_for_products_and_nothing_held() -> None:
    held = [Product(3, 0), Product(2, 5)]
    t = mint_time(held)
    assert t == Product(3, 5) and Product(2, 5) < t  # one step after the least held, in the outer coordinate
    assert mint_time([]) is None
    assert mint({"a": [4, 2], "b": []}, ["a", "b", "c"]) == [("a", 3)]


def test_a_timestamp_without_a_successor_cannot_be_minted_for() -> None:
    class Opaque:
        def __le__(self, other: object) -> bool:
            return self is other

    assert successor(Product(Product(1, 2), 3)) == Product(Product(2, 2), 3)
    with pytest.raises(BootstrapError, match="Opaque has no successor"):
        mint_time([Opaque()])
