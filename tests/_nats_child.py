"""A node on NATS hosting agent ``x`` (an echo), for tests that kill it: ``python _nats_child.py URL MESH``."""

import asyncio
import sys

import zmesh


async def main(url: str, mesh: str) -> None:
    async with zmesh.Node(mesh, transport=url) as node:
        node.agent("x").add_handler("echo", lambda msg: msg.payload, inline=True)
        print("ready", flush=True)
        await asyncio.Event().wait()


asyncio.run(main(sys.argv[1], sys.argv[2]))
