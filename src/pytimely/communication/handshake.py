"""Mutual challenge-response authentication of a new connection, and the connection's frame keys.

The connecting process (the *client*, the higher process index) and the
accepting one (the *server*) each prove they know the run's secret without
sending it, by an HMAC-SHA256 over the whole transcript (both fresh nonces,
both indices, the layout, the hash probe and the role), so a proof can be
neither replayed nor reflected::

    client -> server  HELLO   magic "PTHI" | version | client index | shape | hash probe | client nonce
    server -> client  NONCE   server nonce                       (commits the server to this exchange)
    client -> server  PROOF   HMAC(secret, "client" | transcript)
    server -> client  PROOF   HMAC(secret, "server" | transcript | verdict) | verdict

The server reveals nothing that depends on the secret until the client has
proved it knows it: a stranger that connects to a listening process learns
only a random nonce and a closed socket, so one connection gives it nothing to
guess the secret with offline. The client's proof comes first, bound to the
server's fresh nonce; only an active attacker who stands in for a real server
receives it, which is why secrets shorter than 128 bits are refused
(:class:`~pytimely.errors.WeakSecretError`): against 2**128 candidates an
offline guess is hopeless.

Every read is of a fixed size and bounded by the handshake's deadline (a
monotonic time), so a silent or trickling stranger costs at most that long
(:class:`~pytimely.errors.HandshakeTimeoutError`); servers run handshakes in
parallel (see :mod:`pytimely.communication.cluster.networking`).

On success both sides derive the connection's :class:`~pytimely.communication.frame.LinkKeys`
with HKDF-SHA256 from the secret, salted with both nonces: fresh keys per
connection and per direction. Nothing is unpickled before this completes.
``hash probe`` is Python's ``hash`` of a fixed string: processes with different
string-hash seeds would route keyed records differently, so they are refused
with a message saying how to fix it (set ``PYTHONHASHSEED`` alike everywhere;
``pytimely launch`` does).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
from typing import TYPE_CHECKING

from pytimely.communication.platform import REAL_CLOCK, Clock
from pytimely.communication.transport import Connection, SocketConnection
from pytimely.config import MIN_SECRET
from pytimely.errors import AuthenticationError, ConfigError, HandshakeTimeoutError, WeakSecretError

if TYPE_CHECKING:
    # The frame codec loads ``cryptography``: a process that only checks a secret (event files) need not.
    from pytimely.communication.frame import FrameKeys, LinkKeys

__all__ = ["MIN_SECRET", "accept_peer", "check_secret", "connect_peer", "hash_probe"]

_MAGIC = b"PTHI"
_VERSION = 4
_HELLO = struct.Struct("<4sBIIq32s")
_NONCE = 32
_MAC = 32
_OK = b"\x01"
_BAD_SHAPE = b"\x02"
_BAD_HASH = b"\x03"


def hash_probe() -> int:
    """This process's ``hash`` of a fixed string (equal across processes iff their hash seeds agree)."""
    return hash("pytimely routing probe") & 0x7FFFFFFFFFFFFFFF


def check_secret(secret: bytes | None) -> bytes:
    """``secret`` itself if it is at least 128 bits long; :class:`WeakSecretError` otherwise."""
    if secret is None or len(secret) < MIN_SECRET:
        got = 0 if secret is None else len(secret)
        raise WeakSecretError(
            f"the cluster secret is {got} bytes long; at least {MIN_SECRET} bytes (128 bits) of randomness are "
            "needed, e.g. `python -c 'import secrets; print(secrets.token_hex(16))'` (pytimely launch makes one)"
        )
    return secret


def _mac(secret: bytes, role: bytes, transcript: bytes) -> bytes:
    return hmac.new(secret, role + transcript, hashlib.sha256).digest()


