"""``zmesh demo``: three agent processes collaborate, one dies, a newcomer takes over.

Run it with ``zmesh demo``. Everything stays on 127.0.0.1. The agent roles
are in this module too: ``python -m zmesh.demo ROLE SEED MESH`` runs one.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable, TextIO

from .errors import AgentNotRegistered, PeerLost, ZmeshError
from .message import Message
from .node import Node

__all__ = ["run_demo", "DemoFailed"]

EXPIRE_AFTER = 2.0


class DemoFailed(Exception):
    pass


# -- the agents (each runs in its own process) ------------------------------


async def _role(role: str, seed: str, mesh: str) -> None:
    from .liveness import LivenessConfig

    liveness = LivenessConfig(heartbeat=0.25, evasive_after=1.0, expire_after=EXPIRE_AFTER)
    async with Node(mesh, name=f"{role}-node", seeds=[seed], interfaces="local",
                    discovery=False, liveness=liveness) as node:
        state: dict[str, Any] = {"findings": [], "notes": []}
        if role == "planner":
            me = node.agent("planner", capabilities=("plan",))

            @me.on("plan.make")
            async def plan(msg: Message) -> Any:
                started = time.perf_counter()
                try:
                    await node.wait_until(lambda: bool(node.registry.find("research")), 5, "a researcher")
                except ZmeshError:
                    return {"error": "no researcher in the mesh", "after_ms": 5000}
                researchers = node.registry.find("research")
                try:
                    facts, outline = await asyncio.gather(
                        me.request(researchers[0], "research.search", msg.payload, timeout=10),
                        me.request("writer", "write.outline", msg.payload, timeout=10),
                    )
                except (PeerLost, AgentNotRegistered) as exc:
                    return {"error": f"{type(exc).__name__}: {exc}",
                            "after_ms": (time.perf_counter() - started) * 1000}
                return {"researcher": researchers[0], "facts": facts.payload, "outline": outline.payload,
                        "ms": (time.perf_counter() - started) * 1000}

            @me.on("plan.handoff")
            async def hand(msg: Message) -> Any:
                target, task = msg.payload["to"], msg.payload["task"]
                result = await me.handoff(target, task, {"owner_was": "planner"},
                                          artifacts=[f"{task}.md"], timeout=5)
                return {"accepted": result.accepted, "mine": sorted(me.tasks)}

            @me.on("plan.note")
            async def note(msg: Message) -> Any:
                await me.send("writer", "notes.add", msg.payload)
                return "sent"

        elif role.startswith("researcher"):
            me = node.agent(role, capabilities=("research",))

            @me.on("research.search")
            def search(msg: Message) -> Any:
                return [f"{msg.payload['q']}: fact {i} (from {role})" for i in range(3)]

            @me.on("research.summarize")
            async def summarize(msg: Message) -> Any:
                reply = await me.delegate("writer", msg, topic="write.summary", timeout=5)
                return reply  # the writer's answer goes back to the requester

            @me.on("research.publish")
            async def publish(msg: Message) -> Any:
                return await me.broadcast("findings.new", msg.payload)

            @me.on_handoff
            def take(h: Any) -> bool:
                state["notes"].append(f"took {h.task_id} from {h.sender}")
                return True

        else:
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

        @me.on("mesh.view")
        def view(msg: Message) -> Any:
            return {"agents": sorted(node.registry.agents()), "subscribers": len(node.registry.subscribers("findings.new"))}

        @me.on("status")
        def status(msg: Message) -> Any:
            return {"tasks": sorted(me.tasks), "findings": state["findings"], "notes": state["notes"]}

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not os.read(sys.stdin.fileno(), 1) else None)
        await stop.wait()


# -- the narrator ------------------------------------------------------------


class _Narrator:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.t0 = time.perf_counter()

    def say(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.t0:5.2f}s] {text}", file=self.out, flush=True)

    def detail(self, text: str) -> None:
        print(f"         {text}", file=self.out, flush=True)


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise DemoFailed(what)


async def _converged(node: Node, console: Any, roles: tuple[str, ...]) -> None:
    """Wait until every agent process sees every agent (and the writer's subscription)."""
    everyone = sorted(("console",) + roles)
    deadline = time.monotonic() + 15
    pending = list(roles)
    while pending:
        view = (await console.request(pending[0], "mesh.view", timeout=5)).payload
        if view["agents"] == everyone and view["subscribers"] >= 1:
            pending.pop(0)
        elif time.monotonic() > deadline:
            raise DemoFailed(f"{pending[0]} never saw the whole mesh: {view}")
        else:
            await asyncio.sleep(0.02)  # poll again shortly


async def _timed(call: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    result = await call()
    return result, (time.perf_counter() - started) * 1000


async def _demo(out: TextIO) -> None:
    say = _Narrator(out)
    mesh = f"demo-{os.getpid()}"
    procs: dict[str, subprocess.Popen[bytes]] = {}
    from .liveness import LivenessConfig

    liveness = LivenessConfig(heartbeat=0.25, evasive_after=1.0, expire_after=EXPIRE_AFTER)
    async with Node(mesh, name="console-node", interfaces="local", discovery=False, liveness=liveness) as node:
        console = node.agent("console")
        say.say(f"zmesh demo: mesh {mesh!r}, local-only (127.0.0.1); console node at {node.endpoint}")

        def spawn(role: str, seed: str) -> None:
            procs[role] = subprocess.Popen(
                [sys.executable, "-m", "zmesh.demo", role, seed, mesh],
                stdin=subprocess.PIPE,
                env={**os.environ, "ZMESH_INTERFACES": "127.0.0.1"},
            )

        try:
            for role in ("planner", "researcher", "writer"):
                spawn(role, node.endpoint)
            say.say("started 3 agent processes: " + ", ".join(f"{r} (pid {p.pid})" for r, p in procs.items()))
            await node.wait_for_agents("planner", "researcher", "writer", timeout=15)
            await _converged(node, console, ("planner", "researcher", "writer"))
            say.say(f"they found each other: {len(node.registry.nodes())} nodes, agents "
                    f"{sorted(node.registry.agents())}; no broker, no leader")

            q = {"q": "peer-to-peer agent meshes"}
            reply, ms = await _timed(lambda: console.request("planner", "plan.make", q, timeout=10))
            plan = reply.payload
            _check("facts" in plan, f"plan failed: {plan}")
            say.say(f"request   console -> planner 'plan.make'            {ms:6.1f} ms round trip")
            say.detail(f"planner asked {plan['researcher']} and writer concurrently ({plan['ms']:.1f} ms): "
                       f"{len(plan['facts'])} facts, outline {plan['outline']}")

            reply, ms = await _timed(lambda: console.request("researcher", "research.summarize", q, timeout=10))
            _check(reply.payload["seen_sender"] == "researcher", "delegate: writer did not see researcher")
            _check(reply.payload["correlation_id"] == reply.correlation_id, "delegate lost the correlation id")
            say.say(f"delegate  researcher -> writer on console's behalf  {ms:6.1f} ms round trip")
            say.detail(f"writer saw sender {reply.payload['seen_sender']!r}; correlation id "
                       f"{reply.correlation_id[:12]}... kept end to end")

            reply, ms = await _timed(lambda: console.request(
                "researcher", "research.publish", {"finding": "meshes beat brokers on latency"}, timeout=10))
            say.say(f"broadcast researcher 'findings.new' reached {reply.payload} subscriber(s)  {ms:6.1f} ms")
            _check(reply.payload == 1, f"broadcast reached {reply.payload}, expected the writer only")

            reply, ms = await _timed(lambda: console.request(
                "planner", "plan.note", {"note": "cite sources"}, timeout=10))
            say.say(f"send      planner -> writer 'notes.add' (fire-and-forget) {ms:6.1f} ms")

            reply, ms = await _timed(lambda: console.request(
                "planner", "plan.handoff", {"to": "researcher", "task": "research-backlog"}, timeout=10))
            _check(reply.payload["accepted"], "handoff to researcher was refused")
            say.say(f"handoff   planner -> researcher 'research-backlog' accepted  {ms:6.1f} ms")

            async def writer_has() -> dict[str, Any]:
                return (await console.request("writer", "status", timeout=5)).payload  # type: ignore[no-any-return]

            status = await writer_has()
            _check(status["findings"] and status["notes"], f"writer state incomplete: {status}")
            say.detail(f"writer got the broadcast {status['findings']} and the note {status['notes']}")

            say.say(f"SIGKILL researcher (pid {procs['researcher'].pid})")
            killed_at = time.perf_counter()
            procs["researcher"].send_signal(signal.SIGKILL)
            procs["researcher"].wait()
            reply, ms = await _timed(lambda: console.request("planner", "plan.make", q, timeout=20))
            _check("error" in reply.payload, f"planner did not notice the dead researcher: {reply.payload}")
            say.say(f"request   planner -> researcher failed fast: {reply.payload['error'][:60]}")
            say.detail(f"after {reply.payload['after_ms']:.0f} ms, not the 10 s timeout")
            await node.wait_until(lambda: node.registry.node_of("researcher") is None, 10, "researcher to leave")
            say.say(f"researcher left every registry {time.perf_counter() - killed_at:.1f} s after the kill")

            reply, ms = await _timed(lambda: console.request("writer", "status", timeout=5))
            say.say(f"writer and planner carry on: writer answered in {ms:.1f} ms")

            writer_seed = node.registry.record("writer-node")
            _check(writer_seed is not None, "writer node missing")
            assert writer_seed is not None
            spawn("researcher-2", writer_seed.router)
            say.say(f"newcomer researcher-2 (pid {procs['researcher-2'].pid}) joins through the writer's endpoint")
            await node.wait_for_agents("researcher-2", timeout=15)
            reply, ms = await _timed(lambda: console.request("planner", "plan.make", q, timeout=10))
            _check(reply.payload.get("researcher") == "researcher-2", f"newcomer not used: {reply.payload}")
            say.say(f"request   console -> planner 'plan.make' now uses researcher-2  {ms:6.1f} ms")
            reply, ms = await _timed(lambda: console.request(
                "planner", "plan.handoff", {"to": "researcher-2", "task": "research-backlog"}, timeout=10))
            _check(reply.payload["accepted"], "researcher-2 refused the backlog")
            say.say(f"handoff   planner -> researcher-2 'research-backlog': the newcomer took over  {ms:6.1f} ms")
            stats = node.stats()
            say.say(f"done: console node sent {stats.get('requests_sent', 0)} requests, "
                    f"dropped {stats['dropped_total']} frames, {len(node.dead_letters)} dead letters")
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.terminate()
            for proc in procs.values():
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                if proc.stdin is not None:
                    proc.stdin.close()


def run_demo(out: TextIO = sys.stdout) -> int:
    """Run the demo; return the process exit code."""
    started = time.perf_counter()
    try:
        asyncio.run(_demo(out))
    except (DemoFailed, ZmeshError) as exc:
        print(f"zmesh demo FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"zmesh demo finished in {time.perf_counter() - started:.1f} s", file=out)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: python -m zmesh.demo ROLE SEED MESH")
    try:
        asyncio.run(_role(sys.argv[1], sys.argv[2], sys.argv[3]))
    except KeyboardInterrupt:
        pass
