"""Snapshots in a store: payload records first, a manifest naming each with its checksum last; retention; leftovers.

Layout of a store (every name a blob of a :class:`~pytimely.recovery.store.SnapshotStore`)::

    identity.json                         the job (:class:`Identity`), sealed; written once
    run.json                              the epoch the current run resumed at (for processes that join it)
    dataflows/<k>.json                    the states dataflow k declares (:class:`Layout`), sealed
    snapshots/<first>-<last>-<w>-<k>-<t>  a segment: worker w's records of dataflow k's state at the snapshots
                                          of epochs first..last, run t (:mod:`~pytimely.recovery.segments`)
    manifests/<epoch>                     the commit: every payload record with its SHA-256, every piece's place

(A store that cannot append has ``snapshots/<epoch>-<worker>-<k>-<token>``, a record each, instead.)

A snapshot of epoch ``e`` exists only once ``manifests/e`` does, opens under the store's seal, and every file it
names is there with its size and checksum (:meth:`Snapshots.latest` checks all of it before anything is
unpickled, and falls back to the snapshot before with a warning when the newest is not usable). Files of epochs
after the newest usable snapshot belong to a run that died before its commit; :meth:`Snapshots.clean` removes
them, the files no remaining manifest names, and every temporary file a killed writer left, before a resumed
run writes anything. Names carry a random token, so a rerun never writes over (or appends to) a file a manifest
names.
"""

from __future__ import annotations

import json
import secrets
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from pytimely.errors import RecoveryError, RecoveryMismatchError, SnapshotSealError
from pytimely.recovery.manifest import Identity, Layout, Manifest, Seal, digest, epoch_name, epoch_of
from pytimely.recovery.segments import container, record_name, segment_last, segment_token, split_record
from pytimely.recovery.store import AppendingStore, SnapshotStore

__all__ = ["Opened", "RecoveryWarning", "Retained", "Snapshots", "protected"]

_OURS = ("identity.json", "run.json", "dataflows", "snapshots", "manifests")
"""The top-level names a recovery store holds; anything else means the folder is not one."""


class Retained:
    """What the committing worker keeps in mind of its commits, so retention needs no listing: the manifests
    kept, the files each reads (a record's segment, or a payload file), and every such file it has seen named."""

    def __init__(self, start: Manifest | None = None, earlier: list[tuple[str, set[str]]] | None = None) -> None:
        """``start``: the snapshot restored from; ``earlier``: the older manifests the store kept, each with the
        files it reads (so that they go in turn, with what only they read, as if this run had committed them)."""
        self._kept: list[tuple[str, set[str]]] = []
        self._seen: set[str] = set()
        if start is not None:
            name = f"manifests/{epoch_name(start.epoch)}"
            self._kept = [(n, f) for n, f in earlier or [] if n != name] + [(name, _containers(start))]
            for _, files in self._kept:
                self._seen |= files

    def commit(self, manifest: Manifest, keep: int, protect: int | None = None) -> list[tuple[str, list[str]]]:
        """Note ``manifest`` as committed; the manifests to remove now, each with the files only it needed.

        The newest ``keep`` stay, and the newest at or before epoch ``protect`` (:func:`protected`). A segment
        whose window is not over yet is kept though no manifest reads it now: a worker may still append to it (it
        goes once its last epoch is committed)."""
        name = f"manifests/{epoch_name(manifest.epoch)}"
        files = _containers(manifest)
        self._seen |= files
        self._kept = [(n, f) for n, f in self._kept if n != name] + [(name, files)]
        over = max(0, len(self._kept) - keep)
        floor = protected([n for n, _ in self._kept], protect)
        gone = [k for k in self._kept[:over] if k[0] != floor]
        self._kept = [k for i, k in enumerate(self._kept) if i >= over or k[0] == floor]
        live = set().union(*(f for _, f in self._kept)) if self._kept else set()
        out = []
        for removed, _ in gone:
            dead = sorted(f for f in self._seen - live if _over(f, manifest.epoch))
            self._seen.difference_update(dead)
            out.append((removed, dead))
        return out


def protected(names: list[str], protect: int | None) -> str | None:
    """Of the manifests ``names`` (oldest first), the newest at or before epoch ``protect``: the one a restart
    after ``protect`` was committed resumes from, which retention keeps whatever the snapshots taken since."""
    if protect is None:
        return None
    at_or_before = [n for n in names if (e := epoch_of(n)) is not None and e <= protect]
    return at_or_before[-1] if at_or_before else None


