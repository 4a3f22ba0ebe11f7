"""The benchmarks' harness: its Markdown tables, the switch between JSON lines and tables, the common flags and
the SVG plot."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import harness
from harness import Column, Table, parser, render, report, runs_of, save_svg

ROWS = [
    {"id": "a", "workload": "map", "seconds": 1.23456, "speedup": 2.0},
    {"id": "d", "workload": "latency | p50", "p50_ms": 0.5},
]
COLUMNS = [
    Column("", "id"),
    Column("workload", "workload"),
    Column("pytimely", lambda r: r.get("seconds") or f"p50 {r['p50_ms']} ms", "{}"),
    Column("speed-up", "speedup", lambda v: f"{v:.2f}x"),
    Column("seconds", "seconds", "{:.3f} s"),
]


def test_render_lays_out_header_separator_and_cells() -> None:
    """Formats apply, a missing value leaves its cell blank, a ``|`` inside a cell is escaped."""
    assert render(ROWS, COLUMNS).splitlines() == [
        "| | workload | pytimely | speed-up | seconds |",
        "|---|---|---|---|---|",
        "| a | map | 1.23456 | 2.00x | 1.235 s |",
        "| d | latency \\| p50 | p50 0.5 ms | | |",
    ]


def test_report_prints_json_lines_with_the_facts_first(capsys: pytest.CaptureFixture[str]) -> None:
    report(ROWS, Table(COLUMNS), as_json=True, facts={"slots": 2}, note="best of 3")
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == [{**harness.machine(), "slots": 2}, *ROWS]


def test_report_prints_the_machine_line_and_each_table(capsys: pytest.CaptureFixture[str]) -> None:
    tables = [Table(COLUMNS), Table(COLUMNS[:2], rows=ROWS[1:], title="latency only")]
    report(ROWS, tables, as_json=False, facts={"slots": 2}, note="best of 3")
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"{harness.machine_line()}; best of 3"
    assert "{" not in out
    assert f"\n\n{render(ROWS, COLUMNS)}\n\nlatency only\n\n{render(ROWS[1:], COLUMNS[:2])}\n" in out


def test_parser_adds_the_common_flags() -> None:
    made = parser("doc", runs=5)
    args = made.parse_args(["--json", "--repeat", "2"])
    assert (args.quick, args.json, args.runs, runs_of(args)) == (False, True, 2, 2)
    assert runs_of(made.parse_args(["--quick"])) == 1
    assert made.parse_args([]).runs == 5
    plain = parser("doc").parse_args([])
    assert not hasattr(plain, "runs") and not hasattr(plain, "png")


def test_png_is_refused_at_once_without_matplotlib(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    made = parser("doc", png="a plot", svg="a plot")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(SystemExit):
        made.parse_args(["--png", "out.png"])
    assert "needs matplotlib" in capsys.readouterr().err
    assert made.parse_args(["--svg", "out.svg"]).svg == "out.svg"


def test_save_svg_draws_every_point(tmp_path: Path) -> None:
    path = tmp_path / "plot.svg"
    save_svg(str(path), [(2, 100.0), (4, 400.0), (8, 900.0)], x_label="processes", title="bytes")
    text = path.read_text()
    assert text.startswith("<svg") and text.rstrip().endswith("</svg>")
    assert text.count("<circle") == 3 and ">900</text>" in text and ">processes</text>" in text
