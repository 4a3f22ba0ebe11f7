"""Connectors of pytimely's own: files (lines, CSV, Parquet), directories whose new files become epochs,
standard input and output, and a TCP socket source. See ``docs/connectors.md``."""

from pytimely.connectors.files import directory_source, file_sink, file_source
from pytimely.connectors.formats import read_batches, read_csv, read_lines, read_parquet
from pytimely.connectors.stdio import stdin_source, stdout_sink
from pytimely.connectors.tcp import send_lines, socket_source

__all__ = [
    "directory_source",
    "file_sink",
    "file_source",
    "read_batches",
    "read_csv",
    "read_lines",
    "read_parquet",
    "send_lines",
    "socket_source",
    "stdin_source",
    "stdout_sink",
]
