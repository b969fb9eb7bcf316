"""``zmesh demo``: three agent processes collaborate, one dies, a newcomer takes over.

Run it with ``zmesh demo``; ``zmesh demo --keep`` then leaves the mesh
running and prints the ``zmesh`` command lines to try against it, until
Ctrl-C; ``zmesh demo --secure`` gives every process a fresh key (in a
temporary directory, deleted at the end), all of them trusted, so every
connection is CurveZMQ. Everything stays on 127.0.0.1. The agent roles are in
:mod:`zmesh._tools.demo.roles`: ``python -m zmesh._tools.demo.app ROLE SEED MESH`` runs one.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable, TextIO

from ...errors import ZmeshError
from ...node import Node
from ...security import KEY_ENV_VAR, TRUSTED_ENV_VAR, keygen
from ..cli.signals import run_command
from .roles import DEMO_LIVENESS, run_role

__all__ = ["run_demo", "DemoFailed"]

#: Seconds a stopped agent process gets to say goodbye before it is killed.
STOP_GRACE = 5.0


class DemoFailed(Exception):
    pass


class _Narrator:
    """One line per step, in columns: time, what, who, topic, round trip, note."""

    STEP, ROUTE, TOPIC = 9, 26, 18

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.t0 = time.perf_counter()

    def _print(self, text: str) -> None:
        print(text.rstrip(), file=self.out, flush=True)

    def say(self, step: str, text: str) -> None:
        self._print(f"[{time.perf_counter() - self.t0:5.2f}s] {step:<{self.STEP}} {text}")

    def timed(self, step: str, route: str, topic: str, ms: float, note: str = "") -> None:
        self.say(step, f"{route:<{self.ROUTE}} {topic:<{self.TOPIC}} {ms:7.1f} ms  {note}")

    def detail(self, text: str) -> None:
        self._print(" " * (len("[00.00s] ") + self.STEP + 1) + text)


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise DemoFailed(what)


async def _converged(console: Any, roles: tuple[str, ...]) -> None:
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


async def _timed(call: Callable[[], Awaitable[Any]]) -> tuple[Any, float]:
    started = time.perf_counter()
    result = await call()
    return result, (time.perf_counter() - started) * 1000


class _Agents:
    """The demo's agent processes; ``stop()`` ends them all, killing what does not end in time."""

    def __init__(self, mesh: str, keys: Path | None = None) -> None:
        self.mesh = mesh
        self.keys = keys  # --secure: a key per role in this directory, all trusted
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, role: str, seed: str) -> int:
        # A session of their own: Ctrl-C in the terminal reaches the demo only,
        # which stops them in order. Their stdin is the demo's pipe: should the
        # demo die without stopping them, they see it close and stop too.
        env = {**os.environ, "ZMESH_INTERFACES": "127.0.0.1"}
        if self.keys is not None:
            env[KEY_ENV_VAR] = str(self.keys / f"{role}.key_secret")
            env[TRUSTED_ENV_VAR] = str(self.keys)
        self.procs[role] = subprocess.Popen(
            [sys.executable, "-m", "zmesh._tools.demo.app", role, seed, self.mesh],
            stdin=subprocess.PIPE, start_new_session=True, env=env,
        )
        return self.procs[role].pid

    def exited(self) -> list[str]:
        return [f"{role} (exit code {p.returncode})" for role, p in self.procs.items() if p.poll() is not None]

    async def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + STOP_GRACE
        while any(p.poll() is None for p in self.procs.values()) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)  # poll: the agents are saying goodbye to their peers
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stdin is not None:
                proc.stdin.close()


