"""The staging-area contract, run against every staging area (see ``conftest.py`` for the areas)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytimely.errors import StagingKeyError, ValueMissingError
from pytimely.workflow.staging import StagingArea, check_key
from tests.profiles import examples

# Hypothesis reuses one area per test function: every example uses keys of its own.
AREA_SETTINGS = settings(
    max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def test_is_a_staging_area(staging: StagingArea) -> None:
    assert isinstance(staging, StagingArea)


def test_absent_key(staging: StagingArea) -> None:
    assert not staging.has("report/clean/out", "f1")
    assert staging.fingerprint("report/clean/out") is None
    with pytest.raises(ValueMissingError, match="report/clean/out") as info:
        staging.get("report/clean/out")
    assert info.value.key == "report/clean/out"
    assert staging.keys() == []


def test_put_then_has_only_that_fingerprint(staging: StagingArea) -> None:
    staging.put("report/clean/out", {"rows": [1, 2, 3]}, "f1")
    assert staging.has("report/clean/out", "f1")
    assert not staging.has("report/clean/out", "f2")
    assert staging.fingerprint("report/clean/out") == "f1"
    assert staging.get("report/clean/out") == {"rows": [1, 2, 3]}
    assert staging.get("report/clean/out", "f1") == {"rows": [1, 2, 3]}


def test_stale_fingerprint_is_absent(staging: StagingArea) -> None:
    staging.put("a/out", [1, 2], "old")
    with pytest.raises(ValueMissingError, match="a/out"):
        staging.get("a/out", "new")
    assert not staging.has("a/out", "new")


def test_overwrite_replaces_value_and_fingerprint(staging: StagingArea) -> None:
    staging.put("m/out", "first", "f1")
    staging.put("m/out", "second", "f2")
    assert staging.get("m/out") == "second"
    assert staging.fingerprint("m/out") == "f2"
    assert not staging.has("m/out", "f1")
    assert staging.keys() == ["m/out"]


def test_delete(staging: StagingArea) -> None:
    staging.put("m/out", 1, "f")
    staging.put("m/out/iter-1", 2, "f")
    staging.delete("m/out")
    assert not staging.has("m/out", "f")
    assert staging.keys() == ["m/out/iter-1"]
    assert staging.get("m/out/iter-1") == 2
    staging.delete("m/out")  # absent: nothing happens
    staging.delete("never/there")


def test_keys_by_whole_segments(staging: StagingArea) -> None:
    for key in ["report/clean/out", "report/clean/iter-1/out", "report/cleanup/out", "other/out"]:
        staging.put(key, key.upper(), "f")
    assert staging.keys() == sorted(["report/clean/out", "report/clean/iter-1/out", "report/cleanup/out", "other/out"])
    assert staging.keys("report/clean") == ["report/clean/iter-1/out", "report/clean/out"]
    assert staging.keys("report/clean/") == ["report/clean/iter-1/out", "report/clean/out"]
    assert staging.keys("report") == ["report/clean/iter-1/out", "report/clean/out", "report/cleanup/out"]
    assert staging.keys("report/clean/out") == ["report/clean/out"]
    assert staging.keys("nothing") == []


@pytest.mark.parametrize("key", ["", "/a", "a/", "a//b", ".hidden", "a/.commit", "a/../b", "a b", "é", "a\\b"])
def test_bad_keys_refused(staging: StagingArea, key: str) -> None:
    with pytest.raises(StagingKeyError):
        staging.put(key, 1, "f")
    with pytest.raises(StagingKeyError):
        staging.has(key, "f")
    with pytest.raises(StagingKeyError):
        staging.get(key)


def test_check_key_accepts_module_paths() -> None:
    for key in ["report/clean/out", "loop/iter-3/body/out", "a", "x_1/y.z/k=v"]:
        assert check_key(key) == key


segment = st.from_regex(r"[a-z0-9_-][a-z0-9_.=-]{0,8}", fullmatch=True)
keys = st.lists(segment, min_size=1, max_size=4).map("/".join)


@AREA_SETTINGS
@given(data=st.dictionaries(keys, st.tuples(st.integers(), st.sampled_from(["f1", "f2"])), max_size=6))
def test_model(staging: StagingArea, data: dict[str, tuple[int, str]]) -> None:
    """Many keys at once, nested or not, behave like a dict from key to (value, fingerprint)."""
    for key in staging.keys(""):
        staging.delete(key)
    for key, (value, fp) in data.items():
        staging.put(key, value, fp)
    assert staging.keys() == sorted(data)
    for key, (value, fp) in data.items():
        assert staging.get(key, fp) == value
        assert staging.has(key, fp)
        assert not staging.has(key, "f3")
    for key in list(data)[::2]:
        staging.delete(key)
        del data[key]
    assert staging.keys() == sorted(data)


def roundtrip(staging: StagingArea, value: Any, key: str = "r/out") -> Any:
    staging.put(key, value, "fp")
    assert staging.has(key, "fp")
    return staging.get(key, "fp")


def test_threads_writing_at_once(staging: StagingArea) -> None:
    """Threads overwriting one key and writing their own: every value read matches its fingerprint."""
    import threading

    errors: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            for round_ in range(5):
                staging.put("shared/out", [i, round_] * 100, f"fp-{i}-{round_}")
                staging.put(f"own/w{i}/out", i, f"fp-{i}")
                fp = staging.fingerprint("shared/out")
                assert fp is not None
                value = staging.get("shared/out")
                assert fp.startswith("fp-") and len(value) == 200
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    fp = staging.fingerprint("shared/out")
    assert fp is not None
    _, i, round_ = fp.split("-")
    assert staging.get("shared/out", fp) == [int(i), int(round_)] * 100  # the value goes with its fingerprint
    assert staging.keys("own") == [f"own/w{i}/out" for i in range(4)]
