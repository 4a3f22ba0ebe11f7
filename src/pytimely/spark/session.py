"""The embedded default: a local Spark that works offline and quietly.

``local_session(slots)`` starts (or returns) a ``local[slots]`` SparkSession
bound to loopback, without UI or progress bars, with warnings-only logs, on a
Java 17 runtime found in ``JAVA_HOME`` or the usual install places. Barrier
stages that ask for more tasks than there are slots fail within seconds
instead of after Spark's default ten minutes. ``local_session(ui=True)`` (or
``ui=PORT``) keeps Spark's web UI, on loopback, at ``spark.sparkContext.uiWebUrl``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytimely.atomic import write_atomic
from pytimely.errors import InvalidArgument, SparkConnectError, SparkSetupError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "concurrent_slots",
    "connect_session",
    "find_java_home",
    "is_connect",
    "launch_environment",
    "local_session",
    "master_of",
    "session_for",
    "slots_of",
    "wait_for_slots",
]

_INSTALL_JAVA = (
    "install a Java 17 runtime (Debian/Ubuntu: `apt-get install openjdk-17-jre-headless`) "
    "or point JAVA_HOME at one"
)
_JVM_DIRS = ("/usr/lib/jvm", "/usr/local/lib/jvm", "/opt/java", "/Library/Java/JavaVirtualMachines")

# Loopback, no UI, fast barrier slot checks, few shuffle partitions: what a local run wants.
LOCAL_CONF: dict[str, str] = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Arrow batches of 100,000 rows instead of 10,000: a tenth of the per-batch work on both sides of the JVM.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "2",
    "spark.python.worker.reuse": "true",
}

_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.spark.name = org.apache.spark
logger.spark.level = error
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = error
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = fatal
logger.tasks.name = org.apache.spark.scheduler.TaskSetManager
logger.tasks.level = fatal
"""
# A failing task's stack trace would reach the console twice: pytimely raises the task's own error instead.


def _java_version(java: Path) -> int | None:
    """The major version of the ``java`` binary at ``java``, or None if it does not run."""
    try:
        done = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def find_java_home(env: dict[str, str] | None = None, search: tuple[str, ...] = _JVM_DIRS) -> Path:
    """A Java 17+ home: ``JAVA_HOME`` if it holds one, else Java 17 under ``search``, else ``java`` on PATH."""
    env = dict(os.environ) if env is None else env
    tried: list[str] = []
    given = env.get("JAVA_HOME")
    if given:
        version = _java_version(Path(given) / "bin" / "java")
        if version is not None and version >= 17:
            return Path(given)
        tried.append(f"JAVA_HOME={given} (version {version or 'unknown'})")
    # Prefer 17 exactly: it is what PySpark is tested with; a newer JDK beside it is a second choice.
    candidates: list[tuple[int, Path]] = []
    for root in search:
        base = Path(root)
        if not base.is_dir():
            continue
        for home in sorted(base.iterdir()):
            for java in (home / "bin" / "java", home / "Contents" / "Home" / "bin" / "java"):
                if java.exists() and not java.parent.parent.is_symlink():
                    version = _java_version(java)
                    if version is not None and version >= 17:
                        candidates.append((version, java.parent.parent))
    on_path = shutil.which("java", path=env.get("PATH"))
    if on_path:
        real = Path(on_path).resolve()
        version = _java_version(real)
        if version is not None and version >= 17:
            candidates.append((version, real.parent.parent))
        else:
            tried.append(f"java on PATH (version {version or 'unknown'})")
    if candidates:
        candidates.sort(key=lambda vc: (vc[0] != 17, vc[0]))
        return candidates[0][1]
    looked = "; ".join(tried) or "no java found"
    raise SparkSetupError(f"Spark needs Java 17 ({looked}): {_INSTALL_JAVA}")


def _quiet_log_config() -> Path:
    """A log4j2 configuration that keeps Spark's console to errors (written once per process)."""
    path = Path(tempfile.gettempdir()) / f"pytimely-log4j2-{os.getuid() if hasattr(os, 'getuid') else 0}.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        write_atomic(path, _LOG4J2)
    return path


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (``sc://``): no ``sparkContext``, no JVM in this process."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def master_of(spark: Any) -> str:
    """The session's master URL (``local[2]``, ``spark://...``), on a classic or a Connect session."""
    if is_connect(spark):
        return str(spark.conf.get("spark.master", "") or "")
    return str(spark.sparkContext.master or "")


def slots_of(spark: SparkSession) -> int | None:
    """Task slots of a ``local[N]`` session (None when the master is not local: the cluster manager decides)."""
    master = master_of(spark)
    match = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master)
    if match is None:
        return None
    count = match.group(1)
    if count is None:
        return 1
    return os.cpu_count() or 1 if count == "*" else int(count)


