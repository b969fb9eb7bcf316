"""A keyed node in a process of its own, for tests/test_hostile_fds.py.

    python -m tests._fds_victim MESH SECRET TRUSTED SOFT_LIMIT

Sets this process's soft ``RLIMIT_NOFILE`` to SOFT_LIMIT before zmesh
starts, then runs node ``victim`` (key SECRET, trusting TRUSTED) hosting
agent ``v``, whose ``whoami`` answers ``"v"``. Prints JSON lines: once
started ``{"ready": endpoint, "pub": endpoint, "soft_before": n, "soft": n}``
(the soft limit before the node started and after), then, for every line
read on stdin, ``{"dropped": {...}, "peers": [...]}``. Exits when stdin closes.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
from typing import Any


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


async def main(mesh: str, secret: str, trusted: str) -> None:
    import zmesh

    soft_before = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    async with zmesh.Node(mesh, name="victim", key=secret, trusted=trusted, discovery=False) as node:
        node.agent("v").add_handler("whoami", lambda msg: "v", inline=True)
        say(ready=node.endpoint, pub=node.pub_endpoint, soft_before=soft_before,
            soft=resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        loop = asyncio.get_running_loop()
        # A thread reads stdin: it needs no descriptor, however many the attack takes.
        while await loop.run_in_executor(None, sys.stdin.readline):
            say(dropped=node.stats()["dropped"], peers=node.peers)


if __name__ == "__main__":
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[4]), hard))
    asyncio.run(main(*sys.argv[1:4]))
