"""What the benchmarks share: their common command-line flags, timing a measurement as the best of several runs,
alone or taking turns with others, and reporting what they measured (JSON lines or Markdown tables, and plots).

A benchmark builds its command line with :func:`parser` (``--quick``, ``--json``, ``--runs N`` when it takes runs,
``--png``/``--svg PATH`` when it draws plots), describes its table as :class:`Column` specs and hands its rows to
:func:`report`, which prints either the JSON lines (the facts first: :func:`machine` and the benchmark's own) or
the machine line and the tables.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import platform
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Column",
    "Row",
    "Table",
    "best_of",
    "machine",
    "machine_line",
    "parser",
    "print_json",
    "render",
    "report",
    "runs_of",
    "save_png",
    "save_svg",
    "taking_turns",
]

Row = dict[str, Any]
"""One measured row: what ``--json`` prints as one object, and what a table shows as one line."""

MATPLOTLIB_MISSING = "--png needs matplotlib: pip install -e '.[bench]'"


def best_of(runs: int, f: Callable[[], Any]) -> tuple[float, Any]:
    """The fastest of ``runs`` timings of ``f()`` (at least one) and its last result."""
    best, result = float("inf"), None
    for _ in range(max(1, runs)):
        started = time.perf_counter()
        result = f()
        best = min(best, time.perf_counter() - started)
    return best, result


def taking_turns(runs: int, measures: Mapping[str, Callable[[], Any]], key: Callable[[Any], float]) -> dict[str, Any]:
    """Per measure, the result with the smallest ``key`` of ``runs`` rounds (at least one) in which every measure
    runs once, in the order given.

    A ratio of two figures taken this way compares runs made side by side: on a machine whose speed drifts
    (cores shared with other machines), figures taken one after the other in blocks also measure the drift.
    """
    best: dict[str, Any] = {}
    for _ in range(max(1, runs)):
        for name, measure in measures.items():
            result = measure()
            if name not in best or key(result) < key(best[name]):
                best[name] = result
    return best


# -- the command line -----------------------------------------------------------------------------------------


class _NeedsMatplotlib(argparse.Action):
    """``--png PATH``, refused when it is parsed (not after minutes of measuring) if matplotlib is missing."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        if importlib.util.find_spec("matplotlib") is None:
            parser.error(MATPLOTLIB_MISSING)
        setattr(namespace, self.dest, values)


def parser(
    doc: str, *, runs: int | None = None, png: str | None = None, svg: str | None = None
) -> argparse.ArgumentParser:
    """A benchmark's command line: ``doc`` as its help, ``--quick`` and ``--json``, ``--runs N`` (default ``runs``)
    when it takes runs, ``--png PATH`` when it draws ``png``, ``--svg PATH`` when it draws ``svg``."""
    made = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    made.add_argument(
        "--quick", action="store_true", help="the smallest sizes, one run each: a smoke run (results, not speed)"
    )
    made.add_argument(
        "--json", action="store_true", help="instead of the tables, one JSON object per line: the facts, then each row"
    )
    if runs is not None:
        made.add_argument(
            "--runs", "--repeat", type=int, default=runs, metavar="N", dest="runs",
            help=f"runs per figure, the best one counts (default {runs}; --quick: 1)",
        )  # fmt: skip
    if png is not None:
        made.add_argument(
            "--png", metavar="PATH", action=_NeedsMatplotlib, help=f"draw {png} to PATH as a PNG (needs matplotlib)"
        )
    if svg is not None:
        made.add_argument("--svg", metavar="PATH", help=f"draw {svg} to PATH as a plain SVG")
    return made


def runs_of(args: argparse.Namespace) -> int:
    """The runs per figure ``args`` ask for: one with ``--quick``, else ``--runs`` (at least one)."""
    return 1 if args.quick else max(1, int(args.runs))


# -- reporting ------------------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """What a figure of this machine depends on: the Python version, the architecture and the CPU count."""
    return {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}


def machine_line() -> str:
    """:func:`machine` in words, for the line above a table."""
    facts = machine()
    return f"Python {facts['python']} on {facts['machine']}, {facts['cpus']} CPUs"


