"""Atomic writes: a writer killed mid-write leaves a temporary file that the next write of the target removes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytimely.atomic import atomic_output, remove_stale, temporary_name, write_atomic
from pytimely.errors import InvalidArgument

# Writes half its output, says so, then waits for a line on stdin that never comes (the test kills it).
WRITER = """
import sys
from pytimely.atomic import atomic_output
with atomic_output(sys.argv[1]) as out:
    out.write("partial\\n" * 1000)
    out.flush()
    print("writing", flush=True)
    sys.stdin.readline()
"""


def start_writer(target: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(target)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "writing\n"
    return proc


def temporaries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    proc = start_writer(target)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    left = temporaries(tmp_path)
    assert len(left) == 1 and left[0].startswith(".out.csv.") and f".{proc.pid}." in left[0]
    assert not target.exists()
    with atomic_output(target) as out:
        out.write("complete\n")
    assert temporaries(tmp_path) == []
    assert target.read_text() == "complete\n"


def test_a_running_writers_temporary_file_is_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    proc = start_writer(target)
    try:
        write_atomic(target, "mine\n")
        assert len(temporaries(tmp_path)) == 1  # still being written by a live process
        assert target.read_text() == "mine\n"
    finally:
        proc.kill()
        proc.wait(timeout=60)


def test_only_its_own_pattern_and_target_are_touched(tmp_path: Path) -> None:
    target = tmp_path / "a.csv"
    dead = 2**22 + 12345  # above Linux's default pid_max, so no process has it
    own_dead = temporary_name(target).name.split(".")
    own_dead[-3] = str(dead)
    names = {
        ".".join(own_dead): False,  # this host, pid gone: removed
        f".a.csv.otherhost.{dead}.0123456789abcdef.tmp": True,  # another host, recent: kept
        ".a.csv.x." + ".".join(own_dead[3:]): True,  # the same for target "a.csv.x": kept
        f".a.csv.{dead}.tmp": True,  # not our pattern: kept
        "a.csv.tmp": True,
    }
    for name in names:
        (tmp_path / name).write_text("x")
    removed = remove_stale(target)
    assert [p.name for p in removed] == [n for n, kept in names.items() if not kept]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(n for n, kept in names.items() if kept)


def test_another_hosts_old_temporary_file_counts_as_abandoned(tmp_path: Path) -> None:
    target = tmp_path / "a.csv"
    old = tmp_path / ".a.csv.otherhost.77.0123456789abcdef.tmp"
    old.write_text("x")
    week_ago = time.time() - 7 * 24 * 3600
    os.utime(old, (week_ago, week_ago))
    assert remove_stale(target) == [old]


def test_a_failing_block_leaves_neither_output_nor_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    with pytest.raises(RuntimeError), atomic_output(target, "wb") as out:
        out.write(b"half")
        raise RuntimeError("stop")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(InvalidArgument):
        atomic_output(target, "a").__enter__()


def test_a_durable_write_lands_whole(tmp_path: Path) -> None:
    target = tmp_path / "marker"
    write_atomic(target, b"\x00" * 5000, durable=True)
    write_atomic(target, "second", durable=True)
    assert target.read_text() == "second" and temporaries(tmp_path) == []
