"""Child process for the namespace mesh tests and bench: one full zmesh Node, JSON lines out.

Run as ``python -m tests._netns_node --mesh M --name N [--agent A] [--interfaces SPEC]``
inside a lab host (tests/netns.py).  The node uses the ZeroMQ transport with
mDNS discovery on (no seeds unless ``--seed`` is given) and fast liveness
(heartbeat 0.2 s, evasive after 0.6 s, expired after 1.5 s; ``--liveness
default`` for the library's own, to share a mesh with nodes that use it).  It hosts one
agent (default id: the node name) with these handlers:

``whoami``   -> ``{"agent", "node", "inc", "pid", "addresses", "sender"}``
``ask``      payload ``{"targets": [...], "timeout": s}``: requests ``whoami``
             from each target and returns, per target, the answer or the
             error's type name (``"PeerLost"``, ``"Timeout"``...)
``slow``     payload: seconds; answers ``"slept"`` after that long

Everything it prints is one JSON object per line; every ``t`` is
``time.monotonic()``, which all namespaces of one machine share::

    {"event": "ready", "t", "pid"}                         imports done
    {"event": "start", "t", "node", "inc", "pid", "endpoint", "endpoints", "addresses"}
    {"event": "mesh", "t", "kind", "node_id", "agent_id", "detail"}   one per MeshEvent
    {"event": "registry", "t", "agents": {agent: node}, "peers": [...],
     "dialled": {node: router endpoint used}, "records": {node: {"inc", "router", "routers"}},
     "discovery": {...mDNS stats}, "why": "change"|"tick"}
    {"event": "complete", "t", "agents": n}                 once, with --expect n
    {"event": "handling", "t", "topic", "sender"}           a request reached a handler
    {"event": "result", "t", "id", "ok", "payload" | "error", "latency", "sent"}
    {"event": "stats", "t", "id", "stats"}
    {"event": "exit", "t", "stats"}

Commands, one JSON object per line on stdin::

    {"op": "request", "id": "r1", "target": "b", "topic": "whoami", "payload": null, "timeout": 5}
    {"op": "stats", "id": "s1"}
    {"op": "go", "at": <monotonic time>}      with --wait-go: start the node at that instant

Requests run concurrently (a long one does not hold back the next command).
The process closes its node and exits when stdin closes, on SIGTERM/SIGINT,
or after ``--duration`` seconds, whichever comes first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from typing import Any

import zmesh

LIVENESS = zmesh.LivenessConfig(heartbeat=0.2, evasive_after=0.6, expire_after=1.5)


def emit(**fields: Any) -> None:
    """Print one JSON line, flushed."""
    fields.setdefault("t", time.monotonic())
    print(json.dumps(fields, default=str), flush=True)


def snapshot(node: zmesh.Node, why: str) -> None:
    """Print what this node knows of the mesh."""
    records = {
        rec.node_id: {"inc": rec.incarnation, "router": rec.router, "routers": list(rec.routers)}
        for rec in node.registry.nodes()
        if rec.node_id != node.id
    }
    # The endpoint actually dialled for each peer (private, best effort).
    dialled = {nid: node.peer_endpoint(nid) or "" for nid in node.peers}
    discovery = getattr(node._mesh, "discovery", None)
    emit(
        event="registry",
        why=why,
        agents={aid: info.node_id for aid, info in node.registry.agents().items()},
        peers=node.peers,
        dialled=dialled,
        records=records,
        discovery=dict(getattr(discovery, "stats", {}) or {}),
    )


async def read_commands(queue: asyncio.Queue[dict[str, Any] | None]) -> None:
    """Feed stdin lines (JSON objects) to ``queue``; None at EOF."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = await reader.readline()
        if not line:
            break
        text = line.decode(errors="replace").strip()
        if not text:
            continue
        try:
            command = json.loads(text)
        except ValueError:
            emit(event="bad_command", line=text)
            continue
        if isinstance(command, dict):
            await queue.put(command)
    await queue.put(None)


