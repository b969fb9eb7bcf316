"""The ``zmesh`` command: ``demo``, and tools to poke a running mesh.

    zmesh demo [--keep] [--secure]                  three processes collaborate (local-only)
    zmesh keygen NAME [--dir DIR]                   write NAME.key and NAME.key_secret
    zmesh peers   --mesh lab [--seed EP] [--json]   the registry as a table (or JSON)
    zmesh send    --mesh lab TARGET TOPIC PAYLOAD   fire-and-forget; prints its id as JSON
    zmesh request --mesh lab TARGET TOPIC PAYLOAD   request and print the reply as JSON (--stream: each chunk)
    zmesh sub     --mesh lab PATTERN                print broadcasts as JSON lines
    zmesh services --mesh lab [CAPABILITY]          providers by capability: requests, errors, average ms
    zmesh top     --mesh lab [--once] [--json]      a live view: nodes, agents, rates, events
    zmesh ga-bridge --root ROOT [--spawn]           a GenericAgent checkout's sub-agents as mesh agents
    zmesh gateway --mesh lab --to nats://H:P        this mesh's agents reachable from a NATS mesh, and back
    zmesh mcp     --mesh lab [--http H:P]           the mesh's capabilities as MCP tools (stdio, or HTTP)
    zmesh a2a-gateway --mesh lab --listen H:P       this mesh's agents as A2A agents over HTTP (--remote: and back)

PAYLOAD is strict JSON, ``--raw TEXT`` (TEXT as a plain string) or
``--null`` (no payload); leaving it out is a usage error. Without
``--seed`` the command finds the mesh by mDNS on the chosen interfaces
(``--interfaces``, default ``$ZMESH_INTERFACES`` or local-only). A mesh
with keys needs ``--key`` and ``--trusted`` (or ``$ZMESH_KEY`` and
``$ZMESH_TRUSTED``); beyond loopback without keys, ``--insecure``. Each
command joins as a short-lived probe node named ``zmesh-cli-<pid>-<hex>``
(:data:`zmesh._tools.cli.commands.CLI_NODE_PREFIX`), which ``peers`` and ``top``
mark.

What is printed is strict JSON (see :mod:`zmesh._tools.cli.json_output`), but for
``peers``' table and ``top``'s drawing without ``--json``. Exit codes:
0 done (``top``: ``q`` pressed), 1 the mesh said no (or nobody answered),
2 usage error (``top``'s live view without ``rich`` installed), 130 Ctrl-C,
143 SIGTERM; on either signal the node says goodbye to its peers first.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Coroutine, Sequence

from ... import __version__
from ...errors import InvalidMessage, ZmeshError
from ..top.app import RICH_MISSING, top
from . import a2a_gateway, ga_bridge, gateway, mcp
from .commands import CLI_NODE_PREFIX, DEFAULT_REQUEST_TIMEOUT, CliError, peers, send, services, sub
from .json_output import PayloadError, parse_payload
from .signals import run_command

__all__ = ["main"]

USAGE_ERROR = 2


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (no limit) or more, got {text}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 0 (any free port) to 65535, got {text}")
    return value


def _port_option(parser: argparse.ArgumentParser, whose: str) -> None:
    parser.add_argument("--port", type=_port, default=0,
                        help=f"bind {whose} router endpoint on this port (default 0: any free port)")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mesh", default=os.environ.get("ZMESH_MESH", "default"),
                        help="mesh name (default: $ZMESH_MESH or 'default')")
    parser.add_argument("--seed", action="append", default=[],
                        help="router endpoint of a member, e.g. tcp://127.0.0.1:5555 (repeatable)")
    parser.add_argument("--interfaces", default=None,
                        help="'local' (default), 'lan', or interface names/addresses, comma-separated")
    parser.add_argument("--transport", default=None,
                        help="'zmq' (default: $ZMESH_TRANSPORT, else zmq), or a broker's URL, e.g. "
                             "nats://127.0.0.1:4222 or mqtt://127.0.0.1:1883")
    parser.add_argument("--wait", type=_positive, default=2.0,
                        help="seconds to wait for the mesh to answer (default 2)")
    _port_option(parser, "this command's node's")
    parser.add_argument("--key", default=None,
                        help="this node's NAME.key_secret (default $ZMESH_KEY): join a mesh with keys")
    parser.add_argument("--trusted", default=None,
                        help="directory of trusted NAME.key files, or comma-separated public keys "
                             "(default $ZMESH_TRUSTED)")
    parser.add_argument("--insecure", action="store_true",
                        help="allow listening beyond 127.0.0.1 without keys (a network you trust)")


_EPILOG = """\
output: peers prints a table (--json: the registry as one JSON object); send
prints {"id", "target", "topic"} as JSON; request the reply's payload as JSON
(--stream: each chunk a JSON line); sub one JSON object a line; services a table
(--json: one JSON object); top draws the view (--json: one JSON line a view).
All JSON printed is strict (no NaN). --json is accepted by every command that
prints: send, request and sub print JSON anyway.
exit codes: 0 done, 1 the mesh said no or nobody answered, 2 usage error,
130/143 stopped by SIGINT/SIGTERM."""


def _json_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--json", action="store_true", help=help_text)


def _service(sub_parsers: Any, name: str, add_options: Callable[[argparse.ArgumentParser], None], *, help: str,
             description: str) -> None:
    """A command that joins the mesh and serves until stopped: the common options, then its own."""
    parser = sub_parsers.add_parser(name, help=help, description=description)
    _common(parser)
    add_options(parser)


def _parser() -> tuple[argparse.ArgumentParser, frozenset[str]]:
    """The parser, and the names of its subcommands."""
    parser = argparse.ArgumentParser(prog="zmesh", description="A brokerless peer mesh for AI agents.",
                                     epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"zmesh {__version__}")
    sub_parsers = parser.add_subparsers(dest="command", required=True)
    demo = sub_parsers.add_parser("demo", help="run the local three-process demo")
    demo.add_argument("--keep", action="store_true",
                      help="leave the demo mesh running and print commands to try against it (Ctrl-C stops it)")
    _port_option(demo, "the console node's (the seed --keep prints)")
    demo.add_argument("--secure", action="store_true",
                      help="give every process a fresh key (in a temporary directory), all trusted: CurveZMQ")
    keygen = sub_parsers.add_parser("keygen", help="write a key pair: NAME.key (public) and NAME.key_secret")
    keygen.add_argument("name", help="the key's name, e.g. the node's")
    keygen.add_argument("--dir", default=".", help="where to write the files (default: the current directory)")
    peers = sub_parsers.add_parser("peers", help="show the mesh registry",
                                   description=f"Show the mesh registry: every node, its endpoint and agents. "
                                               f"Nodes named {CLI_NODE_PREFIX}* are other zmesh commands' "
                                               "short-lived probe nodes, marked '(cli probe)'.")
    _common(peers)
    _json_option(peers, "print the registry as one JSON object: mesh, and nodes with node_id, endpoint, "
                        "incarnation, cli_probe and agents (agent_id, capabilities, subscriptions)")
    svc = sub_parsers.add_parser(
        "services", help="each capability's providers: requests, errors, average processing time",
        description="Each capability in the registry (or only CAPABILITY), as the NATS services framework "
                    "shows endpoints: per provider, the requests its handlers ended, those that failed, the "
                    "average processing time, the handlers running and the inbox.")
    _common(svc)
    svc.add_argument("capability", nargs="?", help="only this capability")
    svc.add_argument("--timeout", type=_positive, default=2.0,
                          help="seconds to wait for each node's figures (default 2)")
    _json_option(svc, "print one JSON object: capability -> providers and totals")
    for name, help_text, prints in (
        ("send", "send a fire-and-forget message", 'prints {"id": ..., "target": ..., "topic": ...} as JSON'),
        ("request", "send a request", "prints the reply's payload as JSON"),
    ):
        p = sub_parsers.add_parser(name, help=help_text, description=f"{help_text[0].upper()}{help_text[1:]}; "
                                   f"{prints}. Give a payload, --raw TEXT or --null.")
        _common(p)
        p.add_argument("target")
        p.add_argument("topic")
        payload = p.add_mutually_exclusive_group()
        payload.add_argument("payload", nargs="?", help="the payload, as strict JSON (a string is quoted: '\"hi\"')")
        payload.add_argument("--raw", "--string", metavar="TEXT",
                             help="send TEXT as a plain string instead of a JSON payload")
        payload.add_argument("--null", action="store_true", help="send no payload (null)")
        _json_option(p, "print JSON (what it prints anyway)")
        if name == "request":
            p.add_argument("--timeout", type=_positive, default=DEFAULT_REQUEST_TIMEOUT,
                           help=f"seconds to wait for the reply (default {DEFAULT_REQUEST_TIMEOUT:g}, "
                                "as in the Python API; with --stream, for the whole stream)")
            p.add_argument("--stream", action="store_true",
                           help="ask for a streamed reply: print each chunk as a JSON line as it comes")
    s = sub_parsers.add_parser("sub", help="print broadcasts matching a pattern",
                               description="Print broadcasts matching a pattern, one JSON object a line: "
                                           "topic, sender, payload.")
    _common(s)
    s.add_argument("pattern")
    s.add_argument("--count", type=_count, default=0, help="print this many messages, then exit (0: no limit)")
    _json_option(s, "print JSON lines (what it prints anyway)")
    t = sub_parsers.add_parser("top", help="a live view of the mesh: nodes, agents, rates, inboxes, events")
    _common(t)
    t.add_argument("--interval", type=_positive, default=1.0, help="seconds between views (default 1)")
    t.add_argument("--once", action="store_true",
                   help="take one view (two samples an --interval apart, for the rates), print it and exit")
    _json_option(t, "print each view as one line of JSON instead of drawing it (needs no 'rich')")
    _service(sub_parsers, "ga-bridge", ga_bridge.add_parser,
             help="expose a GenericAgent checkout's sub-agents (ROOT/temp/NAME/) as mesh agents NAME",
             description="Expose each GenericAgent sub-agent folder ROOT/temp/NAME/ as mesh agent NAME, driven "
                         "over GenericAgent's file protocol: a request on 'task' is its next round, 'stop', "
                         "'keyinfo' and 'intervene' write its control files, 'status' tells its state. Prints "
                         "one JSON line once up (mesh, node, endpoint, root, agents), then runs until stopped. "
                         "See docs/genericagent.md.")
    _service(sub_parsers, "gateway", gateway.add_parser,
             help="join this mesh to another over a second transport, e.g. a LAN to a NATS mesh",
             description="Join the mesh (--from, default zmq) to a mesh on another transport (--to, e.g. "
                         "nats://HOST:PORT): each side's agents get a proxy on the other, and every primitive "
                         "crosses both ways. Run two per LAN for failover (same --domain): one stands in, the "
                         "other takes over when it goes. Prints one JSON line once up, then runs until stopped. "
                         "See docs/scaling.md.")
    _service(sub_parsers, "mcp", mcp.add_parser,
             help="serve the mesh's capabilities as MCP tools (stdio, or --http HOST:PORT)",
             description="An MCP server whose tools are the mesh's capabilities: a call goes to one agent that "
                         "provides it, its chunks come as progress, a cancel stops its handler. Speaks stdio (for an "
                         "MCP host's config) unless --http HOST:PORT; then prints one JSON line with the URL. "
                         "Needs pip install 'zmesh-agents[mcp]'. See docs/ecosystem.md.")
    _service(sub_parsers, "a2a-gateway", a2a_gateway.add_parser,
             help="serve this mesh's agents as A2A agents over HTTP (JSON-RPC, with streaming)",
             description="Serve every agent of the mesh as an A2A agent: http://HOST:PORT/<agent_id>/ (its card at "
                         ".../.well-known/agent-card.json, all cards at /), a message a mesh request, a streaming "
                         "message a mesh stream, CancelTask a cancel. Loopback unless told; beyond it only with "
                         "--token. --remote NAME=URL makes the A2A agent at URL mesh agent NAME. Needs pip install "
                         "'zmesh-agents[a2a]'. Prints one JSON line once up (mesh, node, agent, url, remotes), then "
                         "runs until stopped. See docs/ecosystem.md.")
    for sub_parser in sub_parsers.choices.values():
        sub_parser.set_defaults(subparser=sub_parser)  # so main() can say its usage, not the top level's
    return parser, frozenset(sub_parsers.choices)


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments; on an unknown one the subcommand's own usage and exit 2 (argparse
    would print the top-level usage for it, the subcommand's for every other error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        first = argv.index(unknown[0]) if unknown[0] in argv else len(argv)
        before_the_command = first < argv.index(args.command)  # zmesh --bogus peers
        (parser if before_the_command else args.subparser).error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _keygen(name: str, directory: str) -> int:
    from ...security import keygen, load_key

    try:
        public, secret = keygen(name, directory)
    except (ZmeshError, OSError) as exc:
        print(f"zmesh keygen: error: {exc}", file=sys.stderr)
        return 1
    print(f"public key  {load_key(secret).public}\n"
          f"wrote       {public} (share it: put it in the trusted directory of every node)\n"
          f"            {secret} (mode 0600: keep it on this node only)")
    return 0


def _rich_missing() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return True
    return False


def main(argv: Sequence[str] | None = None) -> int:
    parser, names = _parser()
    args = _parse(parser, argv)
    if args.command == "demo":
        from ..demo.app import run_demo

        return run_demo(keep=args.keep, commands=names, port=args.port, secure=args.secure)
    if args.command == "keygen":
        return _keygen(args.name, args.dir)
    if args.command in ("send", "request"):
        if args.payload is None and args.raw is None and not args.null:
            args.subparser.error("no payload: give one as JSON ('{\"x\": 1}', '\"text\"'), "
                                 "--raw TEXT for a plain string, or --null to send none (null)")
        try:
            args.payload_value = args.raw if args.raw is not None else parse_payload(args.payload)
        except PayloadError as exc:
            print(f"zmesh {args.command}: error: {exc}; to send it as a plain string, use --raw TEXT",
                  file=sys.stderr)
            return USAGE_ERROR
    if args.command == "top" and not args.json and _rich_missing():
        print(f"zmesh top: error: {RICH_MISSING}", file=sys.stderr)
        return USAGE_ERROR
    commands: dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, int]]] = {
        "peers": peers, "send": send, "request": send, "sub": sub, "top": top, "ga-bridge": ga_bridge.ga_bridge,
        "gateway": gateway.gateway, "mcp": mcp.mcp, "a2a-gateway": a2a_gateway.a2a_gateway,
        "services": services,
    }
    command = commands[args.command]
    try:
        return run_command(args.command, lambda: command(args))
    except CliError as exc:
        print(f"zmesh {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except InvalidMessage as exc:  # a bad topic, pattern or payload: nothing was sent
        print(f"zmesh {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except ZmeshError as exc:
        print(f"zmesh {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
