"""Workers in several processes connected over TCP: links, mailboxes, flow control, failure detection.

One :class:`Cluster` per process holds a *link* to every other process: one
authenticated TCP connection (see :mod:`~pytimely.communication.handshake`)
with a sending and a receiving thread. Workers of the same process exchange
messages by reference, as in :mod:`~pytimely.communication.local`; messages for
another process are pickled when the worker releases them at the end of its
step and travel as checked frames (:mod:`~pytimely.communication.frame`).

Transport takes the highest precedence first (control > progress > data);
within a channel and sender, order is kept. What can go wrong stops the whole
computation with a :class:`~pytimely.errors.CommunicationError` naming the
peer, in every process:

* a malformed frame (checksum, length, sequence gap, duplicate, unknown
  channel) is a :class:`~pytimely.errors.FrameError`;
* a peer that closes its connection before saying it is done (it died or was
  killed) is noticed at once; one silent for ``timeout`` seconds (it is
  stalled; idle links carry a heartbeat every ``heartbeat`` seconds) is noticed
  then. Either is a :class:`~pytimely.errors.PeerFailedError`;
* a process that fails tells every peer why (an ``ABORT`` control frame).

Flow control: a worker waits before queueing more data frames for a peer while
``send_window`` bytes are queued for it, and a process stops reading from its
peers while ``recv_window`` bytes it received are not yet taken by its workers,
so a slow receiver slows its senders down through TCP instead of growing
memory. A process whose own worker waits to send keeps reading regardless, so
two processes sending to each other cannot deadlock.

The package is laid out like timely's communication crate:
:mod:`~.networking` (listening, connecting, the handshake), :mod:`~.link` (a
link's send and receive loops), :mod:`~.queues` (typed outgoing frames by
precedence), :mod:`~.router` (mailboxes and push ends), :mod:`~.allocator`
(a worker's allocator), :mod:`~.membership` (join and leave events) and
:mod:`~.process` (this process's part, tying them together).
"""

from pytimely.communication.cluster.allocator import ClusterAllocator
from pytimely.communication.cluster.membership import Membership
from pytimely.communication.cluster.process import Cluster
from pytimely.communication.cluster.queues import OutgoingFrame, SendQueues

__all__ = ["Cluster", "ClusterAllocator", "Membership", "OutgoingFrame", "SendQueues"]
