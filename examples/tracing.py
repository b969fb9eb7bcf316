"""One OpenTelemetry trace across three agents on two nodes (needs the otel extra).

    pip install 'zmesh-agents[otel]'
    python examples/tracing.py

The console exporter prints each span as it ends, one line a span here
(children end before their parents). For Jaeger or any OTLP backend, give
the provider a BatchSpanProcessor(OTLPSpanExporter()) from
opentelemetry-exporter-otlp instead: the spans are the same.
"""

import asyncio

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

import zmesh


def one_line(span: ReadableSpan) -> str:
    parent = f"{span.parent.span_id:016x}" if span.parent else "(root)".ljust(16)
    context = span.context
    assert context is not None
    attributes = span.attributes or {}
    agent = attributes.get("zmesh.agent") or attributes.get("zmesh.sender")  # who handled it, or who sent it
    return f"span {context.span_id:016x} parent {parent} {span.kind.name:<8} {span.name:<20} {agent}\n"


async def main() -> None:
    async with zmesh.Node("trace-demo", transport="inproc", tracing=True) as n1, \
            zmesh.Node("trace-demo", transport="inproc", tracing=True) as n2:
        planner, writer, checker = n1.agent("planner"), n2.agent("writer"), n1.agent("checker")

        @writer.on("draft.write")
        async def write(msg: zmesh.Message) -> str:
            review = await writer.delegate("checker", msg, timeout=10)  # a child of this handler's span
            return f"a draft about {msg.payload} ({review.payload})"

        @checker.on("draft.write")
        async def check(msg: zmesh.Message) -> str:
            return "checked"

        await n1.wait_for_agents("writer")
        reply = await planner.request("writer", "draft.write", "otters", timeout=10)
        print(reply.payload)
        print("trace id", reply.trace_id, "(the W3C trace-id every span above shares)")


if __name__ == "__main__":
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(formatter=one_line)))
    trace.set_tracer_provider(provider)  # tracing=True uses the global provider
    asyncio.run(main())
    provider.shutdown()
