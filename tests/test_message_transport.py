"""The message-level seam: a node over a MessageTransport (here the in-memory
one) runs the same runtime; what is particular to it is tested here (the
conformance suite runs every shared behaviour on it as ``memory``)."""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
import pytest

import zmesh
from zmesh.transport import FrameTransport, MessageTransport, Transport, TransportCapabilities
from zmesh.transport.inproc import InprocTransport
from zmesh.transport.memory import MemoryBroker, MemoryTransport
from zmesh.transport.message import MessageHost

from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)


def test_frame_transport_is_the_transport_interface() -> None:
    assert FrameTransport is Transport
    assert MemoryTransport.capabilities.level == "message"


async def test_two_nodes_on_a_broker_talk_and_see_each_other() -> None:
    broker = MemoryBroker()
    async with zmesh.Node("m", transport=MemoryTransport(broker), name="n1") as n1, \
            zmesh.Node("m", transport=MemoryTransport(broker), name="n2") as n2:
        n2.agent("b").add_handler("add", lambda msg: msg.payload + 1)
        a = n1.agent("a")
        await n1.wait_for_agents("b", timeout=5)
        assert (await a.request("b", "add", 41, timeout=5)).payload == 42
        assert n1.peers == ["n2"] and n2.peers == ["n1"]
        assert await n1.settled(5) and await n2.settled(5)
        assert n1.endpoint.startswith("memory://")
        stats = await n1.peer_stats("n2", timeout=5)  # the node address works over a broker too
        assert stats["node_id"] == "n2"


class LateRecords(MemoryTransport):
    """Its record reaches the others only once ``release()`` is called (a broker's
    membership path slower than its messages)."""

    held: list[bytes] | None = None

    def put_record(self, data: bytes) -> None:
        if self.held is None:
            super().put_record(data)
        else:
            self.held.append(data)

    def release(self) -> None:
        held, self.held = self.held or [], None
        for data in held:
            super().put_record(data)


async def test_a_requester_whose_record_has_not_come_yet_gets_its_reply() -> None:
    broker = MemoryBroker()
    late = LateRecords(broker)
    async with zmesh.Node("m", transport=late, name="n1") as n1, \
            zmesh.Node("m", transport=MemoryTransport(broker), name="n2") as n2:
        n2.agent("b").add_handler("add", lambda msg: msg.payload + 1)
        await n1.wait_for_agents("b", timeout=5)
        late.held = []  # n1's next records stay with it: n2 never hears of "a" before it answers
        a = n1.agent("a")
        assert (await a.request("b", "add", 1, timeout=5)).payload == 2
        assert "a" not in n2.registry.agents()
        assert n2.dead_letters.total == 0
        late.release()
        await wait_for(lambda: "a" in n2.registry.agents(), 5, "the record once released")


async def test_another_mesh_on_the_same_broker_is_not_seen() -> None:
    broker = MemoryBroker()
    async with zmesh.Node("m1", transport=MemoryTransport(broker)) as n1, \
            zmesh.Node("m2", transport=MemoryTransport(broker)) as n2:
        n2.agent("b")
        n1.agent("a")
        await asyncio.sleep(0)  # records travel as callbacks: let them run
        assert n1.peers == [] and n2.peers == []
        with pytest.raises(zmesh.AgentNotRegistered):
            await n1.agents["a"].send("b", "x", 1)


async def test_a_request_to_a_node_that_closes_fails_with_peer_lost() -> None:
    async with Mesh("memory") as m:
        n1, n2 = await m.node(), await m.node()
        stuck: list[zmesh.Message] = []
        n2.agent("b").add_handler("never", lambda msg: stuck.append(msg) or zmesh.DEFERRED)  # type: ignore[func-returns-value]
        a = n1.agent("a")
        await m.converged()
        task = asyncio.ensure_future(a.request("b", "never", None, timeout=20))
        await wait_for(lambda: stuck, 5, "the request to arrive")
        await n2.close()
        with pytest.raises(zmesh.PeerLost):
            await task
        assert n1.peers == []


