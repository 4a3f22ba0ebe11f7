"""Concurrent writers of one staging area: nothing lost, nothing torn, and a second run refused by name."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from pytimely.errors import StagingLockedError
from pytimely.workflow.staging import FsspecStaging, LocalStaging, StagingArea, staging_lock

from .conftest import S3Server

ROOT = Path(__file__).resolve().parents[2]


def _area(kind: str, tmp_path: Path, s3: S3Server | None, prefix: str) -> StagingArea:
    """A new area object on the same place each call: as separate runs would open it."""
    if kind == "local":
        return LocalStaging(tmp_path / "area", durable=False)
    if kind == "fsspec-local":
        return FsspecStaging(f"file://{tmp_path}/area")
    assert s3 is not None
    return FsspecStaging(f"s3://{s3.bucket}/{prefix}", **s3.shared_options())


@pytest.mark.parametrize(("kind", "writers"), [("local", 200), ("fsspec-local", 200), ("s3", 100)])
def test_concurrent_puts_of_one_key_lose_nothing(
    kind: str, writers: int, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    s3 = request.getfixturevalue("s3_server") if kind == "s3" else None
    prefix = f"puts-{os.getpid()}-{threading.get_ident()}"
    failures: list[BaseException] = []
    seen_during: list[Any] = []

    def put(n: int) -> None:
        area = _area(kind, tmp_path, s3, prefix)
        area.put("wf/m/out", {"writer": n, "payload": list(range(n % 50))}, f"{n:064x}")

    def read() -> None:
        area = _area(kind, tmp_path, s3, prefix)
        for _ in range(20):
            fp = area.fingerprint("wf/m/out")
            if fp is not None:
                try:
                    seen_during.append(area.get("wf/m/out"))
                except Exception as exc:
                    failures.append(exc)

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        reader = pool.submit(read)
        for future in [pool.submit(put, n) for n in range(writers)]:
            try:
                future.result()
            except Exception as exc:
                failures.append(exc)
        reader.result()
    assert failures == []
    area = _area(kind, tmp_path, s3, prefix)
    fp = area.fingerprint("wf/m/out")
    assert fp is not None, "the value was lost"
    value = area.get("wf/m/out", fp)
    assert value == {"writer": int(fp, 16), "payload": list(range(int(fp, 16) % 50))}
    assert all(v["payload"] == list(range(v["writer"] % 50)) for v in seen_during)


def test_a_second_lock_is_refused_naming_the_holder(tmp_path: Path) -> None:
    area = LocalStaging(tmp_path / "area")
    second = staging_lock(LocalStaging(tmp_path / "area"), "second run")
    refused = rf"in use by first run \(pid {os.getpid()} on "
    with staging_lock(area, "first run"), pytest.raises(StagingLockedError, match=refused):
        second.__enter__()
    with staging_lock(area, "third run"):
        pass


def test_an_s3_lease_is_refused_then_released(s3_server: S3Server) -> None:
    area = FsspecStaging(f"s3://{s3_server.bucket}/lease-{os.getpid()}", **s3_server.options())
    with staging_lock(area, "first run"), pytest.raises(StagingLockedError, match="in use by first run"):
        staging_lock(area, "second run").__enter__()
    with staging_lock(area, "third run"):
        pass


def test_an_expired_lease_is_taken_over(s3_server: S3Server) -> None:
    area = FsspecStaging(f"s3://{s3_server.bucket}/expired-{os.getpid()}", **s3_server.options())
    held = staging_lock(area, "crashed run", ttl=0.5, renew=False)
    held.__enter__()  # never released, never renewed: as a killed run leaves it
    import time

    time.sleep(1.0)
    with staging_lock(area, "next run"):
        pass


WORKFLOW = """
import time
from typing import NamedTuple
from pytimely.workflow import composite, simple

class Out(NamedTuple):
    a: int
    b: int

@simple
def double(x: int) -> int:
    time.sleep(3)  # long enough for the runs to overlap
    return 2 * x

@simple
def square(x: int) -> int:
    return x * x

@composite
def workflow(x: int) -> Out:
    return Out(double(x), square(double(x)))
"""


def test_six_concurrent_command_runs_refuse_clearly_and_lose_nothing(tmp_path: Path) -> None:
    (tmp_path / "wf.py").write_text(textwrap.dedent(WORKFLOW), encoding="utf-8")
    stage = tmp_path / "stage"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, "-m", "pytimely", "workflow", "run", f"{tmp_path}/wf.py:workflow",
               "--staging", str(stage), "--input", "x=3", "-q"]  # fmt: skip
    runs = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(6)]  # fmt: skip
    results = [(p.wait(timeout=300), *p.communicate(timeout=60)) for p in runs]
    succeeded = [out for status, out, _ in results if status == 0]
    refused = [err for status, _, err in results if status != 0]
    assert succeeded and refused, results
    for out in succeeded:
        assert out.splitlines() == ["a = 6", "b = 36"]
    for err in refused:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "is in use by pytimely workflow run" in lines[0] and "pid" in lines[0], err
    area = LocalStaging(stage)
    assert area.get("workflow/double/out") == 6 and area.get("workflow/square/out") == 36
    # Once they are done, a run finds everything and runs nothing.
    again = subprocess.run([*command[:-1]], env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "ran 0 modules" in again.stderr, again.stderr


def test_a_run_refused_before_the_holder_recorded_itself_still_names_it(tmp_path: Path) -> None:
    """The holder takes the lock and writes who it is a moment later: the refusal waits for that record."""
    import fcntl
    import json

    area = LocalStaging(tmp_path / "stage")
    area.put("seed", 1, "f")  # the area's folder exists
    fd = os.open(tmp_path / "stage" / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    record = {"holder": "a slow run", "pid": 4242, "host": "here", "since": "now", "token": "t"}
    writer = threading.Timer(0.3, lambda: os.pwrite(fd, json.dumps(record).encode(), 0))
    writer.start()
    try:
        with pytest.raises(StagingLockedError, match=r"in use by a slow run \(pid 4242"), staging_lock(area, "me"):
            pass
    finally:
        writer.join()
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
