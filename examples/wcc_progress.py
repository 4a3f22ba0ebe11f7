"""Weakly connected components driven by pytimely's progress tracking alone.

The dataflow is seed ``000_306a8e6bd5c43d47.txt`` Fig. 2: operator ``a`` feeds
edges to ``b``; ``b`` keeps a label per vertex and sends improved labels round
the loop through ``c``, which adds one iteration to the timestamp. ``b``
finishes iteration ``i`` only when the frontier at its label input has passed
``(0, i)``: the progress tracker, not a barrier, says when a round is complete.

Several workers run in one process under a seeded scheduler that interleaves
their steps and delivers data and progress batches in random order (FIFO per
sender for progress, as the protocol requires). Every delivery is checked: no
message may arrive at a time its input's frontier has already passed.

    python examples/wcc_progress.py [--vertices N] [--edges M] [--workers W] [--mode demand|eager] [--seed S]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter, defaultdict
from typing import Any

from pytimely.order import Product
from pytimely.progress import (
    Builder,
    Increment,
    PointstampOrder,
    ProductSummary,
    ProgressBatch,
    ProgressMode,
    ProgressReceiver,
    ProgressSender,
    Source,
    Target,
)


class SafetyViolation(AssertionError):
    """A message arrived at a time its input's frontier had already passed."""


class Stalled(RuntimeError):
    """The computation did not finish within its step budget."""


def dataflow() -> tuple[Builder[Any, Any], dict[str, Any]]:
    """Fig. 2: a.1 -> b.2; b.3 -> c.1; c.2 -> b.1, with c adding (0, 1)."""
    ident = ProductSummary(Increment(0), Increment(0))
    b: Builder[Any, Any] = Builder(ident)
    a = b.add_node(0, 1, name="a")
    bb = b.add_node(2, 1, name="b")
    c = b.add_node(1, 1, {(0, 0): ProductSummary(Increment(0), Increment(1))}, name="c")
    b.add_edge(Source(a, 0), Target(bb, 1))
    b.add_edge(Source(bb, 0), Target(c, 0))
    b.add_edge(Source(c, 0), Target(bb, 0))
    return b, {"a.1": Source(a, 0), "b.1": Target(bb, 0), "b.2": Target(bb, 1), "b.3": Source(bb, 0),
               "c.1": Target(c, 0), "c.2": Source(c, 0)}


class Worker:
    """One worker: its tracker, its side of the progress exchange, its operators' state."""

    def __init__(self, index: int, peers: int, builder: Builder[Any, Any], order: PointstampOrder[Any],
                 mode: ProgressMode, locs: dict[str, Any], edges: list[tuple[int, int]]) -> None:
        self.index, self.peers, self.locs = index, peers, locs
        self.tracker = builder.build()
        self.sender: ProgressSender[Any] = ProgressSender(index, order.lt, mode)
        self.receiver = ProgressReceiver(peers)
        self.caps: Counter[tuple[Any, Any]] = Counter()
        self.inbox: list[tuple[Any, Any, list[Any]]] = []  # (target, time, records)
        self.edges = edges  # this worker's share of the input
        self.adjacency: dict[int, list[int]] = defaultdict(list)
        self.labels: dict[int, int] = {}
        self.stash: dict[Any, list[tuple[int, int]]] = defaultdict(list)
        self.edges_done = False
        self.deliveries_checked = 0

    def hold(self, loc: Any, t: Any, diff: int) -> None:
        """Change this worker's capabilities and record the change for the exchange."""
        self.caps[(loc, t)] += diff
        if not self.caps[(loc, t)]:
            del self.caps[(loc, t)]
        self.sender.record(loc, t, diff)

    def receive(self, target: Any, t: Any, records: list[Any]) -> None:
        """A data message arrives: check it against the frontier, hold it until consumed."""
        if not self.tracker.frontier(target).less_equal(t):
            raise SafetyViolation(f"worker {self.index}: message at {t} reached {target} past its frontier "
                                  f"{self.tracker.frontier(target)}")
        self.deliveries_checked += 1
        self.caps[(target, t)] += 1
        self.inbox.append((target, t, records))


