"""Read event logs written as JSON lines (:class:`pytimely.observe.eventlog.JsonLines`) into a per-operator table.

``pytimely log-summary FILE...`` (or ``python -m pytimely.observe.logsummary FILE...``) prints, per dataflow and
operator, summed over every worker whose file is given: how often its logic ran and for how long, the
records it took in and sent out, and the longest time one of its input frontiers stayed at one value,
with the capability whose drop finally moved it (the operator output and time that held it).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytimely.errors import InputFormatError

__all__ = ["OperatorSummary", "format_table", "main", "read_events", "summarize"]


@dataclass(slots=True)
class OperatorSummary:
    """What one operator did, summed over workers."""

    dataflow: str
    op: int
    name: str
    schedules: int = 0
    busy: float = 0.0
    records_in: int = 0
    records_out: int = 0
    held_for: float = 0.0
    """The longest time one input frontier of one worker stayed at one value (seconds)."""
    held_at: str = ""
    """That frontier."""
    held_by: str = ""
    """The capability (operator, output, time) whose drop moved it, if the log shows one."""


def read_events(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every event in the files at ``paths``; :class:`InputFormatError` names a line that is not an event."""
    events = []
    for path in paths:
        try:
            handle = open(path, encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise InputFormatError(f"cannot read event log {str(path)!r}: {exc.strerror}") from exc
        with handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InputFormatError(f"{path}, line {number}: not a JSON event ({exc.msg})") from exc
                if not isinstance(event, dict) or "event" not in event or "worker" not in event:
                    raise InputFormatError(f"{path}, line {number}: not an event (no 'event' and 'worker' fields)")
                events.append(event)
    events.sort(key=lambda e: e.get("at", 0.0))
    return events


def summarize(events: Sequence[dict[str, Any]]) -> list[OperatorSummary]:
    """The per-operator table of ``events`` (in time order), sorted by dataflow and operator index."""
    table: dict[tuple[str, int], OperatorSummary] = {}

    def row(dataflow: str, op: int) -> OperatorSummary:
        summary = table.get((dataflow, op))
        if summary is None:
            summary = table[(dataflow, op)] = OperatorSummary(dataflow, op, "")
        return summary

    since: dict[tuple[int, str, int, int], tuple[str, float]] = {}
    drops: dict[tuple[str, str], tuple[int, int]] = {}
    """The last drop of a capability, by dataflow and time (as text): operator and output."""
    for event in events:
        kind = event["event"]
        dataflow = event.get("dataflow", "")
        if kind == "operates":
            row(dataflow, event["op"]).name = event["name"]
        elif kind == "schedule":
            summary = row(dataflow, event["op"])
            summary.schedules += 1
            summary.busy += event["duration"]
        elif kind == "messages":
            summary = row(dataflow, event["op"])
            if event["direction"] == "received":
                summary.records_in += event["records"]
            else:
                summary.records_out += event["records"]
        elif kind == "capability" and event["diff"] < 0:
            drops[(dataflow, _text(event["time"]))] = (event["op"], event["port"])
        elif kind == "frontier":
            key = (event["worker"], dataflow, event["op"], event["port"])
            before = since.get(key)
            frontier = _text(event["frontier"])
            since[key] = (frontier, event["at"])
            if before is None:
                continue
            held, start = before
            summary = row(dataflow, event["op"])
            if event["at"] - start > summary.held_for:
                summary.held_for = event["at"] - start
                summary.held_at = held
                summary.held_by = _holder(drops, dataflow, held, table)
    return [table[key] for key in sorted(table)]


def _text(value: Any) -> str:
    """A time or frontier as the log shows it (JSON files write times with ``repr`` when they are not JSON)."""
    return value if isinstance(value, str) else json.dumps(value, default=repr)


def _holder(
    drops: dict[tuple[str, str], tuple[int, int]], dataflow: str, frontier: str, table: dict[tuple[str, int], Any]
) -> str:
    """The last capability dropped at a time of ``frontier``: what held it there."""
    try:
        times = json.loads(frontier)
    except json.JSONDecodeError:
        return ""
    for t in times if isinstance(times, list) else []:
        drop = drops.get((dataflow, _text(t)))
        if drop is not None:
            op, port = drop
            name = table[(dataflow, op)].name if (dataflow, op) in table else ""
            return f"{op}:{name} output {port} at {_text(t)}"
    return ""


def format_table(rows: Sequence[OperatorSummary]) -> str:
    """``rows`` as an aligned text table."""
    header = ("dataflow", "op", "operator", "runs", "busy s", "records in", "records out", "longest hold")
    lines = [header]
    for r in rows:
        hold = f"{r.held_for:.3f}s at {r.held_at}" + (f" by {r.held_by}" if r.held_by else "") if r.held_at else ""
        lines.append((
            r.dataflow, str(r.op), r.name, str(r.schedules), f"{r.busy:.4f}", str(r.records_in), str(r.records_out),
            hold,
        ))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line[:-1], widths, strict=True)) + "  " + line[-1]
        for line in lines
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``pytimely log-summary FILE...``: print the per-operator table of event-log files."""
    parser = argparse.ArgumentParser(
        prog="pytimely log-summary", description="Summarise event logs (PYTIMELY_LOG files) per operator."
    )
    parser.add_argument("files", nargs="+", help="JSON-lines event logs, one per worker")
    args = parser.parse_args(argv)
    try:
        rows = summarize(read_events(args.files))
    except InputFormatError as exc:
        print(f"pytimely log-summary: {exc}", file=sys.stderr)
        return 2
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
