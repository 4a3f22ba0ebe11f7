"""Rows held for event-time epochs still open, kept under a hosted query's checkpoint between micro-batches.

With an event-time column on the executors (``run_stream(epoch=..., processes=N)``) a row of an epoch at or past
the frontier waits in its process until the frontier reaches it. So that a restart finds it, each process writes,
at the close of micro-batch ``b``, only the rows *that micro-batch* added to those held:
``CK/pytimely/held/batch-<b>-p<P>-until<E>.arrow`` (``E`` its largest epoch), signed with the checkpoint's key.
Nothing is rewritten. The frontier in the commit record decides what is held after a restart: the rows at or past
it in the files of committed micro-batches. A file of a micro-batch never committed (a crash between the write and
the commit) is removed, and so is one whose rows all lie below the committed frontier (every one of them entered
its epoch).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from pytimely.errors import CheckpointMismatchError
from pytimely.spark.stream_checkpoint import read_signed_arrow, write_signed_arrow

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["clear_held", "load_held", "write_held"]

_NAME = re.compile(r"^batch-(\d{12})-p(\d{5})-until(-?\d+)\.arrow$")
_EARLIER = re.compile(r"^batch-\d{12}$")


def _folder(own: str | Path) -> Path:
    return Path(own) / "held"


def _files(own: str | Path) -> list[tuple[Path, int, int]]:
    """The held files as ``(path, micro-batch, largest epoch)``, in name order; other names are no held files."""
    folder = _folder(own)
    found = []
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        if _EARLIER.match(path.name) and path.is_dir():
            raise CheckpointMismatchError(
                f"{path} holds held rows in an earlier layout (one folder a micro-batch, rewritten whole): finish "
                "the query with the pytimely that wrote it, or start it on a new checkpoint"
            )
        match = _NAME.match(path.name)
        if match is not None:
            found.append((path, int(match.group(1)), int(match.group(3))))
    return found


def write_held(
    own: str | Path, key: bytes, batch: int, process: int, rows: pa.Table, column: str, frontier: int
) -> None:
    """Keep the rows of ``rows`` at or past ``frontier`` (micro-batch ``batch``'s newly held rows in ``process``)."""
    import pyarrow.compute as pc

    held = rows.filter(pc.greater_equal(rows.column(column), frontier))
    if held.num_rows == 0:
        return
    until = int(pc.max(held.column(column)).as_py())
    path = _folder(own) / f"batch-{batch:012d}-p{process:05d}-until{until}.arrow"
    write_signed_arrow(path, held, key)


def load_held(
    own: str | Path, key: bytes, committed: int, frontier: int, process: int, processes: int, column: str
) -> pa.Table | None:
    """``process``'s share of the rows held after micro-batch ``committed`` moved the frontier to ``frontier``: the
    rows at or past it in the files of committed micro-batches, the files taken in turn by the ``processes``
    processes. A file not signed with ``key`` is refused (:class:`~pytimely.errors.CheckpointFileError`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if committed < 0:
        return None
    files = [path for path, batch, until in _files(own) if batch <= committed and until >= frontier]
    tables = []
    for path in files[process::processes]:
        table = read_signed_arrow(path, key)
        tables.append(table.filter(pc.greater_equal(table.column(column), frontier)))
    return pa.concat_tables(tables) if tables else None


def clear_held(own: str | Path, committed: int, frontier: int) -> None:
    """Remove the held files no run can need: those of micro-batches after ``committed`` (never committed), and
    those whose rows all lie below ``frontier`` (all entered their epochs)."""
    for path, batch, until in _files(own):
        if batch > committed or until < frontier:
            path.unlink(missing_ok=True)
