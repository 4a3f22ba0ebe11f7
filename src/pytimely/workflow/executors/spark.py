"""Module code in the Spark driver, with the session given to a parameter named ``spark``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import itertools
import threading
from collections.abc import Callable
from typing import Any

from pytimely.errors import InvalidArgument
from pytimely.workflow.executors.call import Call, invoke
from pytimely.workflow.executors.executor import ExecutorBase


class SparkExecutor(ExecutorBase):
    """Runs module code in the Spark driver, giving the session to a parameter named ``spark``.

    Calls run on driver threads (several modules' Spark jobs can run at once); each call's jobs are described
    in the Spark UI by the module's name. DataFrame inputs and results pass as they are (lazily). A cancelled
    ``run`` (a module's timeout) cancels the call's Spark jobs (they carry a job tag of their own), so the
    call's next action fails at once; its Python code on the driver thread cannot be stopped otherwise.
    """

    def __init__(
        self, session: Any = None, max_workers: int | None = None, *, start: Callable[[], Any] | None = None
    ) -> None:
        if session is None and start is None:
            raise InvalidArgument("SparkExecutor needs a session, or start= to make one when a module first needs it")
        self._session = session
        self._start = start
        self._session_lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="pytimely-spark-module")

    @property
    def session(self) -> Any:
        """The session: the one given, or made by ``start()`` the first time a module needs it."""
        with self._session_lock:
            if self._session is None:
                assert self._start is not None
                self._session = self._start()
            return self._session

    @property
    def started(self) -> bool:
        """Whether the executor has a session (given, or started for a module)."""
        return self._session is not None

    async def run(self, call: Call) -> dict[str, Any]:
        """Run ``call`` on a driver thread with the session and return its out-port values."""
        self._check_open(call)
        arguments = call.arguments()
        if "spark" not in arguments and _accepts(call.fn, "spark"):
            arguments["spark"] = await asyncio.to_thread(lambda: self.session)
        tag = f"pytimely-module-{next(_SPARK_TAGS)}"
        future = self._submit(call, self._pool, self._invoke, call, arguments, tag)
        try:
            return call.outputs_of(await asyncio.wrap_future(future))
        except asyncio.CancelledError:
            if self.started and not future.cancel():
                await asyncio.shield(asyncio.to_thread(self.session.sparkContext.cancelJobsWithTag, tag))
            raise

    def _invoke(self, call: Call, arguments: dict[str, Any], tag: str) -> Any:
        if not self.started:
            return invoke(call, arguments)  # a module that needs no session does not start Spark
        context = self.session.sparkContext
        context.setJobDescription(f"pytimely module {call.module}")
        context.addJobTag(tag)
        context.setInterruptOnCancel(True)
        try:
            return invoke(call, arguments)
        finally:
            context.removeJobTag(tag)
            context.setJobDescription(None)

    def close(self) -> None:
        """Wait for running calls and stop the driver threads (the session stays up: it is the caller's)."""
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)


_SPARK_TAGS = itertools.count()
"""Numbers the Spark job tags of module calls (a tag per call, so one call's jobs can be cancelled)."""


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in parameters and parameters[name].kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )
