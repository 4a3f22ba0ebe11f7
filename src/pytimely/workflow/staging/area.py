"""The :class:`StagingArea` protocol every staging area keeps."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pytimely.errors import FingerprintError

__all__ = ["StagingArea", "check_fingerprint"]

@runtime_checkable
class StagingArea(Protocol):
    """Where port values live between modules, each recorded with the fingerprint it was computed for."""

    def has(self, key: str, fingerprint: str) -> bool:
        """Whether a complete value is stored under ``key`` for exactly ``fingerprint``."""
        ...

    def fingerprint(self, key: str) -> str | None:
        """The fingerprint of the complete value under ``key``, or ``None`` when there is none."""
        ...

    def put(self, key: str, value: Any, fingerprint: str) -> None:
        """Store ``value`` under ``key`` for ``fingerprint``, atomically (replacing any value there)."""
        ...

    def get(self, key: str, fingerprint: str | None = None) -> Any:
        """The value under ``key`` (checked against ``fingerprint`` when given); ``ValueMissingError`` if absent."""
        ...

    def delete(self, key: str) -> None:
        """Forget the value under ``key``, if any."""
        ...

    def keys(self, prefix: str = "") -> list[str]:
        """The sorted keys holding a committed value, at or below ``prefix`` (whole segments)."""
        ...


def check_fingerprint(fingerprint: str) -> str:
    if not isinstance(fingerprint, str) or not fingerprint:
        raise FingerprintError(f"a fingerprint is a non-empty str, got {fingerprint!r}")
    return fingerprint
