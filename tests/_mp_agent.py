"""A generic agent process for the multi-process tests.

    python -m tests._mp_agent AGENT_ID MESH SEED [NODE_NAME]

Hosts one agent whose handlers let the test drive every primitive. Prints
"ready <endpoint>" once started; exits when stdin closes or on SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

import zmesh


async def main(agent_id: str, mesh: str, seed: str, name: str) -> None:
    liveness = zmesh.LivenessConfig(heartbeat=0.2, evasive_after=0.6, expire_after=1.5)
    seeds = [seed] if seed != "-" else []
    async with zmesh.Node(mesh, name=name, seeds=seeds, discovery=False, liveness=liveness) as node:
        me = node.agent(agent_id, capabilities=("worker",))
        received: list[Any] = []

        @me.on("whoami")
        def whoami(msg: zmesh.Message) -> Any:
            return {"agent": agent_id, "pid": os.getpid(), "sender": msg.sender,
                    "correlation_id": msg.correlation_id}

        @me.on("ask")
        async def ask(msg: zmesh.Message) -> Any:
            replies = await asyncio.gather(
                *(me.request(t, "whoami", timeout=10) for t in msg.payload["targets"]),
                return_exceptions=True,
            )
            return [r.payload if isinstance(r, zmesh.Message) else f"{type(r).__name__}" for r in replies]

        @me.on("delegate")
        async def delegate(msg: zmesh.Message) -> Any:
            return await me.delegate(msg.payload["to"], msg, topic="whoami", timeout=10)

        @me.on("handoff")
        async def handoff(msg: zmesh.Message) -> Any:
            result = await me.handoff(msg.payload["to"], msg.payload["task"], timeout=10)
            return {"accepted": result.accepted, "mine": sorted(me.tasks)}

        @me.on("subscribe")
        async def subscribe(msg: zmesh.Message) -> Any:
            await me.subscribe(msg.payload, lambda m: received.append([m.topic, m.payload]))
            return "ok"

        @me.on("broadcast")
        async def broadcast(msg: zmesh.Message) -> Any:
            return await me.broadcast(msg.payload["topic"], msg.payload["payload"])

        @me.on("received")
        def get_received(msg: zmesh.Message) -> Any:
            return received

        @me.on("tasks")
        def tasks(msg: zmesh.Message) -> Any:
            return sorted(me.tasks)

        @me.on("claim")
        def claim(msg: zmesh.Message) -> Any:
            me.claim(msg.payload)
            return sorted(me.tasks)

        @me.on("find")
        def find(msg: zmesh.Message) -> Any:
            return node.registry.find("summarize")

        @me.on("capabilities")
        def set_capabilities(msg: zmesh.Message) -> Any:
            me.capabilities = msg.payload  # republished to every peer at once
            return list(me.capabilities)

        @me.on_handoff
        def accept(h: zmesh.Handoff) -> bool:
            return True

        log_path = os.environ.get("ZMESH_TEST_LOG")

        @me.on("note")
        async def note(msg: zmesh.Message) -> None:
            """Append the payload to $ZMESH_TEST_LOG, one line per handling (it outlives a SIGKILL)."""
            await asyncio.sleep(0.002)  # a handler that takes a moment: some notes are always in flight
            if log_path:
                fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
                try:
                    os.write(fd, f"{msg.payload}\n".encode())
                finally:
                    os.close(fd)

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        fd = sys.stdin.fileno()
        loop.add_reader(fd, lambda: None if os.read(fd, 1) else stop.set())
        print(f"ready {node.endpoint}", flush=True)
        await stop.wait()


if __name__ == "__main__":
    agent, mesh, seed = sys.argv[1:4]
    name = sys.argv[4] if len(sys.argv) > 4 else f"{agent}-node"
    asyncio.run(main(agent, mesh, seed, name))
