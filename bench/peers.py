"""Entry point of a peer process: ``python -m bench.peers <system> <role> <json-args>``.

Roles: ``sink`` and ``source`` (one-way and fan-out streams), ``echo`` and
``client`` (request/reply), ``flooder`` (one-way traffic to the echo
server's node while a client measures, ``rtt-loaded``), and ``solo`` (a whole measurement inside one
process, for in-process systems such as ``zmesh-inproc``; it reports one
``RESULT``). A ``source`` or ``client`` is started together
with the other side and first waits for its ``PEERS`` line, which becomes
``args["sinks"]`` (list of the sinks' READY infos) or ``args["server"]``
(the echo server's READY info). The peer speaks the line protocol of
:mod:`bench.control` on stdin/stdout and always exits: at STOP, at end of
stdin, or at its deadline (``args["timeout"]`` seconds).
"""

from __future__ import annotations

import json
import sys
import traceback

from .control import Control
from .systems import REGISTRY, load_module

ROLES = ("sink", "source", "echo", "client", "solo", "flooder")


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in REGISTRY or argv[1] not in ROLES:
        print(
            f"usage: python -m bench.peers {{{','.join(REGISTRY)}}} {{{','.join(ROLES)}}} JSON",
            file=sys.stderr,
        )
        return 2
    system, role, raw = argv
    args = json.loads(raw)
    ctl = Control(float(args.get("timeout", 60.0)))
    try:
        module = load_module(system)  # import while the orchestrator readies the other side
        if role in ("source", "flooder"):
            args["sinks"] = ctl.wait_peers()
        elif role == "client":
            args["server"] = ctl.wait_peers()
        module.peer(role, args, ctl)
    except BaseException as exc:  # noqa: BLE001 - report anything (also Ctrl-C) to the orchestrator
        traceback.print_exc(file=sys.stderr)
        ctl.error(f"{type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
