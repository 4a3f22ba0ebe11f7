"""Counting keys while processes join and leave (the job behind ``wordcount --rescale`` and the rescaling tests).

Every member worker sends its share of each epoch to a counting state machine
whose bins follow the members (:func:`pytimely.membership.balanced_moves` on the
control stream). A newcomer takes its bins at the epoch it joins in; a leaver
gives its bins away at the epoch it is gone in, then :meth:`Worker.leave
<pytimely.worker.Worker.leave>`. Worker 0 gathers each key's running counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pytimely.membership import RescalePlan, balanced_moves
from pytimely.worker import Worker

__all__ = ["count_while_rescaling"]


def _count(key: Any, value: int, state: int | None) -> tuple[int, list[tuple[Any, int]]]:
    total = (state or 0) + value
    return total, [(key, total)]


def count_while_rescaling(
    worker: Worker,
    share: Callable[[int, int, list[int]], list[Any]],
    epochs: int,
    plan: RescalePlan,
    *,
    request_join: Callable[[], None] | None = None,
    linger: float = 0.0,
) -> tuple[dict[Any, int], dict[int, int]] | None:
    """Count the keys ``share(worker, epoch, members)`` gives each member, following ``plan``.

    ``request_join()``, called by worker 0 before an epoch a process joins in, starts the newcomer (the
    launcher's ``add``). A leaving worker waits ``linger`` seconds before it leaves. Worker 0 returns each
    key's count and how many counts each worker emitted; the others return ``None``.
    """
    me = worker.index

    def build(scope: Any) -> Any:
        handle, keys = scope.new_input(name="keys")
        control_handle, control = scope.new_input(name="control")
        counts = keys.map(lambda k: (k, 1)).state_machine(_count, control=control)
        gathered = counts.map(lambda r: (r[0], r[1], me)).exchange(lambda _: 0, name="gather")
        return handle, control_handle, gathered.capture(), gathered.probe()

    handle, control_handle, captured, probe = worker.dataflow(build)
    start = 0
    if worker.joined:
        start = plan.joins_at(me)
        handle.advance_to(start)
        control_handle.advance_to(start)
        control_handle.send_batch(balanced_moves(start, plan.members_at(start)))
    for epoch in range(start, epochs):
        members = plan.members_at(epoch)
        if me not in members:
            control_handle.send_batch(balanced_moves(epoch, members))
            # Lingering lets the others run ahead, so the leaver holds the only capability at the frontier.
            time.sleep(linger)
            worker.leave(at=epoch)
            return None
        if epoch in plan.join_epochs:
            if me == 0 and request_join is not None:
                request_join()
            wanted = set(members)
            worker.step_while(lambda: not wanted <= set(worker.members))  # noqa: B023 - used at once
        handle.send_batch(share(me, epoch, members))
        handle.advance_to(epoch + 1)
        control_handle.advance_to(epoch + 1)
        worker.step_while(lambda: probe.less_than(handle.time))
    handle.close()
    control_handle.close()
    worker.step_while(lambda: not probe.done())
    if me != 0:
        return None
    counts: dict[Any, int] = {}
    emitters: dict[int, int] = {}
    for _, batch in captured:
        for key, total, emitter in batch:
            counts[key] = max(counts.get(key, 0), total)
            emitters[emitter] = emitters.get(emitter, 0) + 1
    return counts, emitters
