"""zmesh over ZeroMQ: one zmesh node per peer process, joined through seeds.

* one-way throughput: agent ``src`` -> ``await src.send("sink-0", "bench", frame)``;
  the sink agent's handler counts ``decode(msg.payload)["type"]``;
* RTT: ``await client.request("echo", "bench", frame, timeout=5)``, the echo
  agent's handler returns ``make_reply(msg.payload, seq)``;
* fan-out: 4 sink processes each host an agent subscribed to
  ``bench.fanout``; the source calls ``await src.broadcast("bench.fanout", frame)``.

The bench envelope travels as the zmesh message payload (opaque ``bytes``),
so zmesh moves the same application bytes as every other system and adds its
own header (ids, sender, target, topic, trace id, timestamp...) on top.

Every node is local-only: ``interfaces="local"``, ``discovery=False`` (no
mDNS), ``ZMESH_INTERFACES=127.0.0.1`` in the peer environment, and peers
join through seeds (the sinks' ``node.endpoint``).

``zmesh-curve`` is ``zmesh`` with keys: every node runs with
``key=``/``trusted=`` (CurveZMQ on every socket, ZAP admitting the trusted
key). All nodes share one key pair, made by ``zmesh.keygen`` in a temporary
directory at set-up: CURVE costs the same per connection whatever the key.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from typing import Any, ClassVar

from ..control import BenchTimeout, Control
from ..envelope import decode
from ..harness import HOST
from ..roles import (
    INFLIGHT,
    PACE_EVERY,
    SinkCounter,
    make_reply,
    run_flood_async,
    run_inflight_client_async,
    run_rtt_client_async,
    run_source_async,
)
from .base import BASIC, PAYLOADS, PeerSystem, module_available

__all__ = ["ZmeshAsync", "ZmeshCurve", "ZmeshMesh", "ZmeshQos1", "inline_kw", "local_env", "node_kwargs", "peer"]

#: The zmesh send coroutine never suspends: the event loop gets a turn every
#: this many messages so flushes, drains and heartbeats run. It is the shared
#: cadence of every asyncio sender (``roles.PACE_EVERY``), not zmesh's own.
YIELD_EVERY = PACE_EVERY
#: Topic of the fan-out workload.
FANOUT_TOPIC = "bench.fanout"
#: Topic of the direct (one-way and RTT) workloads.
TOPIC = "bench"
#: The agent that takes the flood of ``rtt-loaded``, on the echo server's node.
FLOOD_AGENT = "flood-sink"


def local_env() -> None:
    """Pin zmesh to loopback in this process and in every child it starts."""
    os.environ["ZMESH_INTERFACES"] = HOST


def node_kwargs(seeds: list[str] | None = None, keys: str | None = None,
                transport: str | None = None) -> dict[str, Any]:
    """Keyword arguments of every zmesh Node the bench starts: local only, no mDNS;
    with ``keys`` (a directory holding ``bench.key_secret``), CurveZMQ; with
    ``transport`` (a broker's URL, bench/systems/zmesh_brokers.py), over that
    broker instead of ZeroMQ (no seeds: nodes meet at the broker)."""
    if transport:
        return {"transport": transport}
    kwargs: dict[str, Any] = {"interfaces": "local", "discovery": False, "seeds": list(seeds or ())}
    if keys:
        kwargs.update(key=os.path.join(keys, "bench.key_secret"), trusted=keys)
    return kwargs


def inline_kw() -> dict[str, bool]:
    """``{"inline": True}`` where this zmesh's ``add_handler`` has ``inline=`` (older trees: ``{}``)."""
    import inspect

    import zmesh

    return {"inline": True} if "inline" in inspect.signature(zmesh.Agent.add_handler).parameters else {}


def zmesh_commit() -> str:
    """The git commit of the zmesh source being measured (``+dirty`` if zmesh/ has local edits)."""
    import subprocess
    from pathlib import Path

    import zmesh

    src = Path(zmesh.__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(src), "status", "--porcelain", "--", "."],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def zmesh_versions() -> dict[str, str]:
    import zmq

    import zmesh

    return {
        "zmesh": zmesh.__version__,
        "zmesh_commit": zmesh_commit(),
        "pyzmq": zmq.__version__,
        "libzmq": zmq.zmq_version(),
    }


class ZmeshMesh(PeerSystem):
    key: ClassVar[str] = "zmesh"
    label: ClassVar[str] = "zmesh (zmq)"
    notes: ClassVar[str] = (
        "one zmesh node per process over tcp://127.0.0.1, joined by seeds; envelope = zmesh payload; "
        "fan-out = broadcast to 4 subscribed agents"
    )
    supports: ClassVar[frozenset[str]] = frozenset({*BASIC, "paced", "inflight64", *PAYLOADS, "rtt-loaded"})

    _saved_env: str | None = None

    def available(self) -> tuple[bool, str]:
        return module_available("zmesh", "-e .")

    def setup(self) -> None:
        self._saved_env = os.environ.get("ZMESH_INTERFACES")
        local_env()  # inherited by every peer process (harness.Peer copies os.environ)

    def teardown(self) -> None:
        if self._saved_env is None:
            os.environ.pop("ZMESH_INTERFACES", None)
        else:
            os.environ["ZMESH_INTERFACES"] = self._saved_env

    def versions(self) -> dict[str, str]:
        return zmesh_versions()

    #: QoS of every message the bench sends (``agent.send(..., qos=...)``).
    qos: ClassVar[int] = 0
    #: How the sink and echo handlers run: ``inline`` (a plain function with
    #: ``inline=True``, on the loop) or ``async`` (an ``async def`` that never awaits).
    handler: ClassVar[str] = "inline"

    def peer_args(self, workload: str) -> dict[str, Any]:
        # A fresh mesh name per run: nodes of an earlier run can never join this one.
        return {"workload": workload, "mesh": f"bench-{workload}-{uuid.uuid4().hex[:8]}", "qos": self.qos,
                "handler": self.handler}


class ZmeshAsync(ZmeshMesh):
    """zmesh as ``zmesh``, the sink and echo handlers ``async def`` (that never await):
    the handler agent builders write first, against ``inline=True``'s plain function."""

    key: ClassVar[str] = "zmesh-async"
    label: ClassVar[str] = "zmesh async def"
    notes: ClassVar[str] = (
        "zmesh as `zmesh`, the sink and echo handlers `async def` (each runs as zmesh runs a coroutine "
        "handler) instead of plain functions with inline=True"
    )
    supports: ClassVar[frozenset[str]] = frozenset({"throughput", "rtt"})
    handler: ClassVar[str] = "async"


class ZmeshQos1(ZmeshMesh):
    """zmesh with ``qos=1`` on every send and request.

    The source's one-way run ends when ``node.wait_acked()`` returns (every
    QoS 1 message acknowledged by the receiver, after its handler) or the
    sink's n-th envelope, whichever is later. On a zmesh without
    ``Node.wait_acked`` (before QoS 1 semantics landed) the wait is skipped,
    the run ends at the sink's n-th envelope, and ``versions()`` records
    ``wait_acked: absent``.
    """

    key: ClassVar[str] = "zmesh-qos1"
    label: ClassVar[str] = "zmesh qos=1"
    notes: ClassVar[str] = (
        "zmesh over tcp://127.0.0.1 with qos=1 on every send/request; one-way ends when "
        "node.wait_acked() returns (if this zmesh has it) or at the sink's n-th envelope"
    )
    supports: ClassVar[frozenset[str]] = frozenset({"throughput", "rtt"})
    qos: ClassVar[int] = 1

    def versions(self) -> dict[str, str]:
        import zmesh

        has = hasattr(zmesh.Node, "wait_acked")
        return {**zmesh_versions(), "wait_acked": "present" if has else "absent (acks not awaited)"}


class ZmeshCurve(ZmeshMesh):
    """zmesh as ``zmesh``, with CurveZMQ keys on every node (see docs/security.md)."""

    key: ClassVar[str] = "zmesh-curve"
    label: ClassVar[str] = "zmesh keyed"
    notes: ClassVar[str] = (
        "zmesh over tcp://127.0.0.1 with key=/trusted= on every node: CurveZMQ on every socket, "
        "ZAP admitting only the trusted key; one key pair shared by all nodes"
    )
    supports: ClassVar[frozenset[str]] = frozenset(BASIC)
    _keys: str | None = None

    def available(self) -> tuple[bool, str]:
        ok, note = super().available()
        if ok:
            import zmq

            if not zmq.has("curve"):
                return False, "this libzmq has no CURVE"
        return ok, note

    def setup(self) -> None:
        super().setup()
        import zmesh

        self._keys = tempfile.mkdtemp(prefix="zmesh-bench-keys-")
        zmesh.keygen("bench", self._keys)

    def teardown(self) -> None:
        if self._keys is not None:
            shutil.rmtree(self._keys, ignore_errors=True)
            self._keys = None
        super().teardown()

    def peer_args(self, workload: str) -> dict[str, Any]:
        return {**super().peer_args(workload), "keys": self._keys}


# ---------------------------------------------------------------- peer half


def peer(role: str, args: dict[str, Any], ctl: Control) -> None:
    local_env()
    roles = {"sink": _sink, "source": _source, "echo": _echo, "client": _client, "flooder": _flooder}
    asyncio.run(roles[role](args, ctl))


def _kwargs(args: dict[str, Any], seeds: list[str] | None = None) -> dict[str, Any]:
    """node_kwargs() for this run; a payload workload above zmesh's default 1 MiB
    ``max_payload`` raises it (every node of the run alike)."""
    kwargs = node_kwargs(seeds, args.get("keys"), args.get("transport"))
    size = int(args.get("size", 0))
    if size >= 1 << 20:
        kwargs["max_payload"] = 2 * size
    return kwargs


def _handle(fn: Callable[[Any], Any], args: dict[str, Any]) -> tuple[Callable[[Any], Any], dict[str, bool]]:
    """The handler to register for *fn* and its keyword arguments: *fn* with
    ``inline=True`` (where the tree has it), or an ``async def`` around it."""
    if args.get("handler") == "async":

        async def handler(msg: Any) -> Any:
            return fn(msg)

        return handler, {}
    return fn, inline_kw()


async def until(cond: Callable[[], bool], ctl: Control, what: str | None = None) -> None:
    """Poll *cond* without blocking the loop; stop at STOP; at the deadline raise
    (if *what* is given) or return."""
    while not cond():
        if ctl.stop.is_set():
            return
        if ctl.deadline.expired():
            if what:
                raise BenchTimeout(f"timed out: {what}")
            return
        await asyncio.sleep(0.005)


def _join_timeout(ctl: Control) -> float:
    return max(1.0, min(30.0, ctl.deadline.left()))


async def _sink(args: dict[str, Any], ctl: Control) -> None:
    import zmesh

    index = int(args.get("index", 0))
    counter = SinkCounter(int(args["n"]), int(args["warmup"]), ctl)

    def on_msg(msg: zmesh.Message) -> None:
        counter.feed(decode(msg.payload)["type"])

    handler, hkw = _handle(on_msg, args)
    async with zmesh.Node(args["mesh"], name=f"sink-{index}", **_kwargs(args)) as node:
        agent = node.agent(f"sink-{index}")
        if args["workload"] == "fanout":
            await agent.subscribe(FANOUT_TOPIC, handler, **hkw)  # inline: cheap, the guide's path
        else:
            agent.add_handler(TOPIC, handler, **hkw)
        ctl.ready({"endpoint": node.endpoint, "agent": agent.id})
        await until(lambda: counter.done, ctl)
        counter.report()
        if int(args.get("qos", 0)) >= 1:
            await until(lambda: False, ctl)  # stay up until STOP: the source waits for our acks


async def _source(args: dict[str, Any], ctl: Control) -> None:
    import zmesh

    sinks: list[dict[str, Any]] = args["sinks"]
    seeds = [str(s["endpoint"]) for s in sinks]
    async with zmesh.Node(args["mesh"], name="source", **_kwargs(args, seeds)) as node:
        src = node.agent("src")
        await node.wait_for_agents(*(str(s["agent"]) for s in sinks), timeout=_join_timeout(ctl))
        if args["workload"] == "fanout":
            # broadcast counts (and reaches) only joined subscribers: wait for all of them
            await until(
                lambda: len(node.registry.subscribers(FANOUT_TOPIC)) >= len(sinks),
                ctl,
                f"{len(sinks)} subscribers of {FANOUT_TOPIC}",
            )
        ctl.ready()
        qos = int(args.get("qos", 0))
        # run_source_async pauses every PACE_EVERY messages, as for every asyncio sender

        if args["workload"] == "fanout":

            async def send(frame: bytes) -> None:
                await src.broadcast(FANOUT_TOPIC, frame)

        else:
            target = str(sinks[0]["agent"])

            async def send(frame: bytes) -> None:
                await src.send(target, TOPIC, frame, qos=qos)

        drain = None
        wait_acked = getattr(node, "wait_acked", None)  # zmesh with QoS 1 semantics only
        if qos >= 1 and wait_acked is not None:

            async def drain() -> None:
                if not await wait_acked(max(1.0, ctl.deadline.left())):
                    raise BenchTimeout("node.wait_acked(): QoS 1 messages still unacknowledged")

        pace = 1 if args["workload"] == "paced" else PACE_EVERY  # paced: every message travels alone
        await run_source_async(send, int(args["n"]), ctl, drain, pace, int(args.get("size", 0)))
        await until(lambda: False, ctl)  # keep the loop (flushes, heartbeats) running until STOP


async def _echo(args: dict[str, Any], ctl: Control) -> None:
    import zmesh

    seq = 0

    def on_request(msg: zmesh.Message) -> bytes:
        nonlocal seq
        seq += 1
        return make_reply(msg.payload, seq)

    flooded = 0

    def on_flood(msg: zmesh.Message) -> None:
        nonlocal flooded
        decode(msg.payload)  # what a sink does with every envelope
        flooded += 1

    handler, hkw = _handle(on_request, args)
    async with zmesh.Node(args["mesh"], name="echo", **_kwargs(args)) as node:
        agent = node.agent("echo")
        agent.add_handler(TOPIC, handler, **hkw)
        info = {"endpoint": node.endpoint, "agent": agent.id}
        if args["workload"] == "rtt-loaded":  # a second agent on this node takes a flood meanwhile
            flood_handler, fkw = _handle(on_flood, args)
            node.agent(FLOOD_AGENT).add_handler(TOPIC, flood_handler, **fkw)
            info["flood_agent"] = FLOOD_AGENT
        ctl.ready(info)
        await until(lambda: False, ctl)


async def _client(args: dict[str, Any], ctl: Control) -> None:
    import zmesh

    server: dict[str, Any] = args["server"]
    target = str(server["agent"])
    qos = int(args.get("qos", 0))
    async with zmesh.Node(args["mesh"], name="client", **_kwargs(args, [str(server["endpoint"])])) as node:
        client = node.agent("client")
        await node.wait_for_agents(target, timeout=_join_timeout(ctl))

        async def call(frame: bytes) -> bytes:
            reply = await client.request(target, TOPIC, frame, timeout=5, qos=qos)
            payload: bytes = reply.payload
            return payload

        if args["workload"] == "inflight64":
            window = int(args.get("window", INFLIGHT))
            await run_inflight_client_async(call, int(args["n"]), int(args["warmup"]), ctl, window)
        else:
            await run_rtt_client_async(call, int(args["n"]), int(args["warmup"]), ctl)


async def _flooder(args: dict[str, Any], ctl: Control) -> None:
    """``rtt-loaded``'s second sender: floods the flood agent on the echo server's node."""
    import zmesh

    server: dict[str, Any] = args["sinks"][0]
    target = str(server["flood_agent"])
    async with zmesh.Node(args["mesh"], name="flooder", **_kwargs(args, [str(server["endpoint"])])) as node:
        src = node.agent("flooder")
        await node.wait_for_agents(target, timeout=_join_timeout(ctl))
        ctl.ready()

        async def send(frame: bytes) -> None:
            await src.send(target, TOPIC, frame)

        await run_flood_async(send, ctl)
