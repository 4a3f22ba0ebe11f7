"""A state machine drives each staging area with puts, overwrites, deletes and reads, against a plain dict."""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pytimely.errors import ValueMissingError
from pytimely.workflow.staging import FsspecStaging, LocalStaging, MemoryStaging, StagingArea
from tests.profiles import examples

KEYS = ["a/out", "a/out/iter-1", "a/outer", "b/c/out", "b"]
FINGERPRINTS = ["f1", "f2", "f3"]
values = st.one_of(st.integers(), st.text(max_size=4), st.lists(st.integers(), max_size=3), st.binary(max_size=4))


class StagingMachine(RuleBasedStateMachine):
    """The area must behave like ``model``: key -> (value, fingerprint)."""

    kind = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="staging-machine-")
        self.area: StagingArea
        if self.kind == "memory":
            self.area = MemoryStaging()
        elif self.kind == "local":
            self.area = LocalStaging(self.directory, durable=False)
        else:
            self.area = FsspecStaging(f"file://{self.directory}")
        self.model: dict[str, tuple[Any, str]] = {}

    def teardown(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    @rule(key=st.sampled_from(KEYS), value=values, fp=st.sampled_from(FINGERPRINTS))
    def put(self, key: str, value: Any, fp: str) -> None:
        self.area.put(key, value, fp)
        self.model[key] = (value, fp)

    @rule(key=st.sampled_from(KEYS))
    def delete(self, key: str) -> None:
        self.area.delete(key)
        self.model.pop(key, None)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def get_present(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.model)))
        value, fp = self.model[key]
        assert self.area.get(key) == value
        assert self.area.get(key, fp) == value
        stale = data.draw(st.sampled_from([f for f in FINGERPRINTS if f != fp]))
        with pytest.raises(ValueMissingError):
            self.area.get(key, stale)

    @rule(key=st.sampled_from(KEYS))
    def get_absent(self, key: str) -> None:
        if key not in self.model:
            with pytest.raises(ValueMissingError):
                self.area.get(key)

    @invariant()
    def agrees_with_model(self) -> None:
        assert self.area.keys("") == sorted(self.model)
        for key in KEYS:
            fp = self.model[key][1] if key in self.model else None
            assert self.area.fingerprint(key) == fp
            for other in FINGERPRINTS:
                assert self.area.has(key, other) == (other == fp)
        for prefix in ["a", "a/out", "b"]:
            assert self.area.keys(prefix) == sorted(k for k in self.model if k == prefix or k.startswith(prefix + "/"))


MACHINE_SETTINGS = settings(
    max_examples=examples(30), stateful_step_count=20, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


class MemoryMachine(StagingMachine):
    kind = "memory"


class LocalMachine(StagingMachine):
    kind = "local"


class FsspecLocalMachine(StagingMachine):
    kind = "fsspec-local"


TestMemoryStaging = MemoryMachine.TestCase
TestMemoryStaging.settings = MACHINE_SETTINGS
TestLocalStaging = LocalMachine.TestCase
TestLocalStaging.settings = MACHINE_SETTINGS
TestFsspecLocalStaging = FsspecLocalMachine.TestCase
TestFsspecLocalStaging.settings = MACHINE_SETTINGS
