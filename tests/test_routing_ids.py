"""Routing ids cannot be taken over, keys or not: a connection that claims
another live node's identity is dropped, and the node it claims keeps talking."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import zmq

from zmesh._wire import codec
from zmesh.transport.base import endpoint_address

from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)

BYE = codec.join_frame([codec.encode_control(codec.Bye("closed"))])


async def test_a_forged_bye_under_another_nodes_identity_is_dropped() -> None:
    ctx: zmq.Context[Any] = zmq.Context()
    forgers: list[zmq.Socket[Any]] = []
    try:
        async with Mesh("zmq") as m:
            a, b = await m.node(), await m.node()
            a.agent("echo").add_handler("x", lambda msg: msg.payload)
            await b.wait_for_agents("echo")
            await a.wait_until(lambda: b.id in a.peers, 5, "b to join a")
            # b's own routing id is b.key + "|" + a tag only b knows: try the bare
            # key (what every node used before), and the key with a made-up tag
            for routing_id in (b.key, f"{b.key}|0123456789abcdef"):
                sock = ctx.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.ROUTING_ID, routing_id.encode())
                sock.connect(endpoint_address(a.endpoint))
                sock.send(BYE)
                forgers.append(sock)
            await wait_for(lambda: a.stats()["transport"].get("identity_taken", 0) >= 2, 5, "both forgeries")
            await asyncio.sleep(0.05)
            assert b.id in a.peers  # nobody said goodbye for b
            assert (await b.agent("c").request("echo", "x", 3, timeout=5)).payload == 3
            assert "spoofed_hello" not in a.stats()["dropped"]
    finally:
        for sock in forgers:
            sock.close(0)
        ctx.term()


async def test_each_link_has_its_own_routing_id() -> None:
    async with Mesh("zmq") as m:
        a, b, c = await m.node(), await m.node(), await m.node()
        await m.converged()
        to_b = a.transport.routing_id(b.endpoint)  # type: ignore[attr-defined]
        to_c = a.transport.routing_id(c.endpoint)  # type: ignore[attr-defined]
        assert to_b != to_c and to_b.startswith(f"{a.key}|".encode()) and to_c.startswith(f"{a.key}|".encode())
        # b cannot use what it saw of a's id at c: that is a different id, and c binds a's key to its own
        assert c._mesh.engine.members.peers[a.id].key == a.key
