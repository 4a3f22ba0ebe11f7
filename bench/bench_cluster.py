"""Cluster mode on loopback with real processes, each figure against a baseline measured in the same run.

    python bench/bench_cluster.py [--quick] [--json] [--runs N] [--only a b c]
    python bench/bench_cluster.py --profile {wordcount,columnar,arrow,tuples} [-n N]   # where each thread's time goes
    python bench/bench_cluster.py --macs   # GB/s of the keyed MACs a ring payload could carry

(a) exchange throughput, ``-n 2 -w 1``: each worker sends every row to the other worker, both at once, with the
    cluster's default security (every header authenticated; payloads on the socket authenticated and encrypted with
    AES-256-GCM; payloads of 64 KiB and more through the shared-memory rings of processes on one host,
    authenticated with AES-GMAC and not encrypted; a1-socket: the same over TCP alone),
    (a1) as columnar batches (int64 arrays of 65,536 x 2, vectorized route on column 0, target 70% of the
    ceiling),
    (a1-columnar) the ``(int, int)`` records of a2 as two int64 columns: Arrow record batches of 65,536 rows
    (``key``, ``value``), routed by the key column as a NumPy view (target 50% of the ceiling), and
    (a2) as lists of ``(int, int)`` tuples (16,384 per batch, record-at-a-time route on field 0, target 90% of
    the Python floor below);
    the keys are chosen so that every row belongs to the other worker.
    Baseline: the raw-socket ceiling, a plain TCP connection between two processes carrying the same
    bytes each way that the cluster put on the wire (from ``communication_stats``), in buffers the size
    of one frame (``sendall`` on one thread, ``recv_into`` a preallocated buffer on another, in each
    process, as a cluster link does). The ratio is the share of that ceiling the cluster reaches.
    Second baseline for a2, the Python floor: two plain Python processes (a sending and a receiving thread each)
    that exchange the same batches without pytimely: each record routed by the same ``lambda r: r[0]`` and
    modulo into a list per worker, the other worker's list pickled (protocol 5), sent length-prefixed over
    TCP and unpickled with the collector off (the batch is freed before it comes back on, as pytimely's steps
    keep a collection from walking such batches). What CPython takes for the
    records themselves; pytimely's share of it is what its own machinery (framing, checks, encryption,
    progress) leaves.
    Every a row gives the best of the rounds and the median, and the median of each round's own ratio, in wall
    time and in CPU time (both processes, all threads, against both raw peers, and for a2 against the floor's
    two processes): CPU time moves far less with other programs on the cores.
    Why a2's wall-time share of the floor is lower on a quiet machine than under load: it is CPU, not a fixed
    wait. Quiet, each process has a core and its wall time is its CPU time, so the share in wall time is the
    share in CPU time. Under load every process waits for a core each time one of its threads wakes up; the
    floor's two threads block in ``sendall``/``recv`` on every batch, the same threads that do the record work,
    while pytimely's worker hands frames to queues and link threads and never blocks until its input is done,
    so it keeps its turn on the cores: the floor then takes more wall time per CPU second than pytimely (about
    8 against 5 at a load average of 30), and the share in wall time rises above the share in CPU time.
(b) word count scaling: the dataflow of ``examples/wordcount.py`` on 8,000,000 words drawn with seed 42
    from a Zipf-like (s = 1.1) vocabulary of 50,000 words, ``-n 2 -w 1`` against ``-n 1 -w 1``.
    Words go to workers by ``hash``; with ``PYTHONHASHSEED=0`` the two workers own 52% and 48% of them.
    (b2) the same pair of runs with the input moved out of the garbage collector's reach (``gc.freeze()``
    after reading): every full collection otherwise walks the whole word list.
    Each b row also gives the CPU time of one process against that of the busier of two (worker and I/O
    threads): the speed-up two idle cores would allow, a figure other programs on the machine move far less.
    Second baseline, the machine's own ceiling: the same counting (``Counter.update`` per batch of the same
    share, then the list of pairs) in plain Python processes without pytimely, two at once against one,
    started together once every process has read its share: what the machine gives two processes of the same
    work at that moment (a reference, not a bound: it is measured seconds apart from the dataflow's runs, on
    cores shared with other machines). Target: the speed-up at 90% of that ceiling or more; each row gives
    the best of the rounds and the median of each round's own share.
(c) epoch latency, ``-n 2 -w 1``: input -> exchange -> probe with 8 records per epoch over 1,000 epochs,
    from sending an epoch's records until the probe passes it, on worker 0; p50 and p99.
    Baseline: the same job on ``-n 1 -w 2`` (two workers in one process).

Every figure is the best of ``--runs`` rounds, and the figures a ratio compares take turns within each round
(cluster, then its raw-socket ceiling; one process, two processes, then the plain counting processes), so that
a machine whose speed drifts moves both sides of a ratio alike.

Only the measured phase is timed, inside the job: every job first builds its dataflow, reads its input
and passes a barrier (a dataflow whose probe completes once every worker has closed its input), then
times from its first send until its probe completes, so interpreter start-up, connecting and reading
are excluded. Processes are started with the ``PYTIMELY_*`` variables set here, and one
``PYTHONHASHSEED`` for all, running ``python -m pytimely run bench_cluster:JOB``.

Prints a Markdown table; ``--json`` prints one JSON object per row instead.
"""

from __future__ import annotations

import argparse
import ast
import functools
import gc
import json
import math
import os
import pickle
import secrets
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from harness import Column, Row, Table, best_of, parser, report, runs_of
from pytimely import Worker
from pytimely.communication.frame import HEADER, TAG
from pytimely.communication.payload import dumps
from pytimely.io import read_words

BENCH = Path(__file__).resolve()
COLUMNAR_ROWS = 1 << 16
TUPLE_ROWS = 1 << 14
WORDCOUNT_BATCH = 1 << 16
HASH_SEED = "0"
JOB_TIMEOUT = 120.0


# -- jobs: run by ``python -m pytimely run bench_cluster:NAME ARG ...`` in every process -----------------


