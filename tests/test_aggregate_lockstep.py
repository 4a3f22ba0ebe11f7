"""Progress aggregated per process, in lockstep with its model (``pytimely.verify.aggregate``).

Three workers, 0 and 1 in process 0 and 2 in process 1, run the WCC dataflow of seed 000 Fig. 2 as in
``tests/test_differential_exchange.py``. A worker's flush goes straight to the workers of its own process
and to its process's :class:`ProgressAggregator`; Hypothesis also flushes an aggregator's oldest batches as
one, which reaches every worker of the other process. Every production step is replayed on the aggregate
model (its enabling condition must hold), and the two agree at every step: capabilities, pending changes,
every view, every outbox; the model's ``Safe`` holds and every frontier is the exact implied frontier.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from pytimely.errors import InvalidArgument
from pytimely.progress import ProgressBatch, ProgressMode, ProgressReceiver
from pytimely.progress.broadcast import ProgressAggregator, aggregate_sender
from pytimely.verify import aggregate as A
from pytimely.verify import exchange as E

from .test_differential_exchange import ExchangeLockstep

PROCESSES = (0, 0, 1)


class AggregateLockstep(ExchangeLockstep):
    """Production senders, aggregators, receivers and trackers against the aggregate model."""

    mode = ProgressMode.DEMAND
    workers = len(PROCESSES)

    def __init__(self) -> None:
        super().__init__()
        self.agg_cfg = A.AggregateConfig(self.cfg, PROCESSES)
        count = max(PROCESSES) + 1
        self.out: tuple[tuple[object, ...], ...] = tuple(() for _ in range(count))
        self.aggregators: list[ProgressAggregator[object]] = [ProgressAggregator(p) for p in range(count)]
        self.receivers = [
            ProgressReceiver(
                [w for w, q in enumerate(PROCESSES) if q == PROCESSES[me]]
                + [aggregate_sender(q) for q in range(count) if q != PROCESSES[me]]
            )
            for me in range(self.workers)
        ]

    def _state(self) -> A.AggState:
        return A.AggState(self.model, self.out)  # type: ignore[arg-type]

    @rule(w=st.integers(0, 2))
    def flush(self, w: int) -> None:
        w %= self.workers
        batch = self.senders[w].flush(dict(self.caps[w]))
        if batch is None:
            return
        chosen = frozenset((loc, t) for loc, t, _ in batch.updates)
        assert E.send_upd_enabled(self.cfg, self.model, w, chosen), f"worker {w} sent an unjustified batch"
        s = A.send_upd(self.agg_cfg, self._state(), w, chosen)
        self.model, self.out = s.base, s.out
        for w2, q in enumerate(PROCESSES):
            if q == PROCESSES[w]:
                self.queues[w][w2].append(batch)
        self.aggregators[PROCESSES[w]].offer(batch)

    @precondition(lambda self: any(a.queued() for a in self.aggregators))
    @rule(data=st.data())
    def flush_process(self, data: st.DataObject) -> None:
        p = data.draw(st.sampled_from([a.process for a in self.aggregators if a.queued()]))
        k = data.draw(st.integers(1, len(self.aggregators[p].queued())))
        # The model bounds its queues to stay finite; the runtime's are unbounded, so only the count is checked.
        assert 1 <= k <= len(self.out[p])
        batch = self.aggregators[p].flush(k)
        s = A.agg_send(self.agg_cfg, self._state(), p, k)
        self.model, self.out = s.base, s.out
        if batch is None:
            return
        lead = self.agg_cfg.lead(p)
        for w2 in self.agg_cfg.remote(p):
            self.queues[lead][w2].append(batch)

    # -- what must hold at every step, beyond the exchange lockstep's own invariants ----------

    @invariant()
    def outboxes_agree(self) -> None:
        for p, aggregator in enumerate(self.aggregators):
            runtime = [{(loc, t): d for loc, t, d in b.updates} for b in aggregator.queued()]
            assert runtime == [dict(g.items()) for g in self.out[p]]  # type: ignore[attr-defined]
        assert A.glob_lemma(self.agg_cfg, self._state())

    @invariant()
    def queues_agree(self) -> None:
        for w in range(self.workers):
            for w2 in range(self.workers):
                runtime = [{(loc, t): d for loc, t, d in b.updates} for b in self.queues[w][w2]]
                assert runtime == [dict(g.items()) for g in self.model.msg[w][w2]], (w, w2)


TestAggregateLockstep = AggregateLockstep.TestCase
TestAggregateLockstep.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def test_aggregated_batches_combine_in_order_and_cancel_out() -> None:
    """Two workers' batches leave as one; a batch that cancels out is not sent; only a prefix may go."""
    aggregator: ProgressAggregator[int] = ProgressAggregator(3)
    assert aggregator.flush() is None
    aggregator.offer(ProgressBatch(6, 0, (("a", 1, 1), ("b", 0, -1))))
    aggregator.offer(ProgressBatch(7, 4, (("a", 1, -1), ("c", 2, 1))))
    aggregator.offer(ProgressBatch(6, 1, (("c", 2, -1),)))
    first = aggregator.flush(2)
    assert first is not None and first.sender == aggregate_sender(3) == -4 and first.seq == 0
    assert sorted(first.updates) == [("b", 0, -1), ("c", 2, 1)]
    with pytest.raises(InvalidArgument, match="cannot flush 2"):
        aggregator.flush(2)
    second = aggregator.flush()
    assert second is not None and second.seq == 1 and second.updates == (("c", 2, -1),)
    aggregator.offer(ProgressBatch(6, 2, (("d", 0, 1),)))
    aggregator.offer(ProgressBatch(7, 5, (("d", 0, -1),)))
    assert aggregator.flush() is None and not aggregator.queued()
