"""Files a simple module writes: declared, returned, and the ones it was seen opening for writing.

A module's files are part of what it computes, so they count like its values:

* **declared**: ``@simple(writes="out/summary.csv")`` (one path or several, relative to the folder the run
  started in; ``{name}`` placeholders are filled from the module's parameters). After the module runs, each must
  exist (:class:`~pytimely.errors.ModuleOutputError` otherwise); their contents are part of the content of the
  module's out-ports, and before the module's staged values are reused the files must still hold what it wrote
  (a file edited or deleted by hand makes the module and what depends on it run again);
* **returned**: a :class:`os.PathLike` value (a :class:`pathlib.Path`) in an out-port, at the top or inside
  lists, tuples, dicts and sets: the content of the file or directory it names is part of the value's content,
  so a reader is never cut off while the file it reads changed. When the out-port is typed as a path (``->
  Path``, ``list[Path]``), the files are also checked before reuse, like declared ones (an untyped port's are
  not: its values are not known before they are read).

While the module's function runs, the files it opens for writing (``open``, ``os.open``, ``os.replace`` and
``os.rename`` targets, links) are watched through a Python audit hook on the thread running it (in this process
or a worker process); a file opened only for appending (mode ``"a"``: a log) is not taken for an output. A file
written and still there afterwards that is neither declared nor returned fails the module with
:class:`~pytimely.errors.UndeclaredWriteError` naming the module and the file: an undeclared file would be left
stale by every later run that reuses the module's values. Not counted: files made by
:mod:`tempfile` (and anything under a folder it made), files under a folder whose name starts with ``.`` or is
``__pycache__`` (caches, bytecode), and files below the interpreter's prefix and site-packages. Writes from C
code, from threads the function starts and from child processes are not seen.
"""

from __future__ import annotations

import contextlib
import os
import string
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["WRITTEN", "declared_paths", "paths_in", "placeholders", "unaccounted", "watching"]

WRITTEN = "\0written"
"""The key, in an executor's outputs, of the files the module was seen writing (never a port name)."""

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC
_local = threading.local()
_installed = False
_install_lock = threading.Lock()


class _Seen:
    """What one call was seen writing, and the temporary files and folders it made."""

    __slots__ = ("temporary", "written")

    def __init__(self) -> None:
        self.written: set[str] = set()
        self.temporary: set[str] = set()


def _absolute(path: Any) -> str | None:
    if isinstance(path, int):
        return None  # a file descriptor, or a dir_fd-relative open: its name is not known here
    try:
        text = os.fsdecode(path)
    except TypeError:
        return None
    return os.path.abspath(text)


def _hook(event: str, args: tuple[Any, ...]) -> None:
    # Called for every audit event of every thread: the common case must cost one dict lookup.
    seen: _Seen | None = _local.__dict__.get("seen")
    if seen is None:
        return
    if event == "open":
        path, mode, flags = args
        # Appending (a log) is not making an output; creating, truncating or updating a file is.
        if isinstance(mode, str):
            writes = any(c in mode for c in "wx") or ("+" in mode and "a" not in mode)
        else:
            writes = isinstance(flags, int) and bool(flags & _WRITE_FLAGS) and not flags & os.O_APPEND
        if writes and (name := _absolute(path)) is not None:
            seen.written.add(name)
    elif event in ("os.rename", "os.link", "os.symlink"):
        name = _absolute(args[1])
        if name is not None:
            seen.written.add(name)
    elif event in ("tempfile.mkstemp", "tempfile.mkdtemp"):
        name = _absolute(args[0])
        if name is not None:
            seen.temporary.add(name)


def _install() -> None:
    global _installed
    with _install_lock:
        if not _installed:
            sys.addaudithook(_hook)  # cannot be removed; it does nothing outside a watched call
            _installed = True


@contextlib.contextmanager
def watching() -> Iterator[list[str]]:
    """Watch the files this thread opens for writing until the block ends; the list then holds those that exist
    (a temporary file written and renamed away is not one), minus what :mod:`tempfile` made."""
    _install()
    previous = _local.__dict__.get("seen")
    seen = _local.seen = _Seen()
    found: list[str] = []
    try:
        yield found
    finally:
        _local.seen = previous
        temporary = tuple(os.path.join(t, "") for t in seen.temporary)
        for name in sorted(seen.written):
            if name in seen.temporary or name.startswith(temporary) or not os.path.isfile(name):
                continue
            found.append(name)


def _library_roots() -> tuple[str, ...]:
    from pytimely.workflow.fingerprint import library_roots

    return library_roots()


def unaccounted(written: Iterable[str], accounted: Iterable[str]) -> list[str]:
    """The files in ``written`` that are neither in nor below ``accounted`` nor exempt (caches, libraries)."""
    allowed = [os.path.realpath(p) for p in accounted]
    allowed_dirs = tuple(os.path.join(p, "") for p in allowed)
    roots = _library_roots()
    left = []
    for name in written:
        real = os.path.realpath(name)
        if real in allowed or real.startswith(allowed_dirs) or real.startswith(roots):
            continue
        parts = Path(real).parent.parts
        if any(part.startswith(".") or part == "__pycache__" for part in parts):
            continue
        left.append(name)
    return left


def declared_paths(patterns: Iterable[str], params: Mapping[str, Any], base: str | os.PathLike[str]) -> list[str]:
    """A module's declared files: each pattern with ``{name}`` filled from ``params``, resolved against ``base``."""
    return [os.path.abspath(os.path.join(os.fspath(base), pattern.format_map(dict(params)))) for pattern in patterns]


def placeholders(pattern: str) -> set[str]:
    """The ``{name}`` fields of a ``writes`` pattern."""
    return {field for _, field, _, _ in string.Formatter().parse(pattern) if field is not None}


def paths_in(value: Any, depth: int = 0) -> list[str]:
    """The :class:`os.PathLike` values in ``value``: itself, or inside lists, tuples, dicts and sets, as text."""
    if isinstance(value, os.PathLike):
        return [os.fsdecode(value)]
    if depth > 8:
        return []
    if type(value) in (list, tuple, set, frozenset):
        return [p for v in value for p in paths_in(v, depth + 1)]
    if type(value) is dict:
        return [p for v in value.values() for p in paths_in(v, depth + 1)]
    return []
