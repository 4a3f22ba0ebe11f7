"""``pytimely workflow``: run, plan and show resumable workflows.

    pytimely workflow run  TARGET [--staging URL] [--input NAME=VALUE ...] [--output NAME ...]
                                  [--rerun MODULE ...] [--until MODULE] [--keep-going]
                                  [--executor thread|process|spark] [--output-dir DIR] [--fresh] [-q]
    pytimely workflow plan TARGET [--staging URL] [--input NAME=VALUE ...] [--output NAME ...]
                                  [--rerun MODULE ...] [--until MODULE] [--why] [--fresh]
    pytimely workflow show TARGET
    pytimely workflow logs MODULE --staging URL
    pytimely workflow unlock --staging URL [--force]

TARGET is ``package.module:NAME`` or ``path/to/file.py:NAME``, naming a composite module (a workflow).
``run`` resumes from whatever the staging area (a directory, ``file://``, ``s3://...``, ``memory://``; default
``memory://``, which keeps nothing) holds under matching fingerprints, runs what is left and prints the
requested out-ports (all by default) as ``NAME = VALUE`` lines, or writes them to ``DIR/NAME.json`` (or
``.pkl`` when not JSON) with ``--output-dir``. Progress goes to stderr, one line per module start and finish,
and a summary; ``-q`` silences it. ``--fresh`` ignores staged values. An input value is decoded as JSON when it
parses, else taken as a string. ``--rerun MODULE`` runs that module (and, through its values, what depends on
it) whatever is staged; ``--until MODULE`` runs only what that module needs and prints its out-ports;
``--keep-going`` runs on past a failed module wherever nothing depends on it. The first Ctrl-C stops the run:
nothing new starts, calls running on threads finish and their values are kept, worker processes are killed; a
second Ctrl-C exits at once. ``plan`` prints, without running anything, the ready, recomputed and irrelevant
ports of every module instance that would be interpreted and the modules that would run (``--why``: each with
its reasons); ``show`` prints the module graph as a Mermaid flowchart; ``logs`` what a module printed the last
time it ran (a failed run's too); ``unlock`` breaks the lock of a staging area whose run is gone, naming it.

Exit status: 0 on success, 1 when the workflow fails (the message names the module, the file and the line),
130 when interrupted, 2 for usage and definition errors (a one-line message).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.util
import json
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import IO, Any

from pytimely.errors import (
    ModuleDefinitionError,
    ModulesFailedError,
    PytimelyError,
    ResumePreconditionError,
    RunStoppedError,
    StagingKeyError,
    StagingLockedError,
    StagingUnavailableError,
    WorkflowInputError,
    WorkflowUsageError,
)
from pytimely.workflow.drawing import show
from pytimely.workflow.executors import Executor, ProcessExecutor, SparkExecutor, ThreadExecutor
from pytimely.workflow.model import Module
from pytimely.workflow.planning import aplan
from pytimely.workflow.runner import arun, module_logs
from pytimely.workflow.runtime import Event, Trace
from pytimely.workflow.staging import StagingArea, break_lock, open_staging
from pytimely.workflow.staging.lock import holder_text

__all__ = ["LiveProgress", "Progress", "load_workflow", "main", "parse_inputs"]

_USAGE_ERRORS = (WorkflowUsageError, ModuleDefinitionError, WorkflowInputError, ResumePreconditionError)


def load_workflow(target: str) -> Module:
    """The module ``TARGET`` names: ``package.module:NAME`` or ``path/to/file.py:NAME``."""
    where, sep, attr = target.rpartition(":")
    if not sep or not where or not attr:
        raise WorkflowUsageError(f"expected MODULE:NAME or FILE.py:NAME, got {target!r}")
    try:
        if where.endswith(".py") or os.sep in where:
            path = Path(where).resolve()
            if not path.is_file():
                raise WorkflowUsageError(f"no workflow file {where!r}")
            # Imported by name from its directory, so worker processes can import its functions too.
            loaded = sys.modules.get(path.stem)
            if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() != path:
                raise WorkflowUsageError(
                    f"cannot import {where!r} as {path.stem!r}: a module of that name is already loaded from "
                    f"{getattr(loaded, '__file__', None)!r}"
                )
            if str(path.parent) not in sys.path:
                sys.path.insert(0, str(path.parent))
            module = importlib.import_module(path.stem)
        else:
            module = importlib.import_module(where)
    except ImportError as exc:
        raise WorkflowUsageError(f"cannot import {where!r}: {exc}") from exc
    found: Any = module
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise WorkflowUsageError(f"{where!r} has no attribute {attr!r}") from None
    if not isinstance(found, Module):
        raise WorkflowUsageError(f"{target} is a {type(found).__name__}, not a workflow module")
    return found


def parse_inputs(pairs: Sequence[str]) -> dict[str, Any]:
    """``NAME=VALUE`` pairs as a dict; a value is JSON-decoded when it parses, else kept as a string."""
    inputs: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise WorkflowUsageError(f"--input expects NAME=VALUE, got {pair!r}")
        if name in inputs:
            raise WorkflowUsageError(f"--input {name!r} is given twice")
        try:
            inputs[name] = json.loads(text)
        except ValueError:
            inputs[name] = text
    return inputs


class Progress:
    """Progress lines on a stream: a module's start and finish (with its time), loop resumption, a summary."""

    def __init__(self, stream: IO[str], quiet: bool = False) -> None:
        self.stream = stream
        self.quiet = quiet
        self.began = time.perf_counter()
        self.running: dict[str, None] = {}
        """Modules started and not yet finished, failed or cut off (those stopped by a cancel stay)."""

    def __call__(self, event: Event) -> None:
        """Print one event."""
        if event.kind == "started":
            self.running[event.path] = None
        elif event.kind in ("finished", "failed", "cancelled"):
            self.running.pop(event.path, None)
        if self.quiet:
            return
        if event.kind == "started":
            line = f"started  {event.path}"
        elif event.kind == "finished":
            line = f"finished {event.path} ({event.seconds:.2f} s)"
        elif event.kind == "failed":
            line = f"failed   {event.path} ({event.seconds:.2f} s)" + (f": {event.message}" if event.message else "")
        elif event.kind == "cancelled":
            line = f"stopped  {event.path} ({event.seconds:.2f} s)"
        elif event.kind == "skipped":
            line = f"not run  {event.path} ({event.message})"
        elif event.kind == "retry":
            line = f"retry    {event.path} (attempt {(event.iteration or 0) + 1}: {event.message})"
        elif event.kind == "cut-off":
            line = f"cut off  {event.path} (its inputs came out as before: its staged values stand)"
        else:
            line = f"resumed  {event.path} at iteration {event.iteration}"
        print(line, file=self.stream, flush=True)

    def stop(self) -> None:
        """End any live display (lines need no ending)."""

    def summary(self, trace: Trace) -> None:
        """The closing line: modules run, values reused, time taken."""
        if self.quiet:
            return
        ran, reused, cut = len(trace.ran), len(trace.reused), len(trace.cut_off)
        failed, skipped = len(trace.failed), len(trace.skipped)
        print(
            f"ran {ran} module{'s' if ran != 1 else ''}, "
            + (f"cut off {cut}, " if cut else "")
            + (f"{failed} failed, " if failed else "")
            + (f"{skipped} not run, " if skipped else "")
            + f"reused {reused} value{'s' if reused != 1 else ''} in {time.perf_counter() - self.began:.2f} s",
            file=self.stream,
            flush=True,
        )


