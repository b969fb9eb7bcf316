"""Errors that cross the wire (internal): what a failed request's reply
carries, and the error its requester raises.

A handler that fails because of the mesh (a delegate's PeerLost or Timeout,
an agent that is not there, a full inbox) passes that error's kind on, so
the origin of a delegate chain raises the same kind as the hop where it
happened. A HandlerError passes on the innermost handler's error.
"""

from __future__ import annotations

from typing import Any

from ..errors import (AgentNotRegistered, Backpressure, HandlerError, NoHandler, NoProvider, PeerLost, Timeout,
                      ZmeshError)
from ..message import Message

__all__ = ["error_payload", "reply_error"]

_KINDS: dict[str, type[ZmeshError]] = {
    cls.__name__: cls for cls in (PeerLost, Timeout, AgentNotRegistered, NoProvider, NoHandler, Backpressure)
}


def error_payload(exc: BaseException) -> dict[str, Any]:
    """The payload of an ``error`` reply for a handler that raised ``exc``."""
    if isinstance(exc, HandlerError):
        return {"type": exc.remote_type, "message": exc.remote_message, "agent": exc.agent}
    name = type(exc).__name__
    if _KINDS.get(name) is type(exc):
        return {"type": name, "message": str(exc), "zmesh": name}
    return {"type": name, "message": str(exc)}


def reply_error(reply: Message) -> ZmeshError:
    """The error a requester raises for a reply whose status is not ``ok``."""
    payload = reply.payload
    if reply.status == "error":
        if isinstance(payload, dict):
            kind = _KINDS.get(str(payload.get("zmesh", "")))
            if kind is not None:
                return kind(str(payload.get("message", "")))
            agent = payload.get("agent")
            return HandlerError(
                str(payload.get("type", "Exception")), str(payload.get("message", "")),
                agent=agent if isinstance(agent, str) and agent else reply.sender,
            )
        return HandlerError("Exception", str(payload), agent=reply.sender)
    if reply.status == "no_handler":
        return NoHandler(str(payload))
    if reply.status == "not_found":
        return AgentNotRegistered(str(payload))
    if reply.status == "expired":
        return Timeout(f"request expired before delivery: {payload}")
    if reply.status == "busy":
        return Backpressure(str(payload))
    return ZmeshError(f"unexpected reply status {reply.status!r}")
