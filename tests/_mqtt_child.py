"""A node on MQTT named NAME hosting agent ``rx``, for tests that kill it:
``python _mqtt_child.py URL MESH NAME BLOCK_AT``. Its handler of ``job``
prints each message's ``n`` once done with it (one at a time), never ends
for ``n == BLOCK_AT``, and it answers ``echo`` requests."""

import asyncio
import sys

import zmesh


async def main(url: str, mesh: str, name: str, block_at: int) -> None:
    async with zmesh.Node(mesh, name=name, transport=url) as node:
        async def job(msg: zmesh.Message) -> None:
            if msg.payload["n"] == block_at:
                await asyncio.Event().wait()
            print(msg.payload["n"], flush=True)

        print("ready", flush=True)  # before the agent: what it prints after this is all numbers
        rx = node.agent("rx", concurrency=1)
        rx.add_handler("job", job)
        rx.add_handler("echo", lambda msg: msg.payload, inline=True)
        await asyncio.Event().wait()


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
