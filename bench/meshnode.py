"""One zmesh node in its own process, for the join-time and scale measurements.

``python -m bench.meshnode <json-args>`` starts a local-only node
(``interfaces="local"``, ``discovery=False``, joined through ``seeds``) that
hosts one agent, and speaks a line protocol on stdin/stdout:

stdout
    ``READY {"endpoint", "pid", "t_start", "t_ready"}`` once the node is bound;
    ``COMPLETE {"t", "agents", "rx"}`` when the registry first satisfies the
    expectation (``expect``: a count of agents, or a list of agent ids);
    ``rx`` counts the frames and bytes the node received so far;
    ``STATS {...}`` in answer to ``STATS``; ``ERROR text`` on failure.
stdin
    ``EXPECT <json>`` (a new count or list; answered by COMPLETE),
    ``STATS``, ``STOP``. End of stdin counts as STOP.

Times are ``time.monotonic()`` (CLOCK_MONOTONIC, shared by every process of
the host). Once COMPLETE is reported the node does nothing the bench asked
for: what it costs while idle is zmesh's own liveness traffic. The process
always exits: at STOP, at end of stdin, or at ``timeout`` seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
import traceback
from typing import Any

from .systems.zmesh_mesh import local_env, node_kwargs

_EXIT_GRACE = 10.0  # seconds after STOP before the process exits regardless


def _emit(word: str, data: dict[str, Any] | None = None) -> None:
    sys.stdout.write(word + ("" if data is None else " " + json.dumps(data)) + "\n")
    sys.stdout.flush()


def _satisfied(expect: Any, agents: dict[str, Any]) -> bool:
    if isinstance(expect, list):
        return all(a in agents for a in expect)
    return len(agents) >= int(expect)


async def _main(args: dict[str, Any]) -> None:
    import zmesh

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    expect: list[Any] = [args.get("expect", 1)]
    armed = [True]
    events: dict[str, int] = {}
    rx = {"direct_frames": 0, "direct_bytes": 0, "pub_frames": 0, "pub_bytes": 0}
    node: zmesh.Node | None = None

    def check() -> None:
        if node is None or not armed[0]:
            return
        agents = node.registry.agents()
        if _satisfied(expect[0], agents):
            armed[0] = False
            _emit("COMPLETE", {"t": time.monotonic(), "agents": len(agents), "rx": dict(rx)})

    def command(line: str) -> None:
        word, _, rest = line.strip().partition(" ")
        if word == "STOP":
            stop.set()
        elif word == "EXPECT":
            expect[0] = json.loads(rest)
            armed[0] = True
            check()
        elif word == "STATS" and node is not None:
            s = node.stats()
            _emit(
                "STATS",
                {
                    "peers": s.get("peers", 0),
                    "agents": len(node.registry.agents()),
                    "frames_sent": s.get("frames_sent", 0),
                    "frames_received": s.get("frames_received", 0),
                    "dropped_total": s.get("dropped_total", 0),
                    "events": dict(events),
                    "rx": dict(rx),
                },
            )

    def read_stdin() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(command, line)
        loop.call_soon_threadsafe(stop.set)
        time.sleep(_EXIT_GRACE)  # the loop should have exited by now; make sure
        os._exit(3)

    threading.Thread(target=read_stdin, daemon=True).start()

    # Count what the transport hands the node (frames and bytes, direct and published):
    # wrapped before start(), through the transport's host callbacks.
    kwargs = node_kwargs(list(args.get("seeds", [])))
    if args.get("heartbeat"):  # scale liveness with the heartbeat, in zmesh's default proportions
        hb = float(args["heartbeat"])
        kwargs["liveness"] = zmesh.LivenessConfig(heartbeat=hb, evasive_after=3 * hb, expire_after=6 * hb)
    fresh = zmesh.Node(args["mesh"], name=args["name"], **kwargs)
    # The transport's host: the node itself in older trees, its runtime mesh (a Driver) since the split.
    host: Any = fresh if hasattr(fresh, "on_direct_frame") else fresh._mesh
    direct, published = host.on_direct_frame, host.on_pub_frame

    def on_direct(key: str, frame: bytes, *rest: Any) -> None:
        rx["direct_frames"] += 1
        rx["direct_bytes"] += len(frame)
        direct(key, frame, *rest)

    def on_pub(frame: bytes, *rest: Any) -> None:
        rx["pub_frames"] += 1
        rx["pub_bytes"] += len(frame)
        published(frame, *rest)

    host.on_direct_frame = on_direct
    host.on_pub_frame = on_pub

    t_start = time.monotonic()
    async with fresh as started:
        node = started
        node.agent(args["agent"])
        _emit(
            "READY",
            {"endpoint": node.endpoint, "pid": os.getpid(), "t_start": t_start, "t_ready": time.monotonic()},
        )

        async def watch() -> None:
            async for event in started.events():
                events[event.kind] = events.get(event.kind, 0) + 1
                check()

        watcher = asyncio.create_task(watch())
        check()
        try:
            await asyncio.wait_for(stop.wait(), float(args.get("timeout", 300.0)))
        except asyncio.TimeoutError:
            _emit("ERROR timed out before STOP")
        watcher.cancel()


def main(argv: list[str]) -> int:
    local_env()
    if len(argv) != 1:
        print("usage: python -m bench.meshnode JSON", file=sys.stderr)
        return 2
    try:
        asyncio.run(_main(json.loads(argv[0])))
    except BaseException as exc:  # noqa: BLE001 - report anything to the orchestrator
        traceback.print_exc(file=sys.stderr)
        sys.stdout.write(f"ERROR {type(exc).__name__}: {exc}".replace("\n", " | ") + "\n")
        sys.stdout.flush()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
