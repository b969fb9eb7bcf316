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

from dataclasses import dataclass
from typing import Any, Callable, Final, Union

import msgpack

from ..errors import FrameError, InvalidMessage
from ..message import MESSAGE_TYPES, STATUSES, Message
from ..registry import NodeRecord, parse_record
from .frames import (
    BAD,
    MSG,
    MSG_FIELDS,
    PROTOCOL_VERSION,
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

# Item kinds (MSG, 0, lives with the frame layout in _frames).
HELLO: Final = 1
UPDATE: Final = 2
ACK: Final = 3
PING: Final = 4
PONG: Final = 5
BYE: Final = 6
REFUSE: Final = 7
CREDIT: Final = 8
BLOCKED: Final = 9
HANDLED: Final = 10
DECLINED: Final = 11

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
        if msg.traceparent:  # a 16th field, only on a message its node traced
            fields.append(msg.traceparent)
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
    traceparent = ""
    if len(item) != _MSG_FIELDS:
        if len(item) != _MSG_FIELDS + 1:
            raise FrameError("malformed", "wrong message field count")
        traceparent = item[_MSG_FIELDS]
        if traceparent.__class__ is not str:
            raise FrameError("malformed", "bad message field type")
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
    )


# -- typed control items -------------------------------------------------
# The engine only ever sees these, never the raw msgpack arrays.


@dataclass(frozen=True, slots=True)
class Hello:
    """Join: the sender's record, its joined peers' router endpoints, and
    whether it wants a HELLO back (it does not know us yet)."""

    record: NodeRecord
    peers: tuple[tuple[str, tuple[str, ...]], ...]
    reply: bool


@dataclass(frozen=True, slots=True)
class Update:
    record: NodeRecord


@dataclass(frozen=True, slots=True)
class Ack:
    seq: int


@dataclass(frozen=True, slots=True)
class Ping:
    want_pong: bool


@dataclass(frozen=True, slots=True)
class Pong:
    pass


@dataclass(frozen=True, slots=True)
class Bye:
    reason: str


@dataclass(frozen=True, slots=True)
class Refuse:
    reason: str
    node_id: str
    endpoints: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Credit:
    """Flow control: ``taken`` (cumulative) of the sender's messages to ``agent`` left its inbox."""

    agent: str
    taken: int


@dataclass(frozen=True, slots=True)
class Blocked:
    """Flow control: the sender waits for credit to ``agent``, having sent ``sent`` (cumulative)."""

    agent: str
    sent: int


@dataclass(frozen=True, slots=True)
class Handled:
    """QoS 1/2: the receiving node handled the messages with these ids."""

    ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Declined:
    """QoS 1/2: the receiving node did not take these (full inbox, agent not
    there); the sender should send them again later."""

    ids: tuple[str, ...]


Control = Union[Hello, Update, Ack, Ping, Pong, Bye, Refuse, Credit, Blocked, Handled, Declined]
_MAX_HANDLED = 65536

_MAX_HELLO_PEERS = 4096
_MAX_ENDPOINTS = 64


def _endpoints(value: Any, what: str) -> tuple[str, ...]:
    if value.__class__ is str:
        value = [value]
    if value.__class__ is not list or any(e.__class__ is not str for e in value):
        raise FrameError("malformed", what)
    return tuple(value[:_MAX_ENDPOINTS])


def parse_control(item: list[Any]) -> Control:
    """Turn a decoded control item into its typed value; FrameError if unusable."""
    kind = item[0]
    n = len(item)
    if kind == HELLO:
        if n != 4 or item[2].__class__ is not list or len(item[2]) > _MAX_HELLO_PEERS:
            raise FrameError("malformed", "hello")
        peers = []
        for entry in item[2]:
            if entry.__class__ is not list or len(entry) != 2 or entry[0].__class__ is not str:
                raise FrameError("malformed", "hello peer list")
            peers.append((entry[0], _endpoints(entry[1], "hello peer list")))
        return Hello(parse_record(item[1]), tuple(peers), item[3] is True)
    if kind == UPDATE:
        if n != 2:
            raise FrameError("malformed", "update")
        return Update(parse_record(item[1]))
    if kind == ACK:
        if n != 2 or item[1].__class__ is not int:
            raise FrameError("malformed", "ack")
        return Ack(item[1])
    if kind == PING:
        return Ping(n == 2 and item[1] is True)
    if kind == PONG:
        return Pong()
    if kind == BYE:
        return Bye(str(item[1])[:256] if n > 1 else "")
    if kind == REFUSE:
        if n not in (3, 4) or item[1].__class__ is not str or item[2].__class__ is not str:
            raise FrameError("malformed", "refuse")
        endpoints = _endpoints(item[3], "refuse") if n == 4 else ()
        return Refuse(item[1][:1024], item[2][:256], endpoints)
    if kind == CREDIT or kind == BLOCKED:
        if (n != 3 or item[1].__class__ is not str or item[2].__class__ is not int or item[2] < 0
                or len(item[1]) > 256):  # an agent id's limit: flow control keeps an entry per agent
            raise FrameError("malformed", "credit" if kind == CREDIT else "blocked")
        return Credit(item[1], item[2]) if kind == CREDIT else Blocked(item[1], item[2])
    if kind == HANDLED or kind == DECLINED:
        what = "handled" if kind == HANDLED else "declined"
        if n != 2 or item[1].__class__ is not list or len(item[1]) > _MAX_HANDLED or any(
            i.__class__ is not str for i in item[1]
        ):
            raise FrameError("malformed", what)
        return Handled(tuple(item[1])) if kind == HANDLED else Declined(tuple(item[1]))
    raise FrameError("unknown_item", str(kind)[:40])


def encode_control(value: Control) -> bytes:
    """Encode a typed control item."""
    if value.__class__ is Hello:
        assert isinstance(value, Hello)
        peers = [[node_id, list(routers)] for node_id, routers in value.peers]
        return _packb([HELLO, value.record.to_wire(), peers, value.reply])
    if value.__class__ is Update:
        assert isinstance(value, Update)
        return _packb([UPDATE, value.record.to_wire()])
    if value.__class__ is Ack:
        assert isinstance(value, Ack)
        return _packb([ACK, value.seq])
    if value.__class__ is Ping:
        assert isinstance(value, Ping)
        return _packb([PING, value.want_pong])
    if value.__class__ is Pong:
        return _packb([PONG])
    if value.__class__ is Credit:
        assert isinstance(value, Credit)
        return _packb([CREDIT, value.agent, value.taken])
    if value.__class__ is Blocked:
        assert isinstance(value, Blocked)
        return _packb([BLOCKED, value.agent, value.sent])
    if value.__class__ is Handled:
        assert isinstance(value, Handled)
        return _packb([HANDLED, list(value.ids)])
    if value.__class__ is Declined:
        assert isinstance(value, Declined)
        return _packb([DECLINED, list(value.ids)])
    if value.__class__ is Bye:
        assert isinstance(value, Bye)
        return _packb([BYE, value.reason])
    assert isinstance(value, Refuse)
    return _packb([REFUSE, value.reason, value.node_id, list(value.endpoints)])