def _barrier(worker: Worker) -> None:
    """Return once every worker has reached this call (the probe completes only when all inputs close)."""

    def build(scope: Any) -> tuple[Any, Any]:
        handle, stream = scope.new_input(name="barrier")
        return handle, stream.exchange(lambda x: x, name="barrier").probe()

    handle, probe = worker.dataflow(build)
    handle.close()
    worker.step_while(lambda: not probe.done())


def _bytes_sent(worker: Worker) -> tuple[int, int]:
    """Bytes and frames this process has put on the wire so far, over all its links."""
    links = worker.communication_stats().get("links", {})
    return sum(s["bytes_sent"] for s in links.values()), sum(s["frames_sent"] for s in links.values())


def columnar_batch(index: int, target: int, rows: int = COLUMNAR_ROWS) -> Any:
    """An ``(rows, 2)`` int64 array whose keys (column 0) all route to worker ``target`` of two."""
    values = np.arange(index * rows, (index + 1) * rows, dtype=np.int64)
    return np.column_stack([2 * values + target, values])


def arrow_batch(index: int, target: int, rows: int = TUPLE_ROWS) -> Any:
    """``rows`` ``(key, value)`` records as an Arrow record batch of two int64 columns, whose keys all route to
    worker ``target`` of two (what a typed input of ``(int, int)`` records hands the exchange)."""
    import pyarrow as pa

    values = np.arange(index * rows, (index + 1) * rows, dtype=np.int64)
    return pa.record_batch([pa.array(2 * values + target), pa.array(values)], names=["key", "value"])


def tuple_batch(index: int, target: int, rows: int = TUPLE_ROWS) -> list[tuple[int, int]]:
    """``rows`` ``(key, value)`` tuples whose keys all route to worker ``target`` of two."""
    return [(2 * i + target, i) for i in range(index * rows, (index + 1) * rows)]


def job_exchange(worker: Worker) -> Row:
    """Send ``BATCHES`` batches of ``KIND`` (columnar, arrow or tuples; ``ROWS`` a batch, optional) to the other
    worker; time until all arrived."""
    kind, batches = sys.argv[1], int(sys.argv[2])
    rows = int(sys.argv[3]) if len(sys.argv) > 3 else None
    other = (worker.index + 1) % worker.peers
    received = [0]

    def tally(_time: Any, batch: Any) -> None:
        received[0] += len(batch)

    def build(scope: Any) -> tuple[Any, Any]:
        handle, stream = scope.new_input(name="rows")
        # Both routes read the key, as a keyed exchange does; the data puts every key on the other worker.
        if kind == "columnar":
            routed = stream.exchange(lambda b: b[:, 0], vectorized=True, name="by-key")
        elif kind == "arrow":
            routed = stream.exchange(lambda b: b.column(0).to_numpy(), vectorized=True, name="by-key")
        else:
            routed = stream.exchange(lambda r: r[0], name="by-key")
        return handle, routed.inspect_batch(tally, name="tally").probe()

    handle, probe = worker.dataflow(build)
    # A few distinct batches, reused: the exchange copies each routed share, so reuse is safe.
    make = {"columnar": columnar_batch, "arrow": arrow_batch, "tuples": tuple_batch}[kind]
    pool = [make(worker.index * 4 + i, other) if rows is None else make(worker.index * 4 + i, other, rows)
            for i in range(4)]
    _barrier(worker)
    bytes_before, frames_before = _bytes_sent(worker)
    started = time.perf_counter()
    cpu_started = time.process_time()
    for i in range(batches):
        handle.send_batch(pool[i % len(pool)])
        # Frames reach the link only when a step releases them: stepping per batch keeps the link busy.
        worker.step()
    handle.close()
    worker.step_while(lambda: not probe.done())
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    bytes_after, frames_after = _bytes_sent(worker)
    links = worker.communication_stats().get("links", {}).values()
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "rows_received": received[0],
        "bytes_sent": bytes_after - bytes_before,
        "frames_sent": frames_after - frames_before,
        # Payloads placed in this process's rings (the rest of the big ones went on the socket), and payloads of
        # the peer's ring decoded where they lay or copied out.
        "ring_placed": sum(s.get("ring_frames", 0) for s in links),
        "ring_lent": sum(s.get("ring_lent", 0) for s in links),
        "ring_unlent": sum(s.get("ring_unlent", 0) for s in links),
        "ring_copied": sum(s.get("ring_copied", 0) for s in links),
    }


def job_wordcount(worker: Worker) -> Row:
    """The dataflow of ``examples/wordcount.py`` on file ``PATH``, timed from after reading to completion."""
    words = read_words(sys.argv[1], part=worker.index, parts=worker.peers)
    if sys.argv[2:] == ["freeze"]:
        # Move the long-lived input out of the collector's reach: a full collection otherwise walks
        # every word of it, and the pairs a run allocates trigger several.
        gc.freeze()

    def build(scope: Any) -> tuple[Any, Any, Any]:
        handle, stream = scope.new_input(name="words")
        counts = stream.count_by().exchange(lambda _: 0, name="gather")
        return handle, counts.capture(), counts.probe()

    handle, captured, probe = worker.dataflow(build)
    _barrier(worker)
    started = time.perf_counter()
    cpu_started = time.process_time()
    # As in examples/wordcount.py: every batch is sent before the first step.
    for start in range(0, len(words), WORDCOUNT_BATCH):
        handle.send_batch(words[start : start + WORDCOUNT_BATCH])
    handle.close()
    worker.step_while(lambda: not probe.done())
    seconds = time.perf_counter() - started
    # CPU seconds of the whole process (worker, send and receive threads): changed far less than wall
    # time by other programs taking turns on the cores.
    cpu = time.process_time() - cpu_started
    pairs = [pair for _, batch in captured for pair in batch]
    return {"seconds": seconds, "cpu_seconds": cpu, "distinct": len(pairs), "total": sum(c for _, c in pairs)}


