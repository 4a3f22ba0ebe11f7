"""A seeded fuzz of event-stream files and capture sockets: truncations, bit flips, splices from other streams,
reordered, dropped and repeated events, foreign headers, unsealed files for a reader with a secret. Every damaged
stream is refused with a typed error, every intact one replays exactly (``tests/dataflow/event_fuzz.py``; run it
as a module for a longer fuzz)."""

from __future__ import annotations

from tests.dataflow.event_fuzz import fuzz_files, fuzz_sockets


def test_damaged_event_files_are_refused_and_intact_ones_replay_exactly() -> None:
    counts = fuzz_files(3000, seed=1)
    assert sum(counts.values()) == 3000
    # Each way of failing was met, and so were intact files (the fuzz checked their events).
    assert counts["CorruptEventStreamError"] > 1000 and counts["TruncatedEventStreamError"] > 100
    assert counts["EventStreamAuthError"] > 100 and counts["intact"] > 100


def test_damaged_capture_sockets_are_refused_and_intact_ones_replay_exactly() -> None:
    counts = fuzz_sockets(300, seed=2)
    assert sum(counts.values()) == 300
    assert counts["CorruptEventStreamError"] > 100 and counts["TruncatedEventStreamError"] > 10
    assert counts["intact"] > 20
