"""NATS: nats-server (started here on 127.0.0.1) and the asyncio client nats-py.

* one-way throughput: publish -> one subscriber process;
* RTT: ``nc.request`` on the client's inbox, echo server ``msg.respond``;
* fan-out: publish -> 4 subscriber processes on one subject;
* ``inflight64``: the RTT pair with 64 ``nc.request`` calls outstanding at once
  (nats-py's shared response inbox), requests/s.

The server gets a large ``max_pending`` and ``write_deadline`` so a slow
Python subscriber is not cut off as a "slow consumer" mid-run.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from ..control import Control
from ..envelope import decode
from ..harness import HOST
from ..roles import INFLIGHT, SinkCounter, make_reply, run_inflight_client_async, run_rtt_client_async, run_source_async
from .base import BASIC, BrokerSystem

__all__ = ["Nats", "peer"]

_CONF = """\
listen: {host}:{port}
max_pending: 268435456
write_deadline: "30s"
"""


class Nats(BrokerSystem):
    key: ClassVar[str] = "nats"
    label: ClassVar[str] = "NATS"
    notes: ClassVar[str] = "nats-server + nats-py (asyncio); RTT via request() on an inbox"
    supports: ClassVar[frozenset[str]] = frozenset({*BASIC, "inflight64"})

    client: ClassVar[str] = "nats"
    client_pip: ClassVar[str] = "nats-py"
    binary: ClassVar[str] = "nats-server"
    binary_apt: ClassVar[str] = "nats-server"

    def server_argv(self, port: int, tmp: Path) -> list[str]:
        conf = tmp / "nats.conf"
        conf.write_text(_CONF.format(host=HOST, port=port))
        return [self._binary, "-a", HOST, "-p", str(port), "-c", str(conf)]

    def versions(self) -> dict[str, str]:
        from nats.aio.client import __version__

        out = subprocess.run(
            [self._binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
        return {"nats-py": __version__, "nats-server": out.stdout.strip()}

    def peer_args(self, workload: str) -> dict[str, Any]:
        assert self._server is not None, "setup() first"
        return {
            "workload": workload,
            "url": f"nats://{HOST}:{self._server.port}",
            "subject": f"bench.{workload}.{uuid.uuid4().hex[:8]}",
        }


# ---------------------------------------------------------------- peer half


def peer(role: str, args: dict[str, Any], ctl: Control) -> None:
    asyncio.run({"sink": _sink, "source": _source, "echo": _echo, "client": _client}[role](args, ctl))


async def _connect(args: dict[str, Any]) -> Any:
    import sys

    import nats

    async def on_error(exc: Exception) -> None:
        print(f"nats error: {exc!r}", file=sys.stderr)

    return await nats.connect(
        servers=[args["url"]], allow_reconnect=False, connect_timeout=5, error_cb=on_error
    )


async def _until(cond: Callable[[], bool], ctl: Control) -> None:
    """Poll *cond* (and STOP) without blocking the event loop, up to the deadline."""
    while not cond() and not ctl.stop.is_set() and not ctl.deadline.expired():
        await asyncio.sleep(0.01)


async def _sink(args: dict[str, Any], ctl: Control) -> None:
    nc = await _connect(args)
    counter = SinkCounter(int(args["n"]), int(args["warmup"]), ctl)

    async def on_msg(msg: Any) -> None:
        counter.feed(decode(msg.data)["type"])

    await nc.subscribe(args["subject"], cb=on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1)
    await nc.flush(timeout=5)  # the server has the subscription once this returns
    ctl.ready()
    await _until(lambda: counter.done, ctl)
    counter.report()
    await nc.close()


async def _source(args: dict[str, Any], ctl: Control) -> None:
    nc = await _connect(args)
    subject = args["subject"]
    ctl.ready()

    async def send(frame: bytes) -> None:
        await nc.publish(subject, frame)

    await run_source_async(send, int(args["n"]), ctl)
    await nc.flush(timeout=30)
    await _until(lambda: False, ctl)  # i.e. until STOP
    await nc.close()


async def _echo(args: dict[str, Any], ctl: Control) -> None:
    nc = await _connect(args)
    seq = 0

    async def on_req(msg: Any) -> None:
        nonlocal seq
        seq += 1
        await msg.respond(make_reply(msg.data, seq))

    await nc.subscribe(args["subject"], cb=on_req)
    await nc.flush(timeout=5)
    ctl.ready({"subject": args["subject"]})
    await _until(lambda: False, ctl)
    await nc.close()


async def _client(args: dict[str, Any], ctl: Control) -> None:
    nc = await _connect(args)
    subject = args["server"]["subject"]

    async def call(frame: bytes) -> bytes:
        msg = await nc.request(subject, frame, timeout=5)
        return bytes(msg.data)

    if args["workload"] == "inflight64":
        window = int(args.get("window", INFLIGHT))
        await run_inflight_client_async(call, int(args["n"]), int(args["warmup"]), ctl, window)
    else:
        await run_rtt_client_async(call, int(args["n"]), int(args["warmup"]), ctl)
    await nc.close()
