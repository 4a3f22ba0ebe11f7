"""A stream's output by epoch under an fsspec URL: parts written where they are computed, an epoch committed whole.

Each process writes its part of an epoch's output itself (:meth:`EpochOutput.write_part`, all or nothing);
the driver then commits the epoch (:meth:`EpochOutput.commit`) by writing its manifest, last and atomically.
A reader (:meth:`EpochOutput.read`, ``spark.read``, ``spark.readStream``) sees an epoch whole or not at all.

Layout under the output's URL ``OUT``::

    OUT/part-000000000007-<name>.parquet             part <name> of epoch 7 (or .csv: a header, then rows)
    OUT/_pytimely/output.json                        the output's format and Arrow schema
    OUT/_pytimely/commits/epoch-000000000007.json    epoch 7's manifest: its parts, rows, sizes, checksums
    OUT/_spark_metadata/<n>                          Spark's file-sink log: the n-th committed epoch's files

A part is written under a hidden temporary name and renamed (a file system) or in one PUT (an object store);
files of epochs without a manifest are in no reader's list, and ``discard_uncommitted()`` removes them.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import secrets
import time
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytimely.atomic import write_atomic
from pytimely.errors import InvalidArgument, OutputCommitError, OutputCorruptError, OutputSchemaError, StreamSinkError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from pytimely.spark.stream_sinks import Sink

__all__ = ["EpochOutput", "OutputCommitError", "OutputCorruptError", "OutputSchemaError", "Part"]


FORMATS = ("parquet", "csv")
"""Output formats, each also the extension of its parts."""

LOCAL_SCHEMES = ("file", "local")
OBJECT_SCHEMES = ("s3", "s3a", "gs", "gcs", "memory")
"""Object stores whose one-call write is all or nothing, so a part needs no rename."""

SPARK_COMPACT_INTERVAL = 10
"""Spark's default ``spark.sql.streaming.fileSink.log.compactInterval``: every tenth log entry lists all files."""

_PART_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_PART_FILE = re.compile(r"^\.?part-(\d{12})-")
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
    return f"part-{epoch:012d}-{name}.{extension}"


