"""Processes joining and leaving a running computation: rescale plans, bin assignments, the launcher's endpoint.

A computation started with ``PYTIMELY_ELASTIC=1`` accepts processes that join
while it runs (seed ``002_640294948a1fdfd3.txt``): a newcomer connects to every
member, its workers bootstrap their progress state from a member
(:mod:`pytimely.progress.bootstrap`) and hold capabilities the member minted for
them, so their inputs work. A process leaves with :meth:`Worker.leave
<pytimely.worker.Worker.leave>` once its bins moved to others. Keyed state
follows the bins (``control=`` on the keyed operators): whoever changes the
membership sends :func:`balanced_moves` on the control stream at the time the
change takes effect.

:class:`RescalePlan` is the schedule the ``wordcount --rescale`` job follows; it
tells every process, the same way, which workers take part at each epoch.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytimely.dataflow.bins import DEFAULT_BINS, Move
from pytimely.errors import MembershipError

__all__ = ["ControlEndpoint", "RescalePlan", "balanced_moves", "request"]


def balanced_moves(time: int, members: list[int] | tuple[int, ...], bins: int = DEFAULT_BINS) -> list[Move]:
    """A move for every bin at ``time``: bin ``b`` to ``members[b % len(members)]`` (every table agrees after it)."""
    if not members:
        raise MembershipError("a bin assignment needs at least one member")
    ordered = sorted(members)
    return [Move(time, b, ordered[b % len(ordered)]) for b in range(bins)]


@dataclass(frozen=True)
class RescalePlan:
    """When processes join and leave: ``changes`` are ``(epoch, +1 or -1)``, after which epoch they happen.

    A joining process takes the next unused index; a leaving one is the newest process still there (never
    process 0). Changes take effect from the epoch after the one named.
    """

    initial: int
    workers: int
    changes: tuple[tuple[int, int], ...] = ()

    @classmethod
    def parse(cls, text: str, *, initial: int, workers: int = 1) -> RescalePlan:
        """``"3:+1,6:-1"``: a process joins after epoch 3, one leaves after epoch 6 (empty text: no change)."""
        changes = []
        for n, item in enumerate(t for t in text.replace(" ", "").split(",") if t):
            epoch, sep, delta = item.partition(":")
            if not sep or not epoch.isdigit() or delta not in ("+1", "-1", "1"):
                raise MembershipError(
                    f"rescale entry {n + 1} ({item!r}) is not EPOCH:+1 or EPOCH:-1 (for example 3:+1,6:-1)"
                )
            changes.append((int(epoch), -1 if delta == "-1" else 1))
        if [e for e, _ in changes] != sorted({e for e, _ in changes}):
            raise MembershipError(f"rescale epochs must increase, one change per epoch: {text!r}")
        plan = cls(initial, workers, tuple(changes))
        plan._check()
        return plan

    def _check(self) -> None:
        processes = self.initial
        for epoch, delta in self.changes:
            processes += delta
            if processes < 1:
                raise MembershipError(f"after epoch {epoch} no process would be left")

    def processes_at(self, epoch: int) -> list[int]:
        """The processes taking part in ``epoch``."""
        live = list(range(self.initial))
        fresh = self.initial
        for at, delta in self.changes:
            if at >= epoch:
                break
            if delta > 0:
                live.append(fresh)
                fresh += 1
            else:
                if live[-1] == 0:
                    raise MembershipError("process 0 never leaves")
                live.pop()
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

    @property
    def processes(self) -> int:
        """How many process indices the plan uses in all."""
        return self.initial + sum(1 for _, d in self.changes if d > 0)


# -- the launcher's control endpoint ---------------------------------------------------------------------


def _sign(secret: bytes, body: bytes) -> str:
    return hmac.new(secret, b"pytimely-control|" + body, hashlib.sha256).hexdigest()


def request(op: str, process: int | None = None, *, address: str | None = None, secret: bytes | None = None,
            timeout: float = 10.0) -> dict[str, Any]:
    """Ask ``pytimely launch --elastic`` to ``"add"`` a process or ``"remove"`` process ``process``.

    ``address`` and ``secret`` default to ``PYTIMELY_CONTROL`` and ``PYTIMELY_SECRET``, which the launcher
    gives every process it starts. Returns the launcher's answer (``{"process": index}``); a refusal raises
    :class:`MembershipError` with the launcher's reason.
    """
    address = address or os.environ.get("PYTIMELY_CONTROL")
    if not address:
        raise MembershipError("no control endpoint: run under `pytimely launch --elastic` or set PYTIMELY_CONTROL")
    if secret is None:
        secret = os.environ.get("PYTIMELY_SECRET", "").encode()
    if not secret:
        raise MembershipError("the control endpoint needs the cluster secret (PYTIMELY_SECRET)")
    host, _, port = address.rpartition(":")
    body = json.dumps({"op": op, "process": process, "nonce": secrets.token_hex(8)}).encode()
    line = json.dumps({"body": body.decode(), "mac": _sign(secret, body)}).encode() + b"\n"
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(line)
        reply = sock.makefile("rb").readline()
    try:
        answer: dict[str, Any] = json.loads(reply)
    except ValueError:
        raise MembershipError(f"the control endpoint at {address} gave no answer") from None
    if "error" in answer:
        raise MembershipError(f"the launcher refused {op!r}: {answer['error']}")
    return answer


class ControlEndpoint:
    """The launcher's side: one listening socket on loopback; each request is a JSON line signed with the secret."""

    def __init__(self, secret: bytes, handle: Callable[[str, int | None], dict[str, Any]]) -> None:
        self._secret = secret
        self._handle = handle
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._sock.getsockname()[1]}"
        self._seen: set[str] = set()
        self._thread = threading.Thread(target=self._serve, name="pytimely-control", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5.0)
                try:
                    answer = self._answer(conn.makefile("rb").readline())
                except Exception as exc:  # a bad request must not stop the endpoint
                    answer = {"error": f"{type(exc).__name__}: {exc}"}
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps(answer).encode() + b"\n")

    def _answer(self, line: bytes) -> dict[str, Any]:
        message = json.loads(line)
        body = str(message["body"]).encode()
        if not hmac.compare_digest(str(message["mac"]), _sign(self._secret, body)):
            return {"error": "the request is not signed with the cluster secret"}
        request = json.loads(body)
        if request["nonce"] in self._seen:
            return {"error": "a replayed request"}
        self._seen.add(request["nonce"])
        if request["op"] not in ("add", "remove"):
            return {"error": f"unknown operation {request['op']!r} (add or remove)"}
        return self._handle(request["op"], request.get("process"))

    def close(self) -> None:
        """Stop listening."""
        self._sock.close()
