"""Garbage, forgeries and strangers on a node's sockets: dropped, counted, never fatal."""

from __future__ import annotations

import asyncio
import os

import msgpack
import pytest
import zmq

import zmesh
from tests.helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)


def _raw(kind: int, **options: object) -> zmq.Socket:
    sock = zmq.Context.instance().socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    for name, value in options.items():
        sock.setsockopt(getattr(zmq, name), value)
    return sock


async def _still_serves(m: Mesh, a: zmesh.Agent) -> None:
    reply = await a.request("b", "echo", {"still": "alive"}, timeout=5)
    assert reply.payload == {"still": "alive"}


async def _pair(m: Mesh) -> tuple[zmesh.Node, zmesh.Node, zmesh.Agent]:
    n1 = await m.node(max_payload=65536)
    n2 = await m.node()
    a = n1.agent("a")
    b = n2.agent("b")
    b.add_handler("echo", lambda msg: msg.payload)
    await m.converged()
    return n1, n2, a


async def test_garbage_on_the_router_is_dropped_and_counted() -> None:
    async with Mesh("zmq") as m:
        n1, _, a = await _pair(m)
        dealer = _raw(zmq.DEALER, ROUTING_ID=b"garbage-sender")
        try:
            dealer.connect(n1.endpoint)
            junk = [
                [b"\xc1\xc1\xc1"],  # not msgpack
                [b""],
                [b"\x92\x01"],  # truncated array
                [b"two", b"parts"],  # wrong number of parts
                [msgpack.packb({"not": "an array"})],
                [msgpack.packb([99, [0]])],  # unknown version
                [msgpack.packb([1, "not an item"])],
                [msgpack.packb([1, [0, "message", "before", "hello"]])],
                [msgpack.packb([1, [1, {"mesh": m.name}, [], True]])],  # HELLO missing fields
                [msgpack.packb([1, [42]])],  # unknown item kind, no hello
                [b"\xc1" + os.urandom(2047)],  # random, but never a msgpack array (0xc1 is unused)
                [b"\x00" * 10_000_000],  # over ZMQ_MAXMSGSIZE: ZeroMQ drops the connection
            ]
            for parts in junk:
                dealer.send_multipart(parts)
            await wait_for(
                lambda: {"malformed", "unknown_version", "unknown_peer"} <= set(n1.stats()["dropped"]),
                5,
                "the garbage to be counted",
            )
            await _still_serves(m, a)
            dropped = n1.stats()["dropped"]
            assert dropped["malformed"] >= 6
            assert dropped["unknown_version"] == 1
        finally:
            dealer.close()


