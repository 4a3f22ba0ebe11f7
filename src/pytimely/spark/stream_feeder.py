"""A hosted process's feed port and epochs: the micro-batches in, checked, and its workers driven epoch by epoch.

The feed thread (:class:`Feeder`) receives the micro-batches' Arrow data, numbered by sender partition, and hands
each frame to its workers at the epoch as it arrives (routed to the worker owning each row's key when the plan
names the key, else shared out evenly), so the workers compute while the rest of the micro-batch is on its way.
On ``CLOSE`` it checks it received exactly what the senders announced (nothing lost, nothing twice: a frame
that arrives twice fails the epoch, and the control side starts a new generation), completes the epoch, waits
(process 0) for its snapshot to be durable, writes its output part and answers ``DONE``. The workers take their
commands from in-process queues and keep stepping in between, so the cluster's progress moves whatever the feed does.

With an event-time column (``run_stream(epoch=...)``) a frame's rows cannot go to the workers on arrival: which of
them enter depends on the frontier the control side sends with ``CLOSE``. The feeder then keeps the frames, and on
``CLOSE`` sends the held and new rows below the frontier at their epochs (one command per epoch), keeps the rest
held, and completes every epoch below the frontier.
"""

from __future__ import annotations

import json
import queue
import socket
import threading
import time as _time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pytimely.errors import PytimelyError, StreamFeedError, StreamHostError
from pytimely.spark.epoch_host import epoch_dataflow
from pytimely.spark.record_batches import split_by_owner
from pytimely.spark.signed_files import write_signed_arrow
from pytimely.spark.stream_feed import FeedLink, Kind, Message, answer, arrow_batches
from pytimely.spark.stream_held import load_held, write_held

if TYPE_CHECKING:
    import pyarrow as pa

    from pytimely.recovery.runtime import WorkerRecovery
    from pytimely.spark.stream_plan import HostPlan
    from pytimely.worker import Worker

__all__ = ["Feeder", "parts_folder"]

_STOP = "stop"
_DATA = "data"
_CLOSE = "close"
_IDLE_FIRST = 0.0005
_IDLE_MOST = 0.05


