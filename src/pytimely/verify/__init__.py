"""Executable reference models of Timely Dataflow progress tracking, and a model checker.

The transition systems of seed ``000_306a8e6bd5c43d47.txt`` ("Verified Progress
Tracking for Timely Dataflow") transcribed as Python:

* :mod:`~pytimely.verify.clocks` — the clocks protocol (§3, Fig. 3);
* :mod:`~pytimely.verify.exchange` — the exchange protocol (§4, Fig. 4);
* :mod:`~pytimely.verify.propagation` — local propagation (§5, Fig. 6);
* :mod:`~pytimely.verify.combined` — the combined tracker (§6, Fig. 7);

and :mod:`~pytimely.verify.datagram`, the data-exchange mechanism of seed
``003_f357c44874202187.txt`` (Send / Transport / Receive with precedence), and
:mod:`~pytimely.verify.rescale`, the exchange protocol with workers that join
(the bootstrap protocol of seed ``002_640294948a1fdfd3.txt``) and leave.

:func:`check` explores a model breadth-first and checks its invariants;
:func:`~pytimely.verify.statemachine.state_machine` random-walks it with
Hypothesis; :mod:`~pytimely.verify.mutants` holds deliberately broken variants.
:func:`implied_frontier` is the reference for differential tests of the
production tracker. These models never import the production progress
tracker: they are independent references. Run ``python -m pytimely.verify --help``.
"""

from __future__ import annotations

from pytimely.verify.checker import CheckResult, Step, check
from pytimely.verify.configs import MODELS, make_model
from pytimely.verify.graph import Graph, could_result_in, implied_frontier
from pytimely.verify.model import Action, Model
from pytimely.verify.mutants import Mutant
from pytimely.verify.poset import Poset
from pytimely.verify.zmset import ZMSet, frontier, justified, supp, upright, vacant

__all__ = [
    "MODELS",
    "Action",
    "CheckResult",
    "Graph",
    "Model",
    "Mutant",
    "Poset",
    "Step",
    "ZMSet",
    "check",
    "could_result_in",
    "frontier",
    "implied_frontier",
    "justified",
    "make_model",
    "supp",
    "upright",
    "vacant",
]
