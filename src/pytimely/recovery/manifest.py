"""What a store holds besides payloads: its identity, each dataflow's state layout, and the manifests.

Every such file is JSON ``{"body": ..., "seal": ...}``. In a store with a key the seal is an HMAC-SHA256 of the
body (:func:`pytimely.signed_lines.sign`, bound to the file's purpose), so a file nobody holding the key wrote
is refused before anything it names is read, let alone unpickled. Without a key the seal is the body's SHA-256:
it tells a damaged file from a whole one, not a forged one from a true one (a store without a key is trusted
like the program's own files).

* :class:`Identity` (``identity.json``): the format version, the job's name, its run parameters (such as the
  epoch count), its inputs by name and content fingerprint, and whether (and with which key) it is sealed.
  A run whose identity differs is refused naming the first difference.
* :class:`Layout` (``dataflows/<k>.json``): every state a dataflow declares, by a stable key
  (``dataflow/operator#n/state``), its kind, layout version and bins.
* :class:`Manifest` (``manifests/<epoch>``): the commit of a snapshot. It names the payload records it reads
  (``<segment>@<offset>``, :mod:`pytimely.recovery.segments`, or a payload file of its own) with their size and
  SHA-256, and for every state where each piece lives: a bin of a keyed state, a worker's value,
  a worker's log (a list of pieces), or a source's positions (JSON, inline); and for every keyed state its chain
  of deltas, oldest first, each with the bins it stands for (restored over the bins' pieces, in order). A
  manifest is complete in itself: a bin that did not change since an earlier snapshot is named where it was
  written then.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytimely.errors import RecoveryMismatchError, SnapshotSealError
from pytimely.signed_lines import sign

__all__ = [
    "FINAL",
    "FORMAT_VERSION",
    "Identity",
    "Layout",
    "Manifest",
    "Piece",
    "Seal",
    "digest",
    "fingerprint",
]

FORMAT_VERSION = 5
"""The layout of stores, manifests and payloads; a store of another version is refused, never rewritten (5:
keyed states' deltas chained after their bins' pieces; 4: payload records appended to segments; 3: a payload
file per worker and snapshot)."""

FINAL = 1 << 62
"""The epoch of the snapshot taken once every dataflow has finished: a run resuming from it has nothing to do."""


def digest(data: bytes) -> str:
    """The hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def fingerprint(path: str | os.PathLike[str]) -> str:
    """``sha256:<hex>`` of a file's content (read in blocks), the identity of an input file."""
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            h.update(block)
    return f"sha256:{h.hexdigest()}"


