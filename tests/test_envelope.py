"""agent.send_envelope: a system that speaks the seed design's envelope joins
the mesh, its fields kept end to end, on every transport."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

import zmesh
from zmesh import Message
from zmesh._wire import codec
from zmesh._wire.frames import decode_item

from .helpers import Mesh, wait_for
from .test_message import SEED_ENVELOPE

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(params=["inproc", "zmq", "memory"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def seed_envelope(**header: Any) -> dict[str, Any]:
    """The seed's example, stamped now (its own timestamp is long past its ttl)."""
    envelope: dict[str, Any] = json.loads(SEED_ENVELOPE)
    envelope["header"]["timestamp"] = time.time()
    envelope["header"].update(header)
    return envelope


async def test_a_request_envelope_keeps_its_fields_and_returns_the_reply(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        main, search = n1.agent("agent_main"), n2.agent("agent_sub_search")
        seen: list[Message] = []

        def search_papers(msg: Message) -> dict[str, Any]:
            seen.append(msg)
            return {"papers": ["attention is all you need"][: msg.payload["max_results"]]}

        search.add_handler("research.paper.search", search_papers)
        await m.converged()
        reply = await main.send_envelope(seed_envelope(), timeout=10)
        assert reply.payload == {"papers": ["attention is all you need"]}
        assert reply.correlation_id == "task_0817"
        (got,) = seen
        assert (got.id, got.type, got.correlation_id) == ("msg_20260512_001", "task", "task_0817")
        assert (got.sender_type, got.target_type) == ("orchestrator", "worker")
        assert (got.priority, got.qos, got.ttl) == (3, 1, 300)
        header = got.to_envelope()["header"]
        assert (header["sender_type"], header["target_type"], header["version"]) == ("orchestrator", "worker", "1.0")


async def test_a_one_way_envelope_and_a_broadcast_envelope(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        main, worker = n1.agent("agent_main"), n2.agent("worker")
        direct: list[Message] = []
        heard: list[Message] = []
        worker.add_handler("jobs.new", direct.append)
        await worker.subscribe("news.>", heard.append)
        await m.converged()
        sent = await main.send_envelope({"header": {"type": "notify", "target": "worker", "topic": "jobs.new",
                                                    "sender_type": "orchestrator"}, "payload": [1]})
        assert sent.sender == "agent_main" and sent.id  # an id of its own when the header has none
        await main.send_envelope({"header": {"topic": "news.today", "target_type": "topic",
                                             "trace_id": "t-envelope"}, "payload": "hi"})
        await wait_for(lambda: len(direct) == 1 and len(heard) == 1)
        assert (direct[0].payload, direct[0].sender_type, direct[0].id) == ([1], "orchestrator", sent.id)
        assert (heard[0].payload, heard[0].trace_id, heard[0].target) == ("hi", "t-envelope", "")


@pytest.mark.parametrize(
    ("header", "why"),
    [
        ({"sender": "someone_else"}, "cannot send an envelope from"),
        ({"type": "result"}, "answers a request"),
        ({"reply_to": "another/result"}, "comes back to it"),
        ({"correlation_id": "", "reply_to": "agent_main"}, "belongs to a request"),
        ({"target": "has space"}, "agent id"),
        ({"topic": "bad topic"}, "topic"),
        ({"version": "2.0"}, "version"),
        ({"qos": 7}, "qos"),
    ],
)
async def test_an_envelope_the_agent_cannot_send_is_refused_and_nothing_is_sent(
        header: dict[str, Any], why: str) -> None:
    async with Mesh("inproc") as m:
        n1, n2 = await m.node(), await m.node()
        main, search = n1.agent("agent_main"), n2.agent("agent_sub_search")
        got: list[Message] = []
        search.add_handler("research.paper.search", got.append)
        await m.converged()
        with pytest.raises(zmesh.InvalidMessage, match=why):
            await main.send_envelope(seed_envelope(**header), timeout=1)
        with pytest.raises(zmesh.InvalidMessage, match="envelope is a dict"):
            await main.send_envelope([1, 2])  # type: ignore[arg-type]
        await main.send("agent_sub_search", "research.paper.search", "after")
        await wait_for(lambda: len(got) == 1)
        assert [g.payload for g in got] == ["after"]
        assert n2.stats()["messages_received"] == 1


def test_roles_travel_as_a_17th_field_and_malformed_ones_are_refused() -> None:
    plain = Message(sender="a", target="b", topic="t", trace_id="x")
    assert len(decode_item(codec.encode_message(plain, 1 << 20))) == 15  # no role, no traceparent: nothing more
    cast = Message(sender="a", target="b", topic="t", trace_id="x", sender_type="orchestrator")
    item = decode_item(codec.encode_message(cast, 1 << 20))
    assert len(item) == 17 and item[15:] == ["", ["orchestrator", ""]]
    assert codec.message_from_item(item) == cast
    for bad in (["orchestrator"], "orchestrator", [1, ""], ["x" * 65, ""], None):
        with pytest.raises(zmesh.errors.FrameError):
            codec.message_from_item([*item[:16], bad])
    with pytest.raises(zmesh.errors.FrameError):
        codec.message_from_item([*item, "one too many"])
