"""Count words: ``word<TAB>count`` lines sorted by word.

    python examples/wordcount.py --input TEXT --output OUT [-w W]
    pytimely launch -n 2 -- python examples/wordcount.py --input TEXT --output OUT
    pytimely launch -n 2 --elastic -- python examples/wordcount.py --input TEXT --output OUT \
        --epochs 8 --rescale 2:+1,5:-1

Cluster flags (``-w -n -p --hosts --hostfile``, or their ``PYTIMELY_*``
variables) spread the workers over processes; process 0 writes OUT, under a
temporary name renamed on success.

Words are split on whitespace, case kept. Each worker reads its share of the
words; counting exchanges each word to the worker that owns it.

With ``--epochs K`` the words are streamed in K epochs; ``--rescale E:+1,E2:-1``
(under ``pytimely launch --elastic``) adds a process after epoch E and has the
newest one leave after E2 (``E3:-pP``: process P leaves after E3, any process,
one it started with included), while the counts stay exact: keyed state moves
with its bins, and the counts are gathered on a process that stays, which writes
OUT (see ``docs/rescaling.md``).

With ``--epochs K --recovery DIR`` (or under ``pytimely launch --recovery DIR``) the counting operator's
state is snapshotted into DIR after every epoch (``--snapshot-every E`` for every E-th); a run started again
after a crash prints ``resumed at epoch N`` and goes on from the last snapshot, with any number of
processes, also under ``launch --elastic`` with ``--rescale`` (joins and leaves of the plan still to come
are made; a leave of a process the resumed run started with is skipped). The store is refused if it was written for
another input file or another ``--epochs``. Snapshots are pickles: see ``--recovery-key-file`` for a store
that refuses what it did not seal (see ``docs/recovery.md``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from pytimely import InputHandle, Scope, Worker, execute
from pytimely.command import job_main
from pytimely.config import Config, RunConfig
from pytimely.io import check_output, read_words, write_table
from pytimely.observe.eventlog import Sink
from pytimely.recovery import Recovery

BATCH = 1 << 16


def run(
    path: str, workers: int = 1, *, seed: int | None = None, config: Config | None = None, log: Sink | None = None
) -> list[tuple[str, int]] | None:
    """``(word, count)`` pairs sorted by word (``None`` on cluster processes other than worker 0's)."""

    def job(worker: Worker) -> list[tuple[Any, list[Any]]]:
        words = read_words(path, part=worker.index, parts=worker.peers)

        def build(scope: Scope[int]) -> tuple[InputHandle[int, Any], Any]:
            handle, stream = scope.new_input(name="words")
            return handle, stream.count_by().gather(0).capture()

        handle, captured = worker.dataflow(build)
        for start in range(0, len(words), BATCH):
            handle.send_batch(words[start : start + BATCH])
        return captured

    parts = execute(job, workers, config=config, seed=seed, log=log)
    if config is not None and config.first_worker != 0:
        return None
    return sorted(pair for captured in parts for _, batch in captured for pair in batch)


def run_rescaling(
    path: str,
    epochs: int,
    plan_text: str,
    config: Config,
    *,
    join_timeout: float = 60.0,
    leave_timeout: float = 60.0,
    log: Sink | None = None,
    recovery: Any = None,
    control: str | None = None,
) -> list[tuple[str, int]] | None:
    """Count in ``epochs`` epochs while processes join and leave as ``plan_text`` says (the process of the plan's
    gathering worker gets the counts, the others ``None``).

    Newcomers are asked of the launcher's control endpoint, and a leaving process tells it first; a newcomer
    not there within ``join_timeout`` s, or a leaver not gone within ``leave_timeout`` s, fails the run naming it.
    With ``recovery``, a run resumed at epoch ``R`` follows the plan's changes from ``R`` on, from the processes
    it started with.
    """
    from pytimely.algorithms.rescaling import count_while_rescaling
    from pytimely.membership import Launcher

    words = read_words(path, part=0, parts=1)
    size = -(-len(words) // epochs) if words else 0

    def share(worker: int, epoch: int, members: list[int]) -> list[str]:
        return words[epoch * size : (epoch + 1) * size][members.index(worker) :: len(members)]

    def job(worker: Worker) -> Any:
        plan = resumed_plan(plan_text, worker.resume_epoch, config.initial_processes, config.workers)
        return count_while_rescaling(
            worker,
            share,
            epochs,
            plan,
            # A request refused or unanswered is tried again for as long as the wait it serves may take.
            coordinator=(
                Launcher(address=control, secret=config.secret, timeout=max(join_timeout, leave_timeout))
                if plan.changes
                else None
            ),
            join_timeout=join_timeout,
            leave_timeout=leave_timeout,
        )

    results = [r for r in execute(job, config=config, log=log, recovery=recovery) if r is not None]
    if not results:
        return None
    return sorted(results[0][0].items())


def resumed_plan(text: str, resume: int, initial: int, workers: int) -> Any:
    """The plan ``text`` from epoch ``resume`` on, starting from ``initial`` processes: changes that took
    effect before ``resume`` are gone, and a leave is made only by a process that joined in this run (one the
    run started with holds the gathering exchange's place: it cannot leave)."""
    from pytimely.membership import RescalePlan

    plan = RescalePlan.parse(text, initial=initial, workers=workers)
    if resume == 0:
        return plan
    changes = []
    joined = 0
    for epoch, delta in plan.changes:
        if epoch + 1 < resume or (delta < 0 and not joined):
            continue
        joined += delta
        changes.append((epoch, delta))
    return RescalePlan(initial, workers, tuple(changes))


def run_epochs(
    path: str,
    epochs: int,
    recovery: Any = None,
    *,
    workers: int = 1,
    config: Config | None = None,
    log: Sink | None = None,
) -> list[tuple[str, int]] | None:
    """Count in ``epochs`` epochs; with ``recovery``, the counts are snapshotted and a resumed run goes on from them.

    The job is the same either way: every worker sends its share of each epoch from the first (what a resumed
    run sends of epochs its snapshot holds is dropped), and at the end every worker sends its counts to worker 0.
    """
    from pytimely.dataflow.operators.state_machine import state_machine

    words = read_words(path, part=0, parts=1)
    size = -(-len(words) // epochs) if words else 0

    def add(_word: str, _value: str, count: int | None) -> tuple[int, None]:
        return (count or 0) + 1, None

    def job(worker: Worker) -> Any:
        counts: dict[str, int] = {}

        def build(scope: Scope[int]) -> tuple[Any, Any, Any, Any]:
            handle, stream = scope.new_input(name="words")
            final, totals = scope.new_input(name="final counts")
            counted = state_machine(stream, add, _same, None, 256, "count", states=counts)
            return handle, counted.probe(), final, totals.gather(0).capture()

        handle, probe, final, captured = worker.dataflow(build)
        for epoch in range(epochs):
            handle.send_batch(words[epoch * size : (epoch + 1) * size][worker.index :: worker.peers])
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(handle.time))
        final.advance_to(epochs)
        final.send_batch(list(counts.items()))
        final.close()
        return captured

    results = execute(job, workers, config=config, log=log, recovery=recovery)
    if config is not None and config.first_worker != 0:
        return None
    return sorted(pair for _, batch in results[0] for pair in batch)


def _same(word: str) -> str:
    return word


def _words(batch: Any) -> list[str]:
    """The words of an Arrow batch of text lines (its first column)."""
    return " ".join(line for line in batch.column(0).to_pylist() if line).split()


def _count(stream: Any) -> Any:
    return stream.map_batch(_words, name="split").count_by()


def run_on_spark(
    spark: Any, lines: Any, processes: int | None = None, workers: int = 1, *, figures: Any = None
) -> Any:
    """The job on Spark: a DataFrame ``word, count`` from a DataFrame of text lines (first column).

    ``figures`` (:class:`pytimely.spark.figures.Figures`) gathers each process's records and phase times.
    """
    from pytimely.spark import run_dataflow

    return run_dataflow(
        _count, lines, "word string, count long", processes=processes, workers=workers, figures=figures,
        description="pytimely wordcount: count words",
    )


def main_spark(args: argparse.Namespace) -> str | None:
    """With ``--spark``: read the text with Spark, count on Spark-hosted workers (``-n``, ``-w`` lay out the
    stage), write OUT with Spark; without, ``None``."""
    if not args.spark:
        return None
    processes, workers = args.processes, args.workers or 1
    from pyspark.sql import functions as F

    from pytimely import spark as on_spark
    from pytimely.spark.figures import Figures

    started = time.perf_counter()
    session = on_spark.session_for(args.spark, app_name="pytimely-wordcount")
    kind = "parquet" if on_spark.format_of(args.input) == "parquet" else "text"
    lines = on_spark.read(session, args.input, format=kind)
    # Spark Connect has no accumulators: no per-process figures there.
    figures = None if on_spark.is_connect(session) else Figures(session)
    counts = run_on_spark(session, lines, processes, workers, figures=figures)
    if on_spark.format_of(args.output) == "parquet":
        on_spark.save(counts, args.output, order_by=["word"], retries=args.retries)
    else:
        line = F.concat_ws("\t", F.col("word"), F.col("count").cast("string"))
        on_spark.save(counts, args.output, format="text", order_by=["word"], columns=[line], retries=args.retries)
    elapsed = time.perf_counter() - started
    if figures is not None:
        print(figures.table(), file=sys.stderr)
    return f"on Spark {args.spark} in {elapsed:.2f} s -> {args.output}"


def _count_of_epochs(text: str) -> int:
    """``--epochs``: a whole number >= 0 (0: no epochs); anything else is a usage error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, write OUT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="UTF-8 text file")
    parser.add_argument("--output", required=True, help="where to write word<TAB>count lines")
    parser.add_argument("--spark", metavar="MASTER", help="run on Spark, e.g. local[2] (Spark reads and writes)")
    parser.add_argument("--retries", type=int, default=0, help="with --spark: re-run a failed computation")
    parser.add_argument("--epochs", type=_count_of_epochs, default=0, help="stream the words in this many epochs")
    parser.add_argument(
        "--rescale", default="",
        help="E:+1,E2:-1,E3:-pP: add a process after epoch E, remove the newest after E2, process P after E3",
    )
    parser.add_argument(
        "--join-timeout", type=float, default=60.0, help="with --rescale: seconds a newcomer may take to join (60)"
    )
    parser.add_argument(
        "--leave-timeout", type=float, default=60.0, help="with --rescale: seconds a leaver may take to say so (60)"
    )

    def work(args: argparse.Namespace, run_config: RunConfig, log: Sink | None) -> str | None:
        if args.rescale and args.epochs == 0:
            parser.error("--rescale needs --epochs")
        if run_config.recovery is not None and args.epochs == 0:
            parser.error("--recovery needs --epochs")
        started = time.perf_counter()
        config = run_config.cluster
        if config.first_worker == 0:
            check_output(args.output)  # before the work, not after it
        recovery = (
            None
            if run_config.recovery is None
            else Recovery.from_settings(
                run_config.recovery,
                "wordcount --rescale" if args.rescale else "wordcount",
                parameters={"epochs": args.epochs},
                inputs={"text": Path(args.input)},
                announce=sys.stderr,
            )
        )
        if args.epochs > 0 and not args.rescale:
            counts = run_epochs(args.input, args.epochs, recovery, config=config, log=log)
        elif args.epochs > 0:
            counts = run_rescaling(
                args.input,
                args.epochs,
                args.rescale,
                config,
                join_timeout=args.join_timeout,
                leave_timeout=args.leave_timeout,
                log=log,
                recovery=recovery,
                control=run_config.control,
            )
        else:
            counts = run(args.input, config=config, log=log)
        if counts is None:
            return None
        write_table(args.output, ["word", "count"], counts, sep="\t")
        return f"{len(counts)} words in {time.perf_counter() - started:.2f} s -> {args.output}"

    return job_main(
        "wordcount", parser, work, argv, recovery="the counts (with --epochs)",
        epochs=lambda args: args.epochs or None, elsewhere=main_spark,
    )


if __name__ == "__main__":
    sys.exit(main())
