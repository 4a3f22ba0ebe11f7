"""A real Spark standalone cluster on loopback, started from PySpark's own launcher (``spark-class``).

One master and one or more workers (one core each by default), each a JVM process of its own group, on free
ports of 127.0.0.1; started with deadlines (a log line each must print), stopped by their process ids.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""Java options for the JVMs the tests start: they compile less and collect with one thread, so they start sooner
and take less of the machine; what they compute is the same (the suite's own session uses them too)."""


def quick_jvm(env: dict[str, str]) -> dict[str, str]:
    """``env`` with :data:`QUICK_JVM` for every JVM started under it (``JAVA_TOOL_OPTIONS``, which each JVM reads,
    a driver a test starts as a process of its own as well as the executors a standalone worker starts)."""
    return {**env, "JAVA_TOOL_OPTIONS": QUICK_JVM}


def spark_home() -> Path:
    """Where PySpark is installed: its ``bin/spark-class`` and ``jars`` make it a Spark distribution."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Standalone:
    """A running master and its workers; ``url`` is the ``spark://`` address drivers connect to."""

    url: str
    cores: int
    """Cores of each worker."""
    directory: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    workers: int = 1

    def stop(self) -> None:
        """Stop the worker (and the executors it started), then the master."""
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(timeout=30)


def _start(
    role: str, args: list[str], log: Path, ready: str, env: dict[str, str], deadline: float
) -> subprocess.Popen[bytes]:
    """Start ``spark-class`` with ``args``; wait until ``ready`` appears in its log, or fail naming the log."""
    return _await(role, _launch(args, log, env), log, ready, deadline)


def _launch(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start ``spark-class`` with ``args`` in a process group of its own, its output to ``log``."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def _await(
    role: str, process: subprocess.Popen[bytes], log: Path, ready: str, deadline: float
) -> subprocess.Popen[bytes]:
    """Wait until ``ready`` appears in the log of ``process``; else kill it and fail naming the log's tail."""
    give_up = time.monotonic() + deadline
    while time.monotonic() < give_up:
        if ready in log.read_text(errors="replace"):
            return process
        if process.poll() is not None:
            break
        time.sleep(0.2)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
    raise RuntimeError(f"the Spark {role} did not start within {deadline:g} s:\n{tail}")


def start_standalone(
    directory: Path, *, cores: int = 1, memory: str = "2g", deadline: float = 120.0, workers: int = 1
) -> Standalone:
    """Start a master and ``workers`` workers of ``cores`` cores each on loopback (logs and work files in
    ``directory``: ``worker.log`` and ``work`` for one worker, ``worker-K.log`` and ``work-K`` for several)."""
    from pytimely.spark.session import find_java_home

    directory.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "JAVA_HOME": str(find_java_home()),
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(directory),
        # The master and worker JVMs compile less and collect with one thread: they start sooner and take less of
        # the machine from the tests; what they do is the same.
        "SPARK_DAEMON_JAVA_OPTS": QUICK_JVM,
        # The executors the worker starts inherit these: they run this interpreter with this tree of pytimely, in
        # JVMs started with QUICK_JVM.
        "JAVA_TOOL_OPTIONS": QUICK_JVM,
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", ""),
    }
    if not env["PYSPARK_PYTHON"]:
        del env["PYSPARK_PYTHON"]
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    cluster = Standalone(url=url, cores=cores, directory=directory, workers=workers)
    try:
        master = [
            "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
            "--webui-port", str(_free_port()),
        ]
        cluster.processes.append(
            _start("master", master, directory / "master.log", "I have been elected leader", env, deadline)
        )
        # The workers start side by side (a JVM each): they register with the master in any order.
        launched = []
        for k in range(workers):
            name = "worker" if workers == 1 else f"worker-{k}"
            work = "work" if workers == 1 else f"work-{k}"
            worker = [
                "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", str(cores),
                "--memory", memory, "--work-dir", str(directory / work), "--webui-port", str(_free_port()),
            ]
            process = _launch(worker, directory / f"{name}.log", env)
            cluster.processes.append(process)
            launched.append((name, process))
        for name, process in launched:
            _await(name, process, directory / f"{name}.log", "Successfully registered with master", deadline)
    except BaseException:
        cluster.stop()
        raise
    return cluster


@dataclass
class ExampleDriver:
    """A driver of its own (``tests/spark/example_driver.py``) that runs examples' ``main(argv)`` in turn on one
    session: a test module's runs on a cluster start one driver JVM and one set of executors, not one per run."""

    process: subprocess.Popen[str]
    log: Path
    answers: queue.Queue[str | None]

    def run(self, name: str, args: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """``examples/NAME.py``'s ``main(args)`` in the driver: its status and what it printed, as a process gives
        them (an error the driver itself dies of fails the test naming its log)."""
        assert self.process.stdin is not None
        logged = self.log.stat().st_size
        answer = None
        try:
            self.process.stdin.write(json.dumps({"example": name, "args": args}) + "\n")
            self.process.stdin.flush()
            answer = self.answers.get(timeout=timeout)
        except (OSError, queue.Empty):
            pass  # the driver is gone (a closed pipe) or gave no answer in time: both named below
        if answer is None:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])
            raise AssertionError(f"the example driver gave no answer to {name} within {timeout:g} s:\n{tail}")
        done = json.loads(answer)
        # What the driver process wrote to its own stderr meanwhile (Spark's JVM, warnings) belongs to the run too.
        with self.log.open("rb") as errors:
            errors.seek(logged)
            printed = errors.read().decode(errors="replace")
        return subprocess.CompletedProcess([name, *args], done["status"], done["stdout"], done["stderr"] + printed)

    def stop(self) -> None:
        """Stop the session (its executors go with it) and the driver; kill what is left after a deadline."""
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write(json.dumps({"stop": True}) + "\n")
                self.process.stdin.close()
                self.process.wait(timeout=120)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=60)


DRIVER_CONF = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"}
"""Settings of an :class:`ExampleDriver`'s session, as the suite's local one has them: no web UI (nothing reads it)
and few shuffle partitions for the tests' tiny jobs (the results are ordered, whatever the partitions)."""


def start_example_driver(directory: Path, conf: dict[str, object] | None = None) -> ExampleDriver:
    """Start an :class:`ExampleDriver` (its own output to ``directory/driver.log``) in a process group of its own,
    its JVM started as the suite's others are, its session's settings :data:`DRIVER_CONF` and ``conf`` (written to
    ``directory/conf/spark-defaults.conf``, which Spark reads through ``SPARK_CONF_DIR``)."""
    conf_dir = directory / "conf"
    conf_dir.mkdir(parents=True, exist_ok=True)
    settings = {**DRIVER_CONF, **(conf or {})}
    (conf_dir / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in settings.items()))
    log = directory / "driver.log"
    environment = quick_jvm({**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_CONF_DIR": str(conf_dir)})
    with open(log, "wb") as errors:
        process = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("example_driver.py"))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True, env=environment,
            start_new_session=True,
        )  # fmt: skip
    answers: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            answers.put(line)
        answers.put(None)

    threading.Thread(target=read, name="example-driver-answers", daemon=True).start()
    return ExampleDriver(process, log, answers)
