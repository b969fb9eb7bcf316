"""Items that did not decode, though the frame around them did (internal).

The codec hands each one over as a bad item, ``[codec.BAD, reason, detail,
header]`` (see ``zmesh/_wire/frames.py``): it is dropped and counted like any
unusable input, and when it was a message whose header still decoded, its
sender hears about it instead of waiting for a timeout: a request gets an
error reply, a reply fails the request it answers, and a direct message
gives its flow-control credit back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._wire import codec
from ..errors import FrameError
from .config import LOCAL

if TYPE_CHECKING:
    from .core import Engine
    from .members import Peer

__all__ = ["bad_item", "published_error"]


def bad_item(engine: Engine, item: list[Any], peer: Peer | None, where: str, loopback: bool) -> None:
    """A bad item in a direct frame from ``peer`` (None with ``loopback``: our own)."""
    engine.drop(item[1], where, item[2])
    if item[3] is None or (peer is None and not loopback):
        return
    try:
        msg = codec.message_from_item(item[3])
    except FrameError:
        return
    if peer is not None and msg.sender not in peer.record.agents:
        return  # not a message that peer may send: nobody to tell
    why = f"message {msg.id} from {msg.sender!r} could not be decoded at node {engine.node_id!r} ({item[2]})"
    error = {"type": "InvalidMessage", "message": why}
    if msg.type == "result":
        if msg.correlation_id:
            msg.status, msg.payload = "error", error
            engine.requests.resolve(msg, engine.node_id if peer is None else peer.node_id)
        return
    if msg.target:
        engine.flow.taken(LOCAL if peer is None else peer.node_id, msg.target)
        if msg.correlation_id:
            engine.reply_status(msg, "error", error)


def published_error(item: list[Any]) -> FrameError:
    """Why a published item that is not a message is dropped."""
    if item[0] == codec.BAD:
        return FrameError(item[1], item[2])
    return FrameError("unknown_item", "only messages are published")
