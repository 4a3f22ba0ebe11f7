"""Errors of snapshots and their store."""

from __future__ import annotations

from pytimely.errors.base import PytimelyError


class RecoveryError(PytimelyError):
    """Snapshots of operator state could not be written or read; names the store and the file."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class StoreNotWritableError(RecoveryError, OSError):
    """A recovery store cannot be written (missing parent, no permission, a file in the way); raised at start."""


class RecoveryMismatchError(RecoveryError, ValueError):
    """A recovery store holds snapshots of another job or format version; names what differs. Nothing is touched."""

    def __init__(self, message: str, path: str = "", field: str = "") -> None:
        super().__init__(message, path)
        self.field = field


class SnapshotCorruptError(RecoveryError):
    """A committed snapshot's payload is missing or does not match the checksum its manifest records."""


class SnapshotSealError(RecoveryError):
    """A recovery store's file is not sealed by the store's key (or the store is sealed and no key was given);
    nothing of it was unpickled."""


class StoreWriteError(RecoveryError, OSError):
    """Writing a snapshot failed mid-run (a full disk, a lost connection); names the file. The last committed
    snapshot is untouched and nothing half-written counts."""
