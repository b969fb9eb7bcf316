"""How a message-level transport's messages look on its broker: a
:class:`~zmesh.transport.message.MessageWire` (internal; see
docs/architecture.md and docs/transports.md).

* :class:`ItemWire`: zmesh's own MSG item (msgpack, as in a frame), for a
  transport that carries opaque bytes and is read by zmesh nodes only (the
  in-memory transport).
* :class:`PlainWire`: what a plain client of a broker can read and write
  with no zmesh installed: the envelope's fields as headers (``Zmesh-Type``,
  ``Zmesh-Sender``, ...), the payload as the body, JSON by default. NATS
  headers carry them as they are.

Both keep zmesh's rules of what travels as what (docs/guide.md): a payload
is checked by the same packer as on every other transport, and arrives as
the same Python value.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Final, NamedTuple

import msgpack

from .._wire import codec
from .._wire.frames import decode_item
from ..errors import FrameError, InvalidMessage
from ..message import MESSAGE_TYPES, STATUSES, Message, check_options, iso_timestamp, new_id, parse_timestamp

__all__ = ["ItemWire", "PlainMessage", "PlainWire", "HEADERS", "JSON", "MSGPACK", "OCTETS", "json_exact",
           "not_received"]

JSON: Final = "application/json"
MSGPACK: Final = "application/msgpack"
OCTETS: Final = "application/octet-stream"

#: Message field -> header name (the payload is the body, the target and the
#: topic are in the broker's subject or topic).
HEADERS: Final = {
    "type": "Zmesh-Type", "id": "Zmesh-Id", "sender": "Zmesh-Sender", "correlation_id": "Zmesh-Correlation-Id",
    "reply_to": "Zmesh-Reply-To", "priority": "Zmesh-Priority", "qos": "Zmesh-Qos", "ttl": "Zmesh-Ttl",
    "timestamp": "Zmesh-Timestamp", "trace_id": "Zmesh-Trace-Id", "traceparent": "Zmesh-Traceparent",
    "status": "Zmesh-Status", "sender_type": "Zmesh-Sender-Type", "target_type": "Zmesh-Target-Type",
    "content_type": "Content-Type",
}
#: The string fields that travel only when they are not empty.
_WHEN_SET: Final = ("correlation_id", "reply_to", "trace_id", "traceparent", "sender_type", "target_type")
_MAX_HEADER = 1024  # characters of any one header a peer sent

_unpackb: Callable[..., Any] = msgpack.unpackb


class ItemWire:
    """zmesh's MSG item: the bytes a frame would carry."""

    def __init__(self, max_payload: int, encoder: codec.Encoder | None, decoder: codec.Decoder | None) -> None:
        self.max_payload = max_payload
        self.decoder = decoder
        self._pack = codec.ItemPacker(encoder)

    def encode(self, msg: Message, limit: int) -> bytes:
        item = codec.encode_message(msg, self.max_payload, self._pack)
        if len(item) > limit:
            raise codec.too_big(msg, len(item), limit, " of its node", self._pack)
        return item

    def decode(self, data: bytes) -> Message:
        item = decode_item(data)
        if not item or item[0] != codec.MSG:
            raise FrameError("malformed", "not a message")
        msg = codec.message_from_item(item)
        if self.decoder is not None:
            msg.payload = codec.decode_payload(msg.payload, self.decoder)
        return msg

    def size(self, data: bytes) -> int:
        return len(data)


class PlainMessage(NamedTuple):
    """A message as a broker carries it: headers, a body, and what the
    broker's subject says (``target``, ``topic``) and where a plain
    client waits for an answer (``reply``, a broker-native address);
    ``ack``: the broker's handle of a delivery it holds until acknowledged
    (a JetStream ack subject), else empty."""

    headers: dict[str, str]
    body: bytes
    target: str = ""
    topic: str = ""
    reply: str = ""
    ack: str = ""


def not_received(reply_to: str, correlation_id: str, target: str, why: str) -> PlainMessage:
    """The answer to a request the broker says nobody received (``not_found``,
    from ``target``), for the requester at ``reply_to``."""
    headers = {"Zmesh-Type": "result", "Zmesh-Correlation-Id": correlation_id, "Zmesh-Status": "not_found",
               "Zmesh-Sender": target, "Content-Type": JSON}
    return PlainMessage(headers, json.dumps(why).encode(), reply_to, "")


def json_exact(value: Any) -> bool:
    """Does JSON carry ``value`` (as msgpack decoded it) and give it back the same?"""
    cls = value.__class__
    if cls is str or cls is int or cls is bool or value is None:
        return True
    if cls is float:
        return value == value and value not in (float("inf"), float("-inf"))
    if cls is list:
        return all(json_exact(v) for v in value)
    if cls is dict:
        return all(k.__class__ is str and json_exact(v) for k, v in value.items())
    return False  # bytes, a Timestamp, ...


