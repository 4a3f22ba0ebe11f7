"""Worker functions for tests that run in real processes (``pytimely run tests.cluster.misuse_jobs:NAME``)."""

from __future__ import annotations

import threading
from typing import Any

from pytimely import Scope, Worker


def lock_through_exchange(worker: Worker) -> None:
    """Every worker sends ``(i, lock)`` pairs keyed to every worker: some must cross to the other process."""

    def build(scope: Scope[int]) -> Any:
        handle, stream = scope.new_input(name="locks")
        stream.map(lambda pair: pair, name="tag").exchange(lambda pair: pair[0], name="by key").probe()
        return handle

    handle = worker.dataflow(build)
    for i in range(worker.peers):
        handle.send((i, threading.Lock()))


def hoarding(worker: Worker, downgrade: int | None = None) -> tuple[Any, Any]:
    """A dataflow whose operator ``'hoarder'`` keeps its capability for ever (at 0, or moved to ``downgrade``),
    fed with this worker's index; its input handle and the probe behind the hoarder."""

    def hoarder(cap: Any, info: Any) -> Any:
        if downgrade is not None:
            cap.downgrade(downgrade)

        def logic(inp: Any, out: Any) -> None:
            for _ in inp:
                pass

        return logic

    def build(scope: Scope[int]) -> Any:
        handle, stream = scope.new_input()
        return handle, stream.exchange(lambda r: r).unary(hoarder, name="hoarder").probe()

    handle, probe = worker.dataflow(build)
    handle.send(worker.index)
    return handle, probe


def wait_for_held_time(worker: Worker) -> None:
    """Step while a probe is behind time 3, which an operator holding time 0 for ever never lets pass.

    ``sys.argv[1]`` is the timeout in seconds.
    """
    import sys

    handle, probe = hoarding(worker)
    handle.advance_to(3)
    worker.step_while(lambda: probe.less_than(3), timeout=float(sys.argv[1]))


def hold_forever(worker: Worker) -> None:
    """Every worker feeds an operator that keeps its capability at time 0 for ever, then returns (to finish)."""
    hoarding(worker)


def slow_last_process(worker: Worker) -> None:
    """The last process's workers keep their inputs open in user code for ``sys.argv[1]`` seconds; nobody stalls.

    The others reach ``finish`` at once and wait there, quiet, longer than the stall timeout.
    """
    import sys
    import time

    def build(scope: Scope[int]) -> Any:
        handle, stream = scope.new_input()
        return handle, stream.exchange(lambda r: r).count().capture()

    handle, captured = worker.dataflow(build)
    if worker.index >= worker.peers - worker.workers_per_process:
        time.sleep(float(sys.argv[1]))
    handle.send(worker.index)
    handle.close()
    worker.finish()
    print(sum(n for _, batch in captured for n in batch))


def leave_on_its_own(worker: Worker) -> str | None:
    """Process 1 calls ``Worker.leave`` without asking anyone, then lingers; process 0 waits until worker 1 is no
    longer a member and returns what ``pytimely launch --elastic`` says of process 1 at that moment (run it in an
    empty folder: process 1 lingers until process 0 leaves a file ``asked`` there)."""
    import time
    from pathlib import Path

    from pytimely.membership import request

    asked = Path("asked")

    def build(scope: Scope[int]) -> Any:
        handle, stream = scope.new_input()
        return handle, stream.probe()

    handle, probe = worker.dataflow(build)
    handle.send(worker.index)
    handle.advance_to(1)
    if worker.index == 1:
        worker.leave(at=1)
        # Still running when process 0 asks, however slow the machine: only a leave it announced tells the
        # launcher it is going.
        deadline = time.monotonic() + 60
        while not asked.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return None
    deadline = time.monotonic() + 30
    worker.step_while(lambda: 1 in worker.members and time.monotonic() < deadline)
    state = request("status", 1, **_control())["state"]
    asked.touch()
    handle.close()
    worker.step_while(lambda: not probe.done(), timeout=30)
    return str(state)


def _control() -> dict[str, object]:
    """Where the launcher's control endpoint is, and the secret to sign with (the run contract's)."""
    from pytimely.config import RunConfig

    run = RunConfig.from_env()
    return {"address": run.control, "secret": run.cluster.secret}
