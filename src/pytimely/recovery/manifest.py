"""What a committed snapshot is: a manifest naming every payload (with its checksum) and the job it belongs to.

A manifest is JSON ``{"body": {...}, "sha256": ...}``: the checksum covers the body, so a manifest that was
damaged after its commit is refused like a missing one. The body names the job's :class:`Identity`, the
epoch, and every payload and output part with its SHA-256 and size; a snapshot counts only when its manifest
is there, reads back whole and every file it names matches its checksum.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from pytimely.errors import RecoveryMismatchError

__all__ = ["FORMAT_VERSION", "FileRef", "Identity", "Manifest", "digest"]

FORMAT_VERSION = 1
"""The layout of stores, manifests and payloads; a store of another version is refused, never rewritten."""


def digest(data: bytes) -> str:
    """The hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class Identity:
    """Which job a store belongs to: the format version, the job's name, its dataflows' operators and its states."""

    job: str
    dataflows: tuple[tuple[str, tuple[tuple[int, str], ...]], ...]
    """Per dataflow: its name and its operators as ``(id, name)``."""
    states: tuple[str, ...]
    bins: int
    format: int = FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "format": self.format,
            "job": self.job,
            "bins": self.bins,
            "states": list(self.states),
            "dataflows": [[name, [list(op) for op in ops]] for name, ops in self.dataflows],
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> Identity:
        """The identity written by :meth:`to_json`."""
        return Identity(
            job=str(data.get("job", "")),
            dataflows=tuple(
                (str(name), tuple((int(i), str(n)) for i, n in ops)) for name, ops in data.get("dataflows", [])
            ),
            states=tuple(data.get("states", [])),
            bins=int(data.get("bins", 0)),
            format=int(data.get("format", -1)),
        )

    def check_against(self, stored: Identity, where: str) -> None:
        """Raise :class:`RecoveryMismatchError` naming the first thing ``stored`` (the store's) differs in."""
        if stored.format != self.format:
            raise RecoveryMismatchError(
                f"recovery store {where}: written by format version {stored.format}, this is version {self.format}; "
                f"use a new folder (nothing was changed)", where, "format"
            )
        if stored.job != self.job:
            raise RecoveryMismatchError(
                f"recovery store {where}: belongs to job {stored.job!r}, not {self.job!r} (nothing was changed)",
                where, "job",
            )
        if len(stored.dataflows) != len(self.dataflows):
            raise RecoveryMismatchError(
                f"recovery store {where}: its job built {len(stored.dataflows)} dataflow(s), this one "
                f"{len(self.dataflows)} (nothing was changed)", where, "dataflows",
            )
        for k, ((name_a, ops_a), (name_b, ops_b)) in enumerate(zip(stored.dataflows, self.dataflows, strict=True)):
            if name_a != name_b or ops_a != ops_b:
                extra = sorted(set(ops_b) - set(ops_a))[:3]
                missing = sorted(set(ops_a) - set(ops_b))[:3]
                raise RecoveryMismatchError(
                    f"recovery store {where}: dataflow {k} differs: the store's {name_a!r} has operators "
                    f"{_names(missing)} this job lacks, this job's {name_b!r} has {_names(extra)} the store's "
                    f"lacks (nothing was changed)", where, f"dataflow {k}",
                )
        if stored.states != self.states:
            raise RecoveryMismatchError(
                f"recovery store {where}: holds the states {list(stored.states)}, this job declares "
                f"{list(self.states)} (nothing was changed)", where, "states",
            )
        if stored.bins != self.bins:
            raise RecoveryMismatchError(
                f"recovery store {where}: keyed state in {stored.bins} bins, this job uses {self.bins} "
                f"(nothing was changed)", where, "bins",
            )


def _names(ops: list[tuple[int, str]]) -> str:
    return ", ".join(f"{name!r} (id {i})" for i, name in ops) or "none"


@dataclass(frozen=True, slots=True)
class FileRef:
    """A payload or output part a manifest names: its blob name, SHA-256, size, worker and bins."""

    name: str
    sha256: str
    size: int
    worker: int = -1
    bins: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Manifest:
    """A committed snapshot of epoch ``epoch``: every worker's payload and output part, the job's identity."""

    epoch: int
    identity: str
    """SHA-256 of the job's :class:`Identity` JSON."""
    peers: int
    payloads: tuple[FileRef, ...] = ()
    outputs: tuple[FileRef, ...] = ()
    positions: dict[str, Any] = field(default_factory=dict)
    """Per worker (as a string), where its inputs stood after ``epoch``: what it handed to ``commit``."""

    def dumps(self) -> bytes:
        """The manifest as checksummed JSON."""
        body = asdict(self)
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return json.dumps({"body": body, "sha256": digest(text.encode())}, sort_keys=True).encode()

    @staticmethod
    def loads(data: bytes) -> Manifest | None:
        """The manifest in ``data``, or ``None`` when it is not one whole (unreadable or its checksum fails)."""
        try:
            outer = json.loads(data)
            body = outer["body"]
            text = json.dumps(body, sort_keys=True, separators=(",", ":"))
            if digest(text.encode()) != outer["sha256"]:
                return None
            return Manifest(
                epoch=int(body["epoch"]),
                identity=str(body["identity"]),
                peers=int(body["peers"]),
                payloads=tuple(_ref(r) for r in body["payloads"]),
                outputs=tuple(_ref(r) for r in body["outputs"]),
                positions=dict(body.get("positions", {})),
            )
        except (ValueError, KeyError, TypeError):
            return None


def _ref(data: dict[str, Any]) -> FileRef:
    return FileRef(str(data["name"]), str(data["sha256"]), int(data["size"]), int(data["worker"]),
                   tuple(int(b) for b in data["bins"]))
