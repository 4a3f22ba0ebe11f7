"""Fixtures for the workflow tests: one empty staging area of each kind per test, S3 on a local moto server."""

from __future__ import annotations

import importlib
import itertools
import linecache
import os
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytimely.workflow.staging import FsspecStaging, LocalStaging, MemoryStaging, StagingArea
from tests.conftest import S3Server

AREAS = ["memory", "local", "fsspec-local", "s3"]
PERSISTENT = ["local", "fsspec-local", "s3"]


_prefixes = itertools.count()


def make_area(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> StagingArea:
    """A fresh, empty staging area of ``kind`` (on S3: a prefix of its own in the session's bucket)."""
    if kind == "memory":
        return MemoryStaging()
    if kind == "local":
        return LocalStaging(tmp_path / "area")
    if kind == "fsspec-local":
        return FsspecStaging(f"file://{tmp_path}/area")
    if kind == "s3":
        s3: S3Server = request.getfixturevalue("s3_server")
        return FsspecStaging(f"s3://{s3.bucket}/test-{next(_prefixes)}", **s3.shared_options())
    raise AssertionError(kind)


@pytest.fixture(params=AREAS)
def staging(request: pytest.FixtureRequest, tmp_path: Path) -> StagingArea:
    """A fresh, empty staging area of each kind."""
    return make_area(request.param, tmp_path, request)


@pytest.fixture(params=PERSISTENT)
def persistent(request: pytest.FixtureRequest, tmp_path: Path) -> StagingArea:
    """A fresh, empty staging area of each kind that writes files."""
    return make_area(request.param, tmp_path, request)


@pytest.fixture
def user_module(tmp_path: Path) -> Iterator[Any]:
    """Write, import and re-import a module of the user's own under one name."""
    sys.path.insert(0, str(tmp_path))
    names: list[str] = []

    def load(name: str, source: str) -> Any:
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        past = time.time() - 100 - len(names)  # a new mtime each time, so linecache and bytecode notice
        os.utime(path, (past, past))
        sys.modules.pop(name, None)
        linecache.checkcache()
        names.append(name)
        return importlib.import_module(name)

    yield load
    sys.path.remove(str(tmp_path))
    for name in names:
        sys.modules.pop(name, None)
