"""A stream's output by epoch under an fsspec URL: parts written where they are computed, an epoch committed whole.

Each process writes its part of an epoch's output itself (:meth:`EpochOutput.write_part`, all or nothing);
the driver then commits the epoch (:meth:`EpochOutput.commit`) by writing its manifest, last and atomically.
A reader (:meth:`EpochOutput.read`, ``spark.read``, ``spark.readStream``) sees an epoch whole or not at all.

Layout under the output's URL ``OUT``::

    OUT/epoch-000000000007/part-<name>.parquet       one part of epoch 7 (or .csv: a header, then rows)
    OUT/_pytimely/output.json                        the output's format and Arrow schema
    OUT/_pytimely/commits/epoch-000000000007.json    epoch 7's manifest: its parts, rows, sizes, checksums
    OUT/_spark_metadata/<n>                          Spark's file-sink log: the n-th committed epoch's files

A part is written under a hidden temporary name and renamed on a file system, or in one PUT on an object
store, so no reader meets half a part; files of an epoch without a manifest (a crashed or retried attempt)
are listed by neither the manifests nor Spark's log, and ``discard_uncommitted()`` removes them.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import secrets
import time
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from pytimely.atomic import write_atomic
from pytimely.errors import InvalidArgument, StreamSinkError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "EpochOutput",
    "OutputCommitError",
    "OutputCorruptError",
    "OutputSchemaError",
    "Part",
]


class OutputSchemaError(StreamSinkError):
    """An output folder holds another schema's or format's output (or other files), or a table does not fit."""


class OutputCommitError(StreamSinkError):
    """An epoch's commit was refused: a part is missing or differs from what was written, or epochs out of order."""


class OutputCorruptError(StreamSinkError):
    """A committed file cannot be read back as its manifest describes it (size, checksum, format)."""


FORMATS = {"parquet": "parquet", "csv": "csv"}
"""Output formats, by name, with the extension of their parts."""

LOCAL_SCHEMES = ("file", "local")
OBJECT_SCHEMES = ("s3", "s3a", "gs", "gcs", "memory")
"""Object stores whose one-call write is all or nothing, so a part needs no rename."""

SPARK_COMPACT_INTERVAL = 10
"""Spark's default ``spark.sql.streaming.fileSink.log.compactInterval``: every tenth log entry lists all files."""

_PART_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_EPOCH_DIR = re.compile(r"^epoch-(\d{12})$")
_COMMIT = re.compile(r"^epoch-(\d{12})\.json$")
_SPARK_LOG = re.compile(r"^(\d+)(\.compact)?$")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_SPARK_SCHEMES = {"s3": "s3a", "s3a": "s3a", "gs": "gs", "gcs": "gs"}


