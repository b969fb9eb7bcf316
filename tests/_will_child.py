"""A node that hosts an agent with a last will, for tests/test_wills.py.

    python -m tests._will_child MESH TRANSPORT AGENT TOPIC

TRANSPORT: a broker URL, or a ZeroMQ seed endpoint (``tcp://...``). Prints
``ready`` once the agent is registered and every peer has its record, then
serves until it is killed, or until a line on stdin says ``close`` (a goodbye).
"""

from __future__ import annotations

import asyncio
import sys

import zmesh


async def main(mesh: str, transport: str, agent_id: str, topic: str) -> None:
    if transport.startswith("tcp://"):
        node = zmesh.Node(mesh, name="dying", seeds=[transport], discovery=False)
    else:
        node = zmesh.Node(mesh, name="dying", transport=transport)
    async with node:
        node.agent(agent_id, will=(topic, {"agent": agent_id, "state": "gone"}))
        await node.settled(10)
        print("ready", flush=True)
        line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        if line.strip() != "close":
            await asyncio.Event().wait()
    print("closed", flush=True)


if __name__ == "__main__":
    zmesh.run(main(*sys.argv[1:5]))
