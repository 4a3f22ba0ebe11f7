"""Processes joining and leaving a running computation: rescale plans, bin assignments, the launcher's endpoint.

A computation started with ``PYTIMELY_ELASTIC=1`` accepts processes that join
while it runs (seed ``002_640294948a1fdfd3.txt``): a newcomer connects to every
member, its workers bootstrap their progress state from a member
(:mod:`pytimely.progress.bootstrap`) and hold capabilities the member minted for
them, so their inputs work. A process leaves with :meth:`Worker.leave
<pytimely.worker.Worker.leave>` once its bins moved to others. Keyed state
follows the bins (``control=`` on the keyed operators): whoever changes the
membership sends the moves on the control stream: a leaver's bins all at the time
the change takes effect, a join's spread over the epochs after it in small groups
(:func:`pytimely.algorithms.rescaling.migration_schedule`, fluid migration as in
Megaphone); :func:`balanced_moves` is the all-at-once assignment.

:class:`RescalePlan` is the schedule the ``wordcount --rescale`` job follows; it
tells every process, the same way, which workers take part at each epoch.
"""

from __future__ import annotations

import contextlib
import secrets
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytimely.dataflow.bins import DEFAULT_BINS, Move
from pytimely.errors import BadSignatureError, JoinTimeoutError, MembershipError, RequestTimeoutError, SignedLineError
from pytimely.signed_lines import LineBuffer, decode, encode, exchange

__all__ = [
    "OPERATIONS",
    "ControlEndpoint",
    "JoinRequest",
    "Launcher",
    "Pending",
    "RescalePlan",
    "StatusWait",
    "balanced_moves",
    "request",
]


def balanced_moves(time: int, members: list[int] | tuple[int, ...], bins: int = DEFAULT_BINS) -> list[Move]:
    """A move for every bin at ``time``: bin ``b`` to ``members[b % len(members)]`` (every table agrees after it)."""
    if not members:
        raise MembershipError("a bin assignment needs at least one member")
    ordered = sorted(members)
    return [Move(time, b, ordered[b % len(ordered)]) for b in range(bins)]


