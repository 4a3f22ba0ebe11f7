"""Membership plans under ``pytimely launch --elastic`` (real processes, the real control endpoint), and the
control endpoint itself against hostile clients. Every word count is checked against ``collections.Counter``."""

from __future__ import annotations

import random
import resource
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pytimely.errors import MembershipError
from pytimely.membership import ControlEndpoint, request
from pytimely.signed_lines import MAX_LINE, encode
from tests.cluster.helpers import ROOT
from tests.waiting import wait_until


def words_file(tmp_path: Path, lines: int = 3000) -> Path:
    """A text of random words (some not ASCII)."""
    text = tmp_path / "words.txt"
    rng = random.Random(11)
    vocabulary = [f"w{i}" for i in range(400)] + ["é", "日本"]
    text.write_text("\n".join(" ".join(rng.choices(vocabulary, k=8)) for _ in range(lines)), encoding="utf-8")
    return text


def launch_wordcount(
    tmp_path: Path, plan: str, epochs: int, *, processes: int = 2, workers: int = 1, wrap: str | None = None,
    extra: tuple[str, ...] = (), timeout: float = 180,
) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """``pytimely launch --elastic`` running ``wordcount --rescale plan``; ``wrap`` is a shell prefix for it."""
    text = words_file(tmp_path)
    out = tmp_path / "counts.tsv"
    command = [sys.executable, str(ROOT / "examples" / "wordcount.py"), "--input", str(text), "--output", str(out),
               "--epochs", str(epochs), "--rescale", plan, *extra]
    if wrap is not None:
        command = ["sh", "-c", wrap + ' exec "$@"', "sh", *command]
    done = subprocess.run(
        [sys.executable, "-m", "pytimely", "launch", "-n", str(processes), "-w", str(workers), "--elastic", "--",
         *command],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )
    return done, text, out


def counted(out: Path) -> dict[str, int]:
    """The ``word<TAB>count`` rows written."""
    rows = [line.split("\t") for line in out.read_text(encoding="utf-8").splitlines() if line and line != "word\tcount"]
    return {w: int(c) for w, c in rows}


@pytest.mark.parametrize(
    ("plan", "epochs", "processes", "workers"),
    [
        ("2:+1,4:-1,6:+1", 8, 2, 1),  # a join after a leave: the newcomer must not dial the process that left
        ("2:+1,4:-1,4:+1", 6, 2, 1),  # a leave and a join in the same epoch, both in flight together
        ("2:+1,4:-1,6:+1", 8, 2, 2),
        ("0:+1,1:+1,2:+1,3:-1,4:-1,5:-1", 7, 1, 2),  # 1 -> 4 -> 1 processes
        # Why: a process the computation started with could not leave (the final gather pinned it).
        ("2:-1", 6, 2, 1),
        ("3:-1,3:+1", 6, 2, 1),
        ("1:+1,3:-p0", 6, 2, 2),  # process 0 itself leaves; process 1 gathers and writes
    ],
)
def test_membership_plans_under_the_launcher_count_exactly(
    tmp_path: Path, plan: str, epochs: int, processes: int, workers: int
) -> None:
    done, text, out = launch_wordcount(tmp_path, plan, epochs, processes=processes, workers=workers)
    assert done.returncode == 0, done.stderr
    assert counted(out) == dict(Counter(text.read_text(encoding="utf-8").split()))


def test_an_elastic_run_with_200_silent_connections_on_its_control_endpoint_joins_and_leaves(tmp_path: Path) -> None:
    """Why: more than 64 silent connections to the control endpoint made a member's ``add`` be refused, and the
    elastic run failed in 5 s."""
    import json

    report = tmp_path / "strangers.json"
    # Process 0 starts the strangers (200 connections, each opened again once the endpoint closes it) and waits for
    # them to be in place before it starts counting.
    wrap = (
        f'if [ "$PYTIMELY_PROCESS" = 0 ]; then {sys.executable} -m tests.cluster.strangers {report} 200 '
        f'</dev/null >/dev/null 2>&1 & i=0; while [ ! -e {report}.ready ] && [ $i -lt 600 ]; do sleep 0.05; '
        "i=$((i+1)); done; fi;"
    )
    started = time.monotonic()
    done, text, out = launch_wordcount(
        tmp_path, "1:+1,3:-1,4:-p1", 6, wrap=wrap, extra=("--join-timeout", "30", "--leave-timeout", "30")
    )
    assert done.returncode == 0, done.stderr
    assert counted(out) == dict(Counter(text.read_text(encoding="utf-8").split()))
    assert time.monotonic() - started < 90
    wait_until(report.exists, 60, "the strangers' report (they stop once the endpoint is gone)")
    held = json.loads(report.read_text())
    # Held from before the run started until the launcher closed its endpoint at the end.
    assert held["peak"] == 200 and held["stopped"] == "endpoint gone", held


