"""Test helpers: a Mesh of nodes that are all closed at the end, and polling waits."""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import zmesh
from zmesh.transport.memory import MemoryBroker, MemoryTransport

_mesh_ids = itertools.count()

#: Where the brokers the tests started listen, by transport name (tests/brokers.py fills it).
BROKERS: dict[str, str] = {}

FROZEN_WORLD = zmesh.LivenessConfig(heartbeat=30.0, evasive_after=1800.0, expire_after=3600.0)


async def wait_for(predicate: Callable[[], Any], timeout: float = 5.0, what: str = "condition") -> None:
    """Poll ``predicate`` until it is true; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.005)


class Mesh:
    """``async with Mesh(transport) as m``: ``await m.node()`` adds a started
    node of a mesh unique to this test; all are closed on exit."""

    def __init__(self, transport: str, **defaults: Any) -> None:
        self.transport = transport
        self.name = f"t{next(_mesh_ids)}-{time.monotonic_ns() % 10**9}"
        self.defaults = defaults
        self.nodes: list[zmesh.Node] = []
        self.broker = MemoryBroker()  # where "memory" nodes meet

    async def node(self, **kwargs: Any) -> zmesh.Node:
        options = {**self.defaults, **kwargs}
        if self.transport == "zmq" and self.nodes and "seeds" not in options:
            options["seeds"] = [self.nodes[0].endpoint]
        if self.transport == "zmq":
            options.setdefault("discovery", False)
        if isinstance(options.get("clock"), zmesh.FakeClock):
            # Liveness runs on the node's clock too. A fake clock jumps while
            # real peers cannot answer, so expiry stays beyond any jump a test makes.
            options.setdefault("liveness", FROZEN_WORLD)
        transport: Any = self.transport
        if self.transport == "memory":
            transport = MemoryTransport(self.broker)
        elif self.transport == "file":
            transport = f"{BROKERS['file']}/{self.name}"  # a bus directory per mesh, in the session's
        elif self.transport in BROKERS:
            transport = BROKERS[self.transport]  # the URL of the server tests/brokers.py started
        transport = options.pop("transport", transport)  # a test's own transport object (its options)
        node = zmesh.Node(self.name, transport=transport, **options)
        self.nodes.append(node)
        await node.start()
        return node

    async def converged(self, timeout: float = 5.0) -> None:
        """Wait until every node sees every node and every agent."""
        want_nodes = {n.id for n in self.nodes if not n.closed}
        want_agents = {a for n in self.nodes if not n.closed for a in n.agents}

        def done() -> bool:
            return all(
                {r.node_id for r in n.registry.nodes()} == want_nodes
                and set(n.registry.agents()) == want_agents
                for n in self.nodes
                if not n.closed
            )

        try:
            await wait_for(done, timeout, "the mesh to converge")
        except AssertionError:
            seen = {n.id: ({r.node_id for r in n.registry.nodes()}, set(n.registry.agents()), n.stats()["transport"])
                    for n in self.nodes if not n.closed}
            raise AssertionError(f"the mesh did not converge within {timeout} s: want nodes {want_nodes} "
                                 f"and agents {want_agents}; each node sees {seen}") from None
        for n in self.nodes:
            if not n.closed:
                assert await n.settled(timeout)

    async def __aenter__(self) -> Mesh:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for node in reversed(self.nodes):
            await node.close()


def rest_of_output(child: "subprocess.Popen[str]", timeout: float = 10.0) -> str:
    """What ``child`` (killed, or told to stop) printed after the lines already read
    with readline(). Not ``communicate(timeout=...)``: that reads the pipe itself,
    and loses what readline() had already taken into the file's buffer."""
    child.wait(timeout)
    if child.stdout is None or child.stdout.closed:
        return ""  # read before
    out = child.stdout.read()
    child.stdout.close()
    return out


def start_qos_child(url: str, mesh: str, block_at: int) -> "subprocess.Popen[str]":
    """tests/_qos_child.py on broker ``url``: agent ``rx`` of ``mesh``, printing each
    job's ``n`` once handled, stuck forever at ``block_at``; returned once it is ready."""
    here = Path(__file__).resolve().parent
    child = subprocess.Popen([sys.executable, str(here / "_qos_child.py"), url, mesh, "1.0", str(block_at)],
                             stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(here.parent)})
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    return child


def handled_by(child: "subprocess.Popen[str]") -> list[int]:
    """The numbers a (killed or stopped) :func:`start_qos_child` printed after those read."""
    return [int(line) for line in rest_of_output(child).split()]