class LiveProgress(Progress):
    """A live display (rich) on a terminal: how many modules were reused, are running, done, cut off or failed,
    and which are running now; the summary line stays when it ends."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(stream)
        from rich.console import Console
        from rich.live import Live

        self.counts = {"done": 0, "cut off": 0, "failed": 0, "not run": 0, "retried": 0}
        self.trace: Trace | None = None
        self.console = Console(file=stream)
        self.live = Live(self._render(), console=self.console, refresh_per_second=8, transient=True)
        self.live.start()

    def _render(self) -> Any:
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        reused = len(self.trace.reused) if self.trace is not None else 0
        shown = [("reused", reused), *self.counts.items()]
        counts = "  ".join(f"{name} {n}" for name, n in shown if n or name == "done")
        table.add_row(f"[bold]running {len(self.running)}[/]", counts, f"{time.perf_counter() - self.began:.1f} s")
        for path in list(self.running)[:8]:
            table.add_row("", f"[cyan]{path}[/]", "")
        return table

    def __call__(self, event: Event) -> None:
        """Update the display with one event."""
        if event.kind == "started":
            self.running[event.path] = None
        elif event.kind in ("finished", "failed", "cancelled"):
            self.running.pop(event.path, None)
        key = {"finished": "done", "cut-off": "cut off", "failed": "failed", "retry": "retried",
               "skipped": "not run"}.get(event.kind)  # fmt: skip
        if key is not None:
            self.counts[key] += 1
        self.live.update(self._render())

    def stop(self) -> None:
        """End the live display (it leaves nothing behind on the terminal)."""
        self.live.stop()

    def summary(self, trace: Trace) -> None:
        """Stop the display and print the closing line."""
        self.live.stop()
        super().summary(trace)


def _progress(stream: IO[str], quiet: bool, mode: str) -> Progress:
    live = mode == "live" or (mode == "auto" and stream.isatty())
    if quiet or not live:
        return Progress(stream, quiet)
    try:
        return LiveProgress(stream)
    except ImportError:  # rich is in the workflow extra; lines do without it
        return Progress(stream, quiet)


_EXECUTORS = ("thread", "process", "spark")


def _executor(name: str) -> Executor:
    if name == "thread":
        return ThreadExecutor()
    if name == "process":
        return ProcessExecutor()
    from pytimely.spark.session import local_session

    return SparkExecutor(start=local_session)  # Spark starts when a module first needs its session


def _staging(url: str) -> StagingArea:
    try:
        return open_staging(url)
    except (ValueError, OSError, ImportError) as exc:
        raise WorkflowUsageError(f"cannot open staging area {url!r}: {exc}") from exc


def _jsonable(value: Any) -> str | None:
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return None


def _write_outputs(outputs: dict[str, Any], directory: str | None, out: IO[str]) -> None:
    if directory is None:
        for name, value in outputs.items():
            print(f"{name} = {_jsonable(value) or repr(value)}", file=out)
        return
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    for name, value in outputs.items():
        text = _jsonable(value)
        if text is not None:
            (target / f"{name}.json").write_text(text + "\n", encoding="utf-8")
        else:
            (target / f"{name}.pkl").write_bytes(pickle.dumps(value, protocol=5))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pytimely workflow", description="Run, plan or show a resumable workflow.")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("run", "run or resume the workflow"),
        ("plan", "print what a run would reuse, recompute and leave, without running"),
        ("show", "print the module graph as a Mermaid flowchart"),
        ("logs", "print what a module printed the last time it ran (a failed run's too)"),
        ("unlock", "break the lock of a staging area whose run is gone, naming its holder"),
    ):
        sub = commands.add_parser(name, help=text, description=text)
        if name == "logs":
            sub.add_argument("module", help="a module's path (workflow/load) or its last part (load)")
            sub.add_argument("--staging", required=True, help="staging area URL or directory")
            continue
        if name == "unlock":
            sub.add_argument("--staging", required=True, help="staging area URL or directory")
            sub.add_argument("--force", action="store_true",
                             help="break it even if its holder is a process running on this host")  # fmt: skip
            continue
        sub.add_argument("target", help="MODULE:NAME or FILE.py:NAME of a composite module")
        if name == "show":
            continue
        sub.add_argument("--staging", default="memory://", help="staging area URL or directory (default memory://)")
        sub.add_argument("--input", action="append", default=[], metavar="NAME=VALUE", help="a workflow input")
        sub.add_argument("--output", action="append", metavar="NAME", help="an out-port to compute (default all)")
        sub.add_argument("--fresh", action="store_true", help="ignore staged values and recompute everything")
        sub.add_argument("--rerun", action="append", default=[], metavar="MODULE",
                         help="run this module (path or last part) again whatever is staged, and what its values "
                         "change")  # fmt: skip
        sub.add_argument("--until", metavar="MODULE", help="run only what this module needs; print its out-ports")
        if name == "plan":
            sub.add_argument("--why", action="store_true", help="say why each module will run")
        if name == "run":
            sub.add_argument("--keep-going", action="store_true",
                             help="after a module fails, run on whatever does not depend on it")  # fmt: skip
            sub.add_argument("--executor", choices=("thread", "process", "spark"), default="thread")
            sub.add_argument("--output-dir", help="write each output to DIR/NAME.json (or .pkl)")
            sub.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
            sub.add_argument("--progress", choices=("auto", "lines", "live"), default="auto",
                             help="a live display (on a terminal by default) or one line per event")  # fmt: skip
            sub.add_argument("--no-capture", action="store_true",
                             help="let modules print to the terminal instead of keeping it for `logs`")  # fmt: skip
    return parser


def main(argv: Sequence[str]) -> int:
    """The ``pytimely workflow`` command; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "logs":
            return _logs(args.module, _staging(args.staging))
        if args.command == "unlock":
            return _unlock(args.staging, _staging(args.staging), args.force)
        workflow = load_workflow(args.target)
        if args.command == "show":
            sys.stdout.write(show(workflow))
            return 0
        inputs = parse_inputs(args.input)
        staging = _staging(args.staging)
        if args.command == "plan":
            plan = asyncio.run(aplan(workflow, inputs, staging=staging, outputs=args.output, reuse=not args.fresh,
                                     rerun=args.rerun, until=args.until))  # fmt: skip
            print(plan.render(why=args.why))
            return 0
        return _run(args, workflow, inputs, staging)
    except _USAGE_ERRORS as exc:
        print(f"pytimely workflow: error: {exc}", file=sys.stderr)
        return 2
    except StagingKeyError as exc:
        print(f"pytimely workflow: error: {exc}", file=sys.stderr)
        return 2


