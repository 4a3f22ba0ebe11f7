"""The sans-I/O progress exchange: atomic batches, FIFO sequence numbers, justified hold-back."""

from __future__ import annotations

from typing import Any

import pytest

from pytimely.errors import DemandModeError, SequenceError, UnjustifiedHoldError
from pytimely.progress import Builder, PointstampOrder, ProgressMode, ProgressReceiver, ProgressSender, Source, Target
from pytimely.progress.broadcast import ProgressBatch, justified


def two_ops() -> tuple[PointstampOrder[int], Source, Target]:
    b: Builder[int, Any] = Builder()
    a = b.add_node(0, 1, name="a")
    c = b.add_node(1, 0, name="c")
    b.add_edge(Source(a, 0), Target(c, 0))
    return PointstampOrder(b), Source(a, 0), Target(c, 0)


def test_eager_sends_everything_as_one_batch_with_increasing_numbers() -> None:
    _, src, tgt = two_ops()
    sender: ProgressSender[int] = ProgressSender(0)
    assert sender.flush() is None
    sender.record_batch([(tgt, 0, 1), (src, 0, -1), (src, 1, 1)])
    batch = sender.flush()
    assert batch is not None and batch.seq == 0 and batch.sender == 0
    assert sorted(batch.updates, key=repr) == sorted([(tgt, 0, 1), (src, 0, -1), (src, 1, 1)], key=repr)
    sender.record(tgt, 0, -1)
    nxt = sender.flush()
    assert nxt is not None and nxt.seq == 1
    assert sender.pending() == {}


def test_changes_that_cancel_are_not_sent() -> None:
    _, _, tgt = two_ops()
    sender: ProgressSender[int] = ProgressSender(0)
    sender.record(tgt, 0, 1)
    sender.record(tgt, 0, -1)
    assert sender.flush() is None


def test_demand_keeps_increments_justified_by_own_capabilities() -> None:
    order, src, tgt = two_ops()
    sender: ProgressSender[int] = ProgressSender(0, order.lt, ProgressMode.DEMAND)
    caps = {(src, 0): 1}
    sender.record(tgt, 0, 3)  # three messages sent while holding the capability at (src, 0)
    assert sender.flush(caps) is None
    assert sender.pending() == {(tgt, 0): 3}
    sender.record(src, 0, -1)  # dropping the capability: the messages must go out with the drop
    batch = sender.flush({})
    assert batch is not None
    assert sorted(batch.updates, key=repr) == sorted([(tgt, 0, 3), (src, 0, -1)], key=repr)
    assert sender.pending() == {}


def test_demand_sends_unjustified_increments() -> None:
    order, src, tgt = two_ops()
    sender: ProgressSender[int] = ProgressSender(0, order.lt, ProgressMode.DEMAND)
    sender.record(tgt, 5, 1)
    batch = sender.flush({(src, 7): 1})  # a capability at a later time justifies nothing at 5
    assert batch is not None and batch.updates == ((tgt, 5, 1),)


def test_send_subset_refuses_an_unjustified_hold_and_changes_nothing() -> None:
    order, src, tgt = two_ops()
    sender: ProgressSender[int] = ProgressSender(0, order.lt, ProgressMode.DEMAND)
    sender.record(tgt, 0, 1)
    sender.record(src, 0, -1)
    with pytest.raises(UnjustifiedHoldError, match="justify"):
        sender.send_subset([(src, 0)], {})
    assert sender.pending() == {(tgt, 0): 1, (src, 0): -1}
    assert sender.next_seq() == 0
    batch = sender.send_subset([(src, 0), (tgt, 0)], {})
    assert batch is not None and batch.seq == 0


