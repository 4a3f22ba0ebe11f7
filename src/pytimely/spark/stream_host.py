"""The hosted side of a streaming query: one pytimely process per task of a long-lived barrier job.

Each task of the hosting job (:class:`HostTask`) meets the others once (``allGather``: it works on every master
and through Spark Connect), builds its :class:`~pytimely.config.Config`, opens a *feed* port
(:mod:`pytimely.spark.stream_feed`) and runs its workers with :func:`~pytimely.execute.run_process`, restoring
their state from the query's recovery store (the newest snapshot at or before the last committed micro-batch).
Process 0 publishes every process's feed address under the checkpoint (``CK/pytimely/hosts/gen-<G>.json``,
signed with the run's secret), so the control side finds them without any message through the driver.

What each process is told is :mod:`pytimely.spark.stream_plan`'s (re-exported here); what it does with the
micro-batches it is sent, :mod:`pytimely.spark.stream_feeder`'s.
"""

from __future__ import annotations

import json
import socket
import time as _time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from pytimely.atomic import write_atomic
from pytimely.config import Config
from pytimely.errors import PytimelyError, StreamHostError
from pytimely.signed_lines import decode, encode
from pytimely.spark.stream_feeder import Feeder, parts_folder
from pytimely.spark.stream_plan import HostPlan, ResumeAt

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["HostPlan", "HostTask", "ResumeAt", "await_exits", "hosts_path", "parts_folder", "read_hosts"]

HOSTS_PURPOSE = "stream-hosts"


def hosts_path(own: str | Path, generation: int) -> Path:
    """Where generation ``generation`` publishes its processes' feed addresses."""
    return Path(own) / "hosts" / f"gen-{generation}.json"


def await_exits(own: str | Path, timeout: float) -> bool:
    """Wait until every process of the newest published generation has exited (its ``.exit-P`` marker written);
    ``False`` after ``timeout`` seconds (processes killed write none). What is in the files is only counted."""
    folder = Path(own) / "hosts"
    published = sorted(folder.glob("gen-*.json")) if folder.exists() else []
    if not published:
        return True
    try:
        count = len(json.loads(published[-1].read_text(encoding="utf-8"))["feeds"])
    except (OSError, ValueError, KeyError, TypeError):
        return True
    deadline = _time.monotonic() + timeout
    while not all(published[-1].with_suffix(f".exit-{p}").exists() for p in range(count)):
        if _time.monotonic() > deadline:
            return False
        _time.sleep(0.1)
    return True


def read_hosts(own: str | Path, generation: int, secret: bytes) -> list[str] | None:
    """The feed addresses generation ``generation`` published (``None`` before it did); a forged file is refused."""
    path = hosts_path(own, generation)
    try:
        line = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        body = decode(secret, HOSTS_PURPOSE, line.strip())
    except PytimelyError as exc:
        raise StreamHostError(f"{path} is not signed by this run: {exc}") from None
    if body.get("generation") != generation or not isinstance(body.get("feeds"), list):
        raise StreamHostError(f"{path} names generation {body.get('generation')!r}, not {generation}")
    return [str(a) for a in body["feeds"]]


class HostTask:
    """One task of the hosting job: meet the others, publish the feed ports, run the workers until ``STOP``."""

    def __init__(self, plan: HostPlan) -> None:
        self.plan = plan

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark import BarrierTaskContext

        from pytimely.execute import run_process

        for _ in batches:
            pass
        plan = self.plan
        context = BarrierTaskContext.get()
        process = context.partitionId()
        host = "127.0.0.1" if plan.local else context.getTaskInfos()[process].address.rsplit(":", 1)[0]
        listener = socket.create_server((host, 0), backlog=max(16, plan.processes))
        feed = socket.create_server((host, 0), backlog=64)
        try:
            mine = {"cluster": _address(listener), "feed": _address(feed)}
            everyone = [json.loads(text) for text in context.allGather(json.dumps(mine))]
            if process == 0:
                body = {"generation": plan.generation, "feeds": [e["feed"] for e in everyone]}
                path = hosts_path(plan.own, plan.generation)
                path.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(path, encode(plan.secret, HOSTS_PURPOSE, body))
            hosts = tuple((e["cluster"].rsplit(":", 1)[0], int(e["cluster"].rsplit(":", 1)[1])) for e in everyone)
            config = Config(
                workers=plan.workers, processes=plan.processes, process=process, hosts=hosts, bind=host,
                secret=plan.secret, heartbeat=plan.heartbeat, timeout=plan.timeout,
            )  # fmt: skip
        except BaseException:
            listener.close()
            feed.close()
            raise
        feeder = Feeder(plan, process, feed, config.first_worker)
        feeder.start()
        try:
            run_process(feeder.job, config, listener=listener, recovery=plan.recovery())
        finally:
            feeder.close()
            # Its recovery store's writers have finished: a run taking the checkpoint over may open the store.
            exited = hosts_path(plan.own, plan.generation).with_suffix(f".exit-{process}")
            write_atomic(exited, b"")
        yield pa.RecordBatch.from_pydict({"process": pa.array([process], pa.int32())})


def _address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"{host}:{port}"
