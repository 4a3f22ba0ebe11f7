"""Spark-native connected components, the baselines pytimely on Spark is measured against.

``graphx_components`` runs GraphX's ``ConnectedComponents`` (it ships inside
PySpark; GraphFrames needs a JVM package that cannot be fetched offline)
through the JVM gateway. ``label_propagation_components`` is the same
algorithm written with DataFrames alone, one Spark job per round. Both take a
DataFrame of undirected ``src, dst`` integer edges and give ``vertex, label``
rows, where label is the smallest vertex id of the vertex's component and the
vertices are exactly those that appear in an edge.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytimely.errors import InputFormatError, InvalidArgument

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["graphx_components", "label_propagation_components"]


def _check_edges(edges: DataFrame) -> None:
    """Refuse inputs without integer ``src`` and ``dst`` columns, naming what is there instead."""
    types = dict(edges.dtypes)
    for column in ("src", "dst"):
        if column not in types:
            raise InputFormatError(f"the edges need integer columns src and dst; they have {edges.columns}")
        if types[column] not in ("tinyint", "smallint", "int", "bigint"):
            raise InputFormatError(f"edge column {column!r} must hold integers, holds {types[column]}")


def graphx_components(spark: Any, edges: DataFrame) -> DataFrame:
    """GraphX ``ConnectedComponents`` on ``edges``: a cached, materialised DataFrame ``vertex, label``."""
    from pyspark.sql import functions as F

    _check_edges(edges)
    sc = spark.sparkContext
    jvm = sc._jvm
    scratch = Path(tempfile.mkdtemp(prefix="pytimely-graphx-"))
    try:
        # GraphX reads edge lists from text; the gateway cannot hand it a DataFrame of pairs directly.
        listing, labelled = scratch / "edges", scratch / "labels"
        edges.select(F.concat_ws(" ", F.col("src").cast("long"), F.col("dst").cast("long"))).write.text(str(listing))
        memory = jvm.org.apache.spark.storage.StorageLevel.MEMORY_ONLY()
        graph = jvm.org.apache.spark.graphx.GraphLoader.edgeListFile(
            sc._jsc.sc(), str(listing), False, sc.defaultParallelism, memory, memory
        )
        any_tag = getattr(getattr(jvm.scala.reflect, "ClassTag$"), "MODULE$").Any()
        components = jvm.org.apache.spark.graphx.lib.ConnectedComponents.run(graph, any_tag, any_tag)
        components.vertices().toJavaRDD().saveAsTextFile(str(labelled))
        # Lines read "(vertex,label)".
        pairs = F.split(F.regexp_replace(F.col("value"), r"[()]", ""), ",")
        result: DataFrame = spark.read.text(str(labelled)).select(
            pairs.getItem(0).cast("long").alias("vertex"), pairs.getItem(1).cast("long").alias("label")
        )
        result = result.cache()
        result.count()
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def label_propagation_components(spark: Any, edges: DataFrame, max_iterations: int = 1000) -> DataFrame:
    """Connected components by DataFrame label propagation, one round per Spark job until nothing changes."""
    from pyspark.sql import functions as F

    _check_edges(edges)
    if max_iterations < 1:
        raise InvalidArgument(f"max_iterations must be positive, got {max_iterations}")
    pairs = edges.select(F.col("src").cast("long").alias("a"), F.col("dst").cast("long").alias("b"))
    both = pairs.union(pairs.select(F.col("b").alias("a"), F.col("a").alias("b"))).localCheckpoint()
    labels = both.select(F.col("a").alias("vertex")).distinct().withColumn("label", F.col("vertex"))
    labels = labels.localCheckpoint()
    for _ in range(max_iterations):
        heard = (
            both.join(labels, both.a == labels.vertex)
            .groupBy(both.b.alias("vertex"))
            .agg(F.min("label").alias("heard"))
        )
        updated = (
            labels.join(heard, "vertex", "left")
            .select("vertex", F.least("label", F.coalesce("heard", "label")).alias("label"), "label")
            .toDF("vertex", "label", "before")
            .localCheckpoint()
        )
        changed = updated.filter(F.col("label") < F.col("before")).limit(1).count()
        labels = updated.select("vertex", "label")
        if not changed:
            return labels
    raise RuntimeError(f"label propagation did not settle within {max_iterations} rounds")