class PlainWire:
    """Headers and a body (see the module's doc); ``reply_prefix`` marks a
    plain client's broker-native reply address in ``reply_to``;
    ``broker_limit()`` is the broker's largest message, if it has one."""

    def __init__(self, max_payload: int, encoder: codec.Encoder | None, decoder: codec.Decoder | None,
                 reply_prefix: str, broker_limit: Callable[[], int | None] = lambda: None) -> None:
        self.max_payload = max_payload
        self.decoder = decoder
        self.reply_prefix = reply_prefix
        self._broker_limit = broker_limit
        self._pack = codec.ItemPacker(encoder)

    # -- out -----------------------------------------------------------------

    def encode(self, msg: Message, limit: int) -> PlainMessage:
        item = codec.encode_message(msg, self.max_payload, self._pack)  # every check zmesh makes, and the size
        if len(item) > limit:
            raise codec.too_big(msg, len(item), limit, " of its node", self._pack)
        payload = msg.payload
        if payload.__class__ is bytes:
            body, content_type = payload, OCTETS
        else:
            packed = self._pack.pack(payload)
            self._pack.tuples = False
            value = _unpackb(packed, raw=False, strict_map_key=False, use_list=True, timestamp=3)
            if json_exact(value):
                body, content_type = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode(), JSON
            else:
                body, content_type = packed, MSGPACK
        headers = {
            "Zmesh-Type": msg.type, "Zmesh-Id": msg.id, "Zmesh-Sender": msg.sender,
            "Zmesh-Priority": str(msg.priority), "Zmesh-Qos": str(msg.qos),
            "Zmesh-Timestamp": iso_timestamp(msg.timestamp), "Content-Type": content_type,
        }
        for field in _WHEN_SET:
            value = getattr(msg, field)
            if value:
                headers[HEADERS[field]] = value
        if msg.ttl is not None:
            headers["Zmesh-Ttl"] = repr(float(msg.ttl))
        if msg.status != "ok":
            headers["Zmesh-Status"] = msg.status
        plain = PlainMessage(headers, body, msg.target, msg.topic)
        broker = self._broker_limit()
        if broker is not None and self.size(plain) > broker:
            raise codec.too_big(msg, self.size(plain), broker, " of the broker (headers and body)", self._pack)
        return plain

    @staticmethod
    def size(data: PlainMessage) -> int:
        return len(data.body) + sum(len(k) + len(v) for k, v in data.headers.items())

    # -- in ------------------------------------------------------------------

    def decode(self, data: PlainMessage) -> Message:
        """The Message ``data`` carries; FrameError when a header or the body is
        malformed. A plain client's message may have no headers at all."""
        headers = data.headers or {}
        for name, value in headers.items():
            if value.__class__ is not str or len(value) > _MAX_HEADER:
                raise FrameError("malformed", f"header {str(name)[:40]}")
        get = headers.get
        try:
            priority = int(get("Zmesh-Priority", "3"))
            qos = int(get("Zmesh-Qos", "0"))
            ttl_text = get("Zmesh-Ttl")
            ttl = float(ttl_text) if ttl_text else None
            stamp = get("Zmesh-Timestamp")
            timestamp = parse_timestamp(stamp) if stamp else 0.0
        except (ValueError, OverflowError):
            raise FrameError("malformed", "a number or timestamp header") from None
        correlation_id = get("Zmesh-Correlation-Id", "")
        reply_to = get("Zmesh-Reply-To", "")
        mtype = get("Zmesh-Type", "")
        if data.reply and not reply_to:  # a plain client's request: answer at its own address
            reply_to = self.reply_prefix + data.reply
            correlation_id = correlation_id or new_id()
            mtype = mtype or "query"
        msg = Message(
            type=mtype or "notify", sender=get("Zmesh-Sender", ""), target=data.target, topic=data.topic,
            payload=self._payload(get("Content-Type", ""), data.body), correlation_id=correlation_id,
            reply_to=reply_to, priority=priority, qos=qos, ttl=ttl, timestamp=timestamp,
            trace_id=get("Zmesh-Trace-Id", ""), status=get("Zmesh-Status", "ok"), id=get("Zmesh-Id") or new_id(),
            traceparent=get("Zmesh-Traceparent", ""), sender_type=get("Zmesh-Sender-Type", ""),
            target_type=get("Zmesh-Target-Type", ""),
        )
        if msg.type not in MESSAGE_TYPES or msg.status not in STATUSES:
            raise FrameError("malformed", "unknown type or status")
        try:
            check_options(msg.priority, msg.qos, msg.ttl)
        except InvalidMessage:
            raise FrameError("malformed", "priority, qos or ttl out of range") from None
        if self.decoder is not None:
            msg.payload = codec.decode_payload(msg.payload, self.decoder)
        return msg

    @staticmethod
    def _payload(content_type: str, body: bytes) -> Any:
        kind = content_type.split(";")[0].strip().lower()
        try:
            if kind == OCTETS:
                return bytes(body)
            if kind == MSGPACK:
                return _unpackb(body, raw=False, strict_map_key=False, use_list=True, timestamp=3)
            if kind == JSON:
                return json.loads(body)
            if not body:
                return None
            try:
                return json.loads(body)  # a plain client that said nothing: JSON if it is JSON,
            except ValueError:
                return bytes(body)  # else the bytes as they came
        except Exception as exc:
            raise FrameError("malformed", f"body ({kind or 'no content type'}): {type(exc).__name__}") from None
