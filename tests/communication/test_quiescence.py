"""Quiescence: the cluster is quiet only while this process and every peer have been quiet, with nothing sent."""

from __future__ import annotations

from pytimely.communication.cluster.quiescence import Quiescence


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def quiet_pair() -> tuple[Quiescence, Quiescence, Clock]:
    clock = Clock()
    a, b = Quiescence(2, clock=clock), Quiescence(1, clock=clock)
    for w in range(2):
        a.quiet(w, True)
    b.quiet(0, True)
    a.heard(1, b.report())
    return a, b, clock


def test_quiet_everywhere_counts_from_the_latest_change() -> None:
    a, _, clock = quiet_pair()
    clock.now = 5.0
    assert a.quiet_for([1]) == 5.0


def test_one_busy_local_worker_is_not_quiet() -> None:
    a, _, clock = quiet_pair()
    a.quiet(1, False)
    clock.now = 5.0
    assert a.quiet_for([1]) == 0.0


def test_a_peer_not_heard_or_busy_is_not_quiet() -> None:
    a, b, clock = quiet_pair()
    clock.now = 5.0
    assert a.quiet_for([1, 2]) == 0.0
    b.quiet(0, False)
    a.heard(1, b.report())
    assert a.quiet_for([1]) == 0.0
    a.heard(1, b"")
    assert a.quiet_for([1]) == 0.0


def test_sending_or_receiving_restarts_the_clock() -> None:
    a, b, clock = quiet_pair()
    clock.now = 5.0
    a.sent(1)
    assert a.quiet_for([1]) == 0.0
    clock.now = 7.0
    assert a.quiet_for([1]) == 2.0
    a.active(1)
    assert a.quiet_for([1]) == 0.0
    a.heard(1, b.report())  # the same report again: the peer is quiet from now
    clock.now = 8.0
    assert a.quiet_for([1]) == 1.0


def test_a_peer_whose_activity_grew_is_quiet_only_from_its_new_report() -> None:
    a, b, clock = quiet_pair()
    clock.now = 5.0
    b.sent(3)
    a.heard(1, b.report())
    clock.now = 6.0
    assert a.quiet_for([1]) == 1.0
    a.heard(1, b.report())  # unchanged: the clock keeps running
    clock.now = 9.0
    assert a.quiet_for([1]) == 4.0
