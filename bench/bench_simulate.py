"""The deterministic simulation's speed per fault mix, and how many seeds it takes to catch each known-bad variant.

    python bench/bench_simulate.py [--seeds N] [--starts K] [--limit L] [--json] [--quick]

(a) Seeds per second for each fault mix over seeds ``0 .. N-1`` (default 40), in CPU seconds of this process (the
    simulation is single-threaded: one core's worth, whatever else the machine runs) and in wall seconds; the
    fault-free mix is the baseline, each other mix's figure a ratio of it.
(b) For each mutant, ``K`` start seeds (default 20: 0, 1000, 2000, ...): how many seeds ``pytimely simulate
    --mutant NAME --first S`` runs until one catches it, the median and the worst (at most ``L``, default 60).

Prints Markdown tables; ``--json`` one JSON object per row instead; ``--quick`` runs 8 seeds and 4 start seeds.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from typing import Any

from harness import machine, machine_line, print_json
from pytimely.simulate.mutants import MUTANTS, applied
from pytimely.simulate.run import FAULTS, simulate

MIXES: dict[str, frozenset[str]] = {
    "none": frozenset(),
    "delay": frozenset({"delay"}),
    "timing (delay, slow, pause, buggify)": frozenset({"delay", "slow", "pause", "buggify"}),
    "network (partition, loss, duplicate, damage)": frozenset({"delay", "partition", "loss", "duplicate", "damage"}),
    "crash (kill, store)": frozenset({"delay", "kill", "store"}),
    "membership (join, leave)": frozenset({"delay", "join", "leave"}),
    "all": frozenset(FAULTS),
}
"""The fault mixes measured, each named for what it adds."""


def mix_row(name: str, faults: frozenset[str], seeds: int) -> dict[str, Any]:
    """Seeds per CPU and wall second for one mix over seeds ``0 .. seeds-1``."""
    cpu, wall = time.process_time(), time.perf_counter()
    violations = sum(not simulate(seed, faults).ok for seed in range(seeds))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"mix": name, "seeds": seeds, "seeds_per_cpu_s": seeds / cpu, "seeds_per_wall_s": seeds / wall,
            "violations": violations}


def seeds_to_catch(name: str, first: int, limit: int) -> int | None:
    """How many seeds from ``first`` the command's ``--mutant`` loop runs until one catches ``name`` (None: not
    within ``limit``)."""
    mutant = MUTANTS[name]
    with applied(name):
        for seed in range(first, first + limit):
            workload = mutant.workloads[seed % len(mutant.workloads)]
            if not simulate(seed, mutant.faults, workload=workload).ok:
                return seed - first + 1
    return None


def mutant_row(name: str, starts: int, limit: int) -> dict[str, Any]:
    """Median and worst seeds to catch ``name`` over ``starts`` start seeds."""
    found = [seeds_to_catch(name, 1000 * k, limit) for k in range(starts)]
    # A start seed that did not catch it within the limit counts as more than the limit, so the median is over every
    # start seed (and unknown, None, when it falls among those).
    counts = [limit + 1 if n is None else n for n in found]
    median = statistics.median(counts)
    return {"mutant": name, "starts": starts, "caught": sum(n is not None for n in found),
            "median": median if median <= limit else None, "worst": max(counts) if max(counts) <= limit else None,
            "limit": limit}


def main() -> None:
    """Measure and print both tables."""
    parser = argparse.ArgumentParser(description="The simulation's speed per fault mix and seeds to catch each mutant.")
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--limit", type=int, default=60)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.starts = 8, 4
    runtime_log = logging.getLogger("pytimely")
    runtime_log.addHandler(logging.NullHandler())
    runtime_log.propagate = False
    load = os.getloadavg()[0]
    if args.json:
        mixes = [mix_row(name, faults, args.seeds) for name, faults in MIXES.items()]
        mutants = [mutant_row(name, args.starts, args.limit) for name in sorted(MUTANTS)]
        print_json([*mixes, *mutants], {**machine(), "load": load})
        return
    # Each row as soon as it is measured: the whole run takes minutes.
    print(f"{machine_line()}; load average {load:.1f} at the start", flush=True)
    print("\n| fault mix | seeds | seeds/s (CPU) | seeds/s (wall) | vs none | violations |\n|---|---|---|---|---|---|")
    base = 0.0
    for name, faults in MIXES.items():
        row = mix_row(name, faults, args.seeds)
        base = base or row["seeds_per_cpu_s"]
        print(f"| {row['mix']} | {row['seeds']} | {row['seeds_per_cpu_s']:.2f} | {row['seeds_per_wall_s']:.2f} "
              f"| {row['seeds_per_cpu_s'] / base:.2f}x | {row['violations']} |", flush=True)
    print("\n| mutant | start seeds | caught | median seeds | worst |\n|---|---|---|---|---|", flush=True)
    for name in sorted(MUTANTS):
        row = mutant_row(name, args.starts, args.limit)
        median, worst = (row[k] if row[k] is not None else f"> {row['limit']}" for k in ("median", "worst"))
        print(f"| {row['mutant']} | {row['starts']} | {row['caught']} | {median} | {worst} |", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end", flush=True)

if __name__ == "__main__":
    main()
