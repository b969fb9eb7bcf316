"""What a gateway adds to a request: RTT through ``zmesh gateway`` against the direct paths.

    python -m bench.gateway_rtt [--rounds 5] [-n 2000]

Starts a nats-server (JetStream, 127.0.0.1, a port it picks), an echo
process with one node on each mesh (agent ``carol`` on the ZeroMQ one,
``bob`` on the NATS one), a ``zmesh gateway`` process between the two
meshes, and in this process a client node on each mesh. Each round, in
turn, times ``n`` sequential requests on three paths:

* ``zmq``: ZeroMQ client -> carol (the plain mesh);
* ``nats``: NATS client -> bob (NATS alone);
* ``gateway``: ZeroMQ client -> bob, through the gateway (ZeroMQ -> gateway -> NATS -> bob and back).

Prints p50/p99 per path per round, then the median p50 over the rounds
and the gateway's ratio to each direct path with its spread (min..max of
the per-round ratios). Handlers are ``async def`` (what agents write).
Everything listens on 127.0.0.1; discovery is off (seeds only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ["ZMESH_INTERFACES"] = "127.0.0.1"

import zmesh  # after the interface pin

from .paths import interleave, report, stop

KW: dict[str, Any] = {"interfaces": "local", "discovery": False}


def _nats_server(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    exe = shutil.which("nats-server") or "/usr/sbin/nats-server"
    if not Path(exe).exists():
        sys.exit("nats-server is not installed: apt-get install nats-server")
    log = directory / "nats.log"
    proc = subprocess.Popen([exe, "-a", "127.0.0.1", "-p", "-1", "-js", "-sd", str(directory / "js"), "-l", str(log)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        hit = re.search(r"Listening for client connections on \S+:(\d+)", log.read_text() if log.exists() else "")
        if hit:
            return proc, f"nats://127.0.0.1:{hit.group(1)}"
        time.sleep(0.02)  # a bounded poll of the server's log
    proc.kill()
    sys.exit("nats-server did not start")


async def _echo(lan: str, wan: str, url: str) -> None:
    async def echo(msg: zmesh.Message) -> Any:
        return msg.payload

    async with zmesh.Node(lan, name="echo-zmq", **KW) as near, zmesh.Node(wan, name="echo-nats", transport=url) as far:
        near.agent("carol").add_handler("e", echo)
        far.agent("bob").add_handler("e", echo)
        print(json.dumps({"endpoint": near.endpoint}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the bench closes stdin


async def _measure(lan: str, wan: str, url: str, endpoint: str, rounds: int, n: int) -> dict[str, list[float]]:
    async with zmesh.Node(lan, name="client-zmq", seeds=[endpoint], **KW) as near, \
            zmesh.Node(wan, name="client-nats", transport=url) as far:
        via_lan, via_nats = near.agent("alice"), far.agent("dave")
        await near.wait_for_agents("carol", "bob", timeout=20)
        await far.wait_for_agents("bob", timeout=20)
        return await interleave({
            "zmq": lambda: via_lan.request("carol", "e", {"x": 1}, timeout=10),
            "nats": lambda: via_nats.request("bob", "e", {"x": 1}, timeout=10),
            "gateway": lambda: via_lan.request("bob", "e", {"x": 1}, timeout=10),
        }, rounds, n, warmup=300)


def _bench(rounds: int, n: int) -> dict[str, list[float]]:
    tag = f"gwb{os.getpid()}"
    lan, wan = f"{tag}-lan", f"{tag}-wan"
    with tempfile.TemporaryDirectory() as tmp:
        server, url = _nats_server(Path(tmp))
        echo = subprocess.Popen([sys.executable, "-m", "bench.gateway_rtt", "--echo", lan, wan, url],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        gateway = None
        try:
            assert echo.stdout is not None
            endpoint = json.loads(echo.stdout.readline())["endpoint"]
            gateway = subprocess.Popen([sys.executable, "-m", "zmesh", "gateway", "--mesh", lan, "--seed", endpoint,
                                        "--to", url, "--to-mesh", wan, "--name", "gw"],
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                       env={**os.environ, "ZMESH_INTERFACES": "127.0.0.1"})
            assert gateway.stdout is not None
            gateway.stdout.readline()  # its line: up
            return asyncio.run(_measure(lan, wan, url, endpoint, rounds, n))
        finally:
            stop(gateway, echo)
            stop(server)  # after them: they leave the NATS mesh through it


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway_rtt", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("-n", type=int, default=2000, help="requests per path per round")
    parser.add_argument("--echo", nargs=3, metavar=("LAN", "WAN", "URL"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.n < 1:
        parser.error("--rounds and -n must be at least 1")
    if args.echo:
        asyncio.run(_echo(*args.echo))
    else:
        report(_bench(args.rounds, args.n), {"gateway": ("zmq", "nats")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
