"""Mutual challenge-response authentication of a new connection with the shared cluster secret.

The connecting process (the *client*, the higher process index) and the
accepting one (the *server*) each prove they know the secret without sending
it, by an HMAC-SHA256 over both fresh nonces, both process indices and the
role, so a proof can be neither replayed nor reflected::

    client -> server  HELLO  magic "PTHI" | version | client index | processes | hash probe | client nonce
    server -> client  PROOF  server nonce | HMAC(secret, "server" | nonces | indices)
    client -> server  PROOF  HMAC(secret, "client" | nonces | indices)
    server -> client  OK     one byte

Nothing is unpickled before this completes. ``hash probe`` is Python's
``hash`` of a fixed string: processes with different string-hash seeds would
route keyed records differently, so they are refused with a message saying
how to fix it (set ``PYTHONHASHSEED`` alike everywhere; ``pytimely launch`` does).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct

from pytimely.errors import AuthenticationError, ConfigError

__all__ = ["accept_peer", "connect_peer", "hash_probe"]

_MAGIC = b"PTHI"
_VERSION = 1
_HELLO = struct.Struct("<4sBIIq32s")
_NONCE = 32
_MAC = 32
_OK = b"\x01"
_BAD_SHAPE = b"\x02"
_BAD_HASH = b"\x03"


def hash_probe() -> int:
    """This process's ``hash`` of a fixed string (equal across processes iff their hash seeds agree)."""
    return hash("pytimely routing probe") & 0x7FFFFFFFFFFFFFFF


def _mac(secret: bytes, role: bytes, client_nonce: bytes, server_nonce: bytes, client: int, server: int) -> bytes:
    message = role + client_nonce + server_nonce + struct.pack("<II", client, server)
    return hmac.new(secret, message, hashlib.sha256).digest()


def _recv_exact(sock: socket.socket, n: int, what: str) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise AuthenticationError(f"the peer closed the connection during the handshake (awaiting {what})")
        data += chunk
    return bytes(data)


def connect_peer(sock: socket.socket, secret: bytes, me: int, server: int, processes: int) -> None:
    """Authenticate a connection this process (index ``me``) opened to process ``server``."""
    nonce = os.urandom(_NONCE)
    sock.sendall(_HELLO.pack(_MAGIC, _VERSION, me, processes, hash_probe(), nonce))
    reply = _recv_exact(sock, _NONCE + _MAC, "the server's proof")
    server_nonce, proof = reply[:_NONCE], reply[_NONCE:]
    if not hmac.compare_digest(proof, _mac(secret, b"server", nonce, server_nonce, me, server)):
        raise AuthenticationError(
            f"process {server} did not prove it knows the cluster secret; the processes were given different "
            "secrets (set PYTIMELY_SECRET or PYTIMELY_SECRET_FILE alike everywhere)",
            server,
        )
    sock.sendall(_mac(secret, b"client", nonce, server_nonce, me, server))
    try:
        ok = _recv_exact(sock, 1, "the server's verdict")
    except AuthenticationError:
        ok = b""
    if ok == _BAD_SHAPE:
        raise ConfigError(f"process {server} was told a different number of processes, or this index is out of range")
    if ok == _BAD_HASH:
        raise ConfigError(
            f"process {server} hashes strings differently, so keyed records would be routed inconsistently; "
            "start every process with the same PYTHONHASHSEED (pytimely launch does this)"
        )
    if ok != _OK:
        raise AuthenticationError(f"process {server} refused this process's proof of the cluster secret", server)


def accept_peer(sock: socket.socket, secret: bytes, me: int, processes: int, bound: int | None = None) -> int:
    """Authenticate a connection accepted by process ``me``; return the connecting process's index.

    ``bound`` (default ``processes``) is one more than the highest index a peer may have: processes that join a
    running computation take indices beyond the first ``processes``.
    """
    bound = processes if bound is None else bound
    hello = _recv_exact(sock, _HELLO.size, "a greeting")
    magic, version, client, their_processes, probe, client_nonce = _HELLO.unpack(hello)
    if magic != _MAGIC:
        raise AuthenticationError("the peer is not a pytimely process (bad greeting)")
    if version != _VERSION:
        raise AuthenticationError(f"the peer speaks handshake version {version}, this process speaks {_VERSION}")
    server_nonce = os.urandom(_NONCE)
    sock.sendall(server_nonce + _mac(secret, b"server", client_nonce, server_nonce, client, me))
    proof = _recv_exact(sock, _MAC, "the client's proof")
    if not hmac.compare_digest(proof, _mac(secret, b"client", client_nonce, server_nonce, client, me)):
        raise AuthenticationError(
            f"a peer claiming to be process {client} did not prove it knows the cluster secret", client
        )
    # Checked only after authentication so strangers learn nothing of the cluster's shape.
    if their_processes != processes or not me < client < bound:
        sock.sendall(_BAD_SHAPE)
        raise ConfigError(
            f"process {client} believes the cluster has {their_processes} processes, this one (process {me}) "
            f"was told {processes}; or its index is out of range"
        )
    if probe != hash_probe():
        sock.sendall(_BAD_HASH)
        raise ConfigError(
            f"process {client} hashes strings differently from process {me}, so keyed records would be routed "
            "inconsistently; start every process with the same PYTHONHASHSEED (pytimely launch does this)"
        )
    sock.sendall(_OK)
    return int(client)
