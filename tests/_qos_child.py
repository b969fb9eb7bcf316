"""A node on a broker hosting agent ``rx``, for tests that kill it mid-stream:
``python _qos_child.py URL MESH ACK_WAIT BLOCK_AT`` (URL: nats://, redis:// or file://).
Its handler of ``job`` prints each message's ``n`` once it is done with it,
and never ends for ``n == BLOCK_AT`` (one at a time: what comes after it
waits, unacknowledged)."""

import asyncio
import sys

import zmesh
from zmesh.transport import MessageTransport


def transport(url: str, ack_wait: float) -> MessageTransport:
    if url.startswith("file://"):
        from zmesh.transport.file import FileTransport

        return FileTransport(url, expiry=30.0)
    if url.startswith("redis://"):
        from zmesh.transport.redis import RedisTransport

        return RedisTransport(url, ack_wait=ack_wait, expiry=30.0)
    from zmesh.transport.nats import NatsTransport

    return NatsTransport(url, ack_wait=ack_wait, expiry=30.0)


async def main(url: str, mesh: str, ack_wait: float, block_at: int) -> None:
    async with zmesh.Node(mesh, transport=transport(url, ack_wait)) as node:
        async def job(msg: zmesh.Message) -> None:
            if msg.payload["n"] == block_at:
                await asyncio.Event().wait()
            print(msg.payload["n"], flush=True)

        print("ready", flush=True)  # before the agent: what it prints after this is all numbers
        node.agent("rx", concurrency=1).add_handler("job", job)
        await asyncio.Event().wait()


asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])))
