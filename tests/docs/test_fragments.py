"""Every Python fragment of README.md and docs/*.md runs as written (see :mod:`tests.docs.fragments`); the ones
needing Spark or Spark Connect run in ``tests/spark``, beside the sessions the suite already has."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.docs.fragments import group_id, groups, run_group

GROUPS = groups()
PLAIN = {key: frags for key, frags in GROUPS.items() if not key[1] - {"s3"}}
"""Fragments that need no Spark (the moto S3 server is a fixture of every folder)."""


def test_the_docs_have_fragments_and_every_directive_is_known() -> None:
    assert len(GROUPS) >= 10
    assert sum(len(f) for f in GROUPS.values()) >= 30
    assert {need for _, needs in GROUPS for need in needs} <= {"spark", "connect", "s3"}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("key", sorted(PLAIN, key=group_id), ids=group_id)
def test_the_fragments_run_as_written(key: tuple[str, frozenset[str]], tmp_path: Path, request: Any) -> None:
    fixtures: dict[str, Any] = {}
    if "s3" in key[1]:
        fixtures["s3"] = request.getfixturevalue("s3_server")
    run_group(PLAIN[key], tmp_path, fixtures)
