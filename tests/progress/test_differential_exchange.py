"""Differential tests: production progress exchange + trackers in lockstep with the seed 000 models.

Workers run the WCC dataflow of seed 000 Fig. 2. Hypothesis drives operator-like
actions (drop, downgrade, send a message, consume a message), flushes of
progress batches (eager and demand modes), deliveries of batches and of data.
Every production action is replayed on the exchange model (Fig. 4): its
enabling condition must hold (``perf_op``'s minting rules, ``send_upd``'s
``justified`` remainder), and the two states must agree (``caps``, ``temp``,
``glob``). At every step the model's ``Safe``, ``glob`` lemma and
``justified temp`` hold, every tracker satisfies the combined ``Safe`` (Fig. 7),
and every frontier equals ``implied_frontier`` of the worker's view.
"""

from __future__ import annotations

from collections import Counter
from functools import cache
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pytimely.order import Product
from pytimely.progress import PointstampOrder, ProgressBatch, ProgressMode, ProgressReceiver, ProgressSender, Source
from pytimely.verify import exchange as E
from pytimely.verify.graph import implied_frontier
from pytimely.verify.poset import Poset
from pytimely.verify.zmset import ZMSet, vacant
from tests.graphs import reference, wcc
from tests.profiles import examples

TIMES = [Product(e, i) for e in range(2) for i in range(3)]


@cache
def setting() -> tuple[Any, Any, PointstampOrder[Any], Poset, Any]:
    """The WCC graph, its locations, the could-result-in order and the finite pointstamp poset."""
    builder, locs = wcc(iterations=2)
    order: PointstampOrder[Any] = PointstampOrder(builder)
    points = [(loc, t) for loc in builder.locations() for t in TIMES]
    return builder, locs, order, Poset(points, order.le, name="wcc"), reference(builder)


