"""Progress aggregated per process, in lockstep with its model (``pytimely.verify.aggregate``).

Three workers, 0 and 1 in process 0 and 2 in process 1, run the WCC dataflow of seed 000 Fig. 2 as in
``tests/progress/test_differential_exchange.py``. The runtime's own path decides when batches leave and how many go as
one: a worker's step begins (``ProgressAggregator.begin``) and ends with its flush, which goes straight to the
workers of its own process (waking them, as a mailbox does) and into its process's ``ProgressAggregator``; the
end of the step (``ProgressAggregator.end``, told which workers have messages waiting) says how many queued
batches leave now, as one batch that reaches every worker of the other process (waking them); time passing lets
what waited too long leave (the cluster's outbox thread, ``ProgressAggregator.due``). Every production step is
replayed on the aggregate model (its enabling condition must hold), and the two agree at every step:
capabilities, pending changes, every view, every outbox, every queue; the model's ``Safe`` holds and every
frontier is the exact implied frontier. The run must see batches of two workers combined into one and checked
against the model: with combining off it fails (``test_the_check_fails_when_batches_are_not_combined``).
"""

from __future__ import annotations

from typing import ClassVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule, run_state_machine_as_test

from pytimely.errors import InvalidArgument
from pytimely.progress import ProgressBatch, ProgressMode, ProgressReceiver
from pytimely.progress.broadcast import AGGREGATE_DELAY, ProgressAggregator, aggregate_sender
from pytimely.verify import aggregate as A
from pytimely.verify import exchange as E
from tests.profiles import examples
from tests.progress.test_differential_exchange import ExchangeLockstep

PROCESSES = (0, 0, 1)


class AggregateLockstep(ExchangeLockstep):
    """Production senders, aggregators (with their own flushing policy), receivers and trackers against the
    aggregate model."""

    mode = ProgressMode.DEMAND
    workers = len(PROCESSES)
    combine = True
    combined_checked: ClassVar[int] = 0
    """Over a run: flushes that combined the batches of more than one worker, checked against the model."""

    def __init__(self) -> None:
        super().__init__()
        self.agg_cfg = A.AggregateConfig(self.cfg, PROCESSES)
        count = max(PROCESSES) + 1
        self.out: tuple[tuple[object, ...], ...] = tuple(() for _ in range(count))
        self.aggregators: list[ProgressAggregator[object]] = [
            ProgressAggregator(p, combine=self.combine) for p in range(count)
        ]
        self.receivers = [
            ProgressReceiver(
                [w for w, q in enumerate(PROCESSES) if q == PROCESSES[me]]
                + [aggregate_sender(q) for q in range(count) if q != PROCESSES[me]]
            )
            for me in range(self.workers)
        ]
        self.now = 0.0
        self.awake: set[int] = set()
        """Workers with a message waiting for their next step (a set wake event in the cluster)."""

    def _state(self) -> A.AggState:
        return A.AggState(self.model, self.out)  # type: ignore[arg-type]

    def _awake_in(self, p: int) -> list[int]:
        return sorted(w for w in self.awake if PROCESSES[w] == p)

    @rule(w=st.integers(0, 2))
    def begin_step(self, w: int) -> None:
        """A worker starts a step: it has taken what woke it, and may offer a batch before the step ends."""
        self.awake.discard(w)
        self.aggregators[PROCESSES[w]].begin(w)

    @rule(w=st.integers(0, 2))
    def flush(self, w: int) -> None:
        """A worker's step ends with its flush (``send_upd``), then its process's outbox decides (``agg_send``)."""
        w %= self.workers
        p = PROCESSES[w]
        aggregator = self.aggregators[p]
        batch = self.senders[w].flush(dict(self.caps[w]))
        if batch is not None:
            chosen = frozenset((loc, t) for loc, t, _ in batch.updates)
            assert E.send_upd_enabled(self.cfg, self.model, w, chosen), f"worker {w} sent an unjustified batch"
            s = A.send_upd(self.agg_cfg, self._state(), w, chosen)
            self.model, self.out = s.base, s.out
            for w2, q in enumerate(PROCESSES):
                if q == p:
                    self.queues[w][w2].append(batch)
                    self.awake.add(w2)
            aggregator.offer(batch, self.now)
        self._leave(p, aggregator.end(w, self.now, self._awake_in(p)))

    @rule(w=st.integers(0, 2), data=st.data())
    def step(self, w: int, data: st.DataObject) -> None:
        """A whole step of a worker: it begins, an operator of it acts (if it can), it ends with its flush."""
        self.begin_step(w)
        self.operate(w, data)
        self.flush(w)

    @rule(seconds=st.sampled_from([AGGREGATE_DELAY / 4, AGGREGATE_DELAY]))
    def time_passes(self, seconds: float) -> None:
        """Time passes; what waited ``delay`` leaves, sent by the cluster's outbox thread if no worker steps."""
        self.now += seconds
        for p, aggregator in enumerate(self.aggregators):
            deadline = aggregator.deadline()
            if deadline is not None and deadline <= self.now:
                self._leave(p, aggregator.due(self.now, self._awake_in(p)))

    def _leave(self, p: int, k: int) -> None:
        """The runtime's ``agg_send p k``: the oldest ``k`` queued batches leave as one (``k`` 0: none yet)."""
        if not k:
            return
        aggregator = self.aggregators[p]
        # The model bounds its queues to stay finite; the runtime's are unbounded, so only the count is checked.
        assert 1 <= k <= len(self.out[p]) and k == len(aggregator.queued())
        workers = {b.sender for b in aggregator.queued()[:k]}
        batch = aggregator.flush(k)
        s = A.agg_send(self.agg_cfg, self._state(), p, k)
        self.model, self.out = s.base, s.out
        if len(workers) > 1:
            type(self).combined_checked += 1
        if batch is None:
            return
        lead = self.agg_cfg.lead(p)
        for w2 in self.agg_cfg.remote(p):
            self.queues[lead][w2].append(batch)
            self.awake.add(w2)

    @precondition(lambda self: any(a.queued() for a in self.aggregators))
    @rule()
    def outbox_waits(self) -> None:
        """Nothing may force a flush: what is queued waits for its workers' steps or for the delay."""
        for p, aggregator in enumerate(self.aggregators):
            due = aggregator.due(self.now, self._awake_in(p))
            assert due in (0, len(aggregator.queued()))

    # -- what must hold at every step, beyond the exchange lockstep's own invariants ----------

    @invariant()
    def outboxes_agree(self) -> None:
        for p, aggregator in enumerate(self.aggregators):
            runtime = [{(loc, t): d for loc, t, d in b.updates} for b in aggregator.queued()]
            assert runtime == [dict(g.items()) for g in self.out[p]]  # type: ignore[attr-defined]
            deadline = aggregator.deadline()
            assert deadline is None or deadline > self.now - AGGREGATE_DELAY, "a batch waited past its delay"
        assert A.glob_lemma(self.agg_cfg, self._state())

    @invariant()
    def queues_agree(self) -> None:
        for w in range(self.workers):
            for w2 in range(self.workers):
                runtime = [{(loc, t): d for loc, t, d in b.updates} for b in self.queues[w][w2]]
                assert runtime == [dict(g.items()) for g in self.model.msg[w][w2]], (w, w2)


