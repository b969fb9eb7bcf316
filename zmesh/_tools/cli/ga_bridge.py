"""``zmesh ga-bridge``: a GenericAgent checkout's sub-agents on the mesh (internal)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from ...ga import GABridge
from ...node import Node
from .commands import CliError
from .json_output import dumps

__all__ = ["add_parser", "ga_bridge"]


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", required=True,
                        help="the GenericAgent checkout: the folder holding agentmain.py (sub-agents are its temp/NAME/)")
    parser.add_argument("--name", default=None, help="this node's name (default ga-bridge-<pid>)")
    parser.add_argument("--spawn", action="store_true",
                        help="a request to a folder with no running sub-agent launches one "
                             "(python ROOT/agentmain.py --task NAME --input TEXT)")
    parser.add_argument("--spawn-name", action="append", default=[], metavar="NAME",
                        help="let only this folder be launched (repeatable)")
    parser.add_argument("--prefix", default="", help="mesh agent ids are PREFIX + NAME (default: NAME)")
    parser.add_argument("--bridge-agent", default="ga-bridge", metavar="ID",
                        help="the bridge's own agent, for 'launch' and 'status' requests (default ga-bridge; "
                             "'' for none)")
    parser.add_argument("--python", default=sys.executable,
                        help="the Python that runs agentmain.py (default: this one)")
    parser.add_argument("--launch-arg", action="append", default=[], metavar="ARG",
                        help="add ARG to agentmain.py's command line, e.g. --launch-arg=--verbose (repeatable)")


async def ga_bridge(args: argparse.Namespace) -> int:
    """Run the bridge until stopped; print one JSON line once it is up."""
    spawn: bool | list[str] = True if args.spawn else list(args.spawn_name)
    try:
        node = Node(args.mesh, name=args.name or f"ga-bridge-{os.getpid()}", transport=args.transport,
                    seeds=args.seed, interfaces=args.interfaces, port=args.port, key=args.key,
                    trusted=args.trusted, insecure=args.insecure)
    except ValueError as exc:
        raise CliError(str(exc), exit_code=2) from None
    try:
        bridge = GABridge(node, args.root, spawn=spawn, prefix=args.prefix,
                          bridge_agent=args.bridge_agent or None, python=args.python,
                          launch_args=args.launch_arg)
    except (OSError, ValueError) as exc:
        raise CliError(str(exc), exit_code=2) from None
    async with node, bridge:
        stats = bridge.stats()
        print(dumps({"mesh": node.mesh, "node": node.id, "endpoint": node.endpoint, "root": stats["root"],
                     "agents": stats["agents"], "skipped": stats["skipped"]}), flush=True)
        await asyncio.Event().wait()
    return 0
