"""The command line, through a subprocess: exit statuses 0, 1 and 2 and what it prints."""

from __future__ import annotations

import subprocess
import sys

from pytimely.verify.__main__ import main


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytimely.verify", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_no_violation_exit_0() -> None:
    p = run("clocks", "--depth", "3")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "states explored:" in out and "transitions:" in out and "states/second:" in out
    assert "time:" in out and out.rstrip().endswith("no violation")


def test_each_model_runs() -> None:
    for model, depth in (("exchange", "2"), ("propagation", "3"), ("combined", "2")):
        p = run(model, "--depth", depth)
        assert p.returncode == 0, (model, p.stdout, p.stderr)


def test_violation_exit_1_with_trace() -> None:
    p = run("exchange", "--mutant", "send-unjustified", "--invariant", "Safe")
    assert p.returncode == 1, p.stderr
    lines = p.stdout.splitlines()
    assert "violation of Safe" in lines
    steps = [l for l in lines if l.startswith("   ") and "=>" in l]
    assert len(steps) == 4  # the initial state and three steps
    assert "init" in steps[0] and "perf_op" in steps[1] and "send_upd" in steps[2] and "recv_upd" in steps[3]


def test_mutant_default_config_and_workers() -> None:
    p = run("combined", "--mutant", "drop-summary", "--workers", "3")
    assert p.returncode == 1
    assert "config: pair" in p.stdout and "workers: 3" in p.stdout and "violation of Safe" in p.stdout
    p = run("propagation", "--mutant", "propagate-nonminimal")
    assert p.returncode == 1 and "violation of PropagateMonotone" in p.stdout


def test_bad_arguments_exit_2() -> None:
    for args in (
        ("nosuchmodel",),
        ("exchange", "--mutant", "nope"),
        ("exchange", "--mutant", "drop-summary"),
        ("clocks", "--config", "wcc"),
        ("propagation", "--workers", "2"),
        ("exchange", "--depth", "x"),
        ("exchange", "--invariant", "NoSuchInvariant", "--depth", "1"),
        (),
    ):
        p = run(*args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert "error" in p.stderr


def test_list() -> None:
    p = run("--list")
    assert p.returncode == 0
    for word in ("clocks", "exchange", "propagation", "combined", "wcc", "nested", "mint-equal", "drop-summary"):
        assert word in p.stdout


def test_main_in_process(capsys: object) -> None:
    assert main(["propagation", "--config", "chain", "--depth", "2"]) == 0
    assert main(["propagation", "--config", "wcc", "--mutant", "drop-summary"]) == 1
