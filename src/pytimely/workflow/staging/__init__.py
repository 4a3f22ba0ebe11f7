"""Staging areas: where a workflow keeps the values of its ports, each with the fingerprint it was computed for.

A staging area maps **keys** to values. A key is a ``/``-separated path of segments — the module path and the
port, e.g. ``report/clean/out``, with loop iterations as a segment such as ``iter-3``. A segment is made of
letters, digits and ``_ . = -`` and does not start with ``.`` (names starting with a dot are the staging
area's own bookkeeping); :func:`check_key` says why a key is refused.

Every value is stored with the **fingerprint** it was computed for (see :mod:`pytimely.workflow.fingerprint`).
A value counts as present for a fingerprint only when it was stored completely *and* under that very
fingerprint, so a stale value (its code, parameters or inputs changed since) is treated as absent.

The :class:`StagingArea` protocol (synchronous; an asyncio interpreter calls it through
``asyncio.to_thread``):

* ``has(key, fingerprint)`` — a complete value is stored under ``key`` for exactly ``fingerprint``;
* ``fingerprint(key)`` — the fingerprint of the complete value under ``key``, or ``None``;
* ``put(key, value, fingerprint)`` — store atomically: a crash at any point never leaves a value that counts
  as present, and overwriting replaces the old value in one step (until then the old one is still there);
* ``get(key, fingerprint=None)`` — the value, or :class:`~pytimely.errors.ValueMissingError` naming the key
  (also when ``fingerprint`` is given and the stored one differs);
* ``delete(key)`` — forget the value (nothing happens when there is none);
* ``keys(prefix="")`` — the sorted keys with a committed value at or below ``prefix`` (whole segments); check
  each with ``has`` before trusting it.

Implementations: :class:`MemoryStaging` (objects kept as they are, in this process), :class:`LocalStaging`
(a directory), :class:`FsspecStaging` (any fsspec filesystem: S3 through ``s3fs``, GCS, memory, …), and
:func:`open_staging` choosing one by URL.

Persistent staging areas write a value's payload under a fresh name and then a **commit marker** naming the
fingerprint, the format and the payload's files with their sizes (and an xxh3-128 checksum for single-file
payloads). The marker is written last, in one step (a rename on local disks, a single PUT on object stores),
so a value counts as present only once its payload is complete. Formats: ``pyarrow.Table``/``RecordBatch`` and
``pandas.DataFrame`` as Parquet (read back as the same kind), Spark DataFrames as Parquet written by Spark (read
back through the active SparkSession), numpy arrays with ``np.save``, everything else pickled (protocol 5).
"""

from __future__ import annotations

import os
from typing import Any

from pytimely.errors import InvalidArgument
from pytimely.workflow.staging.area import StagingArea
from pytimely.workflow.staging.codec import format_of
from pytimely.workflow.staging.commit import ABANDONED_SECONDS, MARKER
from pytimely.workflow.staging.keys import check_key, check_prefix, under
from pytimely.workflow.staging.local import LocalStaging
from pytimely.workflow.staging.lock import break_lock, staging_lock
from pytimely.workflow.staging.lock import unavailable_reason as unavailable
from pytimely.workflow.staging.memory import MemoryStaging
from pytimely.workflow.staging.remote import FsspecStaging

__all__ = [
    "ABANDONED_SECONDS",
    "MARKER",
    "FsspecStaging",
    "LocalStaging",
    "MemoryStaging",
    "StagingArea",
    "break_lock",
    "check_key",
    "check_prefix",
    "format_of",
    "open_staging",
    "staging_lock",
    "unavailable",
    "under",
]



def open_staging(url: str | os.PathLike[str], **storage_options: Any) -> StagingArea:
    """The staging area a URL names: ``memory://``, a path or ``file://...``, ``s3://...`` or another fsspec URL."""
    text = os.fspath(url)
    if text.startswith("memory://"):
        if storage_options:
            raise InvalidArgument(f"memory:// takes no storage options, got {sorted(storage_options)}")
        return MemoryStaging()
    if "://" not in text:
        return LocalStaging(text, **storage_options)
    if text.startswith("file://"):
        return LocalStaging(text[len("file://") :], **storage_options)
    return FsspecStaging(text, **storage_options)
