"""Retained topics on every transport (conformance): a late subscriber gets
the topic's last retained value first; None clears; a ttl ends it; it goes
with its publisher's node."""

from __future__ import annotations

from typing import Any

import pytest

import zmesh
from zmesh import FakeClock, Message

from .conformance_transports import transport  # noqa: F401 - the fixture
from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)


class Seen:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    def __call__(self, msg: Message) -> None:
        self.messages.append(msg)

    @property
    def items(self) -> list[tuple[str, Any]]:
        return [(m.topic, m.payload) for m in self.messages]


async def witnessed(node: zmesh.Node, pattern: str) -> Seen:
    """A subscriber there from the start: once it has seen a broadcast, so has its node
    (what was in flight before a later subscription is not live for it)."""
    witness = Seen()
    await node.agent(f"witness-{len(node.agents)}").subscribe(pattern, witness, inline=True)
    return witness


async def test_a_late_subscriber_gets_the_retained_value_first(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        pub, late = n1.agent("planner"), n2.agent("late")
        await m.converged()
        witness = await witnessed(n2, "plan.>")
        await pub.broadcast("plan.current", {"step": 1}, retain=True)
        await pub.broadcast("plan.current", {"step": 2}, retain=True)
        await pub.broadcast("plan.deep.topic", "not for plan.*", retain=True)
        await pub.broadcast("plan.live", "not retained")
        await wait_for(lambda: len(witness.items) == 4, 10, "the broadcasts to have arrived")
        seen = Seen()
        await late.subscribe("plan.*", seen, inline=True)
        assert seen.items == [("plan.current", {"step": 2})], "only the newest, and at once"
        assert seen.messages[0].sender == "planner"
        await pub.broadcast("plan.current", {"step": 3})
        await wait_for(lambda: len(seen.items) == 2, 10, "the live broadcast")
        assert seen.items[1] == ("plan.current", {"step": 3})


async def test_a_retained_none_clears_the_topic(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        pub = n1.agent("pub")
        await m.converged()
        witness = await witnessed(n2, "status.>")
        await pub.broadcast("status.db", "up", retain=True)
        await pub.broadcast("status.db", None, retain=True)
        await wait_for(lambda: len(witness.items) == 2, 10, "the broadcasts to have arrived")
        seen = Seen()
        await n2.agent("late").subscribe("status.>", seen, inline=True)
        assert seen.items == []


async def test_a_retained_value_ends_with_its_ttl(transport: str) -> None:
    clock = FakeClock()
    async with Mesh(transport, clock=clock) as m:
        n1, n2 = await m.node(), await m.node()
        pub = n1.agent("pub")
        await m.converged()
        witness = await witnessed(n2, "offer.*")
        await pub.broadcast("offer.price", 10, ttl=5, retain=True)
        await wait_for(lambda: len(witness.items) == 1, 10, "the broadcast to have arrived")
        first = Seen()
        await n2.agent("early").subscribe("offer.*", first, inline=True)
        assert first.items == [("offer.price", 10)]
        clock.advance(6)
        later = Seen()
        await n2.agent("later").subscribe("offer.*", later, inline=True)
        assert later.items == []


async def test_the_newest_of_two_publishers_wins(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, n3 = await m.node(), await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        await m.converged()
        witness = await witnessed(n3, "leader")
        await a.broadcast("leader", "a", retain=True)
        await wait_for(lambda: len(witness.items) == 1, 10, "a's broadcast to have arrived")
        await b.broadcast("leader", "b", retain=True)
        await wait_for(lambda: len(witness.items) == 2, 10, "b's broadcast to have arrived")
        seen = Seen()
        await n3.agent("late").subscribe("leader", seen, inline=True)
        assert seen.items == [("leader", "b")]


async def test_a_retained_value_goes_with_its_publishers_node(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        pub = n1.agent("pub")
        await m.converged()
        await pub.broadcast("plan.current", "v1", retain=True)
        await n1.close()
        await wait_for(lambda: n2.registry.node_of("pub") is None, 10, "the publisher's node to leave")
        seen = Seen()
        await n2.agent("late").subscribe("plan.*", seen, inline=True)
        assert seen.items == []


async def test_a_subscriber_on_the_publishers_node_and_an_on_handler_get_it_too(transport: str) -> None:
    async with Mesh(transport) as m:
        node = await m.node()
        pub, here = node.agent("pub"), node.agent("here")
        witness = await witnessed(node, "plan.>")
        await pub.broadcast("plan.current", "v1", retain=True)
        await wait_for(lambda: len(witness.items) == 1, 10, "the broadcast to have come back (a broker)")
        seen = Seen()
        here.add_handler("plan.current", seen, inline=True)
        await here.subscribe("plan.>")  # no handler: the on() handler takes it
        assert seen.items == [("plan.current", "v1")]


def test_the_blocking_facade_retains_too() -> None:
    import zmesh.sync as zs

    with zs.Node("retained-sync", transport="inproc") as node:
        node.agent("pub").broadcast("mood", "calm", retain=True)
        got: list[Any] = []
        node.agent("late").subscribe("mood", lambda msg: got.append(msg.payload), inline=True)
        assert got == ["calm"]
