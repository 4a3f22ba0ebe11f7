"""Receive buffers for big payloads, used again once nothing refers to them.

A received payload is decoded on top of its own buffer (a numpy array or an Arrow table rebuilt there without a
copy), so its buffer lives as long as the message does. A fresh ``bytearray`` per payload costs a pass of zeroing
and, for sizes the C allocator serves from fresh pages, a page fault per page and an unmapping when the message is
dropped: together about as much as decrypting the payload. :class:`PayloadBuffers` keeps the buffers it handed
out and hands one out again only when the pool's own reference is the last one, so a buffer still seen by any
message, view or array is never written (``test_a_buffer_still_referred_to_is_never_handed_out_again``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

__all__ = ["PayloadBuffers"]

# References to a pooled buffer that is free: the pool's list, and the argument of sys.getrefcount.
_FREE_REFS = 2


def _refcounts_are_exact() -> bool:
    """Whether ``sys.getrefcount`` tells that nothing else refers to an object here (not so without the GIL, and
    what it counts may differ between interpreters: checked on a buffer as the pool holds one)."""
    gil_enabled: Callable[[], bool] | None = getattr(sys, "_is_gil_enabled", None)
    if gil_enabled is not None and not gil_enabled():
        return False
    held = [bytearray(1)]
    free = sys.getrefcount(held[0]) == _FREE_REFS
    view = memoryview(held[0])
    used = sys.getrefcount(held[0]) > _FREE_REFS
    view.release()
    return free and used


class PayloadBuffers:
    """A pool of receive buffers of ``minimum`` bytes or more, holding at most ``limit`` bytes of them."""

    __slots__ = ("_buffers", "_enabled", "_held", "limit", "minimum", "reused")

    def __init__(self, minimum: int = 1 << 16, limit: int = 32 << 20) -> None:
        self.minimum = minimum
        self.limit = limit
        self._buffers: list[bytearray] = []
        self._held = 0
        self._enabled = _refcounts_are_exact() and limit > 0
        self.reused = 0
        """How many buffers were handed out again (for tests and stats)."""

    def take(self, size: int) -> bytearray | memoryview:
        """A writable buffer of exactly ``size`` bytes, of undefined content unless it is new."""
        if size < self.minimum or not self._enabled:
            return bytearray(size)
        buffers = self._buffers
        for i in range(len(buffers)):
            # Indexing rather than a loop variable: a loop variable would be one more reference to count.
            if sys.getrefcount(buffers[i]) == _FREE_REFS and size <= len(buffers[i]) <= 2 * size:
                self.reused += 1
                return memoryview(buffers[i])[:size]
        buf = bytearray(size)
        self._keep(buf)
        return memoryview(buf)[:size]

    def _keep(self, buf: bytearray) -> None:
        """Add ``buf`` to the pool, forgetting the oldest buffers (free or still in use) past the limit."""
        if len(buf) > self.limit:
            return
        self._buffers.append(buf)
        self._held += len(buf)
        while self._held > self.limit:
            # Forgetting a buffer still in use only means it is not used again: its holders keep it.
            self._held -= len(self._buffers.pop(0))

    @property
    def held(self) -> int:
        """Bytes of buffers the pool refers to (free or in use)."""
        return self._held
