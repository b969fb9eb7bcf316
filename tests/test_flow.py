"""Handlers where they belong, per-agent concurrency, priority inboxes with
TTL, and credit-based backpressure, on both transports.

Each test names the behaviour; each would fail on the code before it (plain
handlers ran on the loop, every message started a handler at once, priority
was ignored, and senders never waited).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import zmesh
from zmesh import FakeClock, Message
from zmesh._runtime.dispatch import YIELD_EVERY
from zmesh._engine.config import CREDIT_WINDOW

from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(params=["inproc", "zmq"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def pair(m: Mesh, **agent_options: Any) -> tuple[zmesh.Agent, zmesh.Agent]:
    """Sender ``a`` on one node, receiver ``b`` (with ``agent_options``) on another."""
    n1, n2 = await m.node(), await m.node()
    a, b = n1.agent("a"), n2.agent("b", **agent_options)
    await m.converged()
    return a, b


class Gate:
    """An async handler that holds every message until opened; counts who runs."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.running = 0
        self.most = 0
        self.seen: list[Any] = []

    async def __call__(self, msg: Message) -> Any:
        self.running += 1
        self.most = max(self.most, self.running)
        self.seen.append(msg.payload)
        try:
            await self.opened.wait()
        finally:
            self.running -= 1
        return msg.payload


# -- where handlers run ---------------------------------------------------------


async def test_plain_handlers_run_in_the_pool_async_and_inline_on_the_loop(transport: str) -> None:
    async with Mesh(transport) as m:
        a, b = await pair(m)
        loop_thread = threading.get_ident()

        def plain(msg: Message) -> Any:
            return {"thread": threading.get_ident(), "trace": zmesh.current_trace_id()}

        def quick(msg: Message) -> Any:
            return {"thread": threading.get_ident()}

        async def coro(msg: Message) -> Any:
            return {"thread": threading.get_ident()}

        b.add_handler("plain", plain)
        b.add_handler("quick", quick, inline=True)
        b.add_handler("coro", coro)
        reply = await a.request("b", "plain", timeout=5, trace_id="trace-1")
        assert reply.payload["thread"] != loop_thread
        assert reply.payload["trace"] == "trace-1"  # the context went with it
        assert (await a.request("b", "quick", timeout=5)).payload["thread"] == loop_thread
        assert (await a.request("b", "coro", timeout=5)).payload["thread"] == loop_thread


async def test_a_plain_handler_that_blocks_does_not_stop_the_loop(transport: str) -> None:
    async with Mesh(transport) as m:
        a, b = await pair(m)
        release = threading.Event()
        b.add_handler("block", lambda msg: release.wait(10) and "released")
        b.add_handler("ping", lambda msg: "pong", inline=True)
        blocked = asyncio.ensure_future(a.request("b", "block", timeout=10))
        assert (await a.request("b", "ping", timeout=2)).payload == "pong"  # answered meanwhile
        assert not blocked.done()
        release.set()
        assert (await blocked).payload == "released"


async def test_a_plain_handler_that_raises_in_the_pool_is_contained(transport: str) -> None:
    async with Mesh(transport) as m:
        a, b = await pair(m)

        def bad(msg: Message) -> Any:
            raise KeyError("nope")

        b.add_handler("bad", bad)
        with pytest.raises(zmesh.HandlerError, match="KeyError"):
            await a.request("b", "bad", timeout=5)
        b.add_handler("ok", lambda msg: 1)
        assert (await a.request("b", "ok", timeout=5)).payload == 1


# -- concurrency and the inbox --------------------------------------------------


async def test_an_agent_runs_at_most_its_concurrency_and_the_rest_wait(transport: str) -> None:
    async with Mesh(transport) as m:
        a, b = await pair(m, concurrency=3)
        gate = Gate()
        b.add_handler("work", gate)
        pending = [asyncio.ensure_future(a.request("b", "work", i, timeout=10)) for i in range(20)]
        await wait_for(lambda: gate.running == 3, what="three handlers to run")
        inbox = b.node._dispatch.delivery.inboxes["b"]
        await wait_for(lambda: len(inbox) == 17, what="the rest to wait in the inbox")
        assert gate.running == 3
        gate.opened.set()
        assert [r.payload for r in await asyncio.gather(*pending)] == list(range(20))
        assert gate.most == 3


