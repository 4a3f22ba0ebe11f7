"""What a run reports about itself: the event log (:mod:`~pytimely.observe.eventlog`) every worker writes, the
per-operator summary of such logs (:mod:`~pytimely.observe.logsummary`), Prometheus metrics
(:mod:`~pytimely.observe.metrics`) and the live status line (:mod:`~pytimely.observe.status`).

It sits just above progress: the dataflow layer logs into it, and nothing here knows of workers or operators
beyond the events they send. The dataflow's picture of itself (:mod:`pytimely.dataflow.graph_view`,
:mod:`pytimely.dataflow.explain`) stays with the dataflow, whose internals it reads, and rendering built graphs for
``pytimely show`` (:mod:`pytimely.inspection`) sits above the worker that builds them.
"""