def print_json(rows: Iterable[Mapping[str, Any]], facts: Mapping[str, Any] | None = None) -> None:
    """What ``--json`` prints: ``facts`` (when given) as one JSON object, then one per row, a line each."""
    if facts is not None:
        print(json.dumps(facts))
    for row in rows:
        print(json.dumps(row))


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a Markdown table: its header, the row's value it shows (a key, or a function of the row)
    and how (a format string, or a function of the value); a missing or ``None`` value leaves the cell blank."""

    header: str
    value: str | Callable[[Mapping[str, Any]], Any]
    format: str | Callable[[Any], str] = "{}"

    def cell(self, row: Mapping[str, Any]) -> str:
        """This column's cell of ``row``, its ``|`` escaped."""
        value = row.get(self.value) if isinstance(self.value, str) else self.value(row)
        if value is None:
            return ""
        text = self.format.format(value) if isinstance(self.format, str) else self.format(value)
        return text.replace("|", "\\|")


@dataclass(frozen=True, slots=True)
class Table:
    """A table of a report: its columns, the rows it shows (``None``: every row reported) and a title above it."""

    columns: Sequence[Column]
    rows: Sequence[Mapping[str, Any]] | None = None
    title: str = ""


def _line(cells: Iterable[str]) -> str:
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"


def render(rows: Iterable[Mapping[str, Any]], columns: Sequence[Column]) -> str:
    """``rows`` as a Markdown table of ``columns``: the header line, the separator and a line per row."""
    lines = [_line(c.header for c in columns), "|" + "---|" * len(columns)]
    lines += [_line(c.cell(row) for c in columns) for row in rows]
    return "\n".join(lines)


def report(
    rows: Sequence[Mapping[str, Any]],
    tables: Table | Sequence[Table],
    *,
    as_json: bool,
    facts: Mapping[str, Any] | None = None,
    note: str = "",
) -> None:
    """Print what was measured: with ``as_json``, :func:`machine` and ``facts`` as one JSON object, then a line per
    row; otherwise the machine line (and ``note``), then each table (a title above it, when it has one)."""
    if as_json:
        print_json(rows, {**machine(), **(facts or {})})
        return
    print(f"{machine_line()}; {note}" if note else machine_line())
    for table in [tables] if isinstance(tables, Table) else tables:
        print()
        if table.title:
            print(f"{table.title}\n")
        print(render(rows if table.rows is None else table.rows, table.columns))


# -- plots ----------------------------------------------------------------------------------------------------


def save_png(path: str, draw: Callable[[Any], Any]) -> None:
    """Save as a PNG at ``path`` the figure ``draw(pyplot)`` returns (matplotlib without a display)."""
    try:
        matplotlib = importlib.import_module("matplotlib")
    except ImportError:
        raise SystemExit(MATPLOTLIB_MISSING) from None
    matplotlib.use("Agg")  # no display: the figure only goes to a file
    plt = importlib.import_module("matplotlib.pyplot")

    figure = draw(plt)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def save_svg(path: str, points: Sequence[tuple[Any, float]], *, x_label: str, title: str) -> None:
    """Save at ``path`` a plain SVG of ``points`` (label, value) as a line, labels evenly spaced along x."""
    width, height, pad = 480, 320, 50
    xs = [label for label, _ in points]
    top = max(value for _, value in points) * 1.1

    def x(at: int) -> float:
        return pad + (width - 2 * pad) * (at / max(1, len(xs) - 1))

    def y(value: float) -> float:
        return height - pad - (height - 2 * pad) * value / top

    line = " ".join(f"{x(at):.1f},{y(value):.1f}" for at, (_, value) in enumerate(points))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        'font-size="11">',
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="black"/>',
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>',
        f'<polyline points="{line}" fill="none" stroke="steelblue" stroke-width="2"/>',
        f'<text x="{width / 2}" y="{height - 12}" text-anchor="middle">{x_label}</text>',
        f'<text x="{width / 2}" y="20" text-anchor="middle">{title}</text>',
    ]
    for at, (label, value) in enumerate(points):
        parts.append(f'<circle cx="{x(at):.1f}" cy="{y(value):.1f}" r="3" fill="steelblue"/>')
        parts.append(f'<text x="{x(at):.1f}" y="{height - pad + 14}" text-anchor="middle">{label}</text>')
        parts.append(f'<text x="{x(at) + 4:.1f}" y="{y(value) - 6:.1f}">{value:.0f}</text>')
    parts.append("</svg>")
    Path(path).write_text("\n".join(parts) + "\n")
