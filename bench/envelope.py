"""The ~200-byte msgpack envelope that every system in the bench carries.

Every message is built and packed anew (fresh id and timestamp), and every
receiver unpacks it back into a dict, so each system pays the same
serialisation cost and the numbers compare transports, not codecs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any, Final

import msgpack

__all__ = [
    "KINDS",
    "TARGET_SIZE",
    "decode",
    "decode_batch",
    "encode",
    "encode_batch",
    "encode_with_id",
    "kind_of",
]

#: ``type`` values the bench uses: measured data, warm-up traffic, and RTT.
KINDS: Final = ("data", "warmup", "request", "reply")
#: Size the envelope is tuned to (checked by :func:`_self_check`).
TARGET_SIZE: Final = 200

_TAG: Final = os.urandom(5).hex()
# Sized so that the packed envelope is ~200 bytes (see _self_check).
_PAYLOAD: Final = {"text": "summarise findings", "step": 0}


def encode(seq: int, kind: str = "data", correlation_id: str = "", size: int = 0) -> bytes:
    """Build and pack envelope number *seq* (see :func:`encode_with_id`)."""
    return encode_with_id(seq, kind, correlation_id, size)[1]


def encode_with_id(seq: int, kind: str = "data", correlation_id: str = "", size: int = 0) -> tuple[str, bytes]:
    """Build and pack envelope number *seq*; return ``(msg_id, packed)``.

    The id layout mimics a real mesh id: 12 hex digits of milliseconds,
    10 per-process random hex digits and a 6-digit counter (28 chars).
    ``correlation_id`` is empty for one-way data and carries the request's
    28-char id on requests and replies (those are 28 bytes bigger).
    With ``size`` (bytes, above the ~200 of the plain envelope) the
    envelope also carries a ``blob`` of random bytes (made once per
    process and size) so that it packs to *size* bytes: the large-payload
    workloads (64 KiB, 1 MiB).
    """
    ts = time.time()
    msg_id = f"{int(ts * 1000):012x}{_TAG}{seq & 0xFFFFFF:06x}"
    env: dict[str, Any] = {
        "msg_id": msg_id,
        "type": kind,
        "sender": "agent.planner-01",
        "target": "agent.worker-07",
        "topic": "tasks.summarise",
        "priority": 3,
        "qos": 0,
        "timestamp": ts,
        "correlation_id": correlation_id,
        "payload": _PAYLOAD,
    }
    if size:
        env["blob"] = _blob(size)
    return msg_id, msgpack.packb(env)


_BLOBS: dict[int, bytes] = {}


def _blob(size: int) -> bytes:
    """Random bytes that bring a packed data envelope to *size* bytes (cached per size)."""
    blob = _BLOBS.get(size)
    if blob is None:
        room = size - len(encode(0, "data")) - len(msgpack.packb("blob"))
        room -= 2 if room < 0x100 + 2 else 3 if room < 0x10000 + 3 else 5  # the bin8/16/32 header
        blob = _BLOBS[size] = os.urandom(max(0, room))
    return blob


def decode(frame: bytes) -> dict[str, Any]:
    """Unpack one envelope."""
    obj = msgpack.unpackb(frame)
    if not isinstance(obj, dict):
        raise TypeError("envelope is not a map")
    return obj


def kind_of(frame: bytes) -> str:
    """Unpack one envelope and return its ``type``."""
    return str(decode(frame)["type"])


def encode_batch(frames: list[bytes]) -> bytes:
    """Pack several envelopes into one frame (msgpack objects self-delimit)."""
    return b"".join(frames)


def decode_batch(frame: bytes) -> Iterator[dict[str, Any]]:
    """Unpack every envelope of a frame made by :func:`encode_batch`."""
    unpacker = msgpack.Unpacker()
    unpacker.feed(frame)
    for obj in unpacker:
        if not isinstance(obj, dict):
            raise TypeError("envelope is not a map")
        yield obj


def _self_check() -> int:
    """Return the packed size of a typical envelope (for the README and tests)."""
    return len(encode(123456, "data"))


if __name__ == "__main__":
    print(f"envelope: {_self_check()} bytes (target ~{TARGET_SIZE})")