def _commit_path(epoch: int) -> str:
    return f"_pytimely/commits/epoch-{epoch:012d}.json"


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
        url: str | os.PathLike[str],
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

        text = os.fspath(url)
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
        # Listed once, then kept up to date by this driver's commits: a commit's cost does not grow with history.
        self._known: list[int] | None = None
        self._logged: int | None = None

    def __repr__(self) -> str:
        return f"EpochOutput({self.url!r}, format={self.format!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Made again from its settings where it is unpickled (an executor), file system object included.
        settings = {"format": self.format, "storage_options": self.storage_options, "order_by": self.order_by,
                    "durable": self.durable, "spark_log": self.spark_log}  # fmt: skip
        return (_rebuild, (self.url, self.schema, settings))

    def _path(self, relative: str) -> str:
        return f"{self.root}/{relative}" if self.root != "/" else f"/{relative}"

    def _put(self, relative: str, data: bytes, *, durable: bool) -> None:
        """Write one file all or nothing: renamed into place locally, one PUT on an object store."""
        path = self._path(relative)
        try:
            if self.local:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                write_atomic(path, data, durable=durable)
            else:
                self.fs.pipe_file(path, data)
        except Exception as exc:  # fsspec back ends raise their own kinds (OSError, botocore, ...)
            cause = getattr(exc, "strerror", None) or exc
            raise StreamSinkError(f"the output {self.url}: {relative} cannot be written: {cause}") from None

    def _get(self, relative: str) -> bytes | None:
        try:
            data: bytes = self.fs.cat_file(self._path(relative))
        except FileNotFoundError:
            return None
        except Exception as exc:  # as above
            raise StreamSinkError(f"the output {self.url}: {relative} cannot be read: {exc}") from None
        return data

    def _list(self, relative: str) -> list[str]:
        """The names directly under ``relative`` ("" for the root); nothing if it does not exist."""
        path = self._path(relative) if relative else self.root
        try:
            self.fs.invalidate_cache(path)
            entries = self.fs.ls(path, detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except Exception as exc:  # as in _put
            raise StreamSinkError(
                f"the output {self.url}: {relative or 'its folder'} cannot be listed: {exc}"
            ) from None
        return sorted({name for e in entries if (name := str(e).rstrip("/").rsplit("/", 1)[-1])})

    def prepare(self) -> None:
        """Check the location can be written and holds no other output; nothing visible to readers is written.

        A failure to write is :class:`StreamSinkError` naming the URL and the cause; a folder holding another
        schema's or format's output, or files that are not a pytimely output, is :class:`OutputSchemaError`.
        A Spark log left behind its manifests by a crash is completed.
        """
        self._known = self._logged = None
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
        if self.spark_log and self._spark_uri("") is not None:
            # An empty log already tells Spark to read only logged files: no part is visible before its commit.
            # (An object store has no empty folders: a hidden object, which Spark's log skips, makes it exist.)
            if self.local:
                Path(self._path("_spark_metadata")).mkdir(exist_ok=True)
            else:
                self.fs.pipe_file(self._path("_spark_metadata/.pytimely"), b"")
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
            others = [n for n in self._list("") if not n.startswith(("_", "."))]
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
                raise OutputCorruptError(f"{self._path('_pytimely/output.json')} does not parse: {exc}") from None
            if kind != self.format or not schema.equals(self.schema):
                raise OutputSchemaError(
                    f"the output {self.url} holds {kind} output of ({_columns(schema)}), not {self.format} output "
                    f"of ({_columns(self.schema)}): give another folder"
                )
        self._recorded = True

    def write_part(self, epoch: int, part: str, table: pa.Table) -> Part:
        """Write ``table`` as part ``part`` of ``epoch``, all or nothing; the same part written again replaces it.

        Safe from several processes at once (each part is its own file). Nothing is visible to readers until
        the driver commits the epoch with the returned :class:`Part` among its parts. A committed epoch never
        changes: writing one of its parts again (an epoch computed again after a restart) writes nothing and
        returns the committed part; a part it does not have is :class:`OutputCommitError`.
        """
        if not isinstance(epoch, int) or epoch < 0:
            raise InvalidArgument(f"output {self.url}: epoch must be an integer >= 0, got {epoch!r}")
        if not _PART_NAME.match(part):
            raise InvalidArgument(f"output {self.url}: part name {part!r} must match {_PART_NAME.pattern}")
        committed = self._manifest(epoch)
        if committed is not None:
            for earlier in committed:
                if earlier.name == part:
                    return earlier
            raise OutputCommitError(
                f"the output {self.url}: epoch {epoch} is committed already, without a part {part!r} "
                f"(its parts: {', '.join(p.name for p in committed)})"
            )
        data = self._encode(self._fit(table, epoch))
        relative = _part_path(epoch, part, self.format)
        self._put(relative, data, durable=self.durable)
        return Part(epoch, part, relative, table.num_rows, len(data), _checksum(data))

    def _fit(self, table: pa.Table, epoch: int) -> pa.Table:
        """``table`` with the output's columns, in order, of the output's types (sorted by ``order_by``)."""
        import pyarrow as pa

        if set(table.column_names) != set(self.schema.names):
            raise OutputSchemaError(
                f"{self.url}: epoch {epoch}'s columns {table.column_names} are not {self.schema.names}"
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

        header = (",".join(self.schema.names) + "\n").encode("utf-8")
        buffer = io.BytesIO(header)
        buffer.seek(len(header))
        try:
            # Unquoted, as a person writes CSV; Arrow refuses where a value needs quotes, and then quotes strings.
            pcsv.write_csv(table, buffer, pcsv.WriteOptions(include_header=False, quoting_style="none"))
        except pa.ArrowInvalid:
            buffer.seek(len(header))
            buffer.truncate()
            pcsv.write_csv(table, buffer, pcsv.WriteOptions(include_header=False, quoting_style="needed"))
        return buffer.getvalue()

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
            parts = [self.write_part(epoch, "0", parts)]  # the committed part if the epoch is committed already
        if not isinstance(epoch, int) or epoch < 0:
            raise InvalidArgument(f"output {self.url}: epoch must be an integer >= 0, got {epoch!r}")
        chosen = sorted(parts, key=lambda p: p.name)
        for part in chosen:
            if part.epoch != epoch or part.path != _part_path(epoch, part.name, self.format):
                raise OutputCommitError(f"the output {self.url}: part {part.path} is not a part of epoch {epoch}")
        if len({p.name for p in chosen}) != len(chosen):
            raise OutputCommitError(f"the output {self.url}: epoch {epoch} is given a part name twice")
        self._check_record()
        recorded = self._manifest(epoch)
        files = self._epoch_files(epoch)
        if recorded is not None:
            if recorded != chosen:
                raise OutputCommitError(
                    f"the output {self.url}: epoch {epoch} is committed already with other parts "
                    f"({', '.join(p.name for p in recorded)})"
                )
        else:
            known = self._known_committed()
            last = known[-1] if known else -1
            if epoch < last:
                raise OutputCommitError(
                    f"the output {self.url}: epoch {epoch} comes after the committed epoch {last}: epochs commit "
                    "in increasing order"
                )
            self._check_parts(epoch, chosen, files)
            manifest = {"epoch": epoch, "rows": sum(p.rows for p in chosen), "committed_ms": int(time.time() * 1000),
                        "parts": [asdict(p) for p in chosen]}  # fmt: skip
            self._put(_commit_path(epoch), json.dumps(manifest, indent=1).encode(), durable=True)
            if epoch > last:
                known.append(epoch)
        self._remove(sorted(files), {epoch: {p.path for p in chosen}})
        self._sync_spark_log({epoch: chosen})

    def _known_committed(self) -> list[int]:
        self._known = self.committed() if self._known is None else self._known
        return self._known

    def _epoch_files(self, epoch: int) -> dict[str, int]:
        """The files of ``epoch`` (its parts and temporary files) by name, with their sizes: one listing."""
        prefix = f"part-{epoch:012d}-"
        if self.local:
            found = {}
            for entry in os.scandir(self.root) if os.path.isdir(self.root) else ():
                with contextlib.suppress(FileNotFoundError):  # a temporary file renamed meanwhile
                    if entry.name.startswith((prefix, "." + prefix)):
                        found[entry.name] = entry.stat().st_size
            return found
        self.fs.invalidate_cache(self.root)
        try:
            # An object store lists by prefix: the epoch's own files, however many epochs the output holds.
            listed = self.fs.find(self.root, maxdepth=1, prefix=prefix, detail=True)
        except TypeError:  # a file system whose find() takes no prefix
            listed = self.fs.find(self.root, maxdepth=1, detail=True)
        names = ((str(path).rsplit("/", 1)[-1], info) for path, info in listed.items())
        return {name: int(info["size"]) for name, info in names if name.startswith(prefix)}

    def _check_parts(self, epoch: int, parts: Sequence[Part], files: dict[str, int]) -> None:
        """Every part is there with the size it was written with (what a commit is allowed to name)."""
        for part in parts:
            size = files.get(part.path)
            if size is None:
                raise OutputCommitError(
                    f"the output {self.url}: epoch {epoch}'s part {part.path} is not there (never written, or "
                    "removed): the epoch is not committed"
                )
            if size != part.bytes:
                raise OutputCommitError(
                    f"the output {self.url}: epoch {epoch}'s part {part.path} holds {size} bytes, not the {part.bytes} "
                    "written: another attempt replaced it; the epoch is not committed"
                )

    def _remove(self, names: Sequence[str], keep: dict[int, set[str] | None], *, others: bool = False) -> list[str]:
        """Remove what ``keep`` does not keep among the part files ``names``; return the names removed.

        ``keep[epoch]`` lists the files of ``epoch`` to keep (``None``: all but temporary files); with
        ``others`` the files of epochs not in ``keep`` are removed too.
        """
        removed = []
        for name in names:
            match = _PART_FILE.match(name)
            if match is None:
                continue
            epoch = int(match.group(1))
            if epoch not in keep:
                if not others:
                    continue
            else:
                listed = keep[epoch]
                if (listed is None and not name.startswith(".")) or (listed is not None and name in listed):
                    continue
            try:
                self.fs.rm_file(self._path(name))
            except FileNotFoundError:
                continue
            removed.append(name)
        return removed

    def _manifest(self, epoch: int) -> list[Part] | None:
        relative = _commit_path(epoch)
        text = self._get(relative)
        if text is None:
            return None
        try:
            return sorted((Part.from_json(p) for p in json.loads(text)["parts"]), key=lambda p: p.name)
        except (ValueError, KeyError, TypeError) as exc:
            raise OutputCorruptError(f"the output {self.url}: {relative} does not parse: {exc}") from None

    def committed(self) -> list[int]:
        """The committed epochs, in order."""
        found = (_COMMIT.match(name) for name in self._list("_pytimely/commits"))
        return sorted(int(m.group(1)) for m in found if m is not None)

    def last_committed(self) -> int:
        """The last committed epoch (-1 if none)."""
        return max(self.committed(), default=-1)

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
        return pa.concat_tables(tables) if tables else self.schema.empty_table()

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
            raise OutputCorruptError(f"the output {self.url}: part {part.path} does not parse: {exc}") from None

    def discard_uncommitted(self) -> list[str]:
        """Remove the files of epochs with no manifest, and unlisted files of committed ones; return them.

        For after a crash, before writers start again: a part still being written would be removed too.
        """
        committed = self.committed()
        # A commit removes its epoch's other files after its manifest: only the last commit can have left any.
        keep: dict[int, set[str] | None] = dict.fromkeys(committed)
        if committed:
            keep[committed[-1]] = {p.path for p in self.parts(committed[-1])}
        return self._remove(self._list(""), keep, others=True)

    def spark_frame(self, spark: Any, *, streaming: bool = False) -> DataFrame:
        """The committed output as a Spark DataFrame; with ``streaming``, one that follows each commit once.

        Spark reads the files its log lists (see the module docstring); an object store's URL is read as
        ``s3a://`` (Spark needs the ``hadoop-aws`` package for it). A scheme Spark cannot read is InvalidArgument.
        """
        from pyspark.sql.pandas.types import from_arrow_schema

        location = self._spark_uri("")
        if location is None or not self.spark_log:
            raise InvalidArgument(f"the output {self.url}: Spark reads no {self.scheme}:// output without its log")
        reader = (spark.readStream if streaming else spark.read).schema(from_arrow_schema(self.schema))
        if self.format == "csv":
            reader = reader.option("header", True)
        frame: DataFrame = reader.format(self.format).load(location.rstrip("/"))
        return frame

    def _spark_uri(self, relative: str) -> str | None:
        """The URI Spark reads ``relative`` by (``None`` where Spark has no file system for the scheme)."""
        if self.local:
            return Path(self._path(relative)).as_uri()
        scheme = _SPARK_SCHEMES.get(self.scheme)
        return None if scheme is None else f"{scheme}://{self._path(relative).lstrip('/')}"

    def _sync_spark_log(self, known: dict[int, list[Part]] | None = None) -> None:
        """Write the entries of ``_spark_metadata`` that the manifests imply and the log lacks.

        Entry ``n`` lists the files of the ``n``-th committed epoch (every tenth, ``n.compact``, all files so
        far), as Spark's own file sink writes them, so Spark's readers list exactly the committed files. Written
        after the manifests, so a crash between leaves a log this completes at the next commit or prepare().
        ``known`` holds parts of epochs the caller has at hand (not read again).
        """
        if not self.spark_log or self._spark_uri("") is None:
            return
        epochs = self._known_committed()
        if self._logged is None:
            present = (_SPARK_LOG.match(name) for name in self._list("_spark_metadata"))
            self._logged = max((int(m.group(1)) for m in present if m is not None), default=-1)
        for index in range(self._logged + 1, len(epochs)):
            parts = (known or {}).get(epochs[index]) or self.parts(epochs[index])
            lines = [self._spark_entry(p) for p in parts]
            compact = (index + 1) % SPARK_COMPACT_INTERVAL == 0
            if compact:
                lines = self._spark_compacted(index, epochs) + lines
            name = f"{index}.compact" if compact else str(index)
            self._put(f"_spark_metadata/{name}", "\n".join(["v1", *lines]).encode(), durable=True)
            self._logged = index

    def _spark_compacted(self, index: int, epochs: Sequence[int]) -> list[str]:
        """The files Spark's log lists before entry ``index``: the last compact entry and the entries since."""
        start = index - SPARK_COMPACT_INTERVAL
        names = ([f"{start}.compact"] if start >= 0 else []) + [str(i) for i in range(max(start + 1, 0), index)]
        lines: list[str] = []
        for name in names:
            text = self._get(f"_spark_metadata/{name}")
            if text is None:  # removed by hand: derive the whole list from the manifests instead
                return [self._spark_entry(p) for e in epochs[:index] for p in self.parts(e)]
            lines += [line for line in text.decode().split("\n")[1:] if line.strip()]
        return lines

    def _spark_entry(self, part: Part) -> str:
        entry = {"path": self._spark_uri(part.path), "size": part.bytes, "isDir": False,
                 "modificationTime": int(time.time() * 1000), "blockReplication": 1, "blockSize": part.bytes,
                 "action": "add"}  # fmt: skip
        return json.dumps(entry)


if TYPE_CHECKING:

    def _a_sink(output: EpochOutput) -> Sink:
        """mypy checks here that an output is a sink of ``run_stream``, the driver-hosted path."""
        return output


def _rebuild(url: str, schema: pa.Schema, settings: dict[str, Any]) -> EpochOutput:
    """An :class:`EpochOutput` made again from its settings (unpickling)."""
    return EpochOutput(url, schema, **settings)


def _columns(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)