def test_justified_follows_the_seed_definition() -> None:
    lt = lambda a, b: a < b  # noqa: E731
    assert justified({}, {}, lt)
    assert justified({}, {1: -1, 2: 1}, lt)  # supported by a smaller decrement
    assert justified({1: 1}, {2: 5}, lt)  # a smaller capability
    assert justified({2: 2}, {2: 1}, lt)  # fewer than the capabilities at the same pointstamp
    assert not justified({2: 1}, {2: 1}, lt)
    assert not justified({3: 1}, {2: 1}, lt)


def batches_of_worker_1(tgt: Any, n: int) -> list[ProgressBatch[int]]:
    """Worker 1's first ``n`` batches, batch ``t`` adding one at ``(tgt, t)``."""
    sender: ProgressSender[int] = ProgressSender(1)
    batches = []
    for t in range(n):
        sender.record(tgt, t, 1)
        b = sender.flush()
        assert b is not None
        batches.append(b)
    return batches


def test_receiver_checks_fifo_order() -> None:
    _, _, tgt = two_ops()
    receiver = ProgressReceiver(2)
    batches = batches_of_worker_1(tgt, 3)
    assert receiver.accept(batches[0]) == ((tgt, 0, 1),)
    with pytest.raises(SequenceError, match="gap") as gap:
        receiver.accept(batches[2])
    assert (gap.value.sender, gap.value.expected, gap.value.received) == (1, 1, 2)
    receiver.accept(batches[1])
    with pytest.raises(SequenceError, match="duplicate"):
        receiver.accept(batches[1])
    assert receiver.expected(1) == 2
    stranger: ProgressSender[int] = ProgressSender(9)
    stranger.record(tgt, 0, 1)
    b = stranger.flush()
    assert b is not None
    with pytest.raises(SequenceError, match="unknown worker 9"):
        receiver.accept(b)


def test_receiver_discards_counted_batches_in_order() -> None:
    _, _, tgt = two_ops()
    batches = batches_of_worker_1(tgt, 4)
    # The view holds batches 0..2 of worker 1 from elsewhere; its link is at batch 1.
    receiver = ProgressReceiver({0: 0, 1: 1}, counted={1: 3})
    assert receiver.numbers() == {0: 0, 1: 3} and receiver.on_link(1) == 1
    with pytest.raises(SequenceError, match="gap"):
        receiver.accept(batches[2])
    assert receiver.accept(batches[1]) == ()
    assert receiver.accept(batches[2]) == ()
    assert receiver.accept(batches[3]) == ((tgt, 3, 1),)
    assert receiver.numbers() == {0: 0, 1: 4}
    with pytest.raises(ValueError, match="worker 7"):
        ProgressReceiver({0: 0}, counted={7: 1})


def test_demand_mode_without_what_it_needs_is_refused_and_keeps_the_changes() -> None:
    order, _, tgt = two_ops()
    with pytest.raises(DemandModeError, match="could-result-in"):
        ProgressSender(0, None, ProgressMode.DEMAND)
    sender: ProgressSender[int] = ProgressSender(0, order.lt, ProgressMode.DEMAND)
    sender.record(tgt, 0, 1)
    with pytest.raises(DemandModeError, match=r"flush\(caps\)"):
        sender.flush()
    assert sender.pending() == {(tgt, 0): 1}
    assert sender.next_seq() == 0


def test_an_outbox_batch_is_due_at_its_deadline_to_the_last_bit() -> None:
    # Found by the simulator: at 2.6872848822480244 s, (since + delay) - since < delay in floats, so a flush thread
    # woken at deadline() found nothing due and, asked to look again by that same deadline, spun.
    from pytimely.progress.broadcast import ProgressAggregator

    since = 2.6872848822480244
    aggregator: ProgressAggregator[int] = ProgressAggregator(0, delay=0.001)
    aggregator.offer(ProgressBatch(0, 0, ((Source(0, 0), 1, 1),)), since)
    aggregator.begin(1)  # another worker still inside its step: only the delay lets the batch go
    deadline = aggregator.deadline()
    assert deadline is not None and deadline - since < 0.001
    assert aggregator.due(deadline) == 1
