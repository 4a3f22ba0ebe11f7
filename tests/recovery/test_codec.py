"""How pieces of state are encoded in payload files, and a snapshot that holds the state of its epoch even when
the operator mutates that state in place right after the boundary."""

from __future__ import annotations

import pickle
import threading
from pathlib import Path
from typing import Any

import pytest

from pytimely import Worker, execute
from pytimely.dataflow.operators.state_machine import state_machine
from pytimely.dataflow.state import KeyedState, Whole
from pytimely.recovery import Recovery
from pytimely.recovery.codec import decode, encode
from pytimely.recovery.runtime import WorkerRecovery
from tests.recovery.jobs import Crash


class _Loop:
    """A hashable key that refers back to itself (pickling without the memo refuses it)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.me = self

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Loop) and other.name == self.name


def test_pieces_come_back_equal_whatever_their_shape() -> None:
    shapes: list[Any] = [
        {f"w{i}": i for i in range(1000)},
        {(1, "a"): [1, 2], (2, "b"): None, 3.5: {"x": 1}},
        {},
        Whole((1, 5, 9), {"a": 1, "b": 2}),
        [("k", 1), ("j", 2)],
        {"a", "b"},
        None,
    ]
    for value in shapes:
        back = decode(encode(value))
        assert back == value and type(back) is type(value)


def test_a_dict_is_written_as_keys_then_values_and_other_pieces_as_pickles() -> None:
    assert encode({"a": 1})[:1] == b"K"
    assert encode(Whole((0,), {"a": 1}))[:1] == b"W"
    assert encode([1, 2]) == pickle.dumps([1, 2], protocol=pickle.HIGHEST_PROTOCOL)
    assert decode(pickle.dumps({"a": 1})) == {"a": 1}  # a plain pickle of a dict still loads


def test_values_that_share_an_object_still_share_it() -> None:
    shared = [1, 2]
    back = decode(encode({"a": shared, "b": shared, "c": [1, 2]}))
    assert back["a"] is back["b"] and back["a"] is not back["c"]


def test_keys_that_refer_back_to_themselves_are_pickled_with_the_memo() -> None:
    keys = [_Loop(f"n{i}") for i in range(3)]
    back = decode(encode({k: i for i, k in enumerate(keys)}))
    assert sorted((k.name, v) for k, v in back.items()) == [("n0", 0), ("n1", 1), ("n2", 2)]
    assert all(k.me is k for k in back)


def test_a_truncated_or_padded_keyed_piece_does_not_load() -> None:
    data = encode({f"w{i}": i for i in range(100)})
    for bad in (data[:-7], data + b"\x80\x05N."):
        with pytest.raises(Exception):  # noqa: B017 - any error: the loader names the file (test_bad_inputs)
            decode(bad)


def test_a_whole_piece_restores_only_the_bins_asked_for() -> None:
    state: KeyedState[str, int] = KeyedState(8)
    state.track()
    for i in range(200):
        state[f"k{i}"] = i
    pieces = state.capture(0, 32)
    [(bins, whole)] = [(b, v) for b, v in pieces if v is not None]
    assert isinstance(whole, Whole)
    back = decode(encode(whole))
    other: KeyedState[str, int] = KeyedState(8)
    other.restore_piece([bins[0]], back)
    assert other.data and {state.bin_of(k) for k in other.data} == {bins[0]}
    assert all(other.data[k] == state.data[k] for k in other.data)


def _whole(state: KeyedState[Any, Any]) -> Whole:
    [whole] = [v for _, v in state.capture(0, 32) if isinstance(v, Whole)]
    return whole


def _write(state: KeyedState[Any, Any], keys: list[Any], came_or_went: list[Any]) -> None:
    for k in keys:
        state.data[k] = state.data.get(k, 0) + 1
    state.touch_batch(keys, came_or_went)


def test_keys_that_did_not_come_or_go_are_written_as_before_and_the_values_anew() -> None:
    state: KeyedState[str, int] = KeyedState(8)
    state.track()
    keys = [f"k{i}" for i in range(300)]
    _write(state, keys, keys)
    first = encode(_whole(state))
    memo = state._keys
    written = memo.encoded
    _write(state, keys[::2], [])  # values only
    second = _whole(state)
    assert second.memo is memo and memo.stable
    assert decode(encode(second)).data == state.data and memo.encoded is written
    assert decode(first).data != state.data
    # A key removed and added again moves to the end of the dict: told so, the keys are written anew.
    del state.data["k3"]
    state.data["k3"] = 9
    _write(state, keys, ["k3", "k3"])
    third = _whole(state)
    assert not memo.stable
    back = decode(encode(third)).data
    assert back == state.data and list(back) == list(state.data) and memo.encoded is not written


def test_keys_that_changed_untold_are_written_anew() -> None:
    state: KeyedState[str, int] = KeyedState(8)
    state.track()
    keys = [f"k{i}" for i in range(300)]
    _write(state, keys, keys)
    encode(_whole(state))
    state.data["new"] = 1  # written directly and not told: the comparison of the keys still sees it
    _write(state, keys, [])
    whole = _whole(state)
    assert whole.memo is not None and whole.memo.stable
    assert decode(encode(whole)).data["new"] == 1


EPOCHS = 6
CRASH_EPOCH = 4


def _append(_key: int, value: int, seen: list[int] | None) -> tuple[list[int], None]:
    """Mutate the key's list in place (what a snapshot must not see of later epochs)."""
    if seen is None:
        seen = []
    seen.append(value)
    return seen, None


