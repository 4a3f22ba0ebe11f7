"""local_session(ui=...) keeps Spark's web UI, and a streaming query's jobs are named there for its dataflow and epoch.

The UI needs a session of its own (one SparkContext per process, and the suite's shares none with a UI), so
the check runs a small script in a fresh interpreter: a real session with the UI on a free port, a real query,
then Spark's REST API (``/api/v1/applications/<id>/jobs``) read over HTTP.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pytimely.errors import InvalidArgument, SparkSetupError
from pytimely.spark.session import _ui_conf, local_session

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, sys, urllib.request
from pathlib import Path

import stream_wordcount
from pytimely.spark import local_session
from pytimely.spark.streaming import CsvDirectorySink, run_stream

work = Path(sys.argv[1])
(work / "in").mkdir(parents=True)
(work / "in" / "a.txt").write_text("a b a\\n")
spark = local_session(1, ui=0, jvm_options="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
try:
    url = spark.sparkContext.uiWebUrl
    with urllib.request.urlopen(url, timeout=60) as answer:
        status = answer.status
    run_stream(stream_wordcount.running_counts, spark.readStream.text(str(work / "in")), stream_wordcount.SCHEMA,
               sink=CsvDirectorySink(work / "out"), checkpoint=work / "ck", query="shown", available_now=True)
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{url}/api/v1/applications/{app}/jobs", timeout=60) as answer:
        jobs = json.load(answer)
    tracker = spark.sparkContext.statusTracker()
    named = [(job["jobId"], job.get("description")) for job in jobs]
    print(json.dumps({"url": url, "status": status, "jobs": named,
                      "tracked": [tracker.getJobInfo(j).status for j, _ in named if tracker.getJobInfo(j)]}))
finally:
    spark.stop()
"""


@pytest.mark.timeout(300)
def test_the_ui_answers_and_names_each_micro_batchs_jobs(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "examples")])}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "work")], capture_output=True, text=True,
                          timeout=280, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["url"].startswith("http://127.0.0.1:") and seen["status"] == 200
    descriptions = [text for _, text in seen["jobs"]]
    assert "pytimely dataflow running_counts (query shown): epoch 0" in descriptions
    assert seen["tracked"] and set(seen["tracked"]) == {"SUCCEEDED"}


def test_ui_settings_and_a_bad_port_is_a_typed_error(spark: Any) -> None:
    assert _ui_conf(False) == {}
    assert _ui_conf(True) == {"spark.ui.enabled": "true"}
    assert _ui_conf(4050) == {"spark.ui.enabled": "true", "spark.ui.port": "4050"}
    for bad in (-1, 70_000, "4040", 1.0):
        with pytest.raises(InvalidArgument, match="ui must be"):
            _ui_conf(bad)  # type: ignore[arg-type]
    assert local_session(ui=False) is spark  # the suite's session (no UI) is what a caller without ui= gets
    with pytest.raises(SparkSetupError, match="without the Spark UI already runs"):
        local_session(ui=True)
