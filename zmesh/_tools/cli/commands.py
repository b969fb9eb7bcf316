"""The ``zmesh`` commands that join a running mesh: peers, send, request, sub (internal)."""

from __future__ import annotations

import argparse
import ast
import asyncio
import inspect
import logging
import os
import re
import shlex
import sys
from typing import Any, AsyncIterator

from ...agent import Agent
from ...errors import ZmeshError
from ...message import Message
from ...node import Node
from ...registry import MeshEvent, NodeRecord
from .json_output import dumps

__all__ = ["CLI_NODE_PREFIX", "CliError", "DEFAULT_REQUEST_TIMEOUT", "cli_node_name", "is_cli_probe", "join",
           "peers", "send", "stdout_gone", "sub"]

#: Every ``zmesh`` command joins as a short-lived node named this, then its
#: pid and 4 random hex digits (``zmesh-cli-4242-1a2b``): its *probe node*.
#: ``peers`` and ``top`` mark such nodes, and ``top`` folds their comings
#: and goings into one count.
CLI_NODE_PREFIX = "zmesh-cli-"

#: ``zmesh request --timeout``'s default: the Python API's own (``Agent.request``).
DEFAULT_REQUEST_TIMEOUT: float = float(inspect.signature(Agent.request).parameters["timeout"].default)

# What a refusal over a mesh name says: the refusing node's mesh (this
# version, keyless: ``another mesh: 'lab'``), both names (older versions, or
# this node refusing the other's HELLO: ``mesh 'x' is not 'y'``), or nothing
# (``another mesh``: keyed nodes, and versions in between).
_OTHER_MESH = re.compile(r"another mesh: (?P<name>'.*'|\".*\")")
_MESH_MISMATCH = re.compile(r"mesh (?P<first>'.*'|\".*\") is not (?P<second>'.*'|\".*\")")


def cli_node_name() -> str:
    """A new probe node's name: two commands of one process (or one pid reused) do not collide."""
    return f"{CLI_NODE_PREFIX}{os.getpid()}-{os.urandom(2).hex()}"


def is_cli_probe(node_id: str) -> bool:
    """Is ``node_id`` a ``zmesh`` command's probe node (by its name)?"""
    return node_id.startswith(CLI_NODE_PREFIX)


class CliError(Exception):
    """A command cannot go on; the message says why and what to do."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # 2: the command line itself is wrong


def _name(quoted: str) -> str | None:
    try:
        value = ast.literal_eval(quoted)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None


def _other_mesh(reason: str, mesh: str) -> str | None:
    """The name of the mesh that refused this node (of mesh ``mesh``), if the refusal says it."""
    said = _OTHER_MESH.fullmatch(reason)
    if said is not None:
        return _name(said["name"])
    mismatch = _MESH_MISMATCH.fullmatch(reason)
    if mismatch is None:
        return None
    first, second = _name(mismatch["first"]), _name(mismatch["second"])
    # The refuser writes the stranger's name first; this node refusing the other's HELLO writes its own second.
    return first if second == mesh else second


def _refusal_hint(who: str, reason: str, mesh: str) -> str:
    """``who``: the refusing node's endpoint (older versions named the node)."""
    said = f"{who} refused this node: {reason}"
    differ = "The mesh names differ (they are case-sensitive)"
    if reason == "another mesh":  # a keyed node or an older version: no name
        return f"{said}. {differ}: check --mesh (this node used {mesh!r})"
    theirs = _other_mesh(reason, mesh)
    if theirs is None:
        return said
    return f"{said}. {differ}: this node used {mesh!r}; to join that mesh, pass --mesh {shlex.quote(theirs)}"


async def _collect_refusals(events: AsyncIterator[MeshEvent], refusals: dict[str, str]) -> None:
    async for event in events:
        if event.kind == "peer_refused":
            refusals.setdefault(event.node_id, event.detail)


