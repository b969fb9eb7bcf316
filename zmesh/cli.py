"""The ``zmesh`` command: ``demo``, and tools to poke a running mesh.

    zmesh demo                                   three processes collaborate (local-only)
    zmesh peers   --mesh lab [--seed EP]         the registry as a table
    zmesh send    --mesh lab TARGET TOPIC [JSON] fire-and-forget
    zmesh request --mesh lab TARGET TOPIC [JSON] request and print the reply
    zmesh sub     --mesh lab PATTERN             print broadcasts as JSON lines

Without ``--seed`` the command finds the mesh by mDNS on the chosen
interfaces (``--interfaces``, default ``$ZMESH_INTERFACES`` or local-only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from typing import Any, Sequence

from . import __version__
from .errors import ZmeshError
from .message import Message
from .node import Node

__all__ = ["main"]


def _json_arg(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # a bare word is sent as a string


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mesh", default=os.environ.get("ZMESH_MESH", "default"),
                        help="mesh name (default: $ZMESH_MESH or 'default')")
    parser.add_argument("--seed", action="append", default=[],
                        help="router endpoint of a member, e.g. tcp://127.0.0.1:5555 (repeatable)")
    parser.add_argument("--interfaces", default=None,
                        help="'local' (default), 'lan', or interface names/addresses, comma-separated")
    parser.add_argument("--wait", type=float, default=2.0,
                        help="seconds to wait for the mesh to answer (default 2)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zmesh", description="A brokerless peer mesh for AI agents.")
    parser.add_argument("--version", action="version", version=f"zmesh {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="run the local three-process demo")
    peers = sub.add_parser("peers", help="show the mesh registry")
    _common(peers)
    for name, help_text in (("send", "send a fire-and-forget message"), ("request", "send a request")):
        p = sub.add_parser(name, help=help_text)
        _common(p)
        p.add_argument("target")
        p.add_argument("topic")
        p.add_argument("payload", nargs="?", help="JSON (a bare word is sent as a string)")
        if name == "request":
            p.add_argument("--timeout", type=float, default=10.0)
    s = sub.add_parser("sub", help="print broadcasts matching a pattern")
    _common(s)
    s.add_argument("pattern")
    s.add_argument("--count", type=int, default=0, help="exit after this many messages")
    return parser


async def _join(args: argparse.Namespace) -> Node:
    node = Node(args.mesh, name=f"cli-{os.getpid()}", seeds=args.seed, interfaces=args.interfaces)
    await node.start()
    try:
        await node.wait_until(lambda: bool(node.peers), args.wait, f"a member of mesh {args.mesh!r}")
    except ZmeshError:
        await node.close()
        how = "check --seed" if args.seed else "pass --seed, or check --interfaces and --mesh"
        raise ZmeshError(f"no member of mesh {args.mesh!r} answered within {args.wait} s ({how})") from None
    await node.settled(args.wait)
    return node


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


async def _peers(args: argparse.Namespace) -> int:
    node = await _join(args)
    try:
        rows = [["NODE", "ENDPOINT", "AGENT", "CAPABILITIES", "SUBSCRIPTIONS"]]
        for rec in node.registry.nodes():
            if rec.node_id == node.id:
                continue
            agents = sorted(rec.agents) or ["-"]
            for i, agent_id in enumerate(agents):
                dialled = node.peer_endpoint(rec.node_id)  # the endpoint we actually dial
                rows.append([
                    rec.node_id if i == 0 else "",
                    (dialled or rec.router) if i == 0 else "",
                    agent_id,
                    ",".join(rec.agents.get(agent_id, ())) or "-",
                    ",".join(sorted(rec.subs.get(agent_id, ()))) or "-",
                ])
        print(_table(rows))
    finally:
        await node.close()
    return 0


async def _send(args: argparse.Namespace) -> int:
    node = await _join(args)
    try:
        agent = node.agent(f"cli-{os.getpid()}")
        await node.settled(args.wait)
        if args.command == "send":
            msg = await agent.send(args.target, args.topic, _json_arg(args.payload))
            await node.settled(args.wait)  # let the frame leave before we close
            print(f"sent {msg.id}")
        else:
            reply = await agent.request(args.target, args.topic, _json_arg(args.payload), timeout=args.timeout)
            print(json.dumps(reply.payload, default=repr))
    finally:
        await node.close()
    return 0


async def _sub(args: argparse.Namespace) -> int:
    node = await _join(args)
    done = asyncio.Event()
    seen = 0

    def show(msg: Message) -> None:
        nonlocal seen
        print(json.dumps({"topic": msg.topic, "sender": msg.sender, "payload": msg.payload}, default=repr),
              flush=True)
        seen += 1
        if args.count and seen >= args.count:
            done.set()

    try:
        agent = node.agent(f"cli-{os.getpid()}")
        await agent.subscribe(args.pattern, show)
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, done.set)
        loop.add_signal_handler(signal.SIGTERM, done.set)
        await done.wait()
    finally:
        await node.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo

        return run_demo()
    runner = {"peers": _peers, "send": _send, "request": _send, "sub": _sub}[args.command]
    try:
        return asyncio.run(runner(args))
    except ZmeshError as exc:
        print(f"zmesh {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
