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
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

os.environ["ZMESH_INTERFACES"] = "127.0.0.1"

import zmesh  # after the interface pin

PATHS = ("mesh", "mesh-stream", "mcp-memory", "mcp-stdio", "mcp-http")


async def _time(call: Callable[[], Awaitable[Any]], n: int) -> tuple[float, float]:
    for _ in range(min(n, 100)):
        await call()
    took = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        took.append(time.perf_counter() - start)
    took.sort()
    return took[len(took) // 2] * 1e6, took[int(len(took) * 0.99)] * 1e6


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
            calls: dict[str, Callable[[], Awaitable[Any]]] = {
                "mesh": lambda: direct.request_any("echo", "echo", {"x": 1}, timeout=10),
                "mesh-stream": streamed,
                "mcp-memory": lambda: memory.call_tool("echo", {"payload": {"x": 1}}),
                "mcp-stdio": lambda: over_stdio.call_tool("echo", {"payload": {"x": 1}}),
                "mcp-http": lambda: over_http.call_tool("echo", {"payload": {"x": 1}}),
            }
            p50s: dict[str, list[float]] = {path: [] for path in PATHS}
            for r in range(rounds):
                line = []
                for path in PATHS:
                    p50, p99 = await _time(calls[path], n)
                    p50s[path].append(p50)
                    line.append(f"{path} p50 {p50:.0f} p99 {p99:.0f} us")
                print(f"round {r + 1}: " + "; ".join(line), flush=True)
    return p50s


def _report(p50s: dict[str, list[float]]) -> None:
    print("median p50: " + ", ".join(f"{path} {statistics.median(p50s[path]):.0f} us" for path in PATHS))
    for path in PATHS[2:]:
        ratios = [m / b for m, b in zip(p50s[path], p50s["mesh"], strict=True)]
        print(f"{path} / mesh: {statistics.median(ratios):.2f}x [{min(ratios):.2f}..{max(ratios):.2f}]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp_rtt", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("-n", type=int, default=500, help="calls per path per round")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.n < 1:
        parser.error("--rounds and -n must be at least 1")
    _report(asyncio.run(_bench(args.rounds, args.n)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