@dataclass(frozen=True)
class RescalePlan:
    """When processes join and leave: ``changes`` are ``(epoch, +1 or -1)``, after which epoch they happen.

    A joining process takes the next unused index. A leave names its process (``leaving``, aligned with
    ``changes``), or, unnamed (``None``), is the newest process still there. Any process may leave, one that
    started the computation included, as long as one is left. Changes take effect from the epoch after the one
    named. Several changes may name one epoch (``4:-1,4:+1``: one leaves and one joins at once), leaves before
    joins.
    """

    initial: int
    workers: int
    changes: tuple[tuple[int, int], ...] = ()
    leaving: tuple[int | None, ...] = ()
    """For each change, the process that leaves (``None``: the newest there, and for a join)."""

    @classmethod
    def parse(cls, text: str, *, initial: int, workers: int = 1) -> RescalePlan:
        """``"3:+1,6:-1,8:-p0"``: a process joins after epoch 3, the newest leaves after epoch 6, process 0 after 8
        (empty text: no change).

        Epochs never decrease; at one epoch, leaves come before joins (a newcomer never leaves before it
        took part).
        """
        changes, leaving = [], []
        for n, item in enumerate(t for t in text.replace(" ", "").split(",") if t):
            epoch, sep, delta = item.partition(":")
            named = delta[2:] if delta.startswith("-p") else ""
            if not sep or not epoch.isdigit() or (delta not in ("+1", "-1", "1") and not named.isdigit()):
                raise MembershipError(
                    f"rescale entry {n + 1} ({item!r}) is not EPOCH:+1, EPOCH:-1 or EPOCH:-pPROCESS "
                    "(for example 3:+1,6:-1,8:-p0)"
                )
            changes.append((int(epoch), -1 if delta.startswith("-") else 1))
            leaving.append(int(named) if named else None)
        if changes != sorted(changes):  # by epoch, and -1 before +1 within one
            raise MembershipError(
                f"rescale epochs must not decrease, and at one epoch leaves come before joins: {text!r}"
            )
        plan = cls(initial, workers, tuple(changes), tuple(leaving))
        plan._check()
        return plan

    def _who(self) -> tuple[int | None, ...]:
        return self.leaving or (None,) * len(self.changes)

    def _check(self) -> None:
        if len(self._who()) != len(self.changes):
            raise MembershipError(f"a plan of {len(self.changes)} changes names {len(self.leaving)} leavers")
        for epoch, _ in self.changes:
            self.processes_at(epoch + 1)

    def processes_at(self, epoch: int) -> list[int]:
        """The processes taking part in ``epoch``."""
        live = list(range(self.initial))
        fresh = self.initial
        for (at, delta), who in zip(self.changes, self._who(), strict=True):
            if at >= epoch:
                break
            if delta > 0:
                live.append(fresh)
                fresh += 1
                continue
            if not live or (len(live) == 1 and (who is None or who in live)):
                raise MembershipError(f"after epoch {at} no process would be left")
            leaver = live[-1] if who is None else who
            if leaver not in live:
                raise MembershipError(f"process {leaver} is to leave after epoch {at}, but it does not run then")
            live.remove(leaver)
        return live

    def members_at(self, epoch: int) -> list[int]:
        """The worker ids taking part in ``epoch``."""
        w = self.workers
        return [p * w + i for p in self.processes_at(epoch) for i in range(w)]

    @property
    def join_epochs(self) -> set[int]:
        """The epochs in which a newly joined process first takes part."""
        return {e + 1 for e, d in self.changes if d > 0}

    def joins_at(self, worker: int) -> int:
        """The first epoch in which ``worker`` takes part."""
        process = worker // self.workers
        for epoch in sorted(self.join_epochs):
            if process in self.processes_at(epoch):
                return epoch
        raise MembershipError(f"worker {worker} never joins in this plan")

    def newcomers_at(self, epoch: int) -> list[int]:
        """The processes that first take part in ``epoch``."""
        before = set(self.processes_at(epoch - 1)) if epoch > 0 else set(range(self.initial))
        return [p for p in self.processes_at(epoch) if p not in before]

    def leavers_at(self, epoch: int) -> list[int]:
        """The processes that took part in ``epoch - 1`` and no longer do in ``epoch``."""
        if epoch <= 0:
            return []
        now = set(self.processes_at(epoch))
        return [p for p in self.processes_at(epoch - 1) if p not in now]

    def coordinator_at(self, epoch: int) -> int:
        """The worker that asks for the processes joining at ``epoch`` and hands them their bins: the first worker
        of the lowest process taking part both in ``epoch - 1`` and in ``epoch`` (there is always one)."""
        staying = set(self.processes_at(epoch - 1)) & set(self.processes_at(epoch)) if epoch > 0 else {0}
        return min(staying) * self.workers

    def gatherer(self, epochs: int, *, operator: str = "gather") -> int:
        """The worker where ``operator`` may gather what ``epochs`` epochs emit: the first worker of the lowest
        process taking part in every one of them. :class:`MembershipError` naming ``operator`` if there is none."""
        steady = set(self.processes_at(0)) & set(self.processes_at(max(0, epochs - 1)))
        if not steady:
            raise MembershipError(
                f"operator {operator!r} gathers on one worker, and no process takes part in every one of the "
                f"{epochs} epochs of this plan: keep one process from start to end"
            )
        return min(steady) * self.workers

    def check_pinned(self, pinned: dict[str, tuple[int, ...]], epochs: int | None = None) -> None:
        """:class:`MembershipError` naming the operator, before anything runs, if a process that leaves (within
        ``epochs`` epochs) has a worker that ``pinned`` (see :meth:`Worker.pinned <pytimely.worker.Worker.pinned>`)
        says an operator receives records on by index."""
        for epoch, delta in self.changes:
            if delta > 0 or (epochs is not None and epoch + 1 >= epochs):
                continue
            for process in self.leavers_at(epoch + 1):
                workers = range(process * self.workers, (process + 1) * self.workers)
                for name, held in sorted(pinned.items()):
                    if any(w in held for w in workers):
                        raise MembershipError(
                            f"operator {name!r} receives records by worker index on worker(s) "
                            f"{', '.join(str(w) for w in workers if w in held)} of process {process}, which this "
                            f"plan has leave after epoch {epoch}: its records could not reach it any more. Route "
                            "by key through bins (keyed operators given a control stream), gather on a process "
                            "that stays, or keep this process"
                        )

    @property
    def processes(self) -> int:
        """How many process indices the plan uses in all."""
        return self.initial + sum(1 for _, d in self.changes if d > 0)


# -- the launcher's control endpoint ---------------------------------------------------------------------

OPERATIONS = ("add", "remove", "leaving", "joined", "status")
"""What the control endpoint does: start a newcomer, ask a process to leave, hear that one leaves or that a
newcomer's worker has bootstrapped, report a process's state."""

