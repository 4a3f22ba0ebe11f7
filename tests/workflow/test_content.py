"""Inputs counted by content, and code counted with what it reads: exactly the right modules rerun."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from pytimely.errors import WorkflowInputError
from pytimely.workflow import composite, simple
from pytimely.workflow.content import FingerprintCache, content_fingerprint
from pytimely.workflow.fingerprint import code_fingerprint
from pytimely.workflow.runner import run
from pytimely.workflow.runtime import Trace
from pytimely.workflow.staging import LocalStaging


@simple
def load(csv: str) -> str:
    with open(csv, encoding="utf-8") as f:
        return f.read()


@simple
def count(text: str) -> int:
    return len(text.split())


@simple
def scale(n: int) -> int:
    return 10 * n


class Result(NamedTuple):
    words: int
    scaled: int


@composite
def workflow(csv: str, n: int) -> Result:
    return Result(count(load(csv)), scale(n))


def _old(path: Path) -> None:
    """Date the file back, so that its fingerprint may be cached (a fresh mtime is racy)."""
    past = time.time() - 3600
    os.utime(path, (past, past))


def ran(folder: Path, staging: LocalStaging, cache: FingerprintCache | None = None) -> list[str]:
    trace = Trace()
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        run(workflow, {"csv": "edges.csv", "n": 2}, staging=staging, trace=trace, fingerprint_cache=cache)
    finally:
        os.chdir(cwd)
    return sorted(trace.ran)


def test_edit_touch_and_move_rerun_exactly_what_reads_the_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "edges.csv").write_text("1 2\n2 3\n", encoding="utf-8")
    staging = LocalStaging(tmp_path / "stage")
    assert ran(a, staging) == ["workflow/count", "workflow/load", "workflow/scale"]
    assert ran(a, staging) == []
    # Edited in place, same size: only what reads it reruns.
    (a / "edges.csv").write_text("1 2\n2 4\n", encoding="utf-8")
    assert ran(a, staging) == ["workflow/count", "workflow/load"]
    # Touched without a change: nothing.
    os.utime(a / "edges.csv", (time.time() + 5, time.time() + 5))
    assert ran(a, staging) == []
    # Another folder holding the same content reuses what was computed from it ...
    (b / "edges.csv").write_text("1 2\n2 4\n", encoding="utf-8")
    assert ran(b, staging) == []
    # ... and the same relative path naming other content reruns what reads it.
    (b / "edges.csv").write_text("7 8\n", encoding="utf-8")
    assert ran(b, staging) == ["workflow/count", "workflow/load"]


def test_unchanged_files_are_not_read_again(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    for name in ("x.bin", "sub/y.bin"):
        (data / name).write_bytes(os.urandom(1000))
        _old(data / name)
    cache = FingerprintCache(tmp_path / "cache.json")
    first = content_fingerprint(data, cache)
    assert cache.hashed == 2
    cache.save()
    again = FingerprintCache(tmp_path / "cache.json")
    assert content_fingerprint(data, again) == first
    assert again.hashed == 0
    # A change that keeps the size but moves the mtime is read again and seen.
    (data / "sub/y.bin").write_bytes(os.urandom(1000))
    changed = content_fingerprint(data, again)
    assert changed != first and again.hashed == 1
    # Renaming a file inside the directory changes it too.
    (data / "x.bin").rename(data / "z.bin")
    assert content_fingerprint(data, again) not in (first, changed)


def test_racy_files_are_hashed_every_time(tmp_path: Path) -> None:
    path = tmp_path / "fresh.csv"
    path.write_text("a", encoding="utf-8")
    cache = FingerprintCache()
    one = content_fingerprint(path, cache)
    path.write_text("b", encoding="utf-8")  # same size, maybe the same mtime tick
    assert content_fingerprint(path, cache) != one
    assert cache.hashed == 2


def test_paths_that_name_nothing() -> None:
    assert content_fingerprint("no such file, just a string") is None
    assert content_fingerprint(42) is None
    with pytest.raises(WorkflowInputError, match=r"no-such\.csv"):
        content_fingerprint(Path("/nonexistent/no-such.csv"))


def test_s3_objects_by_etag_or_version(s3_server: Any, tmp_path: Path) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(**s3_server.shared_options())
    url = f"s3://{s3_server.bucket}/inputs/edges.csv"
    fs.pipe(url, b"1 2\n")
    options = s3_server.shared_options()
    first = content_fingerprint(url, storage_options=options)
    assert content_fingerprint(url, storage_options=options) == first
    fs.pipe(url, b"1 3\n")
    second = content_fingerprint(url, storage_options=options)
    assert second != first
    fs.pipe(url, b"1 2\n")  # the same bytes again: the same ETag (an MD5 of the content)
    assert content_fingerprint(url, storage_options=options) == first
    prefix = f"s3://{s3_server.bucket}/inputs"
    whole = content_fingerprint(prefix, storage_options=options)
    fs.pipe(f"{prefix}/more.csv", b"5 6\n")
    assert content_fingerprint(prefix, storage_options=options) != whole
    with pytest.raises(WorkflowInputError, match="does not exist"):
        content_fingerprint(f"s3://{s3_server.bucket}/inputs/missing.csv", storage_options=options)


# -- code: globals read and the user's functions called -----------------------------------------------------------


BASE = """
    import math
    LIMIT = 10
    table = {"a": 1}

    def helper(x):
        return inner(x) + 1

    def inner(x):
        return x * 2

    def step(x):
        return min(helper(x), LIMIT) + math.floor(table["a"])
"""


def test_code_fingerprint_covers_the_users_functions_and_constants(user_module: Any) -> None:
    fp = code_fingerprint(user_module("steps_a", BASE).step)
    assert code_fingerprint(user_module("steps_a", BASE).step) == fp
    edits = {
        "a helper two calls down": BASE.replace("x * 2", "x * 3"),
        "a constant it reads": BASE.replace("LIMIT = 10", "LIMIT = 11"),
        "a helper it calls": BASE.replace("inner(x) + 1", "inner(x) + 2"),
    }
    for what, source in edits.items():
        assert code_fingerprint(user_module("steps_a", source).step) != fp, what
    same = {
        "a comment": BASE.replace("def inner(x):", "def inner(x):  # doubles"),
        "mutable state": BASE.replace('{"a": 1}', '{"a": 2}'),
        "code it does not use": BASE + "\n    def unused():\n        return 3\n",
    }
    for what, source in same.items():
        assert code_fingerprint(user_module("steps_a", source).step) == fp, what


def test_a_version_overrides_the_code(user_module: Any) -> None:
    source = """
        from pytimely.workflow import simple

        @simple(version=1)
        def step(x: int) -> int:
            return x * 2
    """
    fp = code_fingerprint(user_module("steps_v", source).step.function)
    assert code_fingerprint(user_module("steps_v", source.replace("x * 2", "x * 3")).step.function) == fp
    assert code_fingerprint(user_module("steps_v", source.replace("version=1", "version=2")).step.function) != fp
