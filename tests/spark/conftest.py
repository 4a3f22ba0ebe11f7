"""One real local SparkSession for the whole test session (starting one costs several seconds)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A quiet ``local[4]`` SparkSession: four slots, so two-process jobs and a spare stage fit at once."""
    from pytimely.spark.session import local_session
    from tests.spark.standalone import QUICK_JVM

    session = local_session(4, jvm_options=QUICK_JVM)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark standalone master and one worker of one core on loopback, from PySpark's own ``spark-class``."""
    from tests.spark.standalone import start_standalone

    cluster = start_standalone(tmp_path_factory.mktemp("standalone"), cores=1)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def standalone_driver(standalone: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A driver of its own on the standalone cluster that runs the examples' ``main(argv)`` in turn, for one module:
    one driver JVM and one executor for the module's runs, where a process a run would start them for each."""
    from tests.spark.standalone import start_example_driver

    driver = start_example_driver(tmp_path_factory.mktemp("standalone-driver"))
    yield driver
    driver.stop()


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark Connect server (``local[4]``) on loopback, from PySpark's own ``spark-submit``, for one module."""
    from tests.spark.connect_server import start_connect_server

    server = start_connect_server(tmp_path_factory.mktemp("connect"), slots=4)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def connect(connect_server: Any, spark: Any) -> Iterator[Any]:
    """A Spark Connect client session on the test server, stopped at the end of the module.

    Its gRPC channel holds sockets and threads while it lives; later tests count the process's descriptors.
    The classic session starts first: a Connect session made in a process without one switches PySpark to
    remote mode for the whole process, and the classic session could not start afterwards.
    """
    from pytimely.spark.session import connect_session

    session = connect_session(connect_server.url)
    yield session
    # Else the client's exit hook calls the stopped server and retries for minutes.
    session.stop()
