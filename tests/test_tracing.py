"""Trace ids follow W3C Trace Context, with or without OpenTelemetry.

* A new interaction's trace id is a W3C trace-id (32 lowercase hex, random);
  a trace id given by hand is kept as it is.
* On the wire a message has its 15 fields, plus a 16th, the W3C
  ``traceparent``, only when its node traced it (``Node(tracing=...)``).
* Without the ``otel`` extra everything works, trace ids are still W3C,
  zmesh never imports opentelemetry, and ``Node(tracing=True)`` says what
  to install.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterator

import msgpack
import pytest

import zmesh
from zmesh import Message
from zmesh._wire import codec
from zmesh._wire.codec import FrameError
from zmesh.message import new_trace_id

from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)

W3C_TRACE_ID = re.compile("(?!0{32})[0-9a-f]{32}")
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
ROOT = Path(__file__).resolve().parent.parent


def test_new_trace_ids_are_w3c_unique_and_random_in_their_low_half() -> None:
    ids = [new_trace_id() for _ in range(4000)]
    assert all(W3C_TRACE_ID.fullmatch(i) for i in ids)
    assert len(set(ids)) == len(ids)
    # Samplers keep a share of traces by the low 64 bits: they must be spread.
    low_half = sum(int(i[16:], 16) < 1 << 63 for i in ids) / len(ids)
    assert 0.4 < low_half < 0.6


def test_trace_context_without_an_id_makes_a_w3c_one() -> None:
    with zmesh.trace_context() as trace_id:
        assert W3C_TRACE_ID.fullmatch(trace_id) and zmesh.current_trace_id() == trace_id
    with zmesh.trace_context("t-1") as given:
        assert given == "t-1"


# -- the wire ------------------------------------------------------------------


def test_an_untraced_message_keeps_its_15_fields_on_the_wire() -> None:
    item = msgpack.unpackb(codec.encode_message(Message(sender="a", target="b", topic="x"), 1 << 20))
    assert len(item) == 15


def test_a_traceparent_travels_as_a_16th_field_and_round_trips() -> None:
    msg = Message(sender="a", target="b", topic="x", payload={"k": 1}, trace_id="0af7651916cd43dd8448eb211c80319c",
                  traceparent=TRACEPARENT)
    encoded = codec.encode_message(msg, 1 << 20)
    item = msgpack.unpackb(encoded)
    assert len(item) == 16 and item[15] == TRACEPARENT and item[14] == {"k": 1}
    [decoded] = codec.decode_frame(codec.join_frame([encoded]), 1 << 20)
    assert codec.message_from_item(decoded) == msg


def test_the_size_limit_counts_the_traceparent() -> None:
    plain = Message(payload="x")
    limit = len(codec.encode_message(plain, 1 << 20))
    plain.traceparent = TRACEPARENT
    with pytest.raises(zmesh.InvalidMessage, match="over the limit"):
        codec.encode_message(plain, limit)


@pytest.mark.parametrize("extra", [[7], [None], [b"00-"], ["a", "b"]])
def test_a_bad_16th_field_or_a_17th_is_malformed(extra: list[Any]) -> None:
    item = msgpack.unpackb(codec.encode_message(Message(sender="a", target="b", topic="x"), 1 << 20))
    with pytest.raises(FrameError) as info:
        codec.message_from_item(item + extra)
    assert info.value.reason == "malformed"


def test_a_traced_message_whose_payload_cannot_decode_still_names_its_header() -> None:
    """The engine answers such a request with an error: it needs the header."""
    good = codec.encode_message(Message(type="query", sender="a", target="b", topic="x", payload=None,
                                        correlation_id="c-1", reply_to="a", traceparent=TRACEPARENT), 1 << 20)
    fields = msgpack.unpackb(good)
    # The payload: a map whose key is an array, which decodes to an unhashable list.
    raw = b"\xdc\x00\x10" + b"".join(msgpack.packb(f) for f in fields[:14]) + b"\x81\x92\x01\x02\x01" + \
        msgpack.packb(TRACEPARENT)
    [bad] = codec.decode_frame(codec.join_frame([raw]), 1 << 20)
    assert bad[0] == codec.BAD and bad[3] is not None
    header = codec.message_from_item(bad[3])
    assert (header.correlation_id, header.payload, header.traceparent) == ("c-1", None, TRACEPARENT)


def test_the_envelope_has_a_traceparent_only_when_the_message_has_one() -> None:
    assert "traceparent" not in Message().to_envelope()["header"]
    msg = Message(sender="a", topic="x", trace_id="t-1", traceparent=TRACEPARENT)
    envelope = msg.to_envelope()
    assert envelope["header"]["traceparent"] == TRACEPARENT
    assert Message.from_envelope(envelope) == msg


# -- without the otel extra ----------------------------------------------------


@pytest.fixture
def no_opentelemetry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As if opentelemetry were not installed: every import of it fails."""
    for name in [n for n in sys.modules if n == "opentelemetry" or n.startswith("opentelemetry.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.delitem(sys.modules, "zmesh._tracing.otel", raising=False)
    with pytest.raises(ImportError):
        import opentelemetry  # noqa: F401
    yield


async def test_without_opentelemetry_tracing_says_what_to_install(no_opentelemetry: None) -> None:
    with pytest.raises(ImportError, match=re.escape("pip install 'zmesh-agents[otel]'")):
        zmesh.Node("lab", transport="inproc", tracing=True)


async def test_without_opentelemetry_every_kind_of_message_carries_a_w3c_trace_id(
    transport: str, no_opentelemetry: None
) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b, c = n1.agent("a"), n2.agent("b"), n1.agent("c")
        seen: list[Message] = []

        @b.on("chain.start")
        async def start(msg: Message) -> Any:
            seen.append(msg)
            await b.send("c", "chain.note")
            await b.broadcast("chain.news")
            await b.request("c", "chain.step", timeout=10)
            return (await b.delegate("c", msg, timeout=10)).payload

        async def record(msg: Message) -> str:
            seen.append(msg)
            return "done"

        for topic in ("chain.start", "chain.note", "chain.step"):
            c.add_handler(topic, record)
        await c.subscribe("chain.news", record)

        @c.on_handoff
        def take(offer: zmesh.Handoff) -> bool:
            seen.append(offer.message)
            return True

        await m.converged()
        reply = await a.request("b", "chain.start", timeout=10)
        assert reply.payload == "done"
        await wait_for(lambda: len(seen) == 5, what="every hop")
        assert W3C_TRACE_ID.fullmatch(reply.trace_id)
        assert {msg.trace_id for msg in seen} == {reply.trace_id}  # one trace through every hop
        assert {msg.traceparent for msg in seen} == {""}  # nobody traced: nothing more on the wire

        handed = await a.handoff("c", "task-1", timeout=10)
        assert handed.accepted and handed.reply is not None
        assert W3C_TRACE_ID.fullmatch(handed.reply.trace_id) and handed.reply.trace_id != reply.trace_id
        assert W3C_TRACE_ID.fullmatch(seen[-1].trace_id)

        sent = await a.send("c", "chain.note", trace_id="order-42")  # by hand: kept as it is
        assert sent.trace_id == "order-42"
        await wait_for(lambda: seen[-1].trace_id == "order-42")


def test_zmesh_never_imports_opentelemetry_when_not_tracing() -> None:
    script = textwrap.dedent(
        """
        import asyncio, sys
        import zmesh

        async def main():
            async with zmesh.Node("solo", transport="inproc") as node:
                a, b = node.agent("a"), node.agent("b")
                b.add_handler("x", lambda msg: "ok", inline=True)
                reply = await a.request("b", "x", timeout=5)
                assert len(reply.trace_id) == 32, reply.trace_id

        asyncio.run(main())
        print(sorted(n for n in sys.modules if n.startswith("opentelemetry")))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
