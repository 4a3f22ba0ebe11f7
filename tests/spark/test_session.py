"""Finding Java and counting slots, with real (tiny) java executables on disk."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pytimely.errors import SparkSetupError
from pytimely.spark.session import find_java_home, launch_environment, slots_of


def _fake_java(home: Path, version: str) -> Path:
    """A JDK-shaped directory whose ``bin/java -version`` prints ``version`` the way OpenJDK does."""
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f'#!/bin/sh\necho \'openjdk version "{version}" 2025-01-01\' >&2\n')
    java.chmod(0o755)
    return home


@pytest.mark.skipif(os.name != "posix", reason="shell-script stand-ins for java")
def test_java_home_is_taken_when_it_holds_java_17_or_newer(tmp_path: Path) -> None:
    home = _fake_java(tmp_path / "jdk17", "17.0.9")
    assert find_java_home({"JAVA_HOME": str(home), "PATH": ""}, search=()) == home


@pytest.mark.skipif(os.name != "posix", reason="shell-script stand-ins for java")
def test_an_old_java_home_is_passed_over_for_java_17_in_the_usual_places(tmp_path: Path) -> None:
    old = _fake_java(tmp_path / "old" / "jdk11", "11.0.2")
    _fake_java(tmp_path / "jvm" / "jdk-25", "25")
    seventeen = _fake_java(tmp_path / "jvm" / "jdk-17", "17.0.15")
    found = find_java_home({"JAVA_HOME": str(old), "PATH": ""}, search=(str(tmp_path / "jvm"),))
    assert found == seventeen, "17 is preferred over a newer JDK beside it"


@pytest.mark.skipif(os.name != "posix", reason="shell-script stand-ins for java")
def test_no_usable_java_is_a_clear_error_saying_how_to_install_it(tmp_path: Path) -> None:
    old = _fake_java(tmp_path / "jdk8", "1.8.0_392")
    with pytest.raises(SparkSetupError, match=r"needs Java 17 \(JAVA_HOME=.*version 8\).*openjdk-17-jre-headless"):
        find_java_home({"JAVA_HOME": str(old), "PATH": ""}, search=())
    with pytest.raises(SparkSetupError, match="no java found"):
        find_java_home({"PATH": str(tmp_path / "empty")}, search=())


@pytest.mark.skipif(os.name != "posix", reason="shell-script stand-ins for java")
def test_the_launch_environment_is_the_callers_again_afterwards(tmp_path: Path, monkeypatch: Any) -> None:
    home = _fake_java(tmp_path / "jdk17", "17.0.9")
    monkeypatch.setenv("JAVA_HOME", "/somewhere/else")
    monkeypatch.setenv("PYSPARK_PYTHON", "/the/callers/python")
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    before = dict(os.environ)
    with launch_environment(home):
        assert os.environ["JAVA_HOME"] == str(home)
        assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"
        assert os.environ["PYSPARK_PYTHON"] == "/the/callers/python", "the caller's choice is kept"
    assert dict(os.environ) == before
    with pytest.raises(RuntimeError), launch_environment(home):
        raise RuntimeError("a JVM that failed to start")
    assert dict(os.environ) == before


def test_the_test_session_is_local_with_the_slots_it_asked_for(spark: Any) -> None:
    assert slots_of(spark) == 4
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.ui.enabled") == "false"
    assert conf.get("spark.driver.host") == "127.0.0.1"
    assert conf.get("spark.scheduler.barrier.maxConcurrentTasksCheck.interval") == "1s"
