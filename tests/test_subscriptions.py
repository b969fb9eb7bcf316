"""Subscriptions are separate from topic handlers.

A subscription's own handler takes broadcasts only; requests and direct
messages stay with the ``on()`` handlers. ``unsubscribe`` takes away exactly
what ``subscribe`` added, and every subscription a broadcast matches runs once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import zmesh

from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)


class Calls:
    """Inline handlers (they run on the loop in arrival order) that record what they got, by name."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def handler(self, name: str, reply: Any = None) -> Any:
        def handle(msg: zmesh.Message) -> Any:
            self.seen.append((name, msg.topic))
            return reply

        return handle

    def of(self, topic: str) -> list[str]:
        return sorted(name for name, t in self.seen if t == topic)


async def _pair(m: Mesh) -> tuple[zmesh.Agent, zmesh.Agent]:
    n1, n2 = await m.node(), await m.node()
    a, b = n1.agent("a"), n2.agent("b")
    await m.converged()
    return a, b


async def test_a_subscription_handler_does_not_replace_the_request_handler(transport: str) -> None:
    async with Mesh(transport) as m:
        a, b = await _pair(m)
        calls = Calls()
        b.add_handler("ev.x", calls.handler("on", reply="answered by on()"), inline=True)
        await b.subscribe("ev.x", handler=calls.handler("sub"), inline=True)

        reply = await a.request("b", "ev.x", timeout=5)
        assert reply.payload == "answered by on()"  # was None: the subscription's handler had replaced it
        assert b.handler_for("ev.x") is not None and calls.of("ev.x") == ["on"]

        assert await a.broadcast("ev.x") == 1
        await wait_for(lambda: len(calls.seen) == 2, what="the broadcast")
        assert calls.seen[1] == ("sub", "ev.x")  # a broadcast goes to the subscription's own handler


async def test_unsubscribe_removes_exactly_what_subscribe_added(transport: str) -> None:
    async with Mesh(transport) as m:
        a, b = await _pair(m)
        calls = Calls()
        b.add_handler("ev.kept", calls.handler("on"), inline=True)
        await b.subscribe("ev.*", handler=calls.handler("sub"), inline=True)
        await b.unsubscribe("ev.*")
        assert b.subscriptions == frozenset()
        assert b.handler_for("ev.other") is None  # the subscription's handler went with it
        assert b.handler_for("ev.kept") is not None  # what on() installed stays

        await a.send("b", "ev.other")  # a direct message: only on() handlers take those
        node_b = m.nodes[1]
        await wait_for(lambda: [d.reason for d in node_b.dead_letters] == ["no_handler"], what="the dead letter")
        assert await a.broadcast("ev.kept") == 0  # nobody subscribed any more
        await a.send("b", "ev.kept")
        await wait_for(lambda: calls.seen == [("on", "ev.kept")], what="the direct message")


async def test_every_matching_subscription_runs_once(transport: str) -> None:
    async with Mesh(transport) as m:
        a, b = await _pair(m)
        calls = Calls()
        await b.subscribe("ev.>", handler=calls.handler("rest"), inline=True)
        await b.subscribe("ev.*", handler=calls.handler("one"), inline=True)
        await b.subscribe("ev.x", handler=calls.handler("exact"), inline=True)
        await b.subscribe("ev.>", handler=calls.handler("rest"), inline=True)  # again: still one subscription
        await b.subscribe("done")
        b.add_handler("done", calls.handler("done"), inline=True)

        assert await a.broadcast("ev.x") == 1  # one agent reached, however many of its subscriptions match
        await a.broadcast("ev.x.y")
        await a.broadcast("ev.y")
        await a.broadcast("done")  # inline handlers run in arrival order: after this, all ran
        await wait_for(lambda: calls.of("done") == ["done"], what="the last broadcast")
        assert calls.of("ev.x") == ["exact", "one", "rest"]
        assert calls.of("ev.x.y") == ["rest"]
        assert calls.of("ev.y") == ["one", "rest"]


async def test_subscriptions_without_a_handler_run_the_on_handler_once(transport: str) -> None:
    async with Mesh(transport) as m:
        a, b = await _pair(m)
        calls = Calls()
        b.add_handler("ev.*", calls.handler("on"), inline=True)
        await b.subscribe("ev.>")
        await b.subscribe("ev.*")
        await b.subscribe("ev.x", handler=calls.handler("own"), inline=True)
        await b.subscribe("done")
        b.add_handler("done", calls.handler("done"), inline=True)

        await a.broadcast("ev.x")
        await a.broadcast("ev.y")
        await a.broadcast("done")
        await wait_for(lambda: calls.of("done") == ["done"], what="the last broadcast")
        assert calls.of("ev.x") == ["on", "own"]  # the on() handler once for both handler-less subscriptions
        assert calls.of("ev.y") == ["on"]


async def test_a_broadcast_waiting_in_the_inbox_is_not_handled_once_unsubscribed(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b", concurrency=1)
        await m.converged()
        calls = Calls()
        gate = asyncio.Event()

        async def hold(msg: zmesh.Message) -> None:
            calls.seen.append(("hold", msg.topic))
            await gate.wait()

        await b.subscribe("hold", handler=hold)
        await b.subscribe("ev.*", handler=calls.handler("fn"), inline=True)
        await b.subscribe("done", handler=calls.handler("done"), inline=True)
        await a.broadcast("hold")
        await wait_for(lambda: calls.seen == [("hold", "hold")], what="the slot to be taken")
        await a.broadcast("ev.x")
        inbox = n2._dispatch.delivery.inboxes["b"]  # internal: the only way to see it waits
        await wait_for(lambda: len(inbox) == 1, what="the broadcast to wait in the inbox")
        await b.unsubscribe("ev.*")
        await a.broadcast("done")  # waits behind it
        gate.set()
        await wait_for(lambda: calls.of("done") == ["done"], what="the inbox to drain")
        assert calls.of("ev.x") == []
