"""The :class:`Executor` protocol (``async run(call)`` and ``close()``) and what every executor here shares:
its closed state and its use as a (sync or async) context manager.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from pytimely.errors import ExecutorClosedError
from pytimely.workflow.executors.call import Call


@runtime_checkable
class Executor(Protocol):
    """Runs simple modules' code: ``await run(call)`` gives the out-port values; ``close()`` frees resources."""

    async def run(self, call: Call) -> dict[str, Any]:
        """Run ``call`` and return its out-port values by name."""
        ...

    def close(self) -> None:
        """Wait for running calls and release threads or processes; later ``run`` calls fail."""
        ...


class ExecutorBase:
    """The async context manager and closed-state shared by the executors."""

    _closed: bool = False

    def close(self) -> None:
        """Release resources (overridden)."""
        self._closed = True

    def _check_open(self, call: Call) -> None:
        if self._closed:
            name = type(self).__name__
            raise ExecutorClosedError(f"{name} is closed; cannot run module {call.module!r}", call.module)

    def _submit(
        self, call: Call, pool: concurrent.futures.Executor, fn: Callable[..., Any], *args: Any
    ) -> concurrent.futures.Future[Any]:
        try:
            return pool.submit(fn, *args)
        except RuntimeError as exc:  # closed by another thread after our check
            name = type(self).__name__
            raise ExecutorClosedError(f"{name} is closed; cannot run module {call.module!r}", call.module) from exc

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
