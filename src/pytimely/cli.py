"""The ``pytimely`` command: run a worker function, or launch a local cluster of processes.

    pytimely run [-w W -n N -p I --hosts ... | --hostfile F] [--metrics-port M] module:function [ARG ...]
    pytimely explain [same flags as run] module:function [ARG ...]
    pytimely show module:function [-w W] [--format mermaid|dot|svg] [ARG ...]
    pytimely launch -n N [-w W] [--port P] [--metrics-port M] [-q] [--elastic] [--recovery DIR ...] -- COMMAND ...
    pytimely workflow {run,plan,show,logs} ...     (see pytimely.workflow.cli)
    pytimely log-summary FILE ...   (event logs written under PYTIMELY_LOG=path, see pytimely.observe.logsummary)
    pytimely simulate [--seeds N] [--faults LIST] [--replay SEED] [--mutant NAME] [--list]   (pytimely.simulate)

``run`` imports ``function`` from ``module`` and calls ``execute(function)``
with the layout the flags and ``PYTIMELY_*`` variables give (see
:mod:`pytimely.config`); ``sys.argv`` is ``[module:function, ARG ...]`` while it
runs. Each worker's result, when not ``None``, is printed as ``worker I: repr``.

``launch`` starts N processes of COMMAND on loopback, each told its index, the
hosts, a fresh cluster secret and a common ``PYTHONHASHSEED`` through the
environment, prefixes their output lines with ``[pI]``, and stops them all as
soon as one fails; its exit status is the first failure's (0 if all succeed).

``--recovery DIR`` (on ``launch``, ``run`` and the examples) keeps the declared state of the job's
operators in DIR, snapshotted at epoch boundaries; a run started again resumes from the last snapshot,
with any number of processes (docs/recovery.md). Snapshots are pickles: a store is trusted like the
program's own files, unless it is sealed with ``--recovery-key-file``; then every file not sealed by that
key is refused before anything in it is unpickled.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import IO, TYPE_CHECKING, Any

from pytimely.command import USAGE_ERRORS, add_run_arguments, observers, parse_run, run_with
from pytimely.config import LAYOUT_VARIABLES, RECOVERY_TRUST, RecoverySettings, RunConfig
from pytimely.errors import ConfigError, PytimelyError, RecoveryError
from pytimely.observe.status import ProgressLine, Status, status_from_metrics

if TYPE_CHECKING:
    from pytimely.membership import ControlEndpoint

__all__ = ["launch", "main"]

def _load(target: str) -> Callable[..., Any]:
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"expected module:function, got {target!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, "")  # modules of the current folder, as `python -m` finds them
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r}: {exc}") from exc
    except Exception as exc:  # the module itself is broken (a syntax error, or its top level raised)
        raise ConfigError(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from exc
    func = module
    for part in attr.split("."):
        try:
            func = getattr(func, part)
        except AttributeError:
            raise ConfigError(f"{module_name!r} has no attribute {attr!r}") from None
    if not callable(func):
        raise ConfigError(f"{target} is not callable")
    return func


def _explaining(func: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``func``, then ``finish``; a stall or timeout, even one heard from another process, gets an explanation."""
    from pytimely.errors import StalledError, StepTimeoutError

    def run(worker: Any) -> Any:
        try:
            result = func(worker)
            worker.finish()
        except (StalledError, StepTimeoutError) as exc:
            if not getattr(exc, "__notes__", None):
                worker._explained(exc)
            raise
        return result

    return run


