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

from pytimely import InputHandle, Scope, Worker
from pytimely.command import job_main, run_with
from pytimely.config import RunConfig
from pytimely.observe.eventlog import Sink


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
    """Parse the run's flags and run; a failure is one line on stderr and an exit status."""

    def work(args: argparse.Namespace, run: RunConfig, log: Sink | None) -> None:
        run_with(hello, run, name="hello", log=log)

    return job_main("hello", argparse.ArgumentParser(description=__doc__.splitlines()[0]), work, argv)


if __name__ == "__main__":
    sys.exit(main())
