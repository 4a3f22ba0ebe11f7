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

The whole of what a process is told to do is a :class:`RunConfig` (the layout above, plus recovery, the event
log, metrics and the launcher's control endpoint)::

    --recovery DIR               PYTIMELY_RECOVERY           the recovery store (docs/recovery.md)
    --recovery-mode MODE         PYTIMELY_RECOVERY_MODE      resume (default) or fresh
    --recovery-key-file FILE     PYTIMELY_RECOVERY_KEY_FILE  the key sealing the store
    --snapshot-every E           PYTIMELY_SNAPSHOT_EVERY     a snapshot every E-th epoch (default 1)
    --log PATH                   PYTIMELY_LOG                write the event log as JSON lines to PATH
    --metrics-port PORT          PYTIMELY_METRICS_PORT       serve Prometheus metrics on PORT
                                 PYTIMELY_CONTROL            the launcher's control endpoint (elastic runs)

:meth:`RunConfig.from_env` and :meth:`RunConfig.to_env` are the only places in the library where these variables
are read or written (``pytimely launch`` writes them for every process it starts; a test checks no other module
reads the environment).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, cast

from pytimely.errors import ConfigError, WeakSecretError

__all__ = [
    "MIN_SECRET",
    "Config",
    "RecoverySettings",
    "RunConfig",
    "add_arguments",
    "add_recovery_arguments",
    "config_from_args",
    "is_loopback",
]

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
        self._check_sizes()
        self._check_membership()
        if self.listen_fd is not None and (type(self.listen_fd) is not int or self.listen_fd < 0):
            raise ConfigError(f"listen_fd must be a file descriptor (an int >= 0), got {self.listen_fd!r}")
        if self.process in self.left:
            raise ConfigError(f"process {self.process} is listed as having left")
        if self.timeout <= 2 * self.heartbeat:
            raise ConfigError(f"timeout ({self.timeout} s) must exceed two heartbeats ({self.heartbeat} s each)")
        if self.processes > 1 or self.elastic:
            self._check_cluster()

    def _check_sizes(self) -> None:
        """Counts, indices, timeouts and windows in range."""
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

    def _check_membership(self) -> None:
        """Joining, leaving and the initial process count fit an elastic cluster."""
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

    def _check_cluster(self) -> None:
        """Several processes, or an elastic cluster: a host each, a secret, and a bind other hosts can reach."""
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


class _Given:
    """Flags (parsed by :func:`add_arguments`) over the environment: a flag given wins over its variable."""

    def __init__(self, args: argparse.Namespace | None, env: Mapping[str, str]) -> None:
        self.values = vars(args) if args is not None else {}
        self.env = env

    def pick(self, flag: str, var: str) -> str | None:
        """The flag's value, else the variable's; an empty variable is unset."""
        value = self.values.get(flag)
        if value is not None:
            return str(value)
        got = self.env.get(var)
        return got if got not in (None, "") else None

    def integer(self, flag: str, var: str, default: int) -> int:
        """:meth:`pick` read as an integer, naming the flag or variable it came from if it is not one."""
        text = self.pick(flag, var)
        if text is None:
            return default
        try:
            return int(text)
        except ValueError:
            raise ConfigError(
                f"{var if self.values.get(flag) is None else '--' + flag}: {text!r} is not an integer"
            ) from None

    def number(self, var: str, default: float) -> float:
        """The variable read as a number (``default`` when unset or empty)."""
        text = self.env.get(var)
        if not text:
            return default
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"{var}: {text!r} is not a number") from None

    def hosts(self) -> tuple[tuple[str, int], ...]:
        """The hosts given inline (``--hosts``) or in a host file, inline first."""
        text = self.pick("hosts", "PYTIMELY_HOSTS")
        hostfile = self.pick("hostfile", "PYTIMELY_HOSTFILE")
        if text is not None:
            return parse_hosts(text, "--hosts")
        if hostfile is not None:
            try:
                return parse_hosts(Path(hostfile).read_text(encoding="utf-8"), hostfile)
            except OSError as exc:
                raise ConfigError(f"cannot read the host file: {exc}") from exc
        return ()

    def secret(self) -> bytes | None:
        """The cluster secret from a secret file, else from ``PYTIMELY_SECRET``."""
        secret_file = self.pick("secret_file", "PYTIMELY_SECRET_FILE")
        if secret_file is not None:
            try:
                secret = Path(secret_file).read_bytes().strip()
            except OSError as exc:
                raise ConfigError(f"cannot read the secret file: {exc}") from exc
            if not secret:
                raise ConfigError(f"the secret file {secret_file} is empty")
            return secret
        if self.env.get("PYTIMELY_SECRET"):
            return self.env["PYTIMELY_SECRET"].encode()
        return None


