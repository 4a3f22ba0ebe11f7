"""What a simulation runs: jobs drawn from a seed, each with the output a sequential reference gives.

* :class:`RandomDataflow`: a chain of stages (maps, filters, exchanges, a broadcast, a branch, a loop with an
  exchange inside, a nested scope, per-time counts, keyed running totals in bins, tumbling windows) over
  random records, on 2-3 processes of 1-2 workers; every stage's input is watched
  (:func:`~pytimely.simulate.oracles.watch`), loops inside too;
* :class:`RecoveredCount`: a keyed running count (``state_machine``, its state declared) whose output is
  captured, run with a recovery store: a run killed anywhere resumes from the last snapshot, and the
  captured output must hold every epoch's counts exactly once;
* :class:`Rescaled`: the elastic word count of :mod:`pytimely.algorithms.rescaling` (keyed state in bins that
  follow the members) while processes join and leave at epochs a plan draws, the newcomers started at
  moments the seed picks (during another's bootstrap, too);
* :class:`Threaded`: an operator that starts a thread of its own: the simulator names it and refuses to run it
  on real time.

A workload is built from a ``random.Random`` (its shape and its records), knows its reference output, and
says which processes start it and what each does (:meth:`Workload.job`).
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytimely.errors import InvalidArgument
from pytimely.simulate.oracles import Observer, watch

if TYPE_CHECKING:
    from pytimely.dataflow.scope import Scope
    from pytimely.dataflow.stream import Stream
    from pytimely.membership import RescalePlan
    from pytimely.worker import Worker

__all__ = ["WORKLOADS", "RandomDataflow", "RecoveredCount", "Rescaled", "Threaded", "WatchedJoins", "Workload"]

Output = dict[Any, Counter[Any]]
"""Records per time."""


class Workload:
    """A job for a simulated cluster and its reference output."""

    name = "workload"
    elastic = False
    recovery = False
    """Whether it runs with a recovery store (a failed run is resumed from it, not started over)."""

    def __init__(self, rng: random.Random, observer: Observer, faults: frozenset[str] = frozenset()) -> None:
        self.rng = rng
        self.observer = observer
        self.processes = 2
        self.workers = 1
        self.plan: RescalePlan | None = None
        """For an elastic workload: when processes join and leave."""
        self.delays: dict[int, float] = {}
        """For an elastic workload: how long after it may the launcher starts each newcomer."""

    def describe(self) -> str:
        """The workload's shape, for the trace."""
        return f"{self.name} on {self.processes} processes of {self.workers} worker(s)"

    def job(self, worker: Worker) -> Any:
        """What each worker runs (inside the simulation)."""
        raise NotImplementedError

    def reference(self) -> Output:
        """The output a correct run gives, per time."""
        raise NotImplementedError

    def output(self, results: dict[int, list[Any]]) -> Output:
        """The output of a run, from each process's workers' results."""
        out: Output = {}
        for per_worker in results.values():
            for result in per_worker:
                for t, record in result or ():
                    out.setdefault(t, Counter())[record] += 1
        return out


# -- random dataflows ------------------------------------------------------------------------------------------------

STAGES = (
    "inc",
    "double",
    "keep_odd",
    "dup",
    "exchange",
    "broadcast_own",
    "branch_concat",
    "loop",
    "nested",
    "count_by",
    "running",
    "window",
)