async def test_the_inbox_hands_out_by_priority_then_arrival(transport: str) -> None:
    async with Mesh(transport) as m:
        a, b = await pair(m, concurrency=1)
        gate = Gate()
        b.add_handler("work", gate)
        first = asyncio.ensure_future(a.request("b", "work", "first", timeout=10))
        await wait_for(lambda: gate.running == 1)
        order = [("p5-a", 5), ("p3-a", 3), ("p0-a", 0), ("p5-b", 5), ("p0-b", 0), ("p3-b", 3)]
        rest = [asyncio.ensure_future(a.request("b", "work", name, priority=p, timeout=10)) for name, p in order]
        inbox = b.node._dispatch.delivery.inboxes["b"]
        await wait_for(lambda: len(inbox) == len(order), what="all to wait")
        gate.opened.set()
        await asyncio.gather(first, *rest)
        assert gate.seen == ["first", "p0-a", "p0-b", "p3-a", "p3-b", "p5-a", "p5-b"]


async def test_ttl_is_checked_when_a_message_leaves_the_inbox() -> None:
    clock = FakeClock()
    async with Mesh("inproc", clock=clock) as m:
        a, b = await pair(m, concurrency=1)
        gate = Gate()
        b.add_handler("work", gate)
        first = asyncio.ensure_future(a.request("b", "work", "first", timeout=60))
        await wait_for(lambda: gate.running == 1)
        stale = asyncio.ensure_future(a.request("b", "work", "stale", ttl=1.0, timeout=60))
        fresh = asyncio.ensure_future(a.request("b", "work", "fresh", ttl=10.0, timeout=60))
        await wait_for(lambda: len(b.node._dispatch.delivery.inboxes["b"]) == 2)
        clock.advance(2.0)  # the stale one's ttl runs out while it waits
        gate.opened.set()
        assert (await first).payload == "first"
        with pytest.raises(zmesh.Timeout, match="expired"):
            await stale
        assert (await fresh).payload == "fresh"
        assert gate.seen == ["first", "fresh"]  # the expired one was never handled
        assert [d.reason for d in b.node.dead_letters] == ["expired"]


async def test_closing_an_agent_dead_letters_and_answers_what_waits_in_its_inbox() -> None:
    async with Mesh("inproc") as m:
        a, b = await pair(m, concurrency=1)
        gate = Gate()
        b.add_handler("work", gate)
        first = asyncio.ensure_future(a.request("b", "work", 0, timeout=10))
        await wait_for(lambda: gate.running == 1)
        waiting = asyncio.ensure_future(a.request("b", "work", 1, timeout=10))
        await wait_for(lambda: len(b.node._dispatch.delivery.inboxes["b"]) == 1)
        await b.close()
        with pytest.raises(zmesh.AgentNotRegistered, match="left"):
            await waiting
        gate.opened.set()
        await asyncio.gather(first, return_exceptions=True)
        assert "not_found" in [d.reason for d in b.node.dead_letters]


# -- backpressure -------------------------------------------------------------


async def test_a_flooding_sender_waits_for_credit_and_memory_stays_bounded(transport: str) -> None:
    async with Mesh(transport) as m:
        a, b = await pair(m, concurrency=1)
        inbox = b.node._dispatch.delivery.inboxes["b"]
        deepest = 0
        handled = 0

        async def slow(msg: Message) -> None:
            nonlocal deepest, handled
            deepest = max(deepest, len(inbox))
            handled += 1
            await asyncio.sleep(0)

        b.add_handler("work", slow)
        total = 5 * CREDIT_WINDOW
        for i in range(total):
            await a.send("b", "work", i)
        await wait_for(lambda: handled == total, 10, "every message to be handled")
        assert deepest <= CREDIT_WINDOW  # never more than one window waits
        assert a.node.stats()["backpressure_waits"] > 0  # the sender did wait
        assert b.node.stats()["dropped_total"] == 0 and len(b.node.dead_letters) == 0


async def test_send_and_request_raise_backpressure_after_their_timeout(transport: str) -> None:
    async with Mesh(transport) as m:
        a, b = await pair(m, concurrency=1)
        gate = Gate()
        b.add_handler("work", gate)
        for i in range(CREDIT_WINDOW + 1):  # one runs, a window's worth waits in the inbox
            await a.send("b", "work", i, timeout=1)
        await wait_for(lambda: gate.running == 1)
        with pytest.raises(zmesh.Backpressure, match="nothing was sent"):
            await a.send("b", "work", "one too many", timeout=0.2)
        with pytest.raises(zmesh.Backpressure):
            await a.request("b", "work", "and a request", timeout=0.2)
        assert "one too many" not in gate.seen
        gate.opened.set()  # room opens: sending works again
        await a.send("b", "work", "after", timeout=5)
        await wait_for(lambda: "after" in gate.seen)


