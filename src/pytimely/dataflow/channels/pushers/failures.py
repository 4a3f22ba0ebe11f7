"""The errors a channel raises when a batch cannot cross to another process: they name the channel and both ends."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from pytimely.communication.payload import dumps
from pytimely.errors import PytimelyError, UnpicklableRecordError

if TYPE_CHECKING:
    from pytimely.communication.allocator import Push
    from pytimely.dataflow.ports import InputPort

__all__ = ["push_failed", "push_to", "unpicklable"]


def unpicklable(
    kind: str, sender: str | None, target: InputPort[Any, Any], time: Any, batch: Any, exc: BaseException
) -> UnpicklableRecordError:
    """The error for a batch an exchange could not serialise: names the channel, both operators and a record."""
    receiver = target._op.name
    dataflow = target._op.scope.subgraph.name
    channel = f"{kind} from {sender!r} to {receiver!r} in dataflow {dataflow!r}"
    culprit = ""
    if type(batch) is list:
        for record in batch:
            try:
                dumps(record)
            except Exception:
                text = repr(record)
                culprit = f" (the record {text[:80] + '...' if len(text) > 80 else text})"
                break
    return UnpicklableRecordError(
        f"operator {sender!r} sent a record at time {time!r} that cannot be pickled through the {channel}, so it "
        f"cannot reach another process{culprit}: {type(exc).__name__}: {exc}",
        channel=channel,
        sender=sender,
        receiver=receiver,
    )


def push_failed(
    kind: str, sender: str | None, target: InputPort[Any, Any], time: Any, batch: Any, exc: Exception
) -> NoReturn:
    """Raise what a push to another process raised: named, when the message cannot be pickled; else as it is."""
    try:
        dumps((time, batch))
    except Exception:
        raise unpicklable(kind, sender, target, time, batch, exc) from exc
    raise exc


def push_to(push: Push[Any], kind: str, sender: str | None, target: InputPort[Any, Any], time: Any, batch: Any) -> None:
    """Push ``(time, batch)`` to another worker; what the communication layer raises (it pickles, and its errors name
    no operator) comes back named (:func:`push_failed`)."""
    try:
        push.push((time, batch))
    except PytimelyError:
        raise
    except Exception as exc:
        push_failed(kind, sender, target, time, batch, exc)