def config_from_args(args: argparse.Namespace | None = None, env: Mapping[str, str] | None = None) -> Config:
    """The configuration given by parsed flags (see :func:`add_arguments`) and the environment."""
    env = os.environ if env is None else env
    given = _Given(args, env)
    number = given.number
    hosts, secret = given.hosts(), given.secret()
    config = Config(
        workers=given.integer("workers", "PYTIMELY_WORKERS", 1),
        processes=given.integer("processes", "PYTIMELY_PROCESSES", 1),
        process=given.integer("process", "PYTIMELY_PROCESS", 0),
        hosts=hosts,
        bind=given.pick("bind", "PYTIMELY_BIND") or "127.0.0.1",
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
        listen_fd=given.integer("listen_fd", "PYTIMELY_LISTEN_FD", -1) if env.get("PYTIMELY_LISTEN_FD") else None,
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


RECOVERY_TRUST = (
    "Snapshots are pickles: a store is trusted like this program's own files, unless it is sealed with "
    "--recovery-key-file, and then every file not sealed by that key is refused before anything in it is "
    "unpickled."
)
"""The trust model of a recovery store, as the command line's help states it."""

_RECOVERY_MODES = ("resume", "fresh")


@dataclass(frozen=True, slots=True)
class RecoverySettings:
    """Where a run keeps its recovery store and how (``--recovery`` and the flags beside it)."""

    store: str
    """A folder, or an fsspec URL such as ``s3://bucket/prefix``."""
    mode: Literal["resume", "fresh"] = "resume"
    """``resume``: go on from the store's last snapshot; ``fresh``: empty it and start over."""
    key_file: str | None = None
    """A file holding the key that seals the store (16 bytes or more)."""
    snapshot_every: int = 1
    """A snapshot every this many epochs."""

    def __post_init__(self) -> None:
        if not self.store:
            raise ConfigError("the recovery store must be named (a folder or an fsspec URL)")
        if self.mode not in _RECOVERY_MODES:
            raise ConfigError(f"the recovery mode must be resume or fresh, got {self.mode!r}")
        if type(self.snapshot_every) is not int or self.snapshot_every < 1:
            raise ConfigError(f"--snapshot-every must be at least 1, got {self.snapshot_every!r}")

    def key(self) -> bytes | None:
        """The key in :attr:`key_file` (surrounding whitespace stripped), or ``None``; a bad file is refused."""
        if self.key_file is None:
            return None
        try:
            key = Path(self.key_file).read_bytes().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the recovery key file {self.key_file}: {exc.strerror or exc}") from None
        if len(key) < MIN_SECRET:
            raise ConfigError(
                f"the recovery key in {self.key_file} is {len(key)} bytes long; at least {MIN_SECRET} are needed"
            )
        return key

    def absolute(self) -> RecoverySettings:
        """These settings with local paths made absolute (for processes started in another folder)."""
        store = self.store if "://" in self.store else os.path.abspath(self.store)
        key_file = None if self.key_file is None else os.path.abspath(self.key_file)
        return replace(self, store=store, key_file=key_file)


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Everything a process is told: the cluster layout, recovery, the event log, metrics, the control endpoint."""

    cluster: Config = field(default_factory=Config)
    recovery: RecoverySettings | None = None
    log: str | None = None
    """A path to write the event log to, as JSON lines."""
    metrics_port: int | None = None
    """A port to serve Prometheus metrics on."""
    control: str | None = None
    """``HOST:PORT`` of the launcher's control endpoint, in an elastic run."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RunConfig:
        """The run the ``PYTIMELY_*`` variables of ``env`` (default: this process's) describe."""
        return cls.from_args(None, env)

    @classmethod
    def from_args(cls, args: argparse.Namespace | None, env: Mapping[str, str] | None = None) -> RunConfig:
        """The run given by flags (:func:`add_arguments`, :func:`add_recovery_arguments`) and, where a flag is
        absent, the environment."""
        env = os.environ if env is None else env
        values = vars(args) if args is not None else {}

        def pick(flag: str, var: str) -> str | None:
            value = values.get(flag)
            if value is not None:
                return str(value)
            got = env.get(var)
            return got if got not in (None, "") else None

        recovery = None
        store = pick("recovery", "PYTIMELY_RECOVERY")
        if store is not None:
            every = pick("snapshot_every", "PYTIMELY_SNAPSHOT_EVERY") or "1"
            if not every.isdigit():
                raise ConfigError(f"--snapshot-every / PYTIMELY_SNAPSHOT_EVERY: {every!r} is not a whole number")
            recovery = RecoverySettings(
                store,
                mode=cast(Literal["resume", "fresh"], pick("recovery_mode", "PYTIMELY_RECOVERY_MODE") or "resume"),
                key_file=pick("recovery_key_file", "PYTIMELY_RECOVERY_KEY_FILE"),
                snapshot_every=int(every),
            )
        port = pick("metrics_port", "PYTIMELY_METRICS_PORT")
        if port is not None and not port.isdigit():
            raise ConfigError(f"PYTIMELY_METRICS_PORT must be a port number, got {port!r}")
        return cls(
            cluster=config_from_args(args, env),
            recovery=recovery,
            log=pick("log", "PYTIMELY_LOG"),
            metrics_port=None if port is None else int(port),
            control=env.get("PYTIMELY_CONTROL") or None,
        )

    def to_env(self) -> dict[str, str]:
        """The ``PYTIMELY_*`` variables from which :meth:`from_env` gives this run back (the secret included)."""
        c = self.cluster
        env = {
            "PYTIMELY_WORKERS": str(c.workers),
            "PYTIMELY_PROCESSES": str(c.processes),
            "PYTIMELY_PROCESS": str(c.process),
            "PYTIMELY_BIND": c.bind,
            "PYTIMELY_HEARTBEAT": repr(c.heartbeat),
            "PYTIMELY_TIMEOUT": repr(c.timeout),
            "PYTIMELY_CONNECT_TIMEOUT": repr(c.connect_timeout),
            "PYTIMELY_HANDSHAKE_TIMEOUT": repr(c.handshake_timeout),
            "PYTIMELY_SEND_TIMEOUT": repr(c.send_timeout),
            "PYTIMELY_STALL_TIMEOUT": repr(c.stall_timeout),
            "PYTIMELY_ENCRYPT": "1" if c.encrypt else "0",
            "PYTIMELY_AGGREGATE_PROGRESS": "1" if c.aggregate_progress else "0",
            "PYTIMELY_SHARED_MEMORY": str(c.shared_memory),
            "PYTIMELY_SEND_WINDOW": str(c.send_window),
            "PYTIMELY_RECV_WINDOW": str(c.recv_window),
        }
        if c.hosts:
            env["PYTIMELY_HOSTS"] = ",".join(f"{host}:{port}" for host, port in c.hosts)
        if c.secret is not None:
            env["PYTIMELY_SECRET"] = c.secret.decode()
        if c.elastic:
            env["PYTIMELY_ELASTIC"] = "1"
            env["PYTIMELY_INITIAL"] = str(c.initial)
        if c.join:
            env["PYTIMELY_JOIN"] = "1"
        if c.left:
            env["PYTIMELY_LEFT"] = ",".join(map(str, c.left))
        if c.listen_fd is not None:
            env["PYTIMELY_LISTEN_FD"] = str(c.listen_fd)
        if self.recovery is not None:
            env["PYTIMELY_RECOVERY"] = self.recovery.store
            env["PYTIMELY_RECOVERY_MODE"] = self.recovery.mode
            env["PYTIMELY_SNAPSHOT_EVERY"] = str(self.recovery.snapshot_every)
            if self.recovery.key_file is not None:
                env["PYTIMELY_RECOVERY_KEY_FILE"] = self.recovery.key_file
        if self.log is not None:
            env["PYTIMELY_LOG"] = self.log
        if self.metrics_port is not None:
            env["PYTIMELY_METRICS_PORT"] = str(self.metrics_port)
        if self.control is not None:
            env["PYTIMELY_CONTROL"] = self.control
        return env

    def child_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) without the run contract's variables, plus this run's:
        the environment of a process started to run it."""
        base = os.environ if base is None else base
        env = {k: v for k, v in base.items() if k not in RUN_VARIABLES}
        env.update(self.to_env())
        return env


LAYOUT_VARIABLES = frozenset({
    "PYTIMELY_WORKERS", "PYTIMELY_PROCESSES", "PYTIMELY_PROCESS", "PYTIMELY_HOSTS", "PYTIMELY_HOSTFILE",
    "PYTIMELY_SECRET", "PYTIMELY_SECRET_FILE", "PYTIMELY_LISTEN_FD", "PYTIMELY_ELASTIC", "PYTIMELY_INITIAL",
    "PYTIMELY_JOIN", "PYTIMELY_LEFT", "PYTIMELY_CONTROL",
})
"""Variables that say where one process stands in one cluster (a launcher sets them anew for each process)."""

RUN_VARIABLES = LAYOUT_VARIABLES | {
    "PYTIMELY_BIND", "PYTIMELY_HEARTBEAT", "PYTIMELY_TIMEOUT", "PYTIMELY_CONNECT_TIMEOUT",
    "PYTIMELY_HANDSHAKE_TIMEOUT", "PYTIMELY_SEND_TIMEOUT", "PYTIMELY_STALL_TIMEOUT", "PYTIMELY_ENCRYPT",
    "PYTIMELY_AGGREGATE_PROGRESS", "PYTIMELY_SHARED_MEMORY", "PYTIMELY_SEND_WINDOW", "PYTIMELY_RECV_WINDOW",
    "PYTIMELY_RECOVERY", "PYTIMELY_RECOVERY_MODE", "PYTIMELY_RECOVERY_KEY_FILE", "PYTIMELY_SNAPSHOT_EVERY",
    "PYTIMELY_LOG", "PYTIMELY_METRICS_PORT",
}
"""Every variable of the run contract."""


def add_recovery_arguments(parser: argparse.ArgumentParser, *, what: str = "the job's declared state") -> None:
    """Add ``--recovery DIR``, ``--recovery-mode``, ``--recovery-key-file`` and ``--snapshot-every`` to ``parser``;
    absent, each is read from its ``PYTIMELY_RECOVERY*`` variable by :meth:`RunConfig.from_args`."""
    group = parser.add_argument_group("recovery", RECOVERY_TRUST)
    group.add_argument(
        "--recovery", metavar="DIR",
        help=f"snapshot {what} into DIR (a folder or s3:// URL) and resume from it after a crash, on any number "
             "of processes (PYTIMELY_RECOVERY)",
    )
    group.add_argument(
        "--recovery-mode", choices=_RECOVERY_MODES,
        help="resume (default): go on from DIR's last snapshot, refusing a store of another job, input or "
             "parameter; fresh: empty DIR and start over (PYTIMELY_RECOVERY_MODE)",
    )
    group.add_argument(
        "--recovery-key-file", metavar="FILE",
        help="seal DIR with the key in FILE (16 bytes or more) and refuse what it did not seal "
             "(PYTIMELY_RECOVERY_KEY_FILE)",
    )
    group.add_argument(
        "--snapshot-every", type=int, metavar="E",
        help="with --recovery: snapshot every E-th epoch (default 1; PYTIMELY_SNAPSHOT_EVERY)",
    )
