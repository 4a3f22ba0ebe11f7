"""The rescaling model (:class:`RescaleModel`): every enabled transition of a state, its invariants, and how a
state is shown.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import product

from pytimely.verify import exchange as E
from pytimely.verify.model import Action, Invariant, TransitionInvariant, fmt_value
from pytimely.verify.rescale.batches import (
    agg_send,
    agg_send_enabled,
    recv_upd,
    recv_upd_enabled,
    send_upd,
    send_upd_enabled,
)
from pytimely.verify.rescale.capabilities import announce, announce_enabled
from pytimely.verify.rescale.invariants import Accounting, BootstrapView, Membership, NoGap, Safe, glob_lemma
from pytimely.verify.rescale.join import (
    bootstrap_done,
    bootstrap_done_enabled,
    bootstrap_state,
    bootstrap_state_enabled,
    join,
    join_enabled,
    missing_range,
    range_reply,
    range_reply_enabled,
    range_request,
    range_request_enabled,
)
from pytimely.verify.rescale.leave import (
    disconnect,
    disconnect_enabled,
    hand_over,
    hand_over_enabled,
    leave,
    leave_enabled,
)
from pytimely.verify.rescale.state import JOINING, MEMBER, RescaleConfig, State, initial_states
from pytimely.verify.zmset import nonempty_subsets

# --- the model --------------------------------------------------------------------------------------------


class RescaleModel:
    """The exchange protocol with join (bootstrap) and leave under the bounds of a :class:`RescaleConfig`."""

    name = "rescale"

    def __init__(self, cfg: RescaleConfig) -> None:
        self.cfg = cfg

    def initial_states(self) -> Iterator[State]:
        """See :func:`initial_states`."""
        return initial_states(self.cfg)

    def successors(self, s: State) -> Iterator[tuple[Action, State]]:
        """Every enabled action within the bounds (no stutter)."""
        cfg = self.cfg
        n = cfg.workers
        for act, e2 in E.exchange_actions(cfg.exchange, cfg.targets, s.exch, False):
            if s.status[act.arg("w")] != MEMBER:
                continue
            if act.name == "perf_op" and any(s.status[r] != MEMBER for r, _ in act.arg("Δdata")):
                continue
            yield act, s._replace(exch=e2)
        for w in range(n):
            if s.exch.temp[w]:
                for P in nonempty_subsets(s.exch.temp[w]):
                    if send_upd_enabled(cfg, s, w, P):
                        yield Action("send_upd", (("w", w), ("P", P))), send_upd(cfg, s, w, P)
        for w, r in product(range(cfg.senders), range(n)):
            if recv_upd_enabled(s, w, r):
                yield Action("recv_upd", (("w", w), ("w'", r))), recv_upd(cfg, s, w, r)
        for p in range(cfg.process_count):
            for k in range(1, len(s.out[p]) + 1):
                if agg_send_enabled(cfg, s, p, k):
                    yield Action("agg_send", (("p", p), ("k", k))), agg_send(cfg, s, p, k)
        yield from self._membership(s)

    def _membership(self, s: State) -> Iterator[tuple[Action, State]]:
        cfg = self.cfg
        n = cfg.workers
        for b in s.boots:
            c = b.newcomer
            if bootstrap_state_enabled(s, c, cfg):
                act = Action("bootstrap_state", (("n", c), ("server", b.server)))
                yield act, bootstrap_state(cfg, s, c)
            for m in range(cfg.senders):
                if range_request_enabled(cfg, s, m, c):
                    lo, hi = missing_range(cfg, b, m) or (0, 0)
                    act = Action("range_request", (("n", c), ("w", m), ("lo", lo), ("hi", hi)))
                    yield act, range_request(cfg, s, m, c)
            for m, lo, hi in sorted(b.pending):
                if range_reply_enabled(s, m, lo, hi, c):
                    act = Action("range_reply", (("server", b.server), ("w", m), ("lo", lo), ("hi", hi)))
                    yield act, range_reply(cfg, s, m, lo, hi, c)
            for p in cfg.poset.elements:
                if announce_enabled(cfg, s, p, c):
                    act = Action("announce", (("server", b.server), ("n", c), ("p", p)))
                    yield act, announce(cfg, s, p, c)
            if bootstrap_done_enabled(cfg, s, c):
                yield Action("bootstrap_done", (("n", c),)), bootstrap_done(cfg, s, c)
        lv = s.leave
        if lv is not None:
            if hand_over_enabled(cfg, s):
                yield Action("hand_over", (("w", lv.leaver), ("heir", lv.heir))), hand_over(cfg, s)
            if disconnect_enabled(s, cfg):
                yield Action("disconnect", (("w", lv.leaver),)), disconnect(cfg, s)
        if s.leave is not None:
            return
        for w, r in product(range(n), range(n)):
            if join_enabled(cfg, s, w, r):
                yield Action("join", (("n", w), ("server", r))), join(cfg, s, w, r)
            if leave_enabled(cfg, s, w, r):
                yield Action("leave", (("w", w), ("heir", r))), leave(cfg, s, w, r)

    def invariants(self) -> list[Invariant[State]]:
        """``Safe``, ``BootstrapView``, ``NoGap``, lemma ``glob``, ``Accounting``, ``InvTempJustified``,
        ``InvCapsNonneg`` and ``Membership`` (with aggregated senders, the outboxes count as on their way)."""
        cfg = self.cfg
        ec = cfg.exchange
        return [
            Invariant("Safe", lambda s: Safe(cfg, s)),
            Invariant("BootstrapView", lambda s: BootstrapView(cfg, s)),
            Invariant("NoGap", lambda s: NoGap(cfg, s)),
            Invariant("glob", lambda s: glob_lemma(cfg, s)),
            Invariant("Accounting", lambda s: Accounting(cfg, s)),
            Invariant("InvTempJustified", lambda s: E.temp_justified(ec, s.exch)),
            Invariant("InvCapsNonneg", lambda s: E.caps_nonneg(ec, s.exch)),
            Invariant("Membership", lambda s: Membership(cfg, s)),
        ]

    def transition_invariants(self) -> list[TransitionInvariant[State]]:
        """None beyond the state invariants."""
        return []

    def format_state(self, s: State) -> str:
        """Status, capabilities, data, unsent updates, non-empty links, member views and the bootstrap on one line."""
        return format_rescale(self.cfg, s)


def format_rescale(cfg: RescaleConfig, s: State) -> str:
    """A one-line rendering of a rescaling configuration."""
    e = s.exch
    n = cfg.workers

    def name(w: int) -> str:
        return str(w) if w < n else f"a{w - n}"

    links = [f"{name(w)}->{r}:{list(s.links[w][r])}" for w in range(cfg.senders) for r in range(n) if s.links[w][r]]
    views = [f"{w}:{e.glob[w]}" for w in range(n) if s.status[w] in (MEMBER, JOINING)]
    out = (
        f"status={s.status} caps={list(e.caps)} data={e.data} temp={list(e.temp)} "
        f"links=[{', '.join(links)}] glob=[{', '.join(views)}] recvd={[list(r) for r in s.recvd]}"
    )
    for b in s.boots:
        out += f" boot(n={b.newcomer}, server={b.server}, hello={list(b.hello)}, base={b.base}"
        out += f", pending={fmt_value(b.pending)}, filled={fmt_value(b.filled)})"
    if s.leave is not None:
        out += f" leave({s.leave.leaver}->{s.leave.heir}, handed={s.leave.handed})"
    boxes = [f"out{p}:{[(w, g) for w, g in box]}" for p, box in enumerate(s.out) if box]
    if boxes:
        out += " " + " ".join(boxes)
    return out + f" vacated={fmt_value(e.vacated)}"
