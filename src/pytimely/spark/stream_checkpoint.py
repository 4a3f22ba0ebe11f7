"""pytimely's half of a streaming checkpoint: :class:`StreamCheckpoint` (the query's identity, staged inputs,
commits, ownership and host generations) and the lock that holds it for one run.

``CK/spark`` is Spark's (source offsets); ``CK/pytimely`` is ours: ``query.json`` (the identity a later run
must match), ``inputs/`` (each micro-batch's input as Arrow), ``committed.json``, ``state/`` (snapshots),
each file written under a temporary name and renamed. Every Arrow file read back from the checkpoint (staged
inputs; the held rows, late rows and output parts the hosted processes and feed tasks leave) is signed with the
checkpoint's key (``CK/pytimely/key``, readable by its owner only): :mod:`pytimely.spark.signed_files`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import time as _time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytimely.atomic import write_atomic
from pytimely.errors import (
    CheckpointFileError,
    CheckpointInUseError,
    CheckpointMismatchError,
    InvalidArgument,
    PytimelyError,
    StreamFencedError,
    StreamSchemaError,
    StreamStateLostError,
)
from pytimely.spark.signed_files import is_signed_file, read_regular, read_signed_arrow, write_signed_arrow
from pytimely.spark.stream_sinks import local_folder

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from pytimely.recovery import Recovery

__all__ = ["StreamCheckpoint", "committed_bound"]

_FORMAT = 2
_KEY_BYTES = 32
_BATCH = re.compile(r"^batch-(\d{12})\.(arrow|done)$")


def _recorded_jvm(text: str) -> int | None:
    """The JVM pid an earlier run wrote in the lock file, if it parses."""
    try:
        value = json.loads(text).get("jvm") if text.strip() else None
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _await_exit(pid: int, wait: float, root: Path) -> None:
    """Wait for an earlier run's JVM to exit; one still writing the checkpoint after ``wait`` s is refused."""
    deadline = _time.monotonic() + wait
    while _alive(pid):
        if _time.monotonic() > deadline:
            raise CheckpointInUseError(
                f"the checkpoint {root}: the Spark JVM (pid {pid}) of an earlier run still runs after {wait:g} s; "
                "stop it before running again"
            )
        _time.sleep(0.1)


def _jvm_pid(session: Any) -> int | None:
    """The pid of a classic session's JVM (``None`` where the client has no JVM, as with Spark Connect)."""
    try:
        return int(session._jvm.java.lang.ProcessHandle.current().pid())
    except Exception:  # no gateway, or a JVM without ProcessHandle: nothing to wait for
        return None


