"""Rows held for event-time epochs still open, kept under a hosted query's checkpoint between micro-batches.

With an event-time column on the executors (``run_stream(epoch=..., processes=N)``) a row of an epoch at or past
the frontier waits in its process until the frontier reaches it. So that a restart finds it, each process writes,
at the close of micro-batch ``b``, only the rows *that micro-batch* added to those held:
``CK/pytimely/held/batch-<b>-p<P>-until<E>.arrow`` (``E`` its largest epoch), signed with the checkpoint's key.
Nothing is rewritten. The frontier in the commit record decides what is held after a restart: the rows at or past
it in the files of committed micro-batches. A file of a micro-batch never committed (a crash between the write and
the commit) is removed, and so is one whose rows all lie below the committed frontier (every one of them entered
its epoch).

Given the host generation (``write_held(..., generation=G)``), a file is named ``batch-<b>-g<G>-p<P>-until<E>``
and, of a micro-batch's files, only those of the newest generation that wrote any are taken up: a process of a
cancelled generation that writes after the next attempt began (its task not yet killed) cannot add its copy of
the rows to the committed attempt's. A retried attempt holds the same rows (the frontier follows from the
micro-batch's rows), so the newest generation's files are the committed attempt's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from pytimely.errors import CheckpointFileError, CheckpointMismatchError
from pytimely.spark.signed_files import read_signed_arrow, write_signed_arrow
from pytimely.spark.stream_checkpoint import StreamCheckpoint

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["clear_held", "load_held", "write_held"]

_NAME = re.compile(r"^batch-(\d{12})(?:-g(\d+))?-p(\d{5})-until(-?\d+)\.arrow$")
_CUT = re.compile(r"^\.(batch-\d{12}(?:-g\d+)?-p\d{5}-until-?\d+\.arrow)\..*\.tmp$")
_EARLIER = re.compile(r"^batch-\d{12}$")


def _folder(own: str | Path) -> Path:
    return Path(own) / "held"


def _files(own: str | Path) -> list[tuple[Path, int, int, int]]:
    """The held files as ``(path, micro-batch, generation, largest epoch)``, in name order (generation -1 when the
    name has none); other names are no held files."""
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
            generation = -1 if match.group(2) is None else int(match.group(2))
            found.append((path, int(match.group(1)), generation, int(match.group(4))))
    return found


def write_held(
    own: str | Path,
    key: bytes,
    batch: int,
    process: int,
    rows: pa.Table,
    column: str,
    frontier: int,
    generation: int | None = None,
) -> None:
    """Keep the rows of ``rows`` at or past ``frontier`` (micro-batch ``batch``'s newly held rows in ``process`` of
    host generation ``generation``)."""
    import pyarrow.compute as pc

    held = rows.filter(pc.greater_equal(rows.column(column), frontier))
    if held.num_rows == 0:
        return
    until = int(pc.max(held.column(column)).as_py())
    tag = "" if generation is None else f"-g{generation}"
    path = _folder(own) / f"batch-{batch:012d}{tag}-p{process:05d}-until{until}.arrow"
    write_signed_arrow(path, held, key)


def load_held(
    own: str | Path, key: bytes, committed: int, frontier: int, process: int, processes: int, column: str
) -> pa.Table | None:
    """``process``'s share of the rows held after micro-batch ``committed`` moved the frontier to ``frontier``: the
    rows at or past it in the files of committed micro-batches (of each, the newest generation's), the files taken
    in turn by the ``processes`` processes. A file not signed with ``key`` is refused
    (:class:`~pytimely.errors.CheckpointFileError`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if committed < 0:
        return None
    files = [path for path, batch, until in _taken(_files(own)) if batch <= committed and until >= frontier]
    tables = []
    for path in files[process::processes]:
        table = read_signed_arrow(path, key)
        tables.append(table.filter(pc.greater_equal(table.column(column), frontier)))
    return pa.concat_tables(tables) if tables else None


def clear_held(own: str | Path, committed: int, frontier: int, *, owner: str | None = None) -> None:
    """Remove the held files no run can need: those of micro-batches after ``committed`` (never committed), those
    whose rows all lie below ``frontier`` (all entered their epochs), and those of a generation older than another
    that wrote for the same micro-batch (a cancelled attempt's).

    With ``owner`` (the run's ownership token) nothing is removed unless that run still owns the checkpoint, else
    :class:`~pytimely.errors.StreamFencedError`: a run taken over (an orphaned query left on a Spark Connect server)
    knows an older ``committed`` and would remove the held rows of micro-batches the new owner committed since."""
    if owner is not None:
        StreamCheckpoint(Path(own).parent).check_owner(owner, committed + 1)
    _remove_cut_short(own)
    found = _files(own)
    taken = {path for path, _, _ in _taken(found)}
    for path, batch, _, until in found:
        if batch > committed or until < frontier or path not in taken:
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise CheckpointFileError(f"{path} cannot be removed: {exc.strerror or exc}") from None


def _remove_cut_short(own: str | Path) -> None:
    """Remove the temporary files of held writes whose writer no longer runs (a process killed mid-write): each
    micro-batch's file has a name of its own, so no later write of the same name would tidy them."""
    from pytimely.atomic import remove_stale

    folder = _folder(own)
    names = {m.group(1) for p in (folder.iterdir() if folder.is_dir() else []) if (m := _CUT.match(p.name))}
    for name in sorted(names):
        remove_stale(folder / name)


def _taken(found: list[tuple[Path, int, int, int]]) -> list[tuple[Path, int, int]]:
    """Of each micro-batch's files, those of the newest generation that wrote any, as ``(path, batch, until)``."""
    newest: dict[int, int] = {}
    for _, batch, generation, _ in found:
        newest[batch] = max(newest.get(batch, generation), generation)
    return [(path, batch, until) for path, batch, generation, until in found if generation == newest[batch]]
