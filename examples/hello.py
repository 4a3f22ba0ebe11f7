"""Hello, pytimely: the first example of timely dataflow, in Python.

Each worker feeds rounds of data into an input; records are exchanged between
workers and printed by whichever worker receives them; a probe tells each worker
when a round has passed through the whole dataflow.

    python examples/hello.py -w 2
    pytimely launch -n 2 -w 2 -- python examples/hello.py
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pytimely import InputHandle, Scope, Worker, execute
from pytimely.config import add_arguments, parse_config
from pytimely.errors import PytimelyError


def hello(worker: Worker) -> None:
    """Send ten rounds, each one record from worker 0, and wait for each round to finish."""

    def build(scope: Scope[int]) -> tuple[InputHandle[int, Any], Any]:
        handle, stream = scope.new_input()
        probe = (
            stream.exchange(lambda x: x)
            .inspect(lambda x: print(f"worker {worker.index}:\thello {x}"))
            .probe()
        )
        return handle, probe

    handle, probe = worker.dataflow(build)
    for round_ in range(10):
        if worker.index == 0:
            handle.send(round_)
        handle.advance_to(round_ + 1)
        worker.step_while(lambda: probe.less_than(handle.time))


def main(argv: list[str] | None = None) -> int:
    """Parse the cluster flags and run; a failure is one line on stderr and exit status 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    _, config = parse_config(parser, argv)
    try:
        execute(hello, config=config)
    except PytimelyError as exc:
        print(f"hello: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
