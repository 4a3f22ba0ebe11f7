"""A Spark driver of its own that runs the examples' ``main(argv)`` one after another, on one session.

Started by :class:`tests.spark.standalone.ExampleDriver`; reads one JSON request a line on stdin (``{"example":
NAME, "args": [...]}``), runs ``examples/NAME.py``'s ``main(args)`` in this process and answers one JSON line on
stdout: the status ``main`` returned (or the exit code it raised; 1 and the traceback on stderr for an uncaught
error, as Python would) and what it printed. The first example's ``session_for`` starts the session on the
cluster; the later ones find it active, so a test module's runs share one driver JVM and its executors.
``{"stop": true}`` stops the session and ends the process.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import sys
import traceback
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(name: str, args: list[str]) -> dict[str, Any]:
    """``examples/NAME.py``'s ``main(args)``, loaded afresh as its command line would be, and what it printed."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            status = module.main(args)
        except SystemExit as exit:
            status = exit.code if isinstance(exit.code, int) else 1
        except BaseException:  # as an uncaught error ends a command line: its traceback, status 1
            traceback.print_exc()
            status = 1
    return {"status": status, "stderr": err.getvalue(), "stdout": out.getvalue()}


def serve() -> None:
    """Answer requests until ``stop`` or the end of stdin."""
    answers = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("stop"):
            break
        answers.write(json.dumps(run(request["example"], request["args"])) + "\n")
        answers.flush()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


if __name__ == "__main__":
    serve()
