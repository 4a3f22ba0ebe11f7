"""A staging area in this process's memory."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from pytimely.errors import ValueMissingError
from pytimely.workflow.staging.area import check_fingerprint
from pytimely.workflow.staging.codec import format_of
from pytimely.workflow.staging.keys import check_key, check_prefix, under

__all__ = ["MemoryStaging"]

@dataclass(frozen=True, slots=True)
class _Entry:
    fingerprint: str
    format: str
    value: Any


class MemoryStaging:
    """A staging area in this process's memory: values are kept as the objects they are (not copied).

    Modules must therefore not mutate the values they receive or return after returning them. Spark
    DataFrames are kept as DataFrames (their plan, not their rows).
    """

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MemoryStaging({len(self._entries)} values)"

    def has(self, key: str, fingerprint: str) -> bool:
        """Whether a value is stored under ``key`` for exactly ``fingerprint``."""
        return self.fingerprint(key) == fingerprint

    def fingerprint(self, key: str) -> str | None:
        """The fingerprint of the value under ``key``, or ``None``."""
        entry = self._entries.get(check_key(key))
        return None if entry is None else entry.fingerprint

    def put(self, key: str, value: Any, fingerprint: str) -> None:
        """Keep ``value`` under ``key`` for ``fingerprint`` (one dictionary assignment: atomic)."""
        entry = _Entry(check_fingerprint(fingerprint), format_of(value), value)
        with self._lock:
            self._entries[check_key(key)] = entry

    def retag(self, key: str, old: str, new: str) -> bool:
        """Record the value under ``key`` for fingerprint ``new`` if it is there for ``old``."""
        check_fingerprint(new)
        with self._lock:
            entry = self._entries.get(check_key(key))
            if entry is None or entry.fingerprint != old:
                return False
            self._entries[key] = _Entry(new, entry.format, entry.value)
        return True

    def get(self, key: str, fingerprint: str | None = None) -> Any:
        """The value under ``key``; ``ValueMissingError`` when absent or stored for another fingerprint."""
        entry = self._entries.get(check_key(key))
        if entry is None:
            raise ValueMissingError(f"no value staged under {key!r}", key)
        if fingerprint is not None and entry.fingerprint != fingerprint:
            raise ValueMissingError(
                f"the value staged under {key!r} has fingerprint {entry.fingerprint}, not {fingerprint} (stale)", key
            )
        return entry.value

    def delete(self, key: str) -> None:
        """Forget the value under ``key``, if any."""
        with self._lock:
            self._entries.pop(check_key(key), None)

    def keys(self, prefix: str = "") -> list[str]:
        """The sorted keys at or below ``prefix``."""
        prefix = check_prefix(prefix)
        with self._lock:
            return sorted(k for k in self._entries if under(k, prefix))
