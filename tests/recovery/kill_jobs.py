"""Two jobs for the ``kill -9`` trials, run as ``python -m tests.recovery.kill_jobs {window,join} ...`` under
``pytimely launch``: a windowed count and a sliding windowed fold over event time, and a join of orders with
payments feeding running totals per customer beside a running join of each customer's orders and payments per
epoch. Neither knows about recovery beyond passing ``recovery=`` to ``execute``.

    window --events CSV --output OUT      CSV ``epoch,time,key``; OUT rows ``count,start,end,key,count`` (tumbling
                                          windows) and ``sum,start,end,key,sum of times`` (sliding windows)
    join --orders CSV --payments CSV --output OUT
                                          ``epoch,order,customer`` and ``epoch,order,amount``; OUT rows
                                          ``total,epoch,customer,updates,total`` (updates: joined payments that
                                          epoch) and ``latest,epoch,customer,orders,paid`` (the latest epoch's
                                          count of orders and sum of payments, for a customer either changed)
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
from pytimely.dataflow.operators.folds import Fold
from pytimely.dataflow.operators.state_machine import state_machine
from pytimely.errors import PytimelyError
from pytimely.recovery import Recovery

WINDOW = 5
"""Tumbling windows of this many units of event time."""

SLIDING = (10, 5)
"""Sliding windows of this size and step, folding the event times."""


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
            total = Fold(lambda: 0, lambda acc, x: acc + x, lambda a, b: a + b)
            sums = stream.sliding(*SLIDING, time=0, key=1, value=0, aggregate=total, name="sliding sums")
            rows = counts.map(lambda w: ("count", *w), name="counts").concat(
                sums.map(lambda w: ("sum", *w), name="sums")
            )
            return handle, rows.probe(), rows.exchange(lambda _: 0, name="gather").capture()

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
            totals = state_machine(spent, _add, None, None, 256, "totals").map(
                lambda ct: ("total", *ct), name="tag totals"
            )
            ordered = orders_stream.count_by(lambda kv: kv[1], name="orders per customer")
            paid = spent.sum_by(lambda ca: ca[0], lambda ca: ca[1], name="paid per customer")
            latest = ordered.join(paid, over="latest", name="latest per customer").map(
                lambda kv: ("latest", kv[0], *kv[1]), name="tag latest"
            )
            rows = totals.concat(latest)
            return left, right, rows.probe(), rows.exchange(lambda _: 0, name="gather").capture()

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
    latest: list[tuple[Any, ...]] = []
    for t, batch in results[0]:
        for row in batch:
            if row[0] == "total":
                seen.setdefault((t, row[1]), []).append(row[2])
            else:
                latest.append(("latest", t, *row[1:]))
    return sorted([("total", t, c, len(v), max(v)) for (t, c), v in seen.items()] + latest)


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