def job_latency(worker: Worker) -> Row | None:
    """Per epoch, send ``PER_EPOCH`` records through an exchange and step until the probe passes the epoch."""
    epochs, per_epoch = int(sys.argv[1]), int(sys.argv[2])

    def build(scope: Any) -> tuple[Any, Any]:
        handle, stream = scope.new_input(name="ticks")
        return handle, stream.exchange(lambda x: x, name="spread").probe()

    handle, probe = worker.dataflow(build)
    data = list(range(per_epoch))
    _barrier(worker)
    samples = []
    for t in range(epochs):
        started = time.perf_counter()
        handle.send_batch(data)
        handle.advance_to(t + 1)
        worker.step_while(functools.partial(probe.less_than, t + 1))
        samples.append(time.perf_counter() - started)
    return {"samples": samples} if worker.index == 0 else None


def _sample_threads(stop: threading.Event, counts: dict[tuple[str, str], int], depth: int = 3) -> None:
    """Every millisecond, count the innermost ``depth`` Python frames of every other thread of this process."""
    me = threading.get_ident()
    while not stop.is_set():
        names = {t.ident: t.name for t in threading.enumerate()}
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            stack: list[str] = []
            f: Any = frame
            while f is not None and len(stack) < depth:
                stack.append(f"{Path(f.f_code.co_filename).name}:{f.f_code.co_name}:{f.f_lineno}")
                f = f.f_back
            key = (names.get(ident, "?").removeprefix("pytimely-"), " < ".join(stack))
            counts[key] = counts.get(key, 0) + 1
        time.sleep(0.001)


def _thread_cpu() -> dict[str, float]:
    """CPU seconds (user and system) of every thread of this process so far, by thread name (Linux ``/proc``)."""
    ticks = os.sysconf("SC_CLK_TCK")
    cpu: dict[str, float] = {}
    for thread in threading.enumerate():
        try:
            # Fields after the command name, which is in parentheses: utime and stime are the 12th and 13th.
            fields = Path(f"/proc/self/task/{thread.native_id}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        cpu[thread.name.removeprefix("pytimely-")] = (int(fields[11]) + int(fields[12])) / ticks
    return cpu


def job_profiled(worker: Worker) -> Row:
    """Run job ``NAME`` (the first argument; the rest are its own) under a sampler of every thread's stack, and
    take every thread's CPU time over it: samples tell where a thread is, CPU time whether it works there."""
    job = globals()[sys.argv[1]]
    del sys.argv[1]
    counts: dict[tuple[str, str], int] = {}
    stop = threading.Event()
    sampler = threading.Thread(target=_sample_threads, args=(stop, counts), daemon=True, name="sampler")
    cpu_before = _thread_cpu()
    sampler.start()
    try:
        row = job(worker)
    finally:
        stop.set()
        sampler.join()
    cpu_after = _thread_cpu()
    cpu = {name: round(seconds - cpu_before.get(name, 0.0), 3) for name, seconds in cpu_after.items()}
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:15]
    top_rows = [(n, t, st) for (t, st), n in top]
    return {**(row or {}), "samples": sum(counts.values()), "thread_cpu": cpu, "top": top_rows}


def profile(kind: str, processes: int, words: int) -> None:
    """Print where each thread of each process spends its time in one run of a job (a sampling profile)."""
    with tempfile.TemporaryDirectory() as tmp:
        if kind == "wordcount":
            path = Path(tmp) / "words.txt"
            make_text(path, words)
            args = ["job_wordcount", str(path), "freeze"]
        else:
            # As many batches as the row of that kind sends (a2: 96, a1 and a1-columnar: 384).
            args = ["job_exchange", kind, "96" if kind == "tuples" else "384"]
        got = run_job("job_profiled", args, processes, 1)
    for index, row in enumerate(got):
        print(f"process {index}: {row['seconds']:.3f} s timed, {row['samples']} samples (thread, innermost frames)")
        print("  CPU seconds by thread: " + ", ".join(f"{t} {s:.3f}" for t, s in sorted(row["thread_cpu"].items())))
        for n, thread, stack in row["top"]:
            print(f"  {n:6d}  {thread:10s} {stack}")


# -- the ceilings: ``bench_cluster.py --raw-peer ROLE SEND RECV CHUNK``, ``--python-peer ROLE BATCHES`` --------


def _peer_socket(role: str) -> socket.socket:
    """The connected socket of one end of a ceiling pair, once both ends are ready (``listen`` prints its port)."""
    if role == "listen":
        server = socket.create_server(("127.0.0.1", 0))
        print(server.getsockname()[1], flush=True)
        sock, _ = server.accept()
        server.close()
    else:
        sock = socket.create_connection(("127.0.0.1", int(role.removeprefix("connect:"))))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # Both ends start only once both are connected and ready, as the cluster jobs do behind their barrier.
    sock.sendall(b"!")
    if sock.recv(1) != b"!":
        raise ConnectionError("the other peer went away")
    return sock


def _recv_exactly(sock: socket.socket, buffer: memoryview) -> None:
    """Fill ``buffer`` from ``sock``."""
    got = 0
    while got < len(buffer):
        n = sock.recv_into(buffer[got:])
        if n == 0:
            raise ConnectionError(f"the other peer closed after {got} of {len(buffer)} bytes")
        got += n


def raw_peer(role: str, send_bytes: int, recv_bytes: int, chunk: int) -> None:
    """One end of a plain TCP connection: send and receive at once, then print the seconds it took."""
    sock = _peer_socket(role)
    out = bytes(chunk)
    buffer = memoryview(bytearray(chunk))

    def send() -> None:
        left = send_bytes
        while left:
            n = min(chunk, left)
            sock.sendall(out if n == chunk else out[:n])
            left -= n

    started = time.perf_counter()
    cpu_started = time.process_time()
    sender = threading.Thread(target=send)
    sender.start()
    got = 0
    while got < recv_bytes:
        n = sock.recv_into(buffer, min(chunk, recv_bytes - got))
        if n == 0:
            raise ConnectionError(f"the other raw peer closed after {got} of {recv_bytes} bytes")
        got += n
    sender.join()
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu_started  # both threads, kernel time included
    sock.close()
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu}), flush=True)


