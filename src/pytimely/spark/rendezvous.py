"""Where the tasks of a barrier stage meet: a registry on the Spark driver.

A barrier stage's tasks must learn each other's listening addresses before
pytimely's own TCP layer can connect them. Spark's ``allGather`` does that, but
its JVM side polls the barrier state once a second, so every run paid about a
second to exchange a few bytes. Instead, the driver keeps one small registry
(a listening socket and one daemon thread, started on first use): each task
connects, announces ``(run, stage attempt, partition, host:port)``, and gets
the whole address list back as soon as the last task of its stage attempt has
announced itself -- milliseconds after the tasks start.

Messages are one signed JSON line each way (:mod:`pytimely.signed_lines`,
HMAC-SHA256 under the run's secret, made on the driver and travelling in the task
closure over Spark's RPC, never in these messages): the registry ignores announcements it cannot verify, and
a task refuses a reply the registry could not have made. Each announcement is bound to its task attempt (Spark's
task attempt id) and carries a fresh nonce; the registry remembers a run's nonces and ignores an announcement it
has seen (an on-path replay, which would otherwise take a live task's place and fail it), and each reply names
the nonce and attempt it answers, so a task accepts only the answer to its own announcement. A connection that
sends no whole announcement of at most 64 KiB within ``line_timeout`` seconds
is dropped, so silent or endless clients hold nothing for long. Announcements are grouped by run *and* by
Spark's stage id and task attempt number, so a retried stage (or a whole re-run) can
never be mixed with a failed attempt's leftovers. A group that stays incomplete
for longer than its timeout is answered with an error and forgotten.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pytimely.errors import BadSignatureError, SignedLineError, SparkRendezvousError
from pytimely.signed_lines import MAX_LINE, LineBuffer, decode, encode, read_line

__all__ = ["Registry", "Ticket", "meet", "registry"]

_PURPOSE = "rendezvous"
_REPLY = "rendezvous-reply"
_MAX_REPLY = MAX_LINE * 16
"""A reply lists every task's address: longer than an announcement, still bounded."""


@dataclass(frozen=True, slots=True)
class Ticket:
    """What a task needs to find the driver's registry for one run (travels in the task closure)."""

    host: str
    port: int
    run: str
    secret: bytes = field(repr=False)
    timeout: float


@dataclass(frozen=True, slots=True)
class _Member:
    """One announced task: its connection, its address, and the nonce and attempt its reply must name."""

    sock: socket.socket
    address: str
    nonce: str
    attempt: int | None


@dataclass(slots=True)
class _Group:
    """The announcements of one stage attempt of one run, waiting for the last one."""

    processes: int
    created: float
    members: dict[int, _Member] = field(default_factory=dict)


