"""``Node(port=...)``: a seed node keeps its endpoint across restarts, so a
seed list can be written down once."""

from __future__ import annotations

import socket

import pytest

import zmesh

from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)


def free_port() -> int:
    """A port nothing listens on right now (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_seed_node_restarted_on_its_port_is_rejoined_by_its_peers() -> None:
    port = free_port()
    async with Mesh("zmq") as m:
        seed = await m.node(name="seed", port=port)
        assert seed.endpoint == f"tcp://127.0.0.1:{port}"
        seed.agent("first")
        peer = await m.node(name="peer", seeds=[f"tcp://127.0.0.1:{port}"])
        asker = peer.agent("asker")
        await peer.wait_for_agents("first", timeout=10)

        await seed.close()  # its BYE removes it from the peer at once
        await wait_for(lambda: peer.peers == [], 5, "the seed to leave")

        again = await m.node(name="seed", port=port, seeds=[])
        assert again.endpoint == seed.endpoint
        answer = again.agent("second")
        answer.add_handler("ping", lambda msg: "pong")
        await peer.wait_for_agents("second", timeout=10)  # the peer knocked on its seed again
        assert (await asker.request("second", "ping", timeout=5)).payload == "pong"
        assert peer.peers == ["seed"]


async def test_the_pub_port_can_be_fixed_too() -> None:
    port, pub_port = free_port(), free_port()
    async with Mesh("zmq") as m:
        node = await m.node(port=port, pub_port=pub_port)
        assert (node.endpoint, node.pub_endpoint) == (f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{pub_port}")
        other = await m.node()  # a random pub port by default, distinct from the router's
        assert other.pub_endpoint != other.endpoint


async def test_a_taken_port_is_a_clear_error_and_leaves_nothing_open() -> None:
    async with Mesh("zmq") as m:
        holder = await m.node()
        taken = int(holder.endpoint.rsplit(":", 1)[1])
        node = zmesh.Node(m.name, port=taken, discovery=False)
        with pytest.raises(zmesh.AddressInUse, match=f"port {taken} on 127.0.0.1 is already in use"):
            await node.start()
        assert isinstance(zmesh.AddressInUse("x"), zmesh.TransportError)
        assert node.closed  # and the fixture checks that no socket was left open
        holder_pub = int(holder.pub_endpoint.rsplit(":", 1)[1])
        with pytest.raises(zmesh.AddressInUse):
            await zmesh.Node(m.name, pub_port=holder_pub, discovery=False).start()


def test_ports_are_checked_at_once() -> None:
    for bad in (-1, 65536, 1.5, "5555", True):
        with pytest.raises(ValueError, match="port"):
            zmesh.Node("m", port=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'zmq' transport"):
        zmesh.Node("m", transport="inproc", port=free_port())
