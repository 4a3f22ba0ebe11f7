"""stream_wordcount's words, split by Arrow, are exactly ``str.split()``'s, on ASCII and Unicode text alike."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tests.profiles import examples

ROOT = Path(__file__).resolve().parents[2]


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("stream_wordcount", ROOT / "examples" / "stream_wordcount.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("stream_wordcount", module)
    spec.loader.exec_module(module)
    return module


wordcount = _example()

TRICKY = [
    "",
    " ",
    "\t\n",
    "one",
    "  leading and trailing  ",
    "tabs\tand\x0bvertical\x0cfeeds\rreturns",
    "separators\x1cfile\x1dgroup\x1erecord\x1funit",
    "next\x85line no\xa0break",
    "ogham\u1680space en\u2002em\u2003thin\u2009hair\u200a",
    "line\u2028para\u2029narrow\u202fmath\u205fideo\u3000graphic",
    "zero\u200bwidth is not whitespace, nor\ufeffBOM nor\u180emongolian",
    "naïve café Straße 東京 ﻿emoji 🎉 mixed",
    "\u3000\u3000",
    "a" * 300 + " " + "b",
]


def reference(lines: list[str | None]) -> list[str]:
    """What the example's words were before Arrow split them: ``str.split()`` on every line."""
    return [word for line in lines if line for word in line.split()]


def split(lines: list[str | None]) -> list[str]:
    batch = pa.RecordBatch.from_arrays([pa.array(lines, pa.string())], names=["value"])
    out = wordcount.words(batch)
    assert out.schema.names == ["word"]
    return list(out.column("word").to_pylist())


@pytest.mark.parametrize("arrow", [True, False], ids=["utf8_split_whitespace", "python-whitespace-regex"])
def test_tricky_lines_split_as_str_split(monkeypatch: pytest.MonkeyPatch, arrow: bool) -> None:
    monkeypatch.setattr(wordcount, "arrow_splits_as_python", lambda: arrow)
    lines: list[str | None] = [*TRICKY, None]
    assert split(lines) == reference(lines)
    for line in TRICKY:  # one line alone: nothing carried between lines
        assert split([line]) == reference([line]), repr(line)


def test_this_arrow_agrees_with_python_on_whitespace() -> None:
    # Every character str.isspace() knows, no other: U+3000 is the last one, and the scan covers all of Unicode.
    assert "".join(c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace()) == wordcount.PYTHON_WHITESPACE
    assert wordcount.arrow_splits_as_python()


TEXT = st.text(
    alphabet=st.sampled_from([*wordcount.PYTHON_WHITESPACE, "a", "Z", "é", "東", "🎉", "\u200b", "\ufeff", "-"]),
    max_size=40,
)


@hsettings(max_examples=examples(200))
@given(st.lists(st.one_of(st.none(), TEXT), max_size=8))
def test_any_lines_split_as_str_split(lines: list[str | None]) -> None:
    assert split(lines) == reference(lines)