_PURPOSE = "control"
_REPLY = "control-reply"
_WINDOW = 300.0
"""Seconds a signed request stays valid (its nonce is remembered that long, so a replay is refused)."""


def _target(address: str | None, secret: bytes | None) -> tuple[tuple[str, int], bytes]:
    if not address:
        raise MembershipError(
            "no control endpoint: run under `pytimely launch --elastic` (RunConfig.from_env().control names it)"
        )
    if not secret:
        raise MembershipError("the control endpoint needs the cluster secret (RunConfig.from_env().cluster.secret)")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise MembershipError(f"the control endpoint address {address!r} is not HOST:PORT")
    return (host, int(port)), secret


def request(op: str, process: int | None = None, *, address: str | None = None, secret: bytes | None = None,
            timeout: float = 10.0) -> dict[str, Any]:
    """Ask ``pytimely launch --elastic`` to do ``op`` (see :data:`OPERATIONS`) and return its answer.

    ``"add"`` returns ``{"process": index}`` at once (the launcher starts the newcomer as soon as no leave is
    in flight); ``"remove"`` asks ``process`` to leave; ``"leaving"`` tells the launcher ``process`` is leaving
    on its own; ``"joined"`` that worker ``process`` (a worker index here) of a newcomer has bootstrapped;
    ``"status"`` gives ``{"process": p, "state": ..., "status": exit status or None}``, the state one of
    ``waiting`` (not started yet), ``running``, ``joined`` (every worker bootstrapped), ``leaving``, ``exited``.
    ``address`` and ``secret`` are the launcher's control endpoint and the cluster secret, which the launcher gives
    every process it starts (``RunConfig.from_env().control`` and ``.cluster.secret``).

    A connection that fails, is refused or closed, or gets no answer, is tried again (a fresh connection after a
    pause of 0.05 s, doubling up to 0.5 s) until ``timeout`` seconds have passed since the call
    (:class:`~pytimely.errors.RequestTimeoutError`, naming the last failure). Every attempt carries the same
    request id, so the launcher does what is asked once however many attempts reach it. A refusal the launcher
    signs raises :class:`MembershipError` with its reason at once, and so does an answer it could not have signed.
    """
    where, key = _target(address, secret)
    ident = secrets.token_hex(16)
    deadline = time.monotonic() + timeout
    pause, attempts = 0.05, 0
    failure: BaseException | None = None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RequestTimeoutError(
                f"the control endpoint at {where[0]}:{where[1]} did not answer {op!r} within {timeout:g} s "
                f"({attempts} attempt(s); the last: {failure})"
            ) from failure
        body = {"op": op, "process": process, "id": ident, "nonce": secrets.token_hex(16), "time": time.time()}
        attempts += 1
        try:
            answer = exchange(where, key, _PURPOSE, body, timeout=remaining)
            break
        except BadSignatureError as exc:
            raise MembershipError(f"the control endpoint at {where[0]}:{where[1]} gave no valid answer to {op!r}: "
                                  f"{exc}") from None
        except (SignedLineError, OSError) as exc:  # closed, refused, reset or silent: try again
            failure = exc
        time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
        pause = min(2 * pause, 0.5)
    if "error" in answer:
        raise MembershipError(f"the launcher refused {op!r}: {answer['error']}")
    return answer


class Pending:
    """A control request running on its own thread, so a worker keeps stepping: poll :meth:`done` between steps.

    The request itself is bounded by ``timeout``; :meth:`done` raises what it raised.
    """

    def __init__(self, op: str, process: int | None = None, *, address: str | None = None,
                 secret: bytes | None = None, timeout: float = 10.0) -> None:
        self.op = op
        self._target = _target(address, secret)  # a missing endpoint is refused here, not on the thread
        self._answer: dict[str, Any] | None = None
        self._error: BaseException | None = None
        self._finished = threading.Event()
        address_text = f"{self._target[0][0]}:{self._target[0][1]}"
        self._thread = threading.Thread(
            target=self._run, args=(process, address_text, timeout), name=f"pytimely-request-{op}", daemon=True
        )
        self._thread.start()

    def _run(self, process: int | None, address: str, timeout: float) -> None:
        try:
            self._answer = request(self.op, process, address=address, secret=self._target[1], timeout=timeout)
        except BaseException as exc:  # handed to the worker that polls
            self._error = exc
        finally:
            self._finished.set()

    def done(self) -> bool:
        """Whether the answer is here; raises the request's error if it failed."""
        if not self._finished.is_set():
            return False
        if self._error is not None:
            raise self._error
        return True

    def result(self) -> dict[str, Any]:
        """The launcher's answer (after :meth:`done` said so)."""
        if not self.done() or self._answer is None:
            raise MembershipError(f"the {self.op!r} request has not been answered yet")
        return self._answer


