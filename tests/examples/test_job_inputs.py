"""Bad input to the jobs: a typed error naming file and line, exit status 2, one line on stderr, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytimely import Scope, Worker, execute
from pytimely.algorithms import connected_components
from pytimely.errors import InputFormatError, InvalidArgument, OutputPathError
from pytimely.io import read_edges, read_words, write_table
from tests.profiles import examples

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_cli(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True, timeout=120, check=False
    )


def assert_refused(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit status 2, one line on stderr (no traceback) holding every needle."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


BAD_EDGES = [
    # (name, bytes, flags, line): each once gave a wrong output, a silent drop or a raw traceback.
    ("past_int64", b"1,2\n2,3\n18446744073709551617,4\n", (), 3),
    ("below_int64", b"1,2\n-9223372036854775809,4\n", (), 2),
    ("trailing_comma", b"1,2\n3,\n", (), 2),
    ("negative_epoch", b"1,2,0\n2,3,-1\n4,5,1\n", ("--epochs",), 2),
    ("binary", b"1,2\n\x9f\x80\xff\x00garbage", (), 2),
]


@pytest.mark.parametrize(("name", "content", "flags", "line"), BAD_EDGES, ids=[b[0] for b in BAD_EDGES])
def test_wcc_refuses_bad_edges_naming_file_and_line(
    tmp_path: Path, name: str, content: bytes, flags: tuple[str, ...], line: int
) -> None:
    path = tmp_path / f"{name}.csv"
    path.write_bytes(content)
    with pytest.raises(InputFormatError) as info:
        read_edges(path, epochs=bool(flags))
    assert (info.value.path, info.value.line) == (str(path), line)
    out = tmp_path / "out.csv"
    assert_refused(run_cli("wcc.py", "--edges", str(path), "--output", str(out), *flags), f"{path}, line {line}")
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no output, no temporary file


def test_int64_ends_are_read_exactly(tmp_path: Path) -> None:
    # numpy clamps out-of-range values to these ends, so a value at an end is checked again; it must stay.
    top, bottom = 2**63 - 1, -(2**63)
    path = tmp_path / "ends.csv"
    path.write_text(f"{top},1\n2,{bottom}\n")
    assert read_edges(path).tolist() == [[top, 1], [2, bottom]]


def test_a_share_of_lines_names_the_line_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "e.csv"
    path.write_text("src,dst\n1,2\n3,x\n5,6\n")
    assert read_edges(path, part=0, parts=2).tolist() == [[1, 2], [5, 6]]
    with pytest.raises(InputFormatError) as info:
        read_edges(path, part=1, parts=2)
    assert info.value.line == 3
    with pytest.raises(InvalidArgument):
        read_edges(path, part=2, parts=2)


def test_wcc_missing_output_folder_is_named_before_any_work(tmp_path: Path) -> None:
    edges = tmp_path / "e.csv"
    edges.write_text("1,2\n")
    out = tmp_path / "no" / "such" / "out.csv"
    assert_refused(run_cli("wcc.py", "--edges", str(edges), "--output", str(out)), str(out))
    assert not (tmp_path / "no").exists()


def test_wordcount_missing_output_folder_and_negative_epochs(tmp_path: Path) -> None:
    text = tmp_path / "t.txt"
    text.write_text("a b a\n")
    out = tmp_path / "missing" / "o.tsv"
    assert_refused(run_cli("wordcount.py", "--input", str(text), "--output", str(out)), str(out))
    result = run_cli("wordcount.py", "--input", str(text), "--output", str(tmp_path / "o.tsv"), "--epochs", "-2")
    assert result.returncode == 2 and "--epochs" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "o.tsv").exists()


def test_missing_input_is_one_line_with_status_2(tmp_path: Path) -> None:
    missing = tmp_path / "absent.csv"
    assert_refused(run_cli("wcc.py", "--edges", str(missing), "--output", str(tmp_path / "o")), str(missing))
    assert_refused(run_cli("wordcount.py", "--input", str(missing), "--output", str(tmp_path / "o")), str(missing))


def test_write_table_into_a_missing_folder_is_a_typed_error_naming_the_output(tmp_path: Path) -> None:
    out = tmp_path / "nope" / "t.csv"
    with pytest.raises(OutputPathError) as info:
        write_table(out, ["a"], np.zeros((2, 1), dtype=np.int64))
    assert info.value.path == str(out)
    assert ".tmp" not in str(info.value)


def test_read_words_names_the_undecodable_line(tmp_path: Path) -> None:
    path = tmp_path / "w.txt"
    path.write_bytes(b"ok\nok\n\xc3(\n")
    with pytest.raises(InputFormatError) as info:
        read_words(path)
    assert info.value.line == 3
    with pytest.raises(InputFormatError, match=r"line 3: .* at byte 6"):
        read_words(path, part=1, parts=2)  # the second share holds the bad bytes: the line counts from the file's start
    assert read_words(path, part=0, parts=2) == ["ok", "ok"]


def test_words_of_a_pipe_are_shared_out_like_a_files(tmp_path: Path) -> None:
    import threading

    text = "alpha beta\ngamma  delta epsilon\n" * 50
    shares = []
    for part in range(3):
        fifo = tmp_path / f"pipe{part}"
        os.mkfifo(fifo)
        writer = threading.Thread(target=fifo.write_text, args=(text,), kwargs={"encoding": "utf-8"})
        writer.start()
        shares.append(read_words(fifo, part=part, parts=3))
        writer.join(timeout=10)
    assert all(shares) and [w for share in shares for w in share] == text.split()


@given(
    st.lists(
        st.sampled_from(["a", "bb", "ccc", "é", "日本", "x" * 300, " ", "  ", "\n", "\t", "\x1c", "\xa0", "\u2003"])
    ),
    st.integers(1, 6),
)
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_word_shares_are_contiguous_and_together_the_whole_text(tmp_path: Path, pieces: list[str], parts: int) -> None:
    path = tmp_path / "words.txt"
    text = "".join(pieces)
    path.write_text(text, encoding="utf-8")
    shares = [read_words(path, part=p, parts=parts) for p in range(parts)]
    assert [w for share in shares for w in share] == text.split()


@pytest.mark.parametrize(
    "batch",
    [
        [(1, 2**70)],
        [(1, "x")],
        [1, 2, 3],
        np.array([[1.5, 2.0]]),
        np.array([[2**63 + 5, 1]], dtype=np.uint64),
    ],
    ids=["past_int64", "text", "flat", "floats", "uint64_past_int64"],
)
def test_connected_components_refuses_edges_a_cast_would_change(batch: Any) -> None:
    def job(worker: Worker) -> None:
        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            connected_components(stream).capture()
            return handle

        worker.dataflow(build).send_batch(batch)

    with pytest.raises(InputFormatError, match="64-bit integers"):
        execute(job)


@pytest.mark.parametrize("flag", ["--vertices", "--edges", "--processes"])
def test_demo_refuses_non_positive_sizes_before_starting_spark(flag: str) -> None:
    result = run_cli("demo.py", flag, "0", "--no-graphx")
    assert result.returncode == 2 and flag in result.stderr and "Traceback" not in result.stderr, result.stderr


def run_target(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``pytimely run jobmod:job`` with ``source`` as the module ``jobmod``."""
    (tmp_path / "jobmod.py").write_text(source)
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "pytimely", "run", "jobmod:job", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": path},
    )


