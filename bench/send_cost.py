"""What one QoS 0 message costs zmesh's Python, for comparing two trees.

    PYTHONPATH=<tree> python bench/send_cost.py sender N
    PYTHONPATH=<tree> python bench/send_cost.py both N
    PYTHONPATH=<tree> python bench/send_cost.py request N

``sender``: node A sends N one-way messages to an agent on node B (zmq,
one process) while A's links drop every frame and A's credit window never
closes, so only A's send path runs. ``both``: two nodes on the in-process
transport, N messages to an inline handler, so the send and the receive
paths run and nothing else does. ``request``: N requests one after the
other to an inline echo handler (inproc). Each prints CPU microseconds per message.
``both-async`` and ``request-async`` are the same with an ``async def``
handler that never awaits, the path agent builders take first;
``both-qos1`` and ``both-qos1-async`` send at QoS 1 (tracked, acknowledged,
remembered by the receiver). ``request-zmq`` and ``request-zmq-async``: the
requests over ZeroMQ instead, both nodes still in this one process.

CPU time on a shared 2-core machine moves by 5-10 % from run to run. For a
figure that does not, count instructions with callgrind at two sizes and
take the difference per message (start-up and imports cancel out)::

    for n in 2000 12000; do
      PYTHONPATH=<tree> valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$n \\
        python bench/send_cost.py both $n
    done   # then (Ir at 12000 - Ir at 2000) / 10000

It uses only API that every zmesh version since 7bf4ab1 has, so the same
script (run by its path, with the tree on PYTHONPATH) measures an old tree against a new one (the QoS 0 figures in
docs/reliability.md were made this way).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
import time
from typing import Any

os.environ.setdefault("ZMESH_INTERFACES", "127.0.0.1")

import zmesh  # noqa: E402

try:
    from bench.envelope import decode, encode
except ImportError:  # run by its path with a tree that has no bench/ on PYTHONPATH: sys.path[0] is bench/
    from envelope import decode, encode  # type: ignore[import-not-found,no-redef,unused-ignore]

__all__ = ["sender_only", "both_sides", "requests", "zmq_requests"]


def _inline() -> dict[str, bool]:
    return {"inline": True} if "inline" in inspect.signature(zmesh.Agent.add_handler).parameters else {}


def _link_class() -> Any:
    """The zmq transport's link class, wherever this tree keeps it."""
    import importlib

    for module, name in (
        ("zmesh.transport.zmq._link", "ZmqLink"),  # the transport package
        ("zmesh.transport._zmq_link", "ZmqLink"),  # before it: one module per part (2032d30)
        ("zmesh.transport.zmq", "_ZmqLink"),  # before the transport split
    ):
        try:
            found = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
        if isinstance(found, type):
            return found
    raise ImportError("no zmq link class in this zmesh")


async def sender_only(n: int) -> float:
    """CPU seconds per message of A's send path (see the module's doc)."""
    options = {"interfaces": "local", "discovery": False}
    async with zmesh.Node("send-cost", name="sink", **options) as b:  # type: ignore[arg-type]
        b.agent("sink").add_handler("bench", lambda msg: None)
        async with zmesh.Node("send-cost", name="src", seeds=[b.endpoint], **options) as a:  # type: ignore[arg-type]
            src = a.agent("src")
            await a.wait_for_agents("sink", timeout=10)
            engine = a._mesh.engine if hasattr(a, "_mesh") else a._engine  # before the runtime seam: _engine
            flow = getattr(engine, "flow", None)
            if flow is not None:
                flow.window = 1 << 40  # never closes: no credit comes back
            link = _link_class()
            real = link.send
            link.send = lambda self, frame: None  # type: ignore[method-assign,unused-ignore]
            try:
                t0 = time.process_time()
                for i in range(n):
                    await src.send("sink", "bench", encode(i, "data"))
                    if i % 1000 == 999:
                        await asyncio.sleep(0)
                return (time.process_time() - t0) / max(n, 1)
            finally:
                link.send = real  # type: ignore[method-assign,unused-ignore]


async def requests(n: int, asynchronous: bool = False, transport: str = "inproc") -> float:
    """CPU seconds per request and reply, one at a time, both nodes in this one process
    (inproc, or ``"zmq"``; inline echo unless ``asynchronous``)."""
    async def echo(msg: zmesh.Message) -> object:
        return msg.payload

    options: dict[str, object] = (
        {"transport": "inproc", "discovery": False} if transport == "inproc"
        else {"interfaces": "local", "discovery": False})
    async with zmesh.Node("send-cost", name="srv", **options) as b:  # type: ignore[arg-type]
        if asynchronous:
            b.agent("echo").add_handler("e", echo)
        else:
            b.agent("echo").add_handler("e", lambda msg: msg.payload, **_inline())
        async with zmesh.Node("send-cost", name="cli", seeds=[b.endpoint], **options) as a:  # type: ignore[arg-type]
            cli = a.agent("cli")
            await a.wait_for_agents("echo", timeout=10)
            t0 = time.process_time()
            for i in range(n):
                await cli.request("echo", "e", i, timeout=30)
            return (time.process_time() - t0) / max(n, 1)


async def zmq_requests(n: int, asynchronous: bool = False) -> float:
    """:func:`requests` over ZeroMQ."""
    return await requests(n, asynchronous, "zmq")


async def both_sides(n: int, asynchronous: bool = False, qos: int = 0) -> float:
    """CPU seconds per message of send plus receive, in one process (inproc)."""
    done = asyncio.Event()
    count = 0

    def on_msg(msg: zmesh.Message) -> None:
        nonlocal count
        if decode(msg.payload)["type"] == "data":
            count += 1
            if count == n:
                done.set()

    async def on_msg_async(msg: zmesh.Message) -> None:
        on_msg(msg)

    async with zmesh.Node("send-cost", name="sink", transport="inproc", discovery=False) as b:
        if asynchronous:
            b.agent("sink").add_handler("bench", on_msg_async)
        else:
            b.agent("sink").add_handler("bench", on_msg, **_inline())
        async with zmesh.Node("send-cost", name="src", transport="inproc", discovery=False,
                              seeds=[b.endpoint]) as a:
            src = a.agent("src")
            await a.wait_for_agents("sink", timeout=10)
            t0 = time.process_time()
            for i in range(n):
                await src.send("sink", "bench", encode(i, "data"), qos=qos)
                if i % 1000 == 999:
                    await asyncio.sleep(0)
            if n:
                await asyncio.wait_for(done.wait(), 120)
            return (time.process_time() - t0) / max(n, 1)


def main(argv: list[str]) -> int:
    runs = {"sender": sender_only, "both": both_sides, "request": requests,
            "both-async": lambda n: both_sides(n, True), "request-async": lambda n: requests(n, True),
            "both-qos1": lambda n: both_sides(n, False, 1), "both-qos1-async": lambda n: both_sides(n, True, 1),
            "request-zmq": zmq_requests, "request-zmq-async": lambda n: zmq_requests(n, True)}
    if len(argv) != 2 or argv[0] not in runs or not argv[1].isdigit():
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    cost = asyncio.run(runs[argv[0]](int(argv[1])))
    print(f"{argv[0]}: {cost * 1e6:.2f} us CPU per message")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
