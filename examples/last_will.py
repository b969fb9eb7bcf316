"""A last will: the mesh says an agent is gone when its process is killed.

Run: python examples/last_will.py
The parent hosts a supervisor that watches ``agents.*.status``. A child
process hosts "worker-1", which says it is up and leaves a will saying it
is gone. The parent SIGKILLs the child (no goodbye): a surviving node
broadcasts the will. A second worker that closes in good order leaves no
will behind.
"""

import asyncio
import signal
import subprocess
import sys

import zmesh

CHILD = r"""
import asyncio, sys, zmesh

async def main(seed, name, how):
    async with zmesh.Node("last-will", seeds=[seed], discovery=False) as node:
        worker = node.agent(name, will=(f"agents.{name}.status", {"state": "gone"}))
        await node.wait_for_agents("supervisor", timeout=15)
        await node.settled()
        await worker.broadcast(f"agents.{name}.status", {"state": "up"})
        if how == "close":
            await worker.close()  # a goodbye: its will is withdrawn
            return
        await asyncio.Event().wait()  # until killed

asyncio.run(main(*sys.argv[1:4]))
"""


async def main() -> None:
    async with zmesh.Node("last-will", discovery=False) as node:
        supervisor = node.agent("supervisor")
        states: asyncio.Queue[tuple[str, str, str]] = asyncio.Queue()

        @supervisor.on("agents.*.status", inline=True)
        def status(msg: zmesh.Message) -> None:
            states.put_nowait((msg.topic.split(".")[1], msg.payload["state"], msg.sender))

        await supervisor.subscribe("agents.*.status")
        for name, how in (("worker-1", "kill"), ("worker-2", "close")):
            child = subprocess.Popen([sys.executable, "-c", CHILD, node.endpoint, name, how])
            try:
                agent, state, _ = await asyncio.wait_for(states.get(), 15)
                print(f"{agent}: {state}")
                if how == "kill":
                    child.send_signal(signal.SIGKILL)
                    agent, state, sender = await asyncio.wait_for(states.get(), 15)
                    by = "this node" if sender == f"zmesh.node.{node.id}" else sender
                    print(f"{agent}: {state} (its will, broadcast by {by})")
                else:
                    await node.wait_until(lambda: name not in node.registry.agents(), 15)
                    print(f"{name} closed; wills published by this node: {node.stats()['wills_published']}")
            finally:
                if child.poll() is None:
                    child.kill()
                child.wait(timeout=15)


if __name__ == "__main__":
    asyncio.run(main())
