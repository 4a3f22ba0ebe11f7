"""``pytimely launch --recovery`` and the examples' ``--recovery`` at the command line: typed failures, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("PYTIMELY_RECOVERY", None)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=240, env=env, check=False)


def test_launch_refuses_a_store_it_cannot_write_before_starting_anything(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    result = _run("-m", "pytimely", "launch", "-n", "2", "--recovery", str(tmp_path / "no" / "store"), "--",
                  sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert result.returncode == 2
    assert "does not exist" in result.stderr and "Traceback" not in result.stderr
    assert not marker.exists()


def test_launch_refuses_recovery_with_elastic(tmp_path: Path) -> None:
    result = _run("-m", "pytimely", "launch", "-n", "2", "--elastic", "--recovery", str(tmp_path / "s"), "--", "true")
    assert result.returncode == 2
    assert "--elastic" in result.stderr


def test_a_store_of_another_job_is_refused_by_name_and_left_as_it_was(tmp_path: Path) -> None:
    text = tmp_path / "t.txt"
    text.write_text("a b c a\nb a\n")
    edges = tmp_path / "e.csv"
    edges.write_text("src,dst,epoch\n1,2,0\n2,3,1\n")
    store = tmp_path / "store"
    first = _run(str(ROOT / "examples" / "wcc.py"), "--edges", str(edges), "--epochs", "-q", "--recovery", str(store),
                 "--output", str(tmp_path / "c.csv"))
    assert first.returncode == 0, first.stderr
    before = sorted((p.relative_to(store), p.read_bytes()) for p in store.rglob("*") if p.is_file())
    second = _run(str(ROOT / "examples" / "wordcount.py"), "--input", str(text), "--epochs", "2", "-q",
                  "--recovery", str(store), "--output", str(tmp_path / "w.txt"))
    assert second.returncode == 2
    assert "belongs to job 'wcc', not 'wordcount'" in second.stderr and "Traceback" not in second.stderr
    assert sorted((p.relative_to(store), p.read_bytes()) for p in store.rglob("*") if p.is_file()) == before
    assert not (tmp_path / "w.txt").exists()
