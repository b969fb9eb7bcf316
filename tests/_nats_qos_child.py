"""A node on NATS hosting agent ``rx``, for tests that kill it mid-stream:
``python _nats_qos_child.py URL MESH ACK_WAIT BLOCK_AT``. Its handler of
``job`` prints each message's ``n`` once it is done with it, and never ends
for ``n == BLOCK_AT`` (one at a time: what comes after it waits, unacknowledged)."""

import asyncio
import sys

import zmesh
from zmesh.transport.nats import NatsTransport


async def main(url: str, mesh: str, ack_wait: float, block_at: int) -> None:
    transport = NatsTransport(url, ack_wait=ack_wait, expiry=30.0)
    async with zmesh.Node(mesh, transport=transport) as node:
        async def job(msg: zmesh.Message) -> None:
            if msg.payload["n"] == block_at:
                await asyncio.Event().wait()
            print(msg.payload["n"], flush=True)

        print("ready", flush=True)  # before the agent: what it prints after this is all numbers
        node.agent("rx", concurrency=1).add_handler("job", job)
        await asyncio.Event().wait()


asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])))
