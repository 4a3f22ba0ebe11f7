"""Two jobs for the ``kill -9`` trials, run as ``python -m tests.recovery.kill_jobs {window,join} ...`` under
``pytimely launch``: a windowed count over event time, and a join of orders with payments feeding running
totals per customer. Neither knows about recovery beyond passing ``recovery=`` to ``execute``.

    window --events CSV --output OUT      CSV ``epoch,time,key``; OUT ``start,end,key,count`` rows
    join --orders CSV --payments CSV --output OUT
                                          ``epoch,order,customer`` and ``epoch,order,amount``; OUT rows
                                          ``epoch,customer,updates,total`` (updates: joined payments that epoch)
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import Any

from pytimely import Worker, execute
from pytimely.atomic import atomic_output
from pytimely.command import add_run_arguments, parse_run
from pytimely.dataflow.operators.state_machine import state_machine
from pytimely.errors import PytimelyError
from pytimely.recovery import Recovery

WINDOW = 5
"""Tumbling windows of this many units of event time."""


def _rows(path: str) -> list[tuple[int, ...]]:
    with open(path, newline="") as handle:
        reader = csv.reader(handle)
        next(reader)
        return [tuple(int(x) for x in row) for row in reader]


def _by_epoch(rows: list[tuple[int, ...]]) -> dict[int, list[tuple[int, ...]]]:
    out: dict[int, list[tuple[int, ...]]] = {}
    for row in rows:
        out.setdefault(row[0], []).append(row[1:])
    return out


def window_job(events: str, recovery: Any, config: Any) -> list[tuple[int, ...]] | None:
    """Count events per key in tumbling windows of event time; each epoch's events are sent at that epoch."""
    table = _by_epoch(_rows(events))
    epochs = max(table, default=-1) + 1

    def job(worker: Worker) -> Any:
        def build(scope: Any) -> tuple[Any, Any, Any]:
            handle, stream = scope.new_input(name="events")
            counts = stream.tumbling(WINDOW, time=0, key=1, name="per window")
            return handle, counts.probe(), counts.exchange(lambda _: 0, name="gather").capture()

        handle, probe, captured = worker.dataflow(build)
        for epoch in range(epochs):
            handle.send_batch(table.get(epoch, [])[worker.index :: worker.peers])
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(handle.time))
        return captured

    results = execute(job, config=config, recovery=recovery)
    if config.first_worker != 0:
        return None
    return sorted(tuple(r) for _, batch in results[0] for r in batch)


def _add(_customer: int, amount: int, total: int | None) -> tuple[int, list[tuple[int, int]]]:
    new = (total or 0) + amount
    return new, [(_customer, new)]


def join_job(orders: str, payments: str, recovery: Any, config: Any) -> list[tuple[int, ...]] | None:
    """Join each epoch's orders and payments on the order, then keep each customer's running total."""
    order_rows, payment_rows = _by_epoch(_rows(orders)), _by_epoch(_rows(payments))
    epochs = max([*order_rows, *payment_rows], default=-1) + 1

    def job(worker: Worker) -> Any:
        def build(scope: Any) -> tuple[Any, Any, Any, Any]:
            left, orders_stream = scope.new_input(name="orders")
            right, payments_stream = scope.new_input(name="payments")
            joined = orders_stream.join(payments_stream, name="order payments")
            spent = joined.map(lambda kv: (kv[1][0], kv[1][1]), name="customer amount")
            totals = state_machine(spent, _add, None, None, 256, "totals")
            return left, right, totals.probe(), totals.exchange(lambda _: 0, name="gather").capture()

        left, right, probe, captured = worker.dataflow(build)
        for epoch in range(epochs):
            left.send_batch(order_rows.get(epoch, [])[worker.index :: worker.peers])
            right.send_batch(payment_rows.get(epoch, [])[worker.index :: worker.peers])
            left.advance_to(epoch + 1)
            right.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(left.time))
        return captured

    results = execute(job, config=config, recovery=recovery)
    if config.first_worker != 0:
        return None
    seen: dict[tuple[int, int], list[int]] = {}
    for t, batch in results[0]:
        for customer, total in batch:
            seen.setdefault((t, customer), []).append(total)
    return sorted((t, c, len(v), max(v)) for (t, c), v in seen.items())


def main(argv: list[str] | None = None) -> int:
    """Run one of the jobs; process 0 writes OUT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job", choices=("window", "join"))
    parser.add_argument("--events")
    parser.add_argument("--orders")
    parser.add_argument("--payments")
    parser.add_argument("--output", required=True)
    add_run_arguments(parser)
    args, run = parse_run(parser, argv)
    config = run.cluster

    def recovery_of(job: str, inputs: dict[str, Path]) -> Recovery | None:
        if run.recovery is None:
            return None
        return Recovery.from_settings(run.recovery, job, inputs=inputs, announce=sys.stderr)

    try:
        if args.job == "window":
            rows = window_job(args.events, recovery_of("window", {"events": Path(args.events)}), config)
        else:
            recovery = recovery_of("join", {"orders": Path(args.orders), "payments": Path(args.payments)})
            rows = join_job(args.orders, args.payments, recovery, config)
    except PytimelyError as exc:
        print(f"kill_jobs: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if rows is not None:
        with atomic_output(args.output) as out:
            out.writelines(",".join(map(str, row)) + "\n" for row in rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
