"""A real Spark Connect server on loopback, started with PySpark's own ``spark-submit``.

``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer`` with a ``local[N]`` master,
its own gRPC port on 127.0.0.1, the log in a folder of its own; started with a deadline (the log line
Spark prints once the service listens) and stopped by its process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.spark.standalone import _free_port, quick_jvm, spark_home

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ConnectServer:
    """A running server; ``url`` is the ``sc://`` address clients connect to."""

    url: str
    log: Path
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        """Stop the server's JVM (and the Python workers it started)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)


def start_connect_server(directory: Path, *, slots: int = 4, deadline: float = 120.0) -> ConnectServer:
    """Start a Connect server of ``local[slots]`` whose Python workers run this interpreter and this tree."""
    from pytimely.spark.session import find_java_home

    directory.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    # QUICK_JVM for every JVM spark-submit starts: the launcher that builds the server's command line as well as
    # the server itself (its executors live in it: ``local[slots]``).
    settings = {
        **os.environ,
        "JAVA_HOME": str(find_java_home()),
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    env = quick_jvm(settings)
    command = [
        str(spark_home() / "bin" / "spark-submit"),
        "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master", f"local[{slots}]",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=4",
        "spark-internal",
    ]  # fmt: skip
    log = directory / "connect-server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=directory, start_new_session=True
        )
    server = ConnectServer(url=f"sc://127.0.0.1:{port}", log=log, process=process)
    give_up = time.monotonic() + deadline
    while time.monotonic() < give_up:
        if "Spark Connect server started" in log.read_text(errors="replace"):
            return server
        if process.poll() is not None:
            break
        time.sleep(0.2)
    server.stop()
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
    raise RuntimeError(f"the Spark Connect server did not start within {deadline:g} s:\n{tail}")
