"""``zmesh gateway``: a mesh joined to another over a second transport (internal)."""

from __future__ import annotations

import argparse
import asyncio
import os

from ...gateway import Gateway
from ...node import Node
from .commands import CliError
from .json_output import dumps

__all__ = ["add_parser", "gateway"]


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="from_transport", default=None, metavar="TRANSPORT",
                        help="the first side's transport (default: --transport, else zmq): --seed, "
                             "--interfaces, --port and the keys are its")
    parser.add_argument("--to", dest="to_transport", required=True, metavar="URL",
                        help="the other side's transport, e.g. nats://127.0.0.1:4222")
    parser.add_argument("--to-mesh", default=None, help="the other side's mesh name (default: --mesh)")
    parser.add_argument("--domain", default="lan",
                        help="the first side's domain name (default 'lan'): gateways of one LAN give it the same "
                             "name, each LAN its own")
    parser.add_argument("--to-domain", default=None,
                        help="the other side's domain name (default: the --to URL's scheme, e.g. 'nats')")
    parser.add_argument("--name", default=None, help="the gateway's node names' stem (default gateway-<pid>)")
    parser.add_argument("--max-payload", type=int, default=None, metavar="BYTES",
                        help="the largest message either node takes (default 1 MiB): what crosses is at most this "
                             "(and the broker's own limit); a larger one fails at its sender with InvalidMessage")


async def gateway(args: argparse.Namespace) -> int:
    """Run the gateway until stopped; print one JSON line once it is up."""
    to_domain = args.to_domain or args.to_transport.partition("://")[0] or "wan"
    stem = args.name or f"gateway-{os.getpid()}"
    sizes = {} if args.max_payload is None else {"max_payload": args.max_payload}
    try:
        near = Node(args.mesh, name=f"{stem}-{args.domain}"[:200], transport=args.from_transport or args.transport,
                    seeds=args.seed, interfaces=args.interfaces, port=args.port, key=args.key,
                    trusted=args.trusted, insecure=args.insecure, **sizes)
        far = Node(args.to_mesh or args.mesh, name=f"{stem}-{to_domain}"[:200], transport=args.to_transport, **sizes)
        relay = Gateway(near, far, domain_a=args.domain, domain_b=to_domain)
    except ValueError as exc:
        raise CliError(str(exc), exit_code=2) from None
    async with near, far, relay:
        print(dumps({"mesh": near.mesh, "to_mesh": far.mesh, "node": near.id, "to_node": far.id,
                     "endpoint": near.endpoint, "to": args.to_transport, "domains": [args.domain, to_domain],
                     "active": relay.active}), flush=True)
        await asyncio.Event().wait()
    return 0