class Interrupts:
    """Ctrl-C during a run: the first stops it (nothing new starts; calls running on threads finish and their values
    are kept; worker processes are killed at once), a second exits at once with status 130 and one line."""

    def __init__(self, progress: Progress, executors: Sequence[Executor]) -> None:
        self.progress = progress
        self.executors = executors
        self.count = 0
        self.running: list[str] = []
        """The modules running at the first Ctrl-C."""
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop: asyncio.Event | None = None

    def attach(self, loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
        """The run's event loop and stop event (a Ctrl-C before the run started stops it at once)."""
        self.loop, self.stop = loop, stop
        if self.count:
            stop.set()

    def __call__(self, signum: int, frame: Any) -> None:
        """The SIGINT handler."""
        self.count += 1
        if self.count > 1:
            # Threads running module code cannot be stopped: leave without waiting for them. Values staged so far
            # are complete (a value counts only once its commit marker is written); the lease is taken over at once.
            os.write(2, b"pytimely workflow: interrupted again: stopped at once; values staged so far stay and "
                        b"the next run resumes from them\n")  # fmt: skip
            os._exit(130)
        self.running = list(self.progress.running)
        if self.loop is not None and self.stop is not None:
            self.loop.call_soon_threadsafe(self.stop.set)
        waits = False
        for executor in self.executors:
            terminate = getattr(executor, "terminate", None)
            if terminate is not None:
                threading.Thread(target=terminate, name="pytimely-interrupt", daemon=True).start()
            else:
                waits = True
        if waits and self.running:
            names = ", ".join(self.running)
            os.write(2, f"pytimely workflow: interrupted; waiting for {names} to finish (what finishes is kept); "
                        "Ctrl-C again to stop at once\n".encode())  # fmt: skip


def _run(args: argparse.Namespace, workflow: Module, inputs: dict[str, Any], staging: StagingArea) -> int:
    progress = _progress(sys.stderr, args.quiet, args.progress)
    trace = Trace()
    if isinstance(progress, LiveProgress):
        progress.trace = trace
    started = _start_executors(args.executor, workflow)
    if started is None:
        return 1
    executor, executors = started
    used = list({id(e): e for e in (executor, *executors.values())}.values())
    interrupts = Interrupts(progress, used)

    async def main() -> dict[str, Any]:
        stop = asyncio.Event()
        interrupts.attach(asyncio.get_running_loop(), stop)
        return await arun(
            workflow,
            inputs,
            staging=staging,
            executor=executor,
            outputs=args.output,
            reuse=not args.fresh,
            progress=progress,
            trace=trace,
            holder=f"pytimely workflow run {args.target}",
            capture_logs=not args.no_capture,
            executors=executors,
            rerun=args.rerun,
            until=args.until,
            keep_going=args.keep_going,
            stop=stop,
        )

    with _on_sigint(interrupts):
        return _finish(args, progress, trace, used, interrupts, main)


def _finish(
    args: argparse.Namespace,
    progress: Progress,
    trace: Trace,
    used: list[Executor],
    interrupts: Interrupts,
    main: Callable[[], Coroutine[Any, Any, dict[str, Any]]],
) -> int:
    """Run ``main`` to the end, write the outputs and say how it ended: the command's exit status."""
    try:
        outputs = asyncio.run(main())
    except (KeyboardInterrupt, RunStoppedError):
        progress.stop()
        return _interrupted(interrupts.running or list(progress.running), trace, used)
    except _USAGE_ERRORS:
        raise
    except (StagingLockedError, StagingUnavailableError) as exc:
        progress.stop()
        print(f"pytimely workflow: {exc}", file=sys.stderr)
        return 1
    except ModulesFailedError as exc:
        progress.summary(trace)
        print(f"pytimely workflow: {len(exc.failures)} modules failed:", file=sys.stderr)
        for failure in exc.failures:
            print(f"  {type(failure).__name__}: {failure}", file=sys.stderr)
        return 1
    except (OSError, PytimelyError) as exc:  # an OSError nothing above named: still one line, never a traceback
        progress.summary(trace)
        print(f"pytimely workflow: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        progress.stop()
        for running_executor in used:
            running_executor.close()
    progress.summary(trace)
    _write_outputs(outputs, args.output_dir, sys.stdout)
    return 0


def _start_executors(name: str, workflow: Module) -> tuple[Executor, dict[str, Executor]] | None:
    """The run's executor (``name``) and those its modules name, started; ``None``, said on stderr, if one cannot
    start."""
    named = sorted({m.executor for m in workflow.walk() if m.executor is not None})
    unknown = [other for other in named if other not in _EXECUTORS]
    if unknown:
        raise WorkflowUsageError(f"a module asks for executor {unknown[0]!r}; there are {list(_EXECUTORS)}")
    try:
        executor = _executor(name)
        return executor, {other: executor if other == name else _executor(other) for other in named}
    except PytimelyError as exc:
        print(f"pytimely workflow: cannot start the {name} executor: {exc}", file=sys.stderr)
        return None


@contextlib.contextmanager
def _on_sigint(handler: Callable[[int, FrameType | None], Any]) -> Iterator[None]:
    """``handler`` for SIGINT while the block runs (signals reach the main thread only: elsewhere, nothing)."""
    handled = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, handler) if handled else None
    try:
        yield
    finally:
        if handled:
            signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)


