"""Processes joining and leaving a running word count over real TCP: the counts are always ``Counter``'s."""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pytimely.membership import RescalePlan
from tests.algorithms.test_union_components import reference_changes
from tests.cluster.bins_jobs import words_for
from tests.cluster.elastic_jobs import edges_for
from tests.cluster.helpers import Cluster, env_for, listen, report, start

EPOCHS, ROWS = 6, 2000


def expected_counts(plan: RescalePlan, epochs: int = EPOCHS, rows: int = ROWS) -> dict[str, int]:
    """What a run without rescaling of the same input gives."""
    return dict(Counter(w for e in range(epochs) for m in plan.members_at(e) for w in words_for(m, e, rows)))


def run_elastic(
    tmp_path: Path,
    text: str,
    *,
    job: str = "word_count",
    rows: int = ROWS,
    initial: int = 2,
    workers: int = 1,
    join_delay: float = 0.0,
    env: dict[str, str] | None = None,
) -> tuple[dict[str, Any], RescalePlan]:
    """Run the elastic word count with ``text`` as its plan; newcomers start ``join_delay`` s after the others."""
    out = tmp_path / "counts.json"
    plan = RescalePlan.parse(text, initial=initial, workers=workers)
    args = [f"tests.cluster.elastic_jobs:{job}", str(out), str(EPOCHS), str(rows), text]
    extra = {"workers": str(workers), "PYTIMELY_ELASTIC": "1", **(env or {})}
    cluster = Cluster(initial, **extra)
    listeners = [listen() for _ in range(plan.processes - initial)]
    hosts = cluster.hosts + [s.getsockname() for s in listeners]
    try:
        cluster.start(args)
        for p in range(initial, plan.processes):
            # One membership change at a time: processes that leave before this one joins are gone first.
            joins = plan.joins_at(p * workers)
            gone = [q for q in range(p) if q not in plan.processes_at(joins)]
            for q in gone:
                cluster.procs[q].wait(60)
            time.sleep(join_delay)
            joiner = env_for(
                p + 1,
                p,
                hosts[: p + 1],
                cluster.secret,
                **extra,
                PYTIMELY_INITIAL=str(initial),
                PYTIMELY_JOIN="1",
                PYTIMELY_LEFT=",".join(map(str, gone)),
            )
            cluster.procs.append(start(args, joiner, listeners[p - initial]))
        results = cluster.wait(float(os.environ.get("ELASTIC_WAIT", "120")))
    finally:
        cluster.kill()
        for listener in listeners:
            listener.close()
    assert [r[0] for r in results] == [0] * len(results), report(results)
    return json.loads(out.read_text()), plan


def newcomer_ids(plan: RescalePlan) -> set[int]:
    """The worker ids of processes that joined."""
    return {m for e in range(EPOCHS) for m in plan.members_at(e) if m >= plan.initial * plan.workers}


def test_a_process_joins_and_leaves_and_the_counts_are_exact(tmp_path: Path) -> None:
    written, plan = run_elastic(tmp_path, "1:+1,3:-1")
    assert written["counts"] == expected_counts(plan)
    # The newcomer's source sent words and its worker counted some bins while it was there.
    assert {int(w) for w in written["emitters"]} >= newcomer_ids(plan) == {2}


def test_a_process_that_joins_on_the_same_host_gets_rings_both_ways(tmp_path: Path) -> None:
    written, plan = run_elastic(tmp_path, "1:+1", env={"RING_STATES": "1"})
    assert written["counts"] == expected_counts(plan)
    states = {w: json.loads((tmp_path / f"counts.json.rings.{w}").read_text()) for w in range(3)}
    # The members' host lists do not name the newcomer: its address on the connection shows it is local.
    assert states[0]["2"] == states[1]["2"] == "ready", states
    assert states[2] == {"0": "ready", "1": "ready"}, states


def test_a_join_while_data_and_progress_are_in_flight(tmp_path: Path) -> None:
    # Two workers per process; the newcomer connects while the first epochs are still being counted.
    written, plan = run_elastic(tmp_path, "2:+1,4:-1", workers=2, join_delay=0.3)
    assert written["counts"] == expected_counts(plan)
    assert {int(w) for w in written["emitters"]} >= {4, 5}


def test_a_leave_while_the_leaver_holds_the_only_capability_at_the_frontier(tmp_path: Path) -> None:
    # The leaver lingers after its last epoch while the others have sent the next one and wait for it.
    written, plan = run_elastic(tmp_path, "0:+1,2:-1", env={"PYTIMELY_LEAVE_DELAY": "1.0"})
    assert written["counts"] == expected_counts(plan)


def test_processes_joining_back_to_back_while_the_one_before_still_bootstraps(tmp_path: Path) -> None:
    # Each joiner starts right after the previous one, so its batches can reach a process still bootstrapping.
    written, plan = run_elastic(tmp_path, "0:+1,1:+1,2:+1", workers=2)
    assert written["counts"] == expected_counts(plan)
    assert {int(w) for w in written["emitters"]} >= newcomer_ids(plan)


