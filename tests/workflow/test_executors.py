"""Executors: results, errors naming the module, dying worker processes, the dataflow step, nothing leaked."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimely.errors import (
    ExecutorClosedError,
    ModuleFailedError,
    ModuleOutputError,
    ModuleRaisedError,
    UnpicklableCallError,
    WorkerDiedError,
)
from pytimely.workflow.executors import (
    Call,
    DataflowStep,
    Executor,
    ProcessExecutor,
    ThreadExecutor,
    dataflow_step,
)
from pytimely.workflow.fingerprint import code_fingerprint
from tests.profiles import examples

# -- module-level functions: a process pool finds them by reference ------------------------------------------------


def add(a: int, b: int) -> int:
    return a + b


def pid() -> int:
    return os.getpid()


def bad(x: int) -> int:
    raise ValueError(f"bad x={x}")


BAD_LINE = bad.__code__.co_firstlineno + 1


def split(n: int) -> dict[str, int]:
    return {"even": n - n % 2, "odd": n % 2}


def pair(n: int) -> tuple[int, int]:
    return n // 10, n % 10


def exit_hard() -> None:
    os._exit(7)


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def sleep_pid() -> int:
    threading.Event().wait(0.2)  # long enough that both pool processes take a call
    return os.getpid()


def sleep_then(value: int, seconds: float) -> int:
    threading.Event().wait(seconds)
    return value


class Unpicklable(Exception):
    """An exception that cannot be pickled back from a worker process."""

    def __init__(self) -> None:
        super().__init__("holds a lock")
        self.lock = threading.Lock()


def raise_unpicklable() -> None:
    raise Unpicklable


def word_count(scope: Any, lines: Any) -> Any:
    return lines.flat_map(str.split).count_by()


def stats(scope: Any, numbers: Any) -> dict[str, Any]:
    return {"total": numbers.map_batch(lambda b: [int(np.sum(b))]), "count": numbers.count()}


# -- fixtures ------------------------------------------------------------------------------------------------------

KINDS = ["thread", "process"]


def make(kind: str) -> Executor:
    return ThreadExecutor(4) if kind == "thread" else ProcessExecutor(2)


@pytest.fixture(scope="module")
def process_pool() -> Iterator[ProcessExecutor]:
    """One process pool for the tests that only run calls (starting worker processes costs time)."""
    executor = ProcessExecutor(2)
    yield executor
    executor.close()


@pytest.fixture(params=KINDS)
def executor(request: pytest.FixtureRequest, process_pool: ProcessExecutor) -> Iterator[Executor]:
    if request.param == "process":
        yield process_pool
    else:
        with ThreadExecutor(4) as threads:
            yield threads


def run(executor: Executor, call: Call) -> dict[str, Any]:
    return asyncio.run(executor.run(call))


# -- results and errors --------------------------------------------------------------------------------------------


def test_result_of_one_output(executor: Executor) -> None:
    assert run(executor, Call("calc/add", add, {"a": 2}, {"b": 40})) == {"out": 42}
    assert run(executor, Call("calc/add", add, {"a": 2, "b": 3}, outputs=("sum",))) == {"sum": 5}


def test_several_outputs(executor: Executor) -> None:
    assert run(executor, Call("s", split, {"n": 7}, outputs=("even", "odd"))) == {"even": 6, "odd": 1}
    assert run(executor, Call("p", pair, {"n": 73}, outputs=("tens", "ones"))) == {"tens": 7, "ones": 3}
    assert run(executor, Call("p", pair, {"n": 73}, outputs=())) == {}


def test_outputs_that_do_not_fit(executor: Executor) -> None:
    with pytest.raises(ModuleOutputError, match=r"'report/split'.*missing \['three'\]") as info:
        run(executor, Call("report/split", split, {"n": 3}, outputs=("even", "odd", "three")))
    assert info.value.module == "report/split"
    with pytest.raises(ModuleOutputError, match=r"'report/add'.*got int"):
        run(executor, Call("report/add", add, {"a": 1, "b": 2}, outputs=("x", "y")))


def test_user_error_names_module_and_keeps_cause(executor: Executor) -> None:
    at = rf"at \S*test_executors\.py:{BAD_LINE} \(in bad\)"
    with pytest.raises(ModuleRaisedError, match=rf"'report/clean' failed {at}: ValueError: bad x=5") as info:
        run(executor, Call("report/clean", bad, {"x": 5}))
    assert info.value.module == "report/clean"
    assert str(info.value.file).endswith("test_executors.py") and info.value.line == BAD_LINE
    assert isinstance(info.value.__cause__, ValueError)
    assert str(info.value.__cause__) == "bad x=5"


def test_wrong_arguments_are_the_modules_error(executor: Executor) -> None:
    with pytest.raises(ModuleFailedError, match=r"'m'.*TypeError") as info:
        run(executor, Call("m", add, {"a": 1, "c": 2}))
    assert isinstance(info.value.__cause__, TypeError)


def test_call_refuses_a_name_both_input_and_parameter() -> None:
    with pytest.raises(ValueError, match=r"'m'.*\['a'\]"):
        Call("m", add, {"a": 1}, {"a": 2})


@pytest.mark.parametrize("kind", KINDS)
def test_closed_executor_refuses(kind: str) -> None:
    executor = make(kind)
    assert run(executor, Call("m", add, {"a": 1, "b": 1})) == {"out": 2}
    executor.close()
    with pytest.raises(ExecutorClosedError, match="'late'"):
        run(executor, Call("late", add, {"a": 1, "b": 1}))


def test_thread_calls_run_at_once() -> None:
    """Four calls that each wait for all four at a barrier finish only if they run concurrently."""
    barrier = threading.Barrier(4, timeout=30)

    def meet(i: int) -> int:
        barrier.wait()
        return i

    async def main() -> list[dict[str, Any]]:
        async with ThreadExecutor(4) as executor:
            return await asyncio.gather(*(executor.run(Call(f"m{i}", meet, {"i": i})) for i in range(4)))

    assert asyncio.run(main()) == [{"out": i} for i in range(4)]


@settings(max_examples=examples(20), deadline=None)
@given(st.lists(st.tuples(st.integers(), st.integers()), max_size=8))
def test_thread_results_match_calls(pairs: list[tuple[int, int]]) -> None:
    async def main() -> list[dict[str, Any]]:
        async with ThreadExecutor(3) as executor:
            return await asyncio.gather(
                *(executor.run(Call(f"m{i}", add, {"a": a}, {"b": b})) for i, (a, b) in enumerate(pairs))
            )

    assert asyncio.run(main()) == [{"out": a + b} for a, b in pairs]


# -- process pool --------------------------------------------------------------------------------------------------


def test_process_runs_elsewhere(process_pool: ProcessExecutor) -> None:
    assert run(process_pool, Call("where", pid))["out"] != os.getpid()


def test_unpicklable_function_names_module(process_pool: ProcessExecutor) -> None:
    with pytest.raises(UnpicklableCallError, match=r"'report/lambda'.*module level") as info:
        run(process_pool, Call("report/lambda", lambda: 1))
    assert info.value.module == "report/lambda"


def test_unpicklable_input_names_module_and_argument(process_pool: ProcessExecutor) -> None:
    with pytest.raises(UnpicklableCallError, match=r"'m'.*argument 'b' \(a lock\)"):
        run(process_pool, Call("m", add, {"a": 1, "b": threading.Lock()}))


def test_unpicklable_exception_is_described(process_pool: ProcessExecutor) -> None:
    with pytest.raises(ModuleFailedError, match=r"'m'.*Unpicklable: holds a lock"):
        run(process_pool, Call("m", raise_unpicklable))


@pytest.mark.parametrize("die", [exit_hard, kill_self], ids=["os._exit", "SIGKILL"])
def test_dying_worker_is_an_error_not_a_hang(die: Callable[[], None]) -> None:
    before = set(multiprocessing.active_children())

    async def main() -> None:
        async with ProcessExecutor(2) as executor:
            with pytest.raises(WorkerDiedError, match="'report/crash'") as info:
                await executor.run(Call("report/crash", die))
            assert info.value.module == "report/crash"
            # The pool was replaced: later calls run.
            assert await executor.run(Call("after", add, {"a": 1, "b": 2})) == {"out": 3}

    asyncio.run(main())
    assert set(multiprocessing.active_children()) <= before


def meet(folder: str, me: str, other: str, timeout: float) -> tuple[int, bool]:
    """Say this call has started (a file named ``me``) and wait for the ``other`` call to say so; the process that
    did it, and whether the two met. Calls run one after the other never meet: the first waits out its ``timeout``."""
    Path(folder, me).touch()
    deadline = time.monotonic() + timeout
    while not Path(folder, other).exists():
        if time.monotonic() > deadline:
            return os.getpid(), False
        threading.Event().wait(0.01)
    return os.getpid(), True


def test_process_calls_overlap(tmp_path: Path) -> None:
    """Two calls on two processes run side by side: each sees the other start before it ends, in processes of
    their own (no clock compared: a loaded machine may start the second late, never after the first ended)."""

    async def main() -> list[dict[str, Any]]:
        async with ProcessExecutor(2) as executor:
            await executor.run(Call("warm", add, {"a": 0, "b": 0}))  # start the processes
            names = ("a", "b")
            return await asyncio.gather(
                *(
                    executor.run(Call(f"s{i}", meet, {"folder": str(tmp_path), "me": names[i],
                                                       "other": names[1 - i], "timeout": 60.0}))
                    for i in range(2)
                )
            )

    (pid_a, met_a), (pid_b, met_b) = (r["out"] for r in asyncio.run(main()))
    assert pid_a != pid_b
    assert met_a and met_b, "the second call started only after the first had ended"


# -- nothing left behind -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_no_threads_or_processes_left_after_close(kind: str) -> None:
    before = set(threading.enumerate())
    children = set(multiprocessing.active_children())
    pids: list[int] = []

    async def main() -> None:
        async with make(kind) as executor:
            results = await asyncio.gather(*(executor.run(Call(f"m{i}", add, {"a": i, "b": 1})) for i in range(6)))
            assert results == [{"out": i + 1} for i in range(6)]
            assert set(threading.enumerate()) - before  # the pool did start threads (or its manager thread)
            for result in await asyncio.gather(*(executor.run(Call("pid", sleep_pid)) for _ in range(2))):
                pids.append(result["out"])

    asyncio.run(main())
    assert [t for t in threading.enumerate() if t not in before and t.is_alive()] == []
    assert set(multiprocessing.active_children()) <= children
    for worker in set(pids) - {os.getpid()}:
        with pytest.raises(ProcessLookupError):
            os.kill(worker, 0)  # gone, and reaped


# -- a dataflow as a module ----------------------------------------------------------------------------------------


@settings(max_examples=examples(10), deadline=None)
@given(
    lines=st.lists(
        st.lists(st.sampled_from(["a", "rose", "is", "Rose", "b", "c"]), max_size=6).map(" ".join), max_size=30
    ),
    workers=st.integers(1, 3),
)
def test_dataflow_word_count_equals_counter(lines: list[str], workers: int) -> None:
    step = dataflow_step(word_count, workers=workers, batch_size=4)
    out = run_sync(step, lines=lines)
    assert dict(out) == Counter(word for line in lines for word in line.split())
    assert len(out) == len(dict(out))  # each word counted in one place


def run_sync(step: DataflowStep, **inputs: Any) -> Any:
    with ThreadExecutor(1) as executor:
        return run(executor, Call("wc", step, inputs))["out"]


def test_dataflow_step_in_a_process(process_pool: ProcessExecutor) -> None:
    text = ["the cat and the hat", "the end", ""] * 50
    out = run(process_pool, Call("report/wc", dataflow_step(word_count, workers=2), {"lines": text}))["out"]
    assert dict(out) == Counter(" ".join(text).split())


def test_dataflow_step_several_outputs_and_arrays() -> None:
    numbers = np.arange(1000, dtype=np.int64)
    out = run_sync(dataflow_step(stats, workers=2, batch_size=64), numbers=numbers)
    assert sum(out["total"]) == int(numbers.sum())
    assert sum(out["count"]) == 1000


def test_dataflow_step_failure_names_module() -> None:
    def broken(scope: Any, lines: Any) -> Any:
        return lines.map(lambda line: 1 // 0)

    with pytest.raises(ModuleFailedError, match="'wc'") as info:
        run_sync(dataflow_step(broken, workers=2), lines=["x"])
    assert isinstance(info.value.__cause__, Exception)


def test_dataflow_step_fingerprint_is_its_builds() -> None:
    assert code_fingerprint(dataflow_step(word_count, workers=2)) == code_fingerprint(word_count)
    assert code_fingerprint(dataflow_step(word_count)) != code_fingerprint(dataflow_step(stats))


def test_dataflow_step_refuses_bad_workers() -> None:
    with pytest.raises(ValueError, match="workers"):
        dataflow_step(word_count, workers=0)


def test_calls_waiting_in_a_pool_whose_worker_dies() -> None:
    """With one process, a call queued behind a dying one fails too (typed), and the executor recovers."""
    before = set(multiprocessing.active_children())

    async def main() -> list[Any]:
        async with ProcessExecutor(1) as executor:
            results = await asyncio.gather(
                executor.run(Call("report/crash", kill_self)),
                executor.run(Call("report/queued", sleep_then, {"value": 1, "seconds": 0.5})),
                return_exceptions=True,
            )
            results.append(await executor.run(Call("after", add, {"a": 2, "b": 2})))
            return results

    crashed, queued, after = asyncio.run(main())
    assert isinstance(crashed, WorkerDiedError) and crashed.module == "report/crash"
    assert queued == {"out": 1} or (isinstance(queued, WorkerDiedError) and queued.module == "report/queued")
    assert after == {"out": 4}
    assert set(multiprocessing.active_children()) <= before


# -- a cancelled call is stopped -----------------------------------------------------------------------------------


def pid_then_sleep(where: str, seconds: float) -> int:
    Path(where, str(os.getpid())).write_text("", encoding="utf-8")
    threading.Event().wait(seconds)
    return os.getpid()


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return True
        if "\nState:\tZ" in status:
            return True
        time.sleep(0.05)
    return False


def _sleeper(executor: ProcessExecutor, where: Path, seconds: float) -> asyncio.Future[dict[str, Any]]:
    """A call that notes its pid in ``where`` (a new folder) and sleeps ``seconds``, started now."""
    where.mkdir()
    return asyncio.ensure_future(
        executor.run(Call(where.name, pid_then_sleep, {"where": str(where), "seconds": seconds}))
    )


def test_a_timed_out_process_call_is_killed_and_its_neighbour_is_sent_again(tmp_path: Path) -> None:
    """The timed-out call's process dies at once; the call running beside it still returns, not WorkerDiedError."""
    stuck_dir, neighbour_dir = tmp_path / "stuck", tmp_path / "neighbour"

    async def main() -> dict[str, Any]:
        async with ProcessExecutor(2) as executor:
            neighbour = _sleeper(executor, neighbour_dir, 2.0)
            stuck = _sleeper(executor, stuck_dir, 300.0)
            deadline = time.monotonic() + 60
            while not list(stuck_dir.iterdir()) or not list(neighbour_dir.iterdir()):
                assert time.monotonic() < deadline, "the calls never started"
                await asyncio.sleep(0.02)
            stuck.cancel()  # what a module's timeout does (asyncio.wait_for)
            with pytest.raises(asyncio.CancelledError):
                await stuck
            return await asyncio.wait_for(neighbour, 120)

    began = time.monotonic()
    result = asyncio.run(main())
    (stuck_pid,) = (int(p.name) for p in stuck_dir.iterdir())
    assert _gone_within(stuck_pid, 10), "the cancelled call's process still runs"
    assert time.monotonic() - began < 100, "close waited for the stuck call to end by itself"
    assert result["out"] != stuck_pid  # the neighbour ran (again) in a fresh process, and returned


def test_a_call_cancelled_while_queued_never_runs(tmp_path: Path) -> None:
    """With one process busy, a call cancelled while it waits is dropped (or killed as it starts)."""
    first_dir, queued_dir = tmp_path / "first", tmp_path / "queued"

    async def main() -> dict[str, Any]:
        async with ProcessExecutor(1) as executor:
            first = _sleeper(executor, first_dir, 1.5)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(_sleeper(executor, queued_dir, 300.0), 0.5)
            result = await asyncio.wait_for(first, 120)
            # Room for the queued call to have started, were it not stopped.
            await executor.run(Call("after", sleep_then, {"value": 0, "seconds": 0.5}))
            return result

    began = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - began < 100
    assert all(_gone_within(int(p.name), 10) for p in queued_dir.iterdir())
