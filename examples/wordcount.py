"""Count words: ``word<TAB>count`` lines sorted by word.

    python examples/wordcount.py --input TEXT --output OUT [-w N]

Words are split on whitespace, case kept. Each worker reads its share of the
words; counting exchanges each word to the worker that owns it.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from pytimely import InputHandle, Scope, Worker, execute
from pytimely.errors import InputFormatError
from pytimely.io import read_words

BATCH = 1 << 16


def run(path: str, workers: int = 1, *, seed: int | None = None) -> list[tuple[str, int]]:
    """``(word, count)`` pairs sorted by word."""

    def job(worker: Worker) -> list[tuple[Any, list[Any]]]:
        words = read_words(path, part=worker.index, parts=worker.peers)

        def build(scope: Scope[int]) -> tuple[InputHandle[int, Any], Any]:
            handle, stream = scope.new_input(name="words")
            return handle, stream.count_by().capture()

        handle, captured = worker.dataflow(build)
        for start in range(0, len(words), BATCH):
            handle.send_batch(words[start : start + BATCH])
        return captured

    parts = execute(job, workers=workers, seed=seed)
    return sorted(pair for captured in parts for _, batch in captured for pair in batch)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, write OUT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="UTF-8 text file")
    parser.add_argument("--output", required=True, help="where to write word<TAB>count lines")
    parser.add_argument("-w", "--workers", type=int, default=1, help="number of workers (default 1)")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    started = time.perf_counter()
    try:
        counts = run(args.input, args.workers)
    except (InputFormatError, OSError) as exc:
        print(f"wordcount: {exc}", file=sys.stderr)
        return 2
    with open(args.output, "w", encoding="utf-8") as out:
        out.writelines(f"{word}\t{count}\n" for word, count in counts)
    print(f"wordcount: {len(counts)} words in {time.perf_counter() - started:.2f} s -> {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