def python_peer(role: str, batches: int) -> None:
    """One end of a2's Python floor: the same tuple batches routed one record at a time by the same key, pickled,
    sent over plain TCP and unpickled on the other side, with no pytimely; print the seconds it took."""
    sock = _peer_socket(role)
    index = 0 if role == "listen" else 1
    other = 1 - index
    pool = [tuple_batch(index * 4 + i, other) for i in range(4)]
    route = lambda r: r[0]  # noqa: E731 - the route a2's dataflow uses
    size = struct.Struct("<Q")

    def send() -> None:
        for i in range(batches):
            buckets: list[list[Any]] = [[], []]
            appends = [b.append for b in buckets]
            for r in pool[i % len(pool)]:
                appends[route(r) % 2](r)
            body = pickle.dumps(buckets[other], protocol=5)
            sock.sendall(size.pack(len(body)) + body)

    started = time.perf_counter()
    cpu_started = time.process_time()
    sender = threading.Thread(target=send)
    sender.start()
    head = memoryview(bytearray(size.size))
    rows = 0
    for _ in range(batches):
        _recv_exactly(sock, head)
        body = memoryview(bytearray(size.unpack(head)[0]))
        _recv_exactly(sock, body)
        # Off while the batch's tuples are built and counted, so no collection walks them (pytimely's steps
        # keep one from walking such batches too): otherwise they set off young collections every 700 tuples.
        gc.disable()
        try:
            rows += len(pickle.loads(body))
        finally:
            gc.enable()
    sender.join()
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu_started  # both threads
    sock.close()
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "rows": rows}), flush=True)


def _peer_pair(mode: str, listener_args: list[str], connector_args: list[str]) -> list[Row]:
    """Run a ceiling's two ends (``mode`` is ``--raw-peer`` or ``--python-peer``), the listener first; what each
    printed."""
    command = [sys.executable, str(BENCH), mode]
    listener = subprocess.Popen([*command, "listen", *listener_args], stdout=subprocess.PIPE, text=True)
    procs = [listener]
    results: list[Row] = []
    try:
        assert listener.stdout is not None
        port = int(listener.stdout.readline())
        connector = subprocess.Popen([*command, f"connect:{port}", *connector_args], stdout=subprocess.PIPE, text=True)
        procs.append(connector)
        for proc in (listener, connector):
            out, _ = proc.communicate(timeout=JOB_TIMEOUT)
            if proc.returncode != 0:
                raise RuntimeError(f"a ceiling peer ({mode}) failed with status {proc.returncode}")
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return results


def raw_ceiling(sent: tuple[int, int], chunk: int, cpu: list[float] | None = None) -> float:
    """Seconds for two processes to carry ``sent[0]`` bytes one way and ``sent[1]`` the other over TCP (the CPU
    seconds of both are appended to ``cpu``)."""
    ends = _peer_pair("--raw-peer", [str(sent[0]), str(sent[1]), str(chunk)], [str(sent[1]), str(sent[0]), str(chunk)])
    if cpu is not None:
        cpu.append(sum(float(r["cpu_seconds"]) for r in ends))
    return max(float(r["seconds"]) for r in ends)


def python_floor(batches: int, per_batch: int, cpu: list[float] | None = None) -> float:
    """Seconds for two plain Python processes to exchange a2's records (route, pickle, TCP, unpickle); the CPU
    seconds of both are appended to ``cpu``."""
    ends = _peer_pair("--python-peer", [str(batches)], [str(batches)])
    if [r["rows"] for r in ends] != [batches * per_batch] * 2:
        raise AssertionError(f"python floor: rows received {[r['rows'] for r in ends]}")
    if cpu is not None:
        cpu.append(sum(float(r["cpu_seconds"]) for r in ends))
    return max(float(r["seconds"]) for r in ends)


# -- starting clusters ----------------------------------------------------------------------------------


