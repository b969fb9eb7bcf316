"""OpenTelemetry spans for what a node's agents send and handle (internal).

A node made with ``Node(..., tracing=True)`` (or a TracerProvider) uses the
subclasses of Dispatch and Delivery below; any other node never imports
this module, or opentelemetry, and pays nothing per message.

* Sending side: one span per ``send``, ``broadcast`` (PRODUCER) and
  ``request``, ``delegate``, ``handoff`` (CLIENT), from the call until it
  returns (a request: until its reply). Its parent is the caller's current
  span (a handler's own span inside a handler, an HTTP server span in a web
  app), else the message's trace id; its W3C ``traceparent`` travels in the
  message.
* Receiving side: one span per handler run (SERVER for a request, CONSUMER
  otherwise), a child of the sender's span, current while the handler runs,
  so whatever the handler sends (a delegation, a nested request) is its
  child. A request's span ends with its reply, a deferred one included.
* A trace id that is not a W3C trace-id (``trace_id="t-1"``) is kept as it
  is for zmesh and mapped to one for OpenTelemetry by hashing; a span whose
  message has no ``traceparent`` (sent by a node that does not trace, or
  with such a trace id outside any span) hangs under a placeholder parent
  made from the trace id, the same for every such span of that trace, so
  the trace stays one trace in the backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from collections.abc import Mapping
from typing import Any, Callable, Iterator

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .._runtime.context import trace_var
from .._runtime.delivery import Delivery
from .._runtime.config import RuntimeConfig
from .._runtime.dispatch import Dispatch
from .._runtime.handoff import HANDOFF_TOPIC
from .._runtime.inbox import Entry, Inbox
from .._runtime.port import HostedAgent, MeshPort
from .._runtime.watch import Watch
from ..message import Message, new_trace_id

__all__ = ["TracedDispatch", "TracedDelivery", "tracer_for", "otel_trace_id", "traceparent_of"]

SCOPE = "zmesh"
_W3C_TRACE_ID = re.compile("[0-9a-f]{32}")
_propagator = TraceContextTextMapPropagator()
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def tracer_for(tracing: Any) -> trace.Tracer:
    """The tracer of a node made with ``tracing=`` True (the global provider,
    also one set later) or a TracerProvider."""
    if tracing is True:
        return trace.get_tracer(SCOPE)
    return trace.get_tracer(SCOPE, tracer_provider=tracing)


def otel_trace_id(trace_id: str) -> int:
    """The OpenTelemetry trace id of a zmesh trace id: itself if it is a W3C
    trace-id, else the first 16 bytes of its SHA-256 (never 0)."""
    if len(trace_id) == 32 and _W3C_TRACE_ID.fullmatch(trace_id) and trace_id != "0" * 32:
        return int(trace_id, 16)
    return int.from_bytes(hashlib.sha256(trace_id.encode("utf-8", "surrogatepass")).digest()[:16], "big") or 1


def traceparent_of(context: SpanContext) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _placeholder(trace_id: str) -> otel_context.Context:
    """A context whose (remote, never exported) parent span stands for the
    trace ``trace_id`` itself: the same for every span of that trace."""
    span_id = int.from_bytes(hashlib.sha256(b"zmesh-parent:" + trace_id.encode("utf-8", "surrogatepass"))
                             .digest()[:8], "big") or 1
    parent = SpanContext(otel_trace_id(trace_id), span_id, is_remote=True, trace_flags=_SAMPLED)
    return trace.set_span_in_context(NonRecordingSpan(parent), otel_context.Context())


def _parent_of(msg: Message) -> otel_context.Context:
    """The context a received message's handler span starts in."""
    if msg.traceparent:
        found = _propagator.extract({"traceparent": msg.traceparent})
        if trace.get_current_span(found).get_span_context().is_valid:
            return found
    if msg.trace_id:
        return _placeholder(msg.trace_id)
    return otel_context.Context()  # nothing to continue: a new trace


def _attributes(msg: Message, operation: str, node_id: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "messaging.system": "zmesh",
        "messaging.operation.name": operation,
        "messaging.operation.type": "process" if operation == "process" else "send",
        "messaging.destination.name": msg.topic,
        "messaging.message.id": msg.id,
        "zmesh.node": node_id,
        "zmesh.sender": msg.sender,
    }
    if msg.target:
        attributes["zmesh.target"] = msg.target
    if msg.trace_id:
        attributes["zmesh.trace_id"] = msg.trace_id
    if msg.correlation_id:
        attributes["messaging.message.conversation_id"] = msg.correlation_id
    if msg.qos:
        attributes["zmesh.qos"] = msg.qos
    if msg.topic == HANDOFF_TOPIC and isinstance(msg.payload, dict) and isinstance(msg.payload.get("task_id"), str):
        attributes["zmesh.task_id"] = msg.payload["task_id"]
    return attributes


def _failed(span: Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_attribute("error.type", type(exc).__name__)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:512]))


@contextlib.contextmanager
def _ending(span: Span) -> Iterator[None]:
    """End ``span`` when the block does; an exception marks it an error, but
    a cancellation (the caller's own choice) does not."""
    try:
        yield
    except asyncio.CancelledError:
        span.set_attribute("zmesh.outcome", "cancelled")
        raise
    except BaseException as exc:
        _failed(span, exc)
        raise
    finally:
        span.end()


