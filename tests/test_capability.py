"""Requests by capability on every transport (conformance): request_any
spreads load and fails over, gather asks every provider, send_any."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

import zmesh
from zmesh import Message

from .conformance_transports import transport  # noqa: F401 - the fixture
from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)


class Held:
    """A provider's handler that runs until released; records who ran what."""

    def __init__(self, name: str, ran: list[tuple[str, object]]) -> None:
        self.name = name
        self.ran = ran
        self.running = 0
        self.release = asyncio.Event()

    async def __call__(self, msg: Message) -> str:
        self.running += 1
        try:
            await self.release.wait()
        finally:
            self.running -= 1
        self.ran.append((self.name, msg.payload))
        return self.name


async def providers(m: Mesh, names: list[str], **agent_options: object) -> tuple[zmesh.Agent, list[zmesh.Node]]:
    asker = await m.node()
    nodes = []
    for name in names:
        node = await m.node()
        node.agent(name, capabilities=("summarize",), **agent_options)  # type: ignore[arg-type]
        nodes.append(node)
    me = asker.agent("me")
    await m.converged()
    await asker.wait_for_agents(*names, timeout=10)
    return me, nodes


async def test_request_any_spreads_requests_over_the_providers_by_outstanding_work(transport: str) -> None:
    async with Mesh(transport) as m:
        me, nodes = await providers(m, ["p1", "p2", "p3"])
        ran: list[tuple[str, object]] = []
        handlers = {name: Held(name, ran) for name in ("p1", "p2", "p3")}
        for node, (name, handler) in zip(nodes, handlers.items()):
            node.agents[name].add_handler("sum", handler)
        asked = [asyncio.ensure_future(me.request_any("summarize", "sum", i, timeout=20)) for i in range(9)]
        await wait_for(lambda: sum(h.running for h in handlers.values()) == 9, 10, "all nine to run")
        assert sorted(h.running for h in handlers.values()) == [3, 3, 3], "the least busy provider each time"
        for handler in handlers.values():
            handler.release.set()
        replies = await asyncio.gather(*asked)
        assert Counter(r.payload for r in replies) == {"p1": 3, "p2": 3, "p3": 3}
        assert sorted(p for _, p in ran) == list(range(9)), "each ran once"


async def test_request_any_without_a_provider_is_no_provider_at_once(transport: str) -> None:
    async with Mesh(transport) as m:
        me, _ = await providers(m, ["p1"])
        with pytest.raises(zmesh.NoProvider, match="'translate'"):
            await me.request_any("translate", "x", timeout=20)
        with pytest.raises(zmesh.AgentNotRegistered):  # NoProvider is one
            await me.send_any("translate", "x")
        with pytest.raises(zmesh.NoProvider):
            await me.gather("translate", "x", timeout=20)


@pytest.mark.parametrize("idempotent", [False, True])
async def test_request_any_fails_over_when_a_provider_goes(transport: str, idempotent: bool) -> None:
    async with Mesh(transport) as m:
        me, (n1, n2) = await providers(m, ["p1", "p2"], concurrency=1)
        ran: list[tuple[str, object]] = []
        h1, h2 = Held("p1", ran), Held("p2", ran)
        n1.agents["p1"].add_handler("sum", h1)
        n2.agents["p2"].add_handler("sum", h2)
        asked = [asyncio.ensure_future(me.request_any("summarize", "sum", i, timeout=20, idempotent=idempotent))
                 for i in range(4)]
        # two each (least outstanding): one running, one waiting in the inbox (concurrency 1)
        await wait_for(lambda: h1.running == 1 and h2.running == 1, 10, "one running on each")
        await wait_for(lambda: n1.stats()["by_agent"]["p1"]["inbox"] == 1, 10, "one waiting at p1")
        await n1.close()  # p1 goes: its running request had started, its waiting one had not
        h2.release.set()
        outcomes = await asyncio.gather(*asked, return_exceptions=True)
        lost = [o for o in outcomes if isinstance(o, zmesh.PeerLost)]
        answered = [o.payload for o in outcomes if isinstance(o, zmesh.Message)]
        if idempotent:
            assert lost == [] and answered == ["p2"] * 4, outcomes
        else:
            assert len(lost) == 1 and answered == ["p2"] * 3, outcomes
            assert "had started" in str(lost[0])
        payloads = [p for name, p in ran if name == "p2"]
        assert len(payloads) == len(set(payloads)), "nothing ran twice on p2"


