"""OpenTelemetry spans (``Node(tracing=...)``, the ``otel`` extra), read back
with the SDK's in-memory exporter.

A multi-agent interaction is one trace whose spans form the call tree:
the requester's CLIENT span, the handler's SERVER span under it, whatever
the handler sends under that, on every transport, across nodes. Skipped
only where the SDK is not installed (the ``test`` extra installs it).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Iterator

import pytest

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

import zmesh  # noqa: E402
from zmesh import Message  # noqa: E402
from zmesh._tracing.otel import otel_trace_id  # noqa: E402

from .helpers import Mesh, wait_for  # noqa: E402

pytestmark = pytest.mark.timeout(30)

TRACEPARENT = re.compile(r"00-(?!0{32})([0-9a-f]{32})-(?!0{16})([0-9a-f]{16})-[0-9a-f]{2}")  # W3C Trace Context


class Traced:
    """A TracerProvider whose finished spans land in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    @property
    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    async def wait(self, count: int) -> list[ReadableSpan]:
        await wait_for(lambda: len(self.spans) >= count, what=f"{count} finished spans, have {self.spans}")
        return self.spans

    def close(self) -> None:
        self.provider.shutdown()


@pytest.fixture
def traced() -> Iterator[Traced]:
    t = Traced()
    yield t
    t.close()


def label(span: ReadableSpan) -> str:
    """``name@agent`` for a handler span, ``name@sender`` for a sending span."""
    attributes = span.attributes or {}
    who = attributes.get("zmesh.agent") or attributes.get("zmesh.sender")
    return f"{span.name}@{who}"


def tree(spans: list[ReadableSpan]) -> dict[str, str | None]:
    """Each span's label -> its parent's label (None: a root; "remote": a parent not exported)."""
    by_id = {span.context.span_id: span for span in spans}
    out: dict[str, str | None] = {}
    for span in spans:
        key = label(span)
        assert key not in out, f"two spans {key}"
        if span.parent is None:
            out[key] = None
        else:
            parent = by_id.get(span.parent.span_id)
            out[key] = label(parent) if parent is not None else "remote"
    return out


def one_trace(spans: list[ReadableSpan]) -> int:
    [trace_id] = {span.context.trace_id for span in spans}
    return trace_id


def kinds(spans: list[ReadableSpan]) -> dict[str, SpanKind]:
    return {label(span): span.kind for span in spans}


async def two_nodes(m: Mesh, provider: Any) -> tuple[zmesh.Node, zmesh.Node]:
    n1 = await m.node(tracing=provider)
    n2 = await m.node(tracing=provider)
    return n1, n2


# -- one trace across agents and nodes ------------------------------------


async def test_request_and_delegate_across_three_agents_on_two_nodes_are_one_trace(
    transport: str, traced: Traced
) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await two_nodes(m, traced.provider)
        a, b, c = n1.agent("a"), n2.agent("b"), n1.agent("c")

        @b.on("plan.make")
        async def plan(msg: Message) -> Any:
            step = await b.request("c", "plan.check", msg.payload, timeout=10)
            return (await b.delegate("c", msg, timeout=10)).payload + step.payload

        @c.on("plan.make")
        async def make(msg: Message) -> int:
            return 10

        @c.on("plan.check")
        def check(msg: Message) -> int:  # a plain handler: runs in the pool
            assert trace.get_current_span().get_span_context().is_valid
            return 1

        await m.converged()
        reply = await a.request("b", "plan.make", {"goal": "x"}, timeout=10)
        assert reply.payload == 11

        spans = await traced.wait(6)
        assert tree(spans) == {
            "request plan.make@a": None,
            "process plan.make@b": "request plan.make@a",
            "request plan.check@b": "process plan.make@b",
            "process plan.check@c": "request plan.check@b",
            "delegate plan.make@b": "process plan.make@b",
            "process plan.make@c": "delegate plan.make@b",
        }
        assert kinds(spans) == {
            "request plan.make@a": SpanKind.CLIENT,
            "process plan.make@b": SpanKind.SERVER,
            "request plan.check@b": SpanKind.CLIENT,
            "process plan.check@c": SpanKind.SERVER,
            "delegate plan.make@b": SpanKind.CLIENT,
            "process plan.make@c": SpanKind.SERVER,
        }
        assert f"{one_trace(spans):032x}" == reply.trace_id
        by_label = {label(s): s for s in spans}
        assert by_label["process plan.make@b"].attributes["zmesh.node"] == n2.id
        assert by_label["process plan.make@c"].attributes["zmesh.node"] == n1.id
        attributes = by_label["request plan.make@a"].attributes
        assert attributes["messaging.system"] == "zmesh"
        assert attributes["messaging.destination.name"] == "plan.make"
        assert attributes["messaging.operation.name"] == "request"
        assert attributes["zmesh.target"] == "b"
        assert attributes["zmesh.trace_id"] == reply.trace_id
        assert all(s.status.status_code is StatusCode.UNSET for s in spans)


