"""Leases on S3 you can trust, on the real moto server: only conditional writes on the lease's own version.

Interleavings are forced with a gate: an HTTP proxy in front of moto through which one run talks, and which can
hold that run's writes to the lease object until another run has done its part.
"""

from __future__ import annotations

import http.client
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from pytimely.errors import StagingLockedError, StagingLockLostError
from pytimely.workflow import composite, simple
from pytimely.workflow.runner import run
from pytimely.workflow.staging import FsspecStaging, LocalStaging, staging_lock

from .conftest import S3Server

ROOT = Path(__file__).resolve().parents[2]
LEASE = "/.lock"
_prefixes = iter(range(1 << 30))


class Gate:
    """An HTTP proxy to the moto server that, while ``closed``, holds every write (PUT, DELETE) of a lease object
    sent through it once a read of it has passed (``after_read``) or at once; ``held`` is set when one waits."""

    def __init__(self, target: str) -> None:
        self.target = urlsplit(target)
        self.closed = threading.Event()
        self.after_read = False
        self.read_seen = threading.Event()
        self.held = threading.Event()
        self.opened = threading.Event()
        gate = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                lease = self.path.split("?")[0].endswith(LEASE)
                if lease and self.command == "GET":
                    gate.read_seen.set()
                if (lease and self.command in ("PUT", "DELETE") and gate.closed.is_set()
                        and (gate.read_seen.is_set() or not gate.after_read)):  # fmt: skip
                    gate.held.set()
                    assert gate.opened.wait(120), "the gate was never opened"
                upstream = http.client.HTTPConnection(gate.target.hostname, gate.target.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                headers["Host"] = gate.target.netloc
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                upstream.close()

            do_GET = do_PUT = do_DELETE = do_HEAD = do_POST = forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        """The proxy's URL."""
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def open(self) -> None:
        """Let held writes through, and hold nothing more."""
        self.closed.clear()
        self.opened.set()

    def stop(self) -> None:
        self.open()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def gate(s3_server: S3Server) -> Iterator[Gate]:
    proxy = Gate(s3_server.endpoint)
    yield proxy
    proxy.stop()


def areas(s3: S3Server, gate: Gate | None = None) -> tuple[str, FsspecStaging, FsspecStaging | None]:
    """A fresh prefix; an area on it talking to moto, and one talking through ``gate``."""
    url = f"s3://{s3.bucket}/lease-{os.getpid()}-{next(_prefixes)}"
    direct = FsspecStaging(url, **s3.options())
    if gate is None:
        return url, direct, None
    options = s3.options()
    options["client_kwargs"] = {**options["client_kwargs"], "endpoint_url": gate.endpoint}
    return url, direct, FsspecStaging(url, **options)


def lease_record(area: FsspecStaging) -> dict[str, Any]:
    area.fs.invalidate_cache()
    return dict(json.loads(area.fs.cat_file(f"{area.root}{LEASE}")))


def expired_lease(area: FsspecStaging) -> None:
    """A lease left by a run of this (live) process that stopped renewing it: only its expiry frees it."""
    held = staging_lock(area, "a stalled run", ttl=0.3, renew=False)
    held.__enter__()
    deadline = time.monotonic() + 30
    while lease_record(area)["expires"] >= time.time():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_two_takers_of_an_expired_lease_one_holds_it(s3_server: S3Server, gate: Gate) -> None:
    """B reads the expired lease, then A takes it over, then B writes: before, B deleted A's fresh lease and made
    its own, so both held the area; now B's write is conditional on the version it read, fails, and B is refused
    naming A."""
    _, direct, through_gate = areas(s3_server, gate)
    assert through_gate is not None
    expired_lease(direct)
    gate.after_read = True
    gate.closed.set()
    outcome: dict[str, Any] = {}

    def take_b() -> None:
        lock = staging_lock(through_gate, "run B")
        try:
            outcome["b"] = lock.__enter__()
        except StagingLockedError as exc:
            outcome["b"] = exc

    b = threading.Thread(target=take_b)
    b.start()
    assert gate.held.wait(60), "B never wrote after reading the lease"
    a = staging_lock(direct, "run A")
    a.__enter__()  # A takes the expired lease over while B's write waits
    gate.open()
    b.join(60)
    assert not b.is_alive()
    assert lease_record(direct)["holder"] == "run A"
    assert isinstance(outcome["b"], StagingLockedError), "both runs hold the staging area"
    assert "is in use by run A" in str(outcome["b"])
    a.__exit__(None, None, None)
    with staging_lock(direct, "run C"):  # released: the next run takes it
        assert lease_record(direct)["holder"] == "run C"


def test_a_renewal_never_overwrites_another_runs_lease(s3_server: S3Server, gate: Gate) -> None:
    """A's renewal waits (a stalled network) past its lease's expiry and B takes the lease over; when A's
    renewal arrives it must not overwrite B's lease (before, it did: both held it). A learns it lost the lease
    and stops before writing."""
    _, direct, through_gate = areas(s3_server, gate)
    assert through_gate is not None
    a = staging_lock(through_gate, "run A", ttl=1.2)
    a.__enter__()
    gate.closed.set()  # A's next renewal is held
    assert gate.held.wait(60)
    deadline = time.monotonic() + 30
    while lease_record(direct)["expires"] >= time.time():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    b = staging_lock(direct, "run B", ttl=60)
    b.__enter__()
    gate.open()
    deadline = time.monotonic() + 30
    while a._renewer is not None and a._renewer.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)  # A's renewer ends once it finds the lease taken
    assert lease_record(direct)["holder"] == "run B"
    with pytest.raises(StagingLockedError, match=r"lost its lease \(taken over by run B"):
        a.check()
    a.__exit__(None, None, None)
    assert lease_record(direct)["holder"] == "run B"  # A's release did not remove B's lease
    b.__exit__(None, None, None)


