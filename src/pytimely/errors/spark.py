"""Errors of running on Spark: sessions, tasks, the rendezvous, and streaming queries."""

from __future__ import annotations

from pytimely.errors.base import InputFormatError, InvalidArgument, PytimelyError


class SparkError(PytimelyError):
    """Running on Spark failed: the session, the barrier stage or one of its tasks."""


class SparkSetupError(SparkError):
    """Spark cannot start here: PySpark or a Java 17 runtime is missing (the message says how to install it)."""


class SparkSlotsError(SparkError):
    """More pytimely processes were asked for than the Spark session has task slots to run them at once."""


class SparkTaskError(SparkError):
    """A task of the barrier stage failed; carries the task's own error message."""


class SparkConnectError(SparkError):
    """On a Spark Connect session: the server cannot be reached, or what was asked needs a classic session."""


class SparkRendezvousError(SparkError):
    """The tasks of a barrier stage could not meet through the driver's registry (unreachable, late, or forged)."""


class SparkExecutorSetupError(SparkSetupError):
    """The Spark executors' Python cannot import pytimely; the message names the interpreter and how to fix it."""


class SparkInputError(SparkError, InputFormatError):
    """Spark could not read an input (missing path, malformed record); names Spark's cause and the file it gives."""


class StreamError(SparkError):
    """A streaming query that drives a pytimely dataflow stopped; names the micro-batch and what went wrong."""


class StreamSchemaError(StreamError, InputFormatError):
    """A streaming source's rows do not have the query's columns (its schema changed); names batch and file."""


class StreamInputError(StreamError, InputFormatError):
    """A streaming source's file does not parse; names the micro-batch and Spark's cause (file, record)."""


class CheckpointMismatchError(StreamError, InvalidArgument):
    """A checkpoint directory belongs to another query, or lost its commits; names what differs."""


class CheckpointInUseError(StreamError):
    """Another run holds the streaming checkpoint (or its Spark JVM still runs); names the checkpoint and holder."""


class CheckpointLocationError(StreamError, InvalidArgument):
    """A streaming checkpoint's URL names a place that cannot hold it (a scheme without locks or renames)."""


class StreamSinkError(StreamError, OSError):
    """A streaming query's sink cannot be written (no permission, a file in the way); raised before the first epoch."""


class OutputSchemaError(StreamSinkError):
    """An epoch output's folder holds another schema's or format's output (or other files), or a table does not fit."""


class OutputCommitError(StreamSinkError):
    """An epoch's commit was refused: a part is missing or differs from what was written, or epochs out of order."""


class OutputCorruptError(StreamSinkError):
    """A committed file of an epoch output cannot be read back as its manifest describes it (size, checksum)."""


class StreamFeedError(StreamError):
    """A micro-batch did not reach the hosted processes whole (lost, duplicated, refused, or no answer in time)."""


class StreamHostError(StreamError):
    """The hosted processes of a streaming query failed, or did not start; names the generation and the cause."""


class StreamFencedError(StreamError):
    """Another run took the streaming checkpoint over: this one may not commit, and stops; names both owners."""


class StreamStateLostError(StreamError):
    """A stateful streaming query has committed output but no usable snapshot of its state at or before the last
    committed micro-batch (deleted, damaged): resuming would start from empty state. Names the checkpoint, the
    micro-batch and the snapshots found; ``recovery_mode="fresh"`` starts the state over instead."""


class CheckpointFileError(StreamError):
    """A file pytimely reads back from a streaming checkpoint (held or late rows, staged inputs, parts) is not
    signed with the checkpoint's key (planted, altered, moved or cut short), is no regular file or too large, or
    the key itself is unusable or lost. Names the file; nothing of it is parsed."""


class BuildResultError(SparkError, TypeError):
    """The function that builds a hosted dataflow returned something other than its output ``Stream``."""