async def _story(node: Node, agents: _Agents, say: _Narrator) -> None:
    console = node.agent("console")
    for role in ("planner", "researcher", "writer"):
        agents.spawn(role, node.endpoint)
    say.say("start", ", ".join(f"{r} (pid {p.pid})" for r, p in agents.procs.items()))
    await node.wait_for_agents("planner", "researcher", "writer", timeout=15)
    await _converged(console, ("planner", "researcher", "writer"))
    say.say("joined", f"{len(node.registry.nodes())} nodes found each other: "
            f"{', '.join(sorted(node.registry.agents()))}; no broker, no leader")

    q = {"q": "peer-to-peer agent meshes"}
    reply, ms = await _timed(lambda: console.request("planner", "plan.make", q, timeout=10))
    plan = reply.payload
    _check("facts" in plan, f"plan failed: {plan}")
    say.timed("request", "console -> planner", "plan.make", ms)
    say.detail(f"planner asked {plan['researcher']} and writer at once ({plan['ms']:.1f} ms): "
               f"{len(plan['facts'])} facts, an outline of {len(plan['outline'])} parts")

    reply, ms = await _timed(lambda: console.request("researcher", "research.summarize", q, timeout=10))
    _check(reply.payload["seen_sender"] == "researcher", "delegate: writer did not see researcher")
    _check(reply.payload["correlation_id"] == reply.correlation_id, "delegate lost the correlation id")
    say.timed("delegate", "researcher -> writer", "write.summary", ms, "on console's behalf")
    say.detail(f"writer saw sender {reply.payload['seen_sender']!r}; correlation id "
               f"{reply.correlation_id[:12]}... kept end to end")

    reply, ms = await _timed(lambda: console.request(
        "researcher", "research.publish", {"finding": "meshes beat brokers on latency"}, timeout=10))
    _check(reply.payload == 1, f"broadcast reached {reply.payload}, expected the writer only")
    say.timed("broadcast", f"researcher -> {reply.payload} subscriber", "findings.new", ms)

    reply, ms = await _timed(lambda: console.request("planner", "plan.note", {"note": "cite sources"}, timeout=10))
    say.timed("send", "planner -> writer", "notes.add", ms, "fire-and-forget")

    reply, ms = await _timed(lambda: console.request(
        "planner", "plan.handoff", {"to": "researcher", "task": "research-backlog"}, timeout=10))
    _check(reply.payload["accepted"], "handoff to researcher was refused")
    say.timed("handoff", "planner -> researcher", "research-backlog", ms, "accepted")

    # The broadcast and the note travel apart from this request (the publisher's socket, the
    # planner's link): on a loaded machine they may come after it, so ask until they are in.
    deadline = time.monotonic() + 5
    while True:
        status = (await console.request("writer", "status", timeout=5)).payload
        if (status["findings"] and status["notes"]) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    _check(status["findings"] and status["notes"], f"writer state incomplete: {status}")
    say.detail(f"writer got the broadcast {status['findings']} and the note {status['notes']}")

    victim = agents.procs.pop("researcher")  # its end is the story, not a failure
    say.say("kill", f"SIGKILL researcher (pid {victim.pid})")
    killed_at = time.perf_counter()
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    reply, ms = await _timed(lambda: console.request("planner", "plan.make", q, timeout=20))
    _check("error" in reply.payload, f"planner did not notice the dead researcher: {reply.payload}")
    say.timed("request", "console -> planner", "plan.make", ms, "planner -> researcher failed fast:")
    say.detail(f"{reply.payload['error'][:70]}, not after a 10 s timeout")
    await node.wait_until(lambda: node.registry.node_of("researcher") is None, 10, "researcher to leave")
    say.say("left", f"researcher left every registry {time.perf_counter() - killed_at:.1f} s after the kill")

    reply, ms = await _timed(lambda: console.request("writer", "status", timeout=5))
    say.timed("request", "console -> writer", "status", ms, "writer and planner carry on")

    writer = node.registry.record("writer-node")
    _check(writer is not None, "writer node missing")
    assert writer is not None
    pid = agents.spawn("researcher-2", writer.router)
    say.say("start", f"newcomer researcher-2 (pid {pid}) joins through the writer's endpoint")
    await node.wait_for_agents("researcher-2", timeout=15)
    await _converged(console, ("planner", "researcher-2", "writer"))  # the planner must know it too
    reply, ms = await _timed(lambda: console.request("planner", "plan.make", q, timeout=10))
    _check(reply.payload.get("researcher") == "researcher-2", f"newcomer not used: {reply.payload}")
    say.timed("request", "console -> planner", "plan.make", ms, "now uses researcher-2")
    reply, ms = await _timed(lambda: console.request(
        "planner", "plan.handoff", {"to": "researcher-2", "task": "research-backlog"}, timeout=10))
    _check(reply.payload["accepted"], "researcher-2 refused the backlog")
    say.timed("handoff", "planner -> researcher-2", "research-backlog", ms, "accepted: the newcomer took over")
    stats = node.stats()
    say.say("done", f"console node sent {stats['requests_sent']} requests, dropped {stats['dropped_total']} "
            f"frames, {len(node.dead_letters)} dead letters")