def concurrent_slots(spark: SparkSession) -> int:
    """How many tasks Spark can run at once right now (what its own barrier check compares against), any master."""
    slots = slots_of(spark)
    if slots is not None:
        return slots
    if is_connect(spark):
        raise SparkConnectError(
            f"on Spark Connect with master {master_of(spark) or '(unknown)'} the client cannot count the "
            "cluster's task slots: give processes= explicitly (at most the slots the cluster has)"
        )
    context = spark.sparkContext._jsc.sc()
    # The same count Spark's barrier scheduling checks, for the default resource profile.
    return int(context.maxNumConcurrentTasks(context.resourceProfileManager().defaultResourceProfile()))


def wait_for_slots(spark: SparkSession, wanted: int | None, deadline: float, settle: float = 3.0) -> int:
    """The session's concurrent task slots, waiting up to ``deadline`` seconds for executors to register.

    A cluster's executors register some seconds after the session starts. This waits for the first one,
    then for ``wanted`` slots only while their number still grows (``settle`` seconds since the last
    change), so a cluster that is simply too small is found in seconds, not after the whole deadline.
    """
    clock = time.monotonic
    give_up = clock() + deadline
    last, changed = concurrent_slots(spark), clock()
    while last < (wanted or 1) and clock() < give_up:
        if last > 0 and clock() - changed >= settle:
            break
        time.sleep(0.2)
        slots = concurrent_slots(spark)
        if slots != last:
            last, changed = slots, clock()
    return last


