"""Connecting: listening, dialling peers with retries, and accepting them through the handshake.

Handshakes with accepted connections run in parallel, each bounded by the
handshake timeout and all by the start-up deadline, so strangers that stay
silent or trickle bytes cost a thread each for a bounded time and never delay
the peers that do prove themselves.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable

from pytimely.communication.frame import LinkKeys
from pytimely.communication.handshake import accept_peer, connect_peer
from pytimely.config import Config
from pytimely.errors import AuthenticationError, CommunicationError, ConfigError, HandshakeTimeoutError

__all__ = ["MAX_HANDSHAKES", "accept_all", "accept_one", "connect", "inherited_listener"]

MAX_HANDSHAKES = 64
"""Handshakes a process serves at once; connections beyond are closed at once."""

log = logging.getLogger("pytimely.cluster")


def inherited_listener(fd: int, port: int) -> socket.socket:
    """The listening socket a launcher handed down as ``fd``; :class:`ConfigError` unless it listens on ``port``."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise ConfigError(f"PYTIMELY_LISTEN_FD={fd} is not an open socket: {exc}") from exc
    try:
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        bound = sock.getsockname()
    except OSError as exc:
        sock.detach()  # not ours to close: the descriptor was not a socket
        raise ConfigError(f"PYTIMELY_LISTEN_FD={fd} is not a socket: {exc}") from exc
    if sock.type != socket.SOCK_STREAM or not listening or not isinstance(bound, tuple) or bound[1] != port:
        sock.detach()
        raise ConfigError(
            f"PYTIMELY_LISTEN_FD={fd} is not a TCP socket listening on port {port}, this process's port in hosts "
            f"(it is bound to {bound!r}{'' if listening else ', not listening'})"
        )
    return sock


def connect(config: Config, peer: int, secret: bytes, deadline: float, shape: int) -> tuple[socket.socket, LinkKeys]:
    """A socket to process ``peer``, authenticated, and its keys; retried until ``deadline`` while the peer is not
    listening or does not answer in time."""
    host, port = config.hosts[peer]
    delay = 0.02
    while True:
        remaining = deadline - time.monotonic()
        try:
            sock = socket.create_connection((host, port), timeout=max(0.1, remaining))
        except OSError as exc:
            if time.monotonic() + delay > deadline:
                raise CommunicationError(
                    f"process {config.process} could not reach process {peer} at {host}:{port} within "
                    f"{config.connect_timeout} s: {exc}",
                    peer,
                ) from exc
            time.sleep(delay)
            delay = min(0.5, delay * 2)
            continue
        try:
            keys = connect_peer(
                sock,
                secret,
                config.process,
                peer,
                shape,
                deadline=min(deadline, time.monotonic() + config.handshake_timeout),
                encrypt=config.encrypt,
            )
        except HandshakeTimeoutError as exc:
            sock.close()
            if time.monotonic() + delay > deadline:
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
    sock: socket.socket, address: tuple[str, int], config: Config, secret: bytes, deadline: float, shape: int
) -> tuple[int, LinkKeys] | None:
    """Authenticate one accepted connection by ``deadline``; ``None`` (logged, socket closed) for a stranger."""
    try:
        return accept_peer(
            sock,
            secret,
            config.process,
            shape,
            bound=1 << 16 if config.elastic else None,
            deadline=min(deadline, time.monotonic() + config.handshake_timeout),
            encrypt=config.encrypt,
        )
    except (AuthenticationError, OSError) as exc:
        log.warning("process %d refused a connection from %s:%s: %s", config.process, address[0], address[1], exc)
        sock.close()
        return None
    except BaseException:
        sock.close()
        raise


def accept_all(
    listener: socket.socket,
    config: Config,
    secret: bytes,
    deadline: float,
    shape: int,
    accepted: dict[int, tuple[socket.socket, LinkKeys]],
    errors: list[BaseException],
    *,
    extra: Callable[[int, socket.socket, LinkKeys], None] | None = None,
) -> None:
    """Accept and authenticate every higher-indexed process until ``deadline``; failures go to ``errors``.

    Each handshake runs in a thread of its own, so a silent stranger holds up nobody. A process that proves
    itself but is not one of those awaited (one joining an elastic computation early, or any process once all
    have arrived) goes to ``extra``, or is refused when there is none.
    """
    expected = set(range(config.process + 1, config.processes))
    lock = threading.Condition()
    finished = False
    running: list[threading.Thread] = []
    failed: list[BaseException] = []

    def handshake(sock: socket.socket, address: tuple[str, int]) -> None:
        try:
            got = accept_one(sock, address, config, secret, deadline, shape)
        except BaseException as exc:
            with lock:
                failed.append(exc)
            return
        if got is None:
            return
        peer, keys = got
        with lock:
            awaited = peer in expected and peer not in accepted and not finished
            if awaited:
                accepted[peer] = (sock, keys)
                return
        if extra is not None and peer not in expected:
            extra(peer, sock, keys)
            return
        log.warning("process %d refused a second connection claiming to be process %d", config.process, peer)
        sock.close()

    try:
        while True:
            with lock:
                if failed:
                    raise failed[0]
                if not expected - set(accepted):
                    finished = True
                    break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                missing = ", ".join(str(p) for p in sorted(expected - set(accepted)))
                raise CommunicationError(
                    f"process {config.process} waited {config.connect_timeout} s but process(es) {missing} never "
                    "connected with the cluster secret"
                )
            listener.settimeout(min(remaining, 0.1))
            try:
                sock, address = listener.accept()
            except TimeoutError:
                continue
            running[:] = [t for t in running if t.is_alive()]
            if len(running) >= MAX_HANDSHAKES:
                log.warning("process %d has %d handshakes under way; refused %s", config.process, len(running), address)
                sock.close()
                continue
            thread = threading.Thread(target=handshake, args=(sock, address), name="pytimely-handshake", daemon=True)
            running.append(thread)
            thread.start()
    except BaseException as exc:
        errors.append(exc)
        with lock:
            finished = True
            for s, _ in accepted.values():
                s.close()
