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

from ..errors import FrameError, InvalidMessage
from ..message import MAX_ROLE, MESSAGE_TYPES, STATUSES, Message
from .control import (
    ACK,
    BLOCKED,
    BYE,
    CREDIT,
    DECLINED,
    HANDLED,
    HELLO,
    PING,
    PONG,
    REFUSE,
    UPDATE,
    Ack,
    Blocked,
    Bye,
    Control,
    Credit,
    Declined,
    Handled,
    Hello,
    Ping,
    Pong,
    Refuse,
    Update,
    encode_control,
    parse_control,
)
from .frames import (
    BAD,
    MSG,
    MSG_FIELDS,
    PROTOCOL_VERSION,
    Received,
    decode_frame,
    decode_item,
    decode_opening,
    decode_pub_frame,
    join_frame,
    join_pub_frame,
)
from .packer import Decoder, Encoder, ItemPacker, PayloadRefused, check_round_trip, decode_payload, refusal

__all__ = [
    "PROTOCOL_VERSION",
    "Received",
    "FrameError",
    "MSG",
    "HELLO",
    "UPDATE",
    "ACK",
    "PING",
    "PONG",
    "BYE",
    "REFUSE",
    "CREDIT",
    "BLOCKED",
    "HANDLED",
    "DECLINED",
    "BAD",
    "ItemPacker", "Encoder", "Decoder", "decode_payload",
    "encode_message",
    "too_big",
    "encode_item",
    "join_frame",
    "join_pub_frame",
    "decode_frame",
    "decode_pub_frame",
    "decode_item",
    "decode_opening",
    "message_from_item",
    "Hello",
    "Update",
    "Ack",
    "Ping",
    "Pong",
    "Bye",
    "Refuse",
    "Credit",
    "Blocked",
    "Handled",
    "Declined",
    "Control",
    "parse_control",
    "encode_control",
]

_TYPE_CODE: Final = {name: code for code, name in enumerate(MESSAGE_TYPES)}
_STATUS_CODE: Final = {name: code for code, name in enumerate(STATUSES)}
_MSG_FIELDS: Final = MSG_FIELDS

_packb: Callable[[Any], bytes] = msgpack.packb


def encode_message(msg: Message, max_payload: int, pack: ItemPacker | None = None) -> bytes:
    """Encode ``msg`` as a MSG item; raise InvalidMessage if it cannot travel:
    unencodable, not decodable by a receiver, or over ``max_payload`` bytes
    as a whole (payload, topic, trace id and every other field).

    ``pack`` is a reusable :class:`ItemPacker` (one per thread); without one a
    new one is made.
    """
    packer = ItemPacker() if pack is None else pack
    try:
        fields = [
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
        if msg.traceparent or msg.sender_type or msg.target_type:
            fields.append(msg.traceparent)  # a 16th field, on a message its node traced
            if msg.sender_type or msg.target_type:  # a 17th, on one with an envelope's roles
                fields.append([msg.sender_type, msg.target_type])
        item: bytes = packer.pack(fields)
    except KeyError as exc:
        packer.tuples = False
        raise InvalidMessage(f"unknown message type or status {exc}") from None
    except PayloadRefused as exc:  # a type zmesh does not carry, or the encoder failed on it
        packer.tuples = False
        raise refusal(exc, msg.payload) from exc.__cause__
    except (TypeError, ValueError, OverflowError) as exc:
        packer.tuples = False
        raise InvalidMessage(f"message cannot be encoded with msgpack: {exc}") from None
    if packer.tuples:
        packer.tuples = False
        check_round_trip(item, msg.payload)
    if len(item) > max_payload:
        raise too_big(msg, len(item), max_payload, pack=packer)
    return item


def too_big(msg: Message, size: int, limit: int, whose: str = "", pack: ItemPacker | None = None) -> InvalidMessage:
    """The error for a message of ``size`` bytes encoded over ``limit``
    (``pack``: the packer, with the node's encoder, that encoded it)."""
    packer = ItemPacker() if pack is None else pack
    try:
        payload = f"; its payload is {len(packer.pack(msg.payload))} bytes"
    except Exception:
        payload = ""
    packer.tuples = False
    return InvalidMessage(
        f"message is {size} bytes encoded, over the limit of {limit} bytes{whose} "
        f"(the limit counts the whole message: payload, topic, trace id and the other fields{payload})"
    )


def encode_item(item: list[Any]) -> bytes:
    """Encode a control item (HELLO, ACK, ...)."""
    return _packb(item)


def message_from_item(item: list[Any]) -> Message:
    """Build a Message from a decoded MSG item; raise FrameError if malformed."""
    traceparent = sender_type = target_type = ""
    if len(item) != _MSG_FIELDS:
        if not _MSG_FIELDS < len(item) <= _MSG_FIELDS + 2:
            raise FrameError("malformed", "wrong message field count")
        traceparent = item[_MSG_FIELDS]
        if traceparent.__class__ is not str:
            raise FrameError("malformed", "bad message field type")
        if len(item) > _MSG_FIELDS + 1:
            roles = item[_MSG_FIELDS + 1]
            if (roles.__class__ is not list or len(roles) != 2 or any(
                    r.__class__ is not str or len(r) > MAX_ROLE for r in roles)):
                raise FrameError("malformed", "bad roles")
            sender_type, target_type = roles
        item = item[:_MSG_FIELDS]
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
    if len(topic) > 1024:  # MAX_TOPIC: no node sends longer ones, and topics key a match cache
        raise FrameError("malformed", "topic longer than 1024 characters")
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
        traceparent,
        sender_type,
        target_type,
    )
