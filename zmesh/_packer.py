"""Packing message items so that what leaves is what a receiver can decode
(internal; used by ``zmesh.codec``)."""

from __future__ import annotations

from typing import Any, Callable

import msgpack

from .errors import InvalidMessage

__all__ = ["ItemPacker", "check_round_trip"]

_unpackb: Callable[..., Any] = msgpack.unpackb


class ItemPacker:
    """A reusable packer (use one per thread) that notices tuples.

    msgpack writes a tuple as an array, and an array as a map key decodes to
    a list, which no receiver can hash: a dict with tuple keys (pandas'
    ``groupby(...).to_dict()``) would encode here and fail there. With
    ``strict_types`` msgpack hands every tuple to ``default``, which notes it
    and packs it as the array it always was; only a payload that had a tuple
    pays for a check that it decodes. Subclasses of the built-in types (enums,
    OrderedDict, ...) come to ``default`` too and are packed as their base type.
    """

    __slots__ = ("pack", "tuples")

    def __init__(self) -> None:
        self.tuples = False
        self.pack: Callable[[Any], bytes] = msgpack.Packer(strict_types=True, default=self._default).pack

    def _default(self, obj: Any) -> Any:
        if isinstance(obj, tuple):
            self.tuples = True
            return list(obj)
        if isinstance(obj, str):
            return str.__str__(obj)
        if isinstance(obj, int):
            return int.__int__(obj)
        if isinstance(obj, float):
            return float.__float__(obj)
        if isinstance(obj, dict):
            return dict(obj)
        if isinstance(obj, list):
            return list(obj)
        if isinstance(obj, (bytes, bytearray)):
            return bytes(obj)
        raise TypeError(f"can not serialize {type(obj).__name__!r} object")


def check_round_trip(item: bytes, payload: Any) -> None:
    """Raise InvalidMessage unless ``item`` decodes as a receiver decodes it."""
    try:
        _unpackb(item, raw=False, strict_map_key=False, use_list=True)
    except Exception as exc:
        key = _tuple_key(payload, 0)
        if key is not None:
            raise InvalidMessage(
                f"payload has a dict with a tuple key {key!r:.80}: msgpack carries it as an array, "
                "which a receiver cannot use as a map key; use str keys (e.g. join the tuple)"
            ) from None
        raise InvalidMessage(f"message would not decode at the receiver: {exc}") from None


def _tuple_key(obj: Any, depth: int) -> Any:
    """The first tuple used as a dict key in ``obj``, or None."""
    if depth > 512:
        return None
    if isinstance(obj, dict):
        for key, value in obj.items():
            if isinstance(key, tuple):
                return key
            found = _tuple_key(value, depth + 1)
            if found is not None:
                return found
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            found = _tuple_key(value, depth + 1)
            if found is not None:
                return found
    return None
