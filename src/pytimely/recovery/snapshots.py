"""Snapshots in a store: payloads first, a manifest naming each with its checksum last; retention; torn leftovers.

Layout of a store (every name a blob of a :class:`~pytimely.recovery.store.SnapshotStore`)::

    identity.json                      the job (Identity JSON), written once by worker 0
    epochs/<epoch>/<worker>-<token>    a worker's payload: its bins' keyed states as of the epoch
    outputs/<epoch>-<worker>-<token>   a worker's output part: its output since the previous snapshot
    manifests/<epoch>                  the commit: names every payload and output part with its SHA-256

A snapshot of epoch ``e`` exists only once ``manifests/e`` does and every file it names matches its checksum
(:meth:`Snapshots.latest` checks). An output part of an epoch ``<=`` the latest complete snapshot is
committed; later ones belong to a run that died before its commit and are removed by :meth:`Snapshots.clean`
before a resumed run writes anything. Names carry a random token, so a resumed run never writes over a file
a committed manifest names.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

from pytimely.errors import RecoveryMismatchError, SnapshotCorruptError
from pytimely.recovery.manifest import FileRef, Identity, Manifest, digest
from pytimely.recovery.store import SnapshotStore

__all__ = ["Snapshots"]

_WIDTH = 12
"""Digits of an epoch in names, so names sort like epochs."""


def _epoch_name(epoch: int) -> str:
    return f"{epoch:0{_WIDTH}d}"


def _epoch_of(name: str) -> int | None:
    head = name.rsplit("/", 1)[-1].split("-", 1)[0]
    return int(head) if head.isdigit() else None


@dataclass(slots=True)
class Snapshots:
    """The snapshots of one job in ``store``."""

    store: SnapshotStore

    # -- identity -------------------------------------------------------------------------

    def check_identity(self, identity: Identity, *, write: bool) -> None:
        """Refuse a store of another job or version (:class:`RecoveryMismatchError`); ``write`` it if it has none.

        A store without an identity but with snapshots, or with files it does not know, is refused too.
        """
        where = self.store.location
        data = self.store.get("identity.json")
        if data is None:
            strangers = [n for n in self.store.list("") if n not in ("epochs", "outputs", "manifests")]
            if strangers or self.store.list("manifests"):
                raise RecoveryMismatchError(
                    f"recovery store {where}: not a recovery store of this job (it holds {strangers[:3] or 'snapshots'}"
                    f" but no identity.json); use an empty or new folder (nothing was changed)", where, "identity",
                )
            if write:
                self.store.put("identity.json", json.dumps(identity.to_json(), sort_keys=True).encode())
            return
        try:
            stored = Identity.from_json(json.loads(data))
        except (ValueError, TypeError, AttributeError):
            raise RecoveryMismatchError(
                f"recovery store {where}: identity.json is unreadable (nothing was changed)", where, "identity"
            ) from None
        identity.check_against(stored, where)

    # -- writing ---------------------------------------------------------------------------

    def put_payload(self, epoch: int, worker: int, data: bytes, bins: tuple[int, ...]) -> FileRef:
        """Write a worker's payload of ``epoch``; the reference its manifest will hold."""
        name = f"epochs/{_epoch_name(epoch)}/{worker:05d}-{secrets.token_hex(6)}"
        self.store.put(name, data)
        return FileRef(name, digest(data), len(data), worker, bins)

    def put_output(self, epoch: int, worker: int, data: bytes) -> FileRef:
        """Write a worker's output part, committed with the snapshot of ``epoch``."""
        name = f"outputs/{_epoch_name(epoch)}-{worker:05d}-{secrets.token_hex(6)}"
        self.store.put(name, data)
        return FileRef(name, digest(data), len(data), worker)

    def commit(self, manifest: Manifest, keep: int) -> None:
        """Commit ``manifest`` (its payloads must all be written) and remove snapshots beyond the last ``keep``."""
        self.store.put(f"manifests/{_epoch_name(manifest.epoch)}", manifest.dumps())
        self.prune(keep)

    def prune(self, keep: int) -> None:
        """Remove manifests but the newest ``keep``, then the payload folders no kept manifest names."""
        manifests = self.store.list("manifests")
        for name in manifests[: max(0, len(manifests) - keep)]:
            self.store.delete(name)
        kept = {_epoch_of(n) for n in manifests[-keep:]}
        oldest = min((e for e in kept if e is not None), default=None)
        for folder in self.store.list("epochs"):
            epoch = _epoch_of(folder)
            # Only folders older than every kept snapshot: newer ones may be a snapshot being written now.
            if epoch is not None and oldest is not None and epoch < oldest:
                self._remove_folder(folder)

    def _remove_folder(self, folder: str) -> None:
        for name in self.store.list(folder):
            self.store.delete(name)
        self.store.delete(folder)

    # -- reading ---------------------------------------------------------------------------

    def latest(self) -> Manifest | None:
        """The newest complete snapshot's manifest: readable, and every file it names there with its checksum."""
        for name in reversed(self.store.list("manifests")):
            data = self.store.get(name)
            manifest = None if data is None else Manifest.loads(data)
            if manifest is not None and all(self._matches(ref) for ref in (*manifest.payloads, *manifest.outputs)):
                return manifest
        return None

    def _matches(self, ref: FileRef) -> bool:
        data = self.store.get(ref.name)
        return data is not None and len(data) == ref.size and digest(data) == ref.sha256

    def read(self, ref: FileRef) -> bytes:
        """The bytes of a file a manifest names; :class:`SnapshotCorruptError` if missing or not matching."""
        data = self.store.get(ref.name)
        if data is None or len(data) != ref.size or digest(data) != ref.sha256:
            state = "missing" if data is None else "does not match its checksum"
            raise SnapshotCorruptError(f"recovery store {self.store.location}: {ref.name} {state}", ref.name)
        return data

    def committed_outputs(self, upto: int | None) -> list[str]:
        """Names of the output parts committed by the snapshot of ``upto`` or an earlier one, in epoch order."""
        if upto is None:
            return []
        return [n for n in self.store.list("outputs") if (e := _epoch_of(n)) is not None and e <= upto]

    def clean(self, latest: int | None) -> None:
        """Remove what runs that died left after the snapshot ``latest``: payloads, output parts, manifests."""
        limit = -1 if latest is None else latest
        for name in self.store.list("manifests"):
            epoch = _epoch_of(name)
            if epoch is not None and epoch > limit:
                self.store.delete(name)  # a torn or corrupt snapshot: never used
        for folder in self.store.list("epochs"):
            epoch = _epoch_of(folder)
            if epoch is not None and epoch > limit:
                self._remove_folder(folder)
        for name in self.store.list("outputs"):
            epoch = _epoch_of(name)
            if epoch is not None and epoch > limit:
                self.store.delete(name)