class TracedDispatch(Dispatch):
    """Dispatch with a span around every send, request, delegate, handoff and broadcast."""

    def __init__(
        self,
        tracing: Any,
        config: RuntimeConfig,
        mesh: MeshPort,
        agents: Mapping[str, HostedAgent],
        watch: Watch,
        node_stats: Callable[[], dict[str, Any]],
    ) -> None:
        self.tracer = tracer_for(tracing)
        super().__init__(config, mesh, agents, watch, node_stats)

    def _make_delivery(self) -> Delivery:
        return TracedDelivery(self.config, self._mesh, self._agents, self._watch, self, self.tracer)

    def stamp(self, msg: Message, trace_id: str | None) -> None:
        msg.timestamp = self._clock.time()
        if not trace_id:
            trace_id = trace_var.get()
            if not trace_id:
                current = trace.get_current_span().get_span_context()
                # "": the span started for the message begins a new trace and names it
                trace_id = f"{current.trace_id:032x}" if current.is_valid else ""
        msg.trace_id = trace_id

    def _begin(self, msg: Message, operation: str, kind: SpanKind) -> Span:
        """Start the span that sends ``msg``; put its traceparent on the message."""
        parent = None  # the caller's context, when it has a span
        if not trace.get_current_span().get_span_context().is_valid and msg.trace_id:
            parent = _placeholder(msg.trace_id)
        span = self.tracer.start_span(f"{operation} {msg.topic}", parent, kind,
                                      _attributes(msg, operation, self.config.node_id))
        sent_by = span.get_span_context()
        if not msg.trace_id:  # a new trace: the span's trace id is the message's
            msg.trace_id = f"{sent_by.trace_id:032x}" if sent_by.is_valid else new_trace_id()
            span.set_attribute("zmesh.trace_id", msg.trace_id)
        if sent_by.is_valid:
            msg.traceparent = traceparent_of(sent_by)
        return span

    def send_now(self, msg: Message, timeout: float | None) -> bool:
        return False  # every send has its span: the full path

    async def send(self, msg: Message, timeout: float | None, kind: str = "send", dead_letter: bool = True) -> None:
        with _ending(self._begin(msg, kind, SpanKind.PRODUCER)):
            await super().send(msg, timeout, kind, dead_letter)

    async def request(self, msg: Message, timeout: float, kind: str) -> Message:
        span = self._begin(msg, kind, SpanKind.CLIENT)
        with _ending(span):
            reply = await super().request(msg, timeout, kind)
            if kind == "handoff" and isinstance(reply.payload, dict):
                span.set_attribute("zmesh.handoff.accepted", reply.payload.get("accepted") is True)
            return reply

    def broadcast(self, msg: Message) -> int:
        span = self._begin(msg, "broadcast", SpanKind.PRODUCER)
        try:
            reached = super().broadcast(msg)
        except BaseException as exc:
            _failed(span, exc)
            span.end()
            raise
        span.set_attribute("zmesh.broadcast.reached", reached)
        span.end()
        return reached

    def reply(self, request: Message, status: str, payload: Any) -> None:
        super().reply(request, status, payload)
        delivery = self.delivery
        assert isinstance(delivery, TracedDelivery)
        delivery.end(id(request), status)

    def wake_all(self) -> None:
        super().wake_all()
        delivery = self.delivery
        assert isinstance(delivery, TracedDelivery)
        delivery.end_all()


class TracedDelivery(Delivery):
    """Delivery with a span around every handler run: current while it runs."""

    _one_way_inline = False  # every handler's end ends its span, in _handler_done

    def __init__(
        self, config: RuntimeConfig, mesh: MeshPort, agents: Mapping[str, HostedAgent], watch: Watch,
        dispatch: Dispatch, tracer: trace.Tracer,
    ) -> None:
        super().__init__(config, mesh, agents, watch, dispatch)
        self._tracer = tracer
        #: Open handler spans: by id() of the request (ended by its reply) or of the entry.
        self._spans: dict[int, tuple[object, Span]] = {}

    @staticmethod
    def _key(entry: Entry) -> int:
        return id(entry.msg) if entry.request else id(entry)

    def _start(self, agent: HostedAgent, inbox: Inbox, entry: Entry) -> None:
        msg = entry.msg
        if entry.broadcast and not self.still_wanted(agent.id, entry):
            super()._start(agent, inbox, entry)  # unsubscribed while it waited: never handled, no span
            return
        attributes = _attributes(msg, "process", self._node_id)
        attributes["zmesh.agent"] = agent.id
        parent = _parent_of(msg)
        span = self._tracer.start_span(f"process {msg.topic}", parent,
                                       SpanKind.SERVER if entry.request else SpanKind.CONSUMER, attributes)
        self._spans[self._key(entry)] = (msg if entry.request else entry, span)
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        try:
            super()._start(agent, inbox, entry)  # the handler's Task or thread copies this context
        finally:
            otel_context.detach(token)

    def end(self, key: int, status: str = "ok") -> None:
        found = self._spans.pop(key, None)
        if found is None:
            return
        span = found[1]
        if status != "ok":
            span.set_attribute("zmesh.status", status)
            span.set_status(Status(StatusCode.ERROR, status))
        span.end()

    def end_all(self) -> None:
        """The node closes: handlers still running end without a result."""
        for key in list(self._spans):
            self.end(key, "node_closed")

    def _handler_done(self, result: Any, extra: tuple[HostedAgent, Entry]) -> None:
        super()._handler_done(result, extra)  # a request's reply ends its span
        entry = extra[1]
        if not entry.request:
            self.end(id(entry))

    def _handler_failed(self, exc: BaseException, extra: tuple[HostedAgent, Entry], sent: int = 0) -> None:
        found = self._spans.pop(self._key(extra[1]), None)  # its error reply must not end it as "error"
        super()._handler_failed(exc, extra, sent)
        if found is not None:
            _failed(found[1], exc)
            found[1].end()

    def _undeliverable(self, entry: Entry, reason: str, why: str, target: str) -> None:
        super()._undeliverable(entry, reason, why, target)
        self.end(self._key(entry), reason)