def _interrupted(running: list[str], trace: Trace, used: Sequence[Executor]) -> int:
    for running_executor in used:
        terminate = getattr(running_executor, "terminate", None)
        if terminate is not None:
            terminate()
    what = f"while {', '.join(running)} {'was' if len(running) == 1 else 'were'} running" if running else ""
    kept = [path for path in running if path in trace.ran]
    finished = (
        f" ({', '.join(kept)} finished and {'its values are' if len(kept) == 1 else 'their values are'} kept)"
        if kept
        else ""
    )
    print(
        f"pytimely workflow: interrupted {what}{finished}; values staged so far stay and the next run resumes "
        "from them",
        file=sys.stderr,
    )
    return 130


def _unlock(url: str, staging: StagingArea, force: bool) -> int:
    try:
        held = break_lock(staging, force=force)
    except (StagingLockedError, StagingUnavailableError) as exc:
        print(f"pytimely workflow: {exc}", file=sys.stderr)
        return 1
    if held is None:
        print(f"staging area {url} is not locked")
    else:
        print(f"unlocked staging area {url}: it was held by {holder_text(held)}")
    return 0


def _logs(name: str, staging: StagingArea) -> int:
    records = module_logs(staging, name)
    if not records:
        raise WorkflowUsageError(f"no output of a module {name!r} is kept in {staging!r} (run it with `run` first)")
    for record in records:
        if record["status"]:
            print(f"== {record['module']}: {record['status']} in run {record['run']} of {record['time']} ==")
            if record["error"]:
                print(record["error"])
        for stream in ("stdout", "stderr"):
            text = str(record[stream])
            print(f"== {record['module']} ({stream}{', empty' if not text else ''}) ==")
            if text:
                print(text, end="" if text.endswith("\n") else "\n")
    return 0
