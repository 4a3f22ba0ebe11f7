"""The default executor: module code on a thread pool of this process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from pytimely.workflow.executors.call import Call, invoke
from pytimely.workflow.executors.executor import ExecutorBase


class ThreadExecutor(ExecutorBase):
    """Runs module code on a thread pool of this process (the default executor).

    A cancelled ``run`` stops waiting, but the call already running on its thread cannot be interrupted; it
    finishes and its result is dropped.
    """

    def __init__(self, max_workers: int | None = None, *, thread_name_prefix: str = "pytimely-module") -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix=thread_name_prefix)

    async def run(self, call: Call) -> dict[str, Any]:
        """Run ``call`` on a pool thread and return its out-port values."""
        self._check_open(call)
        future = self._submit(call, self._pool, invoke, call)
        return call.outputs_of(await asyncio.wrap_future(future))

    def close(self) -> None:
        """Wait for running calls and stop the pool's threads."""
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