def random_plan(seed: int) -> str:
    """Three membership changes at random epochs; never fewer than two processes. A leaver is the newest process or
    one named at random (process 0 included), never process 1, which gathers the output."""
    rng = random.Random(seed)
    epochs = sorted(rng.sample(range(EPOCHS - 1), 3))
    live, fresh, changes = [0, 1], 2, []
    for epoch in epochs:
        if len(live) == 2 or rng.random() < 0.5:
            live.append(fresh)
            fresh += 1
            changes.append(f"{epoch}:+1")
        elif rng.random() < 0.5:
            changes.append(f"{epoch}:-1")
            live.pop()
        else:
            leaver = rng.choice([p for p in live if p != 1])
            live.remove(leaver)
            changes.append(f"{epoch}:-p{leaver}")
    return ",".join(changes)


@pytest.mark.parametrize("seed", [1, 11])  # 11: 1:+1,3:-p0,4:+1 (process 0 leaves)
def test_random_joins_and_leaves_match_the_reference(tmp_path: Path, seed: int) -> None:
    written, plan = run_elastic(tmp_path, random_plan(seed))
    assert written["counts"] == expected_counts(plan)


@pytest.mark.parametrize("seed", [3, 20])  # 20: 1:+1,2:-p2,3:+1 (a newcomer that is not the newest leaves)
def test_components_with_random_joins_and_leaves_match_the_reference(tmp_path: Path, seed: int) -> None:
    rows = 300
    text = random_plan(seed)
    written, plan = run_elastic(tmp_path, text, job="components", rows=rows)
    edges = [[tuple(e) for m in plan.members_at(t) for e in edges_for(m, t, rows).tolist()] for t in range(EPOCHS)]
    got = []
    for t, pairs in enumerate(written["changes"]):
        vertices = [v for v, _ in pairs]
        assert len(vertices) == len(set(vertices)), f"a vertex changed twice at epoch {t}"
        got.append(dict(map(tuple, pairs)))
    assert got == reference_changes(edges), text
    # Components merged across epochs: some label changed after the vertex was first seen.
    assert any(v in set().union(*got[:t]) for t in range(1, EPOCHS) for v in got[t])


