"""Ready-made configurations: small posets, the dataflows of the seed text, and their bounds.

* Posets for the clocks and exchange protocols: ``chain3+1`` (``p0 < p1 < p2`` plus
  an incomparable ``q``), ``chain2`` and ``diamond``.
* Dataflows for propagation and the combined protocol (seed
  ``000_306a8e6bd5c43d47.txt``): ``wcc`` — the weakly-connected-components
  dataflow of Fig. 2, ``nested`` — a loop with two feedback edges over
  ``Product(Product(epoch, i), j)``, and ``chain`` — three locations in a row.
  Loop counters are bounded with ``Increment(1, limit=...)`` so the timestamp
  universe is finite.
* Networks for the data-exchange model (seed ``003_f357c44874202187.txt``):
  ``far`` — two locations that are not neighbours, so everything between them
  crosses the ``Network``; ``mixed`` — three locations, ``0`` and ``1``
  neighbours, ``2`` far from both; ``-large`` variants for random walks.

:func:`make_model` builds a model from ``(model, config, workers, mutant)``;
this is what the command line and the tests use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytimely.order import Product
from pytimely.progress.timestamp import Increment, ProductSummary
from pytimely.verify.aggregate import AggregateConfig, AggregateModel
from pytimely.verify.clocks import ClocksConfig, ClocksModel
from pytimely.verify.combined import CombinedConfig, CombinedModel
from pytimely.verify.datagram import DatagramConfig, DatagramModel
from pytimely.verify.exchange import ExchangeConfig, ExchangeModel
from pytimely.verify.graph import Graph
from pytimely.verify.model import Model
from pytimely.verify.mutants import (
    AGGREGATE_MUTANTS,
    DATAGRAM_MUTANTS,
    EXCHANGE_MUTANTS,
    PROPAGATION_MUTANTS,
    RESCALE_MUTANTS,
    Mutant,
)
from pytimely.verify.poset import Poset
from pytimely.verify.propagation import PropagationConfig, PropagationModel, pts_options
from pytimely.verify.rescale import RescaleConfig, RescaleModel

__all__ = [
    "DEFAULT_CONFIG",
    "MODELS",
    "chain2",
    "chain3_plus",
    "chain_graph",
    "clocks_config",
    "combined_config",
    "config_names",
    "datagram_config",
    "diamond",
    "exchange_config",
    "make_model",
    "mutants_for",
    "nested_loop_graph",
    "propagation_config",
    "rescale_config",
    "wcc_graph",
]

MODELS = ("clocks", "exchange", "propagation", "combined", "datagram", "rescale", "aggregate")
"""The four protocols, in the order of the seed text (§3–§6), the data-exchange mechanism of seed 003,
rescaling (seed 002) and the exchange with progress aggregated per process (seed 002, footnote 4)."""

# --- posets -----------------------------------------------------------------------------------------------


def chain3_plus() -> Poset:
    """``p0 < p1 < p2`` and ``q``, incomparable to all three."""
    return Poset.from_covers(("p0", "p1", "p2", "q"), [("p0", "p1"), ("p1", "p2")], name="chain3+1")


def chain2() -> Poset:
    """``p0 < p1``."""
    return Poset.from_covers(("p0", "p1"), [("p0", "p1")], name="chain2")


def diamond() -> Poset:
    """``bot < a, b < top`` with ``a`` and ``b`` incomparable."""
    return Poset.from_covers(
        ("bot", "a", "b", "top"), [("bot", "a"), ("bot", "b"), ("a", "top"), ("b", "top")], name="diamond"
    )


POSETS: dict[str, Callable[[], Poset]] = {"chain3+1": chain3_plus, "chain2": chain2, "diamond": diamond}

# --- dataflow graphs --------------------------------------------------------------------------------------

ID2 = ProductSummary(Increment(0), Increment(0))


def wcc_graph(iterations: int = 1) -> Graph[str]:
    """Fig. 2: ``a.1 → b.2``, ``b.3 → c.1``, ``c.2 → b.1`` (channels), ``b.1, b.2 → b.3`` (identity)
    and ``c.1 → c.2`` adding ``(0, 1)``, over ``Product(epoch, iteration)``; the iteration stops at ``iterations``."""
    step = ProductSummary(Increment(0), Increment(1, limit=iterations))
    locs = ("a.1", "b.1", "b.2", "b.3", "c.1", "c.2")
    weights = {
        ("a.1", "b.2"): {ID2},
        ("b.3", "c.1"): {ID2},
        ("c.2", "b.1"): {ID2},
        ("b.1", "b.3"): {ID2},
        ("b.2", "b.3"): {ID2},
        ("c.1", "c.2"): {step},
    }
    return Graph(locs, weights, ID2)


def wcc_times(epochs: int = 1, iterations: int = 1) -> tuple[Product[int, int], ...]:
    """``Product(e, i)`` for ``e < epochs`` and ``i ≤ iterations``."""
    return tuple(Product(e, i) for e in range(epochs) for i in range(iterations + 1))


ID3 = ProductSummary(ProductSummary(Increment(0), Increment(0)), Increment(0))


def nested_loop_graph(outer: int = 1, inner: int = 1) -> Graph[str]:
    """A loop in a loop over ``Product(Product(epoch, i), j)``: ``in → x.in → x.out``; the inner feedback
    ``x.out → fi → x.in`` adds 1 to ``j`` (up to ``inner``), the outer ``x.out → fo → x.in`` adds 1 to ``i``."""
    inner_step = ProductSummary(ProductSummary(Increment(0), Increment(0)), Increment(1, limit=inner))
    outer_step = ProductSummary(ProductSummary(Increment(0), Increment(1, limit=outer)), Increment(0))
    locs = ("in", "x.in", "x.out", "fi", "fo")
    weights = {
        ("in", "x.in"): {ID3},
        ("x.in", "x.out"): {ID3},
        ("x.out", "fi"): {ID3},
        ("fi", "x.in"): {inner_step},
        ("x.out", "fo"): {ID3},
        ("fo", "x.in"): {outer_step},
    }
    return Graph(locs, weights, ID3)


def nested_times(outer: int = 1, inner: int = 1) -> tuple[Product[Product[int, int], int], ...]:
    """``Product(Product(0, i), j)`` for ``i ≤ outer`` and ``j ≤ inner``."""
    return tuple(Product(Product(0, i), j) for i in range(outer + 1) for j in range(inner + 1))


def chain_graph() -> Graph[str]:
    """``a → b → c`` on integer timestamps; ``b → c`` adds 1."""
    return Graph(("a", "b", "c"), {("a", "b"): {Increment(0)}, ("b", "c"): {Increment(1)}}, Increment(0))


# --- model configurations ---------------------------------------------------------------------------------


def clocks_config(name: str = "chain3+1", workers: int = 2) -> ClocksConfig:
    """The clocks protocol over one of the small posets."""
    if name not in POSETS:
        raise ValueError(f"unknown clocks configuration {name!r}; known: {sorted(POSETS)}")
    return ClocksConfig(POSETS[name](), workers=workers, depth=10, name=name)


def exchange_config(name: str = "chain3+1", workers: int = 2, mutant: Mutant | None = None) -> ExchangeConfig:
    """The exchange protocol over one of the small posets (``-large``: wider bounds for random testing)."""
    base = name.removesuffix("-large")
    if base not in POSETS:
        raise ValueError(f"unknown exchange configuration {name!r}; known: {sorted(POSETS)}")
    if name.endswith("-large"):
        return ExchangeConfig(
            POSETS[base](),
            workers=workers,
            init_caps=2,
            max_caps=3,
            max_data=3,
            max_neg=2,
            max_data_delta=1,
            max_self=1,
            queue_bound=4,
            mutant=mutant,
            depth=3,
            name=name,
        )
    return ExchangeConfig(
        POSETS[base](),
        workers=workers,
        init_caps=1,
        init_total=1,
        max_caps=2,
        max_data=1,
        queue_bound=2,
        mutant=mutant,
        depth=6,
        name=name,
    )


def propagation_config(name: str = "wcc", mutant: Mutant | None = None) -> PropagationConfig:
    """Local propagation on one of the dataflows, starting from small sets of pointstamps."""
    if name == "wcc":
        g = wcc_graph(1)
        times: tuple[Any, ...] = wcc_times(1, 1)
        init = pts_options([("a.1", Product(0, 0)), ("b.3", Product(0, 0)), ("b.1", Product(0, 1))], 2)
        return PropagationConfig(g, times, init, mutant=mutant, dropped_edge=("c.1", "c.2"), depth=11, name=name)
    if name == "nested":
        g = nested_loop_graph(1, 1)
        times = nested_times(1, 1)
        z = Product(Product(0, 0), 0)
        init = pts_options([("in", z), ("x.out", z), ("fi", Product(Product(0, 0), 1))], 2)
        return PropagationConfig(g, times, init, mutant=mutant, dropped_edge=("fi", "x.in"), depth=7, name=name)
    if name == "chain":
        g = chain_graph()
        init = pts_options([("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 1)], 2)
        return PropagationConfig(
            g, (0, 1, 2), init, mutant=mutant, min_pts=-1, dropped_edge=("b", "c"), depth=9, name=name
        )
    raise ValueError(f"unknown propagation configuration {name!r}; known: ['chain', 'nested', 'wcc']")


def _combined_chain(workers: int, mutant: Mutant | None) -> CombinedConfig:
    pts = (("a", 0), ("b", 0), ("b", 1), ("c", 1))
    return CombinedConfig(
        chain_graph(),
        (0, 1, 2),
        pts,
        workers=workers,
        init_total=1,
        mutant=mutant,
        dropped_edge=("b", "c"),
        depth=6,
        name="chain",
    )


def _combined_wcc(workers: int, mutant: Mutant | None) -> CombinedConfig:
    z, one = Product(0, 0), Product(0, 1)
    pts = (("a.1", z), ("b.2", z), ("b.3", z), ("b.1", one))
    return CombinedConfig(
        wcc_graph(1),
        wcc_times(1, 1),
        pts,
        workers=workers,
        init_total=1,
        mutant=mutant,
        dropped_edge=("c.1", "c.2"),
        depth=5,
        name="wcc",
    )


def _combined_nested(workers: int, mutant: Mutant | None) -> CombinedConfig:
    z = Product(Product(0, 0), 0)
    pts = (("in", z), ("x.in", z), ("x.out", z), ("x.in", Product(Product(0, 0), 1)))
    return CombinedConfig(
        nested_loop_graph(1, 1),
        nested_times(1, 1),
        pts,
        workers=workers,
        init_total=1,
        mutant=mutant,
        dropped_edge=("fi", "x.in"),
        depth=5,
        name="nested",
    )


def _combined_wcc_large(workers: int, mutant: Mutant | None) -> CombinedConfig:
    g = wcc_graph(2)
    times = wcc_times(1, 2)
    pts = tuple((l, t) for l in g.locations for t in times)
    return CombinedConfig(
        g,
        times,
        pts,
        workers=workers,
        init_caps=1,
        init_total=2,
        max_caps=2,
        max_data=2,
        queue_bound=3,
        mutant=mutant,
        dropped_edge=("c.1", "c.2"),
        depth=3,
        name="wcc-large",
    )


def _combined_pair(workers: int, mutant: Mutant | None) -> CombinedConfig:
    g = Graph(("a", "b"), {("a", "b"): {Increment(0)}}, Increment(0))
    pts = (("a", 0), ("b", 0))
    return CombinedConfig(
        g, (0,), pts, workers=workers, init_total=1, mutant=mutant, dropped_edge=("a", "b"), depth=12, name="pair"
    )


_COMBINED: dict[str, Callable[[int, Mutant | None], CombinedConfig]] = {
    "chain": _combined_chain,
    "wcc": _combined_wcc,
    "nested": _combined_nested,
    "wcc-large": _combined_wcc_large,
    "pair": _combined_pair,
}


def combined_config(name: str = "chain", workers: int = 2, mutant: Mutant | None = None) -> CombinedConfig:
    """The combined protocol on one of the dataflows with a small pointstamp universe."""
    if name not in _COMBINED:
        raise ValueError(f"unknown combined configuration {name!r}; known: {sorted(_COMBINED)}")
    return _COMBINED[name](workers, mutant)


def datagram_config(name: str = "far", locations: int | None = None, mutant: Mutant | None = None) -> DatagramConfig:
    """The data-exchange mechanism on a small network (``locations`` overrides the configuration's count)."""
    if name in ("far", "far-large"):
        n = 2 if locations is None else locations
        neighbors: frozenset[tuple[int, int]] = frozenset()
    elif name in ("mixed", "mixed-large"):
        n = 3 if locations is None else locations
        neighbors = frozenset({(0, 1)}) if n > 1 else frozenset()
    else:
        known = ["far", "far-large", "mixed", "mixed-large"]
        raise ValueError(f"unknown datagram configuration {name!r}; known: {known}")
    if name == "far":
        # two messages in all, to any receivers: every reachable state within 20 steps (complete)
        return DatagramConfig(n, neighbors=neighbors, max_messages=2, max_total=2, mutant=mutant, depth=20, name=name)
    if name == "mixed":
        return DatagramConfig(
            n, neighbors=neighbors, max_messages=1, max_receivers=1, mutant=mutant, depth=20, name=name
        )
    return DatagramConfig(
        n, neighbors=neighbors, max_messages=4 if n == 2 else 3, max_faults=2, mutant=mutant, depth=8, name=name
    )


_RESCALE_SETTINGS: dict[str, tuple[Callable[[], Poset], int, Callable[[int], dict[str, Any]]]] = {
    # name: (poset, initial members by default, the other settings given the members)
    "join": (chain2, 2, lambda m: {"joiners": 1, "max_caps": 1, "depth": 9}),
    "leave": (chain2, 3, lambda m: {"joiners": 0, "max_leaves": 1, "max_caps": 1, "depth": 8}),
    "churn": (chain2, 2, lambda m: {"joiners": 1, "max_leaves": 1, "max_caps": 1, "depth": 8}),
    "joins": (chain2, 2, lambda m: {"joiners": 2, "max_boots": 2, "max_caps": 1, "depth": 8}),
    "churn-large": (
        chain3_plus,
        3,
        lambda m: {
            "joiners": 2,
            "max_boots": 2,
            "max_leaves": 2,
            "init_caps": 1,
            "init_total": 2,
            "max_caps": 2,
            "max_data": 2,
            "max_op_size": 2,
            "max_batches": 4,
            "queue_bound": 3,
            "depth": 2,
        },
    ),
    # Two processes, of workers 0, 1 and of worker 2; worker 3 joins in a process of its own.
    "join-aggregated": (chain2, 3, lambda m: {"joiners": 1, "max_caps": 1, "processes": _processes(m, 1), "depth": 9}),
    # Aggregated senders with one worker a process (0, 1), worker 2 joining: small enough to break Safe.
    "join-apart": (chain2, 2, lambda m: {"joiners": 1, "max_caps": 1, "processes": tuple(range(m + 1)), "depth": 10}),
    "leave-aggregated": (
        chain2,
        3,
        lambda m: {"joiners": 0, "max_leaves": 1, "max_caps": 1, "processes": _processes(m, 0), "depth": 8},
    ),
}


def rescale_config(name: str = "join", members: int | None = None, mutant: Mutant | None = None) -> RescaleConfig:
    """Rescaling over ``chain2`` (``members`` overrides the number of initial members)."""
    if name not in _RESCALE_SETTINGS:
        raise ValueError(f"unknown rescale configuration {name!r}; known: {sorted(_RESCALE_SETTINGS)}")
    poset, default_members, settings = _RESCALE_SETTINGS[name]
    m = default_members if members is None else members
    return RescaleConfig(poset(), members=m, mutant=mutant, name=name, **settings(m))


def _processes(members: int, joiners: int) -> tuple[int, ...]:
    """Initial members two to a process (the last alone if their number is odd), each joiner in a process of its
    own."""
    initial = tuple(w // 2 for w in range(members))
    first = (members + 1) // 2
    return initial + tuple(first + j for j in range(joiners))


def aggregate_config(name: str = "pair", mutant: Mutant | None = None) -> AggregateConfig:
    """The aggregated exchange: ``pair`` (two processes of one worker), ``shared`` (workers 0, 1 in process 0,
    worker 2 in process 1), over the ``chain3+1`` poset with the exchange model's small bounds."""
    shapes = {"pair": (0, 1), "shared": (0, 0, 1)}
    if name not in shapes:
        raise ValueError(f"unknown aggregate configuration {name!r}; known: {sorted(shapes)}")
    processes = shapes[name]
    exchange = exchange_config("chain3+1", workers=len(processes))
    return AggregateConfig(exchange, processes, mutant=mutant, depth=5 if name == "pair" else 4, name=name)


DEFAULT_CONFIG = {
    "clocks": "chain3+1",
    "exchange": "chain3+1",
    "propagation": "wcc",
    "combined": "chain",
    "datagram": "far",
    "rescale": "join",
    "aggregate": "pair",
}
"""The configuration each model uses when none is named."""

_CONFIG_NAMES = {
    "clocks": ["chain3+1", "chain2", "diamond"],
    "exchange": ["chain3+1", "chain2", "diamond", "chain3+1-large", "diamond-large"],
    "propagation": ["wcc", "nested", "chain"],
    "combined": ["chain", "wcc", "nested", "pair", "wcc-large"],
    "datagram": ["far", "mixed", "far-large", "mixed-large"],
    "rescale": [
        "join",
        "leave",
        "churn",
        "joins",
        "churn-large",
        "join-aggregated",
        "join-apart",
        "leave-aggregated",
    ],
    "aggregate": ["pair", "shared"],
}


def config_names(model: str) -> list[str]:
    """The configuration names ``make_model`` accepts for ``model``."""
    return list(_CONFIG_NAMES[model])


def mutants_for(model: str) -> list[Mutant]:
    """The mutants that apply to ``model``."""
    if model == "exchange":
        return [m for m in Mutant if m in EXCHANGE_MUTANTS]
    if model == "propagation":
        return [m for m in Mutant if m in PROPAGATION_MUTANTS]
    if model == "combined":
        return [m for m in Mutant if m in EXCHANGE_MUTANTS | PROPAGATION_MUTANTS]
    if model == "datagram":
        return [m for m in Mutant if m in DATAGRAM_MUTANTS]
    if model == "rescale":
        return [m for m in Mutant if m in RESCALE_MUTANTS]
    if model == "aggregate":
        return [m for m in Mutant if m in AGGREGATE_MUTANTS]
    return []


def make_model(
    model: str, config: str | None = None, workers: int | None = None, mutant: Mutant | None = None
) -> Model[Any]:
    """Build ``model`` (one of :data:`MODELS`) on configuration ``config`` (default :data:`DEFAULT_CONFIG`)."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; known: {list(MODELS)}")
    name = config or DEFAULT_CONFIG[model]
    if mutant is not None and mutant not in mutants_for(model):
        raise ValueError(f"mutant {mutant} does not apply to {model}")
    if model == "propagation" and workers is not None:
        raise ValueError("local propagation runs on a single worker; --workers does not apply")
    if workers is not None and not 1 <= workers <= 4:
        raise ValueError("workers must be between 1 and 4")
    if model == "datagram":
        return DatagramModel(datagram_config(name, workers, mutant))
    if model == "rescale":
        return RescaleModel(rescale_config(name, workers, mutant))
    if model == "aggregate":
        if workers is not None:
            raise ValueError("an aggregate configuration names its workers and processes; --workers does not apply")
        return AggregateModel(aggregate_config(name, mutant))
    w = 2 if workers is None else workers
    if model == "clocks":
        return ClocksModel(clocks_config(name, w))
    if model == "exchange":
        return ExchangeModel(exchange_config(name, w, mutant))
    if model == "propagation":
        return PropagationModel(propagation_config(name, mutant))
    return CombinedModel(combined_config(name, w, mutant))


def default_depth(m: Model[Any]) -> int:
    """The depth configured for a model built by :func:`make_model`."""
    depth: int = m.cfg.depth  # type: ignore[attr-defined]
    return depth
