"""A job's command line, written once: the run contract's flags, observers, and one way to run and fail.

timely's ``execute_from_args`` reads the worker layout from the arguments; :func:`execute_from_args` does that
and more: it takes the whole :class:`~pytimely.config.RunConfig` (cluster, recovery, event log, metrics, the
launcher's control endpoint) from flags and the ``PYTIMELY_*`` variables ``pytimely launch`` sets, and runs the
job with it. ``pytimely run module:function`` is this with the function named on the command line.

A program with flags of its own (the examples) uses :func:`job_main`: it adds the run's flags to the program's
parser, parses them, starts the observers and a progress line, calls the program's ``work(args, run, log)``,
and turns a failure into one line on stderr and an exit status (2: bad input, a path, a store or a flag;
1: anything else the computation raised), with no traceback.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pytimely.config import RunConfig, add_arguments, add_recovery_arguments
from pytimely.errors import ConfigError, InputFormatError, OutputPathError, PytimelyError, RecoveryError
from pytimely.observe.eventlog import Sink, combine
from pytimely.observe.status import ProgressLine

if TYPE_CHECKING:
    from pytimely.worker import Worker

__all__ = [
    "USAGE_ERRORS",
    "add_run_arguments",
    "execute_from_args",
    "job_main",
    "observers",
    "parse_run",
    "run_with",
]

R = TypeVar("R")

USAGE_ERRORS = (InputFormatError, OutputPathError, RecoveryError, ConfigError)
"""Failures that are the caller's to fix (an input, an output path, a store, a flag): exit status 2, as is an
``OSError`` that is not pytimely's own (a file that cannot be read or written)."""


def add_run_arguments(parser: argparse.ArgumentParser, *, recovery: str = "the job's declared state") -> None:
    """Add the run contract's flags: the cluster (``-w -n -p --hosts --hostfile --bind --secret-file``),
    recovery (``--recovery`` and its flags; ``recovery`` says what is snapshotted), ``--log`` and
    ``--metrics-port``."""
    add_arguments(parser)
    add_recovery_arguments(parser, what=recovery)
    group = parser.add_argument_group("observing")
    group.add_argument("--log", metavar="PATH", help="write the event log to PATH as JSON lines (PYTIMELY_LOG)")
    group.add_argument(
        "--metrics-port", type=int, metavar="PORT", help="serve Prometheus metrics on PORT (PYTIMELY_METRICS_PORT)"
    )


def parse_run(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None = None
) -> tuple[argparse.Namespace, RunConfig]:
    """Parse ``argv`` with ``parser`` (given :func:`add_run_arguments`); a bad flag or variable is a usage error."""
    args = parser.parse_args(argv)
    try:
        return args, RunConfig.from_args(args)
    except ConfigError as exc:
        parser.error(str(exc))


def observers(run: RunConfig) -> tuple[Sink | None, list[Callable[[], None]]]:
    """The event-log sink and metrics ``run`` asks for, and what to call when the computation ends."""
    sinks: list[Sink] = []
    closers: list[Callable[[], None]] = []
    if run.log is not None:
        from pytimely.observe.eventlog import JsonLines

        files = JsonLines(run.log)
        sinks.append(files)
        closers.append(files.close)
    if run.metrics_port is not None:
        from pytimely.observe.metrics import Metrics

        metrics = Metrics()
        served = metrics.serve(run.metrics_port)
        print(f"pytimely: metrics at http://127.0.0.1:{served}/metrics", file=sys.stderr, flush=True)
        sinks.append(metrics)
        closers.append(metrics.close)
    return combine(*sinks), closers


def _announce_leave(address: str, secret: bytes | None, process: int) -> None:
    """Tell the launcher's control endpoint ``process`` leaves, so it hands no newcomer this process to dial."""
    from pytimely.membership import request

    request("leaving", process, address=address, secret=secret)


def run_with(
    job: Callable[[Worker], R],
    run: RunConfig,
    *,
    name: str,
    log: Sink | None = None,
    parameters: dict[str, Any] | None = None,
    inputs: dict[str, Any] | None = None,
) -> list[R]:
    """``execute(job)`` as ``run`` says: its layout, its recovery store (the job's identity is ``name``,
    ``parameters`` and ``inputs``), ``log``, and, in an elastic run, leaves announced to the launcher."""
    from pytimely.execute import execute
    from pytimely.recovery import Recovery

    recovery = None
    if run.recovery is not None:
        recovery = Recovery.from_settings(run.recovery, name, parameters=parameters, inputs=inputs, announce=sys.stderr)
    on_leave = None
    if run.cluster.elastic and run.control:
        on_leave = functools.partial(_announce_leave, run.control, run.cluster.secret)
    return execute(job, config=run.cluster, on_leave=on_leave, log=log, recovery=recovery)


def execute_from_args(
    job: Callable[[Worker], R], argv: Sequence[str] | None = None, *, name: str | None = None
) -> list[R]:
    """Run ``job`` as the run contract's flags in ``argv`` (default ``sys.argv[1:]``) and the ``PYTIMELY_*``
    variables say; this process's workers' results. A bad flag raises :class:`~pytimely.errors.ConfigError`."""
    parser = argparse.ArgumentParser(add_help=False)
    add_run_arguments(parser)
    args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if rest:
        raise ConfigError(f"unknown arguments: {' '.join(rest)}")
    run = RunConfig.from_args(args)
    log, closers = observers(run)
    try:
        return run_with(job, run, name=name or str(getattr(job, "__qualname__", "job")), log=log)
    finally:
        for close in closers:
            close()


def job_main(
    prog: str,
    parser: argparse.ArgumentParser,
    work: Callable[[argparse.Namespace, RunConfig, Sink | None], str | None],
    argv: Sequence[str] | None = None,
    *,
    recovery: str = "the job's declared state",
    epochs: Callable[[argparse.Namespace], int | None] | None = None,
    elsewhere: Callable[[argparse.Namespace], str | None] | None = None,
) -> int:
    """A job's ``main``: add the run's flags (and ``-q``) to ``parser``, parse, then ``work(args, run, log)``,
    whose text (if any) is printed on stderr when it returns; a failure is one line and an exit status.

    ``recovery`` says what ``--recovery`` snapshots; ``epochs(args)`` gives the progress line its total;
    ``elsewhere(args)`` is asked first: it runs the job somewhere else and returns its text (a run on Spark,
    whose ``-n``/``-w`` lay out the Spark stage rather than this process's cluster), or returns ``None`` to
    run it here.
    """
    add_run_arguments(parser, recovery=recovery)
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress line on a terminal")
    if elsewhere is not None:
        args = parser.parse_args(argv)
        try:
            said = elsewhere(args)
        except USAGE_ERRORS as exc:
            print(f"{prog}: {exc}", file=sys.stderr)
            return 2
        except PytimelyError as exc:
            print(f"{prog}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        except OSError as exc:
            print(f"{prog}: {exc}", file=sys.stderr)
            return 2
        if said is not None:
            print(f"{prog}: {said}", file=sys.stderr)
            return 0
    args, run = parse_run(parser, argv)
    line = ProgressLine(quiet=args.quiet, total_epochs=epochs(args) if epochs is not None else None)
    closers: list[Callable[[], None]] = []
    try:
        observed, closers = observers(run)
        with line:
            said = work(args, run, combine(line.sink, observed))
    except USAGE_ERRORS as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except PytimelyError as exc:
        print(f"{prog}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    finally:
        for close in closers:
            close()
    if said:
        print(f"{prog}: {said}", file=sys.stderr)
    return 0