async def test_a_waiting_sender_learns_when_the_target_leaves(transport: str) -> None:
    async with Mesh(transport) as m:
        a, b = await pair(m, concurrency=1)
        gate = Gate()
        b.add_handler("work", gate)
        for i in range(CREDIT_WINDOW + 1):
            await a.send("b", "work", i)
        waiting = asyncio.ensure_future(a.send("b", "work", "late"))
        await wait_for(lambda: a.node.stats()["backpressure_waits"] == 1)
        await b.node.close()
        with pytest.raises((zmesh.AgentNotRegistered, zmesh.PeerLost)):
            await asyncio.wait_for(waiting, 10)


async def test_a_subscriber_that_cannot_keep_up_loses_broadcasts_counted_with_an_event(transport: str) -> None:
    async with Mesh(transport) as m:
        a, b = await pair(m, concurrency=1, inbox_size=10)
        gate = Gate()
        await b.subscribe("news", gate)
        seen: list[zmesh.MeshEvent] = []

        async def watch() -> None:
            async for event in b.node.events():
                seen.append(event)

        watcher = asyncio.ensure_future(watch())
        for i in range(50):
            assert await a.broadcast("news", i) == 1
        node = b.node
        # One runs; broadcasts may fill half the inbox (5), the rest stays for direct messages.
        await wait_for(lambda: node.stats()["dropped"].get("slow_subscriber", 0) == 50 - 1 - 5)
        b.add_handler("direct", lambda msg: "room", inline=True)
        waiting = asyncio.ensure_future(a.request("b", "direct", timeout=10))  # not crowded out
        await wait_for(lambda: any(e.kind == "slow_subscriber" for e in seen))
        assert [e.agent_id for e in seen if e.kind == "slow_subscriber"] == ["b"]  # one event per run of drops
        gate.opened.set()
        assert (await waiting).payload == "room"
        await wait_for(lambda: len(gate.seen) == 6)
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)


async def test_a_full_inbox_answers_a_request_with_backpressure_and_counts_the_drop() -> None:
    async with Mesh("inproc") as m:
        a, b = await pair(m, concurrency=1, inbox_size=2)
        gate = Gate()
        b.add_handler("work", gate)
        held = [asyncio.ensure_future(a.request("b", "work", i, timeout=10)) for i in range(3)]
        await wait_for(lambda: len(b.node._dispatch.delivery.inboxes["b"]) == 2)
        with pytest.raises(zmesh.Backpressure, match="full inbox"):
            await a.request("b", "work", "over", timeout=5)
        assert b.node.stats()["dropped"]["inbox_full"] == 1
        assert [d.reason for d in b.node.dead_letters] == ["busy"]
        gate.opened.set()
        await asyncio.gather(*held)


async def test_a_send_loop_yields_to_the_loop() -> None:
    async with Mesh("inproc") as m:
        node = await m.node()  # both agents here: credit comes back at once, no wait yields for us
        a, b = node.agent("a"), node.agent("b")
        b.add_handler("work", lambda msg: None, inline=True)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        before = ticks
        for i in range(10 * YIELD_EVERY):
            await a.send("b", "work", i)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert ticks - before >= 9  # the other task ran during the loop


def test_made_up_agent_names_cannot_grow_receiving_windows_without_bound() -> None:
    """A joined peer naming ever new agents (BLOCKED items, messages to
    nobody) keeps a bounded number of windows here; hosted agents still get one."""
    from collections import Counter

    from zmesh._engine import credit

    class FakeEngine:
        agents = {"real"}
        closed = False
        stats: Counter[str] = Counter()
        dropped: Counter[str] = Counter()

        def drop(self, reason: str, where: str, detail: str = "") -> None:
            self.dropped[reason] += 1

        def enqueue(self, node: str, item: bytes) -> None: ...

    engine = FakeEngine()
    flow = credit.Flow(engine, 2048, 8 << 20)  # type: ignore[arg-type]
    for i in range(credit.MAX_WINDOWS + 500):
        flow.on_blocked("peer", f"made-up-{i}", 1)
        flow.taken("peer", f"other-{i}")
    assert len(flow.inn) == credit.MAX_WINDOWS
    assert engine.dropped["too_many_windows"] == 2 * (credit.MAX_WINDOWS + 500) - credit.MAX_WINDOWS
    flow.taken("peer", "real")  # an agent hosted here is never refused a window
    assert ("peer", "real") in flow.inn


