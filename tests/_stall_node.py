"""A node process for tests/test_stall.py: one agent whose handlers can stall
the node's event loop.

    python -m tests._stall_node AGENT_ID MESH SEED [LIVENESS]

Runs node ``AGENT_ID-node`` (no discovery, ``SEED`` is a router endpoint or
``-``) hosting agent ``AGENT_ID``. ``LIVENESS`` is ``default`` (the default
LivenessConfig) or ``fast`` (application expiry after 3 s, as the library's
defaults were before link heartbeats; the default). Writes JSON lines to
stdout, each with ``t`` (this process's ``time.time()``):

* ``{"ready": endpoint}`` once started;
* ``{"snap": n, "peers": [...], "agents": [...], "dropped": {...}}`` every
  SNAPSHOT_PERIOD s while the event loop runs (none while it is stalled);
* ``{"stall_started": true}`` / ``{"stall_ended": true}`` around the sleep of
  the ``stall_async``, ``stall_sync`` (inline) and ``block_sync`` (worker
  pool) handlers;
* ``{"id": n, "ok": bool, "payload" | "error": ...}`` for each command.

Reads JSON commands from stdin, one a line:
``{"id": n, "op": "request" | "send", "target": ..., "topic": ..., "payload": ..., "timeout": ...}``.
Exits when stdin closes or on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from typing import Any

import zmesh

SNAPSHOT_PERIOD = 0.1
LIVENESS = {
    "default": zmesh.LivenessConfig(),
    "fast": zmesh.LivenessConfig(heartbeat=0.5, evasive_after=1.5, expire_after=3.0),
}


def emit(**fields: Any) -> None:
    print(json.dumps({"t": time.time(), **fields}), flush=True)


def stall(seconds: float) -> None:
    """Block the calling thread, which is the node's event loop."""
    emit(stall_started=True)
    time.sleep(seconds)
    emit(stall_ended=True)


async def run_command(agent: zmesh.Agent, cmd: dict[str, Any]) -> None:
    try:
        if cmd["op"] == "request":
            reply = await agent.request(cmd["target"], cmd["topic"], cmd.get("payload"),
                                        timeout=float(cmd.get("timeout", 5.0)))
            emit(id=cmd["id"], ok=True, payload=reply.payload)
        else:
            await agent.send(cmd["target"], cmd["topic"], cmd.get("payload"))
            emit(id=cmd["id"], ok=True, payload=None)
    except Exception as exc:  # reported to the test, which decides
        emit(id=cmd["id"], ok=False, error=f"{type(exc).__name__}: {exc}")


async def snapshots(node: zmesh.Node) -> None:
    n = 0
    while True:
        emit(snap=n, peers=node.peers, agents=sorted(node.registry.agents()),
             dropped=node.stats()["dropped"])
        n += 1
        await asyncio.sleep(SNAPSHOT_PERIOD)


async def main(agent_id: str, mesh: str, seed: str, liveness: str) -> None:
    seeds = [seed] if seed != "-" else []
    async with zmesh.Node(mesh, name=f"{agent_id}-node", seeds=seeds, discovery=False,
                          liveness=LIVENESS[liveness]) as node:
        me = node.agent(agent_id)

        @me.on("echo")
        def echo(msg: zmesh.Message) -> Any:
            return {"agent": agent_id, "pid": os.getpid(), "sender": msg.sender}

        @me.on("stall_async")
        async def stall_async(msg: zmesh.Message) -> Any:
            stall(float(msg.payload))
            return "stalled"

        @me.on("work")
        async def work(msg: zmesh.Message) -> Any:
            await asyncio.sleep(float(msg.payload))  # a model call that takes this long
            return {"worked": msg.payload}

        @me.on("stall_sync", inline=True)  # a plain handler asked to run on the loop: it stalls it
        def stall_sync(msg: zmesh.Message) -> Any:
            stall(float(msg.payload))
            return "stalled"

        @me.on("block_sync")  # a plain handler runs in the worker pool: the loop goes on
        def block_sync(msg: zmesh.Message) -> Any:
            stall(float(msg.payload))
            return "blocked"

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        tasks: set[asyncio.Task[None]] = set()
        buffer = b""
        fd = sys.stdin.fileno()

        def on_stdin() -> None:
            nonlocal buffer
            chunk = os.read(fd, 65536)
            if not chunk:
                loop.remove_reader(fd)
                stop.set()
                return
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    task = loop.create_task(run_command(me, json.loads(line)))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)

        loop.add_reader(fd, on_stdin)
        emit(ready=node.endpoint)
        snapper = loop.create_task(snapshots(node))
        try:
            await stop.wait()
        finally:
            loop.remove_reader(fd)
            snapper.cancel()
            for task in tasks:
                task.cancel()
            await asyncio.gather(snapper, *tasks, return_exceptions=True)


if __name__ == "__main__":
    agent, mesh_name, seed_endpoint = sys.argv[1:4]
    asyncio.run(main(agent, mesh_name, seed_endpoint, sys.argv[4] if len(sys.argv) > 4 else "fast"))
