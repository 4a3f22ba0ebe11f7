"""pytimely on Apache Spark: dataflows hosted by a barrier stage, DataFrames in and out.

``local_session()`` starts the embedded default (a quiet, offline ``local[N]``
Spark); ``run_dataflow(build, data, schema)`` runs a dataflow over a DataFrame
and gives a DataFrame; ``save`` and ``collect`` run it once, completely or not
at all, re-running the whole computation on failure when asked to.
``session_for("sc://host:port")`` (or ``connect_session``) gives a Spark Connect client session, on which
reading, ``run_dataflow``, ``save`` and ``collect`` work the same (the ``connect`` extra).
"""

from pytimely.spark.hosting import run_dataflow, to_record_batch
from pytimely.spark.output import collect, format_of, read, save
from pytimely.spark.session import connect_session, find_java_home, is_connect, local_session, session_for, slots_of

__all__ = [
    "collect",
    "connect_session",
    "find_java_home",
    "format_of",
    "is_connect",
    "local_session",
    "read",
    "run_dataflow",
    "save",
    "session_for",
    "slots_of",
    "to_record_batch",
]