def _keys(secret: bytes, hello: bytes, server_nonce: bytes, server: int, encrypt: bool) -> tuple[FrameKeys, FrameKeys]:
    """The client-to-server and server-to-client frame keys of this connection."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    from pytimely.communication.frame import FrameKeys

    material = HKDF(
        algorithm=hashes.SHA256(),
        length=128,
        salt=hello[-_NONCE:] + server_nonce,
        info=b"pytimely link keys v2" + hello + struct.pack("<I", server),
    ).derive(secret)
    return FrameKeys(material[0:32], material[32:64], encrypt), FrameKeys(material[64:96], material[96:128], encrypt)


def _connection(sock: socket.socket | Connection) -> Connection:
    return SocketConnection(sock) if isinstance(sock, socket.socket) else sock


def _recv_exact(sock: Connection, n: int, what: str, deadline: float, peer: str, clock: Clock) -> bytes:
    data = bytearray()
    while len(data) < n:
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            raise HandshakeTimeoutError(f"{peer} did not complete the handshake in time (awaiting {what})")
        try:
            chunk = sock.recv(n - len(data), remaining)
        except TimeoutError:
            raise HandshakeTimeoutError(f"{peer} did not complete the handshake in time (awaiting {what})") from None
        if not chunk:
            raise AuthenticationError(f"{peer} closed the connection during the handshake (awaiting {what})")
        data += chunk
    return bytes(data)


def _send(sock: Connection, data: bytes, deadline: float, clock: Clock) -> None:
    try:
        sock.send_all(data, max(0.001, deadline - clock.monotonic()))
    except TimeoutError:
        raise HandshakeTimeoutError("the peer took nothing during the handshake within its deadline") from None


def connect_peer(
    sock: socket.socket | Connection,
    secret: bytes,
    me: int,
    server: int,
    shape: int,
    *,
    deadline: float | None = None,
    encrypt: bool = True,
    clock: Clock = REAL_CLOCK,
) -> LinkKeys:
    """Authenticate a connection this process (index ``me``) opened to process ``server``; the link's keys.

    ``encrypt`` False: frames are authenticated but not encrypted (both sides must agree; make it part of
    ``shape``, as the cluster does). ``deadline`` is a time on ``clock``.
    """
    from pytimely.communication.frame import LinkKeys

    check_secret(secret)
    conn = _connection(sock)
    deadline = clock.monotonic() + 30.0 if deadline is None else deadline
    who = f"process {server}"
    hello = _HELLO.pack(_MAGIC, _VERSION, me, shape, hash_probe(), os.urandom(_NONCE))
    _send(conn, hello, deadline, clock)
    server_nonce = _recv_exact(conn, _NONCE, "the server's nonce", deadline, who, clock)
    transcript = hello + server_nonce + struct.pack("<I", server)
    _send(conn, _mac(secret, b"client", transcript), deadline, clock)
    try:
        reply = _recv_exact(conn, _MAC + 1, "the server's proof", deadline, who, clock)
    except AuthenticationError as exc:
        if isinstance(exc, HandshakeTimeoutError):
            raise
        raise AuthenticationError(
            f"process {server} refused this process's proof of the cluster secret; the processes were given "
            "different secrets (set PYTIMELY_SECRET or PYTIMELY_SECRET_FILE alike everywhere)",
            server,
        ) from None
    proof, verdict = reply[:_MAC], reply[_MAC:]
    if not hmac.compare_digest(proof, _mac(secret, b"server", transcript + verdict)):
        raise AuthenticationError(
            f"process {server} did not prove it knows the cluster secret; the processes were given different "
            "secrets (set PYTIMELY_SECRET or PYTIMELY_SECRET_FILE alike everywhere)",
            server,
        )
    if verdict == _BAD_SHAPE:
        raise ConfigError(f"process {server} was told a different number of processes, or this index is out of range")
    if verdict == _BAD_HASH:
        raise ConfigError(
            f"process {server} hashes strings differently, so keyed records would be routed inconsistently; "
            "start every process with the same PYTHONHASHSEED (pytimely launch does this)"
        )
    if verdict != _OK:
        raise AuthenticationError(f"process {server} sent an unknown verdict {verdict!r}", server)
    upstream, downstream = _keys(secret, hello, server_nonce, server, encrypt)
    return LinkKeys(send=upstream, receive=downstream)


def _refuse_unless_ok(verdict: bytes, client: int, me: int, their_shape: int, shape: int) -> None:
    """Raise the typed error the verdict sent to an authenticated peer stands for (nothing for a welcome)."""
    if verdict == _BAD_SHAPE:
        raise ConfigError(
            f"process {client} believes the cluster has another shape ({their_shape:#x}) than this one (process "
            f"{me}, {shape:#x}): the process count, elasticity, PYTIMELY_ENCRYPT and PYTIMELY_AGGREGATE_PROGRESS "
            "must agree; or its index is out of range"
        )
    if verdict == _BAD_HASH:
        raise ConfigError(
            f"process {client} hashes strings differently from process {me}, so keyed records would be routed "
            "inconsistently; start every process with the same PYTHONHASHSEED (pytimely launch does this)"
        )


def accept_peer(
    sock: socket.socket | Connection,
    secret: bytes,
    me: int,
    shape: int,
    bound: int | None = None,
    *,
    deadline: float | None = None,
    processes: int | None = None,
    encrypt: bool = True,
    clock: Clock = REAL_CLOCK,
    same_hashes: bool = True,
) -> tuple[int, LinkKeys]:
    """Authenticate a connection accepted by process ``me``; the connecting process's index and the link's keys.

    ``shape`` is what both sides must agree on (the process count, see the cluster); ``processes`` (default
    ``shape``) and ``bound`` (default ``processes``) bound the peer's index: processes that join a running
    computation take indices beyond the first ``processes``. ``same_hashes`` False accepts a peer that hashes
    strings differently (a connection that routes no keyed records, such as a streaming query's feed).
    """
    from pytimely.communication.frame import LinkKeys

    check_secret(secret)
    conn = _connection(sock)
    deadline = clock.monotonic() + 30.0 if deadline is None else deadline
    bound = (shape if processes is None else processes) if bound is None else bound
    who = "a connecting peer"
    hello = _recv_exact(conn, _HELLO.size, "a greeting", deadline, who, clock)
    magic, version, client, their_shape, probe, _client_nonce = _HELLO.unpack(hello)
    if magic != _MAGIC:
        raise AuthenticationError("the peer is not a pytimely process (bad greeting)")
    if version != _VERSION:
        raise AuthenticationError(f"the peer speaks handshake version {version}, this process speaks {_VERSION}")
    server_nonce = os.urandom(_NONCE)
    _send(conn, server_nonce, deadline, clock)
    transcript = hello + server_nonce + struct.pack("<I", me)
    proof = _recv_exact(conn, _MAC, "the client's proof", deadline, who, clock)
    if not hmac.compare_digest(proof, _mac(secret, b"client", transcript)):
        raise AuthenticationError(
            f"a peer claiming to be process {client} did not prove it knows the cluster secret", client
        )
    # Checked only after authentication so strangers learn nothing of the cluster's shape.
    if their_shape != shape or not me < client < bound:
        verdict = _BAD_SHAPE
    elif same_hashes and probe != hash_probe():
        verdict = _BAD_HASH
    else:
        verdict = _OK
    _send(conn, _mac(secret, b"server", transcript + verdict) + verdict, deadline, clock)
    _refuse_unless_ok(verdict, client, me, their_shape, shape)
    upstream, downstream = _keys(secret, hello, server_nonce, me, encrypt)
    return int(client), LinkKeys(send=downstream, receive=upstream)
