"""The testing helpers: a per-epoch source with EOF and ABORT, a per-epoch sink, the runners, and the seeded
simulated cluster (replayable, reordering with the seed, results unchanged)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimely import Scope
from pytimely.communication.simulated import SimulatedCluster
from pytimely.errors import InvalidArgument, SimulatedAbortError
from pytimely.testing import ABORT, EOF, TestingSink, run_dataflow, run_simulated, testing_source
from tests.profiles import examples


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_source_and_sink_per_epoch(workers: int) -> None:
    sink: TestingSink[Any] = TestingSink()
    inputs = [[1, 2, 3], [], [4, 5], [6]]

    def build(scope: Scope[int]) -> None:
        sink.attach(testing_source(scope, inputs).map(lambda x: x * 10))

    run_dataflow(build, workers=workers)
    assert sink.by_epoch() == {0: [10, 20, 30], 2: [40, 50], 3: [60]}
    assert {c.worker for c in sink.caught} <= set(range(workers))


def test_eof_ends_the_input_and_numpy_batches_stay_numpy() -> None:
    sink: TestingSink[Any] = TestingSink()

    def build(scope: Scope[int]) -> None:
        sink.attach(testing_source(scope, {5: np.arange(4), 7: np.arange(2), 8: EOF, 9: np.arange(3)}))

    run_dataflow(build, workers=2)
    assert sink.by_epoch() == {5: [0, 1, 2, 3], 7: [0, 1]}
    assert all(isinstance(c.batch, np.ndarray) for c in sink.caught)


def test_abort_fails_with_a_typed_error_after_the_epochs_before_it() -> None:
    sink: TestingSink[Any] = TestingSink()

    def build(scope: Scope[int]) -> Any:
        stream = testing_source(scope, [[1, 2], [3], ABORT, [4]])
        sink.attach(stream)
        return stream.probe()

    with pytest.raises(SimulatedAbortError) as caught:
        run_dataflow(build, workers=2)
    assert caught.value.time == 2 and caught.value.operator == "testing_source"
    assert 4 not in sink.records()
    assert set(sink.records()) <= {1, 2, 3}


def test_source_rejects_a_non_sequence() -> None:
    def build(scope: Scope[int]) -> None:
        testing_source(scope, "abc")

    with pytest.raises(InvalidArgument):
        run_dataflow(build)


def _word_counts(sink: TestingSink[Any], epochs: list[list[str]]) -> Any:
    def build(scope: Scope[int]) -> None:
        sink.attach(testing_source(scope, epochs).count_by())

    return build


EPOCHS = [["a", "b", "a", "c"], ["b", "b", "d"], ["a"], ["c", "d", "d", "e", "a"]]


def _expected(epochs: list[list[str]]) -> dict[int, list[tuple[str, int]]]:
    return {t: sorted(Counter(words).items()) for t, words in enumerate(epochs) if words}


def test_simulated_cluster_same_seed_same_schedule_and_results() -> None:
    runs = []
    for _ in range(2):
        sink: TestingSink[Any] = TestingSink()
        run = run_simulated(_word_counts(sink, EPOCHS), processes=2, workers_per_process=2, seed=42)
        runs.append((run.trace, [(c.worker, c.time, list(c.batch)) for c in sink.caught]))
        assert sink.by_epoch() == _expected(EPOCHS)
    assert runs[0] == runs[1]
    assert len(runs[0][0]) > 50  # the schedule is many deliveries, not a trivial one


def test_simulated_cluster_different_seeds_reorder_but_agree() -> None:
    orders = set()
    for seed in range(6):
        sink: TestingSink[Any] = TestingSink()
        run = run_simulated(_word_counts(sink, EPOCHS), processes=3, workers_per_process=1, seed=seed)
        assert sink.by_epoch() == _expected(EPOCHS)
        # The order in which messages between processes were delivered, by sender and receiver.
        orders.add(tuple((d.sender, d.receiver, d.channel) for d in run.trace))
    assert len(orders) == 6


def test_delays_reorder_messages_across_senders_but_keep_fifo_per_link() -> None:
    cluster = SimulatedCluster(3, 1, seed=5, max_delay=6)
    a0, a1, a2 = cluster.allocators()
    pushes0, _ = a0.allocate((0, 0))
    pushes1, _ = a1.allocate((0, 0))
    _, pull = a2.allocate((0, 0))
    for i in range(20):
        pushes0[2].push(("from0", i))
        pushes1[2].push(("from1", i))
    got: list[Any] = []
    for _ in range(100):
        a2.receive()
        got.extend(pull.drain())
    assert sorted(got) == sorted([("from0", i) for i in range(20)] + [("from1", i) for i in range(20)])
    for sender in ("from0", "from1"):
        assert [i for s, i in got if s == sender] == list(range(20))  # FIFO per link
    assert got != [m for i in range(20) for m in (("from0", i), ("from1", i))]  # but interleaved otherwise


def test_a_higher_precedence_message_is_never_overtaken_at_its_receiver() -> None:
    from pytimely.communication.allocator import Precedence

    for seed in range(20):
        cluster = SimulatedCluster(2, 1, seed=seed, max_delay=6)
        a0, a1 = cluster.allocators()
        progress, _ = a0.allocate((0, 0), Precedence.PROGRESS)
        data, _ = a0.allocate((0, 1), Precedence.DATA)
        _, progress_in = a1.allocate((0, 0), Precedence.PROGRESS)
        _, data_in = a1.allocate((0, 1), Precedence.DATA)
        progress[1].push("p0")
        data[1].push("d0")
        seen: list[str] = []
        while len(seen) < 2:
            a1.receive()
            seen += progress_in.drain() + data_in.drain()
        assert seen == ["p0", "d0"]


def test_messages_between_processes_are_copies() -> None:
    cluster = SimulatedCluster(2, 1, seed=1, max_delay=0)
    a0, a1 = cluster.allocators()
    pushes, _ = a0.allocate((0, 0))
    _, pull = a1.allocate((0, 0))
    sent = [1, 2]
    pushes[1].push(sent)
    a1.receive()
    [received] = pull.drain()
    assert received == sent and received is not sent


@settings(max_examples=examples(8), deadline=None)
@given(
    st.lists(st.lists(st.sampled_from("abcde"), max_size=8), min_size=1, max_size=5),
    st.integers(1, 3),
    st.integers(1, 2),
    st.integers(0, 1000),
)
def test_simulated_results_are_right_under_any_seed(
    epochs: list[list[str]], processes: int, per: int, seed: int
) -> None:
    sink: TestingSink[Any] = TestingSink()
    run_simulated(_word_counts(sink, epochs), processes=processes, workers_per_process=per, seed=seed)
    assert sink.by_epoch() == _expected(epochs)


def test_simulated_cluster_rejects_bad_shapes() -> None:
    with pytest.raises(InvalidArgument):
        SimulatedCluster(0, 1, seed=1)
    with pytest.raises(InvalidArgument):
        SimulatedCluster(1, 1, seed=1, max_delay=-1)
