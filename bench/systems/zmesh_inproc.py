"""zmesh in-process: every node of the mesh in ONE process (``transport="inproc"``).

The same zmesh protocol, frames and batching as over ZeroMQ, without
sockets: this is what zmesh itself costs (message objects, header codec,
registry routing, handler dispatch) when the transport is free. Sender and
receivers share one Python thread, so each number is bounded by one core.

* one-way throughput: node "source" (agent ``src``) -> node "sink-0"
  (agent ``sink-0``), ``await src.send("sink-0", "bench", frame)``;
* RTT: agent ``client`` -> agent ``echo`` on another in-process node;
* fan-out: ``src.broadcast("bench.fanout", frame)`` to 4 subscribed agents,
  each on its own in-process node.

Each measurement runs in a fresh subprocess (``python -m bench.peers
zmesh-inproc solo <json>``), measured the same way as the others: warm-up
first, then sender start -> last receiver's n-th envelope.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, ClassVar

from ..control import Control, Deadline
from ..envelope import decode, encode
from ..harness import PeerGroup
from ..roles import (
    WARMUP_BURST,
    WARMUP_PAUSE,
    SinkCounter,
    make_reply,
    run_rtt_client_async,
)
from .base import System, module_available
from .zmesh_mesh import (
    FANOUT_TOPIC,
    TOPIC,
    YIELD_EVERY,
    local_env,
    until,
    zmesh_versions,
)

__all__ = ["ZmeshInproc", "peer"]

_GRACE = 10.0


class ZmeshInproc(System):
    key: ClassVar[str] = "zmesh-inproc"
    label: ClassVar[str] = "zmesh in-process"
    notes: ClassVar[str] = (
        "all nodes in one process (transport='inproc'): zmesh's own cost, one core; "
        "not comparable to the cross-process rows"
    )
    supports: ClassVar[frozenset[str]] = frozenset({"throughput", "rtt", "fanout"})

    def available(self) -> tuple[bool, str]:
        return module_available("zmesh", "-e .")

    def versions(self) -> dict[str, str]:
        return zmesh_versions()

    def _solo(self, workload: str, extra: dict[str, Any], timeout: float) -> dict[str, Any]:
        args = dict(
            extra,
            workload=workload,
            mesh=f"bench-inproc-{workload}-{uuid.uuid4().hex[:8]}",
            warmup=self.sizes.warmup,
            rtt_warmup=self.sizes.rtt_warmup,
            timeout=timeout,
        )
        with PeerGroup() as group:
            p = group.start(self.key, "solo", args, f"{self.key} {workload}")
            return p.expect("RESULT", Deadline(timeout + _GRACE))

    def _timeout(self, n: int) -> float:
        return min(self.sizes.timeout, 20.0 + n / 1000.0)

    def throughput(self, n: int) -> float | None:
        res = self._solo("throughput", {"n": n, "subscribers": 1}, self._timeout(n))
        return float(res["rate"])

    def rtt(self, n: int) -> tuple[float, float] | None:
        res = self._solo("rtt", {"n": n}, self._timeout(n * 5))
        return float(res["p50_us"]), float(res["p99_us"])

    def fanout(self, n: int, subscribers: int = 4) -> float | None:
        res = self._solo("fanout", {"n": n, "subscribers": subscribers}, self._timeout(n * subscribers))
        return float(res["rate"])


# ---------------------------------------------------------------- peer half


def peer(role: str, args: dict[str, Any], ctl: Control) -> None:
    if role != "solo":
        raise ValueError(f"zmesh-inproc runs only the 'solo' role, not {role!r}")
    local_env()
    if args["workload"] == "rtt":
        asyncio.run(_rtt(args, ctl))
    else:
        asyncio.run(_stream(args, ctl))


def _node(mesh: str, name: str) -> Any:
    import zmesh

    # interfaces/discovery do not matter in-process; passed anyway so no node is ever non-local
    return zmesh.Node(mesh, name=name, transport="inproc", interfaces="local", discovery=False)


async def _stream(args: dict[str, Any], ctl: Control) -> None:
    """One-way (1 sink) or fan-out (k sinks): warm up, then n data envelopes."""
    import zmesh

    n, k, warmup = int(args["n"]), int(args["subscribers"]), int(args["warmup"])
    fanout = args["workload"] == "fanout"
    mesh = args["mesh"]
    counters = [SinkCounter(n, warmup, _Quiet(ctl)) for _ in range(k)]
    nodes: list[zmesh.Node] = []
    try:
        for i, counter in enumerate(counters):
            node = _node(mesh, f"sink-{i}")
            nodes.append(node)
            await node.start()
            agent = node.agent(f"sink-{i}")

            def on_msg(msg: zmesh.Message, counter: SinkCounter = counter) -> None:
                counter.feed(decode(msg.payload)["type"])

            if fanout:
                await agent.subscribe(FANOUT_TOPIC, on_msg, inline=True)
            else:
                agent.add_handler(TOPIC, on_msg, inline=True)
        src_node = _node(mesh, "source")
        nodes.append(src_node)
        await src_node.start()
        src = src_node.agent("src")
        await src_node.wait_for_agents(*(f"sink-{i}" for i in range(k)), timeout=30)
        if fanout:
            await until(lambda: len(src_node.registry.subscribers(FANOUT_TOPIC)) >= k, ctl, "subscribers")

        async def send(frame: bytes) -> None:
            if fanout:
                await src.broadcast(FANOUT_TOPIC, frame)
            else:
                await src.send("sink-0", TOPIC, frame)

        # warm-up: bursts with pauses until every sink counted its warm-up envelopes
        seq = 0
        while not all(c.warm_seen >= c.warmup for c in counters):
            for i in range(WARMUP_BURST):
                await send(encode(seq + i, "warmup"))
            seq += WARMUP_BURST
            await asyncio.sleep(WARMUP_PAUSE)
            ctl.deadline.check("warm-up")
        t0 = time.monotonic()
        for i in range(n):
            await send(encode(i, "data"))
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)
                if ctl.stop.is_set():
                    break
        t_sent = time.monotonic()
        await until(lambda: all(c.done for c in counters), ctl, "every sink's n-th envelope")
        t_last = [c.t_last for c in counters]
        if any(t is None for t in t_last):
            raise RuntimeError(f"sinks got {[c.count for c in counters]} of {n}")
        t_end = max(float(t) for t in t_last if t is not None)
        ctl.result({"rate": n * k / (t_end - t0), "t0": t0, "t_sent": t_sent, "t_end": t_end})
    finally:
        for node in reversed(nodes):
            await node.close()


async def _rtt(args: dict[str, Any], ctl: Control) -> None:
    async with _node(args["mesh"], "echo") as server, _node(args["mesh"], "client") as client_node:
        seq = 0

        def on_request(msg: Any) -> bytes:
            nonlocal seq
            seq += 1
            return make_reply(msg.payload, seq)

        server.agent("echo").add_handler(TOPIC, on_request, inline=True)
        client = client_node.agent("client")
        await client_node.wait_for_agents("echo", timeout=30)

        async def call(frame: bytes) -> bytes:
            reply = await client.request("echo", TOPIC, frame, timeout=5)
            payload: bytes = reply.payload
            return payload

        await run_rtt_client_async(call, int(args["n"]), int(args["rtt_warmup"]), ctl)


class _Quiet(Control):
    """A Control view whose ``warm()`` is silent (the in-process sinks report nothing)."""

    def __init__(self, ctl: Control) -> None:  # deliberately no reader thread of its own
        self.deadline = ctl.deadline
        self.go = ctl.go
        self.stop = ctl.stop

    def warm(self) -> None:
        pass