class Feeder:
    """A hosted process's feed port: takes the micro-batches in, checks them, drives its workers epoch by epoch."""

    def __init__(self, plan: HostPlan, process: int, listener: socket.socket, first_worker: int) -> None:
        self.plan = plan
        self.process = process
        self.listener = listener
        self.first = first_worker
        self.commands: list[queue.Queue[Any]] = [queue.Queue() for _ in range(plan.workers)]
        self.results: queue.Queue[tuple[int, int, tuple[list[pa.RecordBatch], int, float] | BaseException]] = (
            queue.Queue()
        )
        """Each worker's answer to a close: the epoch, the worker, and its output, bytes sent and seconds waited for
        the snapshot (or what failed)."""
        self.inbox: dict[tuple[int, int, int], int] = {}
        """The rows of each frame received, by (epoch, sender partition, sequence number). A frame goes to the
        workers as it arrives, so the epoch is computed while the rest of it is still on its way."""
        self.frames: dict[tuple[int, int, int], list[pa.RecordBatch]] = {}
        """With an event-time column: the frames received and not yet closed (by the same keys), for ``CLOSE``."""
        self.resent: set[int] = set()
        """Epochs a frame of which arrived twice (a retried feed task): closing them fails, the generation restarts."""
        self.completed = -1
        """The last epoch this process completed: frames of it or earlier are left over from an earlier attempt."""
        self.exchanged = 0
        """Data bytes this process's workers sent to other processes so far (the cluster's counters)."""
        self.arrived = threading.Condition()
        self.links: set[FeedLink] = set()
        """The connections being served (closed with the feed port)."""
        self.closed = threading.Event()
        self.failure: BaseException | None = None
        self._next_look = 0.0
        self._heard = _time.monotonic()
        self._busy = 0
        self._busy_lock = threading.Lock()
        self.held = _load_held(plan, process) if plan.column is not None else None
        """With an event-time column: the rows of epochs the frontier has not reached, kept between micro-batches."""

    def start(self) -> None:
        """Start accepting feed connections (one thread each)."""
        threading.Thread(target=self._accept, name=f"pytimely-feed-{self.process}", daemon=True).start()

    def close(self) -> None:
        """Stop accepting connections and close the ones open (feed tasks keep theirs across micro-batches)."""
        self.closed.set()
        self.listener.close()
        with self.arrived:
            links, self.links = self.links, set()
        for link in links:
            link.close()

    def _accept(self) -> None:
        self.listener.settimeout(0.5)
        while not self.closed.is_set():
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                if self._taken_over() or self._idle():
                    for commands in self.commands:
                        commands.put(_STOP)
                    return
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _taken_over(self) -> bool:
        """Whether another run owns the checkpoint now (read at most every two seconds)."""
        if self.plan.owner is None or _time.monotonic() < self._next_look:
            return False
        self._next_look = _time.monotonic() + 2.0
        try:
            owner = json.loads((Path(self.plan.own) / "owner.json").read_text(encoding="utf-8"))["owner"]
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return bool(owner != self.plan.owner)

    def _idle(self) -> bool:
        """Whether nothing came from the control side for ``idle_timeout`` seconds (an epoch being closed is work)."""
        timeout = self.plan.idle_timeout
        return timeout is not None and not self._busy and _time.monotonic() - self._heard > timeout

    def _working(self, change: int) -> None:
        with self._busy_lock:
            self._busy += change
            self._heard = _time.monotonic()

    def _serve(self, sock: socket.socket) -> None:
        """One connection: authenticate, then take messages until the peer closes it."""
        try:
            link = answer(sock, self.plan.secret, self.process)
        except (PytimelyError, OSError):
            sock.close()  # a stranger, or a peer that gave up: nothing of it is kept
            return
        with self.arrived:
            self.links.add(link)
        try:
            while not self.closed.is_set():
                try:
                    message = link.receive(timeout=24 * 3600.0)
                except StreamFeedError:
                    return
                self._working(1)
                try:
                    self._handle(link, message)
                finally:
                    self._working(-1)
        finally:
            with self.arrived:
                self.links.discard(link)
            link.close()

    def _handle(self, link: FeedLink, message: Message) -> None:
        header = message.header
        if header.get("generation") != self.plan.generation:
            link.send(Kind.FAILED, {"error": f"process {self.process} is of generation {self.plan.generation}, "
                                             f"the message of {header.get('generation')!r}"})  # fmt: skip
            return
        if message.kind == Kind.DATA:
            self._take(message)
        elif message.kind == Kind.CLOSE:
            try:
                frontier = None if header.get("frontier") is None else int(header["frontier"])
                part = self._close(int(header["epoch"]), header["expected"], frontier)
            except PytimelyError as exc:
                link.send(Kind.FAILED, {"error": str(exc), "type": type(exc).__name__})
                return
            link.send(Kind.DONE, {"epoch": header["epoch"], "process": self.process, **part})
        elif message.kind == Kind.STOP:
            for commands in self.commands:
                commands.put(_STOP)
            link.send(Kind.DONE, {"process": self.process})

    def _take(self, message: Message) -> None:
        """A DATA frame, counted: its rows to the workers at once (routed to their owners, or shared out), or with
        an event-time column kept until ``CLOSE`` names the frontier (only then is it known which rows enter)."""
        header = message.header
        epoch = int(header["epoch"])
        key = (epoch, int(header["sender"]), int(header["seq"]))
        batches = arrow_batches(message.body)
        if self.plan.column is not None:
            with self.arrived:
                if epoch <= self.completed:
                    return  # of an attempt whose micro-batch is closed: nothing of it is used
                # Nothing of it was computed yet: a resent frame (a retried feed task) replaces its copy.
                self.inbox[key] = sum(b.num_rows for b in batches)
                self.frames[key] = batches
                self.arrived.notify_all()
            return
        shares = self._shares(batches)
        with self.arrived:
            if epoch <= self.completed:
                return  # of an attempt whose epoch is complete: nothing of it is used
            if key in self.inbox:
                self.resent.add(epoch)
                self.arrived.notify_all()
                return
            self.inbox[key] = sum(b.num_rows for b in batches)
            # Under the lock: the workers see the frames of an epoch before its close, whichever thread took them.
            for commands, share in zip(self.commands, shares, strict=True):
                if share:
                    commands.put((_DATA, epoch, share))
            self.arrived.notify_all()

    def _shares(self, batches: list[pa.RecordBatch]) -> list[list[pa.RecordBatch]]:
        """Each local worker's part of a frame: the rows whose key it owns, or an even share."""
        plan = self.plan
        if plan.key is None:
            return _shares(batches, plan.workers)
        peers = plan.processes * plan.workers
        shares: list[list[pa.RecordBatch]] = [[] for _ in range(plan.workers)]
        for batch in batches:
            parts = split_by_owner(batch, plan.key, peers, plan.bins, parts=plan.workers, first=self.first)
            for share, part in zip(shares, parts, strict=True):
                if part.num_rows:
                    share.append(part)
        return shares

    def _close(self, epoch: int, expected: dict[str, list[int]], frontier: int | None = None) -> dict[str, Any]:
        """Check the epoch's data, complete it on the workers, write the part; what ``DONE`` tells.

        With an event-time column ``epoch`` is the micro-batch and ``frontier`` the epoch every row below which is
        to complete now: the held rows and the micro-batch's rows below it go to the workers now, one command per
        epoch in epoch order, the others are held (and written under ``CK/pytimely/held`` before the answer, so a
        restart takes them up); then every epoch below the frontier completes. Without one, the frames went to
        the workers as they arrived and ``epoch`` completes."""
        started = _time.perf_counter()
        kept = self._checked(epoch, {int(s): (int(f), int(r)) for s, (f, r) in expected.items()})
        received = _time.perf_counter()
        if frontier is None:
            target, moving = epoch + 1, True
        else:
            target, moving = frontier, False
            for t, piece in self._event_pieces(epoch, kept, frontier):
                for commands, share in zip(self.commands, self._shares(piece), strict=True):
                    if share:
                        commands.put((_DATA, t, share))
        for commands in self.commands:
            commands.put((_CLOSE, target, moving))
        epoch_asked = epoch
        epoch = target
        outputs: list[pa.RecordBatch] = []
        exchanged = 0
        snapshot_s = 0.0
        deadline = _time.monotonic() + self.plan.close_timeout
        for _ in self.commands:
            try:
                got_epoch, _worker, result = self.results.get(timeout=max(0.0, deadline - _time.monotonic()))
            except queue.Empty:
                raise StreamHostError(f"process {self.process} did not complete epoch {epoch} within "
                                      f"{self.plan.close_timeout:g} s") from None  # fmt: skip
            if isinstance(result, BaseException):
                raise StreamHostError(f"process {self.process}, epoch {epoch}: {type(result).__name__}: {result}")
            if got_epoch != epoch:
                raise StreamHostError(f"process {self.process} completed epoch {got_epoch} while closing {epoch}")
            batches, sent, waited = result
            outputs.extend(batches)
            exchanged += sent
            snapshot_s = max(snapshot_s, waited)
        self.exchanged = exchanged
        computed = _time.perf_counter()
        part = self._write_part(epoch_asked, outputs)
        part["exchanged"] = exchanged
        # compute_s: from the last frame in to every worker's answer, of which snapshot_s worker 0's wait for the
        # epoch's snapshot to be durable.
        written = _time.perf_counter() - computed
        part["timing"] = {"wait_s": round(received - started, 4), "compute_s": round(computed - received, 4),
                          "snapshot_s": round(snapshot_s, 4), "write_s": round(written, 4)}  # fmt: skip
        return part

    def _event_pieces(self, batch: int, batches: list[pa.RecordBatch], frontier: int) -> list[tuple[int, Any]]:
        """The rows below ``frontier`` (held ones first) as ``(epoch, [batch])`` pieces in epoch order; the rest
        held."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from pytimely.spark.epoch_host import _pieces

        column = self.plan.column
        assert column is not None
        tables = [t for t in (self.held, pa.Table.from_batches(batches) if batches else None) if t is not None]
        table = pa.concat_tables(tables) if tables else None
        if table is None or table.num_rows == 0:
            ready, held = None, table
        else:
            below = pc.less(table.column(column), frontier)
            ready, held = table.filter(below), table.filter(pc.invert(below))
        self.held = held
        if batches:  # only the rows this micro-batch adds to those held are written
            write_held(self.plan.own, self.plan.files_key, batch, self.process, pa.Table.from_batches(batches),
                       column, frontier, generation=self.plan.generation)  # fmt: skip
        if ready is None or ready.num_rows == 0:
            return []
        return [(t, [piece]) for t, piece in _pieces(ready, None, column, -(1 << 62))]

    def _checked(self, epoch: int, expected: dict[int, tuple[int, int]]) -> list[pa.RecordBatch]:
        """Return once exactly the announced frames and rows of ``epoch`` are in (else :class:`StreamFeedError`):
        the frames kept until now (with an event-time column; else none are kept, they went to the workers)."""
        want = {(epoch, s, q) for s, (frames, _) in expected.items() for q in range(frames)}
        deadline = _time.monotonic() + self.plan.close_timeout
        with self.arrived:
            while not want <= self.inbox.keys() and epoch not in self.resent:
                left = deadline - _time.monotonic()
                if left <= 0:
                    missing = sorted(want - self.inbox.keys())[:5]
                    raise StreamFeedError(
                        f"process {self.process}, epoch {epoch}: {len(want - self.inbox.keys())} announced frame(s) "
                        f"never arrived (epoch, sender, seq: {missing}...)"
                    )
                self.arrived.wait(min(left, 1.0))
            # Whatever the outcome, this epoch's frames are done with: later copies are left over.
            self.completed = max(self.completed, epoch)
            taken = {k: n for k, n in self.inbox.items() if k[0] == epoch}
            kept = [b for k in sorted(taken) for b in self.frames.get(k, [])]
            for old in [k for k in self.inbox if k[0] <= epoch]:
                del self.inbox[old]
            for old in [k for k in self.frames if k[0] <= epoch]:
                del self.frames[old]
            if epoch in self.resent:
                raise StreamFeedError(f"process {self.process}, epoch {epoch}: a frame arrived twice (a retried "
                                      "feed task) after its first copy was computed")  # fmt: skip
        extra = sorted(k for k in taken if k not in want)
        if extra:
            raise StreamFeedError(f"process {self.process}, epoch {epoch}: {len(extra)} frame(s) nobody announced "
                                  f"(epoch, sender, seq: {extra[:5]})")  # fmt: skip
        for sender, (_, rows) in expected.items():
            got = sum(n for k, n in taken.items() if k[1] == sender)
            if got != rows:
                raise StreamFeedError(f"process {self.process}, epoch {epoch}: sender {sender} announced {rows} "
                                      f"row(s), {got} arrived")  # fmt: skip
        return kept

    def _write_part(self, epoch: int, outputs: list[pa.RecordBatch]) -> dict[str, Any]:
        """This process's output of ``epoch``: a part of the query's :class:`EpochOutput`, or an Arrow file under
        ``CK/pytimely/parts`` for the driver to hand to its sink (written aside and renamed, either way)."""
        import pyarrow as pa

        table = pa.Table.from_batches(outputs, schema=self.plan.schema)
        if self.plan.output is not None:
            name = f"g{self.plan.generation}-p{self.process:05d}"
            return {"part": self.plan.output.write_part(epoch, name, table).to_json(), "rows": table.num_rows}
        path = parts_folder(self.plan.own, epoch) / f"part-{self.process:05d}.arrow"
        write_signed_arrow(path, table, self.plan.files_key)
        return {"part": str(path), "rows": table.num_rows}

    def job(self, worker: Worker) -> None:
        """A worker's loop: step, and between steps take the feed's commands (an epoch's share, or stop)."""
        from pytimely.spark.hosting import to_record_batch

        index = worker.index - self.first
        handle, probe, captured = worker.dataflow(lambda scope: epoch_dataflow(scope, self.plan.build))
        commands = self.commands[index]
        hook = cast("WorkerRecovery | None", worker.recovery) if worker.index == 0 else None
        name = self.plan.column or "epoch"
        idle = _IDLE_FIRST
        while True:
            worker.step()
            # Between epochs only heartbeats arrive: wait on the queue longer the longer nothing happens.
            idle = _IDLE_FIRST if worker.last_step_worked else min(idle * 2, _IDLE_MOST)
            try:
                command = commands.get(timeout=idle)
            except queue.Empty:
                continue
            idle = _IDLE_FIRST
            if command == _STOP:
                handle.close()
                worker.step_while(lambda: not probe.done())
                return
            # (_DATA, epoch, share): rows at an epoch left open; (_CLOSE, target, moving): complete below target.
            kind, target, arg = command
            try:
                if kind == _DATA:
                    _send(handle, target, arg)
                    continue
                waited = _complete(worker, handle, probe, target, hook, moving=arg)
                out = [to_record_batch(b, self.plan.schema, time=t, epoch=name) for t, b in captured if t < target]
                captured[:] = [(t, b) for t, b in captured if t >= target]
                self.results.put((target, index, (out, _data_bytes_sent(worker), waited)))
            except BaseException as exc:
                self.results.put((target, index, exc))
                raise


def _send(handle: Any, epoch: int, share: list[pa.RecordBatch]) -> None:
    """Send ``share`` at ``epoch`` (the epoch stays open for more)."""
    if epoch < handle.time:
        raise StreamHostError(f"data of epoch {epoch} arrived after epoch {handle.time - 1} was complete")
    handle.advance_to(epoch)
    for batch in share:
        handle.send_batch(batch)


def _complete(worker: Worker, handle: Any, probe: Any, target: int, hook: WorkerRecovery | None, *,
              moving: bool) -> float:  # fmt: skip
    """Complete every epoch before ``target`` and (worker 0) wait until the last one's snapshot is durable; the
    seconds that wait took.

    ``moving``: ``target - 1`` must not be complete yet (a micro-batch's epoch); else (an event-time frontier that
    did not move) a ``target`` already reached completes nothing new."""
    if target < handle.time or (moving and target == handle.time):
        raise StreamHostError(f"epoch {target - 1} closed after epoch {handle.time - 1} was complete")
    moved = target > handle.time
    if moved:
        handle.advance_to(target)
    worker.step_while(lambda: probe.less_than(target))
    if moved and hook is not None and any(df.stateful for df in hook.dataflows):
        started = _time.perf_counter()
        worker.step_while(lambda: not hook.holds(target - 1))
        return _time.perf_counter() - started
    return 0.0


def _load_held(plan: HostPlan, process: int) -> pa.Table | None:
    """This process's share of the rows held after the last committed micro-batch."""
    assert plan.column is not None
    frontier = plan.resume_at + 1  # with event time the processes resume from the epoch before the frontier
    return load_held(plan.own, plan.files_key, plan.held_from, frontier, process, plan.processes, plan.column)


def _data_bytes_sent(worker: Worker) -> int:
    """Bytes of data this worker has sent to other processes (0 when its allocator keeps no counters)."""
    sent = worker.communication_stats().get("sent_by_worker", {})
    return int(sent.get("data", {}).get("bytes", 0))


def parts_folder(own: str | Path, epoch: int) -> Path:
    """Where the hosted processes write their output parts of ``epoch`` before the commit."""
    return Path(own) / "parts" / f"epoch-{epoch:012d}"


def _shares(batches: list[pa.RecordBatch], workers: int) -> list[list[pa.RecordBatch]]:
    """An even share of the rows for each local worker (one batch each, where there are rows)."""
    import pyarrow as pa

    if not batches:
        return [[] for _ in range(workers)]
    if workers == 1:
        return [batches]
    table = pa.Table.from_batches(batches).combine_chunks()
    step = -(-table.num_rows // workers)
    shares: list[list[pa.RecordBatch]] = []
    for k in range(workers):
        part = table.slice(k * step, step)
        shares.append(part.to_batches() if part.num_rows else [])
    return shares