def test_pytimely_run_names_a_broken_module_as_a_usage_error(tmp_path: Path) -> None:
    result = run_target(tmp_path, "def job(:\n")
    assert result.returncode == 2 and "cannot import 'jobmod': SyntaxError" in result.stderr
    assert "Traceback" not in result.stderr


def test_pytimely_run_reports_bad_input_with_status_2(tmp_path: Path) -> None:
    edges = tmp_path / "e.csv"
    edges.write_text("1,2\n3,\n")
    source = f"from pytimely.io import read_edges\n\ndef job(worker):\n    read_edges({str(edges)!r})\n"
    result = run_target(tmp_path, source)
    assert_refused(result, f"{edges}, line 2")


def reference_edges(text: str, width: int) -> list[list[int]] | int:
    """What read_edges must give for ``text``: the rows, or the 1-based number of the first bad line."""
    lines = text.splitlines()
    headers = {("src", "dst"), ("src", "dst", "epoch")}
    start = 1 if lines and tuple(c.strip() for c in lines[0].split(",")) in headers else 0
    rows = []
    for i in range(start, len(lines)):
        if not lines[i].strip():
            continue
        fields = lines[i].split(",")
        try:
            row = [int(f) for f in fields]
        except ValueError:
            return i + 1
        if len(row) != width or not all(-(2**63) <= v < 2**63 for v in row) or (width == 3 and row[2] < 0):
            return i + 1
        rows.append(row)
    return rows


fields = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(str),
    st.sampled_from(["2**63", "9223372036854775808", "-9223372036854775809", "18446744073709551617", "", "x", " 7",
                     "1.5", "1e3", "0x10", "+3", "٣"]),
)
csv_lines = st.lists(
    st.one_of(st.lists(fields, min_size=1, max_size=4).map(",".join), st.just(""), st.just("src,dst")),
    max_size=12,
)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=csv_lines, epochs=st.booleans())
def test_read_edges_agrees_with_a_line_by_line_reference(tmp_path: Path, lines: list[str], epochs: bool) -> None:
    path = tmp_path / "e.csv"
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    expected = reference_edges(text, 3 if epochs else 2)
    if isinstance(expected, int):
        with pytest.raises(InputFormatError) as info:
            read_edges(path, epochs=epochs)
        assert info.value.line == expected
    else:
        assert read_edges(path, epochs=epochs).tolist() == expected


def test_bad_edges_stop_a_two_process_run_with_nothing_written(tmp_path: Path) -> None:
    edges = tmp_path / "e.csv"
    edges.write_text("".join(f"{i},{i + 1}\n" for i in range(50)) + "7,18446744073709551617\n")
    out = tmp_path / "out.csv"
    result = subprocess.run(
        [sys.executable, "-m", "pytimely", "launch", "-n", "2", "--", sys.executable, str(EXAMPLES / "wcc.py"),
         "--edges", str(edges), "--output", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 2, result.stderr
    assert f"{edges}, line 51: a value is outside the 64-bit integer range" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [edges.name]