def _run(argv: Sequence[str], *, explain: bool = False) -> int:
    prog = "pytimely explain" if explain else "pytimely run"
    parser = argparse.ArgumentParser(
        prog=prog, description="Run module:function on a worker layout.", epilog=f"Recovery: {RECOVERY_TRUST}"
    )
    add_run_arguments(parser)
    parser.add_argument("target", help="module:function taking a Worker (imported as `python -m` would)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments left in sys.argv for the function")
    args, run = parse_run(parser, argv)
    try:
        func = _load(args.target)
    except ConfigError as exc:
        parser.error(str(exc))
    process = run.cluster.process
    try:
        log, closers = observers(run)
    except (PytimelyError, OSError) as exc:
        print(f"{prog}: process {process}: {exc}", file=sys.stderr)
        return 2
    saved = sys.argv
    sys.argv = [args.target, *args.args]
    if explain:
        func = _explaining(func)
    try:
        results = run_with(func, run, name=args.target, log=log)
    except USAGE_ERRORS as exc:
        print(f"{prog}: process {process}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except PytimelyError as exc:
        print(f"{prog}: process {process}: {type(exc).__name__}: {exc}", file=sys.stderr)
        if explain:
            for note in getattr(exc, "__notes__", ()):
                print(note, file=sys.stderr)
        return 1
    finally:
        sys.argv = saved
        for close in closers:
            close()
    for i, result in enumerate(results):
        if result is not None:
            print(f"worker {run.cluster.first_worker + i}: {result!r}")
    return 0


def _bind(port: int) -> socket.socket:
    """A socket listening on loopback ``port`` (0: any free one) for a process this launcher starts."""
    try:
        return socket.create_server(("127.0.0.1", port), backlog=128)
    except OSError as exc:
        raise ConfigError(f"launch cannot listen on 127.0.0.1:{port} for a process: {exc}") from exc


def _forward(stream: IO[bytes], prefix: bytes, out: IO[bytes]) -> None:
    for line in iter(stream.readline, b""):
        out.write(prefix + line if line.endswith(b"\n") else prefix + line + b"\n")
        out.flush()
    stream.close()


class _Elastic:
    """The launcher's view of an elastic run: who runs, who is leaving, who waits to join; the control answers.

    Every leave reaches it, whoever starts it: ``remove`` (it asks), ``leaving`` (the process says so before
    it sends ``LEAVING``) and any exit. A newcomer is started only once every process known to be leaving has
    exited, and dials exactly the processes running then, so it never dials one that left. A leaver not gone
    within ``leave_timeout`` seconds fails the run naming it.
    """

    def __init__(self, launcher: _Processes, leave_timeout: float) -> None:
        self.launcher = launcher
        self.leave_timeout = leave_timeout
        self.leaving: dict[int, float] = {}
        """Processes leaving, with the time by which they must have exited."""
        self.waiting: list[tuple[int, socket.socket]] = []
        """Newcomers asked for and not started yet (index, its listening socket)."""
        self.asked: set[int] = set()
        self.joined: set[int] = set()
        """Workers of newcomers that said they have bootstrapped."""

    def handle(self, op: str, process: int | None) -> dict[str, Any]:
        """Answer one control request (called on the endpoint's threads)."""
        launcher = self.launcher
        with launcher.lock:
            if op == "add":
                index = len(launcher.hosts)
                listener = _bind(0)
                launcher.hosts.append(f"127.0.0.1:{listener.getsockname()[1]}")
                self.waiting.append((index, listener))
                self.asked.add(index)
                return {"process": index}
            if op == "joined" and process is not None and 0 <= process < len(launcher.hosts) * launcher.workers:
                self.joined.add(process)
                return {"process": process // launcher.workers}
            if process is None or not 0 <= process < len(launcher.hosts):
                return {"error": f"no process {process!r}"}
            if op == "status":
                return {"process": process, **self._state(process)}
            child = launcher.children.get(process)
            if child is None or child.poll() is not None:
                return {"error": f"process {process} is not running"}
            if op == "remove" and process not in self.leaving:
                child.send_signal(signal.SIGUSR1)
            self.leaving.setdefault(process, time.monotonic() + self.leave_timeout)
            return {"process": process}

    def _state(self, process: int) -> dict[str, Any]:
        child = self.launcher.children.get(process)
        if child is None:
            return {"state": "waiting", "status": None}
        code = child.poll()
        if code is not None:
            return {"state": "exited", "status": code}
        if process in self.leaving:
            return {"state": "leaving", "status": None}
        w = self.launcher.workers
        joined = all(process * w + i in self.joined for i in range(w))
        return {"state": "joined" if joined else "running", "status": None}

    def live(self) -> list[int]:
        """Processes running and not leaving: what a newcomer dials."""
        return [i for i, c in self.launcher.children.items() if c.poll() is None and i not in self.leaving]

    def tick(self) -> str | None:
        """Forget leavers that exited, start a waiting newcomer if none is leaving; a failure's reason, if any."""
        launcher = self.launcher
        with launcher.lock:
            now = time.monotonic()
            for process, deadline in list(self.leaving.items()):
                if launcher.children[process].poll() is not None:
                    del self.leaving[process]
                elif now > deadline:
                    return f"process {process} did not finish leaving within {self.leave_timeout:g} s"
            if self.waiting and not self.leaving:
                index, listener = self.waiting.pop(0)
                live = set(self.live())
                left = [q for q in range(index) if q not in live]
                launcher.spawn(index, listener, join=True, left=left)
        return None

    def close(self) -> None:
        """Close the sockets of newcomers never started."""
        for _, listener in self.waiting:
            listener.close()
        self.waiting.clear()

    def explain(self) -> None:
        """After a failure: say which newcomers had exited, as a member's join deadline may name them."""
        for index in sorted(self.asked):
            state = self._state(index)
            if state["state"] == "exited":
                print(f"pytimely launch: process {index}, asked to join, had exited with status {state['status']}",
                      file=sys.stderr)
            elif state["state"] == "waiting":
                print(f"pytimely launch: process {index}, asked to join, was never started (a leave was in flight)",
                      file=sys.stderr)


class _Processes:
    """The processes of one ``launch``: their hosts, their environment, their output."""

    def __init__(self, command: Sequence[str], workers: int, hosts: list[str], base: RunConfig) -> None:
        self.command = list(command)
        self.workers = workers
        self.hosts = hosts
        # 32 random bytes (256 bits), hex-encoded: well above any minimum length for the cluster secret.
        self.secret = secrets.token_hex(32)
        self.hashseed = os.environ.get("PYTHONHASHSEED") or str(secrets.randbelow(2**32))
        self.children: dict[int, subprocess.Popen[bytes]] = {}
        self.forwarders: list[threading.Thread] = []
        self.lock = threading.RLock()
        self.base = base
        """What every process is told alike (the tunables of this launcher's environment, recovery, control)."""
        self.initial = len(hosts)
        self.elastic = False

    def spawn(self, index: int, listener: socket.socket, *, join: bool = False, left: Sequence[int] = ()) -> None:
        """Start process ``index`` with ``listener`` (handed down, then closed here); a newcomer with ``join``."""
        hosts = self.hosts[: index + 1] if join else self.hosts
        base = self.base
        cluster = replace(
            base.cluster,
            workers=self.workers,
            processes=len(hosts),
            process=index,
            hosts=tuple((h.rsplit(":", 1)[0], int(h.rsplit(":", 1)[1])) for h in hosts),
            secret=self.secret.encode(),
            listen_fd=listener.fileno(),
            elastic=self.elastic,
            initial=self.initial if self.elastic else 0,
            join=join,
            left=tuple(left),
        )
        metrics = None if base.metrics_port is None else base.metrics_port + index
        env = replace(base, cluster=cluster, metrics_port=metrics).child_env()
        env["PYTHONHASHSEED"] = self.hashseed
        try:
            child = subprocess.Popen(
                self.command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(listener.fileno(),)
            )
        finally:
            listener.close()  # the child holds its own copy
        self.children[index] = child
        prefix = f"[p{index}] ".encode()
        for stream, sink in ((child.stdout, sys.stdout.buffer), (child.stderr, sys.stderr.buffer)):
            assert stream is not None
            t = threading.Thread(target=_forward, args=(stream, prefix, sink), daemon=True)
            t.start()
            self.forwarders.append(t)


def launch(
    command: Sequence[str],
    processes: int,
    workers: int = 1,
    *,
    port: int | None = None,
    grace: float = 5.0,
    elastic: bool = False,
    leave_timeout: float = 60.0,
    metrics_port: int | None = None,
    quiet: bool = False,
    recovery: str | None = None,
    recovery_mode: str = "resume",
    recovery_key_file: str | None = None,
) -> int:
    """Run ``command`` as a local cluster of ``processes`` processes; return the first failure's exit status.

    With ``elastic``, processes may join and leave while it runs: the launcher listens on a control endpoint
    (``PYTIMELY_CONTROL``, requests signed with the cluster secret, see :func:`pytimely.membership.request`),
    starts a joining process on ``add`` once no process is leaving, asks a process to leave on ``remove`` (it
    sees ``worker.leave_requested``), and hears ``leaving`` from a process that leaves on its own. A leaver
    still running ``leave_timeout`` seconds after the launcher heard of it fails the run.

    With ``metrics_port`` P, process I serves Prometheus metrics on port P + I (``PYTIMELY_METRICS_PORT``), and,
    unless ``quiet`` or stderr is not a terminal, the launcher draws a progress line from them.

    With ``recovery`` DIR, every process (a newcomer of an elastic run too) finds it as ``PYTIMELY_RECOVERY``,
    with ``recovery_mode`` and ``recovery_key_file`` as ``PYTIMELY_RECOVERY_MODE`` and
    ``PYTIMELY_RECOVERY_KEY_FILE``: the job's declared state is snapshotted there and restored from it, see
    ``docs/recovery.md``. A DIR that cannot be written, or an unreadable key file, fails here, before any start.
    """
    if processes < 1 or workers < 1:
        raise ConfigError("launch needs at least one process and one worker")
    settings = None if recovery is None else _checked_recovery(recovery, recovery_mode, recovery_key_file)
    if not command:
        raise ConfigError("launch needs a command after --")
    # The tunables (timeouts, windows...) of this environment reach every process; the layout is made here.
    tunables = {k: v for k, v in os.environ.items() if k not in LAYOUT_VARIABLES}
    base = RunConfig.from_env(tunables)
    base = replace(base, recovery=settings or base.recovery, metrics_port=metrics_port)
    # Every process's port is bound here and handed down, so nothing can take it before the process starts.
    listeners = [_bind(port + i if port else 0) for i in range(processes)]
    launcher = _Processes(command, workers, [f"127.0.0.1:{s.getsockname()[1]}" for s in listeners], base)
    membership, endpoint = _elastic(launcher, leave_timeout) if elastic else (None, None)
    try:
        with launcher.lock:
            for index in range(processes):
                launcher.spawn(index, listeners[index])
        with _progress_line(launcher, quiet):
            status = _supervise(launcher, membership, grace)
    finally:
        if endpoint is not None:
            endpoint.close()
        if membership is not None:
            membership.close()
    for t in launcher.forwarders:
        t.join(timeout=grace)
    return status


def _checked_recovery(store: str, mode: str, key_file: str | None) -> RecoverySettings:
    """The recovery settings every process gets, with an absolute store; fails now on a bad key file or store."""
    from pytimely.recovery import open_store

    settings = RecoverySettings(store, mode=mode, key_file=key_file).absolute()  # type: ignore[arg-type]
    settings.key()
    open_store(settings.store).check_writable()
    return settings


def _elastic(launcher: _Processes, leave_timeout: float) -> tuple[_Elastic, ControlEndpoint]:
    """Make ``launcher``'s run elastic: a control endpoint every process is told of, serving :class:`_Elastic`."""
    from pytimely.membership import ControlEndpoint

    membership = _Elastic(launcher, leave_timeout)
    endpoint = ControlEndpoint(launcher.secret.encode(), membership.handle)
    launcher.elastic = True
    launcher.base = replace(launcher.base, control=endpoint.address)
    return membership, endpoint


def _progress_line(launcher: _Processes, quiet: bool) -> ProgressLine:
    """The launcher's progress line, drawn from its processes' metrics (off without ``--metrics-port``)."""
    port = launcher.base.metrics_port or 0
    started = time.monotonic()

    def scrape() -> Status:
        import urllib.request

        texts = []
        for index in list(launcher.children):
            try:
                url = f"http://127.0.0.1:{port + index}/metrics"
                with urllib.request.urlopen(url, timeout=0.5) as response:
                    texts.append(response.read().decode())
            except OSError:
                continue  # not serving yet, or gone: the line shows the others
        return status_from_metrics(texts, time.monotonic() - started)

    return ProgressLine(quiet=quiet or launcher.base.metrics_port is None, source=scrape)


def _supervise(launcher: _Processes, membership: _Elastic | None, grace: float) -> int:
    """Wait for the processes; on the first failure stop the others. The run's exit status."""
    children = launcher.children
    try:
        while True:
            with launcher.lock:
                codes = {i: c.poll() for i, c in children.items()}
            if all(c == 0 for c in codes.values()):
                return 0  # a newcomer still waiting to start has nothing left to join: it is dropped
            reason = membership.tick() if membership is not None else None
            failed = [(i, c) for i, c in sorted(codes.items()) if c not in (None, 0)]
            if failed or reason:
                if reason:
                    status = 1
                    print(f"pytimely launch: {reason}; stopping the others", file=sys.stderr)
                else:
                    index, code = failed[0]
                    status = code if code and code > 0 else 1
                    print(
                        f"pytimely launch: process {index} exited with status {code}; stopping the others",
                        file=sys.stderr,
                    )
                if membership is not None:
                    membership.explain()
                with launcher.lock:
                    _stop(list(children.values()), grace, settle=min(grace, 2.0))
                    after = {i: c.poll() for i, c in children.items()}
                return _cause_status(status, after)
            time.sleep(0.02)
    except KeyboardInterrupt:
        _stop(list(children.values()), grace)
        return 130


def _cause_status(status: int, codes: dict[int, int | None]) -> int:
    """The run's exit status once all have stopped: a specific status (2, bad input) over the generic 1.

    A process stopped by another's failure exits with 1, and may do so before the process whose input was bad
    has finished exiting with 2; the status a user acts on is the cause's.
    """
    if status != 1:
        return status
    specific = [c for _, c in sorted(codes.items()) if c is not None and c > 1]
    return specific[0] if specific else status


def _stop(children: list[subprocess.Popen[bytes]], grace: float, settle: float = 0.0) -> None:
    # The others learn of a failure from the failed process itself and stop on their own, saying why; ``settle``
    # gives them that chance before they are terminated.
    deadline = time.monotonic() + settle
    for child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for child in children:
        try:
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _launch(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="pytimely launch", description="Start a local cluster of N processes running COMMAND.",
        epilog=f"Recovery: {RECOVERY_TRUST} See docs/recovery.md.",
    )
    parser.add_argument("-n", "--processes", type=int, required=True, help="number of processes")
    parser.add_argument("-w", "--workers", type=int, default=1, help="workers per process (default 1)")
    parser.add_argument("--port", type=int, help="first of N consecutive ports (default: free ports)")
    parser.add_argument(
        "--elastic", action="store_true", help="let processes join and leave while it runs (control endpoint)"
    )
    parser.add_argument(
        "--leave-timeout", type=float, default=60.0,
        help="with --elastic: seconds a leaving process may take to exit before the run fails (60)",
    )
    parser.add_argument(
        "--metrics-port", type=int, default=None,
        help="process I serves Prometheus metrics on this port + I; the launcher shows a progress line from them",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    parser.add_argument(
        "--recovery", metavar="DIR",
        help="snapshot store the processes keep their declared state in and resume from after a crash, on any "
             "number of processes; combines with --elastic (docs/recovery.md)",
    )
    parser.add_argument(
        "--recovery-mode", choices=("resume", "fresh"), default="resume",
        help="with --recovery: resume from DIR's last snapshot (default), or empty DIR and start over",
    )
    parser.add_argument(
        "--recovery-key-file", metavar="FILE",
        help="with --recovery: seal DIR with this key; files it did not seal are refused before unpickling",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        return launch(
            command, args.processes, args.workers, port=args.port, elastic=args.elastic,
            leave_timeout=args.leave_timeout, metrics_port=args.metrics_port, quiet=args.quiet,
            recovery=args.recovery, recovery_mode=args.recovery_mode, recovery_key_file=args.recovery_key_file,
        )
    except ConfigError as exc:
        parser.error(str(exc))
    except RecoveryError as exc:
        print(f"pytimely launch: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"pytimely launch: cannot start {command[0]!r}: {exc}", file=sys.stderr)
        return 2


def _show(argv: Sequence[str]) -> int:
    from pytimely.inspection import GraphvizError, built_graphs, render_format

    parser = argparse.ArgumentParser(
        prog="pytimely show", description="Print the dataflows module:function builds, without running them."
    )
    parser.add_argument("-w", "--workers", type=int, default=1, help="workers the function is built for (1)")
    parser.add_argument("--format", choices=("mermaid", "dot", "svg"), default="mermaid", help="output format")
    parser.add_argument("target", help="module:function taking a Worker (other arguments are left in sys.argv for it)")
    # Flags may follow the target (``show m:f -w 2``); what the parser does not know goes to the function.
    args, extra = parser.parse_known_args(argv)
    args.args = extra[1:] if extra[:1] == ["--"] else extra
    if args.workers < 1:
        parser.error(f"-w must be at least 1, got {args.workers}")
    try:
        func = _load(args.target)
    except ConfigError as exc:
        parser.error(str(exc))
    saved = sys.argv
    sys.argv = [args.target, *args.args]
    try:
        text = render_format(built_graphs(func, args.workers), args.format)
    except GraphvizError as exc:
        print(f"pytimely show: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except PytimelyError as exc:
        print(f"pytimely show: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # the user's code, before its first step: one line, not a traceback
        print(
            f"pytimely show: {args.target} raised {type(exc).__name__} while building its dataflows: {exc} "
            "(show takes a function of a Worker, as pytimely run does)",
            file=sys.stderr,
        )
        return 1
    finally:
        sys.argv = saved
    sys.stdout.write(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The ``pytimely`` command line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = "usage: pytimely {run,explain,show,launch,workflow,log-summary,simulate} ...  (pytimely COMMAND --help)"
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "run":
        return _run(rest)
    if command == "explain":
        return _run(rest, explain=True)
    if command == "show":
        return _show(rest)
    if command == "launch":
        return _launch(rest)
    if command == "log-summary":
        from pytimely.observe.logsummary import main as summary_main

        return summary_main(rest)
    if command == "simulate":
        return int(importlib.import_module("pytimely.simulate.cli").main(rest))
    if command == "workflow":
        from pytimely.workflow.cli import main as workflow_main

        return workflow_main(rest)
    print(f"pytimely: unknown command {command!r}\n{usage}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