def test_a_plan_that_would_lose_a_pinned_worker_is_refused_before_anything_runs() -> None:
    """Why: a plan whose leaver held records routed by worker index was accepted and failed epochs later."""
    from pytimely import execute
    from pytimely.algorithms.rescaling import run_while_rescaling
    from pytimely.membership import RescalePlan

    shared: list[int] = []

    def by_key(records: Any, control: Any) -> Any:
        return records.exchange(hash, name="by key")

    def share(worker: int, epoch: int, members: list[int]) -> list[str]:
        shared.append(epoch)
        return ["a"]

    def job(worker: Any) -> None:
        plan = RescalePlan.parse("2:-1", initial=2)
        with pytest.raises(MembershipError, match=r"operator 'by key' receives records by worker index on worker"
                           r"\(s\) 1 of process 1, which this plan has leave after epoch 2"):
            run_while_rescaling(worker, by_key, share, 5, plan)
        with pytest.raises(MembershipError, match="operator 'gather' gathers on one worker, and no process"):
            run_while_rescaling(worker, lambda r, c: r, share, 5, RescalePlan.parse("1:+1,2:-p0,3:-p1", initial=2))

    execute(job, 2)
    assert shared == []  # nothing was fed in


def test_a_newcomer_that_exits_without_joining_fails_every_member_naming_it(tmp_path: Path) -> None:
    # Process 2 is started as asked but exits at once; worker 0 hears so from the launcher.
    done, _, out = launch_wordcount(
        tmp_path, "1:+1", 4, wrap='if [ "$PYTIMELY_JOIN" = 1 ]; then exit 0; fi;', extra=("--join-timeout", "60")
    )
    assert done.returncode != 0
    assert not out.exists()  # nothing written
    lines = done.stderr.splitlines()
    for member in (0, 1):
        mine = [line for line in lines if line.startswith(f"[p{member}] wordcount:")]
        assert mine and "JoinTimeoutError" in mine[-1] and "process 2" in mine[-1], done.stderr
    assert any("process 2, asked to join, had exited with status 0" in line for line in lines), done.stderr
    assert "Traceback" not in done.stderr


def test_a_newcomer_that_never_arrives_fails_every_member_at_the_join_deadline(tmp_path: Path) -> None:
    # Process 2 starts but hangs before connecting: the members' join deadline (3 s) names it.
    started = time.monotonic()
    done, _, out = launch_wordcount(
        tmp_path, "1:+1", 4, wrap='if [ "$PYTIMELY_JOIN" = 1 ]; then exec sleep 600; fi;',
        extra=("--join-timeout", "3"),
    )
    assert done.returncode != 0
    assert not out.exists()
    for member in (0, 1):
        mine = [line for line in done.stderr.splitlines() if line.startswith(f"[p{member}] wordcount:")]
        assert mine and "did not join within 3 s" in mine[-1] and "process(es) 2" in mine[-1], done.stderr
    assert time.monotonic() - started < 120  # the deadline, not the test's timeout, ended it


# -- the control endpoint against hostile clients ----------------------------------------------------------------


@pytest.fixture
def endpoint() -> Any:
    asked: list[tuple[str, int | None]] = []

    def handle(op: str, process: int | None) -> dict[str, Any]:
        asked.append((op, process))
        return {"process": 3}

    server = ControlEndpoint(b"s" * 32, handle, line_timeout=30.0)
    server.asked = asked  # type: ignore[attr-defined]
    yield server
    server.close()


def connect(endpoint: ControlEndpoint) -> socket.socket:
    host, _, port = endpoint.address.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=30)


def test_an_oversize_line_is_refused_with_bounded_memory(endpoint: ControlEndpoint) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    chunk = b"x" * (1 << 20)
    sent = 0
    with connect(endpoint) as sock:
        try:
            while sent < 256 << 20:  # 256 MiB without a newline
                sock.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass  # the endpoint closed the connection: what it read is gone
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert sent < 64 << 20, "the endpoint kept reading past its line limit"
    assert grown < 48 << 10, f"memory grew by {grown} KiB"
    assert endpoint.asked == []  # type: ignore[attr-defined]
    # Still serving.
    assert request("add", address=endpoint.address, secret=b"s" * 32, timeout=10) == {"process": 3}


def test_silent_and_trickling_clients_do_not_delay_a_signed_add(endpoint: ControlEndpoint) -> None:
    silent = [connect(endpoint) for _ in range(8)]
    stop = threading.Event()

    def trickle(sock: socket.socket) -> None:
        while not stop.wait(0.5):
            try:
                sock.sendall(b"{")
            except OSError:
                return

    trickler = connect(endpoint)
    thread = threading.Thread(target=trickle, args=(trickler,), daemon=True)
    thread.start()
    try:
        # Each of these holds its connection for up to 30 s; served one at a time, the add would time out.
        assert request("add", address=endpoint.address, secret=b"s" * 32, timeout=10) == {"process": 3}
    finally:
        stop.set()
        for sock in [*silent, trickler]:
            sock.close()
        thread.join(timeout=5)


