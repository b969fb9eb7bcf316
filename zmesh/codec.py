"""Wire codec: msgpack frames that carry batches of items. No I/O here.

A *frame* is what one transport message carries. Frames are batches: every
item queued for the same peer within one event-loop iteration travels in one
frame (see docs/protocol.md for the layout and its version).

Direct frame (DEALER -> ROUTER, or in-process)::

    [PROTOCOL_VERSION, item, item, ...]

Publish frame (PUB -> SUB), after a one-byte topic frame ``b"M"``::

    [PROTOCOL_VERSION, node_id, record_seq, item, item, ...]

Items are msgpack arrays whose first element is the item kind.
"""

from __future__ import annotations

from typing import Any, Callable, Final

import msgpack

from .errors import InvalidMessage
from .message import MESSAGE_TYPES, STATUSES, Message

__all__ = [
    "PROTOCOL_VERSION",
    "FrameError",
    "MSG",
    "HELLO",
    "UPDATE",
    "ACK",
    "PING",
    "PONG",
    "BYE",
    "REFUSE",
    "encode_message",
    "encode_item",
    "join_frame",
    "join_pub_frame",
    "decode_frame",
    "decode_pub_frame",
    "message_from_item",
]

PROTOCOL_VERSION: Final = 1

# Item kinds.
MSG: Final = 0
HELLO: Final = 1
UPDATE: Final = 2
ACK: Final = 3
PING: Final = 4
PONG: Final = 5
BYE: Final = 6
REFUSE: Final = 7

_TYPE_CODE: Final = {name: code for code, name in enumerate(MESSAGE_TYPES)}
_STATUS_CODE: Final = {name: code for code, name in enumerate(STATUSES)}
_MSG_FIELDS: Final = 15

_packb: Callable[[Any], bytes] = msgpack.packb
_unpackb: Callable[..., Any] = msgpack.unpackb
_VERSION_BYTES: Final[bytes] = _packb(PROTOCOL_VERSION)


class FrameError(Exception):
    """An inbound frame or item is unusable. ``reason`` is a short counter key."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def encode_message(msg: Message, max_payload: int, pack: Callable[[Any], bytes] = _packb) -> bytes:
    """Encode ``msg`` as a MSG item; raise InvalidMessage if it cannot travel.

    ``pack`` may be a reusable ``msgpack.Packer().pack`` (one per thread).
    """
    try:
        item: bytes = pack(
            [
                MSG,
                msg.id,
                _TYPE_CODE[msg.type],
                msg.sender,
                msg.target,
                msg.topic,
                msg.correlation_id,
                msg.reply_to,
                msg.priority,
                msg.qos,
                msg.ttl,
                msg.timestamp,
                msg.trace_id,
                _STATUS_CODE[msg.status],
                msg.payload,
            ]
        )
    except KeyError as exc:
        raise InvalidMessage(f"unknown message type or status {exc}") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidMessage(f"message cannot be encoded with msgpack: {exc}") from None
    if len(item) > max_payload:
        # Only now is it worth measuring the payload on its own.
        size = len(_packb(msg.payload))
        if size > max_payload:
            raise InvalidMessage(
                f"payload is {size} bytes encoded, over the limit of {max_payload} bytes"
            )
    return item


def encode_item(item: list[Any]) -> bytes:
    """Encode a control item (HELLO, ACK, ...)."""
    return _packb(item)


def join_frame(items: list[bytes]) -> bytes:
    """Concatenate encoded items into one direct frame."""
    return _array_header(len(items) + 1) + _VERSION_BYTES + b"".join(items)


def join_pub_frame(node_id: str, seq: int, items: list[bytes]) -> bytes:
    """Concatenate encoded items into one publish frame."""
    return (
        _array_header(len(items) + 3)
        + _VERSION_BYTES
        + _packb(node_id)
        + _packb(seq)
        + b"".join(items)
    )


def _unpack(data: bytes, max_bytes: int, header: int) -> list[Any]:
    """Decode a frame whose first ``header`` elements precede the items."""
    if len(data) > max_bytes:
        raise FrameError("oversized", f"{len(data)} bytes")
    try:
        frame = _unpackb(data, raw=False, strict_map_key=False, use_list=True)
    except Exception as exc:  # msgpack raises many types on garbage
        raise FrameError("malformed", type(exc).__name__) from None
    if frame.__class__ is not list or len(frame) < header:
        raise FrameError("malformed", "not a frame")
    if frame[0] != PROTOCOL_VERSION:
        raise FrameError("unknown_version", repr(frame[0])[:40])
    for item in frame[header:]:
        if item.__class__ is not list or not item or item[0].__class__ is not int:
            raise FrameError("malformed", "bad item")
    return frame


def decode_frame(data: bytes, max_bytes: int) -> list[list[Any]]:
    """Decode a direct frame into its items; raise FrameError if unusable."""
    return _unpack(data, max_bytes, 1)[1:]


def decode_pub_frame(data: bytes, max_bytes: int) -> tuple[str, int, list[list[Any]]]:
    """Decode a publish frame into (node_id, record_seq, items)."""
    frame = _unpack(data, max_bytes, 3)
    if frame[1].__class__ is not str or frame[2].__class__ is not int:
        raise FrameError("malformed", "bad publish header")
    return frame[1], frame[2], frame[3:]


def message_from_item(item: list[Any]) -> Message:
    """Build a Message from a decoded MSG item; raise FrameError if malformed."""
    if len(item) != _MSG_FIELDS:
        raise FrameError("malformed", "wrong message field count")
    (
        _,
        msg_id,
        type_code,
        sender,
        target,
        topic,
        corr,
        reply_to,
        priority,
        qos,
        ttl,
        stamp,
        trace_id,
        status_code,
        payload,
    ) = item
    try:
        mtype = MESSAGE_TYPES[type_code]
        status = STATUSES[status_code]
    except (IndexError, TypeError):
        raise FrameError("malformed", "unknown type or status") from None
    if not (
        msg_id.__class__ is str
        and sender.__class__ is str
        and target.__class__ is str
        and topic.__class__ is str
        and corr.__class__ is str
        and reply_to.__class__ is str
        and trace_id.__class__ is str
        and priority.__class__ is int
        and qos.__class__ is int
        and (stamp.__class__ is float or stamp.__class__ is int)
        and (ttl is None or ttl.__class__ is float or ttl.__class__ is int)
    ):
        raise FrameError("malformed", "bad message field type")
    return Message(
        mtype,
        sender,
        target,
        topic,
        payload,
        corr,
        reply_to,
        priority,
        qos,
        ttl,
        stamp,
        trace_id,
        status,
        msg_id,
    )
