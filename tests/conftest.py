"""Fixtures shared by every test folder: one moto S3 server per session (moto's backend is per process, so two
servers would share buckets, and the second could not create its own)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import tests.profiles  # noqa: F401  (loads the Hypothesis profile before any test module is imported)


@dataclass(frozen=True)
class S3Server:
    """A moto S3 server on 127.0.0.1 with one bucket, and the options s3fs needs to reach it."""

    endpoint: str
    bucket: str

    def options(self) -> dict[str, Any]:
        """``storage_options`` for ``FsspecStaging`` / s3fs."""
        return {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "eu-west-1"},
            "skip_instance_cache": True,
        }

    def shared_options(self) -> dict[str, Any]:
        """:meth:`options` with one botocore session for every filesystem made from them in this process.

        Each filesystem still has its own client, connections and listings cache; only the session's loaded
        service description and credentials are shared, which a new session otherwise loads again on its first
        request (most of a new filesystem's cost). In this process only: the session does not cross to another.
        """
        return {**self.options(), "session": _botocore_session()}


@functools.cache
def _botocore_session() -> Any:
    """One aiobotocore session per test process (s3fs runs every filesystem's requests on fsspec's one loop)."""
    from aiobotocore.session import AioSession

    return AioSession()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A real S3-compatible HTTP server (moto) on a free port of 127.0.0.1, stopped after the tests."""
    pytest.importorskip("s3fs")
    server_module = pytest.importorskip("moto.server")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        s3 = S3Server(f"http://{host}:{port}", "staging")
        import s3fs

        s3fs.S3FileSystem(**s3.options()).mkdir(s3.bucket)
        yield s3
    finally:
        server.stop()


SLOWEST_FIRST = (
    "spark/test_hosted_faults.py",
    "spark/test_connect.py",
    "simulate/test_seeds.py",
    "spark/test_hosted_eventtime.py",
    "verify/test_rescale.py",
    "spark/test_streaming.py",
    "spark/test_hosting.py",
    "spark/test_hosted_stream.py",
    "spark/test_hosted_standalone.py",
    "verify/test_mutants.py",
    "spark/test_hosted_lifetime.py",
    "spark/test_hosted_state.py",
    "examples/test_demo.py",
    "cluster/test_faults.py",
    "spark/test_hosted_large.py",
    "bench/test_bench_streaming_smoke.py",
    "spark/test_standalone.py",
    "recovery/test_kill.py",
    "spark/test_baselines.py",
    "cluster/test_membership.py",
    "workflow/test_resume.py",
    "workflow/test_concurrency.py",
    "simulate/test_simulate.py",
    "workflow/test_e2e.py",
    "cluster/test_cluster.py",
    "cluster/test_elastic.py",
    "spark/test_executor_setup.py",
    "bench/test_bench_cluster_smoke.py",
    "bench/test_bench_spark_smoke.py",
    "workflow/test_staging.py",
    "verify/test_statemachine.py",
    "lockstep/test_rescale_lockstep.py",
    "verify/test_models.py",
    "workflow/test_staging_formats.py",
    "bench/test_bench_elastic_smoke.py",
    "verify/test_aggregate.py",
    "cluster/test_mint_race.py",
    "bench/test_bench_progress_smoke.py",
    "workflow/test_executors.py",
    "dataflow/test_bins.py",
    "workflow/test_staging_crash.py",
    "verify/test_datagram.py",
    "examples/test_example_windows.py",
    "cluster/test_shared_memory.py",
    "lockstep/test_aggregate_lockstep.py",
    "dataflow/test_batch_kinds.py",
)
"""The files that take longest (``--durations``), slowest first: run in parallel, a file's tests stay together
(``--dist loadfile``) and files are handed out in collection order (``--no-loadscope-reorder``), so a long file
started last would hold up the whole run while the other processes sit idle. The list runs down to files of about
10 s, so that the last files handed out are short ones, whichever folder they are in."""


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--kill-trials N``: how many seeded kill trials ``tests/spark/test_hosted_faults.py`` runs (default 2)."""
    parser.addoption("--kill-trials", type=int, default=2, help="seeded kill trials of the hosted streaming tests")


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the slowest files first; the rest keep their order."""
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}

    def key(item: pytest.Item) -> int:
        path = item.path.as_posix()
        return next((i for name, i in rank.items() if path.endswith("tests/" + name)), len(rank))

    items.sort(key=key)
