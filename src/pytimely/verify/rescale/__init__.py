"""Rescaling (seed ``002_640294948a1fdfd3.txt``): the exchange protocol of Fig. 4 with workers that join and leave.

Workers have stable ids ``0 .. workers-1``; the first ``members`` start in the
cluster, the others may join later, one membership change at a time. Each
worker numbers the progress batches it sends (``hist[w][k]`` is its batch
``k``: its retained history, and the ghost history the invariants compare
against); every link ``s → r`` is a FIFO of ``(k, batch)``; ``recvd[r][s]`` is
the next number ``r`` expects from ``s``. Capabilities, in-flight
capabilities, unsent updates, views and the ``Safe`` ghost are one exchange
configuration (:class:`pytimely.verify.exchange.State`, over every id), moved by
the exchange protocol's own ``perf_op`` and ``recv_cap``.

The model is laid out as the protocol is: :mod:`~pytimely.verify.rescale.state` (statuses, bootstraps, links,
the configuration), :mod:`~pytimely.verify.rescale.batches` (progress batches, aggregated senders),
:mod:`~pytimely.verify.rescale.join` (the bootstrap protocol), :mod:`~pytimely.verify.rescale.capabilities`
(capabilities handed over), :mod:`~pytimely.verify.rescale.leave`, :mod:`~pytimely.verify.rescale.invariants`
and :mod:`~pytimely.verify.rescale.model` (:class:`RescaleModel`); its public names are all here.

Every enabling condition reads the configuration's
:class:`~pytimely.verify.mutants.Mutant` switch, so the deliberately broken
variants run through this same code.
"""

from __future__ import annotations

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
from pytimely.verify.rescale.model import RescaleModel
from pytimely.verify.rescale.state import (
    JOINING,
    LEAVING,
    LEFT,
    MEMBER,
    OUT,
    Boot,
    Leave,
    RescaleConfig,
    State,
    initial_states,
)

__all__ = [
    "JOINING",
    "LEAVING",
    "LEFT",
    "MEMBER",
    "OUT",
    "Accounting",
    "Boot",
    "BootstrapView",
    "Leave",
    "Membership",
    "NoGap",
    "RescaleConfig",
    "RescaleModel",
    "Safe",
    "State",
    "agg_send",
    "agg_send_enabled",
    "announce",
    "announce_enabled",
    "bootstrap_done",
    "bootstrap_done_enabled",
    "bootstrap_state",
    "bootstrap_state_enabled",
    "disconnect",
    "disconnect_enabled",
    "glob_lemma",
    "hand_over",
    "hand_over_enabled",
    "initial_states",
    "join",
    "join_enabled",
    "leave",
    "leave_enabled",
    "missing_range",
    "range_reply",
    "range_reply_enabled",
    "range_request",
    "range_request_enabled",
    "recv_upd",
    "recv_upd_enabled",
    "send_upd",
    "send_upd_enabled",
]