class JoinRequest:
    """An ``add`` asked of the launcher and followed while the requester steps (see :meth:`check`).

    The ``add`` and every later ``status`` question are :class:`Pending` requests, so nothing here blocks; the
    launcher is asked every ``poll`` seconds whether the newcomer still runs.
    """

    def __init__(self, *, address: str | None = None, secret: bytes | None = None, timeout: float = 10.0,
                 poll: float = 0.5) -> None:
        self._options: dict[str, Any] = {"address": address, "secret": secret, "timeout": timeout}
        self._poll = poll
        self._add = Pending("add", **self._options)
        self._status: Pending | None = None
        self._next = 0.0
        self.process: int | None = None
        """The newcomer's index, once the launcher answered."""

    def check(self) -> None:
        """Raise :class:`JoinTimeoutError` if the newcomer exited before joining (or the request failed)."""
        if self.process is None:
            if not self._add.done():
                return
            self.process = int(self._add.result()["process"])
        if self._status is not None and self._status.done():
            answer, self._status = self._status.result(), None
            if answer.get("state") == "exited":
                raise JoinTimeoutError(
                    f"process {self.process}, asked to join, exited with status {answer.get('status')} before "
                    "it joined",
                    self.process,
                )
        if self._status is None and time.monotonic() >= self._next:
            self._next = time.monotonic() + self._poll
            self._status = Pending("status", self.process, **self._options)


class StatusWait:
    """Done once the launcher reports ``process`` in one of ``states`` (asked every ``poll`` seconds, never blocking).

    A process that exits first, when ``"exited"`` is not among ``states``, raises :class:`JoinTimeoutError`.
    """

    def __init__(self, process: int, states: tuple[str, ...], *, address: str | None = None,
                 secret: bytes | None = None, timeout: float = 10.0, poll: float = 0.1) -> None:
        self.process = process
        self.states = states
        self._options: dict[str, Any] = {"address": address, "secret": secret, "timeout": timeout}
        self._poll = poll
        self._next = 0.0
        self._status: Pending | None = None
        self._done = False

    def done(self) -> bool:
        """Whether the launcher reported one of the states; raises if the process exited instead."""
        if self._done:
            return True
        if self._status is not None and self._status.done():
            answer, self._status = self._status.result(), None
            state = answer.get("state")
            if state in self.states:
                self._done = True
                return True
            if state == "exited":
                raise JoinTimeoutError(
                    f"process {self.process} exited with status {answer.get('status')} before it was "
                    f"{' or '.join(self.states)}",
                    self.process,
                )
        if self._status is None and time.monotonic() >= self._next:
            self._next = time.monotonic() + self._poll
            self._status = Pending("status", self.process, **self._options)
        return False


class Launcher:
    """Membership changes asked of ``pytimely launch --elastic`` (the coordinator of
    :func:`pytimely.algorithms.rescaling.run_while_rescaling`); every request is a non-blocking handle."""

    def __init__(self, *, address: str | None = None, secret: bytes | None = None, timeout: float = 10.0) -> None:
        self._options: dict[str, Any] = {"address": address, "secret": secret, "timeout": timeout}
        _target(address, secret)  # refuse a missing endpoint at once

    def join(self) -> JoinRequest:
        """Ask for a newcomer."""
        return JoinRequest(**self._options)

    def leaving(self, process: int) -> Pending:
        """Tell the launcher ``process`` leaves (before it sends ``LEAVING``)."""
        return Pending("leaving", process, **self._options)

    def joined(self, worker: int) -> Pending:
        """Tell the launcher newcomer worker ``worker`` has bootstrapped."""
        return Pending("joined", worker, **self._options)

    def reached(self, process: int, states: tuple[str, ...]) -> StatusWait:
        """Done once the launcher reports ``process`` in one of ``states``."""
        return StatusWait(process, states, **self._options)


