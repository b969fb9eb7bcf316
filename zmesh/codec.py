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

from .errors import FrameError, InvalidMessage
from .message import MESSAGE_TYPES, STATUSES, Message
from .registry import NodeRecord, parse_record

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
    "encode_message",
    "encode_item",
    "join_frame",
    "join_pub_frame",
    "decode_frame",
    "decode_pub_frame",
    "decode_item",
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
    "Control",
    "parse_control",
    "encode_control",
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
CREDIT: Final = 8
BLOCKED: Final = 9
HANDLED: Final = 10

_TYPE_CODE: Final = {name: code for code, name in enumerate(MESSAGE_TYPES)}
_STATUS_CODE: Final = {name: code for code, name in enumerate(STATUSES)}
_MSG_FIELDS: Final = 15

_packb: Callable[[Any], bytes] = msgpack.packb
_unpackb: Callable[..., Any] = msgpack.unpackb
_VERSION_BYTES: Final[bytes] = _packb(PROTOCOL_VERSION)


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


def decode_item(data: bytes) -> list[Any]:
    """Decode one encoded item (as kept in a store); FrameError if unusable."""
    try:
        item = _unpackb(data, raw=False, strict_map_key=False, use_list=True)
    except Exception as exc:
        raise FrameError("malformed", type(exc).__name__) from None
    if item.__class__ is not list or not item or item[0].__class__ is not int:
        raise FrameError("malformed", "bad item")
    return item


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


Control = Union[Hello, Update, Ack, Ping, Pong, Bye, Refuse, Credit, Blocked, Handled]
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
        if n != 3 or item[1].__class__ is not str or item[2].__class__ is not int or item[2] < 0:
            raise FrameError("malformed", "credit" if kind == CREDIT else "blocked")
        return Credit(item[1], item[2]) if kind == CREDIT else Blocked(item[1], item[2])
    if kind == HANDLED:
        if n != 2 or item[1].__class__ is not list or len(item[1]) > _MAX_HANDLED or any(
            i.__class__ is not str for i in item[1]
        ):
            raise FrameError("malformed", "handled")
        return Handled(tuple(item[1]))
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
    if value.__class__ is Bye:
        assert isinstance(value, Bye)
        return _packb([BYE, value.reason])
    assert isinstance(value, Refuse)
    return _packb([REFUSE, value.reason, value.node_id, list(value.endpoints)])
