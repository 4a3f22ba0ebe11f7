"""Differential tests: the runtime's bootstrap, minting and leave in lockstep with the rescaling model (seed 002).

The runtime's sans-I/O cores — :class:`ProgressSender`/:class:`ProgressReceiver`
(progress batches and their numbers), :class:`Bootstrap`/:class:`BootstrapServer`
(hellos, the server's state, range requests and replies) and :func:`mint` (the
capabilities a bootstrap server mints for a newcomer) — are driven the way
``Subgraph`` drives them, one action at a time, and every action is replayed on
:mod:`pytimely.verify.rescale`: its enabling condition must hold there (Fig. 4's
``perf_op`` and ``announce`` among them) and afterwards both agree on every
worker's capabilities, unsent updates, view and sequence numbers. The model's
invariants (``Safe`` first) hold at every step, and no member's view ever shows a
frontier past a time some worker still holds.

Joins follow the runtime: every member (and a newcomer still bootstrapping)
greets the newcomer with its next number, the server (the lowest member) sends
its state and mints at once, the newcomer asks for all its ranges in one request
and the server answers them together. Two newcomers may bootstrap at once. A
leave follows the runtime's handshake: a worker that holds nothing says
``LEAVING``; the others stop sending to it (``DONE``); it leaves once it has
sent everything and its batches have arrived.

The clone rule the runtime had before issue 15 (a newcomer's capability at the
*same* time the server holds) fails here: the model does not allow that
``announce``, and without the model's word the frontier check catches the
newcomer's ``-1`` overtaking the server's ``+1`` (:class:`CloneMint` below).
"""

from __future__ import annotations

import operator
from collections import Counter, deque
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from pytimely.progress import ProgressBatch, ProgressReceiver, ProgressSender, Source
from pytimely.progress.bootstrap import Bootstrap, BootstrapServer, Hello, ProgressState, mint
from pytimely.progress.broadcast import ProgressAggregator, aggregate_sender
from pytimely.verify import exchange as E
from pytimely.verify import rescale as R
from pytimely.verify.poset import Poset
from pytimely.verify.rescale import JOINING, LEAVING, MEMBER, RescaleConfig
from pytimely.verify.rescale.state import _boot_of
from pytimely.verify.zmset import ZMSet
from tests.profiles import examples

LOC = Source(0, 0)
"""The one output every worker's input operator has (the model's pointstamps are its times)."""
TIMES = tuple(range(5))
HIGHEST_HELD = 2
"""Capabilities move up to here, so a mint (one step later) stays inside the model's poset."""


def config(members: int, joiners: int) -> RescaleConfig:
    """The model over times ``0 .. 4`` with bounds wide enough never to stop the runtime."""
    poset = Poset(TIMES, operator.le, name="chain5")
    return RescaleConfig(
        poset,
        members=members,
        joiners=joiners,
        max_leaves=1,
        max_boots=2,
        init_caps=1,
        init_total=None,
        max_caps=4,
        max_batches=1000,
        queue_bound=1000,
    )


def initial_model(cfg: RescaleConfig) -> R.State:
    """The model's initial state in which every initial member holds one capability at time 0."""
    for s in R.initial_states(cfg):
        if all(s.exch.caps[w] == ZMSet.of(0) for w in range(cfg.members)):
            return s
    raise AssertionError("no initial state with a capability at 0 per member")


