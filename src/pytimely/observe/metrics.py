"""Prometheus metrics of a running computation, fed by its event log (:mod:`pytimely.observe.eventlog`).

:class:`Metrics` is an event-log sink: give it to ``execute(..., log=metrics)`` (with
:func:`~pytimely.observe.eventlog.tee` beside a file, if both are wanted) and :meth:`Metrics.serve` it on a
port; ``pytimely run --metrics-port P`` does both. The metrics are counted from the same events the
log carries, so the two cannot disagree:

- ``pytimely_records_total`` / ``pytimely_bytes_total``: records (and bytes, for arrays) per
  dataflow, operator, port and direction (``sent`` at an output, ``received`` at an input);
- ``pytimely_operator_busy_seconds_total`` and ``pytimely_operator_schedules_total``;
- ``pytimely_probe_frontier_lag_seconds``: how long each probe's frontier has stayed where it is;
- ``pytimely_epoch_latency_seconds``: a histogram of how long a probe's frontier stayed at each time;
- ``pytimely_queue_depth``: peak unconsumed messages and per-link queue peaks (``Worker.communication_stats``),
  and ``pytimely_link_bytes_sent_total``: bytes sent to each other process (what crosses the network);
- ``pytimely_membership_changes_total`` and ``pytimely_progress_batches_total``;
- ``pytimely_input_records_total`` and ``pytimely_epochs_done`` (what the progress line of
  :mod:`pytimely.observe.status` shows).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from pytimely.errors import InvalidArgument
from pytimely.observe.eventlog import Event
from pytimely.observe.status import Tracker

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class _Live(Collector):
    """Gauges computed at scrape time: probe frontier lag and queue depths."""

    def __init__(self, owner: Metrics) -> None:
        self._owner = owner

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """The current gauges."""
        owner = self._owner
        now = time.monotonic()
        lag = GaugeMetricFamily(
            "pytimely_probe_frontier_lag_seconds",
            "Seconds since the probe's frontier last moved",
            labels=["worker", "dataflow", "probe"],
        )
        depth = GaugeMetricFamily(
            "pytimely_queue_depth", "Peak queued messages, per worker and link", labels=["worker", "link"]
        )
        with owner._lock:
            held = list(owner._probe_since.items())
            stats = list(owner._stats.items())
        for (worker, dataflow, probe), (_, since) in held:
            lag.add_metric([str(worker), dataflow, probe], now - since)
        sent = CounterMetricFamily(
            "pytimely_link_bytes_sent", "Bytes sent to each other process (all channels)", labels=["worker", "link"]
        )
        for worker, communication in stats:
            depth.add_metric([str(worker), "unconsumed"], float(communication.get("max_unconsumed", 0)))
            for peer, link in communication.get("links", {}).items():
                depth.add_metric([str(worker), f"to process {peer}"], float(link.get("max_queued", 0)))
                sent.add_metric([str(worker), f"to process {peer}"], float(link.get("bytes_sent", 0)))
        tracker = owner._tracker
        epochs = GaugeMetricFamily(
            "pytimely_epochs_done", "The lowest integer frontier at any input port of the worker", labels=["worker"]
        )
        for worker in tracker.workers():
            done = tracker.epochs(worker)
            if done is not None:
                epochs.add_metric([str(worker)], done)
        yield lag
        yield depth
        yield sent
        yield epochs
        yield CounterMetricFamily("pytimely_input_records", "Records sent by source operators", value=tracker.records)


class Metrics:
    """An event-log sink counting Prometheus metrics, in a registry of its own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        labels = ["dataflow", "operator", "port", "direction"]
        self.records = Counter("pytimely_records", "Records per operator port", labels, registry=self.registry)
        self.bytes = Counter("pytimely_bytes", "Bytes per operator port (arrays only)", labels, registry=self.registry)
        self.busy = Counter(
            "pytimely_operator_busy_seconds", "Time in operator logic", ["dataflow", "operator"], registry=self.registry
        )
        self.schedules = Counter(
            "pytimely_operator_schedules", "Runs of operator logic", ["dataflow", "operator"], registry=self.registry
        )
        self.epoch_latency = Histogram(
            "pytimely_epoch_latency_seconds",
            "How long a probe's frontier stayed at each time",
            ["dataflow", "probe"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.membership = Counter(
            "pytimely_membership_changes", "Processes joining or leaving", ["kind"], registry=self.registry
        )
        self.progress = Counter(
            "pytimely_progress_batches", "Progress batches sent and applied", ["direction"], registry=self.registry
        )
        self._lock = threading.Lock()
        self._names: dict[tuple[str, int], str] = {}
        self._probe_since: dict[tuple[int, str, str], tuple[list[Any], float]] = {}
        self._stats: dict[int, dict[str, Any]] = {}
        self._server: Any = None
        self._tracker = Tracker()
        self.registry.register(_Live(self))

    def _operator(self, dataflow: str, op: int) -> str:
        name = self._names.get((dataflow, op))
        return f"{op}:{name}" if name is not None else str(op)

    def __call__(self, event: Event) -> None:
        """Count one event."""
        self._tracker(event)
        kind = event["event"]
        dataflow = event["dataflow"]
        if kind == "messages":
            labels = (dataflow, self._operator(dataflow, event["op"]), str(event["port"]), event["direction"])
            self.records.labels(*labels).inc(event["records"])
            if event["bytes"] is not None:
                self.bytes.labels(*labels).inc(event["bytes"])
        elif kind == "schedule":
            operator = self._operator(dataflow, event["op"])
            self.busy.labels(dataflow, operator).inc(event["duration"])
            self.schedules.labels(dataflow, operator).inc()
        elif kind == "frontier":
            self._frontier(event)
        elif kind == "operates":
            with self._lock:
                self._names[(dataflow, event["op"])] = event["name"]
            if "probe" in event["name"] and event["inputs"]:
                self._frontier({**event, "port": 0, "frontier": None})
        elif kind == "progress":
            self.progress.labels(event["direction"]).inc()
        elif kind == "membership":
            self.membership.labels(event["kind"]).inc()
        elif kind == "stats":
            with self._lock:
                self._stats[event["worker"]] = event["communication"]

    def _frontier(self, event: Event) -> None:
        dataflow = event["dataflow"]
        name = self._names.get((dataflow, event["op"]), "")
        if "probe" not in name or event["port"] != 0:
            return
        key = (event["worker"], dataflow, self._operator(dataflow, event["op"]))
        now = time.monotonic()
        with self._lock:
            before = self._probe_since.get(key)
            self._probe_since[key] = (event["frontier"], now)
        if before is not None and before[0] is not None:
            self.epoch_latency.labels(dataflow, key[2]).observe(now - before[1])

    def serve(self, port: int, address: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` over HTTP on ``port`` (0: a free one) from a daemon thread; return the port.

        Loopback by default: the endpoint is unauthenticated, so exposing it (``address="0.0.0.0"``) is a choice.
        """
        if type(port) is not int or not 0 <= port < 65536:
            raise InvalidArgument(f"metrics port must be an int in 0..65535, got {port!r}")
        server, _ = start_http_server(port, addr=address, registry=self.registry)
        self._server = server
        return int(server.server_address[1])

    def close(self) -> None:
        """Stop serving (if :meth:`serve` was called)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