async def test_request_any_goes_elsewhere_when_a_provider_is_full(transport: str) -> None:
    async with Mesh(transport) as m:
        me, (n1, n2) = await providers(m, ["p1", "p2"], concurrency=1, inbox_size=1)
        ran: list[tuple[str, object]] = []
        h1, h2 = Held("p1", ran), Held("p2", ran)
        n1.agents["p1"].add_handler("sum", h1)
        n2.agents["p2"].add_handler("sum", h2)
        h2.release.set()  # p2 answers at once; p1 holds everything
        first = asyncio.ensure_future(me.request("p1", "sum", "occupy", timeout=20))
        await wait_for(lambda: h1.running == 1, 10, "p1 busy")
        second = asyncio.ensure_future(me.request("p1", "sum", "fill", timeout=20))
        await wait_for(lambda: n1.stats()["by_agent"]["p1"]["inbox"] == 1, 10, "p1's inbox full")
        for i in range(3):  # whichever it picks, the answer comes from p2
            assert (await me.request_any("summarize", "sum", i, timeout=20)).payload == "p2"
        h1.release.set()
        await asyncio.gather(first, second)


async def test_gather_asks_every_provider_and_reports_each_outcome(transport: str) -> None:
    async with Mesh(transport) as m:
        me, nodes = await providers(m, ["fast", "broken", "silent"])

        async def fast(msg: Message) -> str:
            return f"fast saw {msg.payload}"

        def broken(msg: Message) -> None:
            raise RuntimeError("out of tokens")

        silent = Held("silent", [])
        nodes[0].agents["fast"].add_handler("review", fast)
        nodes[1].agents["broken"].add_handler("review", broken)
        nodes[2].agents["silent"].add_handler("review", silent)
        answers = {a.sender: a for a in await me.gather("summarize", "review", "draft", timeout=1.0)}
        assert set(answers) == {"fast", "broken", "silent"}
        assert answers["fast"].ok and answers["fast"].payload == "fast saw draft"
        assert isinstance(answers["broken"].error, zmesh.HandlerError) and "out of tokens" in str(answers["broken"].error)
        assert isinstance(answers["silent"].error, zmesh.Timeout)
        with pytest.raises(zmesh.Timeout):
            answers["silent"].payload
        await wait_for(lambda: silent.running == 0, 10, "the silent one's handler to be cancelled")


async def test_gather_with_want_returns_at_the_first_and_cancels_the_rest(transport: str) -> None:
    async with Mesh(transport) as m:
        me, nodes = await providers(m, ["quick", "slow1", "slow2"])

        async def quick(msg: Message) -> str:
            return "quick"

        slow = [Held("slow1", []), Held("slow2", [])]
        nodes[0].agents["quick"].add_handler("ask", quick)
        nodes[1].agents["slow1"].add_handler("ask", slow[0])
        nodes[2].agents["slow2"].add_handler("ask", slow[1])
        seen = [a async for a in me.gather_iter("summarize", "ask", None, timeout=20, want=1)]
        assert [(a.sender, a.payload) for a in seen] == [("quick", "quick")]
        await wait_for(lambda: all(h.running == 0 for h in slow), 10, "the others' handlers to be cancelled")
        with pytest.raises(zmesh.InvalidMessage, match="want"):
            me.gather_iter("summarize", "ask", want=0)


async def test_send_any_reaches_one_provider(transport: str) -> None:
    async with Mesh(transport) as m:
        me, nodes = await providers(m, ["p1", "p2"])
        got: list[str] = []
        for node, name in zip(nodes, ("p1", "p2")):
            node.agents[name].add_handler("note", lambda msg, name=name: got.append(name))
        sent = [await me.send_any("summarize", "note", i) for i in range(4)]
        await wait_for(lambda: len(got) == 4, 10, "all four notes")
        assert sorted(got) == sorted(msg.target for msg in sent)


def test_the_blocking_facade_asks_by_capability_too() -> None:
    import zmesh.sync as zs

    with zs.Node("capability-sync", transport="inproc") as node:
        me = node.agent("me")
        for name in ("r1", "r2"):
            node.agent(name, capabilities=("review",)).add_handler("look", lambda msg, name=name: name)
        assert me.request_any("review", "look", timeout=5).payload in {"r1", "r2"}
        answers = me.gather_iter("review", "look", timeout=5)
        assert sorted(a.payload for a in answers) == ["r1", "r2"]
        first = me.gather_iter("review", "look", timeout=5)
        assert next(first).ok
        first.close()  # stopping early cancels the rest
        assert sorted(a.sender for a in me.gather("review", "look", timeout=5)) == ["r1", "r2"]
        assert me.send_any("review", "look").target in {"r1", "r2"}
