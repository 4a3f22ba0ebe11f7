"""Count events per key in tumbling, sliding or session windows of event time.

    python examples/windows.py --input EVENTS --output OUT (--tumbling S | --sliding S,D | --session G) [-w N]

EVENTS is CSV with the header ``time,key``: an integer event time >= 0 and a key per line, in any order.
OUT is CSV ``start,end,key,count`` (with that header), one row per window holding an event, sorted by its
columns: tumbling windows ``[k*S, (k+1)*S)``, sliding windows ``[k*D, k*D+S)`` for every ``k >= 0``, and per-key
sessions ``[first, last+1)`` in which consecutive events are at most G apart. When every key is an integer the
keys are numbers (and sort as numbers), else text. The output is the same for every worker count.

A malformed line raises ``InputFormatError`` naming the file and line; the job then exits with status 2 and
writes nothing (OUT is written under a temporary name and renamed when complete).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np

from pytimely import Scope, Worker, execute
from pytimely.atomic import atomic_output, check_output
from pytimely.command import job_main
from pytimely.config import Config, RunConfig
from pytimely.dataflow.operators.window import Session, Sliding, Tumbling
from pytimely.errors import InputFormatError
from pytimely.observe.eventlog import Sink

Kind = Tumbling | Sliding | Session
BATCH = 1 << 16


def read_events(path: str) -> tuple[Any, Any]:
    """``(times, keys)``: int64 event times and keys (int64 when every key is an integer, else a list of str)."""
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = data.count(b"\n", 0, exc.start) + 1
        raise InputFormatError(f"{path}, line {where}: not UTF-8 text ({exc.reason})", path=path, line=where) from None
    lines = text.splitlines()
    if not lines or tuple(f.strip() for f in lines[0].split(",")) != ("time", "key"):
        first = lines[0] if lines else ""
        raise InputFormatError(f"{path}, line 1: expected the header 'time,key', got {first!r}", path=path, line=1)
    times: list[int] = []
    keys: list[str] = []
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.split(",")
        problem = None
        if len(fields) != 2:
            problem = f"expected 2 comma-separated fields (time,key), found {len(fields)}"
        elif not fields[1].strip():
            problem = "the key is empty"
        else:
            try:
                t = int(fields[0])
            except ValueError:
                problem = "the time must be an integer"
            else:
                if not 0 <= t < 1 << 62:
                    problem = "the time must be an integer from 0 to 2**62 - 1"
        if problem is not None:
            raise InputFormatError(f"{path}, line {n}: {problem}: {line!r}", path=path, line=n)
        times.append(t)
        keys.append(fields[1].strip())
    return np.array(times, dtype=np.int64), _numbers_if_possible(keys)


def _numbers_if_possible(keys: list[str]) -> Any:
    try:
        numbers = [int(k) for k in keys]
    except ValueError:
        return keys
    if numbers and not all(-(1 << 63) <= k < 1 << 63 for k in numbers):
        return keys
    return np.array(numbers, dtype=np.int64)


def parse_kind(args: argparse.Namespace) -> Kind:
    """The window kind the flags ask for (argparse makes exactly one present)."""
    if args.tumbling is not None:
        return Tumbling(args.tumbling)
    if args.session is not None:
        return Session(args.session)
    size, step = args.sliding
    return Sliding(size, step)


def run(
    path: str, kind: Kind, workers: int = 1, *, config: Config | None = None, log: Sink | None = None
) -> list[tuple[Any, ...]] | None:
    """The sorted ``(start, end, key, count)`` rows (``None`` on cluster processes other than worker 0's)."""
    times, keys = read_events(path)

    def job(worker: Worker) -> list[tuple[Any, list[Any]]]:
        mine = slice(worker.index, None, worker.peers)

        def build(scope: Scope[int]) -> tuple[Any, Any]:
            handle, stream = scope.new_input(name="events")
            if isinstance(kind, Tumbling):
                windows = stream.tumbling(kind.size, time=0, key=1)
            elif isinstance(kind, Sliding):
                windows = stream.sliding(kind.size, kind.step, time=0, key=1)
            else:
                windows = stream.session(kind.gap, time=0, key=1)
            return handle, windows.exchange(lambda _: 0, name="gather").capture()

        handle, captured = worker.dataflow(build)
        my_times = times[mine]
        if isinstance(keys, np.ndarray):
            rows = np.column_stack([my_times, keys[mine]])
            for start in range(0, len(rows), BATCH):
                handle.send_batch(rows[start : start + BATCH])
        else:
            pairs = list(zip(my_times.tolist(), keys[mine], strict=True))
            for start in range(0, len(pairs), BATCH):
                handle.send_batch(pairs[start : start + BATCH])
        handle.close()
        events: list[tuple[Any, list[Any]]] = captured
        return events

    parts = execute(job, workers, config=config, log=log)
    if config is not None and config.first_worker != 0:
        return None
    return sorted(row for captured in parts for _, batch in captured for row in batch)


def write_windows(path: str, rows: list[tuple[Any, ...]]) -> None:
    """OUT as CSV with a header, written atomically."""
    with atomic_output(path) as out:
        out.write("start,end,key,count\n")
        out.writelines(f"{s},{e},{k},{c}\n" for s, e, k, c in rows)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _size_and_step(text: str) -> tuple[int, int]:
    parts = text.split(",")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected SIZE,STEP, got {text!r}")
    return _positive(parts[0]), _positive(parts[1])


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, write OUT."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--input", required=True, help="CSV time,key with a header")
    parser.add_argument("--output", required=True, help="where to write CSV start,end,key,count")
    kinds = parser.add_mutually_exclusive_group(required=True)
    kinds.add_argument("--tumbling", type=_positive, metavar="S", help="windows [k*S, (k+1)*S)")
    kinds.add_argument("--sliding", type=_size_and_step, metavar="S,D", help="windows [k*D, k*D+S)")
    kinds.add_argument("--session", type=_positive, metavar="G", help="per-key sessions with gaps of at most G")

    def work(args: argparse.Namespace, run_config: RunConfig, log: Sink | None) -> str | None:
        started = time.perf_counter()
        if run_config.cluster.first_worker == 0:
            check_output(args.output)
        rows = run(os.fspath(args.input), parse_kind(args), config=run_config.cluster, log=log)
        if rows is None:
            return None
        write_windows(args.output, rows)
        return f"{len(rows)} windows in {time.perf_counter() - started:.2f} s -> {args.output}"

    return job_main("windows", parser, work, argv)


if __name__ == "__main__":
    sys.exit(main())