class Simulation:
    """Seeded interleaving of workers, data channels and progress channels."""

    def __init__(self, edges: list[tuple[int, int]], workers: int, mode: ProgressMode, seed: int) -> None:
        self.rng = random.Random(seed)
        builder, self.locs = dataflow()
        order: PointstampOrder[Any] = PointstampOrder(builder)
        shares: list[list[tuple[int, int]]] = [[] for _ in range(workers)]
        for i, e in enumerate(edges):
            shares[i % workers].append(e)
        self.workers = [Worker(w, workers, builder, order, mode, self.locs, shares[w]) for w in range(workers)]
        self.data: list[tuple[int, Any, Any, list[Any]]] = []
        self.progress: dict[tuple[int, int], list[ProgressBatch[Any]]] = defaultdict(list)
        self.batches = self.updates = 0
        zero = Product(0, 0)
        initial = [(self.locs["a.1"], zero, 1), (self.locs["b.3"], zero, 1)]
        for w in self.workers:
            w.caps.update({(loc, t): d for loc, t, d in initial})
            # Every worker knows every worker's initial capabilities.
            w.tracker.update_batch([(loc, t, d * workers) for loc, t, d in initial])
            w.tracker.propagate_all()

    def send(self, sender: Worker, target: Any, t: Any, by_worker: dict[int, list[Any]]) -> None:
        """Send one message per destination worker: count it at ``(target, t)`` now, deliver later."""
        for dest, records in by_worker.items():
            if records:
                sender.sender.record(target, t, 1)
                self.data.append((dest, target, t, records))

    def step(self, w: Worker) -> None:
        """Run ``w``'s operators once, then flush its progress."""
        loc = self.locs
        zero = Product(0, 0)
        if (loc["a.1"], zero) in w.caps:  # operator a: send this worker's edges, both directions
            out: dict[int, list[Any]] = defaultdict(list)
            for s, d in w.edges:
                out[s % w.peers].append((s, d))
                out[d % w.peers].append((d, s))
            self.send(w, loc["b.2"], zero, out)
            w.hold(loc["a.1"], zero, -1)
        inbox, w.inbox = w.inbox, []
        for target, t, records in inbox:  # consume every received message
            if target == loc["b.2"]:
                for s, d in records:
                    w.adjacency[s].append(d)
                w.hold(target, t, -1)
            elif target == loc["b.1"]:
                if not w.stash[t]:
                    w.hold(loc["b.3"], t, 1)  # retain a capability to answer in round t
                w.stash[t].extend(records)
                w.hold(target, t, -1)
            else:  # c: forward to the next iteration, exchanged by vertex
                nxt = Product(t.outer, t.inner + 1)
                out = defaultdict(list)
                for v, label in records:
                    out[v % w.peers].append((v, label))
                self.send(w, loc["b.1"], nxt, out)
                w.hold(target, t, -1)
        if not w.edges_done and not w.tracker.frontier(loc["b.2"]).less_equal(zero):
            w.edges_done = True  # every worker's edges have arrived: round 0
            w.labels = {v: v for v in w.adjacency}
            self.send(w, loc["c.1"], zero, {w.index: [(n, v) for v, ns in w.adjacency.items() for n in ns]})
            w.hold(loc["b.3"], zero, -1)
        for t in sorted(w.stash, key=lambda p: p.inner):
            if w.tracker.frontier(loc["b.1"]).less_equal(t):
                break  # round t may still receive labels
            changed = {}
            for v, label in w.stash.pop(t):
                if label < w.labels[v] and label < changed.get(v, v + 1):
                    changed[v] = label
            w.labels.update(changed)
            if changed:
                self.send(w, loc["c.1"], t, {w.index: [(n, lab) for v, lab in changed.items() for n in w.adjacency[v]]})
            w.hold(loc["b.3"], t, -1)
        batch = w.sender.flush(dict(w.caps))
        if batch is not None:
            self.batches += 1
            self.updates += len(batch)
            for dest in range(w.peers):
                self.progress[(w.index, dest)].append(batch)

    def run(self, max_steps: int = 1_000_000) -> dict[int, int]:
        """Interleave steps and deliveries until no worker's tracker sees any pointstamp."""
        rng = self.rng
        for _ in range(max_steps):
            for _ in range(rng.randint(1, 4)):
                if self.data:
                    dest, target, t, records = self.data.pop(rng.randrange(len(self.data)))
                    self.workers[dest].receive(target, t, records)
            for key in rng.sample(sorted(self.progress), k=len(self.progress)):
                queue = self.progress[key]
                for _ in range(rng.randint(0, len(queue))):
                    w = self.workers[key[1]]
                    w.tracker.update_batch(w.receiver.accept(queue.pop(0)))
                    w.tracker.propagate_all()
            self.step(rng.choice(self.workers))
            if not self.data and not any(self.progress.values()) and all(w.tracker.is_idle() for w in self.workers):
                break
        else:
            raise Stalled(f"no quiescence after {max_steps} steps")
        labels: dict[int, int] = {}
        for w in self.workers:
            labels.update(w.labels)
        return labels


def union_find(edges: list[tuple[int, int]]) -> dict[int, int]:
    """The baseline: smallest vertex id per component."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for s, d in edges:
        a, b = find(s), find(d)
        if a != b:
            parent[max(a, b)] = min(a, b)
    return {v: find(v) for v in parent}


def main(argv: list[str] | None = None) -> int:
    """Run the simulation, compare with union-find, print a summary."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vertices", type=int, default=20_000)
    p.add_argument("--edges", type=int, default=20_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--mode", choices=["demand", "eager"], default="demand")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--max-steps", type=int, default=1_000_000, help="give up after this many worker steps")
    args = p.parse_args(argv)
    if args.vertices < 1 or args.edges < 0 or args.workers < 1 or args.max_steps < 1:
        p.error("--vertices, --workers and --max-steps must be positive, --edges non-negative")
    rng = random.Random(args.seed)
    edges = [(rng.randrange(args.vertices), rng.randrange(args.vertices)) for _ in range(args.edges)]
    start = time.perf_counter()
    sim = Simulation(edges, args.workers, ProgressMode(args.mode), args.seed)
    try:
        labels = sim.run(args.max_steps)
    except (SafetyViolation, Stalled) as exc:
        print(f"FAILED: {type(exc).__name__}: {exc}")
        return 1
    seconds = time.perf_counter() - start
    expected = union_find(edges)
    sizes = Counter(labels.values())
    print(f"graph: {len(labels)} vertices with edges, {len(edges)} edges (seed {args.seed})")
    print(f"components: {len(sizes)}; largest: {max(sizes.values()) if sizes else 0} vertices")
    print(f"workers: {args.workers}, progress mode: {args.mode}, time: {seconds:.2f} s")
    print(f"progress: {sim.batches} batches, {sim.updates} updates; "
          f"{sum(w.deliveries_checked for w in sim.workers)} deliveries checked against frontiers")
    ok = labels == expected
    print(f"agrees with union-find: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