async def _wait_for_a_member(node: Node, events: AsyncIterator[MeshEvent], args: argparse.Namespace) -> None:
    """Return once a member joined; CliError if none answers in time or every seed refused."""
    refusals: dict[str, str] = {}
    collector = asyncio.ensure_future(_collect_refusals(events, refusals))
    seeds = len(set(args.seed))

    def every_seed_refused() -> bool:
        return bool(seeds) and len(refusals) >= seeds

    try:
        await node.wait_until(lambda: bool(node.peers) or every_seed_refused(), args.wait, "a member")
    except ZmeshError:
        pass
    finally:
        collector.cancel()
        await asyncio.gather(collector, return_exceptions=True)
    if node.peers:
        return
    if refusals:
        raise CliError("; ".join(_refusal_hint(who, why, args.mesh) for who, why in sorted(refusals.items())))
    how = "check --seed" if args.seed else "pass --seed, or check --interfaces and --mesh"
    if node.public_key is not None:
        how += "; with keys, check that the mesh trusts this --key and that --trusted holds the mesh's keys"
    raise CliError(f"no member of mesh {args.mesh!r} answered within {args.wait} s ({how})")


class _RefusalsSaidByTheCommand(logging.Filter):
    """The command explains a refusal itself, with a hint: the library's own
    log line about it would say the same thing twice."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg.__class__ is str and record.msg.startswith("zmesh %s: refused by"))


_REFUSAL_FILTER = _RefusalsSaidByTheCommand()


async def join(args: argparse.Namespace) -> Node:
    """A started node that has joined the mesh ``args`` names: every member it heard of, if in time."""
    try:
        node = Node(args.mesh, name=cli_node_name(), transport=args.transport, seeds=args.seed,
                    interfaces=args.interfaces, port=args.port, key=args.key, trusted=args.trusted,
                    insecure=args.insecure)
    except ValueError as exc:  # e.g. a mesh name Node refuses (a ZmeshError is the mesh's answer: exit 1)
        raise CliError(str(exc), exit_code=2) from None
    events = node.events()  # from before the start, so no refusal is missed
    logging.getLogger("zmesh").addFilter(_REFUSAL_FILTER)
    try:
        await node.start()
        await _wait_for_a_member(node, events, args)
        try:
            # The first member's HELLO names the others: wait for them too.
            await node.wait_until(lambda: not node.joining, args.wait, "the other members")
        except ZmeshError:
            # Go on with those that did answer, but say so: a seed given by
            # mistake, or a member whose loop is blocked, is missing below.
            print(f"zmesh {args.command}: warning: not every seed or member the mesh named answered within "
                  f"{args.wait} s (a wrong --seed, or a node that is blocked); only those that did are known",
                  file=sys.stderr)
        await node.settled(args.wait)
    except BaseException:
        await node.close()
        raise
    return node


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _endpoint(node: Node, record: NodeRecord) -> str:
    return node.peer_endpoint(record.node_id) or record.router  # the endpoint we actually dial


def _registry_json(node: Node) -> dict[str, Any]:
    """``peers --json``: every other node of the registry, with its agents."""
    return {"mesh": node.mesh, "nodes": [
        {"node_id": rec.node_id, "endpoint": _endpoint(node, rec), "incarnation": rec.incarnation,
         "cli_probe": is_cli_probe(rec.node_id),
         "agents": [{"agent_id": agent_id, "capabilities": list(rec.agents[agent_id]),
                     "subscriptions": sorted(rec.subs.get(agent_id, ()))} for agent_id in sorted(rec.agents)]}
        for rec in node.registry.nodes() if rec.node_id != node.id
    ]}


def _registry_table(node: Node) -> str:
    rows = [["NODE", "ENDPOINT", "AGENT", "CAPABILITIES", "SUBSCRIPTIONS"]]
    for rec in node.registry.nodes():
        if rec.node_id == node.id:
            continue
        name = f"{rec.node_id} (cli probe)" if is_cli_probe(rec.node_id) else rec.node_id
        for i, agent_id in enumerate(sorted(rec.agents) or ["-"]):
            rows.append([
                name if i == 0 else "",
                _endpoint(node, rec) if i == 0 else "",
                agent_id,
                ",".join(rec.agents.get(agent_id, ())) or "-",
                ",".join(sorted(rec.subs.get(agent_id, ()))) or "-",
            ])
    return _table(rows)


async def peers(args: argparse.Namespace) -> int:
    node = await join(args)
    try:
        print(dumps(_registry_json(node)) if args.json else _registry_table(node))
    finally:
        await node.close()
    return 0


async def services(args: argparse.Namespace) -> int:
    """Each capability's providers: requests, errors, average processing time (a table, or JSON)."""
    node = await join(args)
    try:
        await node.settled(args.wait)
        found = await node.services(args.capability, timeout=args.timeout)
        if args.json:
            print(dumps(found))
            return 0
        rows = [["CAPABILITY", "AGENT", "NODE", "REQUESTS", "ERRORS", "AVG MS", "RUNNING", "INBOX"]]
        for cap, service in found.items():
            for i, row in enumerate(service["providers"]):
                name = cap if i == 0 else ""
                if "error" in row:
                    rows.append([name, row["agent"], row["node"], row["error"], "", "", "", ""])
                else:
                    rows.append([name, row["agent"], row["node"], str(row["requests"]), str(row["errors"]),
                                 "-" if row["average_ms"] is None else f"{row['average_ms']:.2f}", str(row["running"]),
                                 str(row["inbox"])])
        print(_table(rows) if len(rows) > 1 else "no agent declares " + (
            f"capability {args.capability!r}" if args.capability else "a capability"))
    finally:
        await node.close()
    return 0


