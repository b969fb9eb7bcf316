"""Nothing lost silently: what a receiver could not take fails at the caller,
and one bad item in a frame costs only itself. Both transports."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import zmesh
from zmesh._wire import codec
from tests.helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)

GROUPED = {("north", 2024): 10, ("south", 2024): 20}  # pandas groupby(...).to_dict()


def _inbox(agent: zmesh.Agent, topic: str) -> list[Any]:
    got: list[Any] = []
    agent.add_handler(topic, lambda msg: got.append(msg.payload))
    return got


async def test_a_huge_trace_id_fails_at_the_caller(transport: str) -> None:
    async with Mesh(transport, max_payload=65536) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        got = _inbox(b, "job.run")
        b.add_handler("job.ask", lambda msg: "ok")
        await m.converged()
        huge = "t" * 70_000  # the payload is small: only the whole message is over the limit
        with pytest.raises(zmesh.InvalidMessage, match="over the limit of 65536 bytes"):
            await a.send("b", "job.run", "small", trace_id=huge)
        with pytest.raises(zmesh.InvalidMessage, match="over the limit"):
            await a.request("b", "job.ask", "small", timeout=5, trace_id=huge)
        with pytest.raises(zmesh.InvalidMessage, match="over the limit"):
            await a.broadcast("job.run", "small", trace_id=huge)
        await a.send("b", "job.run", "marker")
        await wait_for(lambda: got, what="the marker")
        assert got == ["marker"]
        for node in (n1, n2):
            assert "oversized" not in node.stats()["dropped"]
        assert n1.stats()["pending_requests"] == 0


async def test_a_message_over_the_receivers_smaller_limit_fails_at_the_senders_caller(transport: str) -> None:
    async with Mesh(transport) as m:
        n1 = await m.node()  # 1 MiB
        n2 = await m.node(max_payload=65536)
        n3 = await m.node()
        a, b, c = n1.agent("a"), n2.agent("b"), n3.agent("c")
        got = _inbox(b, "blob.put")
        await b.subscribe("blob.*", lambda msg: got.append(msg.payload))
        big: list[Any] = []
        await c.subscribe("blob.*", lambda msg: big.append(len(msg.payload)))
        b.add_handler("blob.get", lambda msg: b"z" * 100_000)
        a.add_handler("blob.get", lambda msg: b"z" * 100_000)
        await m.converged()
        blob = b"x" * 100_000  # under n1's limit, over n2's
        with pytest.raises(zmesh.InvalidMessage, match=f"over the limit of 65536 bytes of node '{n2.id}'"):
            await a.send("b", "blob.put", blob)
        with pytest.raises(zmesh.InvalidMessage, match="over the limit of 65536 bytes"):
            await a.request("b", "blob.put", blob, timeout=5)
        # A broadcast over one node's limit still reaches the others; that node is left out, counted.
        assert await a.broadcast("blob.new", blob) == 1
        await wait_for(lambda: big == [100_000], what="the big broadcast at the node that takes it")
        assert n1.stats()["dropped"]["too_big_for_peer"] == 1
        # A reply over the requester's limit: the requester hears why at once.
        with pytest.raises(zmesh.HandlerError) as info:
            await b.request("a", "blob.get", None, timeout=20)
        assert info.value.remote_type == "InvalidMessage" and "65536" in str(info.value)
        await a.send("b", "blob.put", b"fits")
        await wait_for(lambda: got, what="the small message")
        assert got == [b"fits"]
        assert "oversized" not in n2.stats()["dropped"]
        assert n1.registry.record(n2.id).max_payload == 65536  # announced in its record


def test_a_node_may_not_take_less_than_64_kib() -> None:
    with pytest.raises(ValueError, match="at least 65536"):
        zmesh.Node("m", max_payload=65535)


async def test_a_payload_with_tuple_keys_fails_at_the_caller(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        got = _inbox(b, "stats.put")
        b.add_handler("stats.get", lambda msg: GROUPED)
        await m.converged()
        for call in (
            a.send("b", "stats.put", {"by_region": GROUPED}),
            a.request("b", "stats.put", GROUPED, timeout=5),
            a.broadcast("stats.put", [GROUPED]),
        ):
            with pytest.raises(zmesh.InvalidMessage, match=r"tuple key \('north', 2024\)"):
                await call
        # A handler that returns one: the requester gets the error, not a timeout.
        with pytest.raises(zmesh.HandlerError, match="tuple key") as info:
            await a.request("b", "stats.get", None, timeout=20)
        assert info.value.remote_type == "InvalidMessage"
        await a.send("b", "stats.put", {"point": (1, 2)})  # tuples as values are fine
        await wait_for(lambda: got, what="the good message")
        assert got == [{"point": [1, 2]}]
        assert n1.stats()["dropped_total"] == 0  # nothing bad went on the wire
        assert n2.stats()["dropped"] == {"unencodable_reply": 1}  # the handler's result, said at the worker


async def test_one_undecodable_request_in_a_frame_costs_only_itself(
    transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        b.add_handler("echo", lambda msg: msg.payload)
        await m.converged()
        # A sender without the check (an older version): the bad item leaves.
        monkeypatch.setattr(codec, "check_round_trip", lambda item, payload: None, raising=False)
        frames_before = n1.stats()["frames_sent"]
        payloads: list[Any] = [i for i in range(10)]
        payloads[6] = GROUPED
        results = await asyncio.gather(
            *(a.request("b", "echo", p, timeout=20) for p in payloads), return_exceptions=True
        )
        assert n1.stats()["frames_sent"] - frames_before <= 2  # batched: the bad item shared a frame
        bad = results.pop(6)
        assert [r.payload for r in results] == [0, 1, 2, 3, 4, 5, 7, 8, 9]  # type: ignore[union-attr]
        assert isinstance(bad, zmesh.HandlerError) and bad.remote_type == "InvalidMessage"
        assert "could not be decoded" in str(bad)
        assert n2.stats()["dropped"] == {"malformed": 1}
        assert n1.stats()["pending_requests"] == 0
        # Fire-and-forget: counted, and its flow-control credit comes back.
        await a.send("b", "echo", GROUPED)
        await wait_for(lambda: n2.stats()["dropped"]["malformed"] == 2, what="the second drop")
        assert (await a.request("b", "echo", "after", timeout=5)).payload == "after"


async def test_one_undecodable_broadcast_in_a_publish_frame_costs_only_itself(
    transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        got: list[Any] = []
        await b.subscribe("news.*", lambda msg: got.append(msg.payload))
        await m.converged()
        monkeypatch.setattr(codec, "check_round_trip", lambda item, payload: None, raising=False)
        await asyncio.gather(*(a.broadcast("news.x", p) for p in (1, GROUPED, 3)))
        await wait_for(lambda: len(got) == 2, what="the good broadcasts")
        assert got == [1, 3]
        await wait_for(lambda: n2.stats()["dropped"].get("malformed") == 1, what="the count")


async def test_batches_to_a_node_with_a_small_limit_stay_under_its_frame_limit(transport: str) -> None:
    async with Mesh(transport) as m:
        n1 = await m.node()  # 1 MiB: batches up to 256 KiB
        n2 = await m.node(max_payload=65536)  # takes frames up to 64 KiB + 64 KiB
        a, b = n1.agent("a"), n2.agent("b")
        got = _inbox(b, "chunk")
        await b.subscribe("chunks.*", lambda msg: got.append(msg.payload))
        await m.converged()
        chunk = b"c" * 40_000
        for i in range(30):  # each fits; 30 together would not fit in one frame
            await a.send("b", "chunk", chunk)
            await a.broadcast("chunks.x", chunk)
        await wait_for(lambda: len(got) == 60, 10, "every chunk")
        assert "oversized" not in n2.stats()["dropped"]


async def test_a_reply_too_big_for_a_request_near_the_limit_still_fails_fast(transport: str) -> None:
    async with Mesh(transport, max_payload=65536) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        b.add_handler("big", lambda msg: "y" * 140_000)
        await m.converged()
        for size in range(65536, 64000, -8):  # the longest trace id a request may carry
            try:
                await a.request("b", "big", timeout=10, trace_id="t" * size)
            except zmesh.InvalidMessage:
                continue  # the request itself is over the limit: nothing was sent
            except zmesh.HandlerError as exc:  # the error reply with this trace id would not fit either
                assert exc.remote_type == "InvalidMessage"
                break
        else:
            raise AssertionError("no trace id size fit")


async def test_a_result_that_cannot_travel_is_counted_and_dead_lettered_at_the_worker(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        b.add_handler("answer", lambda msg: {"ids": {1, 2}})  # a set: msgpack cannot carry it
        await m.converged()
        with pytest.raises(zmesh.HandlerError) as info:
            await a.request("b", "answer", timeout=10)
        assert info.value.remote_type == "InvalidMessage"
        assert n2.stats()["dropped"].get("unencodable_reply") == 1
        [letter] = list(n2.dead_letters)
        assert letter.reason == "handler_error" and "cannot be sent" in letter.detail