async def test_seeds_and_connect_do_not_apply() -> None:
    broker = MemoryBroker()
    with pytest.raises(zmesh.TransportError, match="meet at its broker"):
        zmesh.Node("m", transport=MemoryTransport(broker), seeds=["tcp://127.0.0.1:1"])
    async with zmesh.Node("m", transport=MemoryTransport(broker)) as node:
        with pytest.raises(zmesh.TransportError, match="broker"):
            node.connect("tcp://127.0.0.1:1")


async def test_a_transport_started_twice_or_on_a_closed_broker_is_a_transport_error() -> None:
    broker = MemoryBroker()
    transport = MemoryTransport(broker)
    async with zmesh.Node("m", transport=transport):
        second = zmesh.Node("m", transport=transport)
        with pytest.raises(zmesh.TransportError, match="started already"):
            await second.start()
    broker.close()
    with pytest.raises(zmesh.TransportError, match="closed"):
        await zmesh.Node("m", transport=MemoryTransport(broker)).start()
    with pytest.raises(TypeError):
        MemoryTransport("not a broker")  # type: ignore[arg-type]


async def test_garbage_from_the_broker_is_counted_never_raised() -> None:
    async with Mesh("memory") as m:
        n1, n2 = await m.node(), await m.node()
        n1.agent("a")
        got: list[Any] = []
        n2.agent("b").add_handler("x", got.append)
        await m.converged()
        raw = MemoryTransport(m.broker)

        class Quiet:
            def __getattr__(self, name: str) -> Any:
                return lambda *args: None

        await raw.start(Quiet(), m.name, "raw", asyncio.get_running_loop())  # type: ignore[arg-type]
        raw.send("b", b"\xc1 not msgpack")
        raw.send("b", msgpack.packb([99, "not a message"]))
        raw.put_record(msgpack.packb({"not": "a record"}))
        raw.put_record(b"\xc1")
        await wait_for(lambda: n2.stats()["dropped_total"] >= 3 and n1.stats()["dropped_total"] >= 2, 5,
                       "the garbage to be counted")
        assert got == [] and "raw" not in n1.peers
        await raw.close()
        await n1.agents["a"].send("b", "x", 1)  # and the mesh works on
        await wait_for(lambda: got, 5, "a real message")


class _Declares(MessageTransport):
    """A MessageTransport whose capabilities say it moves frames."""

    capabilities = TransportCapabilities(level="frame")

    async def start(self, host: MessageHost, mesh: str, node_id: str, loop: asyncio.AbstractEventLoop) -> None: ...
    def listen(self, address: str) -> None: ...
    def unlisten(self, address: str) -> None: ...
    def send(self, address: str, data: bytes) -> None: ...
    def subscribe(self, pattern: str) -> None: ...
    def unsubscribe(self, pattern: str) -> None: ...
    def publish(self, topic: str, data: bytes) -> None: ...
    def put_record(self, data: bytes) -> None: ...
    async def close(self) -> None: ...


def test_a_transport_whose_capabilities_contradict_its_kind_is_refused() -> None:
    with pytest.raises(zmesh.TransportError, match="declares level 'frame'"):
        zmesh.Node("m", transport=_Declares())
    frames = InprocTransport()
    object.__setattr__(frames, "capabilities", TransportCapabilities(level="message"))
    with pytest.raises(zmesh.TransportError, match="declares level 'message'"):
        zmesh.Node("m", transport=frames)


def test_the_architecture_doc_names_every_member_of_both_seams() -> None:
    """docs/architecture.md is what a broker transport's author reads: it must name it all."""
    import re
    from pathlib import Path

    from zmesh._runtime.port import MeshPort, MeshSink

    doc = (Path(__file__).resolve().parent.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = []
    for interface in (MeshPort, MeshSink, MessageTransport, MessageHost):
        names = {n for n in vars(interface) if not n.startswith("_")} | set(getattr(interface, "__annotations__", {}))
        missing += [f"{interface.__name__}.{n}" for n in sorted(names) if not re.search(rf"`(?:host\.)?{n}\b", doc)]
    assert not missing, missing
