"""The fragments of README.md and docs/*.md that need Spark, run on the suite's SparkSession (see
:mod:`tests.docs.fragments`); Spark Connect's run in ``test_connect.py`` beside its server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.docs.fragments import group_id, groups, run_group

SPARK = {key: frags for key, frags in groups().items() if key[1] == {"spark"}}


def test_some_fragments_need_spark() -> None:
    assert len(SPARK) >= 3


@pytest.mark.timeout(600)
@pytest.mark.parametrize("key", sorted(SPARK, key=group_id), ids=group_id)
def test_the_spark_fragments_run_as_written(key: tuple[str, frozenset[str]], tmp_path: Path, spark: Any) -> None:
    run_group(SPARK[key], tmp_path, {"spark": spark})
