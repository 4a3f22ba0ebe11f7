"""How a computation is laid out: workers per process, processes, this process's index, hosts, secret.

Every flag has an environment variable, so ``pytimely launch`` (and schedulers)
can configure processes without touching their command lines::

    -w/--workers N       PYTIMELY_WORKERS          workers in this process (default 1)
    -n/--processes N     PYTIMELY_PROCESSES        processes in the cluster (default 1)
    -p/--process I       PYTIMELY_PROCESS          this process's index, 0 <= I < N
    --hosts H:P,...      PYTIMELY_HOSTS            where each process listens, by index
    --hostfile FILE      PYTIMELY_HOSTFILE         the same, one host:port per line
    --bind ADDR          PYTIMELY_BIND             the address to listen on (default 127.0.0.1)
    --secret-file FILE   PYTIMELY_SECRET_FILE      the cluster secret (or PYTIMELY_SECRET itself)
                         PYTIMELY_HEARTBEAT        seconds between heartbeats on an idle link (0.5)
                         PYTIMELY_TIMEOUT          seconds of silence after which a peer counts as stalled (10)
                         PYTIMELY_CONNECT_TIMEOUT  seconds to wait for every peer to connect (60)
                         PYTIMELY_HANDSHAKE_TIMEOUT seconds one connecting peer may take to authenticate (10)
                         PYTIMELY_SEND_TIMEOUT     seconds a peer may take no byte while frames wait for it (60)
                         PYTIMELY_STALL_TIMEOUT    seconds every process must be quiet before a stall is reported (30)
                         PYTIMELY_ENCRYPT          0: authenticate socket frames without encrypting them (default 1;
                                                   payloads in a same-host ring are authenticated, never encrypted)
                         PYTIMELY_AGGREGATE_PROGRESS 0: every worker sends its progress to every worker (default 1:
                                                   combined per process, with several workers a process)
                         PYTIMELY_SHARED_MEMORY    bytes of the ring each process offers a peer on its host for big
                                                   payloads (8 MiB; 0: every byte over the socket)
                         PYTIMELY_SEND_WINDOW      bytes of data queued towards a peer before workers wait (64 MiB)
                         PYTIMELY_RECV_WINDOW      bytes received but not yet taken before reading pauses (64 MiB)
                         PYTIMELY_ELASTIC          1: processes may join and leave while the computation runs
                         PYTIMELY_INITIAL          processes the computation started with (a joining process's view)
                         PYTIMELY_JOIN             1: this process joins a computation already running
                         PYTIMELY_LEFT             indices of processes that have left, comma-separated
                         PYTIMELY_LISTEN_FD        an inherited socket already listening on this process's port

A flag wins over its variable. Worker indices are global: process ``p`` runs
workers ``p*W .. p*W+W-1``. The secret is never taken on the command line,
where other users could read it.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from pytimely.errors import ConfigError, WeakSecretError

__all__ = ["MIN_SECRET", "Config", "add_arguments", "config_from_args", "is_loopback"]

MIN_SECRET = 16
"""The shortest cluster secret accepted, in bytes (128 bits)."""


@dataclass(frozen=True, slots=True)
class Config:
    """The layout of a computation and how its processes reach one another."""

    workers: int = 1
    processes: int = 1
    process: int = 0
    hosts: tuple[tuple[str, int], ...] = ()
    bind: str = "127.0.0.1"
    secret: bytes | None = field(default=None, repr=False)
    heartbeat: float = 0.5
    timeout: float = 10.0
    connect_timeout: float = 60.0
    handshake_timeout: float = 10.0
    """Seconds one connecting peer may take over its handshake (handshakes run in parallel, within connect_timeout)."""
    send_timeout: float = 60.0
    """Seconds a peer may take no byte at all while frames wait for it (a slow reader is never failed)."""
    stall_timeout: float = 30.0
    """Seconds every process must be quiet, with nothing sent, before an unfinished computation is stalled."""
    encrypt: bool = True
    """Whether frames on the socket are encrypted as well as authenticated (False: authenticated only, readable on
    the wire); payloads in a same-host shared-memory ring are authenticated and never encrypted."""
    aggregate_progress: bool = True
    """Whether the workers of a process (several a process, fixed or elastic cluster) send their progress batches to
    another process combined, once, fanned out there (seed 002 §3.3), instead of each once per worker there."""
    shared_memory: int = 8 << 20
    """Bytes of the shared-memory ring a process offers each peer for payloads of 64 KiB and more (0: none); only
    a peer on the same host can map it, any other takes everything over the socket."""
    send_window: int = 64 << 20
    """Bytes of data frames a process may queue towards one peer before its workers wait."""
    recv_window: int = 64 << 20
    """Bytes of received data not yet taken by this process's workers before it stops reading."""
    elastic: bool = False
    """Whether processes may join and leave while the computation runs (see :mod:`pytimely.membership`)."""
    initial: int = 0
    """How many processes the computation started with (0: ``processes``); processes that join come after."""
    join: bool = False
    """Whether this process joins a computation already running (it is then the highest index in ``hosts``)."""
    left: tuple[int, ...] = ()
    """Processes that have left the computation (a joining process does not look for them)."""
    listen_fd: int | None = None
    """A socket this process inherited, already listening on its port: a launcher that binds every port before
    starting the processes leaves nothing else the time to take one (``pytimely launch`` does this)."""

    def __post_init__(self) -> None:
        for name in ("workers", "processes"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if type(self.process) is not int or not 0 <= self.process < self.processes:
            raise ConfigError(f"process index {self.process!r} is not in 0..{self.processes - 1}")
        for name in (
            "heartbeat",
            "timeout",
            "connect_timeout",
            "handshake_timeout",
            "send_timeout",
            "stall_timeout",
            "send_window",
            "recv_window",
        ):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)!r}")
        if type(self.shared_memory) is not int or not (
            self.shared_memory == 0 or 1 << 17 <= self.shared_memory <= 1 << 32
        ):
            raise ConfigError(
                f"shared_memory must be 0 (no ring) or 128 KiB to 4 GiB (a ring must hold the smallest payload it "
                f"takes beside its 64-byte control block), got {self.shared_memory!r}"
            )
        if self.initial < 0 or self.initial > self.processes:
            raise ConfigError(f"initial must be between 0 and processes ({self.processes}), got {self.initial!r}")
        if (self.join or self.left or self.initial) and not self.elastic:
            raise ConfigError(
                "joining, leaving and an initial process count need an elastic cluster (PYTIMELY_ELASTIC=1)"
            )
        if self.join and self.process != self.processes - 1:
            raise ConfigError(
                f"a joining process is the newest: its index must be the last in hosts ({self.processes - 1}), "
                f"got {self.process}"
            )
        if self.elastic and self.initial_processes * self.workers < 2:
            raise ConfigError(
                "an elastic computation needs at least two workers from the start (one worker compiles exchanges "
                "away, so a process joining later would find no channels to receive on)"
            )
        if self.listen_fd is not None and (type(self.listen_fd) is not int or self.listen_fd < 0):
            raise ConfigError(f"listen_fd must be a file descriptor (an int >= 0), got {self.listen_fd!r}")
        if self.process in self.left:
            raise ConfigError(f"process {self.process} is listed as having left")
        if self.timeout <= 2 * self.heartbeat:
            raise ConfigError(f"timeout ({self.timeout} s) must exceed two heartbeats ({self.heartbeat} s each)")
        if self.processes > 1 or self.elastic:
            if len(self.hosts) != self.processes:
                raise ConfigError(
                    f"{self.processes} processes need {self.processes} host:port entries (--hosts or --hostfile), "
                    f"got {len(self.hosts)}"
                )
            if not self.secret:
                raise ConfigError(
                    "a cluster of several processes needs a shared secret: set PYTIMELY_SECRET or "
                    "PYTIMELY_SECRET_FILE (pytimely launch makes a fresh one)"
                )
            host = self.hosts[self.process][0]
            if is_loopback(self.bind) and not is_loopback(host):
                raise ConfigError(
                    f"process {self.process} is listed as {host}, which other hosts would reach, but listens only on "
                    f"loopback ({self.bind}); pass --bind {host} (or --bind 0.0.0.0) to accept remote peers"
                )

    @property
    def peers(self) -> int:
        """Workers in the whole cluster."""
        return self.workers * self.processes

    @property
    def initial_processes(self) -> int:
        """How many processes the computation started with."""
        return self.initial or self.processes

    @property
    def initial_peers(self) -> int:
        """Workers the computation started with: ``exchange`` spreads records over these."""
        return self.initial_processes * self.workers

    @property
    def first_worker(self) -> int:
        """The global index of this process's first worker."""
        return self.process * self.workers

    def with_workers(self, workers: int) -> Config:
        """This configuration with another number of workers per process."""
        return replace(self, workers=workers)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_hosts(text: str, where: str) -> tuple[tuple[str, int], ...]:
    """``host:port`` entries separated by commas or newlines (``#`` starts a comment)."""
    out = []
    for n, raw in enumerate(text.replace(",", "\n").splitlines(), 1):
        entry = raw.split("#", 1)[0].strip()
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{where}: entry {n} ({entry!r}) is not host:port")
        out.append((host.strip("[]"), int(port)))
    return tuple(out)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the cluster flags (``-w -n -p --hosts --hostfile --bind --secret-file``) to ``parser``."""
    group = parser.add_argument_group("cluster (each flag also reads a PYTIMELY_* environment variable)")
    group.add_argument("-w", "--workers", type=int, help="workers in this process (PYTIMELY_WORKERS, default 1)")
    group.add_argument("-n", "--processes", type=int, help="processes in the cluster (PYTIMELY_PROCESSES, default 1)")
    group.add_argument("-p", "--process", type=int, help="this process's index (PYTIMELY_PROCESS, default 0)")
    group.add_argument("--hosts", help="host:port of every process, comma-separated (PYTIMELY_HOSTS)")
    group.add_argument("--hostfile", help="file with one host:port per line (PYTIMELY_HOSTFILE)")
    group.add_argument("--bind", help="address to listen on (PYTIMELY_BIND, default 127.0.0.1)")
    group.add_argument("--secret-file", help="file holding the cluster secret (PYTIMELY_SECRET_FILE)")


def config_from_args(args: argparse.Namespace | None = None, env: Mapping[str, str] | None = None) -> Config:
    """The configuration given by parsed flags (see :func:`add_arguments`) and the environment."""
    env = os.environ if env is None else env
    values = vars(args) if args is not None else {}

    def pick(flag: str, var: str) -> str | None:
        value = values.get(flag)
        if value is not None:
            return str(value)
        got = env.get(var)
        return got if got not in (None, "") else None

    def integer(flag: str, var: str, default: int) -> int:
        text = pick(flag, var)
        if text is None:
            return default
        try:
            return int(text)
        except ValueError:
            raise ConfigError(
                f"{var if values.get(flag) is None else '--' + flag}: {text!r} is not an integer"
            ) from None

    def number(var: str, default: float) -> float:
        text = env.get(var)
        if not text:
            return default
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"{var}: {text!r} is not a number") from None

    hosts: tuple[tuple[str, int], ...] = ()
    text = pick("hosts", "PYTIMELY_HOSTS")
    hostfile = pick("hostfile", "PYTIMELY_HOSTFILE")
    if text is not None:
        hosts = parse_hosts(text, "--hosts")
    elif hostfile is not None:
        try:
            hosts = parse_hosts(Path(hostfile).read_text(encoding="utf-8"), hostfile)
        except OSError as exc:
            raise ConfigError(f"cannot read the host file: {exc}") from exc
    secret: bytes | None = None
    secret_file = pick("secret_file", "PYTIMELY_SECRET_FILE")
    if secret_file is not None:
        try:
            secret = Path(secret_file).read_bytes().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the secret file: {exc}") from exc
        if not secret:
            raise ConfigError(f"the secret file {secret_file} is empty")
    elif env.get("PYTIMELY_SECRET"):
        secret = env["PYTIMELY_SECRET"].encode()
    config = Config(
        workers=integer("workers", "PYTIMELY_WORKERS", 1),
        processes=integer("processes", "PYTIMELY_PROCESSES", 1),
        process=integer("process", "PYTIMELY_PROCESS", 0),
        hosts=hosts,
        bind=pick("bind", "PYTIMELY_BIND") or "127.0.0.1",
        secret=secret,
        heartbeat=number("PYTIMELY_HEARTBEAT", 0.5),
        timeout=number("PYTIMELY_TIMEOUT", 10.0),
        connect_timeout=number("PYTIMELY_CONNECT_TIMEOUT", 60.0),
        handshake_timeout=number("PYTIMELY_HANDSHAKE_TIMEOUT", 10.0),
        send_timeout=number("PYTIMELY_SEND_TIMEOUT", 60.0),
        stall_timeout=number("PYTIMELY_STALL_TIMEOUT", 30.0),
        encrypt=env.get("PYTIMELY_ENCRYPT", "1") not in ("0", "false", "no"),
        aggregate_progress=env.get("PYTIMELY_AGGREGATE_PROGRESS", "1") not in ("0", "false", "no"),
        shared_memory=int(number("PYTIMELY_SHARED_MEMORY", 8 << 20)),
        send_window=int(number("PYTIMELY_SEND_WINDOW", 64 << 20)),
        recv_window=int(number("PYTIMELY_RECV_WINDOW", 64 << 20)),
        elastic=env.get("PYTIMELY_ELASTIC", "") in ("1", "true", "yes"),
        initial=int(number("PYTIMELY_INITIAL", 0)),
        join=env.get("PYTIMELY_JOIN", "") in ("1", "true", "yes"),
        left=tuple(int(x) for x in env.get("PYTIMELY_LEFT", "").replace(" ", "").split(",") if x),
        listen_fd=integer("listen_fd", "PYTIMELY_LISTEN_FD", -1) if env.get("PYTIMELY_LISTEN_FD") else None,
    )
    if (config.processes > 1 or config.elastic) and config.secret is not None and len(config.secret) < MIN_SECRET:
        raise WeakSecretError(
            f"the cluster secret is {len(config.secret)} bytes long; at least {MIN_SECRET} bytes (128 bits) of "
            "randomness are needed, e.g. `python -c 'import secrets; print(secrets.token_hex(16))'` "
            "(pytimely launch makes one)"
        )
    return config


def parse_config(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None = None
) -> tuple[argparse.Namespace, Config]:
    """Parse ``argv`` with ``parser`` (which must have :func:`add_arguments`); a bad layout is a usage error."""
    args = parser.parse_args(argv)
    try:
        return args, config_from_args(args)
    except ConfigError as exc:
        parser.error(str(exc))
