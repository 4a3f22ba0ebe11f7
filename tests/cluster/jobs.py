"""Worker functions the cluster tests run in real processes: ``python -m pytimely run tests.cluster.jobs:NAME``.

Arguments arrive in ``sys.argv`` (``pytimely run`` leaves them there):
``OUT EPOCHS ROWS [DELAY]``. Process 0 writes OUT, under a temporary name.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np

from pytimely import Scope, Worker
from pytimely.io import atomic_output


def expected_sums(epochs: int, rows: int) -> list[tuple[int, int]]:
    """What :func:`exchange_sum` writes: for each epoch, the sum of ``v * (epoch + 1)`` over ``0 <= v < rows``."""
    return [(e, (e + 1) * rows * (rows - 1) // 2) for e in range(epochs)]


def _args() -> tuple[str, int, int, float]:
    out, epochs, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    delay = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    return out, epochs, rows, delay


def _sum_dataflow(worker: Worker, fail_at: int | None = None) -> tuple[Any, Any, Any]:
    def build(scope: Scope[int]) -> tuple[Any, Any, Any]:
        handle, stream = scope.new_input(name="rows")

        def check(batch: Any) -> Any:
            if fail_at is not None and worker.index == worker.peers - 1 and handle.time >= fail_at:
                raise ValueError("deliberate failure in the test job")
            return batch

        sums = (
            stream.exchange(lambda b: b, vectorized=True, name="spread")
            .map_batch(check, name="check")
            .map_batch(lambda b: [int(np.sum(b))], name="partial")
            .exchange(lambda _: 0, name="gather")
        )
        return handle, sums.capture(), sums.probe()

    return worker.dataflow(build)


def exchange_sum(worker: Worker, fail_at: int | None = None) -> None:
    """Each epoch, the workers exchange ``v * (epoch + 1)`` for ``v < ROWS``; worker 0 writes the sum per epoch."""
    out, epochs, rows, delay = _args()
    handle, captured, probe = _sum_dataflow(worker, fail_at)
    mine = np.arange(worker.index, rows, worker.peers, dtype=np.int64)
    print(f"worker {worker.index} started", flush=True)
    for epoch in range(epochs):
        for chunk in np.array_split(mine, 4):
            handle.send_batch(chunk * (epoch + 1))
        handle.advance_to(epoch + 1)
        worker.step_while(lambda: probe.less_than(handle.time))
        if delay:
            time.sleep(delay)
    handle.close()
    worker.step_while(lambda: not probe.done())
    if worker.index == 0:
        totals: dict[int, int] = {}
        for t, batch in captured:
            totals[t] = totals.get(t, 0) + sum(batch)
        with atomic_output(out) as f:
            f.writelines(f"{t},{v}\n" for t, v in sorted(totals.items()))


def failing(worker: Worker) -> None:
    """:func:`exchange_sum`, but the last worker's operator raises from epoch 3 on."""
    exchange_sum(worker, fail_at=3)


def mismatch(worker: Worker) -> None:
    """Processes build different dataflows: the last process adds an exchange the others do not have."""
    last = worker.index == worker.peers - 1

    def build(scope: Scope[int]) -> Any:
        handle, stream = scope.new_input()
        if last:
            stream = stream.exchange(lambda r: r + 1)
        return handle, stream.exchange(lambda r: r).probe()

    handle, probe = worker.dataflow(build)
    handle.send_batch(list(range(100)))
    handle.close()
    worker.step_while(lambda: not probe.done())


