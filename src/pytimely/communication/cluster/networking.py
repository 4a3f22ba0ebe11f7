"""Connecting: listening, dialling peers with retries, and accepting them through the handshake.

Handshakes with accepted connections run in parallel, each bounded by the
handshake timeout and all by the start-up deadline, so strangers that stay
silent or trickle bytes cost a thread each for a bounded time and never delay
the peers that do prove themselves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pytimely.communication.frame import LinkKeys
from pytimely.communication.handshake import accept_peer, connect_peer
from pytimely.communication.platform import Clock, Platform, Task
from pytimely.communication.transport import Connection, Listener
from pytimely.config import Config
from pytimely.errors import AuthenticationError, CommunicationError, HandshakeTimeoutError

__all__ = ["MAX_HANDSHAKES", "accept_all", "accept_one", "connect"]

MAX_HANDSHAKES = 64
"""Handshakes a process serves at once; connections beyond are closed at once."""

log = logging.getLogger("pytimely.cluster")


def connect(
    config: Config, peer: int, secret: bytes, deadline: float, shape: int, platform: Platform
) -> tuple[Connection, LinkKeys]:
    """A connection to process ``peer``, authenticated, and its keys; retried until ``deadline`` while the peer is
    not listening or does not answer in time."""
    host, port = config.hosts[peer]
    clock = platform.clock
    delay = 0.02
    while True:
        remaining = deadline - clock.monotonic()
        try:
            sock = platform.transport.connect(host, port, max(0.1, remaining))
        except OSError as exc:
            if clock.monotonic() + delay > deadline:
                raise CommunicationError(
                    f"process {config.process} could not reach process {peer} at {host}:{port} within "
                    f"{config.connect_timeout} s: {exc}",
                    peer,
                ) from exc
            clock.sleep(delay)
            delay = min(0.5, delay * 2)
            continue
        try:
            keys = connect_peer(
                sock,
                secret,
                config.process,
                peer,
                shape,
                deadline=min(deadline, clock.monotonic() + config.handshake_timeout),
                encrypt=config.encrypt,
                clock=clock,
            )
        except HandshakeTimeoutError as exc:
            sock.close()
            if clock.monotonic() + delay > deadline:
                raise CommunicationError(
                    f"process {config.process} could not complete a handshake with process {peer} at {host}:{port} "
                    f"within {config.connect_timeout} s: {exc}",
                    peer,
                ) from exc
            continue
        except OSError as exc:
            sock.close()
            raise CommunicationError(
                f"process {config.process} lost its connection to process {peer} at {host}:{port} during the "
                f"handshake: {type(exc).__name__}: {exc}",
                peer,
            ) from exc
        except BaseException:
            sock.close()
            raise
        return sock, keys


def accept_one(
    sock: Connection,
    address: tuple[str, int],
    config: Config,
    secret: bytes,
    deadline: float,
    shape: int,
    clock: Clock,
) -> tuple[int, LinkKeys] | None:
    """Authenticate one accepted connection by ``deadline``; ``None`` (logged, connection closed) for a stranger."""
    try:
        return accept_peer(
            sock,
            secret,
            config.process,
            shape,
            bound=1 << 16 if config.elastic else None,
            deadline=min(deadline, clock.monotonic() + config.handshake_timeout),
            encrypt=config.encrypt,
            clock=clock,
        )
    except (AuthenticationError, OSError) as exc:
        log.warning("process %d refused a connection from %s:%s: %s", config.process, address[0], address[1], exc)
        sock.close()
        return None
    except BaseException:
        sock.close()
        raise


class _Acceptor:
    """The state :func:`accept_all` shares with its handshake threads: who is awaited, who arrived, what failed."""

    def __init__(
        self,
        listener: Listener,
        config: Config,
        secret: bytes,
        deadline: float,
        shape: int,
        accepted: dict[int, tuple[Connection, LinkKeys]],
        platform: Platform,
        extra: Callable[[int, Connection, LinkKeys], None] | None,
    ) -> None:
        self.listener = listener
        self.config = config
        self.secret = secret
        self.deadline = deadline
        self.shape = shape
        self.accepted = accepted
        self.extra = extra
        self.expected = set(range(config.process + 1, config.processes))
        self.clock, self.threads = platform.clock, platform.threads
        self.lock = self.threads.lock()
        self.finished = False
        self.running: list[Task] = []
        self.failed: list[BaseException] = []

    def handshake(self, sock: Connection, address: tuple[str, int]) -> None:
        """Authenticate one connection (in a thread of its own) and file it as awaited, extra or refused."""
        try:
            got = accept_one(sock, address, self.config, self.secret, self.deadline, self.shape, self.clock)
        except BaseException as exc:
            with self.lock:
                self.failed.append(exc)
            return
        if got is None:
            return
        peer, keys = got
        with self.lock:
            awaited = peer in self.expected and peer not in self.accepted and not self.finished
            if awaited:
                self.accepted[peer] = (sock, keys)
                return
        if self.extra is not None and peer not in self.expected:
            self.extra(peer, sock, keys)
            return
        log.warning("process %d refused a second connection claiming to be process %d", self.config.process, peer)
        sock.close()

    def all_in(self) -> bool:
        """Whether every awaited process is in (then no later one is taken); raises a handshake's failure."""
        with self.lock:
            if self.failed:
                raise self.failed[0]
            if not self.expected - set(self.accepted):
                self.finished = True
                return True
        return False

    def take(self) -> None:
        """Wait a little for one connection and start its handshake; raise once the deadline has passed."""
        remaining = self.deadline - self.clock.monotonic()
        if remaining <= 0:
            missing = ", ".join(str(p) for p in sorted(self.expected - set(self.accepted)))
            raise CommunicationError(
                f"process {self.config.process} waited {self.config.connect_timeout} s but process(es) {missing} "
                "never connected with the cluster secret"
            )
        got = self.listener.accept(min(remaining, 0.1))
        if got is None:
            return
        sock, address = got
        self.running[:] = [t for t in self.running if t.is_alive()]
        if len(self.running) >= MAX_HANDSHAKES:
            log.warning(
                "process %d has %d handshakes under way; refused %s", self.config.process, len(self.running), address
            )
            sock.close()
            return
        self.running.append(self.threads.spawn(self.handshake, "pytimely-handshake", sock, address))

    def give_up(self) -> None:
        """Take no more, and close the connections taken."""
        with self.lock:
            self.finished = True
            for s, _ in self.accepted.values():
                s.close()


def accept_all(
    listener: Listener,
    config: Config,
    secret: bytes,
    deadline: float,
    shape: int,
    accepted: dict[int, tuple[Connection, LinkKeys]],
    errors: list[BaseException],
    platform: Platform,
    extra: Callable[[int, Connection, LinkKeys], None] | None = None,
) -> None:
    """Accept and authenticate every higher-indexed process until ``deadline``; failures go to ``errors``.

    Each handshake runs in a thread of its own, so a silent stranger holds up nobody. A process that proves
    itself but is not one of those awaited (one joining an elastic computation early, or any process once all
    have arrived) goes to ``extra``, or is refused when there is none.
    """
    acceptor = _Acceptor(listener, config, secret, deadline, shape, accepted, platform, extra)
    try:
        while not acceptor.all_in():
            acceptor.take()
    except BaseException as exc:
        errors.append(exc)
        acceptor.give_up()
