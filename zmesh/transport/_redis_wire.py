"""How a message looks on Redis (internal; docs/transports.md).

A Redis pub/sub message is bytes, so a message's fields travel in it:

* between zmesh nodes, packed: ``NATIVE`` then msgpack ``[headers, body, topic]``;
* to and from plain clients (broadcasts, replies to a ``redis:`` channel,
  whatever a plain client publishes): the seed design's JSON envelope,
  ``{"header": {"type": ..., "topic": ..., "reply_to": ...}, "payload": ...}``,
  when the payload is JSON (else packed as between nodes);
* anything else a plain client publishes is the payload itself (JSON if it
  parses as JSON, else bytes), a ``notify`` on the topic ``""``.

A stream entry (QoS 1/2) is field-value pairs: the headers as they are,
``Zmesh-Topic`` and ``body``.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Final

import msgpack

from ..errors import FrameError
from ..message import iso_timestamp, new_id
from .wires import HEADERS, JSON, PlainMessage

__all__ = ["NATIVE", "REPLY_PREFIX", "pack", "plain", "unpack", "fields", "from_fields"]

#: How a message between zmesh nodes starts (msgpack ``[headers, body, topic]`` follows).
NATIVE: Final = b"\x00zmesh/1\n"
#: A plain client's reply channel, as a ``reply_to`` address.
REPLY_PREFIX: Final = "redis:"
TOPIC_FIELD: Final = "Zmesh-Topic"
BODY_FIELD: Final = "body"

_packb: Callable[..., bytes] = msgpack.packb
_unpackb: Callable[..., Any] = msgpack.unpackb

#: Envelope header key -> zmesh header (the seed's names: ``msg_id`` for the id).
_FROM_ENVELOPE: Final = {**{k: v for k, v in HEADERS.items() if k not in ("id", "content_type")},
                         "msg_id": "Zmesh-Id"}
_TO_ENVELOPE: Final = {v: k for k, v in _FROM_ENVELOPE.items()}
_NUMBERS: Final = ("Zmesh-Priority", "Zmesh-Qos")


def pack(data: PlainMessage) -> bytes:
    return NATIVE + _packb([data.headers, data.body, data.topic])


def plain(data: PlainMessage) -> bytes:
    """The seed's JSON envelope of ``data`` if its body is JSON, else :func:`pack`."""
    headers = data.headers
    if headers.get("Content-Type") != JSON:
        return pack(data)
    header: dict[str, Any] = {"version": "1.0", "topic": data.topic, "status": "ok"}
    for name, value in headers.items():
        key = _TO_ENVELOPE.get(name)
        if key is None:
            continue
        if name in _NUMBERS:
            header[key] = int(value)
        elif name == "Zmesh-Ttl":
            header[key] = float(value)
        else:
            header[key] = value
    return b'{"header":%s,"payload":%s}' % (json.dumps(header, ensure_ascii=False).encode(), data.body or b"null")


def unpack(payload: bytes, target: str, topic: str = "") -> PlainMessage:
    """What arrived on a channel of ``target`` (``topic``: a broadcast's, from its channel)."""
    if payload.startswith(NATIVE):
        try:
            headers, body, packed_topic = _unpackb(payload[len(NATIVE):], raw=False, use_list=True)
            if headers.__class__ is not dict or body.__class__ is not bytes or packed_topic.__class__ is not str or \
                    not all(k.__class__ is str and v.__class__ is str for k, v in headers.items()):
                raise ValueError("not [headers, body, topic]")
        except Exception as exc:
            raise FrameError("malformed", f"a zmesh payload: {type(exc).__name__}") from None
        return PlainMessage(headers, body, target, topic or packed_topic)
    envelope = _envelope(payload)
    if envelope is None:
        return PlainMessage({}, payload, target, topic)
    header, body = envelope
    fields_: dict[str, str] = {"Content-Type": JSON}
    for key, value in header.items():
        name = _FROM_ENVELOPE.get(key)
        if name is None or value is None or value == "":
            continue
        if name == "Zmesh-Timestamp" and value.__class__ in (int, float):
            value = iso_timestamp(float(value))
        fields_[name] = value if value.__class__ is str else json.dumps(value)
    reply = ""
    reply_to = fields_.get("Zmesh-Reply-To", "")
    if reply_to.startswith(REPLY_PREFIX):  # a plain client's request: the wire answers on its channel
        del fields_["Zmesh-Reply-To"]
        reply = reply_to[len(REPLY_PREFIX):]
        fields_.setdefault("Zmesh-Correlation-Id", new_id())
    packed_topic = header.get("topic", "")
    return PlainMessage(fields_, body, target, topic or (packed_topic if packed_topic.__class__ is str else ""),
                        reply)


def _envelope(payload: bytes) -> tuple[dict[str, Any], bytes] | None:
    """(header, payload as JSON) if ``payload`` is a JSON envelope."""
    if not payload.lstrip().startswith(b"{"):
        return None
    try:
        value = json.loads(payload)
    except ValueError:
        return None
    if value.__class__ is not dict or value.keys() != {"header", "payload"} or value["header"].__class__ is not dict:
        return None
    return value["header"], json.dumps(value["payload"], ensure_ascii=False, separators=(",", ":")).encode()


def fields(data: PlainMessage) -> dict[str, str | bytes]:
    """A stream entry's field-value pairs."""
    return {**data.headers, TOPIC_FIELD: data.topic, BODY_FIELD: data.body}


def from_fields(entry: dict[bytes, bytes], target: str, ack: str) -> PlainMessage:
    """A stream entry as a held delivery (``ack``: how it is acknowledged)."""
    try:
        headers = {k.decode(): v.decode() for k, v in entry.items() if k != b"body"}
    except UnicodeDecodeError:
        raise FrameError("malformed", "a stream entry's field is not UTF-8") from None
    topic = headers.pop(TOPIC_FIELD, "")
    headers.setdefault("Zmesh-Qos", "1")  # it came through a stream: held until it is handled
    return PlainMessage(headers, entry.get(b"body", b""), target, topic, "", ack)