class NotCombining(AggregateLockstep):
    """The same, with every batch sent on its own as soon as it is offered (combining turned off)."""

    combine = False


def run_lockstep(machine: type[AggregateLockstep]) -> int:
    """Run ``machine`` (a fixed, derandomised set of runs) and return how many combined batches it checked."""
    machine.combined_checked = 0
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples(60),
            stateful_step_count=40,
            deadline=None,
            derandomize=True,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        ),
    )
    return machine.combined_checked


def test_combined_progress_batches_of_two_workers_agree_with_the_model() -> None:
    assert run_lockstep(AggregateLockstep) > 0, "no run combined the batches of two workers"


def test_the_check_fails_when_batches_are_not_combined() -> None:
    with pytest.raises(AssertionError, match="no run combined"):
        assert run_lockstep(NotCombining) > 0, "no run combined the batches of two workers"


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
    assert (aggregator.flushes, aggregator.flushed, aggregator.combined) == (3, 5, 2)


def test_a_batch_waits_for_the_workers_about_to_step_and_no_longer_than_the_delay() -> None:
    aggregator: ProgressAggregator[int] = ProgressAggregator(0, delay=0.01)
    a, b = ProgressBatch(0, 0, (("a", 1, 1),)), ProgressBatch(1, 0, (("b", 1, 1),))
    # Worker 0's step ends while worker 1 is inside one: its batch waits for worker 1's.
    aggregator.begin(0)
    aggregator.begin(1)
    aggregator.offer(a, 0.0)
    assert aggregator.end(0, 0.0) == 0 and aggregator.deadline() == 0.01
    aggregator.offer(b, 0.001)
    assert aggregator.end(1, 0.001) == 2
    # Worker 1 has a message waiting (it will step soon): worker 0's batch waits for it too.
    aggregator.flush()
    aggregator.begin(0)
    aggregator.offer(a, 1.0)
    assert aggregator.end(0, 1.0, awake=[1]) == 0
    assert aggregator.due(1.005, awake=[1]) == 0 and aggregator.due(1.01, awake=[1]) == 1
    # A worker that ended a step since the oldest batch is not waited for again, however busy it stays.
    aggregator.begin(1)
    assert aggregator.end(1, 1.002, awake=[1]) == 1
    # Nobody else about to step: the batch leaves at once; and without combining, always at once.
    aggregator.flush()
    aggregator.offer(a, 2.0)
    assert aggregator.end(0, 2.0) == 1
    eager: ProgressAggregator[int] = ProgressAggregator(0, combine=False)
    eager.begin(1)
    eager.offer(a, 0.0)
    assert eager.end(0, 0.0, awake=[1]) == 1