async def test_send_and_broadcast_are_one_trace(transport: str, traced: Traced) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await two_nodes(m, traced.provider)
        a, b, c, d = n1.agent("a"), n2.agent("b"), n1.agent("c"), n2.agent("d")
        got: list[Message] = []

        @b.on("job.start")
        async def start(msg: Message) -> None:
            got.append(msg)
            assert await b.broadcast("job.news", "started") == 2

        async def news(msg: Message) -> None:
            got.append(msg)

        await c.subscribe("job.news", news)
        await d.subscribe("job.*", news)
        await m.converged()
        sent = await a.send("b", "job.start", "go")

        spans = await traced.wait(5)
        assert tree(spans) == {
            "send job.start@a": None,
            "process job.start@b": "send job.start@a",
            "broadcast job.news@b": "process job.start@b",
            "process job.news@c": "broadcast job.news@b",
            "process job.news@d": "broadcast job.news@b",
        }
        assert set(kinds(spans).values()) == {SpanKind.PRODUCER, SpanKind.CONSUMER}
        assert kinds(spans)["broadcast job.news@b"] is SpanKind.PRODUCER
        assert kinds(spans)["process job.news@d"] is SpanKind.CONSUMER
        assert {f"{one_trace(spans):032x}"} == {sent.trace_id} | {m.trace_id for m in got}
        assert len(got) == 3
        by_label = {label(s): s for s in spans}
        assert by_label["broadcast job.news@b"].attributes["zmesh.broadcast.reached"] == 2


async def test_handoff_is_one_trace(transport: str, traced: Traced) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await two_nodes(m, traced.provider)
        a, b = n1.agent("a"), n2.agent("b")

        @b.on_handoff
        async def take(offer: zmesh.Handoff) -> bool:
            return True

        await m.converged()
        result = await a.handoff("b", "task-7", {"step": 2}, timeout=10)
        assert result.accepted

        spans = await traced.wait(2)
        assert tree(spans) == {
            "handoff zmesh.handoff@a": None,
            "process zmesh.handoff@b": "handoff zmesh.handoff@a",
        }
        by_label = {label(s): s for s in spans}
        assert by_label["handoff zmesh.handoff@a"].kind is SpanKind.CLIENT
        assert by_label["handoff zmesh.handoff@a"].attributes["zmesh.task_id"] == "task-7"
        assert by_label["handoff zmesh.handoff@a"].attributes["zmesh.handoff.accepted"] is True
        assert by_label["process zmesh.handoff@b"].kind is SpanKind.SERVER
        assert f"{one_trace(spans):032x}" == result.reply.trace_id  # type: ignore[union-attr]


# -- what travels ------------------------------------------------------------


async def test_the_wire_carries_a_w3c_traceparent_of_the_sending_span(transport: str, traced: Traced) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await two_nodes(m, traced.provider)
        a, b = n1.agent("a"), n2.agent("b")
        got: list[Message] = []
        b.add_handler("wire.check", got.append, inline=True)
        await m.converged()
        sent = await a.send("b", "wire.check")
        await wait_for(lambda: got)

        match = TRACEPARENT.fullmatch(got[0].traceparent)
        assert match, got[0].traceparent
        assert got[0].traceparent == sent.traceparent
        [send_span] = [s for s in await traced.wait(2) if s.name == "send wire.check"]
        assert match.group(1) == got[0].trace_id == f"{send_span.context.trace_id:032x}"
        assert match.group(2) == f"{send_span.context.span_id:016x}"
        assert got[0].to_envelope()["header"]["traceparent"] == got[0].traceparent


async def test_a_span_current_in_the_caller_is_continued(transport: str, traced: Traced) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await two_nodes(m, traced.provider)
        a, b = n1.agent("a"), n2.agent("b")
        b.add_handler("web.ask", lambda msg: "answer", inline=True)
        await m.converged()
        web = traced.provider.get_tracer("web-app")
        with web.start_as_current_span("GET /ask", kind=SpanKind.SERVER) as outer:
            reply = await a.request("b", "web.ask", timeout=10)
        outer_trace = f"{outer.get_span_context().trace_id:032x}"
        assert reply.trace_id == outer_trace  # the zmesh trace id is the caller's trace

        spans = await traced.wait(3)
        assert tree(spans) == {
            "GET /ask@None": None,
            "request web.ask@a": "GET /ask@None",
            "process web.ask@b": "request web.ask@a",
        }
        assert f"{one_trace(spans):032x}" == outer_trace