class RescaleLockstep(RuleBasedStateMachine):
    """The runtime's cores and the rescaling model, action for action."""

    members = 2
    joiners = 2
    check_announce = True
    """Whether each mint must be one the model allows (off only to show the frontier check alone)."""

    def __init__(self) -> None:
        super().__init__()
        self.cfg = config(self.members, self.joiners)
        self.model = initial_model(self.cfg)
        n = self.cfg.workers
        initial = range(self.members)
        self.caps: list[Counter[int]] = [Counter({0: 1}) if w in initial else Counter() for w in range(n)]
        self.senders: list[ProgressSender[Any]] = [ProgressSender(w) for w in range(n)]
        self.receivers: list[ProgressReceiver] = [
            ProgressReceiver(list(initial) if w in initial else []) for w in range(n)
        ]
        self.views: list[dict[Any, int]] = [{(LOC, 0): self.members} if w in initial else {} for w in range(n)]
        self.servers = [BootstrapServer(w) for w in range(n)]
        self.boots: dict[int, Bootstrap] = {}
        self.states: dict[int, ProgressState] = {}
        self.links: list[list[deque[ProgressBatch[Any]]]] = [[deque() for _ in range(n)] for _ in range(n)]

    # -- helpers ----------------------------------------------------------------------------

    def status(self, w: int) -> str:
        return self.model.status[w]

    def with_status(self, *wanted: str) -> list[int]:
        return [w for w in range(self.cfg.workers) if self.status(w) in wanted]

    def perform(self, w: int, neg: list[int], self_: list[int]) -> None:
        """An operator of ``w`` drops ``neg`` and takes ``self_`` (Fig. 4's ``perf_op w Δneg {} Δself``)."""
        d_neg, d_self = ZMSet.of(*neg), ZMSet.of(*self_)
        assert E.perf_op_enabled(self.cfg.exchange, self.model.exch, w, d_neg, ZMSet(), d_self), (w, neg, self_)
        self.model = self.model._replace(exch=E.perf_op(self.cfg.exchange, self.model.exch, w, d_neg, ZMSet(), d_self))
        for t in neg:
            self.caps[w][t] -= 1
        for t in self_:
            self.caps[w][t] += 1
        self.caps[w] = +self.caps[w]
        self.senders[w].record_batch([(LOC, t, -1) for t in neg] + [(LOC, t, 1) for t in self_])

    def apply(self, r: int, updates: Any) -> None:
        """Add ``updates`` to ``r``'s view (the counts the tracker keeps; they may go negative for a while)."""
        view = self.views[r]
        for loc, t, d in updates:
            c = view.get((loc, t), 0) + d
            if c:
                view[(loc, t)] = c
            else:
                view.pop((loc, t), None)

    def minted(self, server: int) -> list[tuple[Any, Any]]:
        """What the runtime's server mints for one newcomer worker, from the times it holds."""
        return mint({LOC: [t for t, c in self.caps[server].items() if c > 0]}, [LOC])

    # -- operators ----------------------------------------------------------------------------

    @precondition(lambda self: any(self.caps[w] for w in self.with_status(MEMBER)))
    @rule(data=st.data())
    def operator_step(self, data: st.DataObject) -> None:
        w = data.draw(st.sampled_from([w for w in self.with_status(MEMBER) if self.caps[w]]))
        t = data.draw(st.sampled_from(sorted(self.caps[w])))
        choices: list[int | None] = [None] + [u for u in TIMES if t < u <= HIGHEST_HELD]
        to = data.draw(st.sampled_from(choices))
        self.perform(w, [t], [] if to is None else [to])

    @precondition(lambda self: any(self.senders[w].pending() for w in self.with_status(MEMBER, LEAVING)))
    @rule(data=st.data())
    def flush(self, data: st.DataObject) -> None:
        w = data.draw(st.sampled_from([w for w in self.with_status(MEMBER, LEAVING) if self.senders[w].pending()]))
        chosen = frozenset(t for (_, t) in self.senders[w].pending())
        assert R.send_upd_enabled(self.cfg, self.model, w, chosen)
        batch = self.senders[w].flush()
        assert batch is not None
        self.model = R.send_upd(self.cfg, self.model, w, chosen)
        assert self.model.hist[w][-1] == ZMSet({t: d for _, t, d in batch.updates})
        # Subgraph pushes a batch to every worker it has a channel to: members and newcomers.
        for r in self.with_status(MEMBER, JOINING):
            self.links[w][r].append(batch)

    @precondition(lambda self: any(self.links[w][r] for w in range(self.cfg.workers) for r in self.with_status(MEMBER)))
    @rule(data=st.data())
    def deliver(self, data: st.DataObject) -> None:
        pairs = [(w, r) for w in range(self.cfg.workers) for r in self.with_status(MEMBER) if self.links[w][r]]
        w, r = data.draw(st.sampled_from(pairs))
        batch = self.links[w][r].popleft()
        assert R.recv_upd_enabled(self.model, w, r)
        self.apply(r, self.receivers[r].accept(batch))
        if self.servers[r].serving:
            self.servers[r].applied(batch)
        self.model = R.recv_upd(self.cfg, self.model, w, r)

    # -- join: the bootstrap protocol --------------------------------------------------------------

    def may_join(self) -> bool:
        return self.model.leave is None and len(self.model.boots) < self.cfg.max_boots and R.OUT in self.model.status

    def server_behind(self) -> bool:
        """Whether a batch is on its way to the next server (its state will then miss it: a range to ask for)."""
        server = min(self.with_status(MEMBER))
        return any(self.links[m][server] for m in range(self.cfg.workers))

    @precondition(lambda self: self.may_join())
    @rule(data=st.data())
    def join(self, data: st.DataObject) -> None:
        self.start_join(data)

    @precondition(lambda self: self.may_join() and self.server_behind())
    @rule(data=st.data())
    def join_while_the_server_is_behind(self, data: st.DataObject) -> None:
        self.start_join(data)

    @rule()
    def nothing_happens(self) -> None:
        """A step in which no worker does anything (keeps a run going once everything has finished)."""

    def start_join(self, data: st.DataObject) -> None:
        n = data.draw(st.sampled_from(self.with_status(R.OUT)))
        server = min(self.with_status(MEMBER))  # the lowest member's first worker serves every newcomer
        greeters = self.with_status(MEMBER, JOINING)
        assert R.join_enabled(self.cfg, self.model, n, server)
        self.model = R.join(self.cfg, self.model, n, server)
        boot = Bootstrap(n, server, greeters, (n,))  # its own link starts at zero, with no hello
        for m in greeters:
            # Progcaster._membership (dataflow/progcaster.py): a newcomer still bootstrapping hears of the
            # later one first.
            if m in self.boots:
                self.boots[m].joined([n])
            self.receivers[m].add(n, 0)
            boot.hello(Hello(m, self.senders[m].next_seq()))
        self.boots[n] = boot
        if len(self.boots) > 1:
            event("two newcomers bootstrap at once")

    @precondition(lambda self: any(R.bootstrap_state_enabled(self.model, b.newcomer) for b in self.model.boots))
    @rule(data=st.data())
    def server_state(self, data: st.DataObject) -> None:
        """The server takes its state for the newcomer and mints its capability, in the one step."""
        n = data.draw(st.sampled_from([b.newcomer for b in self.model.boots if b.base is None]))
        b = _boot_of(self.model, n)
        assert b is not None
        server = b.server
        self.model = R.bootstrap_state(self.cfg, self.model, n)
        minted = self.minted(server)
        for loc, t in minted:
            if self.check_announce:
                assert R.announce_enabled(self.cfg, self.model, t, n), (
                    f"server {server} holds {dict(self.caps[server])} and mints {t} for worker {n}: "
                    "Fig. 4 allows a capability only strictly above one the giver holds"
                )
            self.model = R.announce(self.cfg, self.model, t, n)
            self.senders[server].record(loc, t, 1)
        updates = [(loc, t, c) for (loc, t), c in self.views[server].items()]
        state = self.servers[server].state(n, updates, self.receivers[server], minted)
        self.boots[n].state(state)

    @precondition(lambda self: any(b.base is not None and not b.filled and not b.pending for b in self.model.boots))
    @rule(data=st.data())
    def request_ranges(self, data: st.DataObject) -> None:
        ready = [b.newcomer for b in self.model.boots if b.base is not None and not b.filled and not b.pending]
        n = data.draw(st.sampled_from(ready))
        request = self.boots[n].request()
        if request is None:
            return  # already asked
        b = _boot_of(self.model, n)
        assert b is not None
        wanted = {
            (m, *rng) for m in range(self.cfg.workers) if (rng := R.missing_range(self.cfg, b, m)) and rng[0] < rng[1]
        }
        assert set(request.ranges) == wanted, (request.ranges, wanted)
        if request.ranges:
            event("a newcomer asks its server for missing batches")
        for m, _, _ in request.ranges:
            assert R.range_request_enabled(self.cfg, self.model, m, n)
            self.model = R.range_request(self.cfg, self.model, m, n)
        self.servers[b.server].request(request)

    @precondition(lambda self: any(b.pending for b in self.model.boots))
    @rule()
    def server_replies(self) -> None:
        for b in list(self.model.boots):
            if not b.pending:
                continue
            for newcomer, reply in self.servers[b.server].replies(self.receivers[b.server]):
                nb = _boot_of(self.model, newcomer)
                assert nb is not None
                for m, lo, hi in sorted(nb.pending):
                    assert R.range_reply_enabled(self.model, m, lo, hi, newcomer)
                    self.model = R.range_reply(self.cfg, self.model, m, lo, hi, newcomer)
                self.boots[newcomer].reply(reply)
                event("the server answers a range request")

    @precondition(lambda self: any(self.boots[n].done for n in self.boots))
    @rule(data=st.data())
    def finish_bootstrap(self, data: st.DataObject) -> None:
        n = data.draw(st.sampled_from(sorted(n for n in self.boots if self.boots[n].done)))
        assert R.bootstrap_done_enabled(self.cfg, self.model, n)
        boot = self.boots.pop(n)
        updates, receiver, state = boot.finish()
        for sender, next_seq in self.receivers[n].numbers().items():
            receiver.add(sender, next_seq)  # workers that joined while this one bootstrapped
        self.receivers[n] = receiver
        self.views[n] = {}
        self.apply(n, updates)
        self.model = R.bootstrap_done(self.cfg, self.model, n)
        event("a newcomer finishes its bootstrap" + (" holding a minted capability" if state.minted else ""))
        for _, t in state.minted:
            self.caps[n][t] += 1
            self.model = self.model._replace(exch=E.recv_cap(self.cfg.exchange, self.model.exch, n, t))

    # -- leave: LEAVING, DONE, gone ---------------------------------------------------------------

    @precondition(lambda self: self.model.leave is None and not self.model.boots)
    @rule(data=st.data())
    def leaving(self, data: st.DataObject) -> None:
        """A worker holding nothing says LEAVING; the others answer DONE and send it nothing more."""
        members = self.with_status(MEMBER)
        heirs = {w: min(m for m in members if m != w) for w in members if len(members) > 1}
        # Worker.leave: it holds nothing; the model also wants no capability on its way to it.
        empty = [w for w, h in heirs.items() if not self.caps[w] and R.leave_enabled(self.cfg, self.model, w, h)]
        if not empty:
            return
        w = data.draw(st.sampled_from(empty))
        heir = heirs[w]
        self.model = R.leave(self.cfg, self.model, w, heir)
        for r in range(self.cfg.workers):
            self.links[r][w].clear()

    @precondition(lambda self: self.model.leave is not None)
    @rule()
    def depart(self) -> None:
        """The leaver goes once it has sent every change and its batches have arrived."""
        lv = self.model.leave
        assert lv is not None
        w = lv.leaver
        if self.senders[w].pending() or any(self.links[w]):
            return
        assert not self.caps[w]
        assert R.hand_over_enabled(self.cfg, self.model)
        self.model = R.hand_over(self.cfg, self.model)
        assert R.disconnect_enabled(self.model)
        self.model = R.disconnect(self.cfg, self.model)
        event("a worker leaves")

    # -- what must hold at every step -------------------------------------------------------------

    @invariant()
    def states_agree(self) -> None:
        e = self.model.exch
        for w in range(self.cfg.workers):
            assert dict(e.caps[w].items()) == dict(self.caps[w]), w
            assert dict(e.temp[w].items()) == {t: d for (_, t), d in self.senders[w].pending().items()}, w
            if self.status(w) == MEMBER:
                assert dict(e.glob[w].items()) == {t: c for (_, t), c in self.views[w].items()}, w
                numbers = self.receivers[w].numbers()
                # A worker that left sends nothing more: a newcomer's receiver need not know it.
                for s in self.with_status(MEMBER, JOINING, LEAVING):
                    assert numbers.get(s, 0) == self.model.recvd[w][s], (w, s)
        for w in range(self.cfg.workers):
            for r in range(self.cfg.workers):
                assert [b.seq for b in self.links[w][r]] == [k for k, _ in self.model.links[w][r]], (w, r)

    @invariant()
    def model_invariants_hold(self) -> None:
        model = R.RescaleModel(self.cfg)
        for inv in model.invariants():
            assert inv.holds(self.model), inv.name

    @invariant()
    def no_frontier_passes_a_held_time(self) -> None:
        """No member's view is vacant at a time some worker holds (what a frontier must never pass)."""
        held = [t for w in range(self.cfg.workers) for t, c in self.caps[w].items() if c > 0]
        held += [t for (_, t), c in self.model.exch.data.items() if c > 0]
        for r in self.with_status(MEMBER):
            view = self.views[r]
            for t in held:
                assert any(c > 0 for (_, u), c in view.items() if u <= t), (
                    f"worker {r}'s frontier passed time {t}, which is still held: view {dict(view)}"
                )


