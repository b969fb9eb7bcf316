"""Child process for the namespace discovery tests: one MdnsDiscovery, JSON lines out.

Run as ``python -m tests._discovery_child --mesh M --node N [--interfaces SPEC]``
inside a lab host.  It listens on TCP (a stand-in for the ROUTER socket) on
its scope addresses, advertises that port, and prints one JSON object per
line (all times are ``time.monotonic()``, comparable across processes)::

    {"event": "start", "node", "t", "addresses"}     just before discovery.start()
    {"event": "announced", "node", "t", "ok"}          our announcements were sent
    {"event": "peer", "node", "peer", "inc", "addresses", "t"}
    {"event": "reach", "node", "peer", "address", "ok"}  TCP connect to the best address
    {"event": "gone", "node", "peer", "t"}
    {"event": "log", "node", "level", "msg", "stats"}  a discovery log line (e.g. ignored record)
    {"event": "refreshed", "node", "t"}                after a "refresh" line on stdin
    {"event": "exit", "node", "stats", "ignored": ["service name|reason", ...]}

It exits on SIGTERM/SIGINT, on EOF of stdin when reading it, or after
``--duration`` seconds, whichever comes first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import time
from typing import Any

from zmesh.discovery.mdns import MdnsDiscovery, PeerAdvert
from zmesh.interfaces import resolve_interfaces


def emit(**fields: Any) -> None:
    """Print one JSON line, flushed."""
    print(json.dumps(fields), flush=True)


class _LogHandler(logging.Handler):
    """Turns the discovery's log lines into JSON events."""

    def __init__(self, node: str) -> None:
        super().__init__(logging.DEBUG)
        self.node = node
        self.discovery: MdnsDiscovery | None = None

    def emit(self, record: logging.LogRecord) -> None:
        stats = dict(self.discovery.stats) if self.discovery is not None else {}
        emit(event="log", node=self.node, level=record.levelname, msg=record.getMessage(), stats=stats)


async def main(args: argparse.Namespace) -> None:
    """Run one discovery node until told to stop."""
    scope = resolve_interfaces(args.interfaces)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.call_later(args.duration, stop.set)

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    # one port on every scope address (port=0 with a host list would pick one port per address)
    servers = [await asyncio.start_server(on_conn, host=scope.addresses[0], port=0)]
    port = servers[0].sockets[0].getsockname()[1]
    for address in scope.addresses[1:]:
        servers.append(await asyncio.start_server(on_conn, host=address, port=port))
    tasks: set[asyncio.Task[None]] = set()

    async def reach(advert: PeerAdvert) -> None:
        address = advert.addresses[0]
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(address, advert.router_port), 3)
            writer.close()
            error = ""
        except (OSError, asyncio.TimeoutError) as exc:
            error = repr(exc)
        emit(event="reach", node=args.node, peer=advert.node_id, address=address, ok=not error, error=error)

    def on_peer(advert: PeerAdvert) -> None:
        emit(
            event="peer", node=args.node, peer=advert.node_id, inc=advert.incarnation,
            addresses=list(advert.addresses), t=time.monotonic(),
        )
        task = asyncio.ensure_future(reach(advert))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def on_gone(node_id: str) -> None:
        emit(event="gone", node=args.node, peer=node_id, t=time.monotonic())

    handler = _LogHandler(args.node)
    logger = logging.getLogger(f"zmesh.discovery.child.{args.node}")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    logger.propagate = False
    discovery = MdnsDiscovery(
        mesh=args.mesh, node_id=args.node, incarnation=args.incarnation, version=args.version,
        scope=scope, router_port=port, pub_port=port, on_peer=on_peer, on_peer_gone=on_gone,
        logger=logger,
    )
    handler.discovery = discovery

    async def announced() -> None:
        ok = await discovery.wait_announced()
        emit(event="announced", node=args.node, t=time.monotonic(), ok=ok)

    async def commands() -> None:
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := (await reader.readline()).decode().strip():
            if line == "refresh":
                await discovery.refresh()
                emit(event="refreshed", node=args.node, t=time.monotonic())
        stop.set()

    emit(event="start", node=args.node, t=time.monotonic(), addresses=list(scope.addresses))
    await discovery.start()
    helpers = [asyncio.ensure_future(announced())]
    if args.stdin:
        helpers.append(asyncio.ensure_future(commands()))
    try:
        await stop.wait()
    finally:
        for task in [*helpers, *tasks]:
            task.cancel()
        await asyncio.gather(*helpers, *tasks, return_exceptions=True)
        await discovery.close()
        for server in servers:
            server.close()
            await server.wait_closed()
        ignored = sorted(f"{name}|{why}" for name, why in discovery._ignored)
        emit(event="exit", node=args.node, stats=discovery.stats, ignored=ignored)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line arguments."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mesh", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--incarnation", default="1")
    parser.add_argument("--version", type=int, default=1)
    parser.add_argument("--interfaces", default=None, help="interface spec (default: $ZMESH_INTERFACES)")
    parser.add_argument("--duration", type=float, default=30.0, help="exit after this many seconds")
    parser.add_argument("--stdin", action="store_true", help="read commands (refresh) from stdin")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