async def test_garbage_on_pub_sub_from_a_joined_peer_is_dropped_and_counted() -> None:
    async with Mesh("zmq") as m:
        n1, _, a = await _pair(m)
        key = "fake|0001"
        got: list[object] = []
        await n1.agent("listener").subscribe("news.*", lambda mm: got.append(mm.payload))
        router = _raw(zmq.ROUTER)
        xpub = _raw(zmq.XPUB, XPUB_VERBOSE=1)
        dealer = _raw(zmq.DEALER, ROUTING_ID=key.encode())
        sub = _raw(zmq.SUB)
        try:
            router_port = router.bind_to_random_port("tcp://127.0.0.1")
            pub_port = xpub.bind_to_random_port("tcp://127.0.0.1")
            record = {
                "mesh": m.name, "node": "fake", "inc": "0001", "v": 1,
                "router": f"tcp://127.0.0.1:{router_port}", "pub": f"tcp://127.0.0.1:{pub_port}",
                "seq": 1, "agents": {"faker": []}, "subs": {},
            }
            sub.setsockopt(zmq.SUBSCRIBE, b"J" + key.encode())
            sub.connect(n1.pub_endpoint)
            dealer.connect(n1.endpoint)
            dealer.send(msgpack.packb([1, [1, record, [], False]]))
            await n1.wait_for_agents("faker", timeout=5)
            # the node's SUB attaches to our XPUB: wait for its subscription
            poller = zmq.Poller()
            poller.register(xpub, zmq.POLLIN)
            await wait_for(lambda: poller.poll(0) and xpub.recv().startswith(b"\x01M"), 5, "the node's SUB")
            def msg(sender: str, target: str = "") -> list[object]:
                return [0, "id1", 3, sender, target, "news.x", "", "", 3, 0, None, 1.0, "t", 0, "payload"]

            for parts in (
                [b"M", b"\xc1garbage"],
                [b"X", b"wrong topic frame"],
                [b"M"],
                [b"M", msgpack.packb([1, "fake", 1, [0, "short"]])],
                [b"M", msgpack.packb([7, "fake", 1])],
                [b"M", msgpack.packb([1, "stranger", 1, msg("x")])],
                [b"M", msgpack.packb([1, "fake", 1, msg("not-faker")])],  # forged sender
                [b"M", msgpack.packb([1, "fake", 1, msg("faker", target="a")])],  # targeted publish
                [b"M", msgpack.packb([1, "fake", 1, msg("faker")])],  # the one good one
            ):
                xpub.send_multipart(parts)
            await wait_for(lambda: got == ["payload"], 5, f"the valid broadcast {n1.stats()} {n1.peers}")
            dropped = n1.stats()["dropped"]
            for reason in ("malformed", "unknown_version", "unknown_publisher", "spoofed_sender"):
                assert dropped.get(reason, 0) >= 1, (reason, dropped)
            # a message claiming an agent the fake node does not host, on the direct path
            dealer.send(msgpack.packb([1, [0, "id2", 3, "ghost", "b", "echo", "", "", 3, 0, None, 1.0, "t", 0, 1]]))
            await wait_for(lambda: n1.stats()["dropped"].get("spoofed_sender", 0) >= 2, 5, "spoof count")
            await _still_serves(m, a)
        finally:
            for sock in (router, xpub, dealer, sub):
                sock.close()


async def test_a_node_of_another_mesh_is_refused_and_never_half_joined(caplog: pytest.LogCaptureFixture) -> None:
    async with Mesh("zmq") as m, Mesh("zmq") as other:
        n1 = await m.node()
        n1.agent("mine")
        stranger = await other.node(seeds=[n1.endpoint])
        stranger.agent("theirs")
        events = stranger.events()
        refused = await asyncio.wait_for(events.__anext__(), 5)
        assert refused.kind == "peer_refused"
        assert "mesh" in refused.detail
        await wait_for(lambda: n1.stats()["dropped"].get("refused", 0) >= 1, 5, "the refusal")
        assert n1.registry.node_of("theirs") is None
        assert stranger.registry.node_of("mine") is None
        assert n1.peers == [] and stranger.peers == []
        assert any("refused" in r.getMessage() for r in caplog.records)


async def test_oversized_payload_is_refused_at_the_caller_and_a_node_survives_a_flood() -> None:
    async with Mesh("zmq") as m:
        _, _, a = await _pair(m)
        n1 = m.nodes[0]
        with pytest.raises(zmesh.InvalidMessage):
            await a.send("b", "echo", b"x" * 70_000)  # n1 has max_payload=65536
        assert n1.stats().get("messages_sent", 0) == 0
        for i in range(20_000):
            await a.send("b", "echo", i)
        await _still_serves(m, a)


async def test_a_malformed_seed_endpoint_is_a_clear_error_at_once() -> None:
    for bad in ("localhost:5555", "tcp://127.0.0.1", "tcp://127.0.0.1:99999", "udp://x:1", ""):
        with pytest.raises(zmesh.TransportError, match="bad endpoint"):
            zmesh.Node("m", seeds=[bad], discovery=False)
    async with Mesh("zmq") as m:
        node = await m.node()
        with pytest.raises(zmesh.TransportError, match="expected tcp://HOST:PORT"):
            node.connect("127.0.0.1:5555")
        assert node.stats()["dropped_total"] == 0
