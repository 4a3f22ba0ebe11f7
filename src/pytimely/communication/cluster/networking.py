"""Connecting: listening, dialling peers with retries, and accepting them through the handshake."""

from __future__ import annotations

import logging
import socket
import time

from pytimely.communication.handshake import accept_peer, connect_peer
from pytimely.config import Config
from pytimely.errors import AuthenticationError, CommunicationError, ConfigError

__all__ = ["accept_all", "connect", "inherited_listener"]

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


def connect(config: Config, peer: int, secret: bytes, deadline: float, shape: int) -> socket.socket:
    """A socket to process ``peer``, authenticated; retried until ``deadline`` while the peer is not listening."""
    host, port = config.hosts[peer]
    delay = 0.02
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=max(0.1, deadline - time.monotonic()))
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
            sock.settimeout(max(1.0, deadline - time.monotonic()))
            connect_peer(sock, secret, config.process, peer, shape)
        except BaseException:
            sock.close()
            raise
        return sock


def accept_all(
    listener: socket.socket,
    config: Config,
    secret: bytes,
    deadline: float,
    shape: int,
    accepted: dict[int, socket.socket],
    errors: list[BaseException],
) -> None:
    """Accept and authenticate every higher-indexed process until ``deadline``; failures go to ``errors``."""
    expected = set(range(config.process + 1, config.processes))
    try:
        while expected - set(accepted):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                missing = ", ".join(str(p) for p in sorted(expected - set(accepted)))
                raise CommunicationError(
                    f"process {config.process} waited {config.connect_timeout} s but process(es) {missing} never "
                    "connected with the cluster secret"
                )
            listener.settimeout(remaining)
            try:
                sock, address = listener.accept()
            except TimeoutError:
                continue
            try:
                sock.settimeout(max(1.0, min(10.0, remaining)))
                peer = accept_peer(sock, secret, config.process, shape, bound=1 << 16 if config.elastic else None)
            except (AuthenticationError, OSError) as exc:
                log.warning(
                    "process %d refused a connection from %s:%s: %s", config.process, address[0], address[1], exc
                )
                sock.close()
                continue
            except ConfigError:
                sock.close()
                raise
            if peer in accepted:
                log.warning("process %d refused a second connection claiming to be process %d", config.process, peer)
                sock.close()
                continue
            accepted[peer] = sock
    except BaseException as exc:
        errors.append(exc)
        for s in accepted.values():
            s.close()