def _free_ports(count: int) -> list[int]:
    """Ports free now (held together while chosen, so they are distinct)."""
    socks = [socket.create_server(("127.0.0.1", 0)) for _ in range(count)]
    try:
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def run_job(job: str, args: list[str], processes: int, workers: int, **extra: str) -> list[Any]:
    """Run ``bench_cluster:job`` on ``processes`` x ``workers``; every worker's result, by global index."""
    hosts = ",".join(f"127.0.0.1:{p}" for p in _free_ports(processes))
    secret = secrets.token_hex(16)
    procs = []
    for process in range(processes):
        env = dict(os.environ)
        env.pop("PYTIMELY_HOSTFILE", None)
        env.pop("PYTIMELY_SECRET_FILE", None)
        env.update(
            PYTIMELY_PROCESSES=str(processes),
            PYTIMELY_PROCESS=str(process),
            PYTIMELY_WORKERS=str(workers),
            PYTIMELY_HOSTS=hosts,
            PYTIMELY_SECRET=secret,
            PYTHONHASHSEED=HASH_SEED,
            PYTHONPATH=os.pathsep.join(filter(None, [str(BENCH.parent), env.get("PYTHONPATH")])),
            **extra,
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "pytimely", "run", f"{BENCH.stem}:{job}", *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results: dict[int, Any] = {}
    deadline = time.monotonic() + JOB_TIMEOUT
    try:
        for process, proc in enumerate(procs):
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            if proc.returncode != 0:
                raise RuntimeError(f"{job} on -n {processes} -w {workers}: process {process} failed:\n{err}")
            for line in out.splitlines():
                if line.startswith("worker "):
                    index, _, text = line.removeprefix("worker ").partition(": ")
                    results[int(index)] = ast.literal_eval(text)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return [results.get(i) for i in range(processes * workers)]


# -- (a) exchange throughput ----------------------------------------------------------------------------


SECURITY = (
    "every frame's header authenticated (BLAKE2b tag); payloads on the socket authenticated and encrypted "
    "(AES-256-GCM), payloads in a shared-memory ring authenticated (AES-GMAC), not encrypted (the defaults)"
)


def exchange_rows(quick: bool, runs: int, cases_only: tuple[str, ...] = ()) -> list[Row]:
    """Throughput of columnar and tuple exchanges between two processes, against the raw-socket ceiling (only the
    rows ``cases_only`` names, if any)."""
    rows = []
    cases = [
        ("a1", "columnar", 48 if quick else 384, COLUMNAR_ROWS, "int64 arrays, 65,536 x 2 per batch", 0.7),
        (
            "a1-columnar",
            "arrow",
            48 if quick else 384,
            COLUMNAR_ROWS,
            "(int, int) records as Arrow record batches of two int64 columns, 65,536 per batch",
            0.5,
        ),
        ("a2", "tuples", 16 if quick else 96, TUPLE_ROWS, "lists of (int, int), 16,384 per batch", 0.9),
    ]
    for ident, kind, batches, per_batch, what, share in cases:
        if cases_only and ident not in cases_only:
            continue
        args = [kind, str(batches), str(per_batch)]
        make = {"columnar": columnar_batch, "arrow": arrow_batch, "tuples": tuple_batch}[kind]
        chunk = HEADER.size + dumps((0, make(0, 1, per_batch)))[1] + TAG
        seen: list[tuple[tuple[int, int], int]] = []
        cpu: list[float] = []
        raw_cpu: list[float] = []
        floor_cpu: list[float] = []
        cluster = functools.partial(_exchange_seconds, args, batches * per_batch, seen, cpu)
        # The ceiling carries the bytes the cluster run just before it put on the wire; each round measures the
        # cluster and its ceiling side by side. For a1 also every byte over the socket (what the shared-memory
        # ring saves).
        measures: dict[str, Callable[[], float]] = {
            "cluster": cluster,
            "raw": functools.partial(_raw_after, seen, chunk, raw_cpu),
        }
        if ident == "a1":
            measures["socket_only"] = functools.partial(cluster, PYTIMELY_SHARED_MEMORY="0")
        if ident == "a2":
            # What Python itself takes for the same records: a second ceiling, for the share left to pytimely.
            measures["python_floor"] = functools.partial(python_floor, batches, per_batch, floor_cpu)
        rounds = _rounds(runs, measures)
        timed = {name: min(times) for name, times in rounds.items()}
        seconds, raw = timed["cluster"], timed["raw"]
        sent, frames = seen[-1]
        total = sum(sent)
        rows.append(
            {
                "id": ident,
                "workload": f"exchange -n 2 -w 1, {what}, both ways",
                "records": 2 * batches * per_batch,
                "bytes": total,
                "frames": frames,
                "seconds": round(seconds, 4),
                "median_seconds": round(statistics.median(rounds["cluster"]), 4),
                "bytes_per_s": round(total / seconds),
                "records_per_s": round(2 * batches * per_batch / seconds),
                "security": SECURITY,
                "baseline": f"raw TCP socket pair, same bytes, {chunk:,}-byte buffers, no cryptography",
                "baseline_seconds": round(raw, 4),
                "baseline_median_seconds": round(statistics.median(rounds["raw"]), 4),
                "baseline_bytes_per_s": round(total / raw),
                "ratio_of_ceiling": round(raw / seconds, 3),
                # Each round's own ratio (its cluster run against the ceiling run beside it), the median of them.
                "median_ratio_of_ceiling": round(_median_ratio(rounds["raw"], rounds["cluster"]), 3),
                # CPU seconds of both processes: moved far less than wall time by other programs on the cores.
                "cpu_seconds": round(min(cpu), 4),
                "baseline_cpu_seconds": round(min(raw_cpu), 4),
                "median_cpu_ratio_of_ceiling": round(_median_ratio(raw_cpu, cpu), 3),
            }
        )
        row = rows[-1]
        if ident == "a1":
            row["socket_only_seconds"] = round(timed["socket_only"], 4)
            row["socket_only_ratio_of_ceiling"] = round(raw / timed["socket_only"], 3)
            row["ring_speedup"] = round(row["socket_only_seconds"] / seconds, 3)
        if ident == "a2":
            floor = timed["python_floor"]
            row["python_floor_seconds"] = round(floor, 4)
            row["ratio_of_python_floor"] = round(floor / seconds, 3)
            row["median_ratio_of_python_floor"] = round(_median_ratio(rounds["python_floor"], rounds["cluster"]), 3)
            # In CPU time (both processes, all threads): the work each side does, whatever else runs on the cores.
            row["python_floor_cpu_seconds"] = round(min(floor_cpu), 4)
            row["median_cpu_ratio_of_python_floor"] = round(_median_ratio(floor_cpu, cpu), 3)
            row["python_floor_ratio_of_ceiling"] = round(raw / floor, 4)
            row["target"] = f">= {share:.0%} of the Python floor"
            row["met"] = floor / seconds >= share
        else:
            row["target"] = f">= {share:.0%} of ceiling"
            row["met"] = raw / seconds >= share
    return rows


def _rounds(runs: int, measures: dict[str, Callable[[], float]]) -> dict[str, list[float]]:
    """Every measure's result in each of ``runs`` rounds (at least one), the measures taking turns within a round
    (as :func:`harness.taking_turns` does), so that the best and the median can both be told."""
    results: dict[str, list[float]] = {name: [] for name in measures}
    for _ in range(max(1, runs)):
        for name, measure in measures.items():
            results[name].append(float(measure()))
    return results


def _median_ratio(numerators: list[float], denominators: list[float]) -> float:
    """The median over rounds of one round's ``numerator / denominator``."""
    return statistics.median(n / d for n, d in zip(numerators, denominators, strict=True))


def _exchange_seconds(
    args: list[str],
    expected: int,
    seen: list[tuple[tuple[int, int], int]],
    cpu: list[float] | None = None,
    **env: str,
) -> float:
    """One run of ``job_exchange`` with ``args`` (and ``env`` set): its seconds, after checking every row arrived.

    Without ``env`` the bytes each process sent and the frames of both are appended to ``seen``, and the CPU
    seconds of both processes (worker and link threads) to ``cpu``."""
    got = run_job("job_exchange", args, 2, 1, **env)
    if [r["rows_received"] for r in got] != [expected, expected]:
        raise AssertionError(f"{args}: rows received {[r['rows_received'] for r in got]}, expected {expected}")
    if not env:
        seen.append(((got[0]["bytes_sent"], got[1]["bytes_sent"]), got[0]["frames_sent"] + got[1]["frames_sent"]))
        if cpu is not None:
            cpu.append(sum(float(r["cpu_seconds"]) for r in got))
    return _cluster_seconds(got)


def _raw_after(seen: list[tuple[tuple[int, int], int]], chunk: int, cpu: list[float] | None = None) -> float:
    """The raw-socket ceiling for the bytes of the latest cluster run in ``seen``."""
    return raw_ceiling(seen[-1][0], chunk, cpu)


def _cluster_seconds(results: list[Row]) -> float:
    """The exchange phase ends when the slower worker's probe completes."""
    return max(float(r["seconds"]) for r in results)


# -- (b) word count scaling ------------------------------------------------------------------------------


def make_text(path: Path, words: int, vocabulary: int = 50_000, s: float = 1.1) -> tuple[int, int]:
    """Write ``words`` Zipf-like words (seed 42), 16 a line; return (total, distinct)."""
    rng = np.random.default_rng(42)
    weights = np.arange(1, vocabulary + 1, dtype=np.float64) ** -s
    draws = rng.choice(vocabulary, size=words, p=weights / weights.sum())
    names = [f"w{k}" for k in range(vocabulary)]
    drawn = [names[k] for k in draws.tolist()]
    lines = [" ".join(drawn[i : i + 16]) for i in range(0, words, 16)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return words, int(np.count_nonzero(np.bincount(draws, minlength=vocabulary)))


def count_peer(path: str, part: int, parts: int, freeze: bool) -> None:
    """One plain-Python counting process (no pytimely): read the share, wait for a line on stdin, count, print
    the seconds the counting took."""
    from collections import Counter

    words = read_words(path, part=part, parts=parts)
    if freeze:
        gc.freeze()  # the words only, as job_wordcount does
    batches = [words[i : i + WORDCOUNT_BATCH] for i in range(0, len(words), WORDCOUNT_BATCH)]
    print("ready", flush=True)
    sys.stdin.readline()
    started = time.perf_counter()
    counts: Counter[str] = Counter()
    for batch in batches:
        counts.update(batch)
    pairs = list(counts.items())
    print(json.dumps({"seconds": time.perf_counter() - started, "distinct": len(pairs)}), flush=True)


def count_ceiling(path: Path, processes: int, freeze: bool) -> float:
    """Seconds for ``processes`` plain-Python processes to count their shares of ``path``, started together."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(BENCH), "--count-peer", str(path), str(p), str(processes), str(int(freeze))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": HASH_SEED},
        )
        for p in range(processes)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdin is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("a counting process failed before it was ready")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        seconds = []
        for proc in procs:
            out, _ = proc.communicate(timeout=JOB_TIMEOUT)
            if proc.returncode != 0:
                raise RuntimeError(f"a counting process failed with status {proc.returncode}")
            seconds.append(float(json.loads(out.strip().splitlines()[-1])["seconds"]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return max(seconds)


def wordcount_rows(quick: bool, runs: int) -> list[Row]:
    """Speed-up of the counting phase on two processes over one; again with the input frozen out of the GC."""
    words = 300_000 if quick else 8_000_000
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "words.txt"
        expected = make_text(path, words)
        for ident, extra, note in (("b", [], ""), ("b2", ["freeze"], ", input gc.freeze()d after reading")):

            def count(processes: int, extra: list[str] = extra) -> tuple[float, float]:
                got = run_job("job_wordcount", [str(path), *extra], processes, 1)
                if (got[0]["total"], got[0]["distinct"]) != expected:
                    raise AssertionError(f"word count on {processes} process(es): {got[0]}, expected {expected}")
                return float(got[0]["seconds"]), max(float(r["cpu_seconds"]) for r in got)

            def plain(processes: int, freeze: bool = bool(extra)) -> tuple[float, float]:
                return count_ceiling(path, processes, freeze), 0.0

            # One and two processes side by side, round after round, and the plain counting processes with them.
            results: dict[str, list[tuple[float, float]]] = {"1": [], "2": [], "plain 1": [], "plain 2": []}
            measures = {
                "1": functools.partial(count, 1),
                "2": functools.partial(count, 2),
                "plain 1": functools.partial(plain, 1),
                "plain 2": functools.partial(plain, 2),
            }
            for _ in range(max(1, runs)):
                for name, measure in measures.items():
                    results[name].append(measure())
            fastest = {name: min(got, key=lambda r: r[0]) for name, got in results.items()}
            timed = {n: fastest[str(n)][0] for n in (1, 2)}
            cpu = {n: fastest[str(n)][1] for n in (1, 2)}
            speedup = timed[1] / timed[2]
            plain_seconds = {n: fastest[f"plain {n}"][0] for n in (1, 2)}
            ceiling = plain_seconds[1] / plain_seconds[2]
            # Each round's own share: its pytimely speed-up over the ceiling measured beside it.
            shares = [
                (one[0] / two[0]) / (p1[0] / p2[0])
                for one, two, p1, p2 in zip(
                    results["1"], results["2"], results["plain 1"], results["plain 2"], strict=True
                )
            ]
            rows.append(
                {
                    "id": ident,
                    "workload": f"word count -n 2 -w 1, {words:,} Zipf-like words{note}",
                    "records": words,
                    "seconds": round(timed[2], 4),
                    "records_per_s": round(words / timed[2]),
                    "baseline": f"the same job, -n 1 -w 1{note}",
                    "baseline_seconds": round(timed[1], 4),
                    "speedup": round(speedup, 3),
                    # The speed-up two idle cores would allow: one process's CPU time over the busier of two.
                    "cpu_seconds": round(cpu[2], 4),
                    "baseline_cpu_seconds": round(cpu[1], 4),
                    "cpu_speedup": round(cpu[1] / cpu[2], 3),
                    "plain_seconds": round(plain_seconds[2], 4),
                    "plain_baseline_seconds": round(plain_seconds[1], 4),
                    "machine_ceiling": round(ceiling, 3),
                    "share_of_ceiling": round(speedup / ceiling, 3),
                    "median_share_of_ceiling": round(statistics.median(shares), 3),
                    "target": ">= 90% of the machine's two-process ceiling",
                    "met": speedup / ceiling >= 0.9,
                }
            )
    return rows


# -- (c) epoch latency ----------------------------------------------------------------------------------


def latency_rows(quick: bool) -> list[Row]:
    """Per-epoch latency across two processes, against two workers in one process."""
    epochs, per_epoch, warmup = (200 if quick else 1000), 8, 20
    cuts = {}
    for processes, workers in ((2, 1), (1, 2)):
        samples = run_job("job_latency", [str(epochs + warmup), str(per_epoch)], processes, workers)[0]["samples"]
        q = statistics.quantiles(samples[warmup:], n=100)
        cuts[processes] = (q[49] * 1e3, q[98] * 1e3)
    p50, p99 = cuts[2]
    return [
        {
            "id": "c",
            "workload": f"epoch latency -n 2 -w 1, {per_epoch} records/epoch",
            "epochs": epochs,
            "p50_ms": round(p50, 3),
            "p99_ms": round(p99, 3),
            "baseline": "the same job, -n 1 -w 2 (in-process)",
            "baseline_p50_ms": round(cuts[1][0], 3),
            "baseline_p99_ms": round(cuts[1][1], 3),
            "p50_vs_baseline": round(p50 / cuts[1][0], 2),
            "target": "p50 < 3 ms",
            "met": p50 < 3.0,
        }
    ]


# -- keyed MACs for the ring: ``bench_cluster.py --macs`` ------------------------------------------------


def mac_candidates() -> dict[str, Callable[[memoryview, int], object]]:
    """Keyed MACs a ring payload could carry, each taking the payload and the frame's number (its nonce), and two
    references: AES-256-GCM encryption (what the socket does) and a plain copy."""
    import hashlib
    import hmac

    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.poly1305 import Poly1305

    key = secrets.token_bytes(32)
    aead = AESGCM(key)
    out = bytearray(MAC_SIZES[-1] + 16)

    def gmac(payload: memoryview, seq: int) -> object:
        sealer = Cipher(algorithms.AES(key), modes.GCM(seq.to_bytes(12, "little"))).encryptor()
        sealer.authenticate_additional_data(payload)
        sealer.finalize()
        return sealer.tag

    def poly1305(payload: memoryview, seq: int) -> object:
        # A one-time key per frame from ChaCha20 under the frame's number, as ChaCha20-Poly1305 makes it.
        one_time = Cipher(algorithms.ChaCha20(key, seq.to_bytes(16, "little")), None).encryptor().update(bytes(32))
        return Poly1305.generate_tag(one_time, payload)

    return {
        "AES-GMAC (AES-GCM, no plaintext)": gmac,
        "Poly1305 (ChaCha20 one-time key)": poly1305,
        "HMAC-SHA256": lambda payload, _seq: hmac.digest(key, payload, "sha256"),
        "keyed BLAKE2b-128": lambda payload, _seq: hashlib.blake2b(payload, key=key, digest_size=16).digest(),
        "reference: AES-256-GCM encryption": lambda payload, seq: aead.encrypt_into(
            seq.to_bytes(12, "little"), payload, b"", memoryview(out)[: len(payload) + 16]
        ),
        "reference: copy": lambda payload, _seq: out.__setitem__(slice(0, len(payload)), payload),
    }


MAC_SIZES = (1 << 16, 1 << 20, 8 << 20)
"""Payload sizes timed by ``--macs``: the smallest that goes through a ring, a1's frames, the default ring's size."""


def mac_rows(runs: int) -> list[Row]:
    """GB/s of each candidate at each of :data:`MAC_SIZES` (one core, the best of ``runs``, 256 MiB a run)."""
    rows = []
    for name, mac in mac_candidates().items():
        row: Row = {"id": "mac", "mac": name}
        for size in MAC_SIZES:
            payload = memoryview(secrets.token_bytes(size))
            count = max(4, (256 << 20) // size)

            def timed(
                mac: Callable[[memoryview, int], object] = mac, payload: memoryview = payload, count: int = count
            ) -> None:
                for seq in range(count):
                    mac(payload, seq)

            seconds, _ = best_of(runs, timed)
            row[f"gb_per_s_{size >> 10}k"] = round(size * count / seconds / 1e9, 2)
        rows.append(row)
    return rows


MAC_COLUMNS = [
    Column("keyed MAC", "mac"),
    *(Column(f"{size >> 10} KiB", f"gb_per_s_{size >> 10}k", "{:.1f}") for size in MAC_SIZES),
]


# -- report ---------------------------------------------------------------------------------------------


ROWS = ("a", "b", "c")
"""The row groups: exchange throughput, word count scaling, epoch latency."""
EXCHANGE_ROWS = ("a1", "a1-columnar", "a2")
"""The rows of group a, each of which ``--only`` may also name alone."""


def run(quick: bool, runs: int, only: tuple[str, ...] = ROWS) -> list[Row]:
    """The measurements of the groups ``only``, as table rows (the best of ``runs`` runs each), each with the
    machine's load average (1 minute) before and after it: other programs on the cores move every figure."""
    cases = tuple(name for name in only if name in EXCHANGE_ROWS)
    if cases:
        only = ("a", *(name for name in only if name in ROWS and name != "a"))
    groups = {
        "a": lambda: exchange_rows(quick, runs, cases),
        "b": lambda: wordcount_rows(quick, runs),
        "c": lambda: latency_rows(quick),
    }
    rows: list[Row] = []
    for group in only:
        before = round(os.getloadavg()[0], 2)
        made = groups[group]()
        after = round(os.getloadavg()[0], 2)
        for row in made:
            row["load_before"], row["load_after"] = before, after
        rows += made
    return rows


def figures(row: Row) -> dict[str, float]:
    """The numeric figures of a row."""
    return {k: v for k, v in row.items() if isinstance(v, int | float) and not isinstance(v, bool)}


COLUMNS = [
    Column(header, header)
    for header in ("", "workload", "pytimely", "rate", "baseline", "baseline figure", "ratio", "target")
]


def table_lines(row: Row) -> list[Row]:
    """The table's lines of a row, as cells by column (an a row adds a line for each second baseline it has)."""
    target = f"{row['target']}: {'met' if row['met'] else 'missed'}" if "target" in row else None
    if row["id"] == "c":
        return [{
            "": "c", "workload": row["workload"],
            "pytimely": f"p50 {row['p50_ms']:.3f} ms, p99 {row['p99_ms']:.3f} ms", "rate": f"{row['epochs']} epochs",
            "baseline": row["baseline"],
            "baseline figure": f"p50 {row['baseline_p50_ms']:.3f} ms, p99 {row['baseline_p99_ms']:.3f} ms",
            "ratio": f"p50 {row['p50_vs_baseline']:.2f}x baseline", "target": target,
        }]  # fmt: skip
    if row["id"].startswith("b"):
        return [{
            "": row["id"], "workload": row["workload"], "pytimely": f"{row['seconds']:.3f} s",
            "rate": f"{row['records_per_s'] / 1e6:.2f} M words/s", "baseline": row["baseline"],
            "baseline figure": f"{row['baseline_seconds']:.3f} s",
            "ratio": f"speed-up {row['speedup']:.2f}x (CPU time: {row['cpu_speedup']:.2f}x; machine ceiling "
            f"{row['machine_ceiling']:.2f}x: {row['share_of_ceiling']:.0%} of it, median of rounds "
            f"{row['median_share_of_ceiling']:.0%})",
            "target": target,
        }]  # fmt: skip
    lines = [{
        "": row["id"], "workload": row["workload"],
        "pytimely": f"{row['seconds']:.3f} s (median {row['median_seconds']:.3f} s), {row['bytes'] / 1e6:.1f} MB",
        "rate": f"{row['bytes_per_s'] / 1e6:.0f} MB/s, {row['records_per_s'] / 1e6:.2f} M rec/s",
        "baseline": row["baseline"],
        "baseline figure": f"{row['baseline_seconds']:.3f} s (median {row['baseline_median_seconds']:.3f} s), "
        f"{row['baseline_bytes_per_s'] / 1e6:.0f} MB/s",
        "ratio": f"{row['ratio_of_ceiling']:.0%} of ceiling (median of rounds {row['median_ratio_of_ceiling']:.0%}; "
        f"in CPU time {row['median_cpu_ratio_of_ceiling']:.0%})",
        "target": target,
    }]  # fmt: skip
    if "python_floor_seconds" in row:
        lines.append({
            "": f"{row['id']}-python",
            "workload": "the same records in plain Python: routed one at a time by the same key, pickled, sent over "
            "TCP, unpickled (no pytimely, no cryptography)",
            "pytimely": f"{row['python_floor_seconds']:.3f} s",
            "rate": f"{row['records'] / row['python_floor_seconds'] / 1e6:.2f} M rec/s",
            "ratio": f"pytimely at {row['ratio_of_python_floor']:.0%} of it (median of rounds "
            f"{row['median_ratio_of_python_floor']:.0%}; in CPU time {row['median_cpu_ratio_of_python_floor']:.0%}); "
            f"it is at {row['python_floor_ratio_of_ceiling']:.1%} of the "
            "raw-socket ceiling",
        })  # fmt: skip
    if "socket_only_seconds" in row:
        lines.append({
            "": f"{row['id']}-socket", "workload": "the same, PYTIMELY_SHARED_MEMORY=0 (no ring: every byte over TCP)",
            "pytimely": f"{row['socket_only_seconds']:.3f} s",
            "rate": f"{row['bytes'] / row['socket_only_seconds'] / 1e6:.0f} MB/s", "baseline": "the same ceiling",
            "ratio": f"{row['socket_only_ratio_of_ceiling']:.0%} of ceiling (the ring: {row['ring_speedup']:.2f}x)",
        })  # fmt: skip
    return lines


def main() -> None:
    """Run and print."""
    command = parser(__doc__, runs=3)
    command.add_argument(
        "--profile",
        choices=["wordcount", "columnar", "arrow", "tuples"],
        help="instead of the table, sample every thread's stack during one run of that job and print the top",
    )
    command.add_argument("-n", type=int, default=2, help="processes for --profile (default 2)")
    command.add_argument(
        "--only",
        nargs="+",
        choices=ROWS + EXCHANGE_ROWS,
        default=list(ROWS),
        help="run only these groups of rows: a (exchange), b (word count), c (latency), or rows of a alone",
    )
    command.add_argument("--macs", action="store_true", help="instead of the table, time keyed MACs for the ring")
    command.add_argument("--raw-peer", nargs=4, help=argparse.SUPPRESS)
    command.add_argument("--count-peer", nargs=4, help=argparse.SUPPRESS)
    command.add_argument("--python-peer", nargs=2, help=argparse.SUPPRESS)
    args = command.parse_args()
    if args.profile:
        profile(args.profile, args.n, 300_000 if args.quick else 8_000_000)
        return
    if args.macs:
        note = f"load average {os.getloadavg()[0]:.2f}; GB/s on one core, best of the runs"
        report(mac_rows(runs_of(args)), Table(MAC_COLUMNS), as_json=args.json, note=note)
        return
    if args.count_peer:
        path, part, parts, freeze = args.count_peer
        count_peer(path, int(part), int(parts), freeze == "1")
        return
    if args.python_peer:
        python_peer(args.python_peer[0], int(args.python_peer[1]))
        return
    if args.raw_peer:
        role, send_bytes, recv_bytes, chunk = args.raw_peer
        raw_peer(role, int(send_bytes), int(recv_bytes), int(chunk))
        return
    runs = runs_of(args)
    rows = run(args.quick, runs, tuple(args.only))
    for row in rows:
        bad = [k for k, v in figures(row).items() if not (math.isfinite(v) and v > 0)]
        if bad:
            raise AssertionError(f"row {row['id']}: figures {bad} are not positive and finite")
    note = (
        f"best of {runs} runs (latency: one run); load average before {rows[0]['load_before']}, "
        f"after {rows[-1]['load_after']}"
    )
    report(rows, Table(COLUMNS, [line for row in rows for line in table_lines(row)]), as_json=args.json, note=note)


if __name__ == "__main__":
    main()
