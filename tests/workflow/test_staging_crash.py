"""A process killed in the middle of ``put`` never leaves a value that counts, and the previous value stays."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytimely.workflow.staging import FsspecStaging, LocalStaging, StagingArea, commit

from .conftest import S3Server

WRITER = r"""
import json, os, sys, time

kind, location, options, mode = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
from pytimely.workflow.staging import FsspecStaging, LocalStaging

area = LocalStaging(location) if kind == "local" else FsspecStaging(location, **options)


def crash():
    print("mid", flush=True)
    if mode == "exit":
        os._exit(9)
    time.sleep(600)  # the test kills us with SIGKILL


class Stall:
    # Pickling reaches this object after the large bytes before it are already written out.
    def __reduce__(self):
        crash()


if mode == "before-commit":
    # Everything is written except the commit marker: die at the step that would publish it.
    if kind == "local":
        real_replace = os.replace
        os.replace = lambda src, dst: crash() if dst.endswith(".commit") else real_replace(src, dst)
    else:
        fs = area.fs
        real_mv, real_pipe = fs.mv, fs.pipe_file
        fs.mv = lambda src, dst, **kw: crash() if dst.endswith(".commit") else real_mv(src, dst, **kw)
        fs.pipe_file = lambda path, data, **kw: crash() if path.endswith(".commit") else real_pipe(path, data, **kw)
    value = [b"x" * (1 << 20)]
else:
    # More than one upload part (5 MiB on S3): an object store has begun a multipart upload when we die.
    value = [b"x" * (6 << 20), Stall()]
area.put("report/clean/out", value, "new")
print("finished", flush=True)
"""

KINDS = ["local", "fsspec-local", "s3"]
MODES = ["exit", "sigkill", "before-commit"]


def open_area(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[StagingArea, str, dict[str, Any]]:
    """The area, and the location and options a writer process opens it with."""
    if kind == "local":
        return LocalStaging(tmp_path / "area"), str(tmp_path / "area"), {}
    if kind == "fsspec-local":
        url = f"file://{tmp_path}/area"
        return FsspecStaging(url), url, {}
    s3: S3Server = request.getfixturevalue("s3_server")
    url = f"s3://{s3.bucket}/crash-{os.getpid()}-{tmp_path.name}"
    # Parts of 5 MiB (the least S3 allows), so that the writer's 6 MiB payload starts a multipart upload.
    options = {**s3.options(), "default_block_size": 5 << 20}
    return FsspecStaging(url, **options), url, options


def crash_writer(kind: str, location: str, options: dict[str, Any], mode: str) -> None:
    """Run a writer process and let it die (or kill it) in the middle of ``put``."""
    process = subprocess.Popen(
        [sys.executable, "-c", WRITER, kind, location, json.dumps(options), "exit" if mode == "exit" else mode],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "mid"
        if mode != "exit":
            process.send_signal(signal.SIGKILL)
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert code == (9 if mode == "exit" else -signal.SIGKILL)


def assert_writer_got_part_way(area: StagingArea, kind: str, mode: str, tmp_path: Path) -> None:
    """Something of the dead writer's payload was stored (yet it does not count): the crash was mid-put."""
    if kind != "s3":
        written = [p for p in leftovers(tmp_path) if p.is_dir() and any(f.stat().st_size for f in p.iterdir())]
        assert written, "the writer died before writing anything; the test proves nothing"
        return
    assert isinstance(area, FsspecStaging)
    if mode == "before-commit":
        payloads = [path for path in area.fs.find(area.root) if "/.data-" in path]
        assert len(payloads) == 2  # the old value's and the dead writer's complete one
    else:
        bucket, prefix = area.root.split("/", 1)
        uploads = [u for u in area.fs.list_multipart_uploads(bucket) if u["Key"].startswith(prefix + "/")]
        assert uploads, "the writer died before uploading any part; the test proves nothing"


def leftovers(tmp_path: Path) -> list[Path]:
    """Payload directories and temporary markers on a local disk."""
    base = tmp_path / "area" / "report" / "clean" / "out"
    return sorted(p for p in base.glob(".*") if p.name != ".commit") if base.exists() else []


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", KINDS)
def test_crash_keeps_the_previous_value(
    kind: str, mode: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    area, location, options = open_area(kind, tmp_path, request)
    area.put("report/clean/out", {"rows": [1, 2]}, "old")
    crash_writer(kind, location, options, mode)
    assert not area.has("report/clean/out", "new")
    assert area.has("report/clean/out", "old")
    assert area.fingerprint("report/clean/out") == "old"
    assert area.get("report/clean/out") == {"rows": [1, 2]}
    assert area.keys("") == ["report/clean/out"]
    assert_writer_got_part_way(area, kind, mode, tmp_path)
    area.put("report/clean/out", "next", "f3")  # a later put succeeds; what the crash left may be a writer's
    assert area.get("report/clean/out", "f3") == "next"
    if kind != "s3":
        # Once old enough to be abandoned, the next put sweeps it.
        monkeypatch.setattr(commit, "ABANDONED_SECONDS", -1.0)
        area.put("report/clean/out", "last", "f4")
        assert len([p for p in leftovers(tmp_path) if p.name.startswith(".data-")]) == 1


@pytest.mark.parametrize("mode", ["sigkill", "before-commit"])
@pytest.mark.parametrize("kind", KINDS)
def test_crash_on_a_new_key_leaves_it_absent(
    kind: str, mode: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    area, location, options = open_area(kind, tmp_path, request)
    crash_writer(kind, location, options, mode)
    assert not area.has("report/clean/out", "new")
    assert area.fingerprint("report/clean/out") is None
    assert area.keys("") == []
    area.delete("report/clean/out")  # removes the debris
    assert leftovers(tmp_path) == []
