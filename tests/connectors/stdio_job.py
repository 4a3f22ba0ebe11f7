"""``python -m tests.connectors.stdio_job WORKERS``: words of stdin, two lines an epoch, counted per epoch and
written to stdout as ``epoch word count`` lines (a real pipe at each end)."""

from __future__ import annotations

import sys
from typing import Any

from pytimely import Scope, execute
from pytimely.connectors import stdin_source, stdout_sink
from pytimely.errors import PytimelyError


def main(workers: int) -> int:
    """Run the job; a bad input is one line on stderr and exit status 2."""

    def build(scope: Scope[int]) -> None:
        words = stdin_source(scope, epoch_lines=2).flat_map(str.split)
        stdout_sink(words.count_by().unary(_with_time, name="with_time"), format_line=lambda r: " ".join(map(str, r)))

    try:
        execute(lambda worker: worker.dataflow(build), workers)
    except PytimelyError as exc:
        print(f"error: {type(exc).__name__}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    return 0


def _with_time(cap: Any, info: Any) -> Any:
    cap.drop()

    def logic(port: Any, out: Any) -> None:
        for icap, batch in port:
            out.give(icap, [(icap.time, w, n) for w, n in sorted(batch)])

    return logic


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
