"""Asking ``pytimely launch --elastic`` for membership changes: signed requests to its control endpoint, and the
non-blocking handles a worker polls between steps (:class:`Launcher`, the launcher as a worker sees it)."""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any

from pytimely.errors import BadSignatureError, JoinTimeoutError, MembershipError, RequestTimeoutError, SignedLineError
from pytimely.signed_lines import exchange

__all__ = ["OPERATIONS", "JoinRequest", "Launcher", "Pending", "StatusWait", "request"]


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
