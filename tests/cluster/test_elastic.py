"""Processes joining and leaving a running word count over real TCP: the counts are always ``Counter``'s."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from pytimely.cli import _free_ports
from pytimely.membership import RescalePlan
from tests.cluster.bins_jobs import words_for
from tests.cluster.helpers import Cluster, env_for, start


def expected_counts(plan: RescalePlan, epochs: int, rows: int) -> dict[str, int]:
    """What a run without rescaling of the same input gives."""
    return dict(Counter(w for e in range(epochs) for m in plan.members_at(e) for w in words_for(m, e, rows)))


def run_elastic(
    tmp_path: Path,
    text: str,
    *,
    initial: int = 2,
    workers: int = 1,
    epochs: int = 6,
    rows: int = 2000,
    join_delay: float = 0.0,
) -> tuple[dict[str, object], RescalePlan, list[tuple[int, str, str]]]:
    """Run the elastic word count with ``text`` as its plan; newcomers start ``join_delay`` s after the others."""
    out = tmp_path / "counts.json"
    plan = RescalePlan.parse(text, initial=initial, workers=workers)
    args = ["tests.cluster.elastic_jobs:word_count", str(out), str(epochs), str(rows), text]
    cluster = Cluster(initial, workers=str(workers), PYTIMELY_ELASTIC="1")
    extra_ports = _free_ports(plan.processes - initial)
    hosts = cluster.hosts + [("127.0.0.1", p) for p in extra_ports]
    try:
        cluster.start(args)
        time.sleep(join_delay)
        for p in range(initial, plan.processes):
            env = env_for(p + 1, p, hosts[: p + 1], cluster.secret, workers=str(workers), PYTIMELY_ELASTIC="1",
                          PYTIMELY_INITIAL=str(initial), PYTIMELY_JOIN="1")
            cluster.procs.append(start(args, env))
        results = cluster.wait(float(__import__("os").environ.get("ELASTIC_WAIT", "120")))
    finally:
        cluster.kill()
    assert [r[0] for r in results] == [0] * len(results), results
    return json.loads(out.read_text()), plan, results


def test_a_process_joins_and_leaves_and_the_counts_are_exact(tmp_path: Path) -> None:
    counts, plan, _ = run_elastic(tmp_path, "1:+1,3:-1")
    assert counts == expected_counts(plan, 6, 2000)
