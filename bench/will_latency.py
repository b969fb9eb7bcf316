"""How long after a SIGKILL an agent's last will reaches a subscriber.

    python bench/will_latency.py [TRIES] [--transport URL]   # default 10 tries, zmq

This process hosts a survivor node with a watcher subscribed to the will's
topic. Each try starts a child process whose agent leaves a will, waits
until the survivor knows the agent, SIGKILLs the child and notes the time;
the watcher notes when the will arrives (one clock, ``time.monotonic()``).
Over ZeroMQ the survivor hears of the death when the connection drops;
over a broker when the broker does (MQTT's own last will of the
connection) or when the dead node's record expires (NATS, Redis, the file
bus: ``expiry``, 4 s by default). Prints the median, the lowest and the
highest, in milliseconds.
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time

os.environ.setdefault("ZMESH_INTERFACES", "127.0.0.1")

import zmesh  # noqa: E402


async def child(mesh: str, transport: str, seed: str, agent_id: str) -> None:
    seeds = [seed] if transport == "zmq" else []
    async with zmesh.Node(mesh, name=agent_id, seeds=seeds, transport=transport, discovery=False) as node:
        node.agent(agent_id, will=(f"status.{agent_id}", "gone"))
        await node.wait_for_agents("watcher", timeout=20)
        await node.settled(10)
        print("ready", flush=True)
        await asyncio.Event().wait()


async def main(tries: int, transport: str) -> None:
    mesh = f"will-{os.getpid()}"
    async with zmesh.Node(mesh, name="survivor", transport=transport, discovery=False) as node:
        watcher = node.agent("watcher")
        arrived: asyncio.Queue[tuple[str, float]] = asyncio.Queue()

        @watcher.on("status.*", inline=True)
        def will(msg: zmesh.Message) -> None:
            arrived.put_nowait((msg.topic, time.monotonic()))

        await watcher.subscribe("status.*")
        seed = node.endpoint if transport == "zmq" else "-"
        took = []
        for i in range(tries):
            agent_id = f"worker{i}"
            proc = subprocess.Popen([sys.executable, __file__, "--child", mesh, transport, seed, agent_id],
                                    stdout=subprocess.PIPE, text=True)
            try:
                assert proc.stdout is not None
                line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30)
                assert line.strip() == "ready", line
                await node.wait_for_agents(agent_id, timeout=20)
                killed_at = time.monotonic()
                proc.send_signal(signal.SIGKILL)
                topic, seen_at = await asyncio.wait_for(arrived.get(), 60)
                assert topic == f"status.{agent_id}", topic
                took.append((seen_at - killed_at) * 1e3)
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.wait(10)
                if proc.stdout is not None:
                    proc.stdout.close()
        print(f"a will after SIGKILL ({transport}), {tries} tries: median {statistics.median(took):.1f} ms, "
              f"min {min(took):.1f}, max {max(took):.1f}; published by this node: {node.stats()['wills_published']}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        asyncio.run(child(*sys.argv[2:6]))
    else:
        args = sys.argv[1:]
        where = "zmq"
        if "--transport" in args:
            at = args.index("--transport")
            where = args[at + 1]
            del args[at:at + 2]
        asyncio.run(main(int(args[0]) if args else 10, where))
