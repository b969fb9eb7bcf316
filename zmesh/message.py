"""The message model: :class:`Message`, its JSON envelope, and id generation.

This module does no I/O. The wire encoding lives in :mod:`zmesh._wire.codec`.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Final

from .errors import InvalidMessage

__all__ = [
    "Message",
    "MESSAGE_TYPES",
    "STATUSES",
    "ENVELOPE_VERSION",
    "new_id",
    "new_request_id",
    "new_trace_id",
    "check_options",
]

#: Version of the JSON envelope written by :meth:`Message.to_envelope`.
ENVELOPE_VERSION: Final = 1

MESSAGE_TYPES: Final = ("task", "result", "query", "notify", "intervene", "heartbeat")
#: Reply statuses: ``ok`` or why the request failed at the far end.
STATUSES: Final = ("ok", "error", "no_handler", "not_found", "expired", "busy")

_PROCESS_TAG = os.urandom(5).hex()
_next_count = itertools.count().__next__


_prefix_ms = -1
_prefix = ""
_time_ns = time.time_ns


def new_id() -> str:
    """Return a new unique id that sorts by creation time (millisecond resolution).

    Layout: 12 hex digits of Unix milliseconds, 10 hex digits that are random
    per process, 6 hex digits of a per-process counter. Unique across processes
    and hosts without coordination; per-sender counters alone collide.
    """
    global _prefix_ms, _prefix
    ms = _time_ns() // 1_000_000
    if ms != _prefix_ms:  # the prefix changes at most once a millisecond
        _prefix_ms, _prefix = ms, "%012x%s" % (ms, _PROCESS_TAG)
    return _prefix + "%06x" % (_next_count() & 0xFFFFFF)


def new_request_id() -> str:
    """Return a new id for a request, which pairs it with its reply.

    Layout: 12 hex digits of Unix milliseconds, then 16 random hex digits
    (from the OS). Time-sortable like :func:`new_id`, but nothing in one id
    tells another: a peer that saw any number of ids cannot guess the
    correlation id of a request still waiting for its reply.
    """
    return "%012x%s" % (int(time.time() * 1000), os.urandom(8).hex())


_TRACE_BATCH = 256
_ZERO_TRACE = "0" * 32
_trace_ids: list[str] = []  # made a batch at a time: one list pop per message


def _new_process() -> None:
    """In a child of fork: ids of its own (a new process tag; none of the parent's trace ids)."""
    global _PROCESS_TAG, _prefix_ms
    _PROCESS_TAG = os.urandom(5).hex()
    _prefix_ms = -1
    _trace_ids.clear()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_new_process)


def new_trace_id() -> str:
    """Return a new W3C Trace Context trace-id: 32 lowercase hex digits, random, never all zeros.

    Random in every bit (from the OS, like :func:`new_request_id`; not
    time-ordered like :func:`new_id`), as samplers that keep a share of
    traces by their trace id expect.
    """
    try:
        return _trace_ids.pop()
    except IndexError:
        batch = os.urandom(16 * _TRACE_BATCH).hex(" ", -16).split()
        while _ZERO_TRACE in batch:  # one chance in 2**128 per id
            batch.remove(_ZERO_TRACE)
        _trace_ids.extend(batch)
        return _trace_ids.pop()


def check_options(priority: int, qos: int, ttl: float | None) -> None:
    """Raise :class:`InvalidMessage` for a priority, qos or ttl out of range."""
    if priority.__class__ is not int or not 0 <= priority <= 5:
        raise InvalidMessage(f"priority must be an int from 0 (urgent) to 5 (low), got {priority!r}")
    if qos.__class__ is not int or not 0 <= qos <= 2:
        raise InvalidMessage(f"qos must be 0, 1 or 2, got {qos!r}")
    if ttl is not None:
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl >= 0:
            raise InvalidMessage(f"ttl must be None or a number of seconds >= 0, got {ttl!r}")


