"""Starting real pytimely processes on loopback (the fault-injecting proxy is in :mod:`tests.cluster.proxy`)."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def env_for(
    processes: int, process: int, hosts: Sequence[tuple[str, int]], secret: str, **extra: str
) -> dict[str, str]:
    """The environment of process ``process`` of a cluster."""
    env = dict(os.environ)
    env.update(
        PYTIMELY_PROCESSES=str(processes),
        PYTIMELY_PROCESS=str(process),
        PYTIMELY_WORKERS=extra.pop("workers", "1"),
        PYTIMELY_HOSTS=",".join(f"{h}:{p}" for h, p in hosts),
        PYTIMELY_SECRET=secret,
        PYTHONHASHSEED="7",
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
        PYTIMELY_CONNECT_TIMEOUT="20",
    )
    env.update(extra)
    return env


def listen() -> socket.socket:
    """A loopback socket listening on a free port, for :func:`start` to hand to a process."""
    return socket.create_server(("127.0.0.1", 0), backlog=128)


def start(args: Sequence[str], env: dict[str, str], listener: socket.socket | None = None) -> subprocess.Popen[str]:
    """Start ``python -m pytimely run ARGS`` with ``env``, capturing its output.

    A ``listener`` is handed to the process (and closed here), as ``pytimely launch`` does: a port picked and
    released before the process binds it could be taken in between by any connection on the machine.
    """
    fds: tuple[int, ...] = ()
    if listener is not None:
        env = {**env, "PYTIMELY_LISTEN_FD": str(listener.fileno())}
        fds = (listener.fileno(),)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "pytimely", "run", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            pass_fds=fds,
        )
    finally:
        if listener is not None:
            listener.close()


class Cluster:
    """Processes of one cluster started by a test; ``hosts_for(p)`` may point a process at a proxy."""

    def __init__(self, processes: int, **extra: str) -> None:
        self.processes = processes
        self.listeners: dict[int, socket.socket] = {p: listen() for p in range(processes)}
        self.hosts = [("127.0.0.1", self.listeners[p].getsockname()[1]) for p in range(processes)]
        self.secret = secrets.token_hex(16)
        self.extra = extra
        self.procs: list[subprocess.Popen[str]] = []

    def start(
        self,
        args: Sequence[str],
        *,
        hosts: dict[int, list[tuple[str, int]]] | None = None,
        env: dict[int, dict[str, str]] | None = None,
        only: Sequence[int] | None = None,
    ) -> list[subprocess.Popen[str]]:
        """Start every process (or those in ``only``) running ``args``."""
        for p in range(self.processes) if only is None else only:
            process_hosts = (hosts or {}).get(p, self.hosts)
            extra = {**self.extra, **(env or {}).get(p, {})}
            env_p = env_for(self.processes, p, process_hosts, self.secret, **extra)
            self.procs.append(start(args, env_p, self.listeners.pop(p)))
        return self.procs

    def wait(self, timeout: float = 60) -> list[tuple[int, str, str]]:
        """Each process's exit status, stdout and stderr."""
        out = []
        for proc in self.procs:
            try:
                stdout, stderr = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                stdout, stderr = proc.communicate()
                stderr += "\n[killed by the test: timed out]"
            out.append((proc.returncode, stdout, stderr))
        return out

    def kill(self) -> None:
        """Kill whatever still runs; close the listeners of processes never started."""
        for listener in self.listeners.values():
            listener.close()
        self.listeners.clear()
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def report(results: Sequence[tuple[int, str, str]]) -> str:
    """Each process's exit status and the end of its stderr, for a failed assertion to show in full."""
    return "\n".join(f"process {i} exited {code}:\n{err[-3000:]}" for i, (code, _, err) in enumerate(results))


