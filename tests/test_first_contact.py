"""A node's first moments in a mesh: a send or request made while it is still
joining waits for its target (within its own timeout), a seed that never
answers is warned about, and an agent's capabilities reach the mesh as soon
as they are assigned."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

import zmesh
from zmesh._runtime import frame_mesh

from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)


def _silent_endpoint() -> str:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1]}"


async def test_a_request_right_after_start_waits_for_an_agent_the_seed_hosts() -> None:
    # The README's cross-process pattern, in one process: start, then ask at once.
    async with Mesh("zmq") as m:
        seed = await m.node()
        seed.agent("b").add_handler("math.add", lambda msg: msg.payload["x"] + msg.payload["y"])
        newcomer = await m.node()
        a = newcomer.agent("a")
        assert newcomer.registry.node_of("b") is None  # not known yet: the seed has not answered
        reply = await a.request("b", "math.add", {"x": 1, "y": 2}, timeout=5)
        assert reply.payload == 3
        assert newcomer.stats()["unknown_target_waits"] == 1


async def test_a_send_right_after_start_waits_for_its_target_too() -> None:
    async with Mesh("zmq") as m:
        seed = await m.node()
        got: list[object] = []
        seed.agent("b").add_handler("note", lambda msg: got.append(msg.payload), inline=True)
        newcomer = await m.node()
        await newcomer.agent("a").send("b", "note", "hello")
        await wait_for(lambda: got == ["hello"], 5, "the note")


async def test_while_a_seed_is_down_a_request_to_an_unknown_agent_fails_at_its_own_timeout() -> None:
    clock = zmesh.FakeClock()
    async with Mesh("zmq", clock=clock) as m:
        node = await m.node(seeds=[_silent_endpoint()])
        a = node.agent("a")
        request = asyncio.ensure_future(a.request("ghost", "x", timeout=10))
        await wait_for(lambda: node.stats()["unknown_target_waits"] == 1, 5, "the request to wait")
        clock.advance(9)
        await asyncio.sleep(0)
        assert not request.done()  # still joining, still within its timeout
        clock.advance(1)
        with pytest.raises(zmesh.AgentNotRegistered, match="waited 10 s"):
            await request
        assert [(e.reason, e.target) for e in node.dead_letters] == [("not_found", "ghost")]


async def test_past_the_learning_window_an_unknown_agent_fails_at_once(
    transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(frame_mesh, "LEARN_WINDOW", 0.0)  # the peer below joined "long ago"
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a = n1.agent("a")
        n2.agent("b")
        await m.converged()
        with pytest.raises(zmesh.AgentNotRegistered) as raised:
            await a.request("ghost", "x", timeout=10)
        assert "waited" not in str(raised.value)
        with pytest.raises(zmesh.AgentNotRegistered):
            await a.send("ghost", "x")
        assert n1.stats()["unknown_target_waits"] == 0


async def test_just_after_a_peer_joined_an_agent_one_update_behind_is_waited_for(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a = n1.agent("a")
        await m.converged()
        # n2's record gains an agent only now; n1 asks for it before the update arrives.
        late = n2.agent("late")
        late.add_handler("x", lambda msg: "here", inline=True)
        assert n1.registry.node_of("late") is None
        assert (await a.request("late", "x", timeout=5)).payload == "here"
        assert n1.stats()["unknown_target_waits"] == 1


async def test_a_seed_that_never_answers_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    clock = zmesh.FakeClock()
    silent = _silent_endpoint()
    async with Mesh("zmq", clock=clock) as m:
        with caplog.at_level(logging.WARNING, logger="zmesh"):
            node = await m.node(seeds=[silent])
            await wait_for(lambda: node.joining, 5, "the knock")
            for _ in range(12):  # retries at 1, 2.5, 4.75, ... s: well past the third HELLO
                clock.advance(1)
                await asyncio.sleep(0)
            warned = [r.getMessage() for r in caplog.records if "has not answered" in r.getMessage()]
        assert len(warned) == 1, warned
        assert silent in warned[0] and m.name in warned[0]
        assert node.joining


async def test_assigned_capabilities_reach_every_peer_at_once(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        worker = n1.agent("w", capabilities=("summarize", "model:big"))
        await m.converged()
        assert n2.registry.find("model:big") == ["w"]
        worker.capabilities = ["summarize", "model:small"]  # any iterable of strings
        assert worker.capabilities == ("summarize", "model:small")
        await wait_for(lambda: n2.registry.find("model:small") == ["w"], 5, "the new capabilities at n2")
        assert n2.registry.find("model:big") == []
        assert await n1.settled(5)


def test_capabilities_must_be_strings() -> None:
    async def check() -> None:
        async with zmesh.Node("caps", transport="inproc") as node:
            with pytest.raises(ValueError, match="one string"):
                node.agent("a", capabilities="summarize")  # type: ignore[arg-type]
            agent = node.agent("a")
            for bad in ("summarize", [""], [1]):
                with pytest.raises(ValueError):
                    agent.capabilities = bad  # type: ignore[assignment]
            assert agent.capabilities == ()
            await agent.close()
            with pytest.raises(zmesh.NodeClosed):
                agent.capabilities = ("x",)

    asyncio.run(check())