class ThreeMembers(RescaleLockstep):
    """Three initial members, one newcomer."""

    members = 3
    joiners = 1


class CloneMint(RescaleLockstep):
    """The rule the runtime had before issue 15 — a copy at the least time the server holds — run without
    asking the model whether it may, so only the frontier check (and the model's ``Safe``) can object."""

    check_announce = False

    def minted(self, server: int) -> list[tuple[Any, Any]]:
        held = [t for t, c in self.caps[server].items() if c > 0]
        return [(LOC, min(held))] if held else []

    @invariant()
    def model_invariants_hold(self) -> None:
        """Only ``Safe``: the clone breaks ``InvTempJustified`` at once, which says nothing about frontiers."""
        assert R.Safe(self.cfg, self.model)


def test_the_clone_rule_lets_a_frontier_pass_a_held_time() -> None:
    """The newcomer retires its copy and its -1 reaches a member before the server's +1 (issue 15)."""
    with pytest.raises(AssertionError, match=r"frontier passed time|Safe"):
        run_state_machine_as_test(
            CloneMint,
            settings=settings(
                max_examples=examples(2000),
                stateful_step_count=30,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                phases=[Phase.generate],
                database=None,
                derandomize=True,
            ),
        )


def test_the_model_refuses_the_clone_rule() -> None:
    """The same mint, checked against the model: ``announce`` at the server's own time is not enabled."""
    machine = RescaleLockstep()
    cfg = machine.cfg
    s = R.bootstrap_state(cfg, R.join(cfg, machine.model, 2, 0), 2)
    assert s.exch.caps[0] == ZMSet.of(0)
    assert not R.announce_enabled(cfg, s, 0, 2) and R.announce_enabled(cfg, s, 1, 2)
    assert machine.minted(0) == [(LOC, 1)]
    assert CloneMint.minted(machine, 0) == [(LOC, 0)]


