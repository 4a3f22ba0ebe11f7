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

The package: :mod:`~pytimely.membership.plan` (:class:`RescalePlan`, :func:`balanced_moves`),
:mod:`~pytimely.membership.control` (:func:`request` and the handles a worker polls, :class:`Launcher`) and
:mod:`~pytimely.membership.endpoint` (:class:`ControlEndpoint`, the launcher's side). The cluster layer's own
record of a join or leave is :class:`pytimely.communication.cluster.Membership`.
"""

from __future__ import annotations

from pytimely.membership.control import OPERATIONS, JoinRequest, Launcher, Pending, StatusWait, request
from pytimely.membership.endpoint import ControlEndpoint
from pytimely.membership.plan import RescalePlan, balanced_moves

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