class Registry:
    """The driver's registry: one listening socket, one selector thread, groups of waiting tasks."""

    def __init__(self, host: str = "127.0.0.1", *, timeout: float = 120.0, line_timeout: float = 10.0) -> None:
        self.host = host
        self.timeout = timeout
        self.line_timeout = line_timeout
        self._listener = socket.create_server((host, 0), backlog=128)
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._secrets: dict[str, bytes] = {}
        self._nonces: dict[str, set[str]] = {}
        """The nonces of each run's announcements so far: one seen again is a replay."""
        self._groups: dict[tuple[str, str], _Group] = {}
        self._buffers: dict[socket.socket, LineBuffer] = {}
        # Re-entrant: ``forget`` runs as a finalizer, which garbage collection may call on a thread already
        # holding the lock (the serving thread, in the middle of ``_expire``).
        self._lock = threading.RLock()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="pytimely-rendezvous", daemon=True)
        self._thread.start()

    def ticket(self, secret: bytes, timeout: float | None = None) -> Ticket:
        """A new run's ticket: the registry will accept announcements signed with ``secret`` under it."""
        run = secrets.token_hex(8)
        with self._lock:
            self._secrets[run] = secret
            self._nonces[run] = set()
        return Ticket(self.host, self.port, run, secret, self.timeout if timeout is None else timeout)

    def forget(self, run: str) -> None:
        """Stop accepting announcements for ``run`` (its DataFrame is gone)."""
        with self._lock:
            self._secrets.pop(run, None)
            self._nonces.pop(run, None)

    @property
    def waiting(self) -> int:
        """How many announced tasks are waiting for the rest of their stage attempt."""
        with self._lock:
            return sum(len(g.members) for g in self._groups.values())

    def close(self) -> None:
        """Stop serving; waiting tasks are told the registry closed."""
        if self._closed:
            return
        self._closed = True
        self._wake_w.send(b"x")
        self._thread.join(timeout=5)
        for sock in list(self._buffers):
            sock.close()
        for group in self._groups.values():
            for member in group.members.values():
                member.sock.close()
        self._groups.clear()
        self._buffers.clear()
        self._selector.close()
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()

    def _serve(self) -> None:
        while not self._closed:
            for key, _ in self._selector.select(timeout=0.5):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._wake_r:
                    return
                if sock is self._listener:
                    self._accept()
                else:
                    self._read(sock)
            self._expire()

    def _accept(self) -> None:
        try:
            conn, _ = self._listener.accept()
        except OSError:
            return
        conn.setblocking(False)
        self._buffers[conn] = LineBuffer(self.line_timeout)
        self._selector.register(conn, selectors.EVENT_READ)

    def _drop(self, sock: socket.socket) -> None:
        self._buffers.pop(sock, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(sock)
        sock.close()

    def _read(self, sock: socket.socket) -> None:
        try:
            chunk = sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        buffer = self._buffers.get(sock)
        if buffer is None:
            return
        if not chunk:
            # A task gave up or died before its group completed: forget it, so a re-run can take its place.
            self._leave(sock)
            self._drop(sock)
            return
        try:
            line = buffer.feed(chunk)
        except SignedLineError:
            self._leave(sock)
            self._drop(sock)
            return
        if line is None:
            return
        # Announced: it now waits for its group (which has its own timeout), and may announce again.
        self._buffers[sock] = LineBuffer(float("inf"))
        self._announce(sock, line)

    def _announce(self, sock: socket.socket, line: bytes) -> None:
        try:
            run = str(json.loads(line)["run"])
            with self._lock:
                secret = self._secrets.get(run)
            if secret is None:
                raise KeyError(run)
            message = decode(secret, _PURPOSE, line)
            stage, partition = str(message["stage"]), int(message["partition"])
            processes, address = int(message["processes"]), str(message["address"])
            nonce, attempt = str(message["nonce"]), message.get("attempt")
            if not 0 <= partition < processes or (attempt is not None and type(attempt) is not int):
                raise ValueError(partition)
        except (SignedLineError, ValueError, KeyError, TypeError):
            self._drop(sock)  # not ours, forged, or nonsense: say nothing to it
            return
        with self._lock:
            seen = self._nonces.get(run)
            if seen is None or nonce in seen:
                replayed = True
            else:
                replayed = False
                seen.add(nonce)
        if replayed:
            self._drop(sock)  # an announcement seen before, sent again by whoever recorded it: it takes no place
            return
        with self._lock:
            group = self._groups.setdefault((run, stage), _Group(processes, time.monotonic()))
            if group.processes != processes:
                self._drop(sock)
                return
            old = group.members.pop(partition, None)
            group.members[partition] = _Member(sock, address, nonce, attempt)
            complete = len(group.members) == processes
            if complete:
                del self._groups[(run, stage)]
        if old is not None and old.sock is not sock:
            self._reply(old, secret, run, stage, error="another task announced the same partition")
        if complete:
            addresses = [group.members[p].address for p in range(processes)]
            for member in group.members.values():
                self._reply(member, secret, run, stage, addresses=addresses)

    def _leave(self, sock: socket.socket) -> None:
        with self._lock:
            for key, group in list(self._groups.items()):
                for partition, member in list(group.members.items()):
                    if member.sock is sock:
                        del group.members[partition]
                if not group.members:
                    del self._groups[key]

    def _reply(
        self,
        member: _Member,
        secret: bytes,
        run: str,
        stage: str,
        *,
        addresses: list[str] | None = None,
        error: str | None = None,
    ) -> None:
        body: dict[str, Any] = {
            "run": run, "stage": stage, "nonce": member.nonce, "attempt": member.attempt, "addresses": addresses,
            "error": error,
        }
        sock = member.sock
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(sock)
        self._buffers.pop(sock, None)
        try:
            sock.setblocking(True)
            sock.settimeout(5)
            sock.sendall(encode(secret, _REPLY, body))
        except OSError:
            pass
        finally:
            sock.close()

    def _expire(self) -> None:
        now = time.monotonic()
        for sock, buffer in list(self._buffers.items()):
            if buffer.deadline < now:
                self._drop(sock)  # connected, but sent no whole announcement in time
        with self._lock:
            stale = [(k, g) for k, g in self._groups.items() if now - g.created > self.timeout]
            for key, _ in stale:
                del self._groups[key]
            secrets_of = {key: self._secrets.get(key[0]) for key, _ in stale}
        for key, group in stale:
            secret = secrets_of[key]
            for member in group.members.values():
                if secret is None:
                    self._drop(member.sock)
                else:
                    arrived = len(group.members)
                    self._reply(
                        member,
                        secret,
                        key[0],
                        key[1],
                        error=f"only {arrived} of {group.processes} tasks arrived within {self.timeout:g} s",
                    )


_registry: Registry | None = None
_registry_lock = threading.Lock()


def registry(host: str = "127.0.0.1") -> Registry:
    """The driver's registry on ``host``, started on first use (one per driver process)."""
    global _registry
    with _registry_lock:
        if _registry is None or _registry._closed or _registry.host != host:
            if _registry is not None:
                _registry.close()
            _registry = Registry(host)
        return _registry


def meet(
    ticket: Ticket, stage: str, partition: int, processes: int, address: str, *, attempt: int | None = None
) -> list[str]:
    """Announce ``address`` for ``partition`` of ``stage`` and wait for every task's address, by partition.

    ``attempt`` is the announcing task attempt's id (Spark's ``taskAttemptId()``); the announcement carries it
    and a fresh nonce, and only a reply naming both is accepted. Raises :class:`SparkRendezvousError` naming what
    went wrong: no registry at the ticket's address, no complete group within the ticket's timeout, a reply the
    registry could not have signed, or one to another announcement.
    """
    nonce = secrets.token_hex(16)
    body = {
        "run": ticket.run, "stage": stage, "partition": partition, "processes": processes, "address": address,
        "nonce": nonce, "attempt": attempt,
    }
    try:
        sock = socket.create_connection((ticket.host, ticket.port), timeout=min(ticket.timeout, 30.0))
    except OSError as exc:
        raise SparkRendezvousError(
            f"cannot reach the driver's rendezvous at {ticket.host}:{ticket.port}: {exc}"
        ) from exc
    with sock:
        try:
            sock.settimeout(ticket.timeout)
            sock.sendall(encode(ticket.secret, _PURPOSE, body))
            line = read_line(sock, timeout=ticket.timeout, limit=_MAX_REPLY)
        except TimeoutError as exc:  # LineTimeoutError included
            raise SparkRendezvousError(
                f"task {partition} of {processes}: the other tasks did not arrive within {ticket.timeout:g} s"
            ) from exc
        except SignedLineError as exc:
            raise SparkRendezvousError(
                f"task {partition} of {processes}: the rendezvous closed without a valid reply ({exc})"
            ) from None
        except OSError as exc:
            raise SparkRendezvousError(f"task {partition} of {processes}: rendezvous connection failed: {exc}") from exc
    try:
        reply = decode(ticket.secret, _REPLY, line)
    except BadSignatureError:
        raise SparkRendezvousError(
            f"task {partition} of {processes}: the rendezvous reply is not signed by the driver"
        ) from None
    except SignedLineError as exc:
        raise SparkRendezvousError(
            f"task {partition} of {processes}: the rendezvous closed without a valid reply ({exc})"
        ) from None
    if reply.get("run") != ticket.run or reply.get("stage") != stage:
        raise SparkRendezvousError(f"task {partition} of {processes}: the rendezvous replied for another run or stage")
    if reply.get("nonce") != nonce or reply.get("attempt") != attempt:
        raise SparkRendezvousError(
            f"task {partition} of {processes}: the rendezvous reply answers another announcement (a replay?)"
        )
    if reply.get("error"):
        raise SparkRendezvousError(f"task {partition} of {processes}: {reply['error']}")
    addresses = reply.get("addresses")
    if not isinstance(addresses, list) or len(addresses) != processes:
        raise SparkRendezvousError(f"task {partition} of {processes}: the rendezvous sent a malformed address list")
    return [str(a) for a in addresses]