def test_wordcount_rescales_under_the_launcher_and_writes_the_reference_counts(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.cluster.helpers import ROOT

    text = tmp_path / "words.txt"
    rng = random.Random(3)
    vocabulary = [f"w{i}" for i in range(500)] + ["é", "日本"]
    text.write_text("\n".join(" ".join(rng.choices(vocabulary, k=8)) for _ in range(4000)), encoding="utf-8")
    out = tmp_path / "counts.tsv"
    command = [sys.executable, str(ROOT / "examples" / "wordcount.py"), "--input", str(text), "--output", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "pytimely", "launch", "-n", "2", "--elastic", "--", *command,
         "--epochs", "6", "--rescale", "1:+1,3:-1"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    expected = Counter(text.read_text(encoding="utf-8").split())
    rows = [line.split("\t") for line in out.read_text(encoding="utf-8").splitlines() if line and line != "word\tcount"]
    assert {w: int(c) for w, c in rows} == dict(expected)


def test_the_control_endpoint_refuses_unsigned_and_replayed_requests() -> None:
    import socket

    from pytimely.errors import MembershipError
    from pytimely.membership import ControlEndpoint, request
    from pytimely.signed_lines import decode, encode

    asked: list[tuple[str, int | None]] = []

    def handle(op: str, process: int | None) -> dict[str, Any]:
        asked.append((op, process))
        return {"process": 7}

    endpoint = ControlEndpoint(b"right secret", handle)
    try:
        assert request("add", address=endpoint.address, secret=b"right secret") == {"process": 7}
        with pytest.raises(MembershipError, match="not signed"):
            request("add", address=endpoint.address, secret=b"wrong secret")
        with pytest.raises(MembershipError, match="unknown operation"):
            request("grow", address=endpoint.address, secret=b"right secret")
        # The same signed line sent twice: the second is refused.
        line = encode(b"right secret", "control", {"op": "remove", "process": 1, "nonce": "n1", "time": time.time()})
        answers = []
        for _ in range(2):
            host, _, port = endpoint.address.rpartition(":")
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                sock.sendall(line)
                answers.append(decode(b"right secret", "control-reply", sock.makefile("rb").readline()))
        assert answers[0] == {"process": 7} and "replayed" in answers[1]["error"]
        assert asked == [("add", None), ("remove", 1)]
    finally:
        endpoint.close()


def test_bad_rescale_plans_are_refused_with_the_reason() -> None:
    from pytimely.errors import MembershipError

    with pytest.raises(MembershipError, match="not EPOCH"):
        RescalePlan.parse("3:+2", initial=2)
    with pytest.raises(MembershipError, match="must not decrease"):
        RescalePlan.parse("3:+1,2:-1", initial=2)
    with pytest.raises(MembershipError, match="no process would be left"):
        RescalePlan.parse("1:-1", initial=1)
    with pytest.raises(MembershipError, match="leaves come before joins"):
        RescalePlan.parse("3:+1,3:-1", initial=2)  # the newcomer would leave before it took part
    same = RescalePlan.parse("1:+1,3:-1,3:+1", initial=2)
    assert [same.processes_at(e) for e in (1, 2, 3, 4)] == [[0, 1], [0, 1, 2], [0, 1, 2], [0, 1, 3]]
    assert same.newcomers_at(4) == [3] and same.leavers_at(4) == [2] and same.newcomers_at(3) == []
    plan = RescalePlan.parse("1:+1,3:-1", initial=2, workers=2)
    assert plan.members_at(1) == [0, 1, 2, 3]
    assert plan.members_at(2) == [0, 1, 2, 3, 4, 5]
    assert plan.members_at(4) == [0, 1, 2, 3]
    assert plan.joins_at(5) == 2


def test_elastic_settings_that_cannot_work_are_refused_with_the_reason() -> None:
    from pytimely.config import Config
    from pytimely.errors import ConfigError

    hosts = (("127.0.0.1", 1), ("127.0.0.1", 2))
    with pytest.raises(ConfigError, match="need an elastic cluster"):
        Config(processes=2, process=1, hosts=hosts, secret=b"s", join=True)
    with pytest.raises(ConfigError, match="at least two workers"):
        Config(processes=1, hosts=hosts[:1], secret=b"s", elastic=True)
    with pytest.raises(ConfigError, match="must be the last"):
        Config(processes=2, process=0, hosts=hosts, secret=b"s", elastic=True, initial=1, join=True)
    with pytest.raises(ConfigError, match="having left"):
        Config(processes=2, process=1, hosts=hosts, secret=b"s", elastic=True, left=(1,))


def test_leaving_a_computation_that_is_not_elastic_is_refused() -> None:
    from pytimely import execute
    from pytimely.errors import MembershipError

    def job(worker: Any) -> None:
        worker.dataflow(lambda scope: scope.new_input()[0])
        with pytest.raises(MembershipError, match="elastic"):
            worker.leave()

    execute(job, 2)


def test_a_leave_that_cannot_finish_runs_out_of_time_naming_what_it_waits_for() -> None:
    cluster = Cluster(2, PYTIMELY_ELASTIC="1")
    try:
        started = time.monotonic()
        cluster.start(["tests.cluster.elastic_jobs:leave_held_back", "1.0"])
        results = cluster.wait(timeout=60)
    finally:
        cluster.kill()
    assert time.monotonic() - started < 25, "the leave waited past its timeout"
    code, _, err = results[1]
    assert code != 0, report(results)
    assert "LeaveTimeoutError" in err and "worker 1 did not leave within 1.0 s" in err, report(results)
    assert "nothing before time 5 to reach it" in err, report(results)


def test_a_newcomer_whose_server_never_answers_runs_out_of_time() -> None:
    cluster = Cluster(2, PYTIMELY_ELASTIC="1")
    listener = listen()
    args = ["tests.cluster.elastic_jobs:bootstrap_starved", "30"]
    try:
        cluster.start(args)
        time.sleep(1.0)  # the first processes are up and asleep
        env = env_for(
            3,
            2,
            [*cluster.hosts, listener.getsockname()],
            cluster.secret,
            PYTIMELY_ELASTIC="1",
            PYTIMELY_INITIAL="2",
            PYTIMELY_JOIN="1",
            PYTIMELY_CONNECT_TIMEOUT="2",
        )
        started = time.monotonic()
        newcomer = start(args, env, listener)
        try:
            _, err = newcomer.communicate(timeout=25)
        finally:
            if newcomer.poll() is None:
                newcomer.kill()
                newcomer.communicate()
    finally:
        cluster.kill()
        listener.close()
    assert newcomer.returncode != 0 and time.monotonic() - started < 20, err
    assert "JoinTimeoutError" in err and "no progress state for dataflow" in err and "within 2 s" in err, err


def test_an_elastic_run_puts_back_the_callers_sigusr1_handler() -> None:
    """``run_process`` listens for SIGUSR1 only while it runs (``launch --elastic``'s request to leave)."""
    import signal
    import socket

    from pytimely.config import Config
    from pytimely.execute import run_process

    def mine(signum: int, frame: Any) -> None:
        """The caller's own handler."""

    listener = socket.create_server(("127.0.0.1", 0))
    hosts = (("127.0.0.1", listener.getsockname()[1]),)
    config = Config(processes=1, workers=2, hosts=hosts, secret=b"k" * 32, elastic=True)
    during: list[Any] = []
    before = signal.signal(signal.SIGUSR1, mine)
    try:

        def job(worker: Any) -> int:
            during.append(signal.getsignal(signal.SIGUSR1))
            return worker.index

        assert run_process(job, config, listener=listener) == [0, 1]
        assert signal.getsignal(signal.SIGUSR1) is mine
        assert during and all(handler is not mine for handler in during)
    finally:
        signal.signal(signal.SIGUSR1, before)