class Seal:
    """Seals and opens the store's JSON files: an HMAC with ``key``, or a checksum without one."""

    def __init__(self, key: bytes | None) -> None:
        self.key = key

    @property
    def key_id(self) -> str:
        """A fingerprint of the key that does not reveal it ("" without a key)."""
        if self.key is None:
            return ""
        return hmac.new(self.key, b"pytimely-recovery-key-id", hashlib.sha256).hexdigest()[:16]

    def wrap(self, purpose: str, body: dict[str, Any]) -> bytes:
        """``body`` with its seal, as bytes."""
        if self.key is not None:
            seal = "hmac:" + sign(self.key, f"recovery-{purpose}", body)
        else:
            seal = "sha256:" + digest(_canonical(body))
        return json.dumps({"body": body, "seal": seal}, sort_keys=True, separators=(",", ":")).encode()

    def open(self, purpose: str, data: bytes, where: str) -> dict[str, Any] | None:
        """The body of a sealed file; ``None`` when it is damaged (not JSON, checksum wrong).

        Raises :class:`SnapshotSealError` when the file is whole but not sealed by this store's key (or is
        sealed and this run has no key): forged, or another key's.
        """
        try:
            outer = json.loads(data)
            body = outer["body"]
            seal = outer["seal"]
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(body, dict) or not isinstance(seal, str):
            return None
        kind, _, value = seal.partition(":")
        if kind == "sha256":
            if not hmac.compare_digest(value, digest(_canonical(body))):
                return None
            if self.key is not None:
                raise SnapshotSealError(
                    f"{where} is not sealed (a store written without a key): this run has a key and refuses it; "
                    "start over with --recovery-mode fresh or use a new folder", where,
                )
            return body
        if kind == "hmac":
            if self.key is None:
                raise SnapshotSealError(
                    f"{where} is sealed with a key and this run has none: give the store's key "
                    "(--recovery-key-file, Recovery(key=...))", where,
                )
            if not hmac.compare_digest(value, sign(self.key, f"recovery-{purpose}", body)):
                raise SnapshotSealError(
                    f"{where} is not sealed by this store's key (forged, altered, or written with another key); "
                    "nothing it names was read", where,
                )
            return body
        return None


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _json(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples become lists), so values compare as they were stored."""
    return json.loads(json.dumps(value, sort_keys=True))


@dataclass(frozen=True, slots=True)
class Identity:
    """What the output of a job depends on besides its code: name, run parameters, inputs; and the store's key."""

    job: str
    parameters: dict[str, Any] = field(default_factory=dict)
    """Run parameters such as the number of epochs (JSON values)."""
    inputs: dict[str, str] = field(default_factory=dict)
    """Input name -> content fingerprint (:func:`fingerprint`) or a source's own identity string."""
    key_id: str = ""
    """:attr:`Seal.key_id` of the key the store is sealed with ("" when it is not sealed)."""
    format: int = FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "format": self.format,
            "job": self.job,
            "parameters": _json(self.parameters),
            "inputs": dict(self.inputs),
            "key_id": self.key_id,
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> Identity:
        """The identity written by :meth:`to_json`."""
        return Identity(
            job=str(data.get("job", "")),
            parameters=dict(data.get("parameters", {})),
            inputs={str(k): str(v) for k, v in dict(data.get("inputs", {})).items()},
            key_id=str(data.get("key_id", "")),
            format=int(data.get("format", -1)),
        )

    def check_against(self, stored: Identity, where: str) -> None:
        """Raise :class:`RecoveryMismatchError` naming the first thing ``stored`` (the store's) differs in."""
        unchanged = "(nothing was changed; --recovery-mode fresh starts over)"
        if stored.format != self.format:
            raise RecoveryMismatchError(
                f"recovery store {where}: written by format version {stored.format}, this is version {self.format} "
                f"{unchanged}", where, "format",
            )
        if stored.job != self.job:
            raise RecoveryMismatchError(
                f"recovery store {where}: belongs to job {stored.job!r}, not {self.job!r} {unchanged}", where, "job"
            )
        mine = _json(self.parameters)
        for name in sorted(set(stored.parameters) | set(mine)):
            before, now = stored.parameters.get(name), mine.get(name)
            if before != now:
                raise RecoveryMismatchError(
                    f"recovery store {where}: written with {name} = {_show(before)}, this run has {name} = "
                    f"{_show(now)}: its snapshots would give another output {unchanged}", where, f"parameter {name}",
                )
        for name in sorted(set(stored.inputs) | set(self.inputs)):
            before, now = stored.inputs.get(name), self.inputs.get(name)
            if before != now:
                what = (
                    f"this run has no input {name!r}" if now is None
                    else f"the store has no input {name!r}" if before is None
                    else f"input {name!r} differs in content ({before[:19]}... in the store, {now[:19]}... now)"
                )
                raise RecoveryMismatchError(
                    f"recovery store {where}: {what}: resuming would give wrong output {unchanged}", where,
                    f"input {name}",
                )


def _show(value: Any) -> str:
    return "nothing" if value is None else json.dumps(value)


@dataclass(frozen=True, slots=True)
class Layout:
    """The states a dataflow declares: ``key -> (kind, layout version, bins)``."""

    states: dict[str, tuple[str, str, int]]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"states": {k: list(v) for k, v in sorted(self.states.items())}}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Layout:
        """The layout written by :meth:`to_json`."""
        return Layout({str(k): (str(v[0]), str(v[1]), int(v[2])) for k, v in dict(data.get("states", {})).items()})

    def check_against(self, stored: Layout, where: str, dataflow: str) -> None:
        """Raise :class:`RecoveryMismatchError` naming the first state ``stored`` differs in."""
        unchanged = "(nothing was changed; --recovery-mode fresh starts over)"
        for key in sorted(set(stored.states) | set(self.states)):
            before, now = stored.states.get(key), self.states.get(key)
            if before == now:
                continue
            if before is None:
                what = f"this job's state {key!r} is not in the store (an operator added or renamed)"
            elif now is None:
                what = f"the store holds state {key!r} that this job does not declare (an operator removed or renamed)"
            else:
                what = (
                    f"state {key!r} was written as {before[0]} state, layout {before[1]!r}, {before[2]} bins; this job "
                    f"declares {now[0]} state, layout {now[1]!r}, {now[2]} bins"
                )
            raise RecoveryMismatchError(
                f"recovery store {where}: dataflow {dataflow!r}: {what} {unchanged}", where, f"state {key}"
            )


