"""Errors at the command line blame the real cause in one line: the staging area, the bucket, the value."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import S3Server

ROOT = Path(__file__).resolve().parents[2]

WORKFLOW = """
import threading
from pytimely.workflow import composite, simple

@simple
def make(x: int) -> int:
    return x + 1

@simple
def lock_of(x: int) -> object:
    return threading.Lock()

@composite
def workflow(x: int) -> int:
    return make(x)

@composite
def unpicklable(x: int) -> object:
    return lock_of(x)
"""


def command(
    tmp_path: Path, target: str, staging: str, env: dict[str, str] | None = None, *extra: str
) -> tuple[int, str]:
    (tmp_path / "wf.py").write_text(textwrap.dedent(WORKFLOW), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytimely", "workflow", "run", f"{tmp_path}/wf.py:{target}", "--staging", staging,
         "--input", "x=1", "-q", *extra],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})}, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    return done.returncode, done.stderr


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_staging_folder_that_cannot_be_made(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("in the way")
    status, err = command(tmp_path, "workflow", str(tmp_path / "file" / "stage"))
    assert status == 2
    line = one_line(err)
    assert "staging area" in line and "Not a directory" in line and "make" not in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_staging_folder_that_cannot_be_written(tmp_path: Path) -> None:
    stage = tmp_path / "stage"
    stage.mkdir()
    stage.chmod(0o555)
    try:
        status, err = command(tmp_path, "workflow", str(stage))
    finally:
        stage.chmod(0o755)
    assert status == 1
    line = one_line(err)
    assert "cannot be written: permission denied" in line and "make" not in line


def test_a_missing_bucket(s3_server: S3Server, tmp_path: Path) -> None:
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "eu-west-1",
           "AWS_ENDPOINT_URL": s3_server.endpoint, "AWS_ENDPOINT_URL_S3": s3_server.endpoint}  # fmt: skip
    status, err = command(tmp_path, "workflow", "s3://no-such-bucket/stage", env)
    assert status == 1
    line = one_line(err)
    assert "s3://no-such-bucket/stage" in line and "bucket does not exist" in line, line


@pytest.mark.parametrize(("executor", "where"), [("thread", "local"), ("process", "local"), ("process", "memory")])
def test_a_value_that_cannot_be_pickled(tmp_path: Path, executor: str, where: str) -> None:
    """One line naming the module and the out-port, whichever executor and staging area; before, the process
    executor ended in a raw traceback (the pool could not pickle the result back)."""
    staging = str(tmp_path / "stage") if where == "local" else "memory://"
    status, err = command(tmp_path, "unpicklable", staging, None, "--executor", executor)
    assert status == 1
    line = one_line(err)
    assert "UnpicklableOutputError: module 'unpicklable/lock_of'" in line, line
    assert "_thread.lock" in line or "cannot pickle '_thread.lock' object" in line, line
