"""Frames: joining encoded items into one transport message and splitting
one back into items (internal; ``zmesh._wire.codec`` re-exports the public names).

Decoding has a fast path, one ``unpackb`` of the whole frame. Only when that
fails does it walk the frame item by item (``Unpacker.skip`` finds each
item's bounds without building it), so one undecodable item costs only
itself: it comes back as a *bad item* ``[BAD, reason, detail, header]`` in
its place, where ``header`` is the message's fields (15, or 16 with a
traceparent) with the payload replaced by None when the item was a MSG
whose header still decodes (the engine answers such a request with an
error), else None.

A Timestamp extension (how a ``datetime`` travels) decodes to an aware
``datetime`` in UTC (``timestamp=3``); nothing else in a frame uses it.
"""

from __future__ import annotations

from typing import Any, Callable, Final, TypeAlias

import msgpack

from ..errors import FrameError

__all__ = [
    "Received", "PROTOCOL_VERSION", "MSG", "MSG_FIELDS", "BAD", "MAX_ITEMS",
    "join_frame", "join_pub_frame", "decode_frame", "decode_pub_frame", "decode_item", "decode_opening",
]

PROTOCOL_VERSION: Final = 1
MSG: Final = 0  # the item kind of a message
MSG_FIELDS: Final = 15  # [MSG, id, ..., status, payload]; then a traceparent and roles, when it has them
#: Kind of a bad item. Not an int, so nothing on the wire can claim it.
BAD: Final = "bad"
#: Items a frame may hold: the work one frame costs stays bounded. Senders
#: split larger batches; a frame with more is dropped unread.
MAX_ITEMS: Final = 4096

#: A frame as a transport hands it over: bytes, or for a large one a view of
#: the transport's own buffer (decoding copies what it keeps).
Received: TypeAlias = "bytes | memoryview"

_packb: Callable[[Any], bytes] = msgpack.packb
_unpackb: Callable[..., Any] = msgpack.unpackb
_VERSION_BYTES: Final[bytes] = _packb(PROTOCOL_VERSION)


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


#: A direct frame's start (array header and version) for 1..14 items.
_DIRECT_HEADS: Final = tuple(_array_header(n + 1) + _VERSION_BYTES for n in range(15))


def join_frame(items: list[bytes]) -> bytes:
    """Concatenate encoded items into one direct frame (one join: a 1 MiB
    item is copied once, not twice)."""
    n = len(items)
    if n == 1:
        return b"".join((_DIRECT_HEADS[1], items[0]))
    return b"".join([_DIRECT_HEADS[n] if n < 15 else _array_header(n + 1) + _VERSION_BYTES, *items])


def join_pub_frame(node_id: str, seq: int, items: list[bytes]) -> bytes:
    """Concatenate encoded items into one publish frame."""
    return b"".join([_array_header(len(items) + 3) + _VERSION_BYTES + _packb(node_id) + _packb(seq), *items])


def decode_item(data: bytes) -> list[Any]:
    """Decode one encoded item (as kept in a store); FrameError if unusable."""
    try:
        item = _unpackb(data, raw=False, strict_map_key=False, use_list=True, timestamp=3)
    except Exception as exc:  # msgpack raises many types on garbage
        raise FrameError("malformed", type(exc).__name__) from None
    if not _is_item(item):
        raise FrameError("malformed", "bad item")
    return item  # type: ignore[no-any-return]


def decode_frame(data: Received, max_bytes: int) -> list[list[Any]]:
    """Decode a direct frame into its items; raise FrameError if unusable."""
    return _unpack(data, max_bytes, 1)[1:]


def decode_opening(data: Received, max_bytes: int, kinds: frozenset[int]) -> list[Any] | None:
    """The first item of a direct frame if its kind is one of ``kinds``, else
    None, decoding no more than it must: a sender that has not said HELLO
    gets nothing decoded past the first item's kind. FrameError if unusable."""
    if len(data) > max_bytes:
        raise FrameError("oversized", f"{len(data)} bytes")
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, use_list=True, timestamp=3,
                                max_buffer_size=len(data) or 1)
    unpacker.feed(data)
    try:
        n = unpacker.read_array_header()
        version = unpacker.unpack() if n else None
    except Exception as exc:
        raise FrameError("malformed", f"not a frame: {type(exc).__name__}") from None
    if version != PROTOCOL_VERSION or version.__class__ is not int:
        raise FrameError("malformed" if n == 0 else "unknown_version", repr(version)[:40])
    if n < 2:
        return None
    try:
        fields = unpacker.read_array_header()
        kind = unpacker.unpack() if fields else None
        if kind.__class__ is not int or kind not in kinds:
            return None
        return [kind, *(unpacker.unpack() for _ in range(fields - 1))]
    except Exception as exc:
        raise FrameError("malformed", f"item: {type(exc).__name__}") from None