Piece = tuple[int, int, int]
"""Where a piece of state lives: ``(file index in the manifest, offset, length)``."""


@dataclass(slots=True)
class Manifest:
    """A committed snapshot (see the module doc)."""

    epoch: int
    """The epoch the snapshot holds (every record at a time ``<= epoch``; :data:`FINAL` once all finished)."""
    identity: str
    """SHA-256 of the job's identity JSON."""
    peers: int
    files: list[tuple[str, int, str]] = field(default_factory=list)
    """Payload files: ``(name, size, sha256)``."""
    binned: dict[str, dict[int, Piece]] = field(default_factory=dict)
    worker: dict[str, dict[int, Piece]] = field(default_factory=dict)
    logs: dict[str, dict[int, list[Piece]]] = field(default_factory=dict)
    positions: dict[str, dict[int, Any]] = field(default_factory=dict)
    deltas: dict[str, list[tuple[Piece, int]]] = field(default_factory=dict)
    """Per keyed state: its deltas, oldest first, each with the bins it stands for (bit ``b`` for bin ``b``; in
    JSON as a hexadecimal string)."""

    @property
    def complete(self) -> bool:
        """Whether every dataflow had finished: a run resuming from it has nothing left to compute."""
        return self.epoch == FINAL

    @property
    def resume_epoch(self) -> int:
        """The first epoch a run resuming from this snapshot computes."""
        return FINAL if self.complete else self.epoch + 1

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (bins and workers as strings, as JSON wants)."""
        return {
            "epoch": self.epoch,
            "identity": self.identity,
            "peers": self.peers,
            "files": [list(f) for f in self.files],
            "binned": {k: _grouped(v) for k, v in self.binned.items()},
            "worker": {k: {str(w): list(p) for w, p in v.items()} for k, v in self.worker.items()},
            "logs": {k: {str(w): [list(p) for p in ps] for w, ps in v.items()} for k, v in self.logs.items()},
            "positions": {k: {str(p): v2 for p, v2 in v.items()} for k, v in self.positions.items()},
            "deltas": {k: [[*p, format(mask, "x")] for p, mask in v] for k, v in self.deltas.items()},
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> Manifest:
        """The manifest written by :meth:`to_json` (raises ``ValueError``/``KeyError``/``TypeError`` if malformed)."""

        def piece(p: Any) -> Piece:
            return (int(p[0]), int(p[1]), int(p[2]))

        return Manifest(
            epoch=int(data["epoch"]),
            identity=str(data["identity"]),
            peers=int(data["peers"]),
            files=[(str(n), int(s), str(h)) for n, s, h in data["files"]],
            binned={str(k): _ungrouped(v) for k, v in data["binned"].items()},
            worker={str(k): {int(w): piece(p) for w, p in v.items()} for k, v in data["worker"].items()},
            logs={str(k): {int(w): [piece(p) for p in ps] for w, ps in v.items()} for k, v in data["logs"].items()},
            positions={str(k): {int(p): v2 for p, v2 in v.items()} for k, v in data["positions"].items()},
            deltas={
                str(k): [((int(f), int(off), int(n)), int(str(mask), 16)) for f, off, n, mask in v]
                for k, v in data["deltas"].items()
            },
        )

    def file_names(self) -> set[str]:
        """Every payload file the manifest reads."""
        return {name for name, _, _ in self.files}


def _grouped(bins: dict[int, Piece]) -> list[list[Any]]:
    """``bin -> piece`` as ``[[file, offset, length, [bins...]], ...]``: a piece holding many bins is named once."""
    by_piece: dict[Piece, list[int]] = {}
    for b, p in bins.items():
        by_piece.setdefault(p, []).append(b)
    return [[*p, sorted(bs)] for p, bs in sorted(by_piece.items())]


def _ungrouped(groups: list[Any]) -> dict[int, Piece]:
    out: dict[int, Piece] = {}
    for f, off, length, bins in groups:
        piece = (int(f), int(off), int(length))
        for b in bins:
            out[int(b)] = piece
    return out


def epoch_name(epoch: int) -> str:
    """An epoch in file names: 20 digits, so names sort like epochs (:data:`FINAL` included)."""
    return f"{epoch:020d}"


def epoch_of(name: str) -> int | None:
    """The epoch a file or folder name starts with, if any."""
    head = Path(name).name.split("-", 1)[0]
    return int(head) if head.isdigit() else None
