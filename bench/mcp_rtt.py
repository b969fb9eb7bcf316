"""What ``zmesh mcp`` adds to a call: an MCP tool call against a direct mesh request, to one agent.

    python -m bench.mcp_rtt [--rounds 5] [-n 500]

One process (this one) hosts the provider (an ``async def`` echo handler
for capability ``echo``) on a ZeroMQ node on 127.0.0.1, and a client agent
on a second node (its requests cross ZeroMQ); ``zmesh mcp`` runs as an MCP host starts it (a child over
stdio, or ``--http`` for streamable HTTP in this process), and the MCP
SDK's client calls the tool. Each round times ``n`` sequential calls on
each path in turn: ``mesh`` (``request_any``), ``mesh-stream``
(``stream_any``, what a tool call makes), ``mcp-memory`` (the SDK's client
against the server in this process, no transport), ``mcp-stdio`` and
``mcp-http``. Prints p50/p99 per path per round, then the median p50 over
the rounds and each MCP path's ratio to the mesh with its spread.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

os.environ["ZMESH_INTERFACES"] = "127.0.0.1"

import zmesh  # after the interface pin

from .paths import interleave, report


async def _bench(rounds: int, n: int) -> dict[str, list[float]]:
    from mcp import Client, StdioServerParameters

    from zmesh.mcp import MeshTools, serve_http

    async def echo(msg: zmesh.Message) -> Any:
        return msg.payload

    mesh = f"mcpb{os.getpid()}"
    async with zmesh.Node(mesh, name="provider", interfaces="local", discovery=False) as node, \
            zmesh.Node(mesh, name="client", interfaces="local", discovery=False, seeds=[node.endpoint]) as near:
        node.agent("echo", capabilities=("echo",)).add_handler("echo", echo)
        direct = near.agent("direct")
        await near.wait_for_agents("echo", timeout=10)
        stdio = StdioServerParameters(command=sys.executable,
                                      args=["-m", "zmesh", "mcp", "--mesh", mesh, "--seed", node.endpoint],
                                      env={**os.environ, "ZMESH_INTERFACES": "127.0.0.1"})

        async def streamed() -> list[Any]:
            async with direct.stream_any("echo", "echo", {"x": 1}, timeout=10) as chunks:
                return [chunk async for chunk in chunks]

        in_memory = MeshTools(near.agent("mcp-memory"))
        async with serve_http(node.agent("mcp-http"), "127.0.0.1", 0) as url, Client(in_memory.server) as memory, \
                Client(stdio) as over_stdio, Client(url) as over_http:
            return await interleave({
                "mesh": lambda: direct.request_any("echo", "echo", {"x": 1}, timeout=10),
                "mesh-stream": streamed,
                "mcp-memory": lambda: memory.call_tool("echo", {"payload": {"x": 1}}),
                "mcp-stdio": lambda: over_stdio.call_tool("echo", {"payload": {"x": 1}}),
                "mcp-http": lambda: over_http.call_tool("echo", {"payload": {"x": 1}}),
            }, rounds, n, warmup=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp_rtt", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("-n", type=int, default=500, help="calls per path per round")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.n < 1:
        parser.error("--rounds and -n must be at least 1")
    mcp_paths = ("mcp-memory", "mcp-stdio", "mcp-http")
    report(asyncio.run(_bench(args.rounds, args.n)), {path: ("mesh",) for path in mcp_paths})
    return 0


if __name__ == "__main__":
    sys.exit(main())
