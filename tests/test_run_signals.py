"""``zmesh.run``: SIGTERM and SIGINT close a process's nodes cleanly.

Peers hear a goodbye at once (the ``peer_left`` event says ``left``, which
only a BYE gives: a killed process reads "lost its connection", a frozen one
"expired"), and the process exits with 128 + the signal number and no
traceback.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import pytest

import zmesh

from .helpers import Mesh, wait_for

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(60)]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


async def _left(events: object, node_id: str) -> zmesh.MeshEvent:
    while True:
        event = await asyncio.wait_for(events.__anext__(), 10)  # type: ignore[attr-defined]
        if event.kind == "peer_left" and event.node_id == node_id:
            return event


@pytest.mark.parametrize(
    ("sig", "style"),
    [(signal.SIGTERM, "bare"), (signal.SIGTERM, "with"), (signal.SIGINT, "bare"), (signal.SIGINT, "with")],
)
async def test_a_signal_closes_the_nodes_and_peers_hear_goodbye(sig: signal.Signals, style: str) -> None:
    async with Mesh("zmq") as m:
        node = await m.node(name="parent")
        node.agent("parent")
        events = node.events()
        child = subprocess.Popen(
            [sys.executable, "-m", "tests._run_child", m.name, node.endpoint, style],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "ZMESH_INTERFACES": "127.0.0.1"},
        )
        try:
            await node.wait_for_agents("child-agent", timeout=20)
            assert node.peers == ["child"]
            child.send_signal(sig)
            left = await _left(events, "child")
            assert left.detail == "left"  # said goodbye: not "lost its connection", not "expired"
            assert node.registry.node_of("child-agent") is None
            await wait_for(lambda: child.poll() is not None, 10, "the child to exit")
            _, stderr = child.communicate(timeout=5)
            assert child.returncode == 128 + sig, stderr
            assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
        finally:
            if child.poll() is None:
                child.kill()
            child.communicate(timeout=5)


def test_run_returns_what_main_returns_and_closes_nodes_left_open() -> None:
    seen: list[zmesh.Node] = []

    async def main() -> str:
        node = zmesh.Node("run-test", transport="inproc")
        await node.start()
        seen.append(node)
        return "done"

    assert zmesh.run(main()) == "done"
    assert seen[0].closed


def test_run_wants_a_coroutine() -> None:
    async def main() -> None:
        pass

    with pytest.raises(TypeError, match=r"zmesh.run\(main\(\)\)"):
        zmesh.run(main)  # type: ignore[arg-type]