_settings = settings(max_examples=examples(150), stateful_step_count=40, deadline=None)
TestRescaleLockstep = RescaleLockstep.TestCase
TestRescaleLockstep.settings = _settings
TestThreeMembers = ThreeMembers.TestCase
TestThreeMembers.settings = _settings


# --- progress aggregated per process: the runtime's outboxes against the model's aggregate senders -------------

PROCESSES = (0, 0, 1, 2, 3)
"""Workers 0 and 1 share process 0, worker 2 is process 1; workers 3 and 4 join, each in a process of its own."""


class AggregatedLockstep(RescaleLockstep):
    """The same cores with progress aggregated per process, against the model with aggregated senders.

    A worker's flush goes to the workers of its own process and into its process's ``ProgressAggregator``; an
    outbox flush takes everything queued as one batch of the process's aggregate sender, to every worker of every
    other process (newcomers included). A process greets a newcomer once, from its outbox, with the number of its
    next combined batch; a bootstrap server first flushes its process's outbox and takes in everything on its links
    (what the runtime does under the process's lock), then takes its state, naming how many combined batches of its
    own process it includes.
    """

    members = 3
    joiners = 2

    def __init__(self) -> None:
        super().__init__()
        base = config(self.members, self.joiners)
        self.cfg = RescaleConfig(
            base.poset,
            members=base.members,
            joiners=base.joiners,
            max_leaves=base.max_leaves,
            max_boots=base.max_boots,
            init_caps=base.init_caps,
            init_total=base.init_total,
            max_caps=base.max_caps,
            max_batches=base.max_batches,
            queue_bound=base.queue_bound,
            processes=PROCESSES,
        )
        self.model = initial_model(self.cfg)
        cfg = self.cfg
        initial = range(self.members)
        self.aggregators: list[ProgressAggregator[Any]] = [ProgressAggregator(p) for p in range(cfg.process_count)]
        self.receivers = [
            ProgressReceiver([self.runtime_id(s) for s in range(cfg.senders) if self.feeds_initially(s, w)])
            if w in initial
            else ProgressReceiver([])
            for w in range(cfg.workers)
        ]
        self.links = [[deque() for _ in range(cfg.workers)] for _ in range(cfg.senders)]
        self.greeted: list[set[int]] = [set() for _ in range(cfg.process_count)]

    # -- sender ids: the model numbers aggregate senders after the workers, the runtime below zero ------------

    def runtime_id(self, sender: int) -> int:
        return sender if sender < self.cfg.workers else aggregate_sender(sender - self.cfg.workers)

    def model_id(self, sender: int) -> int:
        return sender if sender >= 0 else self.cfg.aggregate(-1 - sender)

    def sends_again(self, sender: int) -> bool:
        """Whether ``sender`` may still send: a worker that has not left, or the outbox of a process with one.

        A process whose last worker has left (after its outbox's batches arrived) never sends again, and a newcomer
        is greeted only by processes with a worker, so its receiver does not know that outbox; the model's number
        for it is the server's, copied with the state (which is harmless: no batch of it is ever on a link).
        """
        if sender < self.cfg.workers:
            return self.status(sender) in (MEMBER, JOINING, LEAVING)
        process = sender - self.cfg.workers
        return any(self.cfg.process(w) == process for w in self.with_status(MEMBER, JOINING, LEAVING))

    def feeds_initially(self, sender: int, w: int) -> bool:
        """Whether ``sender`` is one worker ``w`` hears from when the computation starts."""
        cfg = self.cfg
        if sender < cfg.workers:
            return sender < self.members and cfg.feeds(sender, w)
        process = sender - cfg.workers
        return cfg.feeds(sender, w) and any(cfg.process(m) == process for m in range(self.members))

    # -- progress batches ---------------------------------------------------------------------------------------

    @precondition(lambda self: any(self.senders[w].pending() for w in self.with_status(MEMBER, LEAVING)))
    @rule(data=st.data())
    def flush(self, data: st.DataObject) -> None:
        w = data.draw(st.sampled_from([w for w in self.with_status(MEMBER, LEAVING) if self.senders[w].pending()]))
        chosen = frozenset(t for (_, t) in self.senders[w].pending())
        assert R.send_upd_enabled(self.cfg, self.model, w, chosen)
        batch = self.senders[w].flush()
        assert batch is not None
        self.model = R.send_upd(self.cfg, self.model, w, chosen)
        p = self.cfg.process(w)
        for r in self.with_status(MEMBER, JOINING):
            if self.cfg.process(r) == p:
                self.links[w][r].append(batch)
        self.aggregators[p].offer(batch)

    @precondition(lambda self: any(a.queued() for a in self.aggregators))
    @rule(data=st.data())
    def outbox_flush(self, data: st.DataObject) -> None:
        p = data.draw(st.sampled_from([a.process for a in self.aggregators if a.queued()]))
        self.flush_outbox(p)

    def flush_outbox(self, p: int) -> None:
        """The runtime's flush of process ``p``'s outbox: everything queued, as one batch (``agg_send p k``)."""
        aggregator = self.aggregators[p]
        k = len(aggregator.queued())
        assert R.agg_send_enabled(self.cfg, self.model, p, k)
        combined = aggregator.flush()
        self.model = R.agg_send(self.cfg, self.model, p, k)
        if combined is None:
            return
        event("an outbox sends a combined batch" + (" of two workers" if k > 1 else ""))
        a = self.cfg.aggregate(p)
        for r in self.with_status(MEMBER, JOINING):
            if self.cfg.feeds(a, r):
                self.links[a][r].append(combined)

    @precondition(
        lambda self: any(self.links[s][r] for s in range(self.cfg.senders) for r in self.with_status(MEMBER))
    )
    @rule(data=st.data())
    def deliver(self, data: st.DataObject) -> None:
        pairs = [(s, r) for s in range(self.cfg.senders) for r in self.with_status(MEMBER) if self.links[s][r]]
        s, r = data.draw(st.sampled_from(pairs))
        self.take(s, r)

    def take(self, s: int, r: int) -> None:
        batch = self.links[s][r].popleft()
        assert R.recv_upd_enabled(self.model, s, r)
        self.apply(r, self.receivers[r].accept(batch))
        if self.servers[r].serving:
            self.servers[r].applied(batch)
        self.model = R.recv_upd(self.cfg, self.model, s, r)

    # -- join -------------------------------------------------------------------------------------------------

    def server_behind(self) -> bool:
        server = min(self.with_status(MEMBER))
        return any(self.links[s][server] for s in range(self.cfg.senders))

    def start_join(self, data: st.DataObject) -> None:
        cfg = self.cfg
        n = data.draw(st.sampled_from(self.with_status(R.OUT)))
        server = min(self.with_status(MEMBER))
        joined = self.with_status(MEMBER, JOINING)
        assert R.join_enabled(cfg, self.model, n, server)
        self.model = R.join(cfg, self.model, n, server)
        processes = sorted({cfg.process(m) for m in joined})
        boot = Bootstrap(n, server, [aggregate_sender(p) for p in processes], (n,))
        for p in processes:
            # The process's outbox greets the newcomer once, with the number of its next combined batch.
            boot.hello(Hello(aggregate_sender(p), self.aggregators[p].next_seq()))
            self.greeted[p].add(n)
        for m in joined:
            if m in self.boots:
                self.boots[m].joined([aggregate_sender(cfg.process(n))])
            self.receivers[m].add(aggregate_sender(cfg.process(n)), 0)
        self.boots[n] = boot
        if len(self.boots) > 1:
            event("two newcomers bootstrap at once")

    @precondition(lambda self: any(b.base is None for b in self.model.boots))
    @rule(data=st.data())
    def server_state(self, data: st.DataObject) -> None:
        """The server flushes its process's outbox, takes in what its process's workers sent, takes its state, and
        mints."""
        cfg = self.cfg
        n = data.draw(st.sampled_from([b.newcomer for b in self.model.boots if b.base is None]))
        b = _boot_of(self.model, n)
        assert b is not None
        server = b.server
        p = cfg.process(server)
        if self.aggregators[p].queued():
            self.flush_outbox(p)
        # What its process's workers sent is in its mailbox already (pushed there under the lock): it takes that in.
        # Batches of other processes may still be on their way: those it may miss (a range to ask for).
        for w in range(cfg.workers):
            while cfg.process(w) == p and self.links[w][server]:
                self.take(w, server)
        assert R.bootstrap_state_enabled(self.model, n, cfg)
        self.model = R.bootstrap_state(cfg, self.model, n)
        minted = self.minted(server)
        for loc, t in minted:
            assert R.announce_enabled(cfg, self.model, t, n)
            self.model = R.announce(cfg, self.model, t, n)
            self.senders[server].record(loc, t, 1)
        updates = [(loc, t, c) for (loc, t), c in self.views[server].items()]
        own = {aggregate_sender(p): self.aggregators[p].next_seq()}
        state = self.servers[server].state(n, updates, self.receivers[server], minted, own)
        self.boots[n].state(state)

    @precondition(lambda self: any(b.base is not None and not b.filled and not b.pending for b in self.model.boots))
    @rule(data=st.data())
    def request_ranges(self, data: st.DataObject) -> None:
        ready = [b.newcomer for b in self.model.boots if b.base is not None and not b.filled and not b.pending]
        n = data.draw(st.sampled_from(ready))
        request = self.boots[n].request()
        if request is None:
            return
        b = _boot_of(self.model, n)
        assert b is not None
        wanted = {
            (self.runtime_id(m), *rng)
            for m in range(self.cfg.senders)
            if (rng := R.missing_range(self.cfg, b, m)) and rng[0] < rng[1]
        }
        assert set(request.ranges) == wanted, (request.ranges, wanted)
        if request.ranges:
            event("a newcomer asks its server for missing combined batches")
        for sender, _, _ in request.ranges:
            m = self.model_id(sender)
            assert R.range_request_enabled(self.cfg, self.model, m, n)
            self.model = R.range_request(self.cfg, self.model, m, n)
        self.servers[b.server].request(request)

    # -- leave --------------------------------------------------------------------------------------------------

    @precondition(lambda self: self.model.leave is not None)
    @rule()
    def depart(self) -> None:
        """The leaver goes once it has sent every change and they have arrived, through its process's outbox too."""
        lv = self.model.leave
        assert lv is not None
        w = lv.leaver
        p = self.cfg.process(w)
        a = self.cfg.aggregate(p)
        held = any(batch.sender == w for batch in self.aggregators[p].queued())
        if self.senders[w].pending() or any(self.links[w]) or held or any(self.links[a]):
            return
        assert not self.caps[w]
        assert R.hand_over_enabled(self.cfg, self.model)
        self.model = R.hand_over(self.cfg, self.model)
        assert R.disconnect_enabled(self.model, self.cfg)
        self.model = R.disconnect(self.cfg, self.model)
        event("a worker leaves")

    @precondition(lambda self: self.model.leave is None and not self.model.boots)
    @rule(data=st.data())
    def leaving(self, data: st.DataObject) -> None:
        """A worker holding nothing says LEAVING; nothing more reaches it, from workers or outboxes."""
        super().leaving(data)
        lv = self.model.leave
        if lv is not None:
            for s in range(self.cfg.senders):
                self.links[s][lv.leaver].clear()

    # -- what must hold at every step -------------------------------------------------------------------------

    @invariant()
    def states_agree(self) -> None:
        cfg = self.cfg
        e = self.model.exch
        for w in range(cfg.workers):
            assert dict(e.caps[w].items()) == dict(self.caps[w]), w
            assert dict(e.temp[w].items()) == {t: d for (_, t), d in self.senders[w].pending().items()}, w
            if self.status(w) == MEMBER:
                assert dict(e.glob[w].items()) == {t: c for (_, t), c in self.views[w].items()}, w
                numbers = self.receivers[w].numbers()
                for s in range(cfg.senders):
                    if not cfg.feeds(s, w):
                        continue
                    if self.sends_again(s):
                        assert numbers.get(self.runtime_id(s), 0) == self.model.recvd[w][s], (w, s)
                    elif self.runtime_id(s) in numbers:
                        # A sender gone for good: a worker that met it still agrees; a newcomer need not know it.
                        assert numbers[self.runtime_id(s)] == self.model.recvd[w][s], (w, s)
        for s in range(cfg.senders):
            # What makes a gone sender's number moot: nothing of it is left on any link.
            assert self.sends_again(s) or not any(self.model.links[s]), s
            for r in range(cfg.workers):
                assert [b.seq for b in self.links[s][r]] == [k for k, _ in self.model.links[s][r]], (s, r)
        for p, aggregator in enumerate(self.aggregators):
            runtime = [(b.sender, {t: d for _, t, d in b.updates}) for b in aggregator.queued()]
            assert runtime == [(w, dict(g.items())) for w, g in self.model.out[p]], p


