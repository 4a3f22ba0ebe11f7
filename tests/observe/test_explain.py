"""explain names the capability that holds a probe's frontier, in one process and over two real processes."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from pytimely import Scope, Worker, execute
from pytimely.errors import StalledError
from pytimely.progress.location import Source
from tests.cluster.helpers import ROOT, Cluster, env_for, report


def _hoarder(cap: Any, info: Any) -> Any:
    def logic(inp: Any, out: Any) -> None:
        for _ in inp:
            pass

    return logic


def test_explain_names_the_held_capability_not_the_input_past_it() -> None:
    seen: list[str] = []

    def job(worker: Worker) -> None:
        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.exchange(lambda r: r).unary(_hoarder, name="hoarder").probe()

        handle, probe = worker.dataflow(build)
        handle.send(1)
        handle.advance_to(3)
        for _ in range(4):
            worker.step()
        (why,) = worker.explain(probe)
        assert why.frontier == (0,)
        # The input's capability at 3 is held too, but it cannot result in 0 at the probe: only the hoarder's does.
        assert [(h.operator, h.kind, h.time, h.own, h.count) for h in why.holders] == [
            ("hoarder", "capability", 0, 1, 1)
        ]
        assert why.holders[0].location == Source(2, 0)
        seen.append(str(why))

    with pytest.raises(StalledError):  # the hoarder never lets go
        execute(job, 1)
    (text,) = seen
    assert "capability of 'hoarder' on output 0 at time 0 held by worker 0 (1)" in text


def _downgrading(cap: Any, info: Any) -> Any:
    cap.downgrade(2)  # a change this worker reports in a progress batch, not its initial capability
    return _hoarder(cap, info)


def test_explain_across_in_process_workers_separates_own_from_others() -> None:
    seen: list[Any] = []

    def job(worker: Worker) -> None:
        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.exchange(lambda r: r).unary(_downgrading, name="hoarder").probe()

        handle, probe = worker.dataflow(build)
        handle.advance_to(3)
        for _ in range(6):
            worker.step()
        (why,) = worker.explain(probe)
        seen.append([(h.operator, h.time, h.own, h.count, h.others) for h in why.holders])

    with pytest.raises(StalledError):
        execute(job, 2)
    assert seen == [[("hoarder", 2, 1, 2, "another worker")]] * 2


def test_a_stall_carries_the_explanation() -> None:
    def job(worker: Worker) -> None:
        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.unary(_hoarder, name="hoarder").probe()

        handle, probe = worker.dataflow(build)
        handle.advance_to(3)
        worker.step_while(lambda: probe.less_than(3), timeout=60)

    try:
        execute(job, 1)
    except StalledError as exc:
        notes = "\n".join(getattr(exc, "__notes__", []))
        assert "yet these remain" in str(exc)  # the message tests and users match on is kept
        assert "capability of 'hoarder' on output 0 at time 0 held by worker 0 (1)" in notes
        assert "capability of 'input' on output 0 at time 3" in notes  # still open: nothing else holds it
    else:
        raise AssertionError("the dataflow should have stalled")


def test_pytimely_explain_prints_what_holds_a_stalled_run() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytimely", "explain", "tests.observe.inspect_jobs:held_at_zero"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1
    assert "StalledError" in done.stderr and "Traceback" not in done.stderr
    assert "what holds it:" in done.stderr
    assert "capability of 'hoarder' on output 0 at time 0 held by worker 0 (1)" in done.stderr


def _start_explain(cluster: Cluster, target: str) -> list[subprocess.Popen[str]]:
    """Start every process of ``cluster`` as ``pytimely explain target`` (``Cluster.start`` runs ``pytimely run``)."""
    procs = []
    for p in range(cluster.processes):
        env = env_for(cluster.processes, p, cluster.hosts, cluster.secret, **cluster.extra)
        listener = cluster.listeners.pop(p)
        env["PYTIMELY_LISTEN_FD"] = str(listener.fileno())
        try:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "pytimely", "explain", target],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    pass_fds=(listener.fileno(),),
                )
            )
        finally:
            listener.close()
    cluster.procs.extend(procs)
    return procs


@pytest.mark.parametrize(("job", "time"), [("held_at_zero", 0), ("held_after_downgrade", 1)])
def test_explain_over_two_processes_names_own_worker_and_another_process(job: str, time: int) -> None:
    cluster = Cluster(2, PYTIMELY_STALL_TIMEOUT="1")
    try:
        _start_explain(cluster, f"tests.observe.inspect_jobs:{job}")
        results = cluster.wait(timeout=240)
    finally:
        cluster.kill()
    for p, (code, _, err) in enumerate(results):
        assert code == 1, report(results)
        assert "StalledError" in err and "Traceback" not in err, report(results)
        # Each process knows its own worker's capability; the tracker's count says another process holds one more.
        held = f"capability of 'hoarder' on output 0 at time {time} held by worker {p} (1) and another process (1)"
        assert held in err, report(results)


def test_explain_names_messages_an_operator_never_reads() -> None:
    seen: list[Any] = []

    def ignores(cap: Any, info: Any) -> Any:
        cap.drop()  # holds no capability: only the messages queued at its input hold the probe

        def logic(inp: Any, out: Any) -> None:
            pass  # never takes its input

        return logic

    def job(worker: Worker) -> None:
        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.unary(ignores, name="ignores").probe()

        handle, probe = worker.dataflow(build)
        handle.send(7)
        handle.advance_to(5)
        for _ in range(4):
            worker.step()
        (why,) = worker.explain(probe)
        seen.extend(why.holders)

    with pytest.raises(StalledError):
        execute(job, 1)
    (held,) = seen
    assert (held.kind, held.operator, held.location.port, held.time, held.count, held.own) == (
        "message",
        "ignores",
        0,
        0,
        1,
        1,
    )
    assert str(held) == "1 message(s) for 'ignores' input 0 at time 0, 1 queued at worker 0 -> could result in 0 there"
