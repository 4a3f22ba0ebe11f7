"""Pausing the cyclic collector: pauses of several threads nest, and a program's own choice is kept."""

from __future__ import annotations

import gc
import threading

from pytimely.collector import paused


def test_pauses_of_two_threads_nest_and_the_collector_comes_back_once_both_end() -> None:
    assert gc.isenabled()
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    with paused():
        thread.start()
        assert inside.wait(10)
        assert not gc.isenabled()
    assert not gc.isenabled(), "the collector came back while another thread's pause was still on"
    release.set()
    thread.join(10)
    assert gc.isenabled()


def test_a_collector_the_program_turned_off_stays_off() -> None:
    gc.disable()
    try:
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