def flood(worker: Worker) -> None:
    """The last worker sends ``EPOCHS`` batches of ``ROWS`` int64s to worker 0, which takes ``DELAY`` s per batch."""
    out, epochs, rows, delay = _args()

    def build(scope: Scope[int]) -> Any:
        handle, stream = scope.new_input()
        slow = stream.exchange(lambda b: np.zeros(len(b), dtype=np.int64), vectorized=True).inspect_batch(
            lambda t, b: time.sleep(delay)
        )
        return handle, slow.probe()

    handle, probe = worker.dataflow(build)
    if worker.index == worker.peers - 1:
        batch = np.ones(rows, dtype=np.int64)
        for _ in range(epochs):
            handle.send_batch(batch)
            worker.step()
    handle.close()
    worker.step_while(lambda: not probe.done())
    stats = worker.communication_stats()
    with open(f"{out}.{os.getpid()}.json", "w", encoding="utf-8") as f:
        json.dump({"worker": worker.index, **stats}, f)


def progress_traffic(worker: Worker) -> None:
    """A keyed count over ``EPOCHS`` epochs of ``ROWS`` words per worker; each worker writes ``OUT/worker-I.json``:
    the counts it owns, the progress batches it broadcast and the progress frames it sent to other processes."""
    from collections import Counter

    out, epochs, rows, _ = _args()
    owned: Counter[str] = Counter()

    def build(scope: Scope[int]) -> tuple[Any, Any]:
        handle, words = scope.new_input(name="words")
        counted = words.count_by(lambda w: w, name="count")
        # count_by gives each key's count within a time: summed over the epochs here.
        return handle, counted.inspect_batch(lambda _t, batch: owned.update(dict(batch)), name="keep").probe()

    handle, probe = worker.dataflow(build)
    for epoch in range(epochs):
        handle.send_batch([f"w{(worker.index * 7 + epoch * 13 + i * i) % 97}" for i in range(rows)])
        handle.advance_to(epoch + 1)
        worker.step_while(lambda: probe.less_than(handle.time))
    # Read together while the dataflow lives (a finished one is dropped): both move only in this worker's steps.
    sent = worker.communication_stats()["sent_by_worker"]["progress"]["frames"]
    stats = worker.progress_stats()
    handle.close()
    worker.step_while(lambda: not probe.done())
    record = {
        "counts": dict(owned),
        "batches": stats["batches_sent"],
        "frames": sent,
        "combined": stats.get("outbox_combined", 0),
    }
    with open(os.path.join(out, f"worker-{worker.index}.json"), "w") as f:
        json.dump(record, f)


def broadcast_traffic(worker: Worker) -> None:
    """Every worker broadcasts ``ROWS`` records per epoch over ``EPOCHS`` epochs; each writes ``OUT/worker-I.json``:
    the records it received and the data frames it sent to other processes."""
    out, epochs, rows, _ = _args()
    got: list[list[int]] = []

    def build(scope: Scope[int]) -> tuple[Any, Any]:
        handle, records = scope.new_input(name="records")
        kept = records.broadcast().inspect_batch(lambda _t, batch: got.extend(list(r) for r in batch), name="keep")
        return handle, kept.probe()

    handle, probe = worker.dataflow(build)
    for epoch in range(epochs):
        handle.send_batch([(worker.index, epoch, i) for i in range(rows)])
        handle.advance_to(epoch + 1)
        worker.step_while(lambda: probe.less_than(handle.time))
    sent = worker.communication_stats()["sent_by_worker"]["data"]["frames"]
    handle.close()
    worker.step_while(lambda: not probe.done())
    with open(os.path.join(out, f"worker-{worker.index}.json"), "w") as f:
        json.dump({"received": sorted(got), "frames": sent}, f)


