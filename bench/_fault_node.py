"""Child process of ``bench/faults.py`` (private): one zmesh node, a sender or a receiver.

    python -m bench._fault_node sender   --mesh M --name tx-node --agent tx --target rx --qos Q
                                         --count N --rate R [--ttl S] [--store F]
    python -m bench._fault_node receiver --mesh M --name rx-node --agent rx --seed ENDPOINT
                                         [--store F] [--slow S]

Runs inside a lab host (tests/netns.py): ZeroMQ transport, ``interfaces=``
``$ZMESH_INTERFACES`` (the lab sets the host's address), mDNS on, the
default LivenessConfig, plus ``--seed`` endpoints.  ``--store`` is passed
as ``Node(store=...)`` only when this zmesh has that parameter (QoS 1/2
are being added; the harness runs QoS 0 without them).

The **sender** waits for the receiver's agent, then for ``{"op": "go"}``,
then sends ``--count`` messages on topic ``seq`` with payload
``{"s": seq, "pad": ...}`` at ``--rate`` per second (paced by the clock; a
send that waits for flow-control credit delays the ones after it, which
then catch up).  A send that raises is counted by exception type and not
retried: retrying is the library's job at QoS 1/2.  After the last send,
at QoS >= 1, it waits (``--ack-timeout`` s) for ``node.wait_acked`` when
this zmesh has it.

The **receiver** hosts agent ``--agent`` whose ``seq`` handler (an
``async def``; with ``--slow S`` it first sleeps S seconds, one message at
a time) writes ``{"h": seq}`` to stdout as its last step, in one
``write()``: a SIGKILL right after still leaves the line in the pipe.

Output, one JSON object per line (``t`` is ``time.monotonic()``)::

    {"event": "start", "t", "pid", "node", "endpoint", "rss", "store": bool, "qos_api": bool}
    {"event": "peer", "t"}                               sender: the receiver's agent is known
    {"event": "progress", "t", "sent"}                   sender, every 0.25 s while sending
    {"event": "done", "t", "sent", "errors": {type: n}, "elapsed"}
    {"event": "acked", "t", "ok": bool | null, "waited"}  sender, QoS >= 1
    {"h": seq}                                           receiver: one handled message
    {"event": "blocking", "t", "seconds"} / {"event": "unblocked", "t"}
    {"event": "stats", "t", "id", "rss", "rss_peak", "dead_letters", "dead_letter_reasons",
     "dropped", "handled", "counters"}
    {"event": "exit", "t"}

Commands on stdin, one JSON object a line: ``{"op": "go"}`` (sender),
``{"op": "stats", "id": ...}``, ``{"op": "block", "seconds": S}`` (blocks
the event loop in place: a ``time.sleep`` on the loop thread).  The process
closes its node and exits when stdin closes or on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import inspect
import json
import os
import signal
import sys
import time
from typing import Any

import zmesh

PROGRESS_EVERY = 0.25
PAD = "x" * 96  # a ~120-byte payload, a small agent message


def emit(**fields: Any) -> None:
    """One JSON line on stdout in a single write (no Python buffering)."""
    fields.setdefault("t", time.monotonic())
    os.write(1, (json.dumps(fields, default=str) + "\n").encode())


def rss_mb() -> float:
    """This process's resident set size in MB (Linux)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def node_supports(parameter: str) -> bool:
    return parameter in inspect.signature(zmesh.Node).parameters


def make_node(args: argparse.Namespace) -> zmesh.Node:
    kwargs: dict[str, Any] = {
        "name": args.name,
        "seeds": args.seed,
        "interfaces": os.environ.get("ZMESH_INTERFACES"),
        "dead_letter_capacity": max(1024, args.count + 16),
    }
    if args.store and node_supports("store"):
        kwargs["store"] = args.store
    if node_supports("insecure"):
        kwargs["insecure"] = True  # a lab of network namespaces, without keys: say so explicitly
    return zmesh.Node(args.mesh, **kwargs)


async def read_commands(queue: asyncio.Queue[dict[str, Any] | None]) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        try:
            command = json.loads(line)
        except ValueError:
            continue
        if isinstance(command, dict):
            await queue.put(command)
    await queue.put(None)


