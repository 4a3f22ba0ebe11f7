"""``pytimely simulate``: run seeds of the deterministic simulation, replay one, or hunt a known-bad variant.

    pytimely simulate [--seeds N] [--first S] [--faults LIST] [--workload NAME]
    pytimely simulate --replay SEED [--faults LIST] [--workload NAME] [--mutant NAME]
    pytimely simulate --mutant NAME [--seeds N] [--first S]
    pytimely simulate --list

Runs seeds ``S .. S+N-1`` (default 0..99) with the faults in ``LIST`` (comma-separated; default: all) and prints
how often each fault befell the runs, then ``N seeds, 0 violations`` (exit status 0), or, at the first seed
that breaks a property, the seed, the property, the trace and the command that replays it (exit status 1).
``--replay SEED`` prints that seed's whole trace, the same every time (exit status 1 if it breaks a property).
``--mutant NAME`` runs with a known-bad variant of the runtime put in (``--list`` names them), on the workloads
and faults that show it, until a seed catches it: exit status 0 when one does (it says which seed and what it
broke), 1 when none of the N seeds did. A usage error (an unknown fault, mutant or workload, a seed that is
not a number) exits with status 2. See ``docs/simulate.md``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter
from collections.abc import Sequence

from pytimely.simulate.mutants import MUTANTS, applied
from pytimely.simulate.run import FAULTS, Outcome, simulate
from pytimely.simulate.workloads import WORKLOADS

__all__ = ["main"]

SIMULABLE = tuple(name for name in WORKLOADS if name != "threaded")
"""The workloads seeds draw from (``threaded`` is there to show a workload the simulator refuses)."""


def _faults(text: str) -> frozenset[str]:
    names = frozenset(t.strip() for t in text.split(",") if t.strip())
    unknown = sorted(names - set(FAULTS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown fault(s) {', '.join(unknown)} (known: {', '.join(FAULTS)})")
    return names


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a seed is a number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a seed is a number >= 0, got {value}")
    return value


def _count(text: str) -> int:
    value = _seed(text)
    if value < 1:
        raise argparse.ArgumentTypeError("--seeds must be at least 1")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pytimely simulate",
        description="Deterministic simulation of the whole runtime under seeded faults (docs/simulate.md).",
    )
    parser.add_argument("--seeds", type=_count, default=100, help="how many seeds to run (default 100)")
    parser.add_argument("--first", type=_seed, default=0, help="the first seed (default 0)")
    parser.add_argument("--faults", type=_faults, default=None, help="comma-separated faults (default: all)")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default=None, help="run only this workload")
    parser.add_argument("--replay", type=_seed, default=None, metavar="SEED", help="print one seed's whole trace")
    parser.add_argument("--mutant", choices=sorted(MUTANTS), default=None, help="put a known-bad variant in")
    parser.add_argument("--list", action="store_true", help="list the faults, workloads and mutants")
    return parser


def _listing() -> str:
    lines = ["faults:", *(f"  {name}" for name in FAULTS), "workloads:"]
    lines += [f"  {name}: {(WORKLOADS[name].__doc__ or '').strip().splitlines()[0]}" for name in WORKLOADS]
    lines.append("mutants:")
    lines += [f"  {m.name}: {m.doc} (workloads {', '.join(m.workloads)})" for m in MUTANTS.values()]
    return "\n".join(lines)


def _replay_command(seed: int, faults: frozenset[str], workload: str | None, mutant: str | None) -> str:
    parts = ["pytimely simulate --replay", str(seed)]
    if faults != frozenset(FAULTS):
        parts.append(f"--faults {','.join(sorted(faults)) or ','}")
    if workload is not None:
        parts.append(f"--workload {workload}")
    if mutant is not None:
        parts.append(f"--mutant {mutant}")
    return " ".join(parts)


def _report(outcome: Outcome, replay: str, tail: int = 60) -> str:
    first = outcome.violations[0]
    trace = outcome.trace
    shown = trace if len(trace) <= tail else ["   ... (earlier lines: --replay prints them all)", *trace[-tail:]]
    return "\n".join(
        [
            f"seed {outcome.seed} ({outcome.workload}): {first.property} violated",
            f"  {first.detail}",
            "trace:",
            *(f"  {line}" for line in shown),
            f"replay: {replay}",
        ]
    )


def _table(counts: Counter[str]) -> str:
    return "\n".join(f"  {name:<10} {counts.get(name, 0):>8}" for name in FAULTS)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``pytimely simulate`` command; its exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.list:
        print(_listing())
        return 0
    # The runtime's warnings (a refused connection, a peer gone) are part of what is simulated, not news.
    runtime_log = logging.getLogger("pytimely")
    runtime_log.addHandler(logging.NullHandler())
    runtime_log.propagate = False
    mutant = MUTANTS.get(args.mutant) if args.mutant else None
    faults = args.faults if args.faults is not None else (mutant.faults if mutant else frozenset(FAULTS))
    workloads = [args.workload] if args.workload else list(mutant.workloads if mutant else SIMULABLE)
    if args.replay is not None:
        workload = args.workload or (workloads[args.replay % len(workloads)] if mutant else None)
        with applied(args.mutant):
            outcome = simulate(args.replay, faults, workload=workload)
        print("\n".join(outcome.trace))
        print(f"seed {outcome.seed}: {'no violation' if outcome.ok else outcome.violations[0]}")
        return 0 if outcome.ok else 1
    return _run(args.first, args.seeds, faults, workloads, args.workload, args.mutant)


def _run(first: int, count: int, faults: frozenset[str], workloads: list[str], chosen: str | None,
         mutant: str | None) -> int:
    counts: Counter[str] = Counter()
    started = time.perf_counter()
    takes = 0
    for seed in range(first, first + count):
        # A mutant's seeds go round its workloads; otherwise the seed picks one (or the one named).
        workload = chosen or (workloads[seed % len(workloads)] if mutant else None)
        with applied(mutant):
            outcome = simulate(seed, faults, workload=workload)
        counts += outcome.faults
        takes += outcome.takes
        done = seed - first + 1
        if done % 1000 == 0:
            rate = done / (time.perf_counter() - started)
            print(f"  {done} seeds, {rate:.1f} seeds/s, no violation so far", file=sys.stderr, flush=True)
        if not outcome.ok:
            replay = _replay_command(seed, faults, workload, mutant)
            if mutant is not None:
                first_violation = outcome.violations[0]
                print(f"mutant {mutant} caught at seed {seed}, after {done} seed(s): {first_violation.property}")
                print(f"  {first_violation.detail}")
                print(f"replay: {replay}")
                return 0
            print(_report(outcome, replay))
            return 1
    elapsed = time.perf_counter() - started
    print(f"faults (how often each befell the runs, over {count} seeds):")
    print(_table(counts))
    print(f"{takes} batches checked against every worker's frontier; {count / elapsed:.2f} seeds/s")
    if mutant is not None:
        print(f"mutant {mutant} NOT caught in {count} seeds")
        return 1
    print(f"{count} seeds, 0 violations")
    return 0