async def send(args: argparse.Namespace) -> int:
    """``send`` and ``request``; ``args.payload_value`` is the parsed payload."""
    node = await join(args)
    try:
        agent = node.agent(node.id)
        await node.settled(args.wait)
        if args.command == "send":
            msg = await agent.send(args.target, args.topic, args.payload_value)
            await node.settled(args.wait)  # let the frame leave before we close
            print(dumps({"id": msg.id, "target": msg.target, "topic": msg.topic}))
        elif getattr(args, "stream", False):
            await _print_stream(agent, args)
        else:
            reply = await agent.request(args.target, args.topic, args.payload_value, timeout=args.timeout)
            print(dumps(reply.payload))
    finally:
        await node.close()
    return 0


async def _print_stream(agent: Any, args: argparse.Namespace) -> None:
    """``request --stream``: each chunk a JSON line as it comes; a reader of stdout
    that leaves (``| head``) stops the stream, and its handler."""
    async with agent.stream(args.target, args.topic, args.payload_value, timeout=args.timeout) as chunks:
        async for chunk in chunks:
            try:
                print(dumps(chunk), flush=True)
            except BrokenPipeError:
                stdout_gone()
                return


def stdout_gone() -> None:
    """The reader of stdout left (``zmesh sub ... | head``): drop what is still buffered."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


async def sub(args: argparse.Namespace) -> int:
    """Print matching broadcasts, one JSON line each; with ``--count N``, exactly N, then exit."""
    node = await join(args)
    done = asyncio.Event()
    printed = 0

    # A coroutine handler runs on the loop, one at a time, so the count and
    # the event are never raced by the worker threads plain handlers run in.
    async def show(msg: Message) -> None:
        nonlocal printed
        if done.is_set():  # the rest of a burst, or what arrives while closing
            return
        try:
            print(dumps({"topic": msg.topic, "sender": msg.sender, "payload": msg.payload}), flush=True)
        except BrokenPipeError:
            stdout_gone()
            done.set()
            return
        printed += 1
        if args.count and printed >= args.count:
            done.set()

    try:
        agent = node.agent(node.id)
        await agent.subscribe(args.pattern, show)
        await done.wait()
    finally:
        await node.close()
    return 0
