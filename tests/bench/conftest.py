"""The suite's one local SparkSession (``tests/spark/conftest.py``), for the benchmarks that run on Spark.

Its fixture is registered here too; ``local_session`` returns the session already active in the process, so a
test process that runs both folders still starts one session, not two.
"""

from __future__ import annotations

from tests.spark.conftest import spark

__all__ = ["spark"]