@dataclass(slots=True)
class Message:
    """One message between agents.

    ``correlation_id`` is empty for fire-and-forget messages and pairs a
    request with its reply otherwise. ``status`` is ``"ok"`` except on replies
    that report a failure at the far end. ``trace_id`` names the interaction
    the message belongs to (a W3C trace-id unless one was given by hand);
    ``traceparent`` is the W3C ``traceparent`` of the OpenTelemetry span that
    sent it, or ``""`` when its node does not trace (see the guide's *Tracing*).
    """

    type: str = "notify"
    sender: str = ""
    target: str = ""
    topic: str = ""
    payload: Any = None
    correlation_id: str = ""
    reply_to: str = ""
    priority: int = 3
    qos: int = 0
    ttl: float | None = None
    timestamp: float = 0.0
    trace_id: str = ""
    status: str = "ok"
    id: str = field(default_factory=new_id)
    traceparent: str = ""

    @property
    def is_reply(self) -> bool:
        return self.type == "result" and bool(self.correlation_id)

    @property
    def expects_reply(self) -> bool:
        return self.type != "result" and bool(self.correlation_id)

    def expired(self, now: float) -> bool:
        """True when the message carries a ttl and ``now`` is past it."""
        return self.ttl is not None and now > self.timestamp + self.ttl

    def to_envelope(self) -> dict[str, Any]:
        """Return the JSON-ready envelope used by file-based agent frameworks
        (its header has a ``traceparent`` only when the message has one)."""
        header: dict[str, Any] = {
            "msg_id": self.id,
            "type": self.type,
            "version": ENVELOPE_VERSION,
            "sender": self.sender,
            "sender_type": "agent",
            "target": self.target,
            "target_type": "agent" if self.target else "topic",
            "topic": self.topic,
            "priority": self.priority,
            "qos": self.qos,
            "timestamp": self.timestamp,
            "ttl": self.ttl,
            "correlation_id": self.correlation_id,
            "reply_to": self.reply_to,
            "trace_id": self.trace_id,
            "status": self.status,
        }
        if self.traceparent:
            header["traceparent"] = self.traceparent
        return {"header": header, "payload": self.payload}

    @classmethod
    def from_envelope(cls, envelope: dict[str, Any]) -> Message:
        """Read back an envelope written by :meth:`to_envelope` (or by hand).

        Raises :class:`InvalidMessage` when a field is missing or out of range.
        """
        try:
            header = envelope["header"]
            version = header.get("version", ENVELOPE_VERSION)
            if version != ENVELOPE_VERSION:
                raise InvalidMessage(f"unknown envelope version {version!r}")
            stamp = header.get("timestamp", 0.0)
            if isinstance(stamp, str):  # ISO 8601, as some frameworks write it
                parsed = datetime.fromisoformat(stamp)
                if parsed.tzinfo is None:
                    parsed = parsed.replace(tzinfo=timezone.utc)
                stamp = parsed.timestamp()
            msg = cls(
                id=str(header["msg_id"]),
                type=str(header.get("type", "notify")),
                sender=str(header.get("sender", "")),
                target=str(header.get("target", "")),
                topic=str(header.get("topic", "")),
                payload=envelope.get("payload"),
                correlation_id=str(header.get("correlation_id", "") or ""),
                reply_to=str(header.get("reply_to", "") or ""),
                priority=header.get("priority", 3),
                qos=header.get("qos", 0),
                ttl=header.get("ttl"),
                timestamp=float(stamp),
                trace_id=str(header.get("trace_id", "") or ""),
                traceparent=str(header.get("traceparent", "") or ""),
                status=str(header.get("status", "ok")),
            )
        except InvalidMessage:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidMessage(f"malformed envelope: {exc!r}") from None
        if msg.type not in MESSAGE_TYPES:
            raise InvalidMessage(f"unknown message type {msg.type!r}")
        if msg.status not in STATUSES:
            raise InvalidMessage(f"unknown status {msg.status!r}")
        check_options(msg.priority, msg.qos, msg.ttl)
        return msg
