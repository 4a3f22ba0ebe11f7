"""Recovery at the command line: ``launch --recovery`` (with ``--elastic`` too), ``run --recovery``, the examples'
``--recovery``: typed failures with exit status 2 and no traceback, refusals naming what differs, the trust
model in the help."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    for name in ("PYTIMELY_RECOVERY", "PYTIMELY_RECOVERY_MODE", "PYTIMELY_RECOVERY_KEY_FILE"):
        env.pop(name, None)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=240, env=env, check=False,
                          cwd=ROOT)


def _files(store: Path) -> list[tuple[Path, bytes]]:
    return sorted((p.relative_to(store), p.read_bytes()) for p in store.rglob("*") if p.is_file())


def test_launch_refuses_a_store_it_cannot_write_before_starting_anything(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    result = _run("-m", "pytimely", "launch", "-n", "2", "--recovery", str(tmp_path / "no" / "store"), "--",
                  sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert result.returncode == 2
    assert "does not exist" in result.stderr and "Traceback" not in result.stderr
    assert not marker.exists()


def test_launch_with_elastic_and_recovery_hands_the_store_to_every_process(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    seen.mkdir()
    script = (
        "import os, pathlib; p = os.environ['PYTIMELY_PROCESS']; "
        f"pathlib.Path({str(seen)!r}, p).write_text(os.environ['PYTIMELY_RECOVERY'] + ' ' + "
        "os.environ['PYTIMELY_RECOVERY_MODE'] + ' ' + os.environ['PYTIMELY_ELASTIC'])"
    )
    result = _run("-m", "pytimely", "launch", "-n", "2", "--elastic", "--recovery", str(tmp_path / "s"),
                  "--recovery-mode", "fresh", "--", sys.executable, "-c", script)
    assert result.returncode == 0, result.stderr
    assert sorted(p.read_text() for p in seen.iterdir()) == [f"{tmp_path / 's'} fresh 1"] * 2


def test_the_help_states_the_trust_model(tmp_path: Path) -> None:
    for args in (("-m", "pytimely", "launch", "--help"), (str(ROOT / "examples" / "wordcount.py"), "--help"),
                 (str(ROOT / "examples" / "wcc.py"), "--help"), ("-m", "pytimely", "run", "--help")):
        text = " ".join(_run(*args).stdout.split())
        assert "Snapshots are pickles: a store is trusted like this program's own files, unless it is sealed with" \
            " --recovery-key-file" in text, args


def test_a_store_of_another_job_is_refused_by_name_and_left_as_it_was(tmp_path: Path) -> None:
    text = tmp_path / "t.txt"
    text.write_text("a b c a\nb a\n")
    edges = tmp_path / "e.csv"
    edges.write_text("src,dst,epoch\n1,2,0\n2,3,1\n")
    store = tmp_path / "store"
    first = _run(str(ROOT / "examples" / "wcc.py"), "--edges", str(edges), "--epochs", "-q", "--recovery", str(store),
                 "--output", str(tmp_path / "c.csv"))
    assert first.returncode == 0, first.stderr
    before = _files(store)
    second = _run(str(ROOT / "examples" / "wordcount.py"), "--input", str(text), "--epochs", "2", "-q",
                  "--recovery", str(store), "--output", str(tmp_path / "w.txt"))
    assert second.returncode == 2
    assert "belongs to job 'wcc', not 'wordcount'" in second.stderr and "Traceback" not in second.stderr
    assert _files(store) == before
    assert not (tmp_path / "w.txt").exists()


def test_store_reuse_with_another_input_or_epoch_count_is_refused_until_asked_to_start_over(tmp_path: Path) -> None:
    text = tmp_path / "t.txt"
    text.write_text("a b c a\nb a\n" * 20)
    store, out = tmp_path / "store", tmp_path / "w.txt"

    def wordcount(*extra: str) -> subprocess.CompletedProcess[str]:
        return _run(str(ROOT / "examples" / "wordcount.py"), "--input", str(text), "-q", "--recovery", str(store),
                    "--output", str(out), *extra)

    assert wordcount("--epochs", "4").returncode == 0
    before = _files(store)
    other_epochs = wordcount("--epochs", "8")
    assert other_epochs.returncode == 2 and "Traceback" not in other_epochs.stderr
    assert "written with epochs = 4, this run has epochs = 8" in other_epochs.stderr
    text.write_text("a b c a\nb a\nd\n" * 20)
    other_input = wordcount("--epochs", "4")
    assert other_input.returncode == 2 and "input 'text' differs in content" in other_input.stderr
    assert _files(store) == before
    fresh = wordcount("--epochs", "8", "--recovery-mode", "fresh")
    assert fresh.returncode == 0, fresh.stderr
    assert out.read_text() == "a\t60\nb\t40\nc\t20\nd\t20\n"


def test_run_takes_recovery_for_any_job_and_a_finished_run_resumes_at_the_end(tmp_path: Path) -> None:
    store = tmp_path / "store"
    first = _run("-m", "pytimely", "run", "-w", "2", "--recovery", str(store), "tests.recovery.jobs:cli_job")
    assert first.returncode == 0, first.stderr
    assert "worker 0: 240" in first.stdout
    again = _run("-m", "pytimely", "run", "-w", "3", "--recovery", str(store), "tests.recovery.jobs:cli_job")
    assert again.returncode == 0, again.stderr
    assert "resumed at the end" in again.stderr and "worker 0: 240" in again.stdout
    other = _run("-m", "pytimely", "run", "--recovery", str(store), "tests.recovery.jobs:other_job")
    assert other.returncode == 2 and "belongs to job 'tests.recovery.jobs:cli_job'" in other.stderr


def test_a_bad_key_file_is_a_usage_error(tmp_path: Path) -> None:
    short = tmp_path / "key"
    short.write_bytes(b"short")
    result = _run("-m", "pytimely", "launch", "-n", "1", "--recovery", str(tmp_path / "s"), "--recovery-key-file",
                  str(short), "--", "true")
    assert result.returncode == 2 and "at least 16 are needed" in result.stderr and "Traceback" not in result.stderr
