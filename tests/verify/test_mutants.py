"""Every mutant is caught, with a shortest counterexample whose last state (or step) breaks the invariant."""

from __future__ import annotations

import pytest

from pytimely.verify.checker import check
from pytimely.verify.configs import make_model
from pytimely.verify.mutants import Mutant, MutantCase, mutant_cases, parse_mutant


def _case_id(case: MutantCase) -> str:
    return f"{case.mutant.value}-{case.model}-{case.invariant}"


@pytest.mark.parametrize("case", mutant_cases(), ids=_case_id)
def test_mutant_is_caught_minimally(case: MutantCase) -> None:
    model = make_model(case.model, case.config, mutant=case.mutant)
    only = list(case.only) or None
    r = check(model, case.depth, invariants=only)
    assert r.violation == case.invariant, r.violation
    assert len(r.trace) - 1 == case.depth
    assert r.trace[0].action is None
    assert all(s.action is not None for s in r.trace[1:])
    # the trace is a real path of the model
    for prev, nxt in zip(r.trace, r.trace[1:], strict=False):
        assert (nxt.action, nxt.state) in list(model.successors(prev.state))
    # the last state (or, for a transition invariant, the last step) violates the named invariant
    invs = {i.name: i for i in model.invariants()}
    if case.invariant in invs:
        assert not invs[case.invariant].holds(r.trace[-1].state)
        assert all(invs[case.invariant].holds(s.state) for s in r.trace[:-1])
    else:
        (tinv,) = [t for t in model.transition_invariants() if t.name == case.invariant]
        last, prev = r.trace[-1], r.trace[-2]
        assert last.action is not None
        assert not tinv.holds(prev.state, last.action, last.state)
    # minimal: nothing is found one step shallower (the check one step shallower is a prefix of this search,
    # which found nothing before its last layer: see test_passed_depth_is_what_a_shallower_check_finds)
    assert r.passed_depth == case.depth - 1


@pytest.mark.parametrize(
    "case",
    [c for c in mutant_cases() if c.model != "rescale" and c.depth <= 3],
    ids=_case_id,
)
def test_passed_depth_is_what_a_shallower_check_finds(case: MutantCase) -> None:
    """A run's ``passed_depth`` agrees with separate runs one step shallower and at that depth."""
    model = make_model(case.model, case.config, mutant=case.mutant)
    only = list(case.only) or None
    r = check(model, case.depth, invariants=only)
    assert r.violation is not None
    if r.passed_depth >= 0:
        assert check(model, r.passed_depth, invariants=only).ok
    assert check(model, r.passed_depth + 1, invariants=only).violation == r.violation


def test_passed_depth_of_a_clean_or_a_bounded_run() -> None:
    """A run that finds nothing passes its depth; one stopped at ``max_states`` passes only its checked layers."""
    model = make_model("exchange")
    assert check(model, 3).passed_depth == 3
    r = check(model, 3, max_states=10)
    assert r.ok and r.passed_depth == len(r.levels) - 2


def test_every_mutant_has_a_case() -> None:
    assert {c.mutant for c in mutant_cases()} == set(Mutant)
    assert all(parse_mutant(m.value) is m for m in Mutant)
    with pytest.raises(ValueError):
        parse_mutant("no-such-mutant")


def test_nonminimal_propagation_keeps_safe() -> None:
    """Safe (guarded by work_vacant), the implied_frontier lemma and the auxiliary invariants do not
    depend on the order of propagation: the propagate-nonminimal mutant keeps all of them."""
    model = make_model("propagation", "chain", mutant=Mutant.PROPAGATE_NONMINIMAL)
    r = check(
        model, 6, invariants=["Safe", "implied_frontier", "InvImpNonneg", "InvImpsWorkSum", "PropagateTerminates"]
    )
    assert r.ok and r.states > 1000


def test_mutants_apply_only_where_they_belong() -> None:
    with pytest.raises(ValueError):
        make_model("exchange", mutant=Mutant.DROP_SUMMARY)
    with pytest.raises(ValueError):
        make_model("propagation", mutant=Mutant.MINT_EQUAL)
    with pytest.raises(ValueError):
        make_model("clocks", mutant=Mutant.SEND_UNJUSTIFIED)
