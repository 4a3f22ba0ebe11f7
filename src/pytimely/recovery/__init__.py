"""Recovery: operator state the runtime snapshots at epoch boundaries and restores after a crash, on any number
of workers, with exactly-once output.

See ``docs/recovery.md``. A job says ``execute(job, recovery=Recovery("DIR", job="name"))`` (or runs under
``pytimely launch --recovery DIR``); operators declare their state (:mod:`pytimely.dataflow.state`), and the
runtime (:mod:`pytimely.recovery.runtime`) does the rest. Stores implement :class:`SnapshotStore`.
"""

from pytimely.recovery.fsspec_store import FsspecStore
from pytimely.recovery.manifest import FINAL, FORMAT_VERSION, Identity, Layout, Manifest, Seal, fingerprint
from pytimely.recovery.parts import Part, merge
from pytimely.recovery.policy import SnapshotPolicy
from pytimely.recovery.session import Committed, Recovery, Session
from pytimely.recovery.snapshots import Opened, RecoveryWarning, Snapshots
from pytimely.recovery.store import LocalStore, SnapshotStore, open_store

__all__ = [
    "FINAL",
    "FORMAT_VERSION",
    "Committed",
    "FsspecStore",
    "Identity",
    "Layout",
    "LocalStore",
    "Manifest",
    "Opened",
    "Part",
    "Recovery",
    "RecoveryWarning",
    "Seal",
    "Session",
    "SnapshotPolicy",
    "SnapshotStore",
    "Snapshots",
    "fingerprint",
    "merge",
    "open_store",
]
