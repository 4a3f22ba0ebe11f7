"""A workflow module on the Spark executor that is cancelled (its timeout) has its Spark jobs cancelled too."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from pytimely.workflow.executors import Call, SparkExecutor


def slow_job(spark: Any) -> int:
    """A Spark job whose tasks would sleep for five minutes each."""

    def sleepy(x: int) -> int:
        time.sleep(300)
        return x

    return int(sum(spark.sparkContext.parallelize(range(2), 2).map(sleepy).collect()))


def active_jobs(spark: Any) -> list[int]:
    return list(spark.sparkContext.statusTracker().getActiveJobsIds())


def test_a_cancelled_spark_call_cancels_its_jobs(spark: Any) -> None:
    """Cancelled once its job runs: the job is gone within seconds, and the call's thread is free again."""
    assert active_jobs(spark) == []

    async def main() -> None:
        with SparkExecutor(spark, max_workers=1) as executor:
            call = asyncio.ensure_future(executor.run(Call("wf/slow", slow_job)))
            deadline = time.monotonic() + 120
            while not active_jobs(spark):
                assert time.monotonic() < deadline, "the module's Spark job never started"
                await asyncio.sleep(0.05)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            while active_jobs(spark):
                assert time.monotonic() < deadline, "the cancelled module's Spark job still runs"
                await asyncio.sleep(0.05)
            # The one driver thread is free: a later call runs (it would queue behind a five-minute job).
            later = await asyncio.wait_for(executor.run(Call("wf/later", lambda spark: spark.range(3).count())), 60)
            assert later == {"out": 3}

    began = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - began < 100
