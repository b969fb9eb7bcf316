"""Agents in two OS processes over ZeroMQ (local-only), joined through a seed.

Run: python examples/two_processes.py
The parent hosts "asker"; it starts a child process hosting "answerer" that
joins through the parent's endpoint.
"""

import asyncio
import subprocess
import sys

import zmesh

CHILD = r"""
import asyncio, sys, zmesh

async def main(seed):
    async with zmesh.Node("two-processes", seeds=[seed], discovery=False) as node:
        answerer = node.agent("answerer", capabilities=("shout",))
        answerer.add_handler("shout", lambda msg: msg.payload.upper())
        done = asyncio.Event()
        answerer.add_handler("bye", lambda msg: done.set())
        await done.wait()
        await node.settled()

asyncio.run(main(sys.argv[1]))
"""


async def main() -> None:
    async with zmesh.Node("two-processes", discovery=False) as node:
        asker = node.agent("asker")
        child = subprocess.Popen([sys.executable, "-c", CHILD, node.endpoint])
        try:
            await node.wait_for_agents("answerer", timeout=15)
            print("found by capability:", node.registry.find("shout"))
            reply = await asker.request("answerer", "shout", "hello from another process", timeout=5)
            print(reply.payload)
            await asker.send("answerer", "bye")
        finally:
            child.wait(timeout=15)


if __name__ == "__main__":
    asyncio.run(main())
