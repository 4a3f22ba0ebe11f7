"""Progress-tracking throughput: the incremental tracker against recomputing frontiers from scratch.

Both sides see the same stream of pointstamp changes on the same graph in the
same run. The baseline recomputes ``implied_frontier`` (seed
``000_306a8e6bd5c43d47.txt`` §5) at every location after every batch, from
path summaries computed once up front. Reported: updates per second for each
and their ratio. Also reports the model checker's states per second.

    python bench/bench_progress.py [--chain 100] [--steps 2000] [--quick] [--json]

Prints a Markdown table per part; ``--json`` prints one JSON object per row instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from harness import Column, Table, parser, report
from pytimely.order import Product
from pytimely.progress import Antichain, Builder, Increment, ProductSummary, Source, Target
from pytimely.progress.frontier import frontier_of

Update = tuple[Any, Any, int]


Workload = tuple[Builder[Any, Any], Callable[[int], Iterator[list[Update]]]]


def chain_graph(length: int, traffic: bool = False) -> Workload:
    """An input feeding ``length`` operators in a row.

    Without ``traffic`` the input's capability advances every batch (every
    frontier downstream moves). With ``traffic`` each batch sends and consumes
    messages at a tenth of the operators at the current time, and the input
    advances every tenth batch: most updates move no frontier, as in a running job.
    """
    b: Builder[int, Any] = Builder()
    nodes = [b.add_node(0, 1, name="input")]
    for i in range(length):
        nodes.append(b.add_node(1, 1, name=f"op{i}"))
        b.add_edge(Source(nodes[-2], 0), Target(nodes[-1], 0))
    head = Source(nodes[0], 0)
    mid = Target(nodes[length // 2], 0)

    def batches(steps: int) -> Iterator[list[Update]]:
        yield [(head, 0, 1)]
        if traffic:
            stride = max(length // 10, 1)
            t = 0
            for step in range(steps):
                first = 1 + step % stride
                targets = [Target(n, 0) for n in nodes[first::stride]]
                yield [(tgt, t, 1) for tgt in targets]
                yield [(tgt, t, -1) for tgt in targets]
                if step % 10 == 9:
                    yield [(head, t, -1), (head, t + 1, 1)]
                    t += 1
            return
        for t in range(steps):
            # A message in flight halfway down at t, and the input moving from t to t + 1.
            yield [(mid, t, 1), (head, t, -1), (head, t + 1, 1)]
            yield [(mid, t, -1)]

    return b, batches


def loop_graph() -> Workload:
    """input -> body <-> feedback (+1 iteration) -> output, with a record going round the loop."""
    b: Builder[Any, Any] = Builder(ProductSummary(Increment(0), Increment(0)))
    inp = b.add_node(0, 1, name="input")
    body = b.add_node(2, 1, name="body")
    fb = b.add_node(1, 1, {(0, 0): ProductSummary(Increment(0), Increment(1))}, name="feedback")
    out = b.add_node(1, 0, name="output")
    b.add_edge(Source(inp, 0), Target(body, 0))
    b.add_edge(Source(body, 0), Target(fb, 0))
    b.add_edge(Source(fb, 0), Target(body, 1))
    b.add_edge(Source(body, 0), Target(out, 0))
    head, back = Source(inp, 0), Target(fb, 0)

    def batches(steps: int) -> Iterator[list[Update]]:
        yield [(head, Product(0, 0), 1)]
        epoch = 0
        for i in range(steps):
            # One record per epoch circulates 10 times; then the input moves to the next epoch.
            it = i % 10
            updates: list[Update] = [(back, Product(epoch, it), 1)]
            if it:
                updates.append((back, Product(epoch, it - 1), -1))
            if it == 9:
                updates += [(back, Product(epoch, it), -1), (head, Product(epoch, 0), -1)]
                epoch += 1
                updates.append((head, Product(epoch, 0), 1))
            yield updates

    return b, batches


def run_tracker(builder: Builder[Any, Any], batches: Iterator[list[Update]]) -> tuple[int, float, dict[Any, Any]]:
    """Feed every batch to a fresh tracker; return (updates, seconds, final frontiers)."""
    tracker = builder.build()
    n = 0
    start = time.perf_counter()
    for batch in batches:
        tracker.update_batch(batch)
        tracker.propagate_all()
        n += len(batch)
    seconds = time.perf_counter() - start
    return n, seconds, {loc: tracker.frontier(loc) for loc in tracker.locations()}


def run_from_scratch(builder: Builder[Any, Any], batches: Iterator[list[Update]]) -> tuple[int, float, dict[Any, Any]]:
    """Recompute every location's implied frontier after each batch."""
    summaries = builder.path_summaries()
    locations = builder.locations()
    into: dict[Any, list[tuple[Any, Any]]] = {loc: [] for loc in locations}
    for (src, dst), chain in summaries.items():
        into[dst].extend((src, s) for s in chain)
    pts: dict[Any, dict[Any, int]] = {loc: {} for loc in locations}
    frontiers: dict[Any, list[Any]] = {}
    n = 0
    start = time.perf_counter()
    for batch in batches:
        for loc, t, d in batch:
            counts = pts[loc]
            counts[t] = counts.get(t, 0) + d
            if not counts[t]:
                del counts[t]
        for loc in locations:
            reached = []
            for src, s in into[loc]:
                for t, c in pts[src].items():
                    if c > 0:
                        r = s.results_in(t)
                        if r is not None:
                            reached.append(r)
            frontiers[loc] = frontier_of(reached)
        n += len(batch)
    seconds = time.perf_counter() - start
    return n, seconds, {loc: Antichain(f) for loc, f in frontiers.items()}


