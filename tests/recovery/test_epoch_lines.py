"""A replayable file source: any epoch's lines read from its recorded byte offset, equal to a full read's."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytimely.errors import InputFormatError, InvalidArgument
from pytimely.io import EpochLines


def test_each_epoch_read_on_its_own_equals_the_slice_of_a_full_read(tmp_path: Path) -> None:
    lines = [f"line {i} é" for i in range(23)]
    path = tmp_path / "t.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    source = EpochLines(path, 5)
    assert (source.lines, source.epochs) == (23, 5)
    for epoch in reversed(range(source.epochs)):  # backwards: nothing depends on what was read before
        assert source.read(epoch) == lines[epoch * 5 : (epoch + 1) * 5]
        assert source.read(epoch, part=1, parts=2) == lines[epoch * 5 : (epoch + 1) * 5][1::2]
        with open(path, "rb") as handle:
            handle.seek(source.offset(epoch))
            assert handle.readline().decode().rstrip("\n") == lines[epoch * 5]
    assert source.read(source.epochs) == []


def test_bad_bytes_name_the_line_and_bad_epochs_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(b"a\nb\nc\n\xff\n")
    source = EpochLines(path, 2)
    assert source.read(0) == ["a", "b"]
    with pytest.raises(InputFormatError, match="line 4"):
        source.read(1)
    with pytest.raises(InvalidArgument):
        source.read(3)
    with pytest.raises(InvalidArgument):
        EpochLines(path, 0)