async def run(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    commands: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    tasks: set[asyncio.Task[Any]] = set()

    def spawn(coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    spawn(read_commands(commands))
    node = make_node(args)
    await node.start()
    handled = 0
    peak = rss_mb()
    go = asyncio.Event()
    try:
        concurrency = 1 if args.slow > 0 else 16
        me = node.agent(args.agent, concurrency=concurrency)
        if args.role == "receiver":
            slow = args.slow

            @me.on("seq")
            async def on_seq(msg: zmesh.Message) -> None:
                nonlocal handled
                if slow > 0:
                    await asyncio.sleep(slow)
                handled += 1
                os.write(1, b'{"h":%d}\n' % int(msg.payload["s"]))

        emit(event="start", pid=os.getpid(), node=node.id, endpoint=node.endpoint, rss=rss_mb(),
             store=bool(args.store) and node_supports("store"),
             qos_api=hasattr(node, "wait_acked"))

        async def sample_rss() -> None:
            nonlocal peak
            while True:
                peak = max(peak, rss_mb())
                await asyncio.sleep(0.5)

        async def send_all() -> None:
            await node.wait_for_agents(args.target, timeout=60)
            emit(event="peer")
            await go.wait()
            errors: collections.Counter[str] = collections.Counter()
            ttl = args.ttl if args.qos >= 1 else None
            start = time.monotonic()
            last = start
            for seq in range(args.count):
                delay = start + seq / args.rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                while True:
                    try:
                        await me.send(args.target, "seq", {"s": seq, "pad": PAD}, qos=args.qos, ttl=ttl)
                        break
                    except zmesh.AgentNotRegistered:
                        # The target is gone for now (a cut, a restart): the send said so and
                        # took nothing. As an application would, wait for it and send again.
                        errors["AgentNotRegistered (sent again)"] += 1
                        try:
                            await node.wait_for_agents(args.target, timeout=30)
                        except zmesh.Timeout:
                            errors["AgentNotRegistered (gave up)"] += 1
                            break
                    except Exception as exc:  # noqa: BLE001  (counted: the harness reports every outcome)
                        errors[type(exc).__name__] += 1
                        break
                now = time.monotonic()
                if now - last >= PROGRESS_EVERY:
                    last = now
                    emit(event="progress", sent=seq + 1)
            emit(event="done", sent=args.count, errors=dict(errors), elapsed=time.monotonic() - start)
            if args.qos >= 1:
                began = time.monotonic()
                wait_acked = getattr(node, "wait_acked", None)
                ok = None if wait_acked is None else bool(await wait_acked(args.ack_timeout))
                emit(event="acked", ok=ok, waited=time.monotonic() - began)

        def report(command_id: str) -> None:
            reasons = collections.Counter(letter.reason for letter in node.dead_letters)
            stats = node.stats()
            emit(event="stats", id=command_id, rss=rss_mb(), rss_peak=max(peak, rss_mb()),
                 dead_letters=node.dead_letters.total, dead_letter_reasons=dict(reasons),
                 dropped=stats.get("dropped", {}), handled=handled,
                 counters={k: v for k, v in stats.items() if isinstance(v, int)})

        async def serve() -> None:
            while (command := await commands.get()) is not None:
                op = command.get("op")
                if op == "go":
                    go.set()
                elif op == "stats":
                    report(str(command.get("id", "")))
                elif op == "block":
                    seconds = float(command.get("seconds", 0))
                    emit(event="blocking", seconds=seconds)
                    time.sleep(seconds)  # the loop thread itself: nothing else runs meanwhile
                    emit(event="unblocked")
            stop.set()

        spawn(sample_rss())
        spawn(serve())
        if args.role == "sender":
            spawn(send_all())
        await stop.wait()
    finally:
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await node.close()
        emit(event="exit")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("role", choices=("sender", "receiver"))
    parser.add_argument("--mesh", required=True)
    parser.add_argument("--name", required=True, help="node name")
    parser.add_argument("--agent", required=True, help="this node's agent id")
    parser.add_argument("--target", default="rx", help="sender: the receiving agent")
    parser.add_argument("--seed", action="append", default=[], help="router endpoint of a member")
    parser.add_argument("--qos", type=int, default=0, choices=(0, 1, 2))
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=100.0, help="messages per second")
    parser.add_argument("--ttl", type=float, default=120.0, help="ttl of QoS >= 1 messages (s)")
    parser.add_argument("--ack-timeout", type=float, default=150.0, help="sender: wait_acked bound (s)")
    parser.add_argument("--store", default="", help="Node(store=...) file, when supported")
    parser.add_argument("--slow", type=float, default=0.0, help="receiver: seconds per message, one at a time")
    return parser.parse_args(argv)


def main() -> None:
    asyncio.run(run(parse()))


if __name__ == "__main__":
    main()
