"""Hypothesis stateful testing over a model's ``successors`` function.

:func:`state_machine` turns any model into a
:class:`hypothesis.stateful.RuleBasedStateMachine`: it starts in one of the
model's initial states, has a single rule that draws one of the enabled
successors (by index, so failing runs shrink towards the first-listed
actions), checks the transition invariants on the step taken, and checks every
state invariant after each step. Random walks reach much deeper than the
exhaustive search, so it suits larger configurations (three workers, wider
bounds). This module needs Hypothesis (the ``test`` extra); nothing else in
``pytimely.verify`` does.
"""

from __future__ import annotations

import re
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from pytimely.verify.checker import select_invariants
from pytimely.verify.model import Action, Model

__all__ = ["state_machine"]


def state_machine(model: Model[Any], invariants: list[str] | None = None) -> type[RuleBasedStateMachine]:
    """A state machine class that random-walks ``model`` and checks its (selected) invariants."""
    initial = list(model.initial_states())
    if not initial:
        raise ValueError(f"{model.name} has no initial state")
    invs, tinvs = select_invariants(model, invariants)

    def trace(self: Any) -> str:
        # The walk's states are formatted only for a failure's report (formatting each step cost as much as
        # working out its successors).
        return "\n".join(f"{act}: {model.format_state(state)}" for act, state in self.steps)

    def __init__(self: Any) -> None:
        RuleBasedStateMachine.__init__(self)
        self.state = None
        self.steps = []

    def start(self: Any, data: st.DataObject) -> None:
        self.state = data.draw(st.sampled_from(initial), label="initial state")
        self.steps = [("init", self.state)]

    def step(self: Any, data: st.DataObject) -> None:
        options: list[tuple[Action, Any]] = list(model.successors(self.state))
        if not options:
            return  # no action is enabled: only stutter steps remain
        i = data.draw(st.integers(0, len(options) - 1), label="action")
        act, nxt = options[i]
        self.steps.append((act, nxt))
        for tinv in tinvs:
            assert tinv.holds(self.state, act, nxt), f"violation of {tinv.name}\n" + trace(self)
        self.state = nxt

    ns: dict[str, Any] = {
        "__init__": __init__,
        "start": initialize(data=st.data())(start),
        "step": rule(data=st.data())(step),
    }
    for inv in invs:

        def check(self: Any, inv: Any = inv) -> None:
            if self.state is not None:
                assert inv.holds(self.state), f"violation of {inv.name}\n" + trace(self)

        ns["inv_" + re.sub(r"\W", "_", inv.name)] = invariant()(check)
    return type(f"{model.name.capitalize()}Machine", (RuleBasedStateMachine,), ns)