async def run(args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.call_later(args.duration, stop.set)
    commands: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    helpers: set[asyncio.Task[Any]] = set()

    def spawn(coro: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        helpers.add(task)
        task.add_done_callback(helpers.discard)
        return task

    reader_task = spawn(read_commands(commands))
    emit(event="ready", pid=os.getpid())

    if args.wait_go:
        while True:  # wait for {"op": "go", "at": T}; EOF or a signal means quit
            getter = asyncio.ensure_future(commands.get())
            stopper = asyncio.ensure_future(stop.wait())
            done, _ = await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            getter.cancel()
            stopper.cancel()
            if stopper in done or getter not in done or getter.result() is None:
                reader_task.cancel()
                return 0
            command = getter.result()
            if command.get("op") == "go":
                delay = float(command.get("at", 0.0)) - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                break

    agent_id = args.agent or args.name
    node = zmesh.Node(
        args.mesh,
        name=args.name,
        interfaces=args.interfaces,
        seeds=args.seed,
        liveness=LIVENESS if args.liveness == "fast" else zmesh.LivenessConfig(),
        insecure=True,  # a lab of network namespaces, without keys: say so explicitly
    )
    started = time.monotonic()
    await node.start()
    try:
        me = node.agent(agent_id, capabilities=("netns",))  # same iteration: travels in the first HELLO
        addresses = list(node.transport.addresses) if hasattr(node.transport, "addresses") else []
        emit(
            event="start", t=started, node=node.id, inc=node.incarnation, pid=os.getpid(),
            endpoint=node.endpoint, endpoints=list(getattr(node.transport, "router_endpoints", ())),
            addresses=addresses, agent=agent_id,
        )

        @me.on("whoami")
        def whoami(msg: zmesh.Message) -> Any:
            emit(event="handling", topic=msg.topic, sender=msg.sender)
            return {"agent": agent_id, "node": node.id, "inc": node.incarnation, "pid": os.getpid(),
                    "addresses": addresses, "sender": msg.sender}

        @me.on("ask")
        async def ask(msg: zmesh.Message) -> Any:
            payload = msg.payload or {}
            timeout = float(payload.get("timeout", 5.0))
            replies = await asyncio.gather(
                *(me.request(t, "whoami", timeout=timeout) for t in payload.get("targets", [])),
                return_exceptions=True,
            )
            return [r.payload if isinstance(r, zmesh.Message) else type(r).__name__ for r in replies]

        @me.on("slow")
        async def slow(msg: zmesh.Message) -> Any:
            emit(event="handling", topic=msg.topic, sender=msg.sender)
            await asyncio.sleep(float(msg.payload or 0))
            return "slept"

        complete = False

        def check_complete() -> None:
            nonlocal complete
            if args.expect and not complete and len(node.registry.agents()) >= args.expect:
                complete = True
                emit(event="complete", agents=len(node.registry.agents()))

        async def follow_events() -> None:
            async for event in node.events():
                emit(event="mesh", kind=event.kind, node_id=event.node_id, agent_id=event.agent_id,
                     detail=event.detail)
                if event.kind != "peer_evasive":
                    snapshot(node, "change")
                check_complete()

        async def ticker() -> None:
            while True:
                await asyncio.sleep(args.snapshot)
                snapshot(node, "tick")

        async def do_request(command: dict[str, Any]) -> None:
            sent = time.monotonic()
            fields: dict[str, Any] = {"id": command.get("id", ""), "target": command.get("target", ""),
                                      "topic": command.get("topic", ""), "sent": sent}
            try:
                reply = await me.request(
                    command["target"], command["topic"], command.get("payload"),
                    timeout=float(command.get("timeout", 5.0)),
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001  (report every outcome to the test)
                emit(event="result", ok=False, error=type(exc).__name__, message=str(exc),
                     latency=time.monotonic() - sent, **fields)
            else:
                emit(event="result", ok=True, payload=reply.payload, latency=time.monotonic() - sent,
                     **fields)

        spawn(follow_events())
        spawn(ticker())
        check_complete()
        snapshot(node, "start")

        async def serve() -> None:
            while True:
                command = await commands.get()
                if command is None:
                    stop.set()
                    return
                op = command.get("op")
                if op == "request":
                    spawn(do_request(command))
                elif op == "stats":
                    emit(event="stats", id=command.get("id", ""), stats=node.stats())
                elif op == "snapshot":
                    snapshot(node, "asked")
                elif op != "go":
                    emit(event="bad_command", command=command)

        spawn(serve())
        await stop.wait()
    finally:
        stats = node.stats()
        for task in list(helpers):
            task.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        await node.close()
        emit(event="exit", stats=stats)
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mesh", required=True)
    parser.add_argument("--name", required=True, help="node name (unique in the mesh)")
    parser.add_argument("--agent", default=None, help="agent id (default: the node name)")
    parser.add_argument("--interfaces", default=None, help="interface spec (default: $ZMESH_INTERFACES)")
    parser.add_argument("--seed", action="append", default=[], help="router endpoint of a member")
    parser.add_argument("--expect", type=int, default=0, help="print 'complete' once this many agents are known")
    parser.add_argument("--snapshot", type=float, default=1.0, help="seconds between registry snapshots")
    parser.add_argument("--duration", type=float, default=120.0, help="exit after this many seconds")
    parser.add_argument("--wait-go", action="store_true", help="start the node on a 'go' command")
    parser.add_argument("--liveness", choices=("fast", "default"), default="fast",
                        help="fast (expired after 1.5 s) or the library's defaults, to share a mesh with nodes that use them")
    parser.add_argument("--log", default="INFO", help="level of the 'zmesh' logger (to stderr)")
    return parser.parse_args(argv)


def main() -> None:
    args = parse()
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="%(relativeCreated)8.0f %(name)s %(levelname)s %(message)s")
    logging.getLogger("zmesh").setLevel(args.log.upper())
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
