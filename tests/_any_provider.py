"""A provider of capability ``crunch`` in a process of its own, for the failover test.

    python -m tests._any_provider AGENT_ID MESH SEED LOG

Each request's payload is written to LOG as ``start N`` when its handler
starts and ``done N`` when it ends (appended, so it outlives a SIGKILL).
Topic ``tokens`` streams ``payload["n"]`` numbers, ``payload["pause"]`` s apart.
Prints ``ready`` once started; exits when stdin closes.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import AsyncIterator

import zmesh


def note(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


async def main(agent_id: str, mesh: str, seed: str, log: str) -> None:
    liveness = zmesh.LivenessConfig(heartbeat=0.2, evasive_after=0.6, expire_after=1.5)
    async with zmesh.Node(mesh, name=f"{agent_id}-node", seeds=[seed], discovery=False, liveness=liveness) as node:
        me = node.agent(agent_id, capabilities=("crunch",), concurrency=8)

        @me.on("crunch")
        async def crunch(msg: zmesh.Message) -> int:
            note(log, f"start {msg.payload}")
            await asyncio.sleep(0.01)
            note(log, f"done {msg.payload}")
            return int(msg.payload)

        @me.on("tokens")
        async def tokens(msg: zmesh.Message) -> AsyncIterator[int]:
            note(log, "stream")
            for i in range(int(msg.payload["n"])):
                yield i
                await asyncio.sleep(float(msg.payload["pause"]))

        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
