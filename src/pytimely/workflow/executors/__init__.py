"""Executors: where a simple module's code runs.

An executor takes a :class:`Call` — the module's qualified name (for error messages), its function, the keyword
inputs and parameters, and the names of its out-ports — and runs ``fn(**inputs, **params)``. ``await
executor.run(call)`` returns a dict from out-port name to value:

* one out-port: the function's return value is that port's value;
* several: the function returns a mapping with exactly those names (or a tuple in their order);
* none: the return value is ignored and the dict is empty.

User code that raises becomes :class:`~pytimely.errors.ModuleRaisedError` (a
:class:`~pytimely.errors.ModuleFailedError`) naming the module and the file and line where it raised (the
innermost frame of the user's own code), with what it printed when output is captured and the original
exception as ``__cause__``; a return value that does not fit the out-ports is a
:class:`~pytimely.errors.ModuleOutputError`, and one that cannot travel back from a worker process an
:class:`~pytimely.errors.UnpicklableOutputError`.

The :class:`Executor` protocol is ``async run(call)`` plus ``close()``; every executor here is also an async
context manager (``async with ThreadExecutor() as executor: ...``) that closes on exit, leaving no threads or
processes behind. Implementations:

* :class:`ThreadExecutor` (the default): a ``concurrent.futures.ThreadPoolExecutor`` in this process;
* :class:`ProcessExecutor`: a process pool; the function travels by reference (a module-level function), the
  inputs and results by pickle; a worker process that dies gives :class:`~pytimely.errors.WorkerDiedError`;
* :class:`SparkExecutor`: runs in the Spark driver with the session passed to a parameter named ``spark``;
  DataFrames pass as they are;
* :func:`dataflow_step`: makes a pytimely dataflow a simple module's function.
"""

from pytimely.workflow.executors.call import Call
from pytimely.workflow.executors.dataflow_step import DataflowStep, dataflow_step
from pytimely.workflow.executors.executor import Executor
from pytimely.workflow.executors.process import ProcessExecutor
from pytimely.workflow.executors.spark import SparkExecutor
from pytimely.workflow.executors.thread import ThreadExecutor

__all__ = [
    "Call",
    "DataflowStep",
    "Executor",
    "ProcessExecutor",
    "SparkExecutor",
    "ThreadExecutor",
    "dataflow_step",
]