def _containers(manifest: Manifest) -> set[str]:
    """The files a manifest reads: each record's segment, each payload file."""
    return {container(name) for name in manifest.file_names()}


def _over(name: str, committed: int) -> bool:
    """Whether no worker appends to ``name`` any more once ``committed`` is: a payload file, or a segment
    whose window ends at or before it."""
    last = segment_last(name)
    return last is None or last <= committed


class RecoveryWarning(UserWarning):
    """A snapshot could not be used and an older one (or a fresh start) was taken instead; says why."""


@dataclass(slots=True)
class Opened:
    """A snapshot found usable: its manifest and the bytes of every file it names (verified)."""

    manifest: Manifest
    files: dict[str, bytes] = field(default_factory=dict)

    def piece(self, ref: tuple[int, int, int]) -> bytes:
        """The bytes of a piece ``(file index, offset, length)``."""
        name = self.manifest.files[ref[0]][0]
        return self.files[name][ref[1] : ref[1] + ref[2]]


@dataclass(slots=True)
class Snapshots:
    """The snapshots of one job in ``store``, sealed by ``seal``."""

    store: SnapshotStore
    seal: Seal
    token: str = field(default_factory=lambda: secrets.token_hex(6), init=False, repr=False)
    """Random, once per opening: payload names of this run differ from every earlier run's."""
    _count: Iterator[int] = field(default_factory=count, init=False, repr=False)
    _appending: AppendingStore | None = field(default=None, init=False, repr=False)
    """The store, if it can append (checked once: a protocol check costs as much as a small write)."""
    _open: set[str] = field(default_factory=set, init=False, repr=False)
    """Segments this opening appends to and has not let go of yet."""

    def __post_init__(self) -> None:
        if isinstance(self.store, AppendingStore):
            self._appending = self.store

    @property
    def where(self) -> str:
        """The store's location, for messages."""
        return self.store.location

    # -- identity and layouts ---------------------------------------------------------------

    def strangers(self) -> list[str]:
        """Top-level names that a recovery store does not hold."""
        return [n for n in self.store.list("") if n not in _OURS]

    def check_identity(self, identity: Identity, *, write: bool) -> str:
        """Refuse a store of another job, input, parameter, version or key; ``write`` it if it has none.

        A store without an identity but with snapshots, or with files it does not know, is refused too.
        Returns the SHA-256 of the identity, which every manifest records.
        """
        where = self.where
        text = json.dumps(identity.to_json(), sort_keys=True)
        data = self.store.get("identity.json")
        if data is None:
            strangers = self.strangers()
            if strangers or self.store.list("manifests"):
                raise RecoveryMismatchError(
                    f"recovery store {where}: not a recovery store of this job (it holds "
                    f"{strangers[:3] or 'snapshots'} but no identity.json); use an empty or new folder (nothing "
                    "was changed)", where, "identity",
                )
            if write:
                self.store.put("identity.json", self.seal.wrap("identity", identity.to_json()))
            return digest(text.encode())
        body = self.seal.open("identity", data, f"recovery store {where}: identity.json")
        if body is None:
            raise RecoveryMismatchError(
                f"recovery store {where}: identity.json is damaged (nothing was changed; --recovery-mode fresh "
                "starts over)", where, "identity",
            )
        stored = Identity.from_json(body)
        if stored.key_id != identity.key_id:
            raise SnapshotSealError(
                f"recovery store {where} is sealed with another key than this run's (nothing was read)", where
            )
        identity.check_against(stored, where)
        return digest(text.encode())

    def check_layout(self, index: int, name: str, layout: Layout, *, write: bool, check: bool) -> None:
        """Refuse a dataflow whose states differ from those the store's snapshots hold (``check``); record it."""
        blob = f"dataflows/{index}.json"
        data = self.store.get(blob)
        if data is None:
            if write:
                self.store.put(blob, self.seal.wrap("layout", layout.to_json()))
            return
        if not check:
            if write and data != self.seal.wrap("layout", layout.to_json()):
                self.store.put(blob, self.seal.wrap("layout", layout.to_json()))
            return
        body = self.seal.open("layout", data, f"recovery store {self.where}: {blob}")
        if body is None:
            raise RecoveryMismatchError(f"recovery store {self.where}: {blob} is damaged", self.where, blob)
        layout.check_against(Layout.from_json(body), self.where, name)

    def put_run(self, resume: int, identity: str) -> None:
        """Record the epoch this run resumed at, for processes that join it later."""
        self.store.put("run.json", self.seal.wrap("run", {"resume": resume, "identity": identity}))

    def get_run(self) -> int | None:
        """The epoch the running computation resumed at (``None`` if the store says nothing usable)."""
        data = self.store.get("run.json")
        body = None if data is None else self.seal.open("run", data, f"recovery store {self.where}: run.json")
        return None if body is None else int(body["resume"])

    # -- writing -----------------------------------------------------------------------------

    def payload_name(self, epoch: int, worker: int, dataflow: int) -> str:
        """A fresh name for a worker's payload file of a dataflow at ``epoch`` (no system call: a worker's step
        that made one could lose the interpreter to another thread until the switch interval passes)."""
        return f"snapshots/{epoch_name(epoch)}-{worker:05d}-{dataflow:03d}-{self.token}{next(self._count):x}"

    def put_payload(self, name: str, data: bytes) -> tuple[str, int, str]:
        """Write a payload file; ``(name, size, sha256)`` as the manifest will name it."""
        self.store.put_new(name, data)
        return name, len(data), digest(data)

    @property
    def appends(self) -> bool:
        """Whether payloads go to segments (:mod:`pytimely.recovery.segments`): the store can append."""
        return self._appending is not None

    def append_record(self, segment: str, offset: int, data: bytes, finished: str | None) -> tuple[str, int, str]:
        """Write a record at ``offset`` of ``segment`` (durable on return), first letting go of the segment
        ``finished`` (written no more); ``(record name, size, sha256)`` as the manifest will name it."""
        store = self._appending
        if store is None:
            raise RecoveryError(f"recovery store {self.where} cannot append records", self.where)
        if finished is not None:
            store.release(finished)
            self._open.discard(finished)
        self._open.add(segment)
        store.write_at(segment, offset, data)
        return record_name(segment, offset), len(data), digest(data)

    def release(self) -> None:
        """Let go of every segment this opening appended to (its writes are over)."""
        if self._appending is not None:
            for segment in sorted(self._open):
                self._appending.release(segment)
        self._open.clear()

    def commit(
        self, manifest: Manifest, keep: int, retained: Retained | None = None, protect: Callable[[], int] | None = None
    ) -> None:
        """Commit ``manifest`` (its payload files must be written) and remove what no kept snapshot needs.

        With ``retained`` (the committer's memory of what it committed) nothing is listed or read back: files
        no kept manifest names are removed as they are known to be. ``protect`` (asked now) names the epoch whose
        snapshot is kept besides the newest ``keep`` (:attr:`Recovery.protect <pytimely.recovery.Recovery>`).
        """
        self.store.persist([name for name in manifest.file_names() if split_record(name) is None])
        self.store.put(f"manifests/{epoch_name(manifest.epoch)}", self.seal.wrap("manifest", manifest.to_json()))
        floor = None if protect is None else protect()
        if retained is None:
            self.prune(keep, manifest.epoch, floor)
            return
        for name, files in retained.commit(manifest, keep, floor):
            self.store.delete(name)
            for file in files:
                self.store.delete(file)

    def prune(self, keep: int, newest: int, protect: int | None = None) -> None:
        """Keep the newest ``keep`` manifests (and the newest at or before epoch ``protect``); remove payload files
        none of them names, up to epoch ``newest``.

        Files of later epochs may belong to a snapshot being written now and are left alone.
        """
        manifests = self.store.list("manifests")
        floor = protected(manifests, protect)
        kept = [n for i, n in enumerate(manifests) if i >= len(manifests) - keep or n == floor]
        for name in manifests:
            if name not in kept:
                self.store.delete(name)
        live: set[str] = set()
        for name in kept:
            try:
                manifest = self._read_manifest(name)
            except SnapshotSealError:
                manifest = None
            if manifest is None:
                return  # something is off: remove nothing rather than something a snapshot needs
            live |= _containers(manifest)
        for name in self.store.list("snapshots"):
            epoch = epoch_of(name)
            if epoch is None or epoch > newest or name in live:
                continue
            if _over(name, newest) or segment_token(name) != self.token:  # another run's segment is written no more
                self.store.delete(name)

    # -- reading -----------------------------------------------------------------------------

    def _read_manifest(self, name: str) -> Manifest | None:
        data = self.store.get(name)
        if data is None:
            return None
        body = self.seal.open("manifest", data, f"recovery store {self.where}: {name}")
        if body is None:
            return None
        try:
            return Manifest.from_json(body)
        except (ValueError, KeyError, TypeError):
            return None

    def latest(self, identity: str, announce: Any = None, *, at_most: int | None = None) -> Opened | None:
        """The newest usable snapshot, its files read and verified; older ones when the newest is not usable.

        With ``at_most``, snapshots of later epochs are passed over silently (a streaming query's output was
        committed up to that epoch: a later snapshot holds input whose output nobody committed). Each snapshot
        passed over otherwise is reported as a :class:`RecoveryWarning` (and on ``announce``), naming the file at
        fault. ``None`` when there is no usable snapshot (a warning says so if there were any).
        """
        names = self.store.list("manifests")
        if at_most is not None:
            names = [n for n in names if (e := epoch_of(n)) is not None and e <= at_most]
        for name in reversed(names):
            try:
                manifest = self._read_manifest(name)
            except SnapshotSealError as exc:
                _warn(f"{exc}; using an older snapshot", announce)
                continue
            if manifest is None:
                _warn(f"recovery store {self.where}: {name} is damaged; using an older snapshot", announce)
                continue
            if manifest.identity != identity:
                _warn(f"recovery store {self.where}: {name} was taken by another job; using an older snapshot",
                      announce)
                continue
            files: dict[str, bytes] = {}
            fault = None
            for file_name, size, sha in manifest.files:
                data = self._read(file_name, size)
                if data is None:
                    fault = f"{file_name} is missing"
                elif len(data) != size:
                    fault = f"{file_name} has {len(data)} bytes, not the {size} its manifest records (truncated?)"
                elif digest(data) != sha:
                    fault = f"{file_name} does not match its checksum"
                if fault is not None or data is None:
                    break
                files[file_name] = data
            if fault is not None:
                _warn(f"recovery store {self.where}: the snapshot {name} is not usable: {fault}; using an older "
                      "snapshot", announce)
                continue
            return Opened(manifest, files)
        if names:
            _warn(f"recovery store {self.where}: no usable snapshot among {len(names)}; starting over from the "
                  "first epoch", announce)
        return None

    def _read(self, name: str, size: int) -> bytes | None:
        """The bytes of a payload file, or of a record (``size`` of them at most), or ``None`` if it is gone."""
        split = split_record(name)
        if split is None:
            return self.store.get(name)
        if self._appending is None:
            return None
        return self._appending.read_at(split[0], split[1], size)

    # -- leftovers -----------------------------------------------------------------------------

    def clean(self, latest: Manifest | None) -> list[tuple[str, set[str]]]:
        """Remove what runs that died left after ``latest``: manifests, payload folders, temporary files; the
        manifests kept, oldest first, each with the files it reads (empty when one of them does not open)."""
        limit = -1 if latest is None else latest.epoch
        kept = []
        for name in self.store.list("manifests"):
            epoch = epoch_of(name)
            if epoch is None or epoch > limit:
                self.store.delete(name)  # torn, damaged or never committed: never used
            else:
                kept.append(name)
        named = self._named_by(kept)
        live = None if named is None else set().union(*(files for _, files in named))
        for name in self.store.list("snapshots"):
            epoch = epoch_of(name)
            if epoch is None or epoch > limit or (live is not None and container(name) not in live):
                self.store.delete(name)  # written after the snapshot, or named by no manifest left
        if latest is None:
            for name in self.store.list("dataflows"):
                self.store.delete(name)
        self.store.sweep()
        return named or []

    def _named_by(self, manifests: list[str]) -> list[tuple[str, set[str]]] | None:
        """Each of ``manifests`` with the files it reads; ``None`` if one of them does not open (then nothing is
        known to be unneeded)."""
        named = []
        for name in manifests:
            try:
                manifest = self._read_manifest(name)
            except SnapshotSealError:
                return None
            if manifest is None:
                return None
            named.append((name, _containers(manifest)))
        return named

    def wipe(self) -> None:
        """Empty the store for a fresh start (``--recovery-mode fresh``); a folder with other files is refused."""
        strangers = self.strangers()
        if strangers:
            raise RecoveryMismatchError(
                f"recovery store {self.where}: not a recovery store (it holds {strangers[:3]}); --recovery-mode "
                "fresh only empties a recovery store (nothing was changed)", self.where, "identity",
            )
        for folder in ("manifests", "snapshots", "dataflows"):
            for name in self.store.list(folder):
                self.store.delete(name)
            self.store.delete(folder)
        for name in ("identity.json", "run.json"):
            self.store.delete(name)
        self.store.sweep()

def _warn(message: str, announce: Any) -> None:
    warnings.warn(message, RecoveryWarning, stacklevel=3)
    if announce is not None:
        print(f"warning: {message}", file=announce, flush=True)