def _halve(s: Stream[Any], observer: Observer, point: str) -> Stream[Any]:
    """A loop body: positive values are halved and exchanged; what the body takes is watched (product times)."""
    return watch(s, observer, point).filter(lambda x: x > 0).map(lambda x: x // 2).exchange(lambda x: x)


def _running(key: Any, value: int, state: int | None) -> tuple[int, list[int]]:
    total = (state or 0) + value
    return total, [key * 1000 + total]


def apply_stage(stream: Stream[Any], stage: str, worker: Worker, observer: Observer, point: str) -> Stream[Any]:
    """``stream`` with ``stage`` applied (each stage has its twin in :func:`reference_stage`)."""
    if stage == "inc":
        return stream.map(lambda x: x + 1)
    if stage == "double":
        return stream.map(lambda x: 2 * x)
    if stage == "keep_odd":
        return stream.filter(lambda x: x % 2 == 1)
    if stage == "dup":
        return stream.flat_map(lambda x: [x, x])
    if stage == "exchange":
        return stream.exchange(lambda x: x)
    if stage == "broadcast_own":
        peers, index = worker.peers, worker.index
        return stream.broadcast().filter(lambda x: x % peers == index)
    if stage == "branch_concat":
        small, large = stream.branch(lambda x: x < 10)
        return small.map(lambda x: x - 1).concat(large)
    if stage == "loop":
        return stream.concat(stream.iterate(lambda s: _halve(s, observer, f"{point}/body")))
    if stage == "nested":
        inner = stream.scope.iterative("nested")
        return watch(stream.enter(inner).map(lambda x: x + 3), observer, f"{point}/inner").leave()
    if stage == "count_by":
        return stream.count_by().map(lambda kc: kc[0] * 100 + kc[1])
    if stage == "running":
        return stream.map(lambda x: (x % 7, 1)).state_machine(_running)
    if stage == "window":
        windows = stream.tumbling(2, key=lambda x: x % 5)
        return windows.map(lambda w: w[0] * 10000 + w[2] * 1000 + w[3])
    raise InvalidArgument(f"unknown stage {stage!r}")


def reference_stage(stage: str, data: Output) -> Output:
    """``stage`` applied to ``data`` (records per time) sequentially."""
    out: Output = {}

    def put(t: Any, records: Any) -> None:
        box = out.setdefault(t, Counter())
        box.update(records)

    if stage == "running":
        totals: Counter[int] = Counter()
        for t in sorted(data):
            for x, n in sorted(data[t].items()):
                for _ in range(n):
                    totals[x % 7] += 1
                    put(t, [(x % 7) * 1000 + totals[x % 7]])
        return out
    if stage == "window":
        counts: Counter[tuple[int, int]] = Counter()
        for t, records in data.items():
            for x, n in records.items():
                counts[(t // 2 * 2, x % 5)] += n
        for (start, key), n in counts.items():
            put(start + 1, [start * 10000 + key * 1000 + n])
        return out
    for t, records in data.items():
        items = list(records.elements())
        if stage == "inc":
            items = [x + 1 for x in items]
        elif stage == "double":
            items = [2 * x for x in items]
        elif stage == "keep_odd":
            items = [x for x in items if x % 2 == 1]
        elif stage == "dup":
            items = [y for x in items for y in (x, x)]
        elif stage == "branch_concat":
            items = [x - 1 if x < 10 else x for x in items]
        elif stage == "loop":
            produced, frontier = [], list(items)
            while frontier:
                frontier = [x // 2 for x in frontier if x > 0]
                produced.extend(frontier)
            items = items + produced
        elif stage == "nested":
            items = [x + 3 for x in items]
        elif stage == "count_by":
            items = [k * 100 + c for k, c in Counter(items).items()]
        elif stage not in ("exchange", "broadcast_own"):
            raise InvalidArgument(f"unknown stage {stage!r}")
        put(t, items)
    return {t: c for t, c in out.items() if c}


class RandomDataflow(Workload):
    """A random chain of stages over random records (see the module doc)."""

    name = "random"

    def __init__(self, rng: random.Random, observer: Observer, faults: frozenset[str] = frozenset()) -> None:
        super().__init__(rng, observer, faults)
        self.processes = rng.randint(2, 3)
        self.workers = rng.randint(1, 2)
        self.epochs = rng.randint(2, 5)
        stages: list[str] = []
        for _ in range(rng.randint(1, 5)):
            stage = rng.choice(STAGES)
            if stage in ("loop", "dup") and stages.count(stage) >= 1:
                continue
            stages.append(stage)
        self.stages = stages
        peers = self.processes * self.workers
        self.data = [[[rng.randint(-20, 40) for _ in range(rng.randint(0, 6))] for _ in range(self.epochs)]
                     for _ in range(peers)]

    def describe(self) -> str:
        """The workload's shape."""
        return f"{super().describe()}, {self.epochs} epochs, stages {' '.join(self.stages) or '-'}"

    def job(self, worker: Worker) -> list[tuple[Any, Any]]:
        """Feed each epoch, step until the probe passes it; return what reached the sink here."""
        observer, stages = self.observer, self.stages
        caught: list[tuple[Any, Any]] = []

        def build(scope: Scope[Any]) -> Any:
            handle, stream = scope.new_input(name="input")
            s = watch(stream, observer, "input")
            for i, stage in enumerate(stages):
                s = watch(apply_stage(s, stage, worker, observer, f"{i}:{stage}"), observer, f"after {i}:{stage}")
            s.sink(lambda t, batch: caught.extend((t, r) for r in batch), name="sink")
            return handle, s.probe()

        handle, probe = worker.dataflow(build)
        mine = self.data[worker.index]
        for epoch in range(self.epochs):
            handle.send_batch(mine[epoch])
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(handle.time))
        return caught

    def reference(self) -> Output:
        """The stages applied in turn to every worker's records, per epoch."""
        data: Output = {}
        for per_worker in self.data:
            for epoch, records in enumerate(per_worker):
                data.setdefault(epoch, Counter()).update(records)
        for stage in self.stages:
            data = reference_stage(stage, data)
        return {t: c for t, c in data.items() if c}


# -- a recovered keyed count -----------------------------------------------------------------------------------------


def _add(key: Any, value: int, state: int | None) -> tuple[int, list[tuple[Any, int]]]:
    total = (state or 0) + value
    return total, [(key, total)]


class RecoveredCount(Workload):
    """A running count per key with its state declared and its output captured, under a recovery store."""

    name = "recovered"
    recovery = True

    def __init__(self, rng: random.Random, observer: Observer, faults: frozenset[str] = frozenset()) -> None:
        super().__init__(rng, observer, faults)
        self.processes = rng.randint(2, 3)
        self.workers = rng.randint(1, 2)
        self.epochs = rng.randint(4, 8)
        self.keys = rng.randint(3, 9)
        peers = self.processes * self.workers
        self.data = [[[rng.randrange(self.keys) for _ in range(rng.randint(0, 5))] for _ in range(self.epochs)]
                     for _ in range(peers)]

    def describe(self) -> str:
        """The workload's shape."""
        return f"{super().describe()}, {self.epochs} epochs over {self.keys} keys, with a recovery store"

    def job(self, worker: Worker) -> Any:
        """Feed every epoch from the first (a resumed run drops what its snapshot holds); worker 0 returns the
        captured output."""
        observer = self.observer

        def build(scope: Scope[Any]) -> Any:
            handle, stream = scope.new_input(name="keys")
            counts = watch(stream, observer, "keys").map(lambda k: (k, 1)).state_machine(_add, name="count")
            gathered = watch(counts, observer, "counts").exchange(lambda _: 0, name="gather")
            return handle, counts.probe(), gathered.capture()

        handle, probe, captured = worker.dataflow(build)
        mine = self.data[worker.index]
        for epoch in range(self.epochs):
            handle.send_batch(mine[epoch])
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(handle.time))
        return captured if worker.index == 0 else None

    def reference(self) -> Output:
        """Each key's running total at every epoch it occurs in, in epoch order."""
        totals: Counter[int] = Counter()
        out: Output = {}
        for epoch in range(self.epochs):
            for per_worker in self.data:
                for key in per_worker[epoch]:
                    totals[key] += 1
                    out.setdefault(epoch, Counter())[(key, totals[key])] += 1
        return out

    def output(self, results: dict[int, list[Any]]) -> Output:
        """What worker 0's capture holds (each epoch's batches, restored from snapshots as well)."""
        out: Output = {}
        first = results.get(0, [None])[0]
        for t, batch in first or ():
            for record in batch:
                out.setdefault(t, Counter())[tuple(record)] += 1
        return out


# -- rescaling -------------------------------------------------------------------------------------------------------


@dataclass
class Membership:
    """When processes join and leave a simulated elastic run."""

    plan: RescalePlan
    starts: dict[int, float] = field(default_factory=dict)
    """For each process that joins: how long after the previous event the launcher starts it."""


class Rescaled(Workload):
    """The elastic word count while processes join and leave (:func:`~pytimely.algorithms.rescaling.count_keys`)."""

    name = "rescaled"
    elastic = True

    def __init__(self, rng: random.Random, observer: Observer, faults: frozenset[str] = frozenset()) -> None:
        from pytimely.membership import RescalePlan

        super().__init__(rng, observer, faults)
        joins = "join" in faults or "leave" not in faults
        leaves = "leave" in faults
        self.processes = 2 if joins else 3
        self.workers = rng.randint(1, 2)
        self.epochs = rng.randint(4, 7)
        self.rows = rng.randint(2, 6)
        self.salt = rng.randrange(1 << 30)
        changes: list[str] = []
        live = self.processes
        for epoch in sorted(rng.sample(range(self.epochs - 1), k=rng.randint(1, min(3, self.epochs - 1)))):
            if leaves and live > 2 and (not joins or rng.random() < 0.5):
                # The newest leaves: the first process gathers the output.
                changes.append(f"{epoch}:-1")
                live -= 1
            elif joins:
                changes.append(f"{epoch}:+1")
                live += 1
        self.text = ",".join(changes)
        self.plan = self.rescale = RescalePlan.parse(self.text, initial=self.processes, workers=self.workers)
        self.delays = {p: rng.choice((0.0, 0.0, rng.uniform(0.0, 0.05), rng.uniform(0.05, 1.0)))
                       for p in range(self.processes, self.rescale.processes)}
        """How long after it may start the launcher starts each newcomer (0: at once, during another's
        bootstrap or an epoch's exchange alike)."""

    def describe(self) -> str:
        """The workload's shape."""
        return f"{super().describe()}, {self.epochs} epochs, plan {self.text}"

    def words(self, worker: int, epoch: int) -> list[str]:
        """The words worker ``worker`` sends at ``epoch``."""
        rng = random.Random(self.salt ^ (epoch * 1000 + worker))
        return [f"w{rng.randrange(12)}" for _ in range(self.rows)]

    def job(self, worker: Worker) -> Any:
        """The elastic word count, every worker checking its frontiers and what it takes."""
        from pytimely.algorithms.rescaling import count_keys, run_while_rescaling

        observer = self.observer

        def stage(records: Stream[Any], control: Stream[Any]) -> Stream[Any]:
            counted = count_keys(watch(records, observer, "records"), control)
            return watch(counted, observer, "counts")

        return run_while_rescaling(
            worker, stage, lambda w, e, _: self.words(w, e), self.epochs, self.rescale,
            join_timeout=120.0, leave_timeout=120.0,
        )

    def reference(self) -> Output:
        """The last count of every word, from the members' words of every epoch (one 'time' for all)."""
        counts = Counter(
            w for e in range(self.epochs) for m in self.rescale.members_at(e) for w in self.words(m, e)
        )
        return {0: Counter(counts.items())}

    def output(self, results: dict[int, list[Any]]) -> Output:
        """Each word's highest count, from what the gathering worker returned."""
        counts: dict[Any, int] = {}
        for per_worker in results.values():
            for result in per_worker:
                for _, batch in result or ():
                    for (word, total), _emitter in batch:
                        counts[word] = max(counts.get(word, 0), total)
        return {0: Counter(counts.items())} if counts else {}


class WatchedJoins(Workload):
    """Processes join while each worker feeds its own records to a watched operator (only progress crosses).

    With nothing but progress between processes, a capability counted late shows at once (the minting race of
    issue 15)."""

    name = "joins"
    elastic = True

    def __init__(self, rng: random.Random, observer: Observer, faults: frozenset[str] = frozenset()) -> None:
        from pytimely.membership import RescalePlan

        super().__init__(rng, observer, faults)
        self.processes = 2
        self.workers = 1
        self.epochs = rng.randint(3, 6)
        epochs = sorted(rng.sample(range(self.epochs - 1), k=rng.randint(1, min(2, self.epochs - 1))))
        self.text = ",".join(f"{e}:+1" for e in epochs)
        self.plan = self.rescale = RescalePlan.parse(self.text, initial=2, workers=1)
        self.delays = {p: rng.choice((0.0, rng.uniform(0.0, 0.02), rng.uniform(0.02, 0.3)))
                       for p in range(2, self.rescale.processes)}

    def describe(self) -> str:
        """The workload's shape."""
        return f"{super().describe()}, {self.epochs} epochs, plan {self.text}"

    def job(self, worker: Worker) -> list[tuple[Any, Any]]:
        """Feed ``(worker, epoch)`` each epoch, waiting for newcomers before the epoch they join for."""
        observer, plan, me = self.observer, self.rescale, worker.index
        caught: list[tuple[Any, Any]] = []

        def build(scope: Scope[Any]) -> Any:
            handle, records = scope.new_input(name="records")
            watched = watch(records, observer, "records")
            watched.sink(lambda t, batch: caught.extend((t, tuple(r)) for r in batch), name="sink")
            return handle, watched.probe()

        handle, probe = worker.dataflow(build)
        start = plan.joins_at(me) if worker.joined else 0
        handle.advance_to(start)
        for epoch in range(start, self.epochs):
            handle.send_batch([(me, epoch)])
            if epoch + 1 in plan.join_epochs:
                wanted = set(plan.members_at(epoch + 1))
                worker.step_while(lambda: not wanted <= set(worker.members))  # noqa: B023 - used at once
                worker.step()
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(handle.time))
        handle.close()
        worker.step_while(lambda: not probe.done())
        return caught

    def reference(self) -> Output:
        """Every member's record of every epoch, at that epoch."""
        return {e: Counter((m, e) for m in self.rescale.members_at(e)) for e in range(self.epochs)}


# -- a workload that cannot be simulated -----------------------------------------------------------------------------


class Threaded(Workload):
    """An operator that hands its records to a thread of its own (as a user's sink to a database might)."""

    name = "threaded"

    def job(self, worker: Worker) -> Any:
        """Start a thread from inside an operator."""
        seen: list[int] = []

        def build(scope: Scope[Any]) -> Any:
            handle, stream = scope.new_input(name="input")

            def hand_off(t: Any, batch: Any) -> None:
                thread = threading.Thread(target=seen.extend, args=(list(batch),), name="user-uploader")
                thread.start()
                thread.join()

            stream.sink(hand_off, name="uploader")
            return handle

        handle = worker.dataflow(build)
        handle.send_batch([1, 2, 3])
        return seen

    def reference(self) -> Output:
        """Nothing is checked: the run is refused."""
        return {}


WORKLOADS: dict[str, Callable[[random.Random, Observer, frozenset[str]], Workload]] = {
    "random": RandomDataflow,
    "recovered": RecoveredCount,
    "rescaled": Rescaled,
    "joins": WatchedJoins,
    "threaded": Threaded,
}
"""Workloads by name."""
