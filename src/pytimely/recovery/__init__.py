"""Durable epochs: snapshots of keyed operator state per epoch, recovery after a crash, exactly-once output.

See ``docs/recovery.md``. :class:`Recovery` goes to ``execute(..., recovery=...)``; each worker then has a
:class:`Durable` as ``worker.recovery``; stores implement :class:`SnapshotStore`.
"""

from pytimely.recovery.durable import Durable, Recovery, fixed_bins
from pytimely.recovery.fsspec_store import FsspecStore
from pytimely.recovery.manifest import FORMAT_VERSION, FileRef, Identity, Manifest
from pytimely.recovery.policy import SnapshotPolicy
from pytimely.recovery.snapshots import Snapshots
from pytimely.recovery.store import LocalStore, SnapshotStore, open_store

__all__ = [
    "FORMAT_VERSION",
    "Durable",
    "FileRef",
    "FsspecStore",
    "Identity",
    "LocalStore",
    "Manifest",
    "Recovery",
    "SnapshotPolicy",
    "SnapshotStore",
    "Snapshots",
    "fixed_bins",
    "open_store",
]
