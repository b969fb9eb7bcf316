"""Nodes find each other by mDNS on 127.0.0.1 with no seeds; other meshes stay apart."""

from __future__ import annotations

import os
import time

import pytest

import zmesh

pytestmark = pytest.mark.timeout(30)


async def test_nodes_without_seeds_discover_each_other_and_ignore_other_meshes() -> None:
    mesh = f"mdns-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    async with zmesh.Node(mesh) as n1, zmesh.Node(mesh) as n2, zmesh.Node(mesh + "-other") as stranger:
        n1.agent("a")
        b = n2.agent("b")
        stranger.agent("s")
        b.add_handler("echo", lambda msg: msg.payload)
        await n1.wait_for_agents("b", timeout=10)
        assert (await n1.agents["a"].request("b", "echo", 5, timeout=5)).payload == 5
        assert n1.peers == [n2.id]
        assert stranger.peers == []
        assert n1.registry.node_of("s") is None
        assert n1.endpoint.startswith("tcp://127.0.0.1:")


async def test_discovery_can_be_turned_off() -> None:
    mesh = f"mdns-off-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    async with zmesh.Node(mesh, discovery=False) as n1, zmesh.Node(mesh) as n2:
        n2.agent("b")
        assert n1._mesh.discovery is None
        with pytest.raises(zmesh.Timeout):
            await n1.wait_for_agents("b", timeout=1.0)
        # a seed still works where discovery is off
        n1.connect(n2.endpoint)
        await n1.wait_for_agents("b", timeout=5)


async def test_bad_interfaces_setting_is_a_clear_error() -> None:
    with pytest.raises(zmesh.TransportError, match="interfaces"):
        async with zmesh.Node("x", interfaces="no-such-interface0"):
            pass


async def test_a_seed_spelled_localhost_is_recognised_once_answered() -> None:
    mesh = f"seed-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    async with zmesh.Node(mesh, discovery=False) as n1:
        port = n1.endpoint.rsplit(":", 1)[1]
        async with zmesh.Node(mesh, discovery=False, seeds=[f"tcp://localhost:{port}"]) as n2:
            await n2.wait_until(lambda: n2.peers == [n1.id], 5, "join")
            assert n2._mesh.engine.members.knocks == {}  # the seed became the peer's link; no HELLOs retried