class ExchangeLockstep(RuleBasedStateMachine):
    """Production workers and the exchange model, step for step."""

    mode = ProgressMode.EAGER
    workers = 2

    def __init__(self) -> None:
        super().__init__()
        self.builder, self.locs, self.order, poset, self.graph = setting()
        self.cfg = E.ExchangeConfig(poset, workers=self.workers)
        self.weights = self.builder.weights()
        n = self.workers
        initial = [(self.locs["a.1"], Product(0, 0)), (self.locs["b.3"], Product(0, 0))]
        self.caps: list[Counter[Any]] = [Counter(initial) for _ in range(n)]
        self.senders = [ProgressSender(w, self.order.lt, self.mode) for w in range(n)]
        self.receivers = [ProgressReceiver(n) for _ in range(n)]
        self.trackers = [self.builder.build() for _ in range(n)]
        self.queues: list[list[list[ProgressBatch[Any]]]] = [[[] for _ in range(n)] for _ in range(n)]
        self.data: list[tuple[int, Any]] = []
        # Every worker starts knowing every worker's initial capabilities (seed 001: "#workers" each).
        rec = ZMSet(Counter(p for c in self.caps for p in c.elements()))
        for tracker in self.trackers:
            tracker.update_batch((loc, t, d) for (loc, t), d in rec.items())
            tracker.propagate_all()
        glob = (rec,) * n
        vacated = frozenset(p for p in poset.elements if vacant(rec, p, poset.le))
        empty = tuple(tuple(() for _ in range(n)) for _ in range(n))
        self.model = E.State(
            tuple(ZMSet(c) for c in self.caps), ZMSet(), empty, (ZMSet(),) * n, glob, vacated
        )

    # -- operator actions (perf_op) ---------------------------------------------------------

    def perform(self, w: int, neg: list[Any], data: list[tuple[int, Any]], self_: list[Any]) -> None:
        d_neg, d_data, d_self = ZMSet(Counter(neg)), ZMSet(Counter(data)), ZMSet(Counter(self_))
        assert E.perf_op_enabled(self.cfg, self.model, w, d_neg, d_data, d_self), (
            f"production action not allowed by Fig. 4 perf_op: w={w} neg={neg} data={data} self={self_}"
        )
        self.model = E.perf_op(self.cfg, self.model, w, d_neg, d_data, d_self)
        for p in neg:
            self.caps[w][p] -= 1
            if not self.caps[w][p]:
                del self.caps[w][p]
        for p in self_:
            self.caps[w][p] += 1
        self.data.extend(data)
        updates = [(p[0], p[1], -1) for p in neg] + [(p[0], p[1], 1) for p in self_]
        updates += [(p[0], p[1], 1) for _, p in data]
        self.senders[w].record_batch(updates)

    def held(self, w: int, kind: type) -> list[Any]:
        return sorted((p for p in self.caps[w] if isinstance(p[0], kind)), key=repr)

    @rule(data=st.data())
    def operator_step(self, data: st.DataObject) -> None:
        self.operate(data.draw(st.integers(0, self.workers - 1)), data)

    def operate(self, w: int, data: st.DataObject) -> None:
        """One action of an operator of worker ``w`` (drawn from those its capabilities allow), if any."""
        options: list[tuple[str, Any]] = []
        for p in self.held(w, Source):
            options.append(("drop", p))
            options += [("downgrade", (p, t)) for t in TIMES if p[1] < t]
            for source, target in self.builder.edges():
                if source == p[0]:
                    options += [("send", (p, target, w2)) for w2 in range(self.workers)]
        for p in sorted((p for p in self.caps[w] if not isinstance(p[0], Source)), key=repr):
            options.append(("consume", (p, None)))
            for (start, output), summaries in self.weights.items():
                if start != p[0]:
                    continue
                for s in summaries:
                    r = s.results_in(p[1])
                    if r is not None and (output, r) in self.cfg.poset.elements:
                        options.append(("consume", (p, (output, r))))
        if not options:
            return
        kind, arg = data.draw(st.sampled_from(options))
        if kind == "drop":
            self.perform(w, [arg], [], [])
        elif kind == "downgrade":
            p, t = arg
            self.perform(w, [p], [], [(p[0], t)])
        elif kind == "send":
            p, target, w2 = arg
            self.perform(w, [], [(w2, (target, p[1]))], [])
        else:
            p, retained = arg
            self.perform(w, [p], [], [retained] if retained is not None else [])

    # -- progress exchange ------------------------------------------------------------------

    @rule(w=st.integers(0, 2))
    def flush(self, w: int) -> None:
        w %= self.workers
        batch = self.senders[w].flush(dict(self.caps[w]))
        if batch is None:
            return
        chosen = frozenset((loc, t) for loc, t, _ in batch.updates)
        assert E.send_upd_enabled(self.cfg, self.model, w, chosen), (
            f"worker {w} sent {batch.updates} keeping {self.senders[w].pending()}: not justified (Fig. 4)"
        )
        gamma = self.model.temp[w].filter(chosen.__contains__)
        assert dict(gamma.items()) == {(loc, t): d for loc, t, d in batch.updates}
        self.model = E.send_upd(self.cfg, self.model, w, chosen)
        for w2 in range(self.workers):
            self.queues[w][w2].append(batch)

    @precondition(lambda self: any(q for row in self.queues for q in row))
    @rule(data=st.data())
    def deliver_progress(self, data: st.DataObject) -> None:
        pairs = [(w, w2) for w in range(self.workers) for w2 in range(self.workers) if self.queues[w][w2]]
        w, w2 = data.draw(st.sampled_from(pairs))
        batch = self.queues[w][w2].pop(0)
        self.trackers[w2].update_batch(self.receivers[w2].accept(batch))
        self.trackers[w2].propagate_all()
        self.model = E.recv_upd(self.cfg, self.model, w, w2)

    @precondition(lambda self: bool(self.data))
    @rule(data=st.data())
    def deliver_data(self, data: st.DataObject) -> None:
        w2, p = self.data.pop(data.draw(st.integers(0, len(self.data) - 1)))
        self.caps[w2][p] += 1
        self.model = E.recv_cap(self.cfg, self.model, w2, p)

    # -- what must hold at every step -------------------------------------------------------

    @invariant()
    def states_agree(self) -> None:
        for w in range(self.workers):
            assert dict(self.model.caps[w].items()) == dict(+self.caps[w])
            assert dict(self.model.temp[w].items()) == self.senders[w].pending()
            tracker = self.trackers[w]
            view = {(loc, t): c for loc in self.builder.locations() for t, c in tracker.pointstamps(loc).items()}
            assert dict(self.model.glob[w].items()) == view

    @invariant()
    def model_properties_hold(self) -> None:
        assert E.Safe(self.cfg, self.model)
        assert E.glob_lemma(self.cfg, self.model)
        assert E.temp_justified(self.cfg, self.model)

    @invariant()
    def frontiers_are_safe_and_exact(self) -> None:
        rec = E.rec(self.model)
        present = [p for p, c in rec.items() if c > 0]
        locations = self.builder.locations()
        for w, tracker in enumerate(self.trackers):
            # Combined Safe (Fig. 7): every pointstamp in the system is reflected downstream.
            for loc, t in present:
                for target in locations:
                    for s in self.graph.path_summary(loc, target):
                        r = s.results_in(t)
                        if r is not None:
                            assert tracker.frontier(target).less_equal(r), (w, loc, t, target)
            pts = {loc: tracker.pointstamps(loc) for loc in locations}
            for loc in locations:
                assert set(tracker.frontier(loc).elements()) == set(implied_frontier(self.graph, pts, loc))


class DemandLockstep(ExchangeLockstep):
    """The same, with senders that keep back what their capabilities justify."""

    mode = ProgressMode.DEMAND


class ThreeWorkerDemandLockstep(ExchangeLockstep):
    """Three workers in demand mode."""

    mode = ProgressMode.DEMAND
    workers = 3


_settings = settings(max_examples=examples(60), stateful_step_count=40, deadline=None)
TestEagerExchange = ExchangeLockstep.TestCase
TestEagerExchange.settings = _settings
TestDemandExchange = DemandLockstep.TestCase
TestDemandExchange.settings = _settings
TestThreeWorkerDemandExchange = ThreeWorkerDemandLockstep.TestCase
TestThreeWorkerDemandExchange.settings = _settings
