"""The WCC example: workers coordinated only by progress tracking compute the right components."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "wcc_progress.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("wcc_progress", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["wcc_progress"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("mode", ["demand", "eager"])
@pytest.mark.parametrize("seed", [0, 7])
def test_components_match_union_find(workers: int, mode: str, seed: int, capsys: pytest.CaptureFixture[str]) -> None:
    wcc = load()
    code = wcc.main(["--vertices", "400", "--edges", "500", "--workers", str(workers), "--mode", mode,
                     "--seed", str(seed)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "agrees with union-find: yes" in out
    checked = int(out.split("updates; ")[1].split(" deliveries")[0])
    assert checked > 0


def test_labels_equal_the_smallest_vertex_of_each_component() -> None:
    wcc = load()
    edges = [(5, 3), (3, 9), (1, 2), (8, 8), (4, 7), (7, 6)]
    labels = wcc.Simulation(edges, 2, wcc.ProgressMode.DEMAND, seed=3).run()
    assert labels == {5: 3, 3: 3, 9: 3, 1: 1, 2: 1, 8: 8, 4: 4, 7: 4, 6: 4}


def test_a_tracker_that_misses_a_message_is_caught() -> None:
    wcc = load()
    sim = wcc.Simulation([(0, 1)], 2, wcc.ProgressMode.EAGER, seed=1)
    worker = sim.workers[0]
    target = sim.locs["b.1"]
    with pytest.raises(wcc.SafetyViolation, match="past its frontier"):
        worker.receive(target, wcc.Product(5, 0), [])  # (5, 0) is not at or beyond the frontier {(0, 1)}


def test_bad_arguments_exit_with_usage_error() -> None:
    result = subprocess.run([sys.executable, str(EXAMPLE), "--workers", "0"], capture_output=True, text=True)
    assert result.returncode == 2
    assert "--workers" in result.stderr
