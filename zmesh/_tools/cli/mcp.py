"""``zmesh mcp``: the mesh's capabilities as MCP tools, over stdio or HTTP (internal)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os

from ...errors import Timeout
from ...node import Node
from .commands import CliError
from .json_output import dumps

__all__ = ["add_parser", "mcp"]

#: The name of the node (and of its agent) ``zmesh mcp`` joins the mesh with, before its pid.
MCP_NODE_PREFIX = "zmesh-mcp-"


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"must be HOST:PORT, e.g. 127.0.0.1:8765, got {text!r}")
    return host.strip("[]"), int(port)


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--http", type=_listen, default=None, metavar="HOST:PORT",
                        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (port 0: any free one)")
    parser.add_argument("--token", default=os.environ.get("ZMESH_MCP_TOKEN"),
                        help="with --http: the bearer token every request must carry (default $ZMESH_MCP_TOKEN); "
                             "needed to listen beyond loopback")
    parser.add_argument("--timeout", type=_seconds, default=None,
                        help="seconds one tool call may take, its whole stream (default 300)")


async def mcp(args: argparse.Namespace) -> int:
    """Serve until stdin closes (stdio) or until stopped (HTTP)."""
    try:
        from ...mcp import DEFAULT_TIMEOUT, check_listen, serve_http, serve_stdio
    except ImportError as exc:  # pragma: no cover - zmesh.mcp itself imports without the SDK
        raise CliError(str(exc), exit_code=2) from None
    timeout = args.timeout or DEFAULT_TIMEOUT
    if args.http is not None:
        try:
            check_listen(args.http[0], args.token)
        except ValueError as exc:
            raise CliError(str(exc), exit_code=2) from None
    name = f"{MCP_NODE_PREFIX}{os.getpid()}"
    try:
        node = Node(args.mesh, name=name, transport=args.transport, seeds=args.seed, interfaces=args.interfaces,
                    port=args.port, key=args.key, trusted=args.trusted, insecure=args.insecure)
    except ValueError as exc:
        raise CliError(str(exc), exit_code=2) from None
    async with node:
        with contextlib.suppress(Timeout):  # the first tools/list should see the mesh, not an empty registry
            await node.wait_until(lambda: not node.joining, args.wait, "the mesh's members")
        agent = node.agent(name)
        try:
            if args.http is None:
                await serve_stdio(agent, timeout=timeout)
                return 0
            async with serve_http(agent, *args.http, token=args.token, timeout=timeout) as url:
                print(dumps({"mesh": node.mesh, "node": node.id, "url": url}), flush=True)
                await asyncio.Event().wait()
        except ImportError as exc:
            raise CliError(str(exc), exit_code=2) from None
    return 0