class StreamCheckpoint:
    """pytimely's half of a streaming checkpoint: the query's identity, staged inputs and commits."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.root = local_folder(directory, "checkpoint")
        self.spark = self.root / "spark"
        self.own = self.root / "pytimely"
        self.inputs = self.own / "inputs"
        self.state = self.own / "state"
        self.committed = self.own / "committed.json"
        self._key: bytes | None = None

    @contextlib.contextmanager
    def locked(self, jvm_pid: int | None = None, *, wait: float = 30.0) -> Iterator[None]:
        """Hold the checkpoint for one run: a second run on it fails at once with ``CheckpointInUseError``.

        The lock is ``flock`` on ``CK/pytimely.lock``, released by the kernel when its process dies. A killed
        run's Spark JVM outlives its Python for a moment and may still write Spark's half of the checkpoint, so
        the lock also records the JVM's pid, and the next run waits up to ``wait`` seconds for it to exit.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / "pytimely.lock"
        with open(path, "a+", encoding="utf-8") as file:
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                file.seek(0)
                raise CheckpointInUseError(
                    f"the checkpoint {self.root} is in use by another run ({file.read().strip() or 'unknown'}); "
                    "stop it or give another checkpoint directory"
                ) from None
            file.seek(0)
            earlier = _recorded_jvm(file.read())
            if earlier is not None and earlier != jvm_pid:
                _await_exit(earlier, wait, self.root)
            file.seek(0)
            file.truncate()
            file.write(json.dumps({"pid": os.getpid(), "jvm": jvm_pid}) + "\n")
            file.flush()
            try:
                yield
            finally:
                fcntl.flock(file, fcntl.LOCK_UN)

    def open(self, identity: dict[str, Any]) -> list[int]:
        """Check (or record) that the checkpoint is this query's; return the committed batch ids in order.

        Staged inputs of batches that were never committed are removed: Spark delivers them again.
        """
        where = self.own / "query.json"
        if where.exists():
            try:
                recorded = json.loads(where.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise CheckpointMismatchError(f"{where} is not a pytimely stream checkpoint: {exc}") from exc
            _check_identity(recorded, identity, where)
        elif self.spark.exists() and any(self.spark.iterdir()):
            raise CheckpointMismatchError(
                f"{self.root} holds a Spark checkpoint but no pytimely query record ({where}): it belongs to "
                "another query; give a new checkpoint directory"
            )
        else:
            self.own.mkdir(parents=True, exist_ok=True)
            write_atomic(where, json.dumps(identity, indent=1, sort_keys=True) + "\n")
        last = self.last_committed()
        if last >= 0 and not (self.spark / "offsets").exists():
            raise CheckpointMismatchError(
                f"{self.root} records {last + 1} committed micro-batch(es) but Spark's checkpoint "
                f"({self.spark}) is gone: the query would read its input again from the start"
            )
        committed = list(range(last + 1))
        for batch in self._ids(self.inputs, "arrow"):
            if batch not in set(committed):
                self.input_path(batch).unlink(missing_ok=True)
        return committed

    @staticmethod
    def _ids(directory: Path, kind: str) -> list[int]:
        if not directory.exists():
            return []
        found = (_BATCH.match(p.name) for p in directory.iterdir())
        return sorted(int(m.group(1)) for m in found if m is not None and m.group(2) == kind)

    def last_committed(self) -> int:
        """The last micro-batch whose output is in the sink (-1 before the first)."""
        try:
            text = self.committed.read_text(encoding="utf-8")
        except FileNotFoundError:
            return -1
        except OSError as exc:
            raise CheckpointMismatchError(f"{self.committed} cannot be read: {exc.strerror or exc}") from None
        try:
            batch = json.loads(text)["batch"]
        except (ValueError, KeyError, TypeError):
            batch = None
        if type(batch) is not int or batch < 0:
            raise CheckpointMismatchError(f"{self.committed} is not a pytimely commit record: {text[:200]!r}")
        return batch

    def recovery(self, identity: dict[str, Any]) -> Recovery:
        """The recovery store of the query's state (``CK/pytimely/state``): a snapshot per micro-batch, two kept."""
        from pytimely.recovery import Recovery, SnapshotPolicy

        parameters = {"input": identity["input"], "output": identity["output"]}
        # Unchanged bins are written again every 4th snapshot: a payload file is needed by at most 4 snapshots,
        # so the checkpoint holds a few copies of the state at most, whatever the history.
        policy = SnapshotPolicy(every_epochs=1, keep=2, rewrite_every=4)
        return Recovery(self.state, job=identity["query"], policy=policy, parameters=parameters)

    def input_path(self, batch_id: int) -> Path:
        """Where ``batch_id``'s input is staged."""
        return self.inputs / f"batch-{batch_id:012d}.arrow"

    def stage(self, batch_id: int, table: pa.Table) -> None:
        """Keep ``batch_id``'s input (Arrow IPC signed with :meth:`key`), so a restart can rebuild the state from it."""
        write_signed_arrow(self.input_path(batch_id), table, self.key())

    def staged(self, batch_id: int) -> pa.Table:
        """``batch_id``'s staged input (:class:`CheckpointFileError` when it is not signed with :meth:`key`)."""
        return read_signed_arrow(self.input_path(batch_id), self.key())

    def commit(self, batch_id: int, *, frontier: int | None = None) -> None:
        """Record that ``batch_id``'s output is in the sink (one small file, replaced: it does not grow), and whether
        the state store holds a snapshot by then (so a restart that finds none can tell the state was lost). With
        event-time epochs on the executors, ``frontier`` is the one the micro-batch moved to (snapshots are of
        event-time epochs: the state resumes from the one before it)."""
        bound = batch_id if frontier is None else frontier - 1
        record: dict[str, Any] = {"batch": batch_id, "at": _time.time(), "state": bool(self._snapshotted(bound))}
        if frontier is not None:
            record["frontier"] = frontier
        write_atomic(self.committed, json.dumps(record) + "\n")

    def frontier(self) -> int:
        """The frontier the last committed micro-batch moved to (event time on the executors; 0 before any)."""
        try:
            value = json.loads(self.committed.read_text(encoding="utf-8")).get("frontier", 0)
        except FileNotFoundError:
            return 0
        except (OSError, ValueError, AttributeError) as exc:
            raise CheckpointMismatchError(f"{self.committed} is not a pytimely commit record: {exc}") from None
        if type(value) is not int:
            raise CheckpointMismatchError(f"{self.committed} records the frontier {value!r}, not an epoch")
        return value

    def resume_bound(self) -> int:
        """The epoch whose snapshot a restart resumes from (at or before): the last committed micro-batch, or with
        event time on the executors the last epoch before its frontier."""
        try:
            recorded = json.loads(self.committed.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return self.last_committed()
        if isinstance(recorded, dict) and "frontier" in recorded:
            return self.frontier() - 1
        return self.last_committed()

    def _snapshotted(self, at_most: int) -> list[int]:
        """The epochs at or before ``at_most`` of the snapshots the state store lists (whole or not)."""
        from pytimely.recovery.manifest import epoch_of

        folder = self.state / "manifests"
        epochs = (epoch_of(p.name) for p in folder.iterdir()) if folder.is_dir() else iter(())
        return sorted(e for e in epochs if e is not None and e <= at_most)

    def keeps_state(self) -> bool:
        """Whether a snapshot of the state was durable when the last micro-batch was committed: a restart must then
        find one (an epoch that changed no state has no snapshot of its own, so none is also the empty state's)."""
        last = self.resume_bound()
        try:
            recorded = json.loads(self.committed.read_text(encoding="utf-8")).get("state")
        except (OSError, ValueError, AttributeError):
            recorded = None
        if isinstance(recorded, bool):
            return recorded
        return bool(self._snapshotted(last))  # a record of an earlier version: what the store still lists

    def check_state(self, identity: dict[str, Any], mode: str = "resume") -> None:
        """Before anything opens the state store: refuse to resume a stateful query without its state.

        ``mode="fresh"`` empties the store (the dataflow starts from empty state; the committed output stays and
        Spark goes on after it). With ``"resume"`` and committed micro-batches of a stateful query, the store must
        hold a usable snapshot at or before the last committed micro-batch, else :class:`StreamStateLostError`
        naming the checkpoint, the micro-batch and the snapshots found. A damaged newest snapshot is passed over
        for the one before it with a :class:`~pytimely.recovery.RecoveryWarning` (as recovery does), and a further
        warning names the committed micro-batches whose rows the state then lacks.
        """
        import warnings

        from pytimely.recovery.manifest import Seal
        from pytimely.recovery.snapshots import RecoveryWarning, Snapshots
        from pytimely.recovery.store import open_store

        if mode not in ("resume", "fresh"):
            raise InvalidArgument(f"recovery_mode must be 'resume' or 'fresh', got {mode!r}")
        recovery = self.recovery(identity)
        if mode == "fresh":
            if self.state.exists():
                Snapshots(open_store(self.state), Seal(recovery.key)).wipe()
            return
        if self.last_committed() < 0 or not self.keeps_state():
            return
        last = self.resume_bound()
        found = sorted(p.name for p in (self.state / "manifests").glob("*"))
        opened = None
        with warnings.catch_warnings(record=True) as passed_over:
            warnings.simplefilter("always", RecoveryWarning)
            if self.state.exists():
                seal = Seal(recovery.key)
                snapshots = Snapshots(open_store(self.state), seal)
                digest = snapshots.check_identity(recovery.identity(seal.key_id), write=False)
                opened = snapshots.latest(digest, at_most=last)
        if opened is None:
            why = "".join(f"; {w.message}" for w in passed_over if "no usable snapshot" not in str(w.message))
            raise StreamStateLostError(
                f"the checkpoint {self.root}: micro-batches up to {last} are committed, but its state store "
                f"({self.state}) holds no usable snapshot at or before micro-batch {last} (found: "
                f"{', '.join(found) or 'none'}{why}); resuming would start from empty state and write wrong output. "
                "run_stream(..., recovery_mode='fresh') starts the state over (the committed output stays)"
            )
        for warned in passed_over:
            warnings.warn(warned.message, warned.category, stacklevel=2)
        # Snapshots passed over (damaged) of later committed micro-batches: Spark does not deliver those again.
        lost = self._snapshotted(last)[-1]
        if passed_over and lost > opened.manifest.epoch:
            warnings.warn(
                f"the checkpoint {self.root}: the state resumes from micro-batch {opened.manifest.epoch}'s snapshot, "
                f"but micro-batches up to {last} are committed and are not delivered again: the rows of micro-batches "
                f"{opened.manifest.epoch + 1}..{lost} are missing from the state",
                RecoveryWarning,
                stacklevel=2,
            )

    def take_ownership(self) -> str:
        """Make this run the checkpoint's owner (a fresh token in ``owner.json``); an earlier owner can no longer
        commit (:meth:`fenced_commit`). Called by a run that holds the checkpoint's lock."""
        token = secrets.token_hex(16)
        self.own.mkdir(parents=True, exist_ok=True)
        write_atomic(self.own / "owner.json", json.dumps({"owner": token, "pid": os.getpid()}) + "\n")
        return token

    def owner(self) -> str | None:
        """The token of the run that owns the checkpoint now (``None`` before any)."""
        try:
            return str(json.loads((self.own / "owner.json").read_text(encoding="utf-8"))["owner"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CheckpointMismatchError(f"{self.own / 'owner.json'} is not a pytimely owner record: {exc}") from None

    def check_owner(self, owner: str, batch_id: int) -> None:
        """Raise :class:`StreamFencedError` unless ``owner`` still owns the checkpoint."""
        now = self.owner()
        if now != owner:
            raise StreamFencedError(
                f"micro-batch {batch_id}: the checkpoint {self.root} was taken over by another run (owner "
                f"{now}, this run {owner}); this run stops without committing"
            )

    @contextlib.contextmanager
    def fenced_commit(self, owner: str, batch_id: int) -> Iterator[None]:
        """Hold the commit lock (``CK/pytimely/commit.lock``) while ``owner`` still owns the checkpoint, else raise
        :class:`StreamFencedError`: a run that was taken over (a killed client's query still running on a Spark
        Connect server, a second client) never commits."""
        self.own.mkdir(parents=True, exist_ok=True)
        with open(self.own / "commit.lock", "a+", encoding="utf-8") as file:
            fcntl.flock(file, fcntl.LOCK_EX)
            try:
                self.check_owner(owner, batch_id)
                yield
            finally:
                fcntl.flock(file, fcntl.LOCK_UN)

    def key(self) -> bytes:
        """The checkpoint's key for the files it reads back (``CK/pytimely/key``: made at the first call, readable
        and writable by its owner only); a key file another user could have made or read is refused."""
        if self._key is None:
            self._key = self._read_key()
        return self._key

    def _read_key(self) -> bytes:
        path = self.own / "key"
        try:
            self.own.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                self._refuse_lost_key(path)
                self._make_key(path)
        except OSError as exc:
            raise CheckpointFileError(f"{path}: the checkpoint's key cannot be made: {exc.strerror or exc}") from None
        key, status = read_regular(path, _KEY_BYTES + 1, "the checkpoint's key")
        if status.st_uid != os.getuid() or status.st_mode & 0o077:
            raise CheckpointFileError(
                f"{path}: the checkpoint's key must belong to this user and be readable by it only (mode "
                f"{status.st_mode & 0o777:o}, owner {status.st_uid}); if no one else could have read it, chmod 600 "
                "it (as its owner); else start the query on a new checkpoint (a new key cannot read the files "
                "signed with this one)"
            )
        if len(key) != _KEY_BYTES:
            raise CheckpointFileError(f"{path} holds {len(key)} bytes, not a {_KEY_BYTES}-byte checkpoint key")
        return key

    def _make_key(self, path: Path) -> None:
        """Make the key at ``path``: written whole under another name, then linked into place, so a crash leaves no
        empty key, and of two runs racing the first link wins."""
        aside = self.own / f".key-{os.getpid()}-{secrets.token_hex(4)}"
        made = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                os.write(made, secrets.token_bytes(_KEY_BYTES))
                os.fsync(made)
            finally:
                os.close(made)
            with contextlib.suppress(FileExistsError):
                os.link(aside, path)
        finally:
            aside.unlink(missing_ok=True)

    def _refuse_lost_key(self, path: Path) -> None:
        """Refuse to make a key while files signed with an earlier one are to be read back (held rows, staged
        inputs): a new key would refuse each of them as planted, and the query could not resume."""
        for folder in (self.own / "held", self.inputs):
            signed = [p for p in sorted(folder.glob("*.arrow")) if is_signed_file(p)] if folder.is_dir() else []
            if signed:
                raise CheckpointFileError(
                    f"{path} is missing, but the checkpoint holds files signed with it ({signed[0]}"
                    f"{f' and {len(signed) - 1} more' if len(signed) > 1 else ''}): restore the key file, or start "
                    "the query on a new checkpoint"
                )

    def next_generation(self) -> int:
        """A new host generation of this checkpoint (one more than any before; the caller holds the lock)."""
        path = self.own / "generation.json"
        try:
            last = int(json.loads(path.read_text(encoding="utf-8"))["generation"])
        except FileNotFoundError:
            last = 0
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CheckpointMismatchError(f"{path} is not a pytimely generation record: {exc}") from None
        self.own.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"generation": last + 1}) + "\n")
        hosts = self.own / "hosts"
        if hosts.exists():
            for old in hosts.iterdir():
                old.unlink(missing_ok=True)  # earlier generations' addresses: their processes are gone
        return last + 1


def committed_bound(own: str | os.PathLike[str]) -> int:
    """The epoch a restart of the checkpoint whose pytimely folder is ``own`` resumes from (at or before; -1 before
    the first commit, or when its commit record cannot be read: it is refused when the run starts again). What the
    hosted processes' recovery store protects (:attr:`Recovery.protect <pytimely.recovery.Recovery>`): one
    micro-batch may complete several event-time epochs, each snapshotted, before its commit."""
    try:
        return StreamCheckpoint(Path(own).parent).resume_bound()
    except PytimelyError:
        return -1


def _check_identity(recorded: dict[str, Any], identity: dict[str, Any], where: Path) -> None:
    """Refuse a checkpoint recorded by another query, naming what differs (the input's schema most plainly)."""
    if recorded.get("format") != identity["format"]:
        raise CheckpointMismatchError(f"{where} has format {recorded.get('format')!r}, expected {identity['format']}")
    if recorded.get("input") != identity["input"]:
        raise StreamSchemaError(
            f"the source's schema changed: the checkpoint {where} was made for rows {recorded.get('input')}, "
            f"the source now gives {identity['input']}"
        )
    for key in ("query", "output", "epoch"):
        if recorded.get(key) != identity[key]:
            raise CheckpointMismatchError(
                f"the checkpoint {where} belongs to another query: its {key} is {recorded.get(key)!r}, "
                f"this query's is {identity[key]!r}"
            )


def _identity(query: str, source: DataFrame, schema: Any, epoch: str | None, build: str) -> dict[str, Any]:
    """What makes a checkpoint this query's: its name, its rows in and out, how epochs are assigned."""
    from pyspark.sql.types import StructType

    out = StructType.fromDDL(schema) if isinstance(schema, str) else schema
    return {
        "format": _FORMAT,
        "query": query,
        "input": source.schema.simpleString(),
        "output": out.simpleString(),
        "epoch": epoch if epoch is not None else "batch id",
        "build": build,
    }


def is_new_batch(batch_id: int, last_committed: int, input_schema: str, schema: str) -> bool:
    """Whether micro-batch ``batch_id`` is to be processed: ``False`` for one already committed (Spark delivers it
    again after a restart), a typed error for one that skips a batch or whose source schema changed."""
    if batch_id <= last_committed:
        return False
    if batch_id != last_committed + 1:
        raise CheckpointMismatchError(
            f"micro-batch {batch_id} arrived after {last_committed}: the commits of the batches between are missing "
            "from the checkpoint"
        )
    if schema != input_schema:
        raise StreamSchemaError(f"micro-batch {batch_id}: the source's schema changed from {input_schema} to {schema}")
    return True
