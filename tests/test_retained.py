"""Retained topics on every transport (conformance): a late subscriber gets
the topic's last retained value first; None clears; a ttl ends it; it goes
with its publisher's node."""

from __future__ import annotations

import asyncio
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


class SlowFetch:
    """Hold every node's retained answers back until ``go`` is set (a slow peer)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from zmesh._runtime import agent_port, retained

        self.go = asyncio.Event()
        self.asked: list[str] = []
        real = retained.fetch

        async def fetch(dispatch: Any, pattern: str, timeout: float) -> list[Message]:
            self.asked.append(pattern)
            found = await real(dispatch, pattern, timeout)
            await self.go.wait()
            return found

        monkeypatch.setattr(agent_port.retained, "fetch", fetch)


async def test_what_is_broadcast_while_the_retained_values_are_asked_for_comes_once_and_in_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    slow = SlowFetch(monkeypatch)
    async with Mesh("memory") as m:
        n1, n2 = await m.node(), await m.node()
        pub, sub = n1.agent("pub"), n2.agent("sub")
        await m.converged()
        slow.go.set()
        witness = await witnessed(n2, "plan")
        slow.go.clear()
        await pub.broadcast("plan", "v1", retain=True)
        await wait_for(lambda: len(witness.items) == 1, 10, "v1 to arrive")
        seen = Seen()
        subscribing = asyncio.ensure_future(sub.subscribe("plan", seen, inline=True))
        await wait_for(lambda: "plan" in slow.asked[1:], 10, "the retained values to be asked for")
        await pub.broadcast("plan", "v2", retain=True)
        await pub.broadcast("plan", "v3", retain=True)
        await wait_for(lambda: len(witness.items) == 3, 10, "v2 and v3 to arrive (held for the new one)")
        slow.go.set()
        await subscribing
        assert [p for _, p in seen.items] == ["v2", "v3"], "v1 is older than what was held; v3 not twice"


async def test_two_subscriptions_without_handlers_hold_their_broadcasts_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    slow = SlowFetch(monkeypatch)
    async with Mesh("memory") as m:
        n1, n2 = await m.node(), await m.node()
        pub, sub = n1.agent("pub"), n2.agent("sub")
        await m.converged()
        slow.go.set()
        witness = await witnessed(n2, "a.>")
        slow.go.clear()
        seen = Seen()
        sub.add_handler("a.>", seen, inline=True)  # both subscriptions leave broadcasts to this on() handler
        await pub.broadcast("a.y", "retained-old", retain=True)
        await wait_for(lambda: len(witness.items) == 1, 10, "the retained value to arrive")
        first = asyncio.ensure_future(sub.subscribe("a.x"))
        second = asyncio.ensure_future(sub.subscribe("a.y"))
        await wait_for(lambda: {"a.x", "a.y"} <= set(slow.asked), 10, "both to ask")
        await pub.broadcast("a.y", "live-new")
        await wait_for(lambda: len(witness.items) == 2, 10, "the live one to arrive")
        slow.go.set()
        await asyncio.gather(first, second)
        assert seen.items == [("a.y", "live-new")], "the older retained value never comes after the live one"


async def test_retained_values_beyond_a_message_are_left_out_and_counted() -> None:
    async with Mesh("inproc") as m:
        n1, n2 = await m.node(), await m.node()
        pub = n1.agent("pub")
        await m.converged()
        witness = await witnessed(n2, "cfg.*")
        for i in range(3):
            await pub.broadcast(f"cfg.{i}", "x" * 400_000, retain=True)  # 1.2 MB together, over the 1 MiB limit
        await wait_for(lambda: len(witness.items) == 3, 10, "the broadcasts to arrive")
        seen = Seen()
        await n2.agent("late").subscribe("cfg.*", seen, inline=True)
        assert sorted(t for t, _ in seen.items) == ["cfg.1", "cfg.2"], "the newest that fit"
        assert n1.stats()["dropped"].get("retained_over_limit") == 1
