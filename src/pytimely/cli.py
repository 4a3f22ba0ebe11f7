"""The ``pytimely`` command: run a worker function, or launch a local cluster of processes.

    pytimely run [-w W -n N -p I --hosts ... | --hostfile F] module:function [ARG ...]
    pytimely launch -n N [-w W] [--port P] -- COMMAND [ARG ...]
    pytimely workflow {run,plan,show} TARGET ...   (see pytimely.workflow.cli)

``run`` imports ``function`` from ``module`` and calls ``execute(function)``
with the layout the flags and ``PYTIMELY_*`` variables give (see
:mod:`pytimely.config`); ``sys.argv`` is ``[module:function, ARG ...]`` while it
runs. Each worker's result, when not ``None``, is printed as ``worker I: repr``.

``launch`` starts N processes of COMMAND on loopback, each told its index, the
hosts, a fresh cluster secret and a common ``PYTHONHASHSEED`` through the
environment, prefixes their output lines with ``[pI]``, and stops them all as
soon as one fails; its exit status is the first failure's (0 if all succeed).
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
from typing import IO, Any

from pytimely.config import add_arguments, config_from_args
from pytimely.errors import ConfigError, InputFormatError, OutputPathError, PytimelyError

__all__ = ["launch", "main"]


def _load(target: str) -> Callable[..., Any]:
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"expected module:function, got {target!r}")
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


def _run(argv: Sequence[str]) -> int:
    from pytimely.execute import execute

    parser = argparse.ArgumentParser(prog="pytimely run", description="Run module:function on a worker layout.")
    add_arguments(parser)
    parser.add_argument("target", help="module:function taking a Worker")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments left in sys.argv for the function")
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
        func = _load(args.target)
    except ConfigError as exc:
        parser.error(str(exc))
    saved = sys.argv
    sys.argv = [args.target, *args.args]
    try:
        results = execute(func, config=config)
    except (InputFormatError, OutputPathError) as exc:
        print(f"pytimely run: process {config.process}: {exc}", file=sys.stderr)
        return 2
    except PytimelyError as exc:
        print(f"pytimely run: process {config.process}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        sys.argv = saved
    for i, result in enumerate(results):
        if result is not None:
            print(f"worker {config.first_worker + i}: {result!r}")
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


def launch(
    command: Sequence[str],
    processes: int,
    workers: int = 1,
    *,
    port: int | None = None,
    grace: float = 5.0,
    elastic: bool = False,
) -> int:
    """Run ``command`` as a local cluster of ``processes`` processes; return the first failure's exit status.

    With ``elastic``, processes may join and leave while it runs: the launcher listens on a control endpoint
    (``PYTIMELY_CONTROL``, requests signed with the cluster secret, see :func:`pytimely.membership.request`),
    starts a joining process on ``add`` and asks a process to leave on ``remove`` (it sees
    ``worker.leave_requested``).
    """
    if processes < 1 or workers < 1:
        raise ConfigError("launch needs at least one process and one worker")
    if not command:
        raise ConfigError("launch needs a command after --")
    # Every process's port is bound here and handed down, so nothing can take it before the process starts.
    listeners = [_bind(port + i if port else 0) for i in range(processes)]
    hosts = [f"127.0.0.1:{s.getsockname()[1]}" for s in listeners]
    secret = secrets.token_hex(32)
    hashseed = os.environ.get("PYTHONHASHSEED") or str(secrets.randbelow(2**32))
    children: list[subprocess.Popen[bytes]] = []
    forwarders: list[threading.Thread] = []
    out, err = sys.stdout.buffer, sys.stderr.buffer
    lock = threading.Lock()
    left: list[int] = []

    def spawn(index: int, extra: dict[str, str], listener: socket.socket) -> None:
        env = dict(os.environ)
        env.update(
            PYTIMELY_LISTEN_FD=str(listener.fileno()),
            PYTIMELY_PROCESSES=str(len(hosts)),
            PYTIMELY_PROCESS=str(index),
            PYTIMELY_WORKERS=str(workers),
            PYTIMELY_HOSTS=",".join(hosts),
            PYTIMELY_SECRET=secret,
            PYTHONHASHSEED=hashseed,
            **extra,
        )
        env.pop("PYTIMELY_HOSTFILE", None)
        env.pop("PYTIMELY_SECRET_FILE", None)
        try:
            child = subprocess.Popen(
                list(command), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(listener.fileno(),)
            )
        finally:
            listener.close()  # the child holds its own copy
        children.append(child)
        prefix = f"[p{index}] ".encode()
        for stream, sink in ((child.stdout, out), (child.stderr, err)):
            assert stream is not None
            t = threading.Thread(target=_forward, args=(stream, prefix, sink), daemon=True)
            t.start()
            forwarders.append(t)

    endpoint = None
    extra: dict[str, str] = {}
    if elastic:
        from pytimely.membership import ControlEndpoint

        def handle(op: str, process: int | None) -> dict[str, Any]:
            with lock:
                if op == "add":
                    # One change at a time: a process still leaving must be gone before another joins.
                    for q in left:
                        children[q].wait()
                    index = len(hosts)
                    listener = _bind(0)
                    hosts.append(f"127.0.0.1:{listener.getsockname()[1]}")
                    spawn(index, {**extra, "PYTIMELY_JOIN": "1", "PYTIMELY_LEFT": ",".join(map(str, left))}, listener)
                    return {"process": index}
                if process is None or not 0 <= process < len(children) or children[process].poll() is not None:
                    return {"error": f"no running process {process!r}"}
                left.append(process)
                children[process].send_signal(signal.SIGUSR1)
                return {"process": process}

        endpoint = ControlEndpoint(secret.encode(), handle)
        extra = {"PYTIMELY_ELASTIC": "1", "PYTIMELY_INITIAL": str(processes), "PYTIMELY_CONTROL": endpoint.address}
    with lock:
        for index in range(processes):
            spawn(index, extra, listeners[index])
    status = 0
    try:
        while True:
            with lock:
                codes = [c.poll() for c in children]
            failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                index, code = failed[0]
                status = code if code and code > 0 else 1
                print(
                    f"pytimely launch: process {index} exited with status {code}; stopping the others", file=sys.stderr
                )
                _stop(children, grace, settle=min(grace, 2.0))
                break
            if all(c == 0 for c in codes):
                break
            time.sleep(0.02)
    except KeyboardInterrupt:
        _stop(children, grace)
        status = 130
    finally:
        if endpoint is not None:
            endpoint.close()
    for t in forwarders:
        t.join(timeout=grace)
    return status


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
        prog="pytimely launch", description="Start a local cluster of N processes running COMMAND."
    )
    parser.add_argument("-n", "--processes", type=int, required=True, help="number of processes")
    parser.add_argument("-w", "--workers", type=int, default=1, help="workers per process (default 1)")
    parser.add_argument("--port", type=int, help="first of N consecutive ports (default: free ports)")
    parser.add_argument(
        "--elastic", action="store_true", help="let processes join and leave while it runs (control endpoint)"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        return launch(command, args.processes, args.workers, port=args.port, elastic=args.elastic)
    except ConfigError as exc:
        parser.error(str(exc))
    except OSError as exc:
        print(f"pytimely launch: cannot start {command[0]!r}: {exc}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    """The ``pytimely`` command line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = "usage: pytimely {run,launch,workflow} ...  (pytimely run --help, pytimely launch --help)"
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "run":
        return _run(rest)
    if command == "launch":
        return _launch(rest)
    if command == "workflow":
        from pytimely.workflow.cli import main as workflow_main

        return workflow_main(rest)
    print(f"pytimely: unknown command {command!r}\n{usage}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
