"""Count words: ``word<TAB>count`` lines sorted by word.

    python examples/wordcount.py --input TEXT --output OUT [-w W]
    pytimely launch -n 2 -- python examples/wordcount.py --input TEXT --output OUT

Cluster flags (``-w -n -p --hosts --hostfile``, or their ``PYTIMELY_*``
variables) spread the workers over processes; process 0 writes OUT, under a
temporary name renamed on success.

Words are split on whitespace, case kept. Each worker reads its share of the
words; counting exchanges each word to the worker that owns it.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from pytimely import InputHandle, Scope, Worker, execute
from pytimely.config import Config, add_arguments, parse_config
from pytimely.errors import InputFormatError, PytimelyError
from pytimely.io import atomic_output, read_words

BATCH = 1 << 16


def run(
    path: str, workers: int = 1, *, seed: int | None = None, config: Config | None = None
) -> list[tuple[str, int]] | None:
    """``(word, count)`` pairs sorted by word (``None`` on cluster processes other than worker 0's)."""

    def job(worker: Worker) -> list[tuple[Any, list[Any]]]:
        words = read_words(path, part=worker.index, parts=worker.peers)

        def build(scope: Scope[int]) -> tuple[InputHandle[int, Any], Any]:
            handle, stream = scope.new_input(name="words")
            return handle, stream.count_by().exchange(lambda _: 0, name="gather").capture()

        handle, captured = worker.dataflow(build)
        for start in range(0, len(words), BATCH):
            handle.send_batch(words[start : start + BATCH])
        return captured

    parts = execute(job, workers, config=config, seed=seed)
    if config is not None and config.first_worker != 0:
        return None
    return sorted(pair for captured in parts for _, batch in captured for pair in batch)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, write OUT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="UTF-8 text file")
    parser.add_argument("--output", required=True, help="where to write word<TAB>count lines")
    add_arguments(parser)
    args, config = parse_config(parser, argv)
    started = time.perf_counter()
    try:
        counts = run(args.input, config=config)
    except (InputFormatError, OSError) as exc:
        print(f"wordcount: {exc}", file=sys.stderr)
        return 2
    except PytimelyError as exc:
        print(f"wordcount: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if counts is None:
        return 0
    with atomic_output(args.output) as out:
        out.writelines(f"{word}\t{count}\n" for word, count in counts)
    print(f"wordcount: {len(counts)} words in {time.perf_counter() - started:.2f} s -> {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
