"""A small user program that must type-check under ``mypy --strict``: no annotation on its streams, and
``assert_type`` says what each one carries."""

from __future__ import annotations

from typing import Any, assert_type

from pytimely import Capability, InputHandle, ProbeHandle, Scope, Stream, Worker, execute
from pytimely.dataflow import InputPort, OperatorInfo, OutputPort, UnaryLogic


def tag(cap: Capability[int], info: OperatorInfo) -> UnaryLogic[str, tuple[str, int]]:
    """A unary operator's constructor: the logic turns each word into ``(word, worker)``."""
    cap.drop()

    def logic(input: InputPort[int, list[str]], output: OutputPort[int, list[tuple[str, int]]]) -> None:
        for message, batch in input:
            output.give(message, [(word, info.worker) for word in batch])

    return logic


Captured = list[tuple[Any, list[tuple[str, int]]]]


def running_total(total: int | None, n: int) -> tuple[int, int]:
    """A ``stateful_map`` mapper: the running total, kept and sent."""
    new = (total or 0) + n
    return new, new


def build(scope: Scope[int]) -> tuple[InputHandle[int, str], ProbeHandle[Any], Captured]:
    """Count words, join the counts with the words' lengths, and tag them by worker."""
    handle, words = scope.new_input(type=str)
    assert_type(handle, InputHandle[int, str])
    assert_type(words, Stream[str])
    counts = words.count_by()
    assert_type(counts, Stream[tuple[str, int]])
    by_first = words.count_by(lambda w: w[0])
    assert_type(by_first, Stream[tuple[str, int]])
    lengths = words.map(lambda w: (w, len(w)))
    joined = counts.join(lengths)
    assert_type(joined, Stream[tuple[str, tuple[int, int]]])
    totals = words.sum_by(lambda w: w[0], len)
    assert_type(totals, Stream[tuple[str, int]])
    letters = words.fold_by(len, lambda: 0, lambda acc, w: acc + len(w))
    assert_type(letters, Stream[tuple[int, int]])
    running = counts.stateful_map(running_total)
    assert_type(running, Stream[tuple[str, int]])
    gathered = counts.collect()
    assert_type(gathered, Stream[tuple[str, list[int]]])
    bounded = counts.collect(max_size=3, timeout=1.0)
    assert_type(bounded, Stream[tuple[str, list[int]]])
    assert_type(words.count_final(), Stream[tuple[str, int]])
    tagged = words.unary(tag)
    assert_type(tagged, Stream[tuple[str, int]])
    pairs = joined.map(lambda kv: (kv[0].upper(), kv[1][0] + kv[1][1]))
    assert_type(pairs, Stream[tuple[str, int]])
    replayed = scope.replay([(0, ["again"])])
    assert_type(replayed, Stream[str])
    captured = pairs.capture()
    assert_type(captured, list[tuple[Any, list[tuple[str, int]]]])
    return handle, tagged.probe(), captured


def job(worker: Worker) -> Captured:
    """Feed a few words and return what this worker captured."""
    handle, probe, captured = worker.dataflow(build)
    for word in ["timely", "dataflow", "typed"]:
        handle.send(word)
    handle.close()
    worker.step_while(lambda: not probe.done(), timeout=60)
    return captured


if __name__ == "__main__":
    print(execute(job, workers=2))
