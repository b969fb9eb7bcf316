"""What the A2A gateway adds to a request: p50 through ``zmesh a2a-gateway`` against a direct mesh request.

    python -m bench.a2a_latency [--rounds 5] [-n 1000]

Starts an echo process (agent ``echo`` on a ZeroMQ node, its handler
``async def``) and a ``zmesh a2a-gateway`` process on the same mesh
(HTTP on 127.0.0.1, a free port), and in this process a client node. Each
round, in turn, times ``n`` sequential requests on two paths:

* ``mesh``: client agent -> echo (one zmq request);
* ``a2a``: the a2a-sdk client's SendMessage over HTTP -> the gateway -> echo
  (zmq) and back, one keep-alive connection (JSON-RPC, the reply an agent message).

Prints p50/p99 per path per round, then the median p50 over the rounds and
the gateway's ratio to the direct path with its spread (min..max of the
per-round ratios). Everything listens on 127.0.0.1; discovery is off (seeds only).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
from typing import Any

os.environ["ZMESH_INTERFACES"] = "127.0.0.1"

import zmesh  # after the interface pin

from .paths import interleave, report, stop

_ids = itertools.count()
KW: dict[str, Any] = {"interfaces": "local", "discovery": False}


async def _echo(mesh: str) -> None:
    async def echo(msg: zmesh.Message) -> Any:
        return msg.payload

    async with zmesh.Node(mesh, name="echo", **KW) as node:
        node.agent("echo", capabilities=("echo",)).add_handler("echo", echo)
        print(json.dumps({"endpoint": node.endpoint}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the bench closes stdin


async def _send(client: Any, text: str) -> None:
    from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest

    message = Message(role=Role.ROLE_USER, message_id=f"m{next(_ids)}", parts=[Part(text=text)])
    async for event in client.send_message(SendMessageRequest(message=message)):
        assert event.message.parts[0].text == text, event


async def _measure(mesh: str, endpoint: str, url: str, rounds: int, n: int) -> dict[str, list[float]]:
    import httpx
    from a2a.client import ClientConfig, create_client

    async with zmesh.Node(mesh, name="client", seeds=[endpoint], **KW) as node, httpx.AsyncClient(timeout=10) as http:
        agent = node.agent("client")
        await node.wait_for_agents("echo", timeout=20)
        client = await create_client(f"{url}/echo/", ClientConfig(streaming=False, httpx_client=http))
        return await interleave({
            "mesh": lambda: agent.request("echo", "echo", "ping", timeout=10),
            "a2a": lambda: _send(client, "ping"),
        }, rounds, n, warmup=300)


def _bench(rounds: int, n: int) -> dict[str, list[float]]:
    mesh = f"a2ab{os.getpid()}"
    env = {**os.environ, "ZMESH_INTERFACES": "127.0.0.1"}
    echo = subprocess.Popen([sys.executable, "-m", "bench.a2a_latency", "--echo", mesh],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    gateway = None
    try:
        assert echo.stdout is not None
        endpoint = json.loads(echo.stdout.readline())["endpoint"]
        gateway = subprocess.Popen([sys.executable, "-m", "zmesh", "a2a-gateway", "--mesh", mesh, "--seed", endpoint,
                                    "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, env=env)
        assert gateway.stdout is not None
        url = json.loads(gateway.stdout.readline())["url"]  # its line: up
        return asyncio.run(_measure(mesh, endpoint, url, rounds, n))
    finally:
        stop(gateway, echo)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.a2a_latency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("-n", type=int, default=1000, help="requests per path per round")
    parser.add_argument("--echo", metavar="MESH", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.n < 1:
        parser.error("--rounds and -n must be at least 1")
    if args.echo:
        asyncio.run(_echo(args.echo))
    else:
        report(_bench(args.rounds, args.n), {"a2a": ("mesh",)}, digits=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
