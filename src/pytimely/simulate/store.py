"""A recovery store in the simulator's memory: writes take simulated time, and may fail or find the store full.

It keeps blobs as a :class:`~pytimely.recovery.store.LocalStore` keeps files (names are ``/``-separated
paths; :meth:`SimStore.list` lists a folder's entries), so what the recovery runtime reads back after a run
was killed is what that run had written. Blobs survive the processes that wrote them: a run started again
after a crash opens the same store. While a *store fault* stands, every write fails as a full disk would
(``ENOSPC``): a typed :class:`~pytimely.errors.StoreWriteError` naming the blob, nothing written under its name.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection

from pytimely.errors import StoreNotWritableError, StoreWriteError
from pytimely.simulate.kernel import Kernel

__all__ = ["SimStore"]


class SimStore:
    """A :class:`~pytimely.recovery.store.SnapshotStore` in memory, on simulated time."""

    def __init__(self, kernel: Kernel, *, latency: float = 200e-6) -> None:
        self.location = "sim://store"
        self._kernel = kernel
        self.latency = latency
        """Simulated seconds one write takes."""
        self.blobs: dict[str, bytes] = {}
        self.failing_until = -1.0
        """Writes fail until this simulated time (a full or failing store)."""
        self.writes = 0
        self.refused = 0

    def __repr__(self) -> str:
        return "SimStore()"

    def _write(self, name: str) -> None:
        kernel = self._kernel
        if kernel.current is not None and self.latency > 0:
            kernel.sleep(self.latency)
        if kernel.now < self.failing_until:
            self.refused += 1
            raise StoreWriteError(
                f"recovery store {self.location}: cannot write {name}: No space left on device (the last committed "
                "snapshot is untouched)",
                name,
            )
        self.writes += 1

    def check_writable(self) -> None:
        """Refused while a store fault stands."""
        if self._kernel.now < self.failing_until:
            raise StoreNotWritableError(f"recovery store {self.location}: cannot write: No space left on device",
                                        self.location)

    def put(self, name: str, data: bytes) -> None:
        """Store ``data`` as ``name``, all or nothing."""
        self._write(name)
        self.blobs[name] = bytes(data)

    def put_new(self, name: str, data: bytes) -> None:
        """Store ``data`` under a new name."""
        self._write(name)
        self.blobs[name] = bytes(data)

    def persist(self, names: Collection[str]) -> None:
        """Nothing to do: what is in memory here survives every simulated crash."""

    def get(self, name: str) -> bytes | None:
        """The blob, or ``None``."""
        return self.blobs.get(name)

    def list(self, prefix: str) -> builtins.list[str]:
        """The entries of folder ``prefix``, sorted (files and folders, as a local folder lists them)."""
        base = f"{prefix}/" if prefix else ""
        entries = {base + name[len(base) :].split("/", 1)[0] for name in self.blobs if name.startswith(base)}
        return sorted(entries)

    def delete(self, name: str) -> None:
        """Remove a blob (or every blob under a folder)."""
        self.blobs.pop(name, None)
        for other in [n for n in self.blobs if n.startswith(name + "/")]:
            del self.blobs[other]

    def sweep(self) -> builtins.list[str]:
        """Nothing is left half-written in memory."""
        return []
