"""The gateway between a ZeroMQ mesh and a NATS mesh (a real nats-server on
127.0.0.1): every primitive crosses both ways, broadcasts cross once, a
cancel stops the far handler, two gateways fail over, and nothing loops."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

import zmesh
from zmesh.gateway import VIA, Gateway

from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(60)


class Lans:
    """A ZeroMQ mesh ("lan") and a NATS mesh ("nats") of the same name, and gateways between them."""

    def __init__(self, lan: Mesh, wan: Mesh) -> None:
        self.lan, self.wan = lan, wan
        self.gateways: list[Gateway] = []

    async def gateway(self, lan_domain: str = "lan", wan_domain: str = "nats") -> Gateway:
        gw = Gateway(await self.lan.node(), await self.wan.node(), domain_a=lan_domain, domain_b=wan_domain,
                     resync_interval=0.2)
        await gw.start()
        self.gateways.append(gw)
        return gw

    async def sees(self, node: zmesh.Node, *agents: str, timeout: float = 10.0) -> None:
        await wait_for(lambda: all(a in node.registry.agents() for a in agents), timeout,
                       f"{node.id} to see {agents}")


@contextlib.asynccontextmanager
async def two_meshes() -> AsyncIterator[Lans]:
    async with Mesh("zmq") as lan, Mesh("nats") as wan:
        wan.name = lan.name  # one mesh name on both sides, as `zmesh gateway --mesh M` joins them
        pair = Lans(lan, wan)
        try:
            yield pair
        finally:
            for gw in pair.gateways:
                await gw.close()


async def test_requests_sends_and_streams_cross_both_ways(nats_url: str) -> None:
    async with two_meshes() as lans:
        lan_node, wan_node = await lans.lan.node(), await lans.wan.node()
        alice = lan_node.agent("alice", capabilities=("math.add",), meta={"model": "m1"})
        bob = wan_node.agent("bob", capabilities=("echo",))
        got: list[zmesh.Message] = []
        arrived = asyncio.Event()

        @alice.on("math.add")
        async def add(msg: zmesh.Message) -> int:
            return int(msg.payload["x"] + msg.payload["y"])

        @bob.on("echo")
        async def echo(msg: zmesh.Message) -> Any:
            return {"echo": msg.payload, "from": msg.sender}

        @bob.on("words")
        async def words(msg: zmesh.Message) -> AsyncIterator[str]:
            for word in str(msg.payload).split():
                yield word

        @alice.on("note")
        def note(msg: zmesh.Message) -> None:
            got.append(msg)
            arrived.set()

        await lans.gateway()
        await lans.sees(wan_node, "alice")
        await lans.sees(lan_node, "bob")
        info = wan_node.registry.agents()["alice"]
        assert info.capabilities == ("math.add",) and info.meta == {"model": "m1", VIA: "lan"}
        assert wan_node.registry.agents()["bob"].meta == {}

        assert (await bob.request("alice", "math.add", {"x": 2, "y": 3}, timeout=10)).payload == 5
        assert (await bob.request_any("math.add", "math.add", {"x": 1, "y": 1}, timeout=10)).payload == 2
        reply = await alice.request("bob", "echo", "hi", timeout=10)
        assert reply.payload == {"echo": "hi", "from": "alice"}  # the far side sees the real sender's id
        async with alice.stream("bob", "words", "one two three", timeout=10) as chunks:
            assert [c async for c in chunks] == ["one", "two", "three"]
        await bob.send("alice", "note", {"n": 1}, qos=1)
        await asyncio.wait_for(arrived.wait(), 10)
        assert got[0].payload == {"n": 1} and got[0].sender == "bob" and got[0].qos == 1


async def test_errors_cross_as_their_own_kind(nats_url: str) -> None:
    async with two_meshes() as lans:
        lan_node, wan_node = await lans.lan.node(), await lans.wan.node()
        alice, bob = lan_node.agent("alice"), wan_node.agent("bob")

        @alice.on("boom")
        async def boom(msg: zmesh.Message) -> None:
            raise ValueError("no such model")

        await lans.gateway()
        await lans.sees(wan_node, "alice")
        with pytest.raises(zmesh.HandlerError) as failed:
            await bob.request("alice", "boom", None, timeout=10)
        assert failed.value.remote_type == "ValueError" and "no such model" in str(failed.value)
        with pytest.raises(zmesh.NoHandler):
            await bob.request("alice", "nothing.here", None, timeout=10)
        with pytest.raises(zmesh.Timeout):
            alice.add_handler("slow", lambda msg: asyncio.sleep(30))
            await bob.request("alice", "slow", None, timeout=0.5)


async def test_a_cancel_crosses_and_stops_the_far_handler(nats_url: str) -> None:
    async with two_meshes() as lans:
        lan_node, wan_node = await lans.lan.node(), await lans.wan.node()
        alice, bob = lan_node.agent("alice"), wan_node.agent("bob")
        started, stopped = asyncio.Event(), asyncio.Event()

        @alice.on("think")
        async def think(msg: zmesh.Message) -> AsyncIterator[str]:
            try:
                yield "first"
                started.set()
                await asyncio.sleep(60)
                yield "never"
            except asyncio.CancelledError:
                stopped.set()
                raise

        await lans.gateway()
        await lans.sees(wan_node, "alice")
        async with bob.stream("alice", "think", None, timeout=30) as chunks:
            assert await chunks.__anext__() == "first"
            await asyncio.wait_for(started.wait(), 10)
        await asyncio.wait_for(stopped.wait(), 10)  # leaving the block cancelled it two hops away

        stopped.clear()
        alice.add_handler("wait", _wait_until_cancelled(stopped))
        call = asyncio.ensure_future(bob.request("alice", "wait", None, timeout=30))
        await wait_for(lambda: lan_node.stats()["by_agent"]["alice"]["running"] == 1, 10, "the handler to run")
        call.cancel()
        await asyncio.wait_for(stopped.wait(), 10)


def sides(gw: Gateway) -> list[dict[str, Any]]:
    stats = gw.stats()
    return [stats["lan"], stats["nats"]]


def _wait_until_cancelled(stopped: asyncio.Event) -> Any:
    async def wait(msg: zmesh.Message) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            stopped.set()
            raise

    return wait


async def test_broadcasts_cross_once_each_way_and_never_loop(nats_url: str) -> None:
    async with two_meshes() as lans:
        lan_node, wan_node = await lans.lan.node(), await lans.wan.node()
        alice, carol = lan_node.agent("alice"), lan_node.agent("carol")
        bob = wan_node.agent("bob")
        heard: dict[str, list[tuple[str, Any]]] = {"alice": [], "bob": [], "carol": []}
        for agent in (alice, bob, carol):
            await agent.subscribe("news.>", lambda msg, who=agent.id: heard[who].append((msg.sender, msg.payload)),
                                  inline=True)
        await lans.gateway()
        await lans.gateway()  # a standby: broadcasts must still cross once
        await lans.sees(wan_node, "alice", "carol")
        await wait_for(lambda: len(wan_node.registry.subscribers("news.x")) >= 3, 10, "the subscriptions to cross")
        await bob.broadcast("news.x", 1)
        await alice.broadcast("news.y", 2)
        await wait_for(lambda: len(heard["alice"]) == 1 and len(heard["carol"]) == 2 and len(heard["bob"]) == 1,
                       10, f"every broadcast to arrive: {heard}")
        # Nothing more comes: a broadcast that crossed is not sent back, nor again by the standby.
        await bob.broadcast("news.z", 3)
        await wait_for(lambda: len(heard["carol"]) == 3, 10, "the last broadcast")
        # (no order between two senders: alice's came straight, bob's through the gateway)
        assert {who: sorted(got) for who, got in heard.items()} == {
            "alice": [("bob", 1), ("bob", 3)], "carol": [("alice", 2), ("bob", 1), ("bob", 3)],
            "bob": [("alice", 2)]}
        relayed = [side["broadcasts"] for gw in lans.gateways for side in sides(gw)]
        assert sum(relayed) == 3, relayed  # one bridge per direction, whichever gateway holds it
        # each relayed broadcast came back to the other side's bridge once, which kept it there
        stopped = [side["loops_stopped"] for gw in lans.gateways for side in sides(gw)]
        await wait_for(lambda: sum(side["loops_stopped"] for gw in lans.gateways for side in sides(gw))
                       == 3, 10, f"the relayed broadcasts to be stopped on their way back: {stopped}")


async def test_proxies_follow_the_registry(nats_url: str) -> None:
    async with two_meshes() as lans:
        lan_node, wan_node = await lans.lan.node(), await lans.wan.node()
        bob = wan_node.agent("bob")
        await lans.gateway()
        late = lan_node.agent("late", capabilities=("a",))
        await lans.sees(wan_node, "late")
        late.capabilities = ("a", "b")
        late.meta = {"model": "m2"}
        await late.subscribe("jobs.*")
        await wait_for(lambda: wan_node.registry.agents()["late"].capabilities == ("a", "b")
                       and wan_node.registry.agents()["late"].meta.get("model") == "m2"
                       and wan_node.registry.subscribers("jobs.x") != (), 10, "the proxy to follow its agent")
        await late.close()
        await wait_for(lambda: "late" not in wan_node.registry.agents(), 10, "the proxy to leave")
        with pytest.raises(zmesh.AgentNotRegistered):
            await bob.request("late", "a", None, timeout=2)


async def test_a_handoff_crosses(nats_url: str) -> None:
    async with two_meshes() as lans:
        lan_node, wan_node = await lans.lan.node(), await lans.wan.node()
        alice, bob = lan_node.agent("alice"), wan_node.agent("bob")
        offered: list[zmesh.Handoff] = []

        @alice.on_handoff
        async def take(offer: zmesh.Handoff) -> bool:
            offered.append(offer)
            return offer.task_id == "t1"

        await lans.gateway()
        await lans.sees(wan_node, "alice")
        accepted = await bob.handoff("alice", "t1", {"step": 2}, artifacts=["file:///tmp/x"], timeout=10)
        refused = await bob.handoff("alice", "t2", None, timeout=10)
        assert accepted.accepted and not refused.accepted
        assert [(o.task_id, o.sender, o.context, o.artifacts) for o in offered] == [
            ("t1", "bob", {"step": 2}, ("file:///tmp/x",)), ("t2", "bob", None, ())]
        assert alice.tasks == {"t1"} and bob.tasks == {"t2"}


async def test_a_standby_gateway_takes_over(nats_url: str) -> None:
    async with two_meshes() as lans:
        lan_node, wan_node = await lans.lan.node(), await lans.wan.node()
        alice, bob = lan_node.agent("alice"), wan_node.agent("bob")
        alice.add_handler("ping", lambda msg: "pong")
        first = await lans.gateway()
        await lans.sees(wan_node, "alice")
        second = await lans.gateway()
        assert (await bob.request("alice", "ping", None, timeout=10)).payload == "pong"
        assert first.active and first.stats()["nats"]["proxies"] == ["alice"]
        assert not second.active and second.stats()["nats"]["proxies"] == second.stats()["lan"]["proxies"] == []
        await first.close()
        lans.gateways.remove(first)
        await wait_for(lambda: second.stats()["nats"]["proxies"] == ["alice"]
                       and second.stats()["lan"]["proxies"] == ["bob"], 10, "the standby to take over")
        await lans.sees(wan_node, "alice")
        assert (await bob.request("alice", "ping", None, timeout=10)).payload == "pong"
        assert wan_node.registry.node_of("alice") == second.b.node.id


async def test_two_lans_meet_through_nats_without_loops(nats_url: str) -> None:
    async with Mesh("zmq") as lan1, Mesh("zmq") as lan2, Mesh("nats") as wan:
        lan2.name = wan.name = lan1.name  # one name; the two LANs share no member
        node1, node2 = await lan1.node(), await lan2.node()
        alice, dave = node1.agent("alice"), node2.agent("dave")
        dave.add_handler("ping", lambda msg: f"pong to {msg.sender}")
        heard: list[Any] = []
        await dave.subscribe("news.>", lambda msg: heard.append((msg.sender, msg.payload)), inline=True)
        gateways = []
        try:
            for lan, domain in ((lan1, "lan1"), (lan2, "lan2"), (lan1, "lan1"), (lan2, "lan2")):  # two per LAN
                gw = Gateway(await lan.node(), await wan.node(), domain_a=domain, domain_b="nats",
                             resync_interval=0.2)
                await gw.start()
                gateways.append(gw)
            await wait_for(lambda: "dave" in node1.registry.agents() and "alice" in node2.registry.agents(),
                           15, "each LAN to see the other's agent")
            assert node1.registry.agents()["dave"].meta[VIA] == "lan2,nats"
            assert (await alice.request("dave", "ping", None, timeout=10)).payload == "pong to alice"
            await wait_for(lambda: node1.registry.subscribers("news.a") != (), 10, "dave's subscription")
            await alice.broadcast("news.a", 1)
            await wait_for(lambda: heard == [("alice", 1)], 10, "the broadcast two gateways away")
            # every agent stands for one real agent: no proxy of a proxy came back home
            for node in (node1, node2):
                assert {a for a in node.registry.agents() if not a.startswith("zmesh-")} == {"alice", "dave"}
        finally:
            for gw in gateways:
                await gw.close()


_SILENT_PEER = """
import asyncio, sys, zmesh
async def main():
    async with zmesh.Node(sys.argv[1], seeds=[sys.argv[2]], discovery=False, name="silent"):
        print("up", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
asyncio.run(main())
"""


@pytest.mark.multiprocess
async def test_closing_is_not_held_up_once_for_each_proxy_by_a_peer_that_does_not_answer(nats_url: str) -> None:
    # Each agent's close waits for the peers to have the record without it, up to settle_timeout; a peer
    # stopped cold never does. The gateway's proxies close at once: one settle_timeout, not one each.
    quiet = zmesh.LivenessConfig(link_heartbeat=None)  # the stopped peer stays a peer throughout
    async with Mesh("zmq", settle_timeout=0.5, liveness=quiet) as lan, Mesh("nats") as wan:
        near, far, host = await lan.node(), await wan.node(), await wan.node()
        for i in range(16):
            host.agent(f"w{i}")
        peer = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _SILENT_PEER, lan.name, near.endpoint, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, env={**os.environ, "ZMESH_INTERFACES": "127.0.0.1"})
        try:
            assert peer.stdout is not None
            assert (await asyncio.wait_for(peer.stdout.readline(), 20)).strip() == b"up"
            await wait_for(lambda: near.peers == ["silent"], 10, "the peer to join")
            gateway = Gateway(near, far, domain_a="lan", domain_b="nats")
            await gateway.start()
            await wait_for(lambda: all(f"w{i}" in gateway.a.proxies for i in range(16)), 10, "the proxies")
            assert await near.settled(5)
            peer.send_signal(signal.SIGSTOP)
            started = time.monotonic()
            await gateway.close()
            took = time.monotonic() - started
            assert took < 4.0, f"closing 16 proxies took {took:.2f} s (one after another: 16 x 0.5 s)"
        finally:
            peer.send_signal(signal.SIGCONT)
            peer.kill()
            await asyncio.wait_for(peer.communicate(), 10)  # and its pipes closed