def _try_lines(mesh: str, seed: str, commands: Iterable[str], keys: Path | None = None) -> list[str]:
    """``zmesh`` command lines to run against the kept mesh, each ready to paste."""
    base = ["--mesh", mesh, "--seed", seed]
    if keys is not None:
        base += ["--key", str(keys / "cli.key_secret"), "--trusted", str(keys)]
    tries = [
        ["peers", *base],
        ["request", *base, "planner", "plan.make", '{"q": "gossip protocols"}'],
        ["sub", *base, "findings.>"],
        ["request", *base, "researcher-2", "research.publish", '{"finding": "it works"}'],
        ["top", *base],
    ]
    available = set(commands)
    return [shlex.join(["zmesh", *t]) for t in tries if t[0] in available]


def _what_next(out: TextIO, node: Node, commands: Iterable[str], keep: bool, keys: Path | None) -> None:
    if not keep:
        print("\nWhat next:\n"
              "  zmesh demo --keep   run it again and leave the mesh up, with commands to try against it\n"
              "  zmesh demo --secure the same with CurveZMQ: a key per process, only those keys admitted\n"
              "  zmesh --help        peers, send, request, sub, top: use any running mesh from a shell",
              file=out, flush=True)
        return
    print(f"\nThe mesh {node.mesh!r} keeps running: console (this process), planner, writer, researcher-2.\n"
          f"Seed endpoint (the console node): {node.endpoint}\n"
          "Try, from another terminal:", file=out)
    for line in _try_lines(node.mesh, node.endpoint, commands, keys):
        print(f"  {line}", file=out)
    print("Ctrl-C here stops the mesh.", file=out, flush=True)


#: Every process of a ``--secure`` demo, and the ``zmesh`` commands a kept one suggests.
_KEYED = ("console", "planner", "researcher", "writer", "researcher-2", "cli")


async def _demo(out: TextIO, keep: bool, commands: Iterable[str], port: int, keys: Path | None) -> None:
    say = _Narrator(out)
    started = time.perf_counter()
    mesh = f"demo-{os.getpid()}"
    agents = _Agents(mesh, keys)
    security: dict[str, Any] = {}
    if keys is not None:
        for name in _KEYED:
            keygen(name, keys)
        security = {"key": keys / "console.key_secret", "trusted": keys}
    async with Node(mesh, name="console-node", interfaces="local", discovery=False,
                    liveness=DEMO_LIVENESS, port=port, **security) as node:
        say.say("mesh", f"{mesh!r}, local-only (127.0.0.1); console node at {node.endpoint}")
        if keys is not None:
            say.say("keys", f"{len(_KEYED)} fresh key pairs in {keys}: every connection is CurveZMQ, "
                    "and only these keys may connect")
        try:
            await _story(node, agents, say)
            print(f"zmesh demo finished in {time.perf_counter() - started:.1f} s", file=out, flush=True)
            _what_next(out, node, commands, keep, keys)
            while keep and not agents.exited():
                await asyncio.sleep(0.2)  # poll: until Ctrl-C or an agent process ends
            if keep:
                raise DemoFailed(f"agent process ended: {', '.join(agents.exited())}; stopping the demo")
        finally:
            await agents.stop()


def run_demo(
    out: TextIO | None = None, *, keep: bool = False, commands: Iterable[str] | None = None, port: int = 0,
    secure: bool = False,
) -> int:
    """Run the demo; return the process exit code (130/143 when stopped by SIGINT/SIGTERM).

    ``commands`` are the ``zmesh`` subcommands a kept mesh suggests trying
    (default: peers, request, sub). ``port`` fixes the console node's port,
    the seed endpoint a kept mesh prints (0: any free port). ``secure``:
    fresh keys for every process.
    """
    stream = sys.stdout if out is None else out
    suggest = ("peers", "request", "sub") if commands is None else tuple(commands)

    async def main() -> int:
        try:
            if not secure:
                await _demo(stream, keep, suggest, port, None)
                return 0
            with tempfile.TemporaryDirectory(prefix="zmesh-demo-keys-") as keys:
                await _demo(stream, keep, suggest, port, Path(keys))
        except (DemoFailed, ZmeshError) as exc:
            print(f"zmesh demo FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        return 0

    return run_command("demo", main)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: python -m zmesh._tools.demo.app ROLE SEED MESH")
    try:
        asyncio.run(run_role(sys.argv[1], sys.argv[2], sys.argv[3]))
    except KeyboardInterrupt:  # before its handlers were in place
        pass
