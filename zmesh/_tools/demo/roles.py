"""The agents of ``zmesh demo`` (internal); each runs in its own process.

``python -m zmesh._tools.demo.app ROLE SEED MESH`` runs one. It stops on SIGTERM,
SIGINT, or when its stdin closes (the demo that started it has gone), and
says goodbye to its peers on the way out.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from typing import Any

from ...agent import Agent
from ...errors import AgentNotRegistered, PeerLost
from ...liveness import LivenessConfig
from ...message import Message
from ...node import Node

__all__ = ["DEMO_LIVENESS", "run_role"]

#: Fast liveness, so the demo's story fits in seconds.
DEMO_LIVENESS = LivenessConfig(heartbeat=0.25, evasive_after=1.0, expire_after=2.0)


def _planner(node: Node) -> Agent:
    me = node.agent("planner", capabilities=("plan",))

    @me.on("plan.make")
    async def plan(msg: Message) -> Any:
        started = time.perf_counter()
        researchers = node.registry.find("research")
        if not researchers:
            return {"error": "no researcher in the mesh", "after_ms": 0.0}
        try:
            facts, outline = await asyncio.gather(
                me.request(researchers[0], "research.search", msg.payload, timeout=10),
                me.request("writer", "write.outline", msg.payload, timeout=10),
            )
        except (PeerLost, AgentNotRegistered) as exc:
            return {"error": f"{type(exc).__name__}: {exc}", "after_ms": (time.perf_counter() - started) * 1000}
        return {"researcher": researchers[0], "facts": facts.payload, "outline": outline.payload,
                "ms": (time.perf_counter() - started) * 1000}

    @me.on("plan.handoff")
    async def hand(msg: Message) -> Any:
        target, task = msg.payload["to"], msg.payload["task"]
        result = await me.handoff(target, task, {"owner_was": "planner"}, artifacts=[f"{task}.md"], timeout=5)
        return {"accepted": result.accepted, "mine": sorted(me.tasks)}

    @me.on("plan.note")
    async def note(msg: Message) -> Any:
        await me.send("writer", "notes.add", msg.payload)
        return "sent"

    return me


def _researcher(node: Node, role: str, state: dict[str, Any]) -> Agent:
    me = node.agent(role, capabilities=("research",))

    @me.on("research.search")
    def search(msg: Message) -> Any:
        return [f"{msg.payload['q']}: fact {i} (from {role})" for i in range(3)]

    @me.on("research.summarize")
    async def summarize(msg: Message) -> Any:
        return await me.delegate("writer", msg, topic="write.summary", timeout=5)  # the writer answers the caller

    @me.on("research.publish")
    async def publish(msg: Message) -> Any:
        return await me.broadcast("findings.new", msg.payload)

    @me.on_handoff
    def take(h: Any) -> bool:
        state["notes"].append(f"took {h.task_id} from {h.sender}")
        return True

    return me


async def _writer(node: Node, state: dict[str, Any]) -> Agent:
    me = node.agent("writer", capabilities=("write",))
    await me.subscribe("findings.*", lambda m: state["findings"].append(m.payload))

    @me.on("write.outline")
    def outline(msg: Message) -> Any:
        return ["intro", f"what we know about {msg.payload['q']}", "next steps"]

    @me.on("write.summary")
    def summary(msg: Message) -> Any:
        return {"summary": f"summary of {msg.payload['q']}", "seen_sender": msg.sender,
                "correlation_id": msg.correlation_id}

    @me.on("notes.add")
    def add_note(msg: Message) -> None:
        state["notes"].append(msg.payload)

    @me.on_handoff
    def accept(h: Any) -> bool:
        return True

    return me


async def run_role(role: str, seed: str, mesh: str) -> None:
    async with Node(mesh, name=f"{role}-node", seeds=[seed], interfaces="local",
                    discovery=False, liveness=DEMO_LIVENESS) as node:
        state: dict[str, Any] = {"findings": [], "notes": []}
        if role == "planner":
            me = _planner(node)
        elif role.startswith("researcher"):
            me = _researcher(node, role, state)
        else:
            me = await _writer(node, state)

        @me.on("mesh.view")
        def view(msg: Message) -> Any:
            return {"agents": sorted(node.registry.agents()),
                    "subscribers": len(node.registry.subscribers("findings.new"))}

        @me.on("status")
        def status(msg: Message) -> Any:
            return {"tasks": sorted(me.tasks), "findings": state["findings"], "notes": state["notes"]}

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        stdin = sys.stdin.fileno()
        loop.add_reader(stdin, lambda: stop.set() if not os.read(stdin, 1) else None)
        try:
            await stop.wait()
        finally:
            loop.remove_reader(stdin)