@contextlib.contextmanager
def launch_environment(java_home: Path | None = None) -> Iterator[None]:
    """While PySpark starts its JVM: Java 17 (``java_home``, or :func:`find_java_home`), loopback and this
    interpreter for Spark's Python, unless the caller's environment says otherwise; the caller's environment
    exactly as it was afterwards (the JVM and the session keep what they read at start)."""
    wanted = {"JAVA_HOME": str(java_home or find_java_home())}
    for key, value in (
        ("SPARK_LOCAL_IP", "127.0.0.1"),
        ("PYSPARK_PYTHON", sys.executable),
        ("PYSPARK_DRIVER_PYTHON", sys.executable),
    ):
        if key not in os.environ:
            wanted[key] = value
    saved = {key: os.environ.get(key) for key in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for key, before in saved.items():
            if before is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = before


def _prepare_driver(jvm_options: str = "") -> str:
    """The quiet Java options for driver and executors (with ``jvm_options`` appended)."""
    log_config = _quiet_log_config()
    java_options = f"-Dlog4j.configurationFile=file:{log_config} -Dlog4j2.configurationFile=file:{log_config}"
    return f"{java_options} {jvm_options}".strip()


def local_session(
    slots: int = 2,
    *,
    conf: dict[str, Any] | None = None,
    jvm_options: str = "",
    app_name: str = "pytimely",
    ui: bool | int = False,
) -> SparkSession:
    """The active SparkSession, or a new quiet, offline ``local[slots]`` one (see the module docstring).

    ``conf`` adds or overrides Spark settings; ``jvm_options`` are appended to the driver's Java options.
    ``ui=True`` keeps Spark's web UI (its first free port from 4040), ``ui=PORT`` puts it on that port (0: any
    free one); its address is ``spark.sparkContext.uiWebUrl``, on loopback like the rest.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SparkSetupError(
            "pytimely.spark needs PySpark: `pip install 'pytimely[spark]'` (PySpark 4, pandas < 3, pyarrow)"
        ) from exc
    ui_conf = _ui_conf(ui)
    active = SparkSession.getActiveSession()
    if active is not None:
        if ui is not False and not active.sparkContext.uiWebUrl:
            raise SparkSetupError(
                "local_session(ui=...): a session without the Spark UI already runs in this process; "
                "stop it (spark.stop()) before asking for one with the UI"
            )
        return active
    if slots < 1:
        raise InvalidArgument(f"a local Spark needs at least one slot, got {slots}")
    java_options = _prepare_driver(jvm_options)
    builder = SparkSession.builder.master(f"local[{slots}]").appName(app_name)
    for key, value in {
        **LOCAL_CONF,
        "spark.driver.extraJavaOptions": java_options,
        "spark.executor.extraJavaOptions": java_options,
        **ui_conf,
        **(conf or {}),
    }.items():
        builder = builder.config(key, str(value))
    try:
        with launch_environment():
            spark = builder.getOrCreate()
    except SparkSetupError:
        raise
    except Exception as exc:
        raise SparkSetupError(f"the local Spark did not start: {type(exc).__name__}: {exc}") from exc
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _ui_conf(ui: bool | int) -> dict[str, str]:
    """The Spark settings for ``local_session(ui=...)``: none for ``False``, the UI (on a port) otherwise."""
    if ui is False:
        return {}
    if ui is True:
        return {"spark.ui.enabled": "true"}
    if type(ui) is not int or not 0 <= ui <= 65535:
        raise InvalidArgument(f"ui must be True, False or a port 0..65535, got {ui!r}")
    return {"spark.ui.enabled": "true", "spark.ui.port": str(ui)}


def session_for(master: str, *, app_name: str = "pytimely") -> SparkSession:
    """A session on ``master``: the quiet embedded one for ``local[N]``, a Connect client for ``sc://host:port``,
    else Spark's own for that master."""
    if master.startswith("sc://"):
        return connect_session(master)
    match = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master)
    if match is not None:
        count = match.group(1)
        slots = 1 if count is None else (os.cpu_count() or 1) if count == "*" else int(count)
        return local_session(slots, app_name=app_name)
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SparkSetupError("pytimely.spark needs PySpark: `pip install 'pytimely[spark]'`") from exc
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    java_options = _prepare_driver()
    builder = SparkSession.builder.master(master).appName(app_name)
    builder = builder.config("spark.driver.extraJavaOptions", java_options)
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    for key in ("spark.scheduler.barrier.maxConcurrentTasksCheck.interval",
                "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures",
                "spark.sql.execution.arrow.maxRecordsPerBatch"):
        # Spark's own check backs pytimely's up-front one (executors lost after it ran): fail in seconds.
        builder = builder.config(key, LOCAL_CONF[key])
    try:
        with launch_environment():
            spark = builder.getOrCreate()
    except SparkSetupError:
        raise
    except Exception as exc:
        raise SparkSetupError(f"Spark on {master} did not start: {type(exc).__name__}: {exc}") from exc
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _classic_running() -> bool:
    """Whether this process runs a classic SparkContext (then it cannot switch PySpark to remote mode)."""
    from pyspark.core.context import SparkContext

    return SparkContext._active_spark_context is not None


def connect_session(url: str) -> SparkSession:
    """A Spark Connect client session on ``url`` (``sc://host:port``); needs the ``connect`` extra."""
    try:
        from pyspark.sql.connect import utils
        from pyspark.sql.connect.session import SparkSession as RemoteSession

        for require in (utils.require_minimum_grpc_version, utils.require_minimum_grpcio_status_version,
                        utils.require_minimum_googleapis_common_protos_version,
                        utils.require_minimum_zstandard_version):  # fmt: skip
            require()
    except ImportError as exc:
        raise SparkSetupError(
            f"Spark Connect needs its client libraries ({exc}): `pip install 'pytimely[connect]'`"
        ) from exc
    try:
        if _classic_running():
            # The generic builder refuses while a classic session runs in this process; Connect's own builder
            # works but leaves PySpark out of remote mode (``pyspark.sql.functions`` then expects a classic
            # session), so a process that mixes both uses ``DataFrame`` methods and SQL expressions only.
            return RemoteSession.builder.remote(url).getOrCreate()  # type: ignore[return-value]
        from pyspark.sql import SparkSession

        # The generic builder puts PySpark in remote mode: ``pyspark.sql.functions`` then builds Connect columns.
        return SparkSession.builder.remote(url).getOrCreate()
    except Exception as exc:
        raise SparkConnectError(f"could not reach the Spark Connect server {url}: {type(exc).__name__}: {exc}") from exc
