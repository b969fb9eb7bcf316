"""``zmesh gateway`` as its users run it: two gateway processes between a
ZeroMQ mesh and a NATS mesh (a real nats-server on 127.0.0.1); the one that
stands in is killed, the standby takes over; SIGTERM ends one cleanly."""

from __future__ import annotations

import asyncio
import json
import signal
import time

import pytest

import zmesh

from .cli_process import CliProcess
from .helpers import Mesh, wait_for

pytestmark = [pytest.mark.timeout(90), pytest.mark.multiprocess]


async def _answers(asker: zmesh.Agent, target: str, within: float) -> float:
    """Seconds until a request from ``asker`` to ``target`` is answered (failures retried until then)."""
    started = time.monotonic()
    last: Exception | None = None
    while time.monotonic() - started < within:
        try:
            reply = await asker.request(target, "ping", None, timeout=2)
            assert reply.payload == f"pong from {target} to {asker.id}"
            return time.monotonic() - started
        except (zmesh.AgentNotRegistered, zmesh.PeerLost, zmesh.Timeout) as exc:
            last = exc
            await _pause()
    raise AssertionError(f"{target} did not answer {asker.id} within {within} s; the last error: {last!r}")


async def _pause() -> None:
    await asyncio.sleep(0.1)  # between two tries of a request that failed: a retry's pace, not a wait for state


async def test_the_standby_gateway_process_takes_over_when_the_leader_is_killed(nats_url: str) -> None:
    async with Mesh("zmq") as lan, Mesh("nats") as wan:
        lan_node = await lan.node()
        wan_node = await wan.node()
        alice, bob = lan_node.agent("alice"), wan_node.agent("bob")
        for agent in (alice, bob):
            agent.add_handler("ping", lambda msg, me=agent.id: f"pong from {me} to {msg.sender}")
        common = ("--mesh", lan.name, "--seed", lan_node.endpoint, "--to", nats_url, "--to-mesh", wan.name,
                  "--domain", "lan1")
        async with CliProcess("gateway", *common, "--name", "gw-a") as first:
            await first.wait_for_output(lambda out: len(out) >= 1, 20, "the first gateway's line")
            line = json.loads(first.out[0])
            assert line["active"] is True and line["domains"] == ["lan1", "nats"] and line["to"] == nats_url
            async with CliProcess("gateway", *common, "--name", "gw-b") as second:
                await second.wait_for_output(lambda out: len(out) >= 1, 20, "the second gateway's line")
                assert json.loads(second.out[0])["active"] is False
                await _answers(bob, "alice", 20)
                await _answers(alice, "bob", 20)
                assert lan_node.registry.node_of("bob") == line["node"]
                first.proc.kill()
                await first.finish()
                took = await _answers(bob, "alice", 30)
                await _answers(alice, "bob", 30)
                assert lan_node.registry.node_of("bob") == json.loads(second.out[0])["node"]
                print(f"takeover after a kill: alice answered bob again after {took:.2f} s")
                second.proc.send_signal(signal.SIGTERM)
                assert await second.finish() == 143
                await wait_for(lambda: "alice" not in wan_node.registry.agents()
                               and "bob" not in lan_node.registry.agents(), 10, "the proxies to leave with it")