def broadcast_arrays(worker: Worker) -> None:
    """Every worker broadcasts an int64 array of ``ROWS`` copies of ``1000 * worker + epoch`` per epoch over
    ``EPOCHS`` epochs; a worker overwrites every array it receives from another process once it has read it, unless
    the array is read-only (lent from a shared-memory ring: then nobody can write it, which is checked). Each writes
    ``OUT/worker-I.json``: the values it read, the arrays it found overwritten already, its data frames."""
    out, epochs, rows, _ = _args()
    workers = worker.peers // 2
    mine = worker.index // workers
    values: list[int] = []
    spoiled: list[list[int]] = []

    def keep(_time: Any, batch: Any) -> None:
        seen = sorted(set(batch.tolist()))
        if len(seen) != 1 or seen[0] < 0:
            spoiled.append(seen[:3])
            return
        values.append(seen[0])
        if seen[0] // 1000 // workers != mine:
            # Received from another process: had a worker here the same memory, it would see this.
            if batch.flags.writeable:
                batch[:] = -1
            else:
                try:
                    batch[:] = -1
                except ValueError:
                    pass  # lent from the ring, read-only: no worker can change what another sees
                else:
                    spoiled.append([-2])  # marked read-only, and written all the same

    def build(scope: Scope[int]) -> tuple[Any, Any]:
        handle, arrays = scope.new_input(name="arrays")
        return handle, arrays.broadcast().inspect_batch(keep, name="keep").probe()

    handle, probe = worker.dataflow(build)
    for epoch in range(epochs):
        handle.send_batch(np.full(rows, 1000 * worker.index + epoch, dtype=np.int64))
        handle.advance_to(epoch + 1)
        worker.step_while(lambda: probe.less_than(handle.time))
    sent = worker.communication_stats()["sent_by_worker"]["data"]["frames"]
    handle.close()
    worker.step_while(lambda: not probe.done())
    with open(os.path.join(out, f"worker-{worker.index}.json"), "w") as f:
        json.dump({"values": sorted(values), "spoiled": spoiled, "frames": sent}, f)


def ring_batches(worker: int, epochs: int, rows: int) -> list[Any]:
    """The int64 batches worker ``worker`` sends in :func:`ring_exchange`, one per epoch (seeded)."""
    rng = np.random.default_rng(1000 + worker)
    return [rng.integers(0, 1 << 40, size=rows, dtype=np.int64) for _ in range(epochs)]


def ring_digest(values: Any) -> str:
    """What :func:`ring_exchange` writes of the values a worker received: a digest of them in order."""
    import hashlib

    return hashlib.sha256(np.sort(values).tobytes()).hexdigest()


def ring_exchange(worker: Worker) -> None:
    """Every worker sends its :func:`ring_batches` by value to their owners; each writes ``OUT.PID.json``: the
    digest and count of what it received and its process's communication counters."""
    out, epochs, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    # ``keep``: kept as received (not copied): a receive buffer handed out again, or a place in the ring given back,
    # while an array lives on it would show. Otherwise copied, and the received arrays let go of at once.
    keep = sys.argv[4:5] == ["keep"]
    received: list[Any] = []

    def build(scope: Scope[int]) -> Any:
        handle, stream = scope.new_input()
        routed = stream.exchange(lambda b: b, vectorized=True).inspect_batch(
            lambda _t, b: received.append(b if keep else b.copy())
        )
        return handle, routed.probe()

    handle, probe = worker.dataflow(build)
    # Rings are used once the peer has mapped them (it answers the offer when its receiving thread gets to it):
    # wait for that, so the batches below go through them on a busy machine too.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(
        link["ring"] == "offered" for link in worker.communication_stats()["links"].values()
    ):
        worker.step()
        time.sleep(0.01)
    # Says the rings are settled (mapped, or refused) and the stream starts: a test may kill a process from now.
    with open(f"{out}.{worker.index}.streaming", "w", encoding="utf-8"):
        pass
    for epoch, batch in enumerate(ring_batches(worker.index, epochs, rows)):
        handle.send_batch(batch)
        handle.advance_to(epoch + 1)
        worker.step()
    handle.close()
    worker.step_while(lambda: not probe.done())
    values = np.concatenate(received) if received else np.zeros(0, dtype=np.int64)
    record = {"worker": worker.index, "count": len(values), "digest": ring_digest(values)}
    with open(f"{out}.{os.getpid()}.{worker.index}.json", "w", encoding="utf-8") as f:
        json.dump({**record, **worker.communication_stats()}, f)