@dataclass(frozen=True, slots=True)
class Part:
    """One written part of an epoch's output: where it is (relative to the output), its rows, size and CRC-32."""

    epoch: int
    name: str
    path: str
    rows: int
    bytes: int
    checksum: str

    def to_json(self) -> str:
        """The part as one line of JSON (what an executor sends the driver)."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | dict[str, Any]) -> Part:
        """The part a :meth:`to_json` line (or its parsed dict) describes; anything else is InvalidArgument."""
        try:
            data = json.loads(text) if isinstance(text, str) else text
            part = cls(int(data["epoch"]), str(data["name"]), str(data["path"]), int(data["rows"]),
                       int(data["bytes"]), str(data["checksum"]))  # fmt: skip
        except (ValueError, TypeError, KeyError) as exc:
            raise InvalidArgument(f"not a part description: {str(text)[:200]!r} ({exc})") from None
        if part.path != _part_path(part.epoch, part.name, part.path.rsplit(".", 1)[-1]):
            raise InvalidArgument(f"part {part.name!r} of epoch {part.epoch}: path {part.path!r} is not its own")
        return part


def _part_path(epoch: int, name: str, extension: str) -> str:
    return f"{_epoch_dir(epoch)}/part-{name}.{extension}"


def _epoch_dir(epoch: int) -> str:
    return f"epoch-{epoch:012d}"


def _checksum(data: Any) -> str:
    return f"{zlib.crc32(data) & 0xFFFFFFFF:08x}"


class EpochOutput:
    """The output of a stream's epochs under ``url`` (a path, ``file:///ABS``, ``s3://bucket/prefix``).

    ``format`` is ``parquet`` or ``csv`` (a header of the schema's columns, then rows, sorted by ``order_by``
    if given); ``storage_options`` go to fsspec (credentials, endpoint). With ``durable`` parts are fsynced
    before they are renamed (manifests always are), so a power cut cannot leave a committed part empty.
    A URL of a scheme that cannot hold the output (no atomic write: ``http://``, ``ftp://``, ...) is refused
    here, before anything is made, with :class:`StreamSinkError`.
    """

    def __init__(
        self,
        url: str | Any,
        schema: pa.Schema,
        *,
        format: str = "parquet",
        storage_options: dict[str, Any] | None = None,
        order_by: Sequence[str] = (),
        durable: bool = False,
        spark_log: bool = True,
    ) -> None:
        import fsspec  # type: ignore[import-untyped]
        import pyarrow as pa

        text = str(url)
        if format not in FORMATS:
            raise InvalidArgument(f"output {text}: format must be one of {sorted(FORMATS)}, got {format!r}")
        if not isinstance(schema, pa.Schema):
            raise InvalidArgument(f"output {text}: schema must be a pyarrow.Schema, got {type(schema).__name__}")
        missing = [c for c in order_by if c not in schema.names]
        if missing:
            raise InvalidArgument(f"output {text}: order_by names {missing}, not columns of {schema.names}")
        match = _SCHEME.match(text)
        scheme = match.group(1).lower() if match else "file"
        if scheme not in LOCAL_SCHEMES + OBJECT_SCHEMES:
            raise StreamSinkError(
                f"the output {text}: a {scheme}:// location cannot hold it (a part must be written all or nothing: "
                f"give a path, a file:// URL or an object store: {', '.join(s + '://' for s in OBJECT_SCHEMES)})"
            )
        self.url = text
        self.schema = schema
        self.format = format
        self.storage_options = dict(storage_options or {})
        self.order_by = list(order_by)
        self.durable = durable
        self.spark_log = spark_log
        self.local = scheme in LOCAL_SCHEMES
        self.scheme = scheme
        try:
            self.fs, root = fsspec.core.url_to_fs(text, **self.storage_options)
        except Exception as exc:  # fsspec back ends raise their own kinds (ImportError, ValueError, ...)
            raise StreamSinkError(f"the output {text} cannot be opened: {exc}") from None
        self.root: str = root.rstrip("/") or "/"
        self._recorded = False

    def __repr__(self) -> str:
        return f"EpochOutput({self.url!r}, format={self.format!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # The file system object is made again where the output is unpickled (an executor).
        return (_rebuild, (self.url, self.schema, self.format, self.storage_options, self.order_by, self.durable,
                           self.spark_log))  # fmt: skip

    @property
    def extension(self) -> str:
        """The parts' file extension."""
        return FORMATS[self.format]

    def _path(self, relative: str) -> str:
        return f"{self.root}/{relative}" if self.root != "/" else f"/{relative}"

    def _put(self, relative: str, data: bytes, *, durable: bool) -> None:
        """Write one file all or nothing: renamed into place locally, one PUT on an object store."""
        path = self._path(relative)
        if self.local:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, data, durable=durable)
        else:
            self.fs.pipe_file(path, data)

    def _get(self, relative: str) -> bytes | None:
        try:
            data: bytes = self.fs.cat_file(self._path(relative))
        except FileNotFoundError:
            return None
        return data

    def _list(self, relative: str) -> list[tuple[str, str]]:
        """(name, type) of what is directly under ``relative`` ("" for the root); nothing if it does not exist."""
        path = self._path(relative) if relative else self.root
        try:
            self.fs.invalidate_cache(path)
            entries = self.fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = {}
        for entry in entries:
            name = str(entry["name"]).rstrip("/").rsplit("/", 1)[-1]
            if name:
                found[name] = str(entry.get("type", "file"))
        return sorted(found.items())

    # -- checks before the first epoch -------------------------------------------------------------------------

    def prepare(self) -> None:
        """Check the location can be written and holds no other output; nothing visible to readers is written.

        A failure to write is :class:`StreamSinkError` naming the URL and the cause; a folder holding another
        schema's or format's output, or files that are not a pytimely output, is :class:`OutputSchemaError`.
        A Spark log left behind its manifests by a crash is completed.
        """
        probe = f"_pytimely/.probe-{secrets.token_hex(6)}"
        try:
            if self.local:
                Path(self._path("_pytimely")).mkdir(parents=True, exist_ok=True)
            self.fs.pipe_file(self._path(probe), b"")
            self.fs.rm_file(self._path(probe))
        except Exception as exc:  # fsspec back ends raise their own kinds (OSError, botocore, ...)
            cause = getattr(exc, "strerror", None) or exc
            raise StreamSinkError(f"the output {self.url} cannot be written: {cause}") from None
        self._check_record()
        if self.spark_log and self._spark_uri("") is not None and self.local:
            # An empty log already tells Spark to read only logged files: no part is visible before its commit.
            Path(self._path("_spark_metadata")).mkdir(exist_ok=True)
        self._sync_spark_log()

    def _record(self) -> dict[str, Any]:
        return {"format": self.format, "columns": [[f.name, str(f.type)] for f in self.schema],
                "schema": self.schema.serialize().to_pybytes().hex()}  # fmt: skip

    def _check_record(self) -> None:
        """The folder's recorded format and schema are this output's (recorded now if the folder is new)."""
        if self._recorded:
            return
        import pyarrow as pa

        text = self._get("_pytimely/output.json")
        if text is None:
            others = [n for n, _ in self._list("") if not n.startswith(("_", "."))]
            if others:
                raise OutputSchemaError(
                    f"the output {self.url} holds files that are not a pytimely output ({', '.join(others[:5])}): "
                    "give an empty or new folder"
                )
            self._put("_pytimely/output.json", json.dumps(self._record(), indent=1).encode(), durable=True)
        else:
            try:
                recorded = json.loads(text)
                schema = pa.ipc.read_schema(pa.py_buffer(bytes.fromhex(recorded["schema"])))
                kind = recorded["format"]
            except (ValueError, KeyError, TypeError, pa.ArrowInvalid) as exc:
                raise OutputCorruptError(
                    f"the output {self.url}: _pytimely/output.json does not parse: {exc}"
                ) from None
            if kind != self.format or not schema.equals(self.schema):
                raise OutputSchemaError(
                    f"the output {self.url} holds {kind} output of ({_columns(schema)}), not {self.format} output "
                    f"of ({_columns(self.schema)}): give another folder"
                )
        self._recorded = True

    # -- executors: parts --------------------------------------------------------------------------------------

    def write_part(self, epoch: int, part: str, table: pa.Table) -> Part:
        """Write ``table`` as part ``part`` of ``epoch``, all or nothing; the same part written again replaces it.

        Safe from several processes at once (each part is its own file). Nothing is visible to readers until
        the driver commits the epoch with the returned :class:`Part` among its parts.
        """
        if not isinstance(epoch, int) or epoch < 0:
            raise InvalidArgument(f"output {self.url}: epoch must be an integer >= 0, got {epoch!r}")
        if not _PART_NAME.match(part):
            raise InvalidArgument(f"output {self.url}: part name {part!r} must match {_PART_NAME.pattern}")
        data = self._encode(self._fit(table, epoch))
        relative = _part_path(epoch, part, self.extension)
        try:
            self._put(relative, data, durable=self.durable)
        except Exception as exc:  # fsspec back ends raise their own kinds (OSError, botocore, ...)
            cause = getattr(exc, "strerror", None) or exc
            raise StreamSinkError(f"the output {self.url}: part {relative} cannot be written: {cause}") from None
        return Part(epoch, part, relative, table.num_rows, len(data), _checksum(data))

    def _fit(self, table: pa.Table, epoch: int) -> pa.Table:
        """``table`` with the output's columns, in order, of the output's types (sorted by ``order_by``)."""
        import pyarrow as pa

        if set(table.column_names) != set(self.schema.names):
            raise OutputSchemaError(
                f"the output {self.url}: epoch {epoch}'s table has columns {table.column_names}, "
                f"not {self.schema.names}"
            )
        try:
            table = table.select(self.schema.names).cast(self.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise OutputSchemaError(
                f"the output {self.url}: epoch {epoch}'s table ({_columns(table.schema)}) does not fit "
                f"({_columns(self.schema)}): {exc}"
            ) from None
        if self.order_by and table.num_rows:
            table = table.sort_by([(c, "ascending") for c in self.order_by])
        return table

    def _encode(self, table: pa.Table) -> bytes:
        import pyarrow as pa

        if self.format == "parquet":
            import pyarrow.parquet as pq

            sink = pa.BufferOutputStream()
            pq.write_table(table, sink)
            return bytes(sink.getvalue().to_pybytes())
        import pyarrow.csv as pcsv

        buffer = io.BytesIO()
        buffer.write((",".join(self.schema.names) + "\n").encode("utf-8"))
        try:
            # Unquoted, as a person writes CSV; Arrow refuses where a value needs quotes, and then quotes strings.
            pcsv.write_csv(table, buffer, pcsv.WriteOptions(include_header=False, quoting_style="none"))
        except pa.ArrowInvalid:
            buffer = io.BytesIO()
            buffer.write((",".join(self.schema.names) + "\n").encode("utf-8"))
            pcsv.write_csv(table, buffer, pcsv.WriteOptions(include_header=False, quoting_style="needed"))
        return buffer.getvalue()

    # -- the driver: commits -----------------------------------------------------------------------------------

    @overload
    def commit(self, epoch: int, parts: Sequence[Part], /) -> None: ...

    @overload
    def commit(self, epoch: int, parts: pa.Table, /) -> None: ...

    def commit(self, epoch: int, parts: Sequence[Part] | pa.Table, /) -> None:
        """Make ``parts`` the output of ``epoch``: its manifest written last and atomically, then Spark's log.

        Idempotent for the same parts. A part that is not there or differs in size from what was written, an
        epoch committed before with other parts, or one below the last committed epoch, is refused with
        :class:`OutputCommitError`. Files of the epoch the manifest does not list (earlier attempts) are then
        removed. Given a table instead of parts (the driver-hosted path's ``Sink``), writes it as the epoch's
        one part first.
        """
        import pyarrow as pa

        if isinstance(parts, pa.Table):
            parts = [self.write_part(epoch, "0", parts)]
        if not isinstance(epoch, int) or epoch < 0:
            raise InvalidArgument(f"output {self.url}: epoch must be an integer >= 0, got {epoch!r}")
        chosen = sorted(parts, key=lambda p: p.name)
        for part in chosen:
            if part.epoch != epoch or part.path != _part_path(epoch, part.name, self.extension):
                raise OutputCommitError(f"the output {self.url}: part {part.path} is not a part of epoch {epoch}")
        if len({p.name for p in chosen}) != len(chosen):
            raise OutputCommitError(f"the output {self.url}: epoch {epoch} is given a part name twice")
        self._check_record()
        recorded = self._manifest(epoch)
        if recorded is not None:
            if recorded != chosen:
                raise OutputCommitError(
                    f"the output {self.url}: epoch {epoch} is committed already with other parts "
                    f"({', '.join(p.name for p in recorded)})"
                )
        else:
            last = self.last_committed()
            if epoch < last:
                raise OutputCommitError(
                    f"the output {self.url}: epoch {epoch} comes after the committed epoch {last}: epochs commit "
                    "in increasing order"
                )
            self._check_parts(epoch, chosen)
            manifest = {"epoch": epoch, "rows": sum(p.rows for p in chosen), "committed_ms": int(time.time() * 1000),
                        "parts": [asdict(p) for p in chosen]}  # fmt: skip
            self._put(f"_pytimely/commits/{_epoch_dir(epoch)}.json", json.dumps(manifest, indent=1).encode(),
                      durable=True)  # fmt: skip
        self._remove_unlisted(epoch, chosen)
        self._sync_spark_log()

    def _check_parts(self, epoch: int, parts: Sequence[Part]) -> None:
        """Every part is there with the size it was written with (what a commit is allowed to name)."""
        directory = self._path(_epoch_dir(epoch))
        with contextlib.suppress(Exception):  # a file system without a listing cache
            self.fs.invalidate_cache(directory)
        for part in parts:
            try:
                size = int(self.fs.info(self._path(part.path))["size"])
            except FileNotFoundError:
                raise OutputCommitError(
                    f"the output {self.url}: epoch {epoch}'s part {part.path} is not there (never written, or "
                    "removed): the epoch is not committed"
                ) from None
            if size != part.bytes:
                raise OutputCommitError(
                    f"the output {self.url}: epoch {epoch}'s part {part.path} holds {size} bytes, not the {part.bytes} "
                    "written: another attempt replaced it; the epoch is not committed"
                )

    def _remove_unlisted(self, epoch: int, parts: Sequence[Part]) -> list[str]:
        """Remove the files of committed ``epoch`` that its manifest does not list (earlier attempts)."""
        keep = {p.path.rsplit("/", 1)[-1] for p in parts}
        removed = []
        for name, _ in self._list(_epoch_dir(epoch)):
            if name not in keep:
                relative = f"{_epoch_dir(epoch)}/{name}"
                try:
                    self.fs.rm(self._path(relative), recursive=True)
                except FileNotFoundError:
                    continue
                removed.append(relative)
        return removed

    # -- reading -----------------------------------------------------------------------------------------------

    def _manifest(self, epoch: int) -> list[Part] | None:
        relative = f"_pytimely/commits/{_epoch_dir(epoch)}.json"
        text = self._get(relative)
        if text is None:
            return None
        try:
            return sorted((Part.from_json(p) for p in json.loads(text)["parts"]), key=lambda p: p.name)
        except (ValueError, KeyError, TypeError) as exc:
            raise OutputCorruptError(f"the output {self.url}: {relative} does not parse: {exc}") from None

    def committed(self) -> list[int]:
        """The committed epochs, in order."""
        found = (_COMMIT.match(name) for name, _ in self._list("_pytimely/commits"))
        return sorted(int(m.group(1)) for m in found if m is not None)

    def last_committed(self) -> int:
        """The last committed epoch (-1 if none)."""
        epochs = self.committed()
        return epochs[-1] if epochs else -1

    def parts(self, epoch: int) -> list[Part]:
        """The parts of committed ``epoch`` (:class:`OutputCommitError` if it is not committed)."""
        parts = self._manifest(epoch)
        if parts is None:
            raise OutputCommitError(f"the output {self.url}: epoch {epoch} is not committed")
        return parts

    def read(self, epoch: int | None = None) -> pa.Table:
        """The committed output (of ``epoch`` alone if given), in epoch order; never a part of an uncommitted epoch."""
        import pyarrow as pa

        epochs = self.committed() if epoch is None else [epoch]
        tables = [self._decode(part) for e in epochs for part in self.parts(e)]
        if not tables:
            return self.schema.empty_table()
        return pa.concat_tables(tables)

    def _decode(self, part: Part) -> pa.Table:
        import pyarrow as pa

        data = self._get(part.path)
        if data is None or len(data) != part.bytes or _checksum(data) != part.checksum:
            state = "missing" if data is None else f"{len(data)} bytes, CRC-32 {_checksum(data)}"
            raise OutputCorruptError(
                f"the output {self.url}: committed part {part.path} is {state}, not the {part.bytes} bytes, "
                f"CRC-32 {part.checksum} its manifest names"
            )
        try:
            if self.format == "parquet":
                import pyarrow.parquet as pq

                table = pq.read_table(pa.BufferReader(data))
            else:
                import pyarrow.csv as pcsv

                table = pcsv.read_csv(pa.BufferReader(data), convert_options=pcsv.ConvertOptions(
                    column_types=self.schema, strings_can_be_null=False, quoted_strings_can_be_null=False))  # fmt: skip
            return table.select(self.schema.names).cast(self.schema)
        except (pa.ArrowInvalid, KeyError) as exc:
            raise OutputCorruptError(
                f"the output {self.url}: committed part {part.path} does not parse: {exc}"
            ) from None

    def discard_uncommitted(self) -> list[str]:
        """Remove the files of epochs with no manifest, and unlisted files of committed ones; return them.

        For after a crash, before writers start again: a part still being written would be removed too.
        """
        committed = set(self.committed())
        removed = []
        for name, _ in self._list(""):
            match = _EPOCH_DIR.match(name)
            if match is None:
                continue
            epoch = int(match.group(1))
            if epoch in committed:
                removed += self._remove_unlisted(epoch, self.parts(epoch))
            else:
                self.fs.rm(self._path(name), recursive=True)
                removed.append(name)
        return removed

    # -- Spark's file-sink log ---------------------------------------------------------------------------------

    def _spark_uri(self, relative: str) -> str | None:
        """The URI Spark reads ``relative`` by (``None`` where Spark has no file system for the scheme)."""
        if self.local:
            return Path(self._path(relative)).as_uri()
        scheme = _SPARK_SCHEMES.get(self.scheme)
        return None if scheme is None else f"{scheme}://{self._path(relative).lstrip('/')}"

    def _sync_spark_log(self) -> None:
        """Write the entries of ``_spark_metadata`` that the manifests imply and the log lacks.

        Entry ``n`` lists the files of the ``n``-th committed epoch (every tenth, ``n.compact``, all files so
        far), as Spark's own file sink writes them, so Spark's readers list exactly the committed files. Written
        after the manifests, so a crash between leaves a log this completes at the next commit or prepare().
        """
        if not self.spark_log or self._spark_uri("") is None:
            return
        epochs = self.committed()
        present = (_SPARK_LOG.match(name) for name, _ in self._list("_spark_metadata"))
        written = max((int(m.group(1)) for m in present if m is not None), default=-1)
        for index in range(written + 1, len(epochs)):
            compact = (index + 1) % SPARK_COMPACT_INTERVAL == 0
            listed = epochs[: index + 1] if compact else [epochs[index]]
            lines = ["v1"] + [self._spark_entry(p) for e in listed for p in self.parts(e)]
            name = f"{index}.compact" if compact else str(index)
            self._put(f"_spark_metadata/{name}", ("\n".join(lines)).encode(), durable=True)

    def _spark_entry(self, part: Part) -> str:
        entry = {"path": self._spark_uri(part.path), "size": part.bytes, "isDir": False,
                 "modificationTime": int(time.time() * 1000), "blockReplication": 1, "blockSize": part.bytes,
                 "action": "add"}  # fmt: skip
        return json.dumps(entry)


def _rebuild(
    url: str,
    schema: pa.Schema,
    format: str,
    options: dict[str, Any],
    order_by: list[str],
    durable: bool,
    spark_log: bool,
) -> EpochOutput:
    """An :class:`EpochOutput` made again from its settings (unpickling)."""
    return EpochOutput(url, schema, format=format, storage_options=options, order_by=order_by, durable=durable,
                       spark_log=spark_log)  # fmt: skip


def _columns(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)
