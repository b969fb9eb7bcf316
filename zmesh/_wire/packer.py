"""Payload types: packing message items so that what leaves is what a
receiver can decode, and the node's ``encoder``/``decoder`` hooks
(internal; used by ``zmesh._wire.codec``). The table of what travels as what is
in docs/guide.md ("What travels as what").

Plain payloads (exact dict, list, str, bytes, int, float, bool, None) never
reach Python code here: msgpack packs them in C and calls ``default`` only
for the other types, one object at a time.
"""

from __future__ import annotations

import datetime
import enum
import uuid
from decimal import Decimal
from typing import Any, Callable, Final

import msgpack

from ..errors import InvalidMessage

__all__ = ["Encoder", "Decoder", "ItemPacker", "PayloadRefused", "refusal", "check_round_trip", "decode_payload"]

#: ``Node(encoder=...)``: called with an object of a type zmesh does not carry;
#: returns something it does (dicts, lists, str, numbers, bytes, ...).
Encoder = Callable[[Any], Any]
#: ``Node(decoder=...)``: called with every dict of a received payload,
#: innermost first, like ``json.loads(object_hook=...)``; returns its replacement.
Decoder = Callable[[dict[Any, Any]], Any]

_unpackb: Callable[..., Any] = msgpack.unpackb
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_SECOND: Final = datetime.timedelta(seconds=1)
_UNKNOWN: Final = object()
#: What msgpack packs itself (with ``strict_types``: these exact classes).
_NATIVE: Final = frozenset(
    {dict, list, str, bytes, bytearray, int, float, bool, type(None), msgpack.Timestamp, msgpack.ExtType}
)
_CARRIED = "dicts, lists, str, numbers, bytes, or a type listed in the guide's table"


class PayloadRefused(Exception):
    """Raised inside ``default``: ``obj`` cannot travel; the caller gets an
    InvalidMessage that says where it is in the payload (see :func:`refusal`)."""

    def __init__(self, obj: Any, why: str) -> None:
        super().__init__(why)
        self.obj = obj
        self.why = why


def _type_name(obj: Any) -> str:
    cls = type(obj)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _timestamp(value: datetime.datetime) -> msgpack.Timestamp:
    """An aware datetime as msgpack's Timestamp, exactly (integer arithmetic)."""
    delta = value - _EPOCH
    return msgpack.Timestamp(delta // _SECOND, delta.microseconds * 1000)


def _builtin(obj: Any, packer: ItemPacker) -> Any:
    """``obj`` as something msgpack packs, when zmesh carries its type; else _UNKNOWN."""
    if isinstance(obj, tuple):
        packer.tuples = True
        return list(obj)
    if isinstance(obj, enum.Enum):
        return obj.value  # before str/int: an IntEnum or StrEnum travels as its value too
    # Subclasses of the built-in types (OrderedDict, defaultdict, ...) travel as their base type.
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
    if isinstance(obj, datetime.datetime):  # before date: a datetime is a date
        if obj.utcoffset() is None:
            raise PayloadRefused(
                obj,
                "is a naive datetime (no tzinfo), which zmesh does not send: its meaning depends on "
                "the sender's time zone; make it aware, e.g. datetime.now(timezone.utc) or "
                "value.replace(tzinfo=timezone.utc)",
            )
        return _timestamp(obj)
    if isinstance(obj, datetime.date):
        return obj.isoformat()
    if isinstance(obj, uuid.UUID):
        return str(obj)
    if isinstance(obj, Decimal):
        return str(obj)
    return _UNKNOWN


class ItemPacker:
    """A reusable packer (use one per thread) that converts the payload types
    zmesh carries, calls the node's encoder for the others, and notices tuples.

    msgpack writes a tuple as an array, and an array as a map key decodes to
    a list, which no receiver can hash: a dict with tuple keys (pandas'
    ``groupby(...).to_dict()``) would encode here and fail there. With
    ``strict_types`` msgpack hands every tuple to ``default``, which notes it
    and packs it as the array it always was; only a payload that had a tuple
    pays for a check that it decodes.
    """

    __slots__ = ("pack", "tuples", "encoder")

    def __init__(self, encoder: Encoder | None = None) -> None:
        self.tuples = False
        self.encoder = encoder
        self.pack: Callable[[Any], bytes] = msgpack.Packer(strict_types=True, default=self._default).pack

    def _default(self, obj: Any) -> Any:
        out = _builtin(obj, self)
        made_by = "whose value is"  # an Enum
        if out is _UNKNOWN:
            if self.encoder is None:
                raise PayloadRefused(obj, f"is of type {_type_name(obj)}, which zmesh does not send without an "
                                          f"encoder: convert it to {_CARRIED}, or give the node one "
                                          "(Node(..., encoder=fn))")
            try:
                out = self.encoder(obj)
            except Exception as exc:
                raise PayloadRefused(obj, f"is of type {_type_name(obj)}, and the node's encoder raised on it: "
                                          f"{type(exc).__name__}: {exc}") from exc
            made_by = "and the node's encoder returned a value"
        # msgpack calls default once per object: what it returned must be packable as it is.
        for _ in range(16):
            if out.__class__ in _NATIVE:
                return out
            converted = _builtin(out, self)
            if converted is _UNKNOWN:
                break
            out = converted
        raise PayloadRefused(obj, f"is of type {_type_name(obj)}, {made_by} of type {_type_name(out)}, "
                                  f"which zmesh does not send either: use {_CARRIED}")


def refusal(exc: PayloadRefused, payload: Any) -> InvalidMessage:
    """The caller's error for a refused object, saying where it is in ``payload``."""
    where = _path_to(payload, exc.obj, "payload", 0, [0])
    return InvalidMessage(f"{where or 'a value in the payload'} {exc.why}")


def _path_to(obj: Any, target: Any, path: str, depth: int, seen: list[int]) -> str | None:
    """Where ``target`` is inside ``obj`` (by identity), e.g. ``payload['when']``; None
    if not found within a bounded search (the error path only pays for it)."""
    if obj is target:
        return path
    seen[0] += 1
    if depth > 64 or seen[0] > 10_000:
        return None
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key is target:
                return f"a key of {path}"
            found = _path_to(value, target, f"{path}[{key!r:.40}]", depth + 1, seen)
            if found is not None:
                return found
    elif isinstance(obj, (list, tuple)):
        for index, value in enumerate(obj):
            found = _path_to(value, target, f"{path}[{index}]", depth + 1, seen)
            if found is not None:
                return found
    return None


def check_round_trip(item: bytes, payload: Any) -> None:
    """Raise InvalidMessage unless ``item`` decodes as a receiver decodes it."""
    try:
        _unpackb(item, raw=False, strict_map_key=False, use_list=True, timestamp=3)
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


def decode_payload(payload: Any, decoder: Decoder) -> Any:
    """``payload`` (as decoded from the wire) with ``decoder`` applied to every
    dict in it, innermost first, in new containers: when the decoder raises,
    ``payload`` is as it was (a dead letter keeps what arrived)."""
    cls = payload.__class__
    if cls is dict:
        return decoder({
            key: decode_payload(value, decoder) if value.__class__ is dict or value.__class__ is list else value
            for key, value in payload.items()
        })
    if cls is list:
        return [
            decode_payload(value, decoder) if value.__class__ is dict or value.__class__ is list else value
            for value in payload
        ]
    return payload
