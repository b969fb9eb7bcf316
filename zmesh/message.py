"""The message model: :class:`Message`, its JSON envelope, and id generation.

This module does no I/O. The wire encoding lives in :mod:`zmesh._wire.codec`.
"""

from __future__ import annotations

import calendar
import itertools
import math
import os
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
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
    "iso_timestamp",
    "parse_timestamp",
    "CANCELLED_REQUESTS",
    "GatherReply",
]

#: Version of the JSON envelope written by :meth:`Message.to_envelope`, as
#: the seed design writes it; ``1``, ``1.0`` and ``"1"`` are read as the same.
ENVELOPE_VERSION: Final = "1.0"
_VERSIONS: Final = frozenset({1, "1", "1.0"})  # 1.0 == 1 hashes alike

#: Requests, as (target agent, correlation id), whose requester cancelled them
#: (or gave up: it timed out, its node left) while their handler still runs;
#: the runtime keeps it, :attr:`Message.cancelled` reads it.
CANCELLED_REQUESTS: Final[set[tuple[str, str]]] = set()

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
    ``sender_type`` and ``target_type`` are the envelope's roles (the seed
    design's ``"orchestrator"``, ``"worker"``): ``""`` is the default role
    (``"agent"``; ``"topic"`` for a broadcast's target), and any other
    travels with the message.
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
    sender_type: str = ""
    target_type: str = ""

    @property
    def is_reply(self) -> bool:
        return self.type == "result" and bool(self.correlation_id)

    @property
    def expects_reply(self) -> bool:
        return self.type != "result" and bool(self.correlation_id)

    @property
    def cancelled(self) -> bool:
        """True once the requester of this request cancelled it or gave up on
        it (its request timed out, its node left) while the handler runs. A
        plain handler (in the worker pool) polls it to stop early; an
        ``async def`` handler's Task is cancelled outright, and sees
        ``asyncio.CancelledError``."""
        return bool(CANCELLED_REQUESTS) and (self.target, self.correlation_id) in CANCELLED_REQUESTS

    def expired(self, now: float) -> bool:
        """True when the message carries a ttl and ``now`` is past it."""
        return self.ttl is not None and now > self.timestamp + self.ttl

    def to_envelope(self) -> dict[str, Any]:
        """Return the JSON-ready envelope of the seed design (see the guide's
        *The envelope*): version ``"1.0"``, an ISO 8601 UTC ``timestamp``
        that :meth:`from_envelope` reads back exactly, the roles; its header
        has a ``traceparent`` only when the message has one."""
        header: dict[str, Any] = {
            "msg_id": self.id,
            "type": self.type,
            "version": ENVELOPE_VERSION,
            "sender": self.sender,
            "sender_type": self.sender_type or "agent",
            "target": self.target,
            "target_type": self.target_type or ("agent" if self.target else "topic"),
            "topic": self.topic,
            "priority": self.priority,
            "qos": self.qos,
            "timestamp": iso_timestamp(self.timestamp),
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
        """Read an envelope: one :meth:`to_envelope` wrote, the seed design's
        as it writes them, or one written by hand (only ``msg_id`` is needed).

        ``timestamp`` may be seconds since the epoch or ISO 8601 (``Z`` or an
        offset, on every supported Python). Raises :class:`InvalidMessage`
        when a field is missing or out of range.
        """
        try:
            header = envelope["header"]
            version = header.get("version", ENVELOPE_VERSION)
            if version.__class__ is bool or version not in _VERSIONS:
                raise InvalidMessage(f"unknown envelope version {version!r} (this zmesh reads {ENVELOPE_VERSION!r})")
            stamp = header.get("timestamp", 0.0)
            target = str(header.get("target", ""))
            msg = cls(
                id=str(header["msg_id"]),
                type=str(header.get("type", "notify")),
                sender=str(header.get("sender", "")),
                target=target,
                topic=str(header.get("topic", "")),
                payload=envelope.get("payload"),
                correlation_id=str(header.get("correlation_id", "") or ""),
                reply_to=str(header.get("reply_to", "") or ""),
                priority=header.get("priority", 3),
                qos=header.get("qos", 0),
                ttl=header.get("ttl"),
                timestamp=parse_timestamp(stamp) if isinstance(stamp, str) else float(stamp),
                trace_id=str(header.get("trace_id", "") or ""),
                traceparent=str(header.get("traceparent", "") or ""),
                status=str(header.get("status", "ok")),
                sender_type=_role(header.get("sender_type"), "agent"),
                target_type=_role(header.get("target_type"), "agent" if target else "topic"),
            )
        except InvalidMessage:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise InvalidMessage(f"malformed envelope: {exc!r}") from None
        if msg.type not in MESSAGE_TYPES:
            raise InvalidMessage(f"unknown message type {msg.type!r}")
        if msg.status not in STATUSES:
            raise InvalidMessage(f"unknown status {msg.status!r}")
        check_options(msg.priority, msg.qos, msg.ttl)
        return msg


#: The most a role may be: it travels with every message that has one.
MAX_ROLE = 64


def _role(value: Any, default: str) -> str:
    """An envelope role as a Message keeps it: "" for the default one."""
    if value is None or value == default or value == "":
        return ""
    if value.__class__ is not str or len(value) > MAX_ROLE or not value.isprintable():
        raise InvalidMessage(f"a role (sender_type, target_type) must be a printable string of at most "
                             f"{MAX_ROLE} characters, got {value!r}")
    return str(value)


_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:\.(\d+))?(Z|[+-]\d\d:?\d\d)?", re.ASCII)


def iso_timestamp(seconds: float) -> str:
    """``seconds`` since the epoch as ISO 8601 UTC with ``Z``, with every
    digit of the float (``"2026-05-12T10:30:00Z"``, ``"...:00.1234567Z"``),
    so :func:`parse_timestamp` gives back exactly the same float."""
    whole = math.floor(seconds)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    if seconds == whole:
        return text + "Z"
    digits = repr(float(seconds))
    if whole >= 0 and "e" not in digits:
        return f"{text}.{digits.partition('.')[2]}Z"
    fraction = f"{min(seconds - whole, 0.999999999):.9f}"[1:]  # before 1970, or an exponent: nanoseconds
    return f"{text}{fraction}Z"


def parse_timestamp(text: str) -> float:
    """An ISO 8601 date and time as seconds since the epoch (no offset: UTC);
    ValueError when it is not one."""
    found = _ISO.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"not an ISO 8601 timestamp: {text[:64]!r}")
    year, month, day, hour, minute, second, fraction, zone = found.groups()
    datetime(int(year), int(month), int(day), int(hour), int(minute), int(second))  # ValueError when out of range
    whole = calendar.timegm((int(year), int(month), int(day), int(hour), int(minute), int(second), 0, 0, 0))
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        whole -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    if not fraction:
        return float(whole)
    if whole >= 0:
        return float(f"{whole}.{fraction}")
    return whole + float(f"0.{fraction}")


@dataclass(frozen=True, slots=True)
class GatherReply:
    """One provider's answer to :meth:`zmesh.Agent.gather`: its ``reply``, or
    the ``error`` its request ended with (Timeout for one that did not answer
    in time, HandlerError, PeerLost, ...)."""

    sender: str
    reply: Message | None = None
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def payload(self) -> Any:
        """The reply's payload; the error raised for a provider that failed."""
        if self.error is not None:
            raise self.error
        assert self.reply is not None
        return self.reply.payload