TestAggregatedLockstep = AggregatedLockstep.TestCase
TestAggregatedLockstep.settings = _settings


class Script:
    """Stands in for Hypothesis's ``data`` to replay a run: each draw takes the next scripted value."""

    def __init__(self, *values: Any) -> None:
        self.values = deque(values)

    def draw(self, strategy: st.SearchStrategy[Any], label: Any = None) -> Any:
        """The next scripted value, which must be one the rule offers."""
        value = self.values.popleft()
        offered = getattr(strategy, "elements", None)
        assert offered is None or value in offered, (value, offered)
        return value


def test_a_newcomer_need_not_know_the_outbox_of_a_process_that_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """Process 1's only worker (2) sends one combined batch and leaves; worker 3 then joins behind a batch of worker
    0. Worker 3 is greeted by process 0 alone: its receiver does not know process 1's outbox, whose number the model
    copies from the server (1). Found by Hypothesis; replayed here so a fresh example database runs it too."""
    monkeypatch.setitem(globals(), "event", lambda value, payload="": None)  # no Hypothesis run to record it in
    machine = AggregatedLockstep()
    steps: list[tuple[Any, tuple[Any, ...]]] = [
        (machine.leaving, ()),
        (machine.operator_step, (2, 0, None)),
        (machine.flush, (2,)),
        (machine.deliver, ((2, 2),)),
        (machine.leaving, (2,)),
        (machine.outbox_flush, (1,)),
        (machine.deliver, ((6, 0),)),
        (machine.deliver, ((6, 1),)),
        (machine.depart, None),
        (machine.operator_step, (0, 0, None)),
        (machine.flush, (0,)),
        (machine.join_while_the_server_is_behind, (3,)),
        (machine.server_state, (3,)),
        (machine.request_ranges, (3,)),
        (machine.finish_bootstrap, (3,)),
    ]
    for step, draws in steps:
        if draws is None:
            step()
        else:
            script = Script(*draws)
            step(script)
            assert not script.values, step
        machine.states_agree()
        machine.model_invariants_hold()
        machine.no_frontier_passes_a_held_time()
    assert machine.status(2) == R.LEFT and machine.status(3) == MEMBER
    assert -2 not in machine.receivers[3].numbers() and machine.model.recvd[3][machine.cfg.aggregate(1)] == 1
