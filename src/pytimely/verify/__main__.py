"""``python -m pytimely.verify MODEL``: exhaustively check a model of progress tracking or data exchange.

Explores every state reachable within the depth bound, prints how many states
and transitions were explored, the time taken and states per second, and
either ``no violation`` (exit status 0) or ``violation of <invariant>`` and a
shortest counterexample trace, one step per line (exit status 1). Bad
arguments exit with status 2.
"""

from __future__ import annotations

import argparse
import sys

from pytimely.verify.checker import check
from pytimely.verify.configs import DEFAULT_CONFIG, MODELS, config_names, default_depth, make_model, mutants_for
from pytimely.verify.mutants import Mutant, mutant_cases, parse_mutant

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pytimely.verify",
        description="Model-check the progress-tracking protocols of Timely Dataflow "
        "(clocks, exchange, local propagation, combined), its data exchange (datagram) "
        "and rescaling (rescale: bootstrap, join and leave).",
    )
    p.add_argument("model", nargs="?", choices=MODELS, help="the protocol to check")
    p.add_argument(
        "--workers",
        type=int,
        help="number of workers (1-4; default 2), of locations for datagram, of initial members for rescale",
    )
    p.add_argument("--depth", type=int, help="exploration depth (default: the configuration's)")
    p.add_argument("--mutant", metavar="NAME", help="check a deliberately broken variant (see --list)")
    p.add_argument("--config", metavar="NAME", help="configuration (see --list)")
    p.add_argument(
        "--invariant",
        action="append",
        metavar="NAME",
        help="check only this invariant (repeatable; default: all of the model's)",
    )
    p.add_argument("--max-states", type=int, help="stop after this many states")
    p.add_argument("--list", action="store_true", help="list models, configurations and mutants")
    return p


def _list() -> str:
    lines = ["models and configurations (default first):"]
    for m in MODELS:
        names = config_names(m)
        lines.append(f"  {m}: {', '.join(names)}")
        muts = mutants_for(m)
        if muts:
            lines.append(f"    mutants: {', '.join(x.value for x in muts)}")
    lines.append("mutants and where they are caught:")
    for case in mutant_cases():
        only = f" (checking only {', '.join(case.only)})" if case.only else ""
        lines.append(
            f"  {case.mutant.value}: {case.model} --config {case.config} -> {case.invariant} "
            f"at depth {case.depth}{only}"
        )
    return "\n".join(lines)


def _default_config(model: str, mutant: Mutant | None) -> str:
    if mutant is not None:
        for case in mutant_cases():
            if case.mutant is mutant and case.model == model:
                return case.config
    return DEFAULT_CONFIG[model]


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status (0 no violation, 1 violation, 2 bad arguments)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.list:
        print(_list())
        return 0
    if args.model is None:
        parser.error("a MODEL is required (or --list)")
    mutant = None
    if args.mutant is not None:
        try:
            mutant = parse_mutant(args.mutant)
        except ValueError as e:
            parser.error(str(e))
    if args.config is not None and args.config not in config_names(args.model):
        parser.error(f"unknown configuration {args.config!r} for {args.model}; known: {config_names(args.model)}")
    if args.depth is not None and args.depth < 0:
        parser.error("--depth must be non-negative")
    config = args.config or _default_config(args.model, mutant)
    try:
        model = make_model(args.model, config, args.workers, mutant)
    except ValueError as e:
        parser.error(str(e))
    depth = default_depth(model) if args.depth is None else args.depth
    try:
        result = check(model, depth, invariants=args.invariant, max_states=args.max_states)
    except ValueError as e:
        parser.error(str(e))
    workers = getattr(model, "cfg", None)
    nworkers = getattr(workers, "workers", None)
    nlocations = getattr(workers, "locations", None)
    head = f"model: {args.model}  config: {config}"
    if nworkers is not None:
        head += f"  workers: {nworkers}"
    if nlocations is not None:
        head += f"  locations: {nlocations}"
    head += f"  depth: {depth}  mutant: {mutant.value if mutant else 'none'}"
    print(head)
    print(f"states explored: {result.states}")
    print(f"transitions: {result.transitions}")
    print(f"time: {result.seconds:.2f} s")
    print(f"states/second: {result.states_per_second:.0f}")
    if result.complete:
        print("all reachable states explored")
    if result.violation is None:
        print("no violation")
        return 0
    print(f"violation of {result.violation}")
    print(f"counterexample ({len(result.trace) - 1} steps):")
    for i, st in enumerate(result.trace):
        label = "init" if st.action is None else str(st.action)
        print(f"  {i:2d}. {label}  =>  {model.format_state(st.state)}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
