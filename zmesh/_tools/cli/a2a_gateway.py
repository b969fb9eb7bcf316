"""``zmesh a2a-gateway``: the mesh's agents served as A2A agents over HTTP (internal)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os

from ...a2a import DEFAULT_KEEP_TASKS, DEFAULT_TIMEOUT, A2ASetupError, check_listen
from ...node import Node
from .commands import CliError
from .json_output import dumps

__all__ = ["DEFAULT_LISTEN", "a2a_gateway", "add_parser", "parse_listen", "parse_remote"]

#: Where ``zmesh a2a-gateway`` listens without ``--listen``: loopback, a free port (printed).
DEFAULT_LISTEN = "127.0.0.1:0"


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8000`` for IPv6) as (host, port); CliError (usage) otherwise."""
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise CliError(f"--listen takes HOST:PORT, e.g. 127.0.0.1:8000 (port 0: any free one), got {text!r}",
                       exit_code=2)
    return host.strip("[]"), int(port)


def parse_remote(text: str) -> tuple[str, str]:
    """``NAME=URL`` (an http or https URL) as (name, url); CliError (usage) otherwise."""
    name, equals, url = text.partition("=")
    if not equals or not name or not url.startswith(("http://", "https://")):
        raise CliError(f"--remote takes NAME=URL, e.g. weather=http://127.0.0.1:9000/, got {text!r}", exit_code=2)
    return name, url


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                        help=f"where to serve HTTP (default {DEFAULT_LISTEN}: loopback, a free port); beyond "
                             "loopback only with --token")
    parser.add_argument("--token", default=os.environ.get("ZMESH_A2A_TOKEN"),
                        help="require 'Authorization: Bearer TOKEN' on every request (default $ZMESH_A2A_TOKEN)")
    parser.add_argument("--url", default=None,
                        help="the base URL the agent cards give (default http://HOST:PORT), e.g. behind a proxy")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds an A2A request (a whole stream) may take on the mesh "
                             f"(default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--keep-tasks", type=int, default=DEFAULT_KEEP_TASKS,
                        help=f"tasks that ended each agent keeps for GetTask (default {DEFAULT_KEEP_TASKS})")
    parser.add_argument("--max-body", type=int, default=None, metavar="BYTES",
                        help="the largest request body taken (default 4 x the node's max payload, 4 MiB)")
    parser.add_argument("--remote", action="append", default=[], metavar="NAME=URL",
                        help="also make the A2A agent at URL mesh agent NAME (its card read at start; repeatable)")
    parser.add_argument("--remote-token", default=os.environ.get("ZMESH_A2A_REMOTE_TOKEN"),
                        help="the bearer token sent to the --remote agents (default $ZMESH_A2A_REMOTE_TOKEN)")
    parser.add_argument("--name", default=None,
                        help="the gateway's node name, and its agent's (default a2a-gateway-<pid>)")


async def a2a_gateway(args: argparse.Namespace) -> int:
    """Serve until stopped; print one JSON line once up (mesh, node, agent, url, remotes)."""
    host, port = parse_listen(args.listen)
    remotes = dict(parse_remote(text) for text in args.remote)
    name = args.name or f"a2a-gateway-{os.getpid()}"
    try:
        check_listen(host, args.token)  # before anything binds
        node = Node(args.mesh, name=name, transport=args.transport, seeds=args.seed, interfaces=args.interfaces,
                    port=args.port, key=args.key, trusted=args.trusted, insecure=args.insecure)
        from ...a2a import remote, serve

        server = serve(node, host, port, token=args.token, url=args.url, timeout=args.timeout,
                       keep_tasks=args.keep_tasks, max_body=args.max_body, agent_id=name)
        stand_ins = [remote(node, agent, url, token=args.remote_token, timeout=args.timeout)
                     for agent, url in remotes.items()]
    except (A2ASetupError, ValueError) as exc:
        raise CliError(str(exc), exit_code=2) from None
    async with node, server, contextlib.AsyncExitStack() as stack:
        try:
            for stand_in in stand_ins:
                await stack.enter_async_context(stand_in)
        except A2ASetupError as exc:
            raise CliError(str(exc)) from None
        print(dumps({"mesh": node.mesh, "node": node.id, "endpoint": node.endpoint, "agent": server.agent_id,
                     "url": server.url, "token": args.token is not None, "remotes": remotes}), flush=True)
        await asyncio.Event().wait()
    return 0