def compare(name: str, builder: Builder[Any, Any], batches: Callable[[int], Iterator[list[Update]]],
            steps: int, baseline_steps: int) -> dict[str, Any]:
    """Run both sides; check they agree on a common prefix; report rates and the ratio."""
    n_fast, s_fast, _ = run_tracker(builder, batches(steps))
    n_base, s_base, f_base = run_from_scratch(builder, batches(baseline_steps))
    _, _, f_check = run_tracker(builder, batches(baseline_steps))
    if f_check != f_base:
        raise SystemExit(f"{name}: tracker and from-scratch frontiers disagree")
    fast, base = n_fast / s_fast, n_base / s_base
    return {"workload": name, "tracker_updates_per_s": round(fast), "from_scratch_updates_per_s": round(base),
            "ratio": round(fast / base, 1)}


def verifier_rate(quick: bool) -> list[dict[str, Any]]:
    """States per second of the model checker on each model's default configuration and depth."""
    from pytimely.verify import MODELS, check, make_model
    from pytimely.verify.configs import default_depth

    out = []
    for name in MODELS:
        model = make_model(name)
        depth = min(default_depth(model), 4) if quick else default_depth(model)
        result = check(model, depth)
        out.append({"model": name, "depth": depth, "states": result.states, "seconds": round(result.seconds, 2),
                    "states_per_s": round(result.states_per_second), "violation": result.violation})
    return out


TRACKING = [
    Column("workload", "workload"),
    Column("tracker (updates/s)", "tracker_updates_per_s", "{:,}"),
    Column("from scratch (updates/s)", "from_scratch_updates_per_s", "{:,}"),
    Column("ratio", "ratio", "{}x"),
]
CHECKING = [
    Column("model", "model"),
    Column("depth", "depth"),
    Column("states", "states", "{:,}"),
    Column("seconds", "seconds"),
    Column("states/s", "states_per_s", "{:,}"),
    Column("violation", lambda r: r["violation"] or "none"),
]


def main() -> None:
    """Run the benchmarks and print them."""
    command = parser(__doc__)
    command.add_argument("--chain", default="100,1000", help="operators in the chains, comma-separated")
    command.add_argument("--steps", type=int, default=2000, help="tracker steps per workload")
    args = command.parse_args()
    steps = 200 if args.quick else args.steps
    rows: list[dict[str, Any]] = []
    for length in (int(x) for x in args.chain.split(",")):
        scale = max(length // 100, 1)
        b, batches = chain_graph(length)
        baseline_steps = max(steps // 20 // scale**2, 4)
        rows.append(compare(f"chain-{length}", b, batches, max(steps // scale, 20), baseline_steps))
        b, batches = chain_graph(length, traffic=True)
        rows.append(compare(f"chain-{length}-traffic", b, batches, steps, baseline_steps))
    b, batches = loop_graph()
    rows.append(compare("loop", b, batches, steps, max(steps // 4, 20)))
    checked = verifier_rate(args.quick)
    tables = [Table(TRACKING, rows, "Progress tracking"), Table(CHECKING, checked, "Model checker")]
    report(rows + checked, tables, as_json=args.json)


if __name__ == "__main__":
    main()
