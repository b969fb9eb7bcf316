"""How a message looks on the file bus (internal): one file, the seed
design's JSON envelope (``Message.to_envelope``), UTF-8, so the seed's own
``FileBroker`` and any program that reads JSON can read and write it. A
payload JSON cannot hold as it is (bytes, a tuple, a timestamp, ...) travels
packed: msgpack, base64 in ``payload``, with ``"content_type":
"application/msgpack"`` in the header."""

from __future__ import annotations

import base64
import json
from typing import Any, Callable, NamedTuple

import msgpack

from .._wire import codec
from ..errors import FrameError, InvalidMessage
from ..message import Message
from .wires import MSGPACK, json_exact

__all__ = ["Arrival", "EnvelopeWire", "MAX_FILE"]

_unpackb: Callable[..., Any] = msgpack.unpackb
#: The largest envelope file read (a bigger one is dropped and counted).
MAX_FILE = 64 << 20


class Arrival(NamedTuple):
    """An envelope file's bytes, and ``envelope``, what they hold (parsed once: by the
    wire that wrote them, or by the transport that read them); where the file
    is while it is held; the address whose inbox it was in (the target of an
    envelope that names none)."""

    data: bytes
    envelope: dict[str, Any] | None = None
    path: str = ""
    address: str = ""

    @property
    def msg_id(self) -> str:
        header = (self.envelope or {}).get("header")
        return str(header.get("msg_id") or "") if isinstance(header, dict) else ""


class EnvelopeWire:
    """Messages as envelope files (:class:`Arrival`)."""

    def __init__(self, max_payload: int, encoder: codec.Encoder | None, decoder: codec.Decoder | None) -> None:
        self.max_payload = max_payload
        self.decoder = decoder
        self._pack = codec.ItemPacker(encoder)

    def encode(self, msg: Message, limit: int) -> Arrival:
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
            return Arrival(json.dumps(envelope, ensure_ascii=False, indent=1).encode(), envelope)
        except (TypeError, ValueError) as exc:
            raise InvalidMessage(f"the message cannot be written as a JSON envelope: {exc}") from None

    def decode(self, data: Arrival) -> Message:
        envelope = data.envelope
        if envelope is None:
            try:
                envelope = json.loads(data.data)
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
        if not msg.target and data.address:
            msg.target = data.address  # a hand-written envelope: its inbox says whose it is
        return msg

    @staticmethod
    def size(data: Arrival) -> int:
        return len(data.data)
