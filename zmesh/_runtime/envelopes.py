"""A seed-design envelope as a message an agent sends (internal; see
:meth:`zmesh.Agent.send_envelope`)."""

from __future__ import annotations

from typing import Any

from .._wire.names import check_agent_id, replies_to
from ..errors import InvalidMessage
from ..message import Message
from ..topics import check_topic

__all__ = ["envelope_message", "replies_to"]


def envelope_message(agent_id: str, envelope: Any) -> Message:
    """The Message that agent ``agent_id`` sends for ``envelope``, checked
    whole: InvalidMessage before anything is sent."""
    if not isinstance(envelope, dict):
        raise InvalidMessage(f"an envelope is a dict with a 'header' and a 'payload', got {type(envelope).__name__}")
    header = envelope.get("header")
    if isinstance(header, dict) and "msg_id" not in header:  # a new message: an id of its own
        envelope = {**envelope, "header": {**header, "msg_id": Message().id}}
    msg = Message.from_envelope(envelope)
    if msg.sender not in ("", agent_id):
        raise InvalidMessage(f"agent {agent_id!r} cannot send an envelope from {msg.sender!r}")
    msg.sender = agent_id
    if msg.type == "result":
        raise InvalidMessage("a 'result' answers a request: return it from the handler, or call agent.reply()")
    check_topic(msg.topic)
    if msg.target:
        check_agent_id(msg.target)
    if msg.correlation_id:
        if not msg.target:
            raise InvalidMessage("a request (an envelope with a correlation_id) needs a target")
        if msg.reply_to and not replies_to(msg.reply_to, agent_id):
            raise InvalidMessage(
                f"the reply to {agent_id!r}'s request comes back to it, not to {msg.reply_to!r}")
        msg.reply_to = agent_id  # where the mesh routes the reply (its topic part is the seed's note)
    elif msg.reply_to:
        raise InvalidMessage("reply_to belongs to a request: give the envelope a correlation_id too")
    return msg
