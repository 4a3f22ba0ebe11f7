"""Staging keys: ``/``-separated segments of letters, digits and ``_ . = -``, none starting with ``.``."""

from __future__ import annotations

import re

from pytimely.errors import StagingKeyError

__all__ = ["check_key", "check_prefix", "is_key", "under"]

_SEGMENT = re.compile(r"[A-Za-z0-9_=-][A-Za-z0-9_.=-]*")


def check_key(key: str) -> str:
    """Return ``key`` if it is a valid staging key, else raise :class:`StagingKeyError` saying why."""
    if not isinstance(key, str):
        raise StagingKeyError(f"a staging key is a str, got {type(key).__name__}: {key!r}", repr(key))
    if not key:
        raise StagingKeyError("a staging key cannot be empty", key)
    for segment in key.split("/"):
        if not _SEGMENT.fullmatch(segment):
            raise StagingKeyError(
                f"staging key {key!r} has a bad segment {segment!r}: segments are non-empty, made of letters, "
                "digits and '_ . = -', and do not start with '.'",
                key,
            )
    return key


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` (``""`` or a valid key, a trailing ``/`` dropped) or raise :class:`StagingKeyError`."""
    prefix = prefix.rstrip("/") if isinstance(prefix, str) else prefix
    return "" if prefix == "" else check_key(prefix)


def under(key: str, prefix: str) -> bool:
    """Whether ``key`` is ``prefix`` or below it, by whole segments (``a/bc`` is not under ``a/b``)."""
    return prefix == "" or key == prefix or key.startswith(prefix + "/")


def is_key(key: str) -> bool:
    try:
        check_key(key)
    except StagingKeyError:
        return False
    return True
