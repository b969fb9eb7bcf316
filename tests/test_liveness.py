"""Liveness apart from handlers, with real processes and the default settings.

This test's process runs node A; node B runs in a child process
(tests/_stall_node.py, default LivenessConfig). ZMTP heartbeats on A's link
to B notice a killed B at once and a frozen B within the link timeout,
while a B whose event loop is blocked by a handler keeps answering them
and so stays in the mesh.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import AsyncIterator

import pytest

import zmesh
from tests.test_stall import Child

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(60)]

DEFAULT = zmesh.LivenessConfig()
KILL_NOTICED = 1.0  # the bound for a killed process
FREEZE_NOTICED = 5.0  # ... and for a frozen one or a cut link
BLOCKED_FOR = 8.0  # well past the link timeout, and past the old 3 s expiry
assert DEFAULT.link_heartbeat is not None and BLOCKED_FOR > 2 * DEFAULT.link_timeout


@contextlib.asynccontextmanager
async def pair(tmp_path: Path) -> AsyncIterator[tuple[zmesh.Node, zmesh.Agent, Child]]:
    mesh = f"live-{os.getpid()}-{time.monotonic_ns() % 10**8}"
    async with zmesh.Node(mesh, name="A-node", discovery=False) as node:
        a = node.agent("A")
        b = Child("B", mesh, node.endpoint, tmp_path / "B.stderr", liveness="default")
        try:
            b.wait_line(lambda line: "ready" in line, 20, "ready line")
            await node.wait_for_agents("B", timeout=20)
            assert (await a.request("B", "echo", timeout=10)).payload["agent"] == "B"
            yield node, a, b
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(b.proc.pid, signal.SIGCONT)
            b.close()


async def wait_gone(node: zmesh.Node, since: float, limit: float) -> float:
    while "B-node" in node.peers:
        if time.monotonic() - since > limit + 5:
            raise AssertionError(f"B still a peer {time.monotonic() - since:.1f} s later; stats {node.stats()}")
        await asyncio.sleep(0.005)
    return time.monotonic() - since


async def test_a_killed_peer_is_noticed_within_a_second(tmp_path: Path) -> None:
    async with pair(tmp_path) as (node, a, b):
        pending = asyncio.ensure_future(a.request("B", "work", 30.0, timeout=60))
        await node.wait_until(lambda: node.stats()["pending_requests"] == 1, 5, "the request to leave")
        killed = time.monotonic()
        b.proc.send_signal(signal.SIGKILL)
        with pytest.raises(zmesh.PeerLost):
            await pending
        failed_after = time.monotonic() - killed
        gone_after = await wait_gone(node, killed, KILL_NOTICED)
        print(f"SIGKILL: request failed after {failed_after:.3f} s, peer removed after {gone_after:.3f} s")
        assert failed_after < KILL_NOTICED and gone_after < KILL_NOTICED


async def test_a_frozen_peer_is_noticed_within_five_seconds_and_rejoins_when_thawed(tmp_path: Path) -> None:
    async with pair(tmp_path) as (node, a, b):
        frozen = time.monotonic()
        b.proc.send_signal(signal.SIGSTOP)
        gone_after = await wait_gone(node, frozen, FREEZE_NOTICED)
        print(f"SIGSTOP: peer removed after {gone_after:.3f} s")
        assert gone_after < FREEZE_NOTICED
        b.proc.send_signal(signal.SIGCONT)
        thawed = time.monotonic()
        await node.wait_until(lambda: "B-node" in node.peers, 20, "B to rejoin after SIGCONT")
        print(f"SIGCONT: rejoined after {time.monotonic() - thawed:.3f} s")
        assert (await a.request("B", "echo", timeout=10)).payload["agent"] == "B"


async def test_a_peer_whose_loop_is_blocked_by_a_handler_stays_and_answers_afterwards(tmp_path: Path) -> None:
    async with pair(tmp_path) as (node, a, b):
        seen: list[zmesh.MeshEvent] = []

        async def watch() -> None:
            async for event in node.events():
                seen.append(event)

        watcher = asyncio.ensure_future(watch())
        stall = asyncio.ensure_future(a.request("B", "stall_async", BLOCKED_FOR, timeout=BLOCKED_FOR + 30))
        await node.wait_until(lambda: any("stall_started" in line for line in b.lines), 10, "the stall to start")
        started = time.monotonic()
        # Asked while B's loop is blocked, with a timeout long enough: answered afterwards.
        echo = asyncio.ensure_future(a.request("B", "echo", timeout=BLOCKED_FOR + 30))
        while not stall.done():
            assert "B-node" in node.peers, f"B was dropped {time.monotonic() - started:.1f} s into the stall"
            await asyncio.sleep(0.05)
        assert stall.result().payload == "stalled"
        assert (await echo).payload["agent"] == "B"
        assert time.monotonic() - started >= BLOCKED_FOR - 1  # the stall really happened
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        assert not [e for e in seen if e.kind in ("peer_left", "peer_evasive") and e.node_id == "B-node"], seen
        assert node.stats()["dropped_total"] == 0, node.stats()["dropped"]
