"""What each Spark-hosted pytimely process did, brought back to the driver (a Spark accumulator).

``figures = Figures(spark)``, then ``run_dataflow(..., figures=figures)``; once an action on the result has
run, :meth:`Figures.processes` holds, per process, the records it took in and gave out and the seconds it
spent in each phase: ``read`` (taking in its partition), ``meet`` (finding the other processes), ``run``
(the dataflow) and ``convert`` (turning output batches into rows). Figures are keyed by process, so a
stage Spark runs again replaces its figures instead of adding to them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Figures", "ProcessFigures"]

ProcessFigures = dict[str, float]
"""``records_in``, ``records_out``, ``read_s``, ``meet_s``, ``run_s``, ``convert_s`` of one process."""

PHASES = ("read_s", "meet_s", "run_s", "convert_s")


def _param() -> Any:
    from pyspark.accumulators import AccumulatorParam

    class _Latest(AccumulatorParam):  # type: ignore[type-arg]
        """Merges ``{process: figures}`` maps; a process's later figures replace its earlier ones."""

        def zero(self, value: dict[int, ProcessFigures]) -> dict[int, ProcessFigures]:
            return {}

        def addInPlace(
            self, first: dict[int, ProcessFigures], second: dict[int, ProcessFigures]
        ) -> dict[int, ProcessFigures]:
            first.update(second)
            return first

    return _Latest()


class Figures:
    """The per-process figures of one hosted computation, gathered on the driver."""

    def __init__(self, spark: Any) -> None:
        self.accumulator = spark.sparkContext.accumulator({}, _param())

    def processes(self) -> dict[int, ProcessFigures]:
        """Figures by process index (empty until an action on the result has run)."""
        return dict(sorted(self.accumulator.value.items()))

    def table(self) -> str:
        """The figures as a small text table, one line per process and a total."""
        rows = self.processes()
        header = f"{'process':>7} {'records in':>12} {'records out':>12} " + " ".join(f"{p:>9}" for p in PHASES)
        lines = [header]
        totals: dict[str, float] = {}
        for process, figures in rows.items():
            for key, value in figures.items():
                totals[key] = totals.get(key, 0.0) + value
            lines.append(_line(str(process), figures))
        if len(rows) > 1:
            lines.append(_line("total", totals))
        return "\n".join(lines)


def _line(label: str, figures: dict[str, float]) -> str:
    phases = " ".join(f"{figures.get(p, 0.0):>9.3f}" for p in PHASES)
    return f"{label:>7} {int(figures.get('records_in', 0)):>12} {int(figures.get('records_out', 0)):>12} {phases}"