def decode_pub_frame(data: Received, max_bytes: int) -> tuple[str, int, list[list[Any]]]:
    """Decode a publish frame into (node_id, record_seq, items)."""
    frame = _unpack(data, max_bytes, 3)
    if frame[1].__class__ is not str or frame[2].__class__ is not int:
        raise FrameError("malformed", "bad publish header")
    return frame[1], frame[2], frame[3:]


def _unpack(data: Received, max_bytes: int, header: int) -> list[Any]:
    """Decode a frame whose first ``header`` elements precede the items."""
    if len(data) > max_bytes:
        raise FrameError("oversized", f"{len(data)} bytes")
    head = data[:1]
    if head == b"\xdd" or (head == b"\xdc" and int.from_bytes(data[1:3], "big") > MAX_ITEMS + header):
        raise FrameError("malformed", "too many items")  # work per frame stays bounded
    try:
        frame: list[Any] = _unpackb(data, raw=False, strict_map_key=False, use_list=True, timestamp=3)
    except Exception:  # msgpack raises many types on garbage, or one item is bad
        return _walk(data, header)
    if frame.__class__ is not list or len(frame) < header:
        raise FrameError("malformed", "not a frame")
    if frame[0] != PROTOCOL_VERSION:
        raise FrameError("unknown_version", repr(frame[0])[:40])
    for item in frame[header:]:
        if item.__class__ is not list or not item or item[0].__class__ is not int:
            return frame[:header] + [i if _is_item(i) else [BAD, "malformed", "bad item", None] for i in frame[header:]]
    return frame


def _is_item(item: Any) -> bool:
    return item.__class__ is list and bool(item) and item[0].__class__ is int


def _check_head(frame: Any, header: int) -> None:
    if frame.__class__ is not list or len(frame) < header:
        raise FrameError("malformed", "not a frame")
    if frame[0] != PROTOCOL_VERSION:
        raise FrameError("unknown_version", repr(frame[0])[:40])


def _walk(data: Received, header: int) -> list[Any]:
    """The slow path: the frame item by item, each bad one replaced by a bad item."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, use_list=True, max_buffer_size=len(data) or 1)
    unpacker.feed(data)
    try:
        n = unpacker.read_array_header()
        frame = [unpacker.unpack() for _ in range(min(n, header))]
    except Exception as exc:
        raise FrameError("malformed", type(exc).__name__) from None
    _check_head(frame, header)
    for _ in range(n - header):
        start = unpacker.tell()
        try:
            unpacker.skip()
        except Exception as exc:  # truncated or garbage: nothing after this can be found
            frame.append([BAD, "malformed", f"item: {type(exc).__name__}", None])
            return frame
        raw = data[start : unpacker.tell()]
        try:
            item = _unpackb(raw, raw=False, strict_map_key=False, use_list=True, timestamp=3)
        except Exception as exc:
            frame.append([BAD, "malformed", f"item: {type(exc).__name__}: {exc}"[:200], _header(raw)])
            continue
        frame.append(item if _is_item(item) else [BAD, "malformed", "bad item", None])
    if unpacker.tell() != len(data):
        frame.append([BAD, "malformed", "bytes after the last item", None])
    return frame


def _header(raw: Received) -> list[Any] | None:
    """A MSG item's fields with the payload left out (None), if they decode."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, use_list=True, max_buffer_size=len(raw))
    unpacker.feed(raw)
    try:
        count = unpacker.read_array_header()
        if not MSG_FIELDS <= count <= MSG_FIELDS + 2:
            return None
        fields = [unpacker.unpack() for _ in range(MSG_FIELDS - 1)]
    except Exception:
        return None
    if fields[0] != MSG or fields[0].__class__ is not int:
        return None
    fields.append(None)
    if count > MSG_FIELDS:  # the traceparent, after the payload
        try:
            unpacker.skip()
            fields.append(unpacker.unpack())
        except Exception:
            pass  # the header without it still tells who waits for an answer
    return fields