HOLDER = """
import sys, time
from pytimely.workflow.staging import FsspecStaging, staging_lock
area = FsspecStaging(sys.argv[1])
staging_lock(area, "a run to be killed").__enter__()
print("held", flush=True)
time.sleep(600)
"""


def killed_holder(url: str, s3: S3Server) -> int:
    """Start a process that takes the lease of ``url``, then SIGKILL it; its pid."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "eu-west-1", "AWS_ENDPOINT_URL": s3.endpoint,
           "AWS_ENDPOINT_URL_S3": s3.endpoint}  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, url], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    proc.send_signal(signal.SIGKILL)
    proc.wait(60)
    return proc.pid


def test_the_lease_of_a_killed_run_on_this_host_is_taken_at_once(s3_server: S3Server) -> None:
    """Before: the next run was refused for about two minutes, naming a dead pid on this host."""
    url, direct, _ = areas(s3_server)
    pid = killed_holder(url, s3_server)
    assert lease_record(direct)["pid"] == pid
    began = time.monotonic()
    with staging_lock(direct, "the next run") as lock:
        assert time.monotonic() - began < 30
        assert lease_record(direct)["holder"] == "the next run"
        assert lock.took_over is not None and f"pid {pid}" in lock.took_over and "no longer running" in lock.took_over


def test_unlock_breaks_a_lease_naming_its_holder(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: nothing could break a lease (its holder gone on another host, say). A holder that is a live
    process of this host is refused unless forced."""
    from pytimely.workflow.cli import main

    url, direct, _ = areas(s3_server)
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "eu-west-1"), ("AWS_ENDPOINT_URL", s3_server.endpoint),
                        ("AWS_ENDPOINT_URL_S3", s3_server.endpoint)):  # fmt: skip
        monkeypatch.setenv(name, value)
    held = staging_lock(direct, "a live run")
    held.__enter__()
    assert main(["unlock", "--staging", url]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"is held by a live run (pid {os.getpid()} on " in err[0], err
    assert "which is running on this host" in err[0]
    assert main(["unlock", "--staging", url, "--force"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"unlocked staging area {url}: it was held by a live run (pid {os.getpid()} on "), out
    assert main(["unlock", "--staging", url]) == 0
    assert capsys.readouterr().out == f"staging area {url} is not locked\n"
    with staging_lock(direct, "another run"):  # broken: taken at once
        pass
    held.__exit__(None, None, None)  # its release removes nothing of the other run's


def test_a_local_lock_cannot_be_broken_while_its_holder_lives(tmp_path: Path) -> None:
    from pytimely.workflow.staging import break_lock

    area = LocalStaging(tmp_path / "area")
    assert break_lock(area) is None
    with staging_lock(area, "a live run"), pytest.raises(StagingLockedError, match="local folder's lock ends"):
        break_lock(LocalStaging(tmp_path / "area"))
    assert break_lock(area) is None  # released with its holder


SLEPT = threading.Event()


@simple
def nap(x: int) -> int:
    SLEPT.set()
    time.sleep(1.5)  # past the run's lease: 0.9 s, renewed every 0.3 s
    return x + 1


@composite
def napping(x: int) -> int:
    return nap(x)


def test_a_run_that_lost_its_lease_stops_before_writing(s3_server: S3Server) -> None:
    """While a module runs, another run breaks the lease and takes it: the first run's renewal fails, and it
    stops before staging the module's value instead of writing beside the new holder."""
    from pytimely.workflow.staging import break_lock

    _, direct, _ = areas(s3_server)
    SLEPT.clear()
    intruder = staging_lock(direct, "an intruder", renew=False)

    def intrude() -> None:
        assert SLEPT.wait(60)
        break_lock(direct, force=True)
        intruder.__enter__()

    thread = threading.Thread(target=intrude)
    thread.start()
    lost = r"lost its lease \(taken over by an intruder.*stopped before writing"
    with pytest.raises(StagingLockLostError, match=lost):
        run(napping, {"x": 1}, staging=direct, lease_seconds=0.9)
    thread.join(60)
    assert direct.keys("napping") == []  # nothing written beside the intruder
    assert lease_record(direct)["holder"] == "an intruder"
    intruder.__exit__(None, None, None)
