"""How a piece of declared state becomes bytes in a payload file, and back.

A piece is pickled (the newest protocol), except a dict of keyed state (a bin's ``{key: value}``, or a
:class:`~pytimely.dataflow.state.Whole` standing for many bins), which a snapshot of a keyed operator writes at
nearly every epoch. Most of pickle's time on such a dict goes to its memo, the table of every object written
so that an object met twice is written once and shared after loading. A dict's keys are hashable values whose
sharing a restored state cannot miss (a dict finds a key by equality), so they are pickled as one list without
the memo, at about half the cost; the values are pickled as a second list with it, so values that share an
object still share it once restored. Keys that refer back to themselves (which pickling without the memo
refuses) are pickled with it. A :class:`Whole` carries its state's
:class:`~pytimely.dataflow.state.KeysMemo`: when no key came or went since the piece before and the keys are
those written then, in that order (checked: one comparison of two lists of the same objects), their bytes are
those written then, and only the values are pickled.

A :class:`~pytimely.dataflow.state.Delta` (the keys a keyed state wrote and removed since the snapshot before) is
pickled the same way: its written keys without the memo, their values with it, and the removed keys.

A piece starts with one byte saying which it is: ``K`` (a dict), ``W`` (a :class:`Whole`: its bins, then the
dict), ``D`` (a :class:`Delta`: the dict, then the removed keys) or a pickle's own first byte. Pieces
are decoded only once the manifest's seal and the payload file's checksum are verified
(:mod:`pytimely.recovery.snapshots`).
"""

from __future__ import annotations

import io
import pickle
from typing import Any

from pytimely.dataflow.state import Delta, KeysMemo, Whole

__all__ = ["decode", "encode"]

_PROTOCOL = pickle.HIGHEST_PROTOCOL
_DICT = b"K"
_WHOLE = b"W"
_DELTA = b"D"


def encode(value: Any) -> bytes:
    """The bytes of a piece of state (see the module doc); what pickling raises, it raises."""
    if type(value) is dict:
        return _keyed(_DICT, value)
    if type(value) is Whole:
        return _keyed(_WHOLE, value.data, value.bins, value.memo)
    if type(value) is Delta:
        return _keyed(_DELTA, value.changed) + _keys(list(value.removed))
    return pickle.dumps(value, protocol=_PROTOCOL)


def decode(data: bytes) -> Any:
    """The piece of state ``data`` holds (what :func:`encode` gave)."""
    tag = data[:1]
    if tag not in (_DICT, _WHOLE, _DELTA):
        return pickle.loads(data)
    stream = io.BytesIO(data)
    stream.seek(1)
    bins = pickle.load(stream) if tag == _WHOLE else None
    keys = pickle.load(stream)
    values = pickle.load(stream)
    removed = pickle.load(stream) if tag == _DELTA else None
    if len(keys) != len(values) or stream.tell() != len(data):
        raise ValueError(f"a keyed piece of {len(data)} bytes holds {len(keys)} keys and {len(values)} values")
    restored = dict(zip(keys, values, strict=True))
    if removed is not None:
        return Delta(restored, tuple(removed))
    return restored if bins is None else Whole(tuple(bins), restored)


def _keyed(
    tag: bytes, data: dict[Any, Any], bins: tuple[int, ...] | None = None, memo: KeysMemo | None = None
) -> bytes:
    out = io.BytesIO()
    out.write(tag)
    if bins is not None:
        pickle.dump(bins, out, protocol=_PROTOCOL)
    keys = list(data)
    # The same keys as the piece before (the state saw none come or go, and they are those written then, in
    # that order): their bytes are those written then.
    if memo is not None and memo.stable and memo.encoded is not None and memo.keys == keys:
        out.write(memo.encoded)
    else:
        encoded = _keys(keys)
        if memo is not None:
            memo.keys, memo.encoded = keys, encoded
        out.write(encoded)
    pickle.dump(list(data.values()), out, protocol=_PROTOCOL)
    return out.getvalue()


def _keys(keys: list[Any]) -> bytes:
    """A pickle of ``keys`` without the memo (module doc), or with it for keys that refer back to themselves."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=_PROTOCOL)
    pickler.fast = True
    try:
        pickler.dump(keys)
    except ValueError:
        return pickle.dumps(keys, protocol=_PROTOCOL)
    return out.getvalue()
