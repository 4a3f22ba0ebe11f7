"""The challenge-response handshake over a real socket pair: who may join, and why others may not."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

from pytimely.communication import handshake
from pytimely.communication.handshake import accept_peer, connect_peer
from pytimely.errors import AuthenticationError, ConfigError


def pair(client: Callable[[socket.socket], Any], server: Callable[[socket.socket], Any]) -> tuple[Any, Any]:
    """Run ``client`` and ``server`` on the two ends of a socket pair; each result or raised exception."""
    a, b = socket.socketpair()
    a.settimeout(5)
    b.settimeout(5)
    out: dict[str, Any] = {}

    def run(name: str, f: Callable[[socket.socket], Any], s: socket.socket) -> None:
        try:
            out[name] = f(s)
        except BaseException as exc:
            out[name] = exc
        finally:
            s.close()

    t = threading.Thread(target=run, args=("server", server, b))
    t.start()
    run("client", client, a)
    t.join()
    return out["client"], out["server"]


def test_same_secret_admits_the_peer_and_names_it() -> None:
    client, server = pair(lambda s: connect_peer(s, b"k", 2, 0, 3), lambda s: accept_peer(s, b"k", 0, 3))
    assert client is None and server == 2


def test_wrong_secret_is_refused_on_both_sides() -> None:
    client, server = pair(lambda s: connect_peer(s, b"k1", 1, 0, 2), lambda s: accept_peer(s, b"k2", 0, 2))
    assert isinstance(client, AuthenticationError) and "did not prove" in str(client)
    assert isinstance(server, AuthenticationError)


def test_a_proof_cannot_be_reflected_back() -> None:
    # A client that answers with the server's own proof is refused: proofs are bound to the role.
    def reflecting(s: socket.socket) -> None:
        s.sendall(handshake._HELLO.pack(b"PTHI", 1, 1, 2, handshake.hash_probe(), b"n" * 32))
        reply = s.recv(64)
        s.sendall(reply[32:])
        s.recv(1)

    _, server = pair(reflecting, lambda s: accept_peer(s, b"k", 0, 2))
    assert isinstance(server, AuthenticationError) and "did not prove" in str(server)


def test_disagreeing_layouts_and_hash_seeds_are_config_errors() -> None:
    client, server = pair(lambda s: connect_peer(s, b"k", 1, 0, 3), lambda s: accept_peer(s, b"k", 0, 2))
    assert isinstance(server, ConfigError) and isinstance(client, ConfigError)

    def other_seed(s: socket.socket) -> bytes:
        # A peer that knows the secret but hashes strings with another seed.
        nonce = b"c" * 32
        s.sendall(handshake._HELLO.pack(b"PTHI", 1, 1, 2, handshake.hash_probe() ^ 1, nonce))
        server_nonce = s.recv(64)[:32]
        s.sendall(handshake._mac(b"k", b"client", nonce, server_nonce, 1, 0))
        return s.recv(1)

    verdict, server = pair(other_seed, lambda s: accept_peer(s, b"k", 0, 2))
    assert isinstance(server, ConfigError) and "PYTHONHASHSEED" in str(server)
    assert verdict == handshake._BAD_HASH


def test_strangers_get_nothing_but_a_closed_socket() -> None:
    _client, server = pair(lambda s: s.sendall(b"x" * 53), lambda s: accept_peer(s, b"k", 0, 2))
    assert isinstance(server, AuthenticationError) and "not a pytimely process" in str(server)
