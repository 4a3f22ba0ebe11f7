"""Under a rescaling run the event log records each join and leave, in every process's files."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from pytimely.observe.logsummary import read_events
from tests.cluster.helpers import ROOT


@pytest.mark.timeout(300)
def test_joins_and_leaves_are_logged(tmp_path: Path) -> None:
    text = tmp_path / "words.txt"
    rng = random.Random(3)
    text.write_text("\n".join(" ".join(rng.choices([f"w{i}" for i in range(300)], k=8)) for _ in range(2000)))
    command = [sys.executable, str(ROOT / "examples" / "wordcount.py"), "--input", str(text), "--output",
               str(tmp_path / "counts.tsv"), "--epochs", "6", "--rescale", "1:+1,3:-1"]
    done = subprocess.run(
        [sys.executable, "-m", "pytimely", "launch", "-n", "2", "--elastic", "--", *command],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
        env={**os.environ, "PYTIMELY_LOG": str(tmp_path / "log")},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    paths = sorted(tmp_path.glob("log.w*.jsonl"))
    assert [p.name for p in paths] == ["log.w0.jsonl", "log.w1.jsonl", "log.w2.jsonl"]  # the newcomer's too
    events = read_events(paths)
    seen = Counter((e["worker"], e["kind"], tuple(e["workers"])) for e in events if e["event"] == "membership")
    # Both first workers saw worker 2 join and leave.
    assert {(0, "join", (2,)), (1, "join", (2,)), (0, "leave", (2,)), (1, "leave", (2,))} <= set(seen)
