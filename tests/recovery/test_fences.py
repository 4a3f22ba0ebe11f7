"""The fence contract, operator by operator: declared state changes at a time only while ``may_change`` allows it.

With recovery on, the runtime puts a *fence* on every operator that declared state: the epoch of the next
snapshot. Messages of later epochs are held back from it, and an operator whose state changes when a frontier
moves (a window closing, an interval join's values expiring) must not make that change at a later epoch until
the fence moves on (``OperatorInfo.may_change``): the snapshot of the fence's epoch would hold it, and the
capture downstream, snapshotted at the same epoch, would not hold its output. Here the fence is set by hand,
the input frontier jumps far past it, and nothing may come out at a time after the fence until it is lifted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pytimely import Worker, execute
from pytimely.dataflow.operators.folds import Fold
from pytimely.dataflow.operators.join import Interval

FENCE = 1
JUMP = 40


def fenced(build: Callable[[Any, Any], Any], name: str, batches: dict[int, list[Any]]) -> tuple[list[Any], list[Any]]:
    """``build(left, right)``'s output before and after the fence on operator ``name`` is lifted: the records of
    ``batches`` (``{epoch: [(side, record)]}``, epochs ``<= FENCE``) are sent, the fence is set at ``FENCE``, and the
    inputs jump to ``JUMP`` at once."""

    def job(worker: Worker) -> tuple[list[Any], list[Any]]:
        def dataflow(scope: Any) -> Any:
            left, ls = scope.new_input(name="left")
            right, rs = scope.new_input(name="right")
            return (left, right), build(ls, rs).capture(), scope.subgraph

        handles, captured, subgraph = worker.dataflow(dataflow)
        index = next(op.index for op in subgraph.operators if op.name == name)
        subgraph.set_fence(index, FENCE)
        for epoch in sorted(batches):
            for h in handles:
                h.advance_to(epoch)
            for side, h in enumerate(handles):
                mine = [r for s, r in batches[epoch] if s == side]
                if mine:
                    h.send_batch(mine)
        for h in handles:
            h.advance_to(JUMP)
        for _ in range(30):
            worker.step()
        before = sorted((t, r) for t, batch in captured for r in batch)
        subgraph.set_fence(index, None)
        for h in handles:
            h.close()
        worker.finish()
        return before, sorted((t, r) for t, batch in captured for r in batch)

    return execute(job, 1)[0]  # type: ignore[no-any-return]


def _left(f: Callable[[Any], Any]) -> Callable[[Any, Any], Any]:
    return lambda left, _right: f(left)


_FOLD = Fold(lambda: 0, lambda acc, v: acc + v[2], lambda a, b: a + b)

CASES: dict[str, tuple[Callable[[Any, Any], Any], str, dict[int, list[Any]]]] = {
    # name: (build, the fenced operator, batches); every output comes after the fence once the frontier moves.
    "tumbling count": (_left(lambda s: s.tumbling(5, time=0, key=1, name="w")), "w", {0: [(0, (3, 1, 1))]}),
    "session count": (_left(lambda s: s.session(3, time=0, key=1, name="w")), "w", {1: [(0, (1, 1, 1))]}),
    "collect every 3": (_left(lambda s: s.map(lambda r: (r[1], r[2])).collect(every=3, name="c")), "c",
                        {0: [(0, (0, 1, 7))]}),
    "tumbling fold": (_left(lambda s: s.tumbling(5, time=0, key=1, aggregate=_FOLD, name="w")), "w",
                      {0: [(0, (3, 1, 1))]}),
    "sliding fold": (_left(lambda s: s.sliding(6, 2, time=0, key=1, aggregate=_FOLD, name="w")), "w",
                     {1: [(0, (1, 1, 1))]}),
    "session fold": (_left(lambda s: s.session(3, time=0, key=1, aggregate=_FOLD, name="w")), "w",
                     {1: [(0, (1, 1, 1))]}),
    "interval left join": (
        lambda ls, rs: ls.join(rs, over=Interval(0, 4), how="left", time=0, name="j"),
        "j",
        {0: [(0, (1, (2, "a"))), (1, (2, (2, "b")))]},  # a left value of key 1 alone: it goes out at 2 + 4
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_nothing_goes_out_past_the_fence_until_it_moves(case: str) -> None:
    build, name, batches = CASES[case]
    before, after = fenced(build, name, batches)
    assert after, "the case sends something"
    assert all(t <= FENCE for t, _ in before), f"sent past the fence: {before}"
    assert any(t > FENCE for t, _ in after), "the case sends something past the fence once it moves"
