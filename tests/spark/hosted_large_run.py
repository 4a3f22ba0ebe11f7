"""Run by test_hosted_large in a process of its own: a session with ``spark.driver.maxResultSize=1m``."""

from __future__ import annotations

import json
import sys

import pyarrow as pa

from pytimely.spark.epoch_output import EpochOutput
from pytimely.spark.session import local_session
from pytimely.spark.streaming import run_stream
from tests.spark.test_streaming import load


def main(incoming: str, out: str, ck: str) -> None:
    """The word count over ``incoming`` (one file per micro-batch), hosted on 2 processes; figures as JSON."""
    spark = local_session(3, conf={"spark.driver.maxResultSize": "1m"},
                          jvm_options="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    try:
        wordcount = load("stream_wordcount")
        schema = pa.schema([("epoch", pa.int64()), ("word", pa.string()), ("count", pa.int64())])
        source = spark.readStream.option("maxFilesPerTrigger", 1).text(incoming)
        done = run_stream(wordcount.running_counts, source, wordcount.SCHEMA, sink=EpochOutput(out, schema),
                          checkpoint=ck, query="large", available_now=True, processes=2)
        print(json.dumps({"processed": done.processed, "driver_bytes": done.driver_bytes,
                          "trigger_ms": done.trigger_ms}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
