"""Bins moving between two real processes mid-stream: the counts are those of ``Counter``."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from pytimely.dataflow.bins import BinTable, bin_of
from tests.cluster.bins_jobs import moves_at, words_for
from tests.cluster.helpers import Cluster, report


def test_word_counts_survive_bins_moving_between_processes(tmp_path: Path) -> None:
    out = tmp_path / "counts.json"
    epochs, rows = 6, 3000
    cluster = Cluster(2)
    cluster.start(["tests.cluster.bins_jobs:moving_count", str(out), str(epochs), str(rows)])
    results = cluster.wait(120)
    assert [r[0] for r in results] == [0, 0], report(results)
    written = json.loads(out.read_text())
    expected = Counter(w for worker in range(2) for e in range(epochs) for w in words_for(worker, e, rows))
    assert written["counts"] == dict(expected)

    table = BinTable.default(2)
    table.schedule(m for e in range(epochs) for m in moves_at(e, 2))
    changed = 0
    for word, emitters in written["emitters"].items():
        for t, worker in emitters:
            assert worker == table.owner(bin_of(word), t), (word, t, worker)
        changed += len({worker for _, worker in emitters}) > 1
    assert changed > 100  # most words were counted on both processes, their counts carried across