class ControlEndpoint:
    """The launcher's side: a loopback socket; each client sends one signed JSON line and gets one back.

    One thread serves every connection through a selector, so any number of silent or slow clients delay no one:
    each line is read within ``line_timeout`` seconds in all and :data:`~pytimely.signed_lines.MAX_LINE` bytes,
    and at most ``max_clients`` connections are held at once, the one waiting longest being closed for a
    newcomer (a member's request arrives with its connection, so it is never the one waiting longest). A
    request's answer is kept by its id for :data:`_WINDOW` seconds, so a member that tries again after losing an
    answer gets the same one and nothing is done twice.
    """

    def __init__(self, secret: bytes, handle: Callable[[str, int | None], dict[str, Any]], *,
                 line_timeout: float = 5.0, max_clients: int = 1024, port: int = 0) -> None:
        self._secret = secret
        self._handle = handle
        self.line_timeout = line_timeout
        self.max_clients = max_clients
        self._sock = socket.create_server(("127.0.0.1", port), backlog=1024)
        self._sock.setblocking(False)
        self.address = f"127.0.0.1:{self._sock.getsockname()[1]}"
        self._seen: dict[str, float] = {}
        self._answers: dict[str, tuple[float, dict[str, Any]]] = {}
        self._clients: dict[socket.socket, LineBuffer] = {}
        self.dropped = 0
        """Connections closed without a whole line (silent, slow, too long, or closed for a newcomer)."""
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._sock, selectors.EVENT_READ)
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="pytimely-control", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            while not self._closed:
                for key, _ in self._selector.select(timeout=0.2):
                    if key.fileobj is self._wake_r:
                        return
                    if key.fileobj is self._sock:
                        self._accept()
                    else:
                        conn = key.fileobj
                        assert isinstance(conn, socket.socket)
                        self._read(conn)
                now = time.monotonic()
                for conn, buffer in list(self._clients.items()):
                    if buffer.deadline < now:
                        self._drop(conn)
        finally:
            for conn in list(self._clients):
                self._drop(conn)

    def _accept(self) -> None:
        for _ in range(256):
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if len(self._clients) >= self.max_clients:
                self._drop(next(iter(self._clients)))  # the one waiting longest: silent or slow, not a member
            conn.setblocking(False)
            self._clients[conn] = LineBuffer(self.line_timeout)
            self._selector.register(conn, selectors.EVENT_READ)

    def _drop(self, conn: socket.socket) -> None:
        if self._clients.pop(conn, None) is not None:
            self.dropped += 1
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn)
        conn.close()

    def _read(self, conn: socket.socket) -> None:
        buffer = self._clients.get(conn)
        if buffer is None:
            return
        try:
            chunk = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(conn)
            return
        try:
            line = buffer.feed(chunk)
        except SignedLineError:
            self._drop(conn)
            return
        if line is None:
            return
        del self._clients[conn]
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn)
        try:
            answer = self._answer(line)
        except SignedLineError as exc:
            answer = {"error": str(exc)}
        except Exception as exc:  # a bad request must not stop the endpoint
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        with contextlib.suppress(OSError), conn:
            conn.setblocking(True)
            conn.settimeout(1.0)  # an answer is a few hundred bytes: it fits any socket buffer
            conn.sendall(encode(self._secret, _REPLY, answer))

    def _answer(self, line: bytes) -> dict[str, Any]:
        message = decode(self._secret, _PURPOSE, line)
        nonce, sent, ident = str(message.get("nonce")), message.get("time"), message.get("id")
        now = time.time()
        if not isinstance(sent, (int, float)) or abs(now - sent) > _WINDOW:
            return {"error": "a request too old or from a clock far off (a replay?)"}
        for old in [n for n, t in self._seen.items() if now - t > 2 * _WINDOW]:
            del self._seen[old]
        for old in [i for i, (t, _) in self._answers.items() if now - t > _WINDOW]:
            del self._answers[old]
        if nonce in self._seen:
            return {"error": "a replayed request"}
        self._seen[nonce] = now
        if isinstance(ident, str) and ident in self._answers:
            return self._answers[ident][1]  # an attempt again, after the answer was lost: done once already
        op, process = message.get("op"), message.get("process")
        if op not in OPERATIONS:
            return {"error": f"unknown operation {op!r} ({', '.join(OPERATIONS)})"}
        if process is not None and type(process) is not int:
            return {"error": f"process must be an index, got {process!r}"}
        answer = self._handle(str(op), process)
        if isinstance(ident, str):
            self._answers[ident] = (now, answer)
        return answer

    def close(self) -> None:
        """Stop listening, and close every connection."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join(timeout=5)
        self._selector.close()
        for sock in (self._sock, self._wake_r, self._wake_w):
            sock.close()
