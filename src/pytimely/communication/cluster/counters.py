"""The counters a cluster keeps for tests and benchmarks: queue peaks, waits, frames and bytes, shared-memory rings."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pytimely.communication.cluster.allocator import ClusterAllocator
from pytimely.communication.cluster.link import Link

__all__ = ["cluster_stats"]


def cluster_stats(
    max_unconsumed: int, allocators: Iterable[ClusterAllocator], links: Mapping[int, Link]
) -> dict[str, Any]:
    """Queue peaks, waits, frames and bytes sent per peer (``links``) and per precedence (over ``allocators``)."""
    by_precedence: dict[str, dict[str, int]] = {}
    for allocator in allocators:
        for precedence, (frames, nbytes) in allocator.sent.items():
            tally = by_precedence.setdefault(precedence.name.lower(), {"frames": 0, "bytes": 0})
            tally["frames"] += frames
            tally["bytes"] += nbytes
    return {
        "max_unconsumed": max_unconsumed,
        "by_precedence": by_precedence,
        "links": {
            peer: {
                "max_queued": link.max_queued,
                "waits": link.waits,
                "frames_sent": link.frames_sent,
                "bytes_sent": link.bytes_sent,
                **_ring_stats(link),
            }
            for peer, link in links.items()
        },
    }


def _ring_stats(link: Link) -> dict[str, Any]:
    """``link``'s shared-memory ring: ``ring`` is ``ready`` once the peer mapped it, ``offered`` until it answers,
    ``none`` without one; then payloads placed (``ring_frames``), read positions learned from the peer's control
    block and read positions of the peer's ring published in this one's; and of the peer's ring, the payloads lent
    from it (decoded where they lie: ``ring_lent``; of those, copied out after all while they waited for their
    worker, as half the ring was held: ``ring_unlent``) and copied out of it (``ring_copied``: the reader's
    ``lend_share`` of the ring was held)."""
    reader = link.decoder.ring
    taken = {
        "ring_lent": 0 if reader is None else reader.lent,
        "ring_copied": 0 if reader is None else reader.copied,
        "ring_unlent": link.unlent,
    }
    ring = link.ring  # read once: the receiving thread may drop the ring meanwhile
    if ring is None:
        return {"ring": "none", "ring_frames": 0, "ring_learned": 0, "ring_published": 0, **taken}
    return {
        "ring": "ready" if ring.ready else "offered",
        "ring_frames": ring.placed,
        "ring_learned": ring.learned,
        "ring_published": ring.published,
        **taken,
    }
