"""How a message looks on the file bus (internal): one file, the seed
design's JSON envelope (``Message.to_envelope``), UTF-8, so the seed's own
``FileBroker`` and any program that reads JSON can read and write it. A
payload JSON cannot hold as it is (bytes, a tuple, a timestamp, ...) travels
packed: msgpack, base64 in ``payload``, with ``"content_type":
"application/msgpack"`` in the header."""

from __future__ import annotations

import base64
import json
import os
from typing import Any, Callable, NamedTuple

import msgpack

from .._wire import codec
from ..errors import FrameError, InvalidMessage
from ..message import Message
from .wires import MSGPACK, json_exact

__all__ = ["Arrival", "ArrivalWire", "EnvelopeWire", "MAX_FILE", "msg_id_of"]

_unpackb: Callable[..., Any] = msgpack.unpackb
#: The largest envelope file read (a bigger one is dropped and counted).
MAX_FILE = 64 << 20


class EnvelopeWire:
    """Messages as envelope files' bytes."""

    def __init__(self, max_payload: int, encoder: codec.Encoder | None, decoder: codec.Decoder | None) -> None:
        self.max_payload = max_payload
        self.decoder = decoder
        self._pack = codec.ItemPacker(encoder)

    def encode(self, msg: Message, limit: int) -> bytes:
        item = codec.encode_message(msg, self.max_payload, self._pack)  # every check zmesh makes, and the size
        if len(item) > limit:
            raise codec.too_big(msg, len(item), limit, " of its node", self._pack)
        envelope = msg.to_envelope()
        payload = msg.payload
        if not json_exact(payload) or self._pack.encoder is not None:
            packed = self._pack.pack(payload)
            self._pack.tuples = False
            value = _unpackb(packed, raw=False, strict_map_key=False, use_list=True, timestamp=3)
            if json_exact(value):
                envelope["payload"] = value
            else:
                envelope["payload"] = base64.b64encode(packed).decode()
                envelope["header"]["content_type"] = MSGPACK
        try:
            return json.dumps(envelope, ensure_ascii=False, indent=1).encode()
        except (TypeError, ValueError) as exc:
            raise InvalidMessage(f"the message cannot be written as a JSON envelope: {exc}") from None

    def decode(self, data: bytes) -> Message:
        try:
            envelope = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise FrameError("malformed", "not a JSON envelope") from None
        if envelope.__class__ is not dict or envelope.get("header").__class__ is not dict:
            raise FrameError("malformed", "an envelope is {\"header\": {...}, \"payload\": ...}")
        header = envelope["header"]
        header.setdefault("msg_id", "")
        try:
            msg = Message.from_envelope(envelope)
        except InvalidMessage as exc:
            raise FrameError("malformed", str(exc)[:200]) from None
        if not msg.id:
            raise FrameError("malformed", "an envelope without a msg_id")
        if header.get("content_type") == MSGPACK:
            try:
                msg.payload = _unpackb(base64.b64decode(msg.payload, validate=True), raw=False,
                                       strict_map_key=False, use_list=True, timestamp=3)
            except Exception as exc:
                raise FrameError("malformed", f"a packed payload: {type(exc).__name__}") from None
        if self.decoder is not None:
            msg.payload = codec.decode_payload(msg.payload, self.decoder)
        return msg

    @staticmethod
    def size(data: bytes) -> int:
        return len(data)


class Arrival(NamedTuple):
    """An envelope file as it arrived: its bytes, where it is while it is held,
    and the address whose inbox it was in (the target of an envelope that names none)."""

    data: bytes
    path: str = ""
    address: str = ""


def msg_id_of(data: bytes) -> str:
    """The envelope's id (for its file's name), from the bytes the wire made."""
    start = data.find(b'"msg_id": "')
    if start < 0:
        return os.urandom(8).hex()
    start += 11
    return data[start:data.index(b'"', start)].decode()


class ArrivalWire:
    """The envelope wire, over ``Arrival``s."""

    def __init__(self, wire: EnvelopeWire) -> None:
        self._wire = wire

    def encode(self, msg: Any, limit: int) -> Arrival:
        return Arrival(self._wire.encode(msg, limit))

    def decode(self, data: Arrival) -> Any:
        msg = self._wire.decode(data.data)
        if not msg.target and data.address:
            msg.target = data.address  # a hand-written envelope: its inbox says whose it is
        return msg

    def size(self, data: Arrival) -> int:
        return len(data.data)