def _mutate_and_die(worker: Worker, durable: threading.Event, states: dict[int, list[int]]) -> None:
    """Once the snapshot of the epoch before ``CRASH_EPOCH`` is durable (worker 0 knows), mutate its lists in
    place, then die before any later snapshot: what a resumed run restores must not hold the mutation."""
    if worker.index == 0:
        hook = worker._recovery
        assert isinstance(hook, WorkerRecovery)
        worker.step_while(lambda: not hook.holds(CRASH_EPOCH - 1), timeout=120)
        durable.set()
    worker.step_while(lambda: not durable.is_set(), timeout=120)
    for values in states.values():
        values.append(-1)
    raise Crash(f"worker {worker.index} dies after the boundary of epoch {CRASH_EPOCH - 1}")


def _job(crash: bool) -> Any:
    durable = threading.Event()

    def job(worker: Worker) -> dict[int, list[int]]:
        states: dict[int, list[int]] = {}

        def build(scope: Any) -> tuple[Any, Any]:
            handle, stream = scope.new_input(name="values")
            out = state_machine(stream, _append, None, None, 16, "lists", states=states)
            return handle, out.probe()

        handle, probe = worker.dataflow(build)
        for epoch in range(EPOCHS):
            if crash and epoch == CRASH_EPOCH:
                _mutate_and_die(worker, durable, states)
            mine = [(k, epoch * 100 + k) for k in range(12)][worker.index :: worker.peers]
            handle.send_batch(mine[:3])
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(handle.time))
        handle.close()
        worker.step_while(lambda: not probe.done())
        return states

    return job


def test_a_state_mutated_in_place_after_the_boundary_restores_as_it_was_at_the_boundary(tmp_path: Path) -> None:
    recovery = Recovery(tmp_path / "store", job="lists", parameters={"epochs": EPOCHS})
    with pytest.raises(Crash):
        execute(_job(True), 2, recovery=recovery)
    assert recovery.committed().resume_epoch == CRASH_EPOCH  # resumed from the snapshot the mutation followed
    resumed = execute(_job(False), 2, recovery=recovery)
    uninterrupted = execute(_job(False), 2)
    merged = {k: v for part in resumed for k, v in part.items()}
    assert merged == {k: v for part in uninterrupted for k, v in part.items()}
    assert all(-1 not in values for values in merged.values())