async def test_a_remote_parent_from_a_traceparent_an_http_request_brought_is_continued(
    transport: str, traced: Traced
) -> None:
    """The upstream context of, say, an HTTP request's ``traceparent`` header,
    extracted by the application and made current, is the parent."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    upstream = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with Mesh(transport) as m:
        n1, n2 = await two_nodes(m, traced.provider)
        a, b = n1.agent("a"), n2.agent("b")
        b.add_handler("web.ask", lambda msg: "answer", inline=True)
        await m.converged()
        from opentelemetry import context

        token = context.attach(TraceContextTextMapPropagator().extract({"traceparent": upstream}))
        try:
            reply = await a.request("b", "web.ask", timeout=10)
        finally:
            context.detach(token)
        assert reply.trace_id == "0af7651916cd43dd8448eb211c80319c"
        spans = await traced.wait(2)
        [request] = [s for s in spans if s.name == "request web.ask"]
        assert request.parent is not None and request.parent.span_id == 0xB7AD6B7169203331
        assert one_trace(spans) == 0x0AF7651916CD43DD8448EB211C80319C


async def test_a_trace_id_given_by_hand_is_kept_and_mapped_for_opentelemetry(
    transport: str, traced: Traced
) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await two_nodes(m, traced.provider)
        a, b = n1.agent("a"), n2.agent("b")
        seen: list[str] = []

        @b.on("hand.made")
        async def made(msg: Message) -> str:
            seen.append(zmesh.current_trace_id())
            return "ok"

        await m.converged()
        reply = await a.request("b", "hand.made", timeout=10, trace_id="order-42")
        with zmesh.trace_context("order-42"):
            await a.send("b", "hand.made")
        assert reply.trace_id == "order-42"
        await wait_for(lambda: len(seen) == 2)
        assert seen == ["order-42", "order-42"]

        spans = await traced.wait(4)
        assert one_trace(spans) == otel_trace_id("order-42")
        assert {s.attributes["zmesh.trace_id"] for s in spans} == {"order-42"}
        # Both sending spans hang under one placeholder parent for the trace: one tree.
        senders = [s for s in spans if s.name in ("request hand.made", "send hand.made")]
        assert len(senders) == 2
        assert all(s.parent is not None and s.parent.is_remote for s in senders)
        assert len({s.parent.span_id for s in senders if s.parent is not None}) == 1
        handlers = [s for s in spans if s.name == "process hand.made"]
        assert sorted(s.parent.span_id for s in handlers if s.parent is not None) == sorted(
            s.context.span_id for s in senders
        )


async def test_a_message_from_a_node_that_does_not_trace_joins_its_trace(transport: str, traced: Traced) -> None:
    async with Mesh(transport) as m:
        plain = await m.node()  # no tracing: its messages carry no traceparent
        tracing = await m.node(tracing=traced.provider)
        a, b = plain.agent("a"), tracing.agent("b")
        got: list[Message] = []
        b.add_handler("mixed.hop", got.append, inline=True)
        await m.converged()
        sent = await a.send("b", "mixed.hop")
        await wait_for(lambda: got)
        assert sent.traceparent == got[0].traceparent == ""
        [span] = await traced.wait(1)
        assert f"{span.context.trace_id:032x}" == sent.trace_id
        assert span.parent is not None and span.parent.is_remote  # the placeholder: never exported


# -- errors ------------------------------------------------------------------


async def test_errors_mark_spans_with_status_error(transport: str, traced: Traced) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await two_nodes(m, traced.provider)
        a, b = n1.agent("a"), n2.agent("b")

        @b.on("bad.job")
        async def bad(msg: Message) -> None:
            raise ValueError("no such plan")

        @b.on("bad.event")
        def bad_event(msg: Message) -> None:
            raise KeyError("lost")

        await m.converged()
        with pytest.raises(zmesh.HandlerError):
            await a.request("b", "bad.job", timeout=10)
        with pytest.raises(zmesh.AgentNotRegistered):
            await a.send("ghost", "bad.target")
        await a.send("b", "bad.event")

        spans = {label(s): s for s in await traced.wait(5)}
        for name in ("request bad.job@a", "process bad.job@b", "send bad.target@a", "process bad.event@b"):
            assert spans[name].status.status_code is StatusCode.ERROR, name
        assert spans["send bad.event@a"].status.status_code is StatusCode.UNSET
        assert spans["process bad.job@b"].attributes["error.type"] == "ValueError"
        assert "no such plan" in (spans["process bad.job@b"].status.description or "")
        assert [e.name for e in spans["process bad.job@b"].events] == ["exception"]
        assert spans["request bad.job@a"].attributes["error.type"] == "HandlerError"
        assert spans["send bad.target@a"].attributes["error.type"] == "AgentNotRegistered"
        assert spans["process bad.event@b"].attributes["error.type"] == "KeyError"


async def test_a_timeout_is_an_error_a_cancellation_is_not_and_close_ends_open_handler_spans(
    transport: str, traced: Traced
) -> None:
    clock = zmesh.FakeClock()
    async with Mesh(transport, clock=clock) as m:
        n1, n2 = await two_nodes(m, traced.provider)
        a, b = n1.agent("a"), n2.agent("b")
        parked: list[Message] = []

        @b.on("slow.job")
        def park(msg: Message) -> object:
            parked.append(msg)
            return zmesh.DEFERRED

        await m.converged()
        timing_out = asyncio.ensure_future(a.request("b", "slow.job", timeout=5))
        await wait_for(lambda: parked)
        clock.advance(6)
        with pytest.raises(zmesh.Timeout):
            await timing_out
        cancelled = asyncio.ensure_future(a.request("b", "slow.job", timeout=5))
        await wait_for(lambda: len(parked) == 2)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        requests = [s for s in traced.spans if s.name == "request slow.job"]
        assert [s.status.status_code for s in requests] == [StatusCode.ERROR, StatusCode.UNSET]
        assert requests[0].attributes["error.type"] == "Timeout"
        assert requests[1].attributes["zmesh.outcome"] == "cancelled"
        assert [s for s in traced.spans if s.name == "process slow.job"] == []  # never answered: still open
    handlers = [s for s in traced.spans if s.name == "process slow.job"]
    assert [(s.status.status_code, s.attributes["zmesh.status"]) for s in handlers] == [
        (StatusCode.ERROR, "node_closed")
    ] * 2


async def test_a_deferred_reply_ends_its_handler_span(transport: str, traced: Traced) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await two_nodes(m, traced.provider)
        a, b = n1.agent("a"), n2.agent("b")
        parked: list[Message] = []

        @b.on("slow.job")
        def park(msg: Message) -> object:
            parked.append(msg)
            return zmesh.DEFERRED

        await m.converged()
        asking = asyncio.ensure_future(a.request("b", "slow.job", timeout=10))
        await wait_for(lambda: parked)
        await asyncio.sleep(0)
        assert [s.name for s in traced.spans] == []  # the handler returned, its request is still open
        await b.reply(parked[0], "late")
        assert (await asking).payload == "late"
        assert tree(await traced.wait(2)) == {
            "request slow.job@a": None,
            "process slow.job@b": "request slow.job@a",
        }


async def test_tracing_true_uses_the_global_provider_and_bad_values_are_refused(traced: Traced) -> None:
    with pytest.raises(TypeError, match="TracerProvider"):
        zmesh.Node("lab", transport="inproc", tracing="yes")
    async with Mesh("inproc") as m:
        node = await m.node(tracing=True)  # the API's default provider until one is set: spans record nothing
        a, b = node.agent("a"), node.agent("b")
        got: list[Message] = []
        b.add_handler("local.hop", got.append, inline=True)
        sent = await a.send("b", "local.hop")
        await wait_for(lambda: got)
        assert re.fullmatch("[0-9a-f]{32}", sent.trace_id) and got[0].trace_id == sent.trace_id
        assert traced.spans == []


def test_the_blocking_facade_continues_the_callers_span(traced: Traced) -> None:
    import zmesh.sync as zs

    with zs.Node("sync-otel", transport="inproc", tracing=traced.provider) as node:
        a, b = node.agent("a"), node.agent("b")
        b.add_handler("sync.ask", lambda msg: "answer")
        with traced.provider.get_tracer("script").start_as_current_span("batch job") as outer:
            reply = a.request("b", "sync.ask", timeout=10)
    assert reply.trace_id == f"{outer.get_span_context().trace_id:032x}"
    assert tree(traced.spans) == {
        "batch job@None": None,
        "request sync.ask@a": "batch job@None",
        "process sync.ask@b": "request sync.ask@a",
    }
