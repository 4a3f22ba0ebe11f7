"""Hypothesis random walks over larger configurations, driven by the models' own ``successors``."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, settings
from tests.profiles import examples

from pytimely.verify.configs import make_model
from pytimely.verify.mutants import Mutant
from pytimely.verify.statemachine import state_machine

SETTINGS = settings(
    max_examples=examples(40),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _run(machine: type, s: settings = SETTINGS) -> None:
    machine.TestCase.settings = s  # type: ignore[attr-defined]
    machine.TestCase().runTest()  # type: ignore[attr-defined]


def test_exchange_three_workers_large_bounds() -> None:
    _run(state_machine(make_model("exchange", "chain3+1-large", workers=3)))


def test_exchange_diamond_large() -> None:
    _run(state_machine(make_model("exchange", "diamond-large", workers=3)))


def test_combined_three_workers_wcc() -> None:
    _run(state_machine(make_model("combined", "wcc", workers=3)))


def test_combined_three_workers_wcc_large() -> None:
    """All six locations of Fig. 2 and three iterations as pointstamps, wider bounds."""
    _run(state_machine(make_model("combined", "wcc-large", workers=3)), settings(SETTINGS, max_examples=examples(25)))


def test_combined_nested() -> None:
    _run(state_machine(make_model("combined", "nested", workers=3)), settings(SETTINGS, max_examples=examples(20)))


def test_propagation_nested() -> None:
    _run(state_machine(make_model("propagation", "nested")))


def test_state_machine_finds_a_mutant() -> None:
    machine = state_machine(make_model("exchange", "chain2", mutant=Mutant.MINT_BY_GLOB), ["Safe"])
    with pytest.raises(AssertionError, match="violation of Safe"):
        _run(
            machine,
            settings(
                SETTINGS,
                max_examples=examples(1000),
                stateful_step_count=10,
                phases=[Phase.generate],
                print_blob=False,
            ),
        )
