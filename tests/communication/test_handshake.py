"""The challenge-response handshake over a real socket pair: who may join, why others may not, and in what order."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from pytimely.communication import handshake
from pytimely.communication.frame import FrameDecoder, FrameEncoder
from pytimely.communication.handshake import accept_peer, connect_peer
from pytimely.errors import AuthenticationError, ConfigError, HandshakeTimeoutError, WeakSecretError

K = b"k" * 16
"""A secret of the shortest accepted length."""


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


def test_same_secret_admits_the_peer_names_it_and_both_derive_the_same_keys() -> None:
    client, server = pair(lambda s: connect_peer(s, K, 2, 0, 3), lambda s: accept_peer(s, K, 0, 3))
    peer, keys = server
    assert peer == 2 and client.send == keys.receive and client.receive == keys.send
    assert client.send != client.receive  # each direction its own keys
    # A frame sealed by one side opens on the other.
    wire = b"".join(FrameEncoder(client.send).encode(1, 0, 0, 2, 0, [b"hi"], 2))
    assert bytes(FrameDecoder(2, keys.receive).feed(wire)[0].payload) == b"hi"
    # A second connection between the same two processes gets other keys.
    again, _ = pair(lambda s: connect_peer(s, K, 2, 0, 3), lambda s: accept_peer(s, K, 0, 3))
    assert again.send != client.send


def test_wrong_secret_is_refused_on_both_sides() -> None:
    client, server = pair(lambda s: connect_peer(s, b"1" * 16, 1, 0, 2), lambda s: accept_peer(s, b"2" * 16, 0, 2))
    assert isinstance(client, AuthenticationError) and "refused this process's proof" in str(client)
    assert isinstance(server, AuthenticationError) and "did not prove" in str(server)


def test_a_stranger_gets_nothing_that_depends_on_the_secret() -> None:
    # The server answers a greeting with its nonce only; a wrong proof gets a closed socket, never the server's proof.
    def stranger(s: socket.socket) -> bytes:
        s.sendall(handshake._HELLO.pack(b"PTHI", handshake._VERSION, 1, 2, handshake.hash_probe(), b"n" * 32))
        nonce = s.recv(64)
        s.sendall(b"\0" * 32)
        rest = s.recv(64)
        return nonce + rest

    got, server = pair(stranger, lambda s: accept_peer(s, K, 0, 2))
    assert isinstance(server, AuthenticationError)
    assert len(got) == 32  # the nonce, then EOF: no proof to guess the secret against offline


def test_a_proof_cannot_be_reflected_back() -> None:
    # A server that answers with the client's own proof is refused: proofs are bound to the role.
    def reflecting(s: socket.socket) -> None:
        s.recv(handshake._HELLO.size)
        s.sendall(b"s" * 32)
        proof = s.recv(32)
        s.sendall(proof + handshake._OK)

    client, _ = pair(lambda s: connect_peer(s, K, 1, 0, 2), reflecting)
    assert isinstance(client, AuthenticationError) and "did not prove" in str(client)


def test_disagreeing_layouts_and_hash_seeds_are_config_errors() -> None:
    client, server = pair(lambda s: connect_peer(s, K, 1, 0, 3), lambda s: accept_peer(s, K, 0, 2))
    assert isinstance(server, ConfigError) and isinstance(client, ConfigError)

    def other_seed(s: socket.socket) -> bytes:
        # A peer that knows the secret but hashes strings with another seed.
        hello = handshake._HELLO.pack(b"PTHI", handshake._VERSION, 1, 2, handshake.hash_probe() ^ 1, b"c" * 32)
        s.sendall(hello)
        server_nonce = s.recv(32)
        s.sendall(handshake._mac(K, b"client", hello + server_nonce + struct.pack("<I", 0)))
        return s.recv(64)[-1:]

    verdict, server = pair(other_seed, lambda s: accept_peer(s, K, 0, 2))
    assert isinstance(server, ConfigError) and "PYTHONHASHSEED" in str(server)
    assert verdict == handshake._BAD_HASH


def test_strangers_get_nothing_but_a_closed_socket() -> None:
    _client, server = pair(lambda s: s.sendall(b"x" * 53), lambda s: accept_peer(s, K, 0, 2))
    assert isinstance(server, AuthenticationError) and "not a pytimely process" in str(server)


@pytest.mark.parametrize("secret", [b"", b"short", b"x" * 15])
def test_secrets_below_128_bits_are_refused_on_both_sides(secret: bytes) -> None:
    with pytest.raises(WeakSecretError, match="at least 16 bytes"):
        connect_peer(socket.socket(), secret, 1, 0, 2)
    with pytest.raises(WeakSecretError):
        accept_peer(socket.socket(), secret, 0, 2)


def test_a_trickling_peer_is_cut_off_at_the_handshake_deadline() -> None:
    def trickle(s: socket.socket) -> None:
        for byte in handshake._HELLO.pack(b"PTHI", handshake._VERSION, 1, 2, 0, b"n" * 32):
            try:
                s.sendall(bytes([byte]))
            except OSError:
                return
            time.sleep(0.2)

    started = time.monotonic()
    _, server = pair(trickle, lambda s: accept_peer(s, K, 0, 2, deadline=time.monotonic() + 1.0))
    assert isinstance(server, HandshakeTimeoutError)
    assert time.monotonic() - started < 5