def test_two_hundred_silent_connections_do_not_keep_a_signed_request_out(endpoint: ControlEndpoint) -> None:
    """Why: more than 64 silent connections made a member's signed ``add`` be refused."""
    silent = [connect(endpoint) for _ in range(200)]
    try:
        # Each silent connection may be held for 30 s (the fixture's line deadline).
        assert request("add", address=endpoint.address, secret=b"s" * 32, timeout=10) == {"process": 3}
        assert request("status", 0, address=endpoint.address, secret=b"s" * 32, timeout=10) == {"process": 3}
    finally:
        for sock in silent:
            sock.close()
    assert endpoint.asked == [("add", None), ("status", 0)]  # type: ignore[attr-defined]


def test_a_member_retries_a_refused_request_within_its_deadline() -> None:
    """Why: a member whose request was refused did not try again, and the elastic run failed."""
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    answered: list[Any] = []
    asking = threading.Thread(
        target=lambda: answered.append(request("add", address=f"127.0.0.1:{port}", secret=b"s" * 32, timeout=20))
    )
    asking.start()  # refused: nothing listens on the port yet
    time.sleep(0.5)
    assert asking.is_alive(), "the request gave up at its first refusal"
    server = ControlEndpoint(b"s" * 32, lambda op, process: {"process": 9}, port=port)
    try:
        asking.join(30)
    finally:
        server.close()
    assert answered == [{"process": 9}]


def test_an_attempt_made_again_is_answered_the_same_and_done_once(endpoint: ControlEndpoint) -> None:
    from pytimely.signed_lines import decode

    replies = []
    for nonce in ("first", "again"):
        body = {"op": "add", "process": None, "id": "one request", "nonce": nonce, "time": time.time()}
        with connect(endpoint) as sock:
            sock.sendall(encode(b"s" * 32, "control", body))
            replies.append(decode(b"s" * 32, "control-reply", sock.makefile("rb").readline(MAX_LINE)))
    assert replies == [{"process": 3}, {"process": 3}]
    assert endpoint.asked == [("add", None)]  # type: ignore[attr-defined]


def test_a_bad_signature_or_a_line_signed_for_another_exchange_is_refused(endpoint: ControlEndpoint) -> None:
    with pytest.raises(MembershipError, match="not signed"):
        request("add", address=endpoint.address, secret=b"t" * 32, timeout=10)
    body = {"op": "add", "process": None, "nonce": "n", "time": time.time()}
    for line in (
        encode(b"s" * 32, "rendezvous", body),  # right secret, wrong purpose
        encode(b"s" * 32, "control", body).replace(b'"add"', b'"remove"'),  # tampered after signing
    ):
        with connect(endpoint) as sock:
            sock.sendall(line)
            reply = sock.makefile("rb").readline(MAX_LINE)
        assert b"not signed" in reply
    assert endpoint.asked == []  # type: ignore[attr-defined]


def test_the_launcher_starts_a_newcomer_only_after_a_leave_and_never_hands_it_the_leaver(tmp_path: Path) -> None:
    import json
    import os

    path = os.pathsep.join([str(ROOT), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, "-m", "pytimely", "launch", "-n", "2", "--elastic", "--",
         sys.executable, "-m", "tests.cluster.launcher_jobs", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=env,
    )
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "requester.json").read_text())
    newcomer = json.loads((tmp_path / f"newcomer-{record['newcomer']}.json").read_text())
    assert record["newcomer"] == 2 and newcomer["left"] == "1"
    assert len(newcomer["hosts"].split(",")) == 3
    states = [(s["leaver"], s["newcomer"]) for s in record["seen"]]
    # The add was answered while the leaver still ran, and the newcomer waited for it to be gone.
    assert states[0] == ("leaving", "waiting"), states
    assert all(n == "waiting" for leaver, n in states if leaver == "leaving"), states
    assert states[-1] == ("exited", "exited"), states


def test_a_process_that_leaves_on_its_own_is_known_to_the_launcher_before_its_peers_hear_of_it(
    tmp_path: Path,
) -> None:
    import os

    path = os.pathsep.join([str(ROOT), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "pytimely", "launch", "-n", "2", "--elastic", "--",
         sys.executable, "-m", "pytimely", "run", "tests.cluster.misuse_jobs:leave_on_its_own"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": path},
    )
    assert done.returncode == 0, done.stderr
    assert "worker 0: 'leaving'" in done.stdout, done.stdout + done.stderr
