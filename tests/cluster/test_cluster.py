"""Real processes on loopback: results match in-process runs; faults, deaths and strangers stop the run cleanly."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pytimely.communication.handshake import connect_peer
from pytimely.errors import AuthenticationError
from tests.cluster.helpers import ROOT, Cluster, report
from tests.cluster.jobs import expected_sums
from tests.cluster.proxy import CLOSE, Proxy

SUM = ["tests.cluster.jobs:exchange_sum"]


def read_sums(path: Path) -> list[tuple[int, int]]:
    """The ``epoch,sum`` lines a job wrote."""
    return [tuple(map(int, line.split(","))) for line in path.read_text().splitlines()]  # type: ignore[misc]


def test_two_processes_compute_what_one_does(tmp_path: Path) -> None:
    out = tmp_path / "sums.csv"
    cluster = Cluster(2, workers="2")
    cluster.start([*SUM, str(out), "6", "5000"])
    results = cluster.wait()
    assert [r[0] for r in results] == [0, 0], report(results)
    assert read_sums(out) == expected_sums(6, 5000)


def launch(*args: str) -> subprocess.CompletedProcess[str]:
    """``pytimely launch`` ARGS from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "pytimely", "launch", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("example", ["wcc", "wordcount"])
def test_examples_write_identical_files_for_every_layout(tmp_path: Path, example: str) -> None:
    import random

    rng = random.Random(5)
    if example == "wcc":
        data = tmp_path / "edges.csv"
        data.write_text(
            "".join(f"{rng.randrange(3000)},{rng.randrange(3000)},{rng.randrange(4)}\n" for _ in range(6000))
        )
        args = ["--edges", str(data), "--epochs"]
    else:
        data = tmp_path / "text.txt"
        words = [f"w{i}" for i in range(800)] + ["é", "naïve", "x"]
        data.write_text("\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(3000)))
        args = ["--input", str(data)]
    outputs = []
    for n, w in [(1, 1), (1, 2), (2, 2)]:
        out = tmp_path / f"out_{n}_{w}"
        result = launch(
            "-n", str(n), "-w", str(w), "--", sys.executable, f"examples/{example}.py", *args, "--output", str(out)
        )
        assert result.returncode == 0, result.stderr
        outputs.append(out.read_bytes())
    assert outputs[0] and outputs[0] == outputs[1] == outputs[2]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_launch_stops_all_when_one_fails_and_writes_no_output(tmp_path: Path) -> None:
    out = tmp_path / "sums.csv"
    started = time.monotonic()
    result = launch(
        "-n",
        "2",
        "--",
        sys.executable,
        "-m",
        "pytimely",
        "run",
        "tests.cluster.jobs:failing",
        str(out),
        "8",
        "2000",
        "0.05",
    )
    assert result.returncode != 0
    assert "deliberate failure" in result.stderr
    assert "[p0]" in result.stderr and "[p1]" in result.stderr
    assert "process 1 stopped" in result.stderr or "process 1 failed" in result.stderr
    assert not out.exists()
    assert time.monotonic() - started < 60


def test_launch_reports_the_cause_status_when_a_stopped_peer_exits_first() -> None:
    # Process 1 plays the peer stopped by the failure (exit 1, at once); process 0 the cause, slower to exit (2).
    script = (
        "import os, sys, time\n"
        "if os.environ['PYTIMELY_PROCESS'] == '1':\n"
        "    sys.exit(1)\n"
        "time.sleep(0.5)\n"
        "sys.exit(2)\n"
    )
    result = launch("-n", "2", "--", sys.executable, "-c", script)
    assert result.returncode == 2, result.stderr
    assert "process 1 exited with status 1" in result.stderr


def first_data_frame(action: Callable[[bytes, dict[str, bytes]], list[bytes]]) -> Callable[[bytes], list[bytes]]:
    """A fault that applies ``action`` to the first data frame and forwards everything else."""
    state: dict[str, bytes] = {}

    def fault(frame: bytes) -> list[bytes]:
        stashed = state.pop("stash", None)
        if stashed is not None:
            return [frame, stashed]
        if "hit" not in state and frame[3] == 1:
            state["hit"] = b"1"
            return action(frame, state)
        return [frame]

    return fault


def flip(frame: bytes, state: dict[str, bytes]) -> list[bytes]:
    """Flip one bit of the payload."""
    mangled = bytearray(frame)
    mangled[-1] ^= 0x04
    return [bytes(mangled)]


def stash(frame: bytes, state: dict[str, bytes]) -> list[bytes]:
    """Hold the frame back and send it after the next one."""
    state["stash"] = frame
    return []


FAULTS: dict[str, tuple[Callable[[bytes, dict[str, bytes]], list[bytes]], str]] = {
    "flip": (flip, "fails authentication"),
    "truncate": (lambda f, s: [f[: len(f) // 2], CLOSE], "in the middle of a frame"),
    "duplicate": (lambda f, s: [f, f], "duplicate"),
    "drop": (lambda f, s: [], "lost or reordered"),
    "reorder": (stash, "lost or reordered"),
}


@pytest.mark.parametrize("fault", [None, *FAULTS])
def test_damaged_frames_stop_the_run_cleanly(tmp_path: Path, fault: str | None) -> None:
    out = tmp_path / "sums.csv"
    cluster = Cluster(2, PYTIMELY_HEARTBEAT="0.1", PYTIMELY_TIMEOUT="5")
    proxy = Proxy(cluster.hosts[0], first_data_frame(FAULTS[fault][0]) if fault else None)
    try:
        cluster.start([*SUM, str(out), "4", "3000"], hosts={1: [proxy.address, cluster.hosts[1]]})
        results = cluster.wait(timeout=60)
    finally:
        proxy.close()
        cluster.kill()
    if fault is None:
        assert [r[0] for r in results] == [0, 0], report(results)
        assert read_sums(out) == expected_sums(4, 3000)
        return
    codes = [r[0] for r in results]
    assert all(code == 1 for code in codes), report(results)
    p0_err = results[0][2]
    assert FAULTS[fault][1] in p0_err, p0_err
    assert "process 1" in p0_err
    assert "process 0" in results[1][2], results[1][2]
    assert not out.exists()


def wait_for_start(proc: subprocess.Popen[str]) -> None:
    """Block until the job prints that it started."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "started" in line, line


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_dead_or_stalled_process_is_detected_within_the_bound(tmp_path: Path, how: str) -> None:
    out = tmp_path / "sums.csv"
    timeout, heartbeat = 2.0, 0.2
    cluster = Cluster(2, PYTIMELY_HEARTBEAT=str(heartbeat), PYTIMELY_TIMEOUT=str(timeout))
    try:
        p0, p1 = cluster.start([*SUM, str(out), "1000", "100", "0.05"])
        wait_for_start(p1)
        time.sleep(0.5)
        hit = time.monotonic()
        p1.send_signal(signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        _, stderr = p0.communicate(timeout=30)
        elapsed = time.monotonic() - hit
    finally:
        if cluster.procs[1].poll() is None:
            cluster.procs[1].send_signal(signal.SIGCONT)
        cluster.kill()
    assert p0.returncode == 1
    if how == "kill":
        assert "died or was killed" in stderr or "connection to process 1 failed" in stderr, stderr
        assert elapsed < 1 + 1.0  # EOF is immediate; one second of grace for the worker thread to notice
    else:
        assert "no complete frame" in stderr and "stalled" in stderr, stderr
        assert elapsed < timeout + 2 * heartbeat + 1.5
    assert not out.exists()


def test_wrong_secret_is_refused_on_both_sides(tmp_path: Path) -> None:
    cluster = Cluster(2, PYTIMELY_CONNECT_TIMEOUT="3")
    cluster.start(
        [*SUM, str(tmp_path / "o"), "2", "100"], env={1: {"PYTIMELY_SECRET": "not-the-secret-but-long-enough"}}
    )
    (c0, _, e0), (c1, _, e1) = cluster.wait()
    assert c0 == 1 and c1 == 1
    assert "AuthenticationError" in e1 and "refused this process's proof of the cluster secret" in e1
    assert "refused a connection" in e0
    assert "never connected" in e0


def test_strangers_are_refused_and_logged_while_the_cluster_runs(tmp_path: Path) -> None:
    out = tmp_path / "sums.csv"
    cluster = Cluster(2)
    p0 = cluster.start([*SUM, str(out), "3", "1000"], only=[0])[0]
    # One stranger speaks gibberish, one knows the protocol but not the secret.
    for _ in range(400):
        try:
            junk = socket.create_connection(cluster.hosts[0], timeout=5)
            break
        except OSError:
            time.sleep(0.05)
    else:
        pytest.fail("process 0 never listened")
    junk.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\0" * 80)
    junk.close()
    impostor = socket.create_connection(cluster.hosts[0], timeout=5)
    with pytest.raises(AuthenticationError, match="refused this process's proof"):
        connect_peer(impostor, b"a guess, long enough", 1, 0, 2)
    impostor.close()
    cluster.start([*SUM, str(out), "3", "1000"], only=[1])
    results = cluster.wait()
    assert [r[0] for r in results] == [0, 0], report(results)
    assert results[0][2].count("refused a connection") >= 2
    assert read_sums(out) == expected_sums(3, 1000)
    assert p0.returncode == 0


def test_missing_secret_and_bad_layout_are_usage_errors(tmp_path: Path) -> None:
    cluster = Cluster(2)
    cluster.start(
        [*SUM, str(tmp_path / "o"), "1", "10"], env={0: {"PYTIMELY_SECRET": ""}, 1: {"PYTIMELY_PROCESS": "5"}}
    )
    (c0, _, e0), (c1, _, e1) = cluster.wait(timeout=30)
    assert c0 == 2 and "shared secret" in e0
    assert c1 == 2 and "not in 0..1" in e1


def test_processes_running_different_dataflows_are_stopped(tmp_path: Path) -> None:
    cluster = Cluster(2, PYTIMELY_CONNECT_TIMEOUT="10")
    cluster.start(["tests.cluster.jobs:mismatch"])
    (c0, _, e0), (c1, _, _e1) = cluster.wait(timeout=60)
    assert c0 == 1 and c1 == 1
    assert "UnknownChannelError" in e0 and "no worker here opens" in e0 and "channel 0.2" in e0, e0


def test_a_slow_receiver_slows_its_sender_instead_of_growing_memory(tmp_path: Path) -> None:
    window = 1 << 20
    rows = 32 * 1024  # 256 KiB per batch
    cluster = Cluster(2, PYTIMELY_SEND_WINDOW=str(window), PYTIMELY_RECV_WINDOW=str(window))
    out = tmp_path / "stats"
    cluster.start(["tests.cluster.jobs:flood", str(out), "60", str(rows), "0.01"])
    results = cluster.wait(timeout=120)
    assert [r[0] for r in results] == [0, 0], report(results)
    stats = {s["worker"]: s for s in (json.loads(p.read_text()) for p in tmp_path.glob("stats.*.json"))}
    sender, receiver = stats[1], stats[0]
    link = sender["links"]["0"]
    batch = rows * 8 + 1024
    assert link["bytes_sent"] > 60 * rows * 8  # everything went through...
    assert link["waits"] > 0  # ...but the sender had to wait for the receiver
    assert link["max_queued"] <= window + batch
    assert receiver["max_unconsumed"] <= window + 2 * batch