def test_credit_taken_after_the_engine_closed_reports_nothing() -> None:
    """A handler that finishes after its node closed gives no credit back:
    a closed engine sends nothing, not even a CREDIT to a peer."""
    from collections import Counter

    from zmesh._engine import credit

    class FakeEngine:
        agents = {"real"}
        closed = False
        stats: Counter[str] = Counter()
        queued: list[tuple[str, bytes]] = []

        def drop(self, reason: str, where: str, detail: str = "") -> None: ...

        def enqueue(self, node: str, item: bytes) -> None:
            self.queued.append((node, item))

        def flush_to(self, node: str) -> None: ...

    engine = FakeEngine()
    flow = credit.Flow(engine, 2, 8 << 20)  # type: ignore[arg-type]
    flow.taken("peer", "real")  # half a window of 2: reported at once
    assert len(engine.queued) == 1
    engine.closed = True
    flow.taken("peer", "real")
    assert len(engine.queued) == 1
    assert flow.inn[("peer", "real")].taken == 1


async def test_a_send_with_room_still_checks_its_timeout_and_the_node(transport: str) -> None:
    """A send that flow control lets go at once takes a short path; it still
    refuses a bad timeout, and a node already closing, and sends nothing then."""
    async with Mesh(transport) as m:
        a, b = await pair(m)
        got: list[Any] = []
        b.add_handler("t", got.append, inline=True)
        for bad in (-1, "5", float("nan")):
            with pytest.raises(zmesh.InvalidMessage, match="timeout"):
                await a.send("b", "t", "bad", timeout=bad)
        await a.send("b", "t", "good", timeout=5)
        await wait_for(lambda: [msg.payload for msg in got] == ["good"], what="only the good one")

        node = m.nodes[0]
        release = asyncio.Event()

        class SlowDiscovery:  # holds close() after the node is marked closed, before its engine is
            async def close(self) -> None:
                await release.wait()

        node._mesh.discovery = SlowDiscovery()  # type: ignore[assignment]
        closing = asyncio.ensure_future(node.close())
        await asyncio.sleep(0)
        assert node.closed and not node._mesh.engine.closed
        with pytest.raises(zmesh.NodeClosed):
            await a.send("b", "t", "late")
        release.set()
        await closing
        assert [msg.payload for msg in got] == ["good"]


async def test_senders_woken_together_never_lose_a_later_wait() -> None:
    """Two senders wait for credit to one agent; one credit wakes both. The
    first sends, finds the window closed again and waits anew before the
    second resumes: the second's clean-up must not drop that new wait (it
    did: the first sender then waited forever)."""
    async with zmesh.Node("orphan", transport="inproc", discovery=False) as node:
        a, b = node.agent("a"), node.agent("b")
        node.agent("t").add_handler("x", lambda msg: None, inline=True)
        engine, dispatch = node._mesh.engine, node._dispatch
        tokens = [0]

        def admit(target: str) -> str | None:  # the window, scripted: open for `tokens` messages
            if tokens[0]:
                tokens[0] -= 1
                return engine.route(target)
            return ""

        node._mesh.admit = admit  # the dispatch asks the mesh, which asks the engine
        engine.send_if_open = lambda msg, now: ""  # type: ignore[method-assign]

        async def twice(agent: zmesh.Agent) -> None:
            await agent.send("t", "x", 1)
            await agent.send("t", "x", 2)  # the first to wake waits again here, at once

        first = asyncio.ensure_future(twice(a))
        second = asyncio.ensure_future(twice(b))
        try:
            await wait_for(lambda: len(dispatch._credit_waiters.get("t", ())) == 2, what="both wait")
            tokens[0] = 1
            dispatch.credit("t")  # wakes both: the first sends once and waits again
            await wait_for(lambda: len(dispatch._credit_waiters.get("t", ())) == 2, what="both wait again")
            tokens[0] = 3
            dispatch.credit("t")
            await asyncio.wait_for(asyncio.gather(first, second), 5)
        finally:
            for task in (first, second):
                task.cancel()
            await asyncio.gather(first, second, return_exceptions=True)
