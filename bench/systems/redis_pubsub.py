"""Redis pub/sub: redis-server (started here on 127.0.0.1) and redis-py.

* one-way throughput: ``PUBLISH`` -> one subscriber process on a channel.
  redis-py's plain ``publish()`` waits for the server's reply (the receiver
  count), one round trip per message (~8k msg/s on the 2-core bench host),
  while the other clients here write without waiting and let the socket
  coalesce writes. To compare transports rather than client styles, the
  sender pipelines its PUBLISH commands, :data:`PIPELINE` per round trip;
  each is still a separate message to every subscriber;
* RTT: publish on a request channel, the echo server answers on a reply
  channel;
* fan-out: publish -> 4 subscriber processes.

The server runs without persistence and with the pub/sub output-buffer
limit lifted, so a slow subscriber is not disconnected mid-run.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, ClassVar

from ..control import Control
from ..envelope import decode
from ..harness import HOST
from ..roles import SinkCounter, make_reply, run_rtt_client, run_source
from .base import BrokerSystem

__all__ = ["RedisPubSub", "RedisPubSubPlain", "peer"]

_POLL = 0.1  # seconds a get_message waits before looking at STOP/deadline
#: PUBLISH commands the stream sender sends per round trip (1 = plain publish()).
PIPELINE = 64


class RedisPubSub(BrokerSystem):
    key: ClassVar[str] = "redis"
    label: ClassVar[str] = "Redis pub/sub"
    notes: ClassVar[str] = (
        f"redis-server + redis-py; stream sender pipelines {PIPELINE} PUBLISHes per round trip"
    )

    pipeline: ClassVar[int] = PIPELINE

    client: ClassVar[str] = "redis"
    client_pip: ClassVar[str] = "redis"
    binary: ClassVar[str] = "redis-server"
    binary_apt: ClassVar[str] = "redis-server"

    def server_argv(self, port: int, tmp: Path) -> list[str]:
        return [
            self._binary,
            "--port", str(port),
            "--bind", HOST,
            "--save", "",
            "--appendonly", "no",
            "--dir", str(tmp),
            "--client-output-buffer-limit", "pubsub 0 0 0",
        ]  # fmt: skip

    def versions(self) -> dict[str, str]:
        import redis

        out = subprocess.run(
            [self._binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
        return {"redis-py": redis.__version__, "redis-server": out.stdout.strip()}

    def peer_args(self, workload: str) -> dict[str, Any]:
        assert self._server is not None, "setup() first"
        return {
            "workload": workload,
            "port": self._server.port,
            "channel": f"bench.{workload}.{uuid.uuid4().hex[:8]}",
            "pipeline": self.pipeline,
        }


class RedisPubSubPlain(RedisPubSub):
    """The same, with plain ``publish()`` (one round trip per message)."""

    key: ClassVar[str] = "redis-plain"
    label: ClassVar[str] = "Redis plain publish()"
    notes: ClassVar[str] = "redis-py publish() awaits each reply; RTT is the same as redis"
    supports: ClassVar[frozenset[str]] = frozenset({"throughput", "fanout"})
    pipeline: ClassVar[int] = 1


# ---------------------------------------------------------------- peer half


def peer(role: str, args: dict[str, Any], ctl: Control) -> None:
    import redis

    conn = redis.Redis(host=HOST, port=int(args["port"]), socket_timeout=10, socket_connect_timeout=5)
    try:
        {"sink": _sink, "source": _source, "echo": _echo, "client": _client}[role](conn, args, ctl)
    finally:
        conn.close()


def _subscribe(conn: Any, channel: str, ctl: Control) -> Any:
    """Subscribe and wait for the server's confirmation."""
    pubsub = conn.pubsub()
    pubsub.subscribe(channel)
    while True:
        msg = pubsub.get_message(timeout=_POLL)
        if msg is not None and msg["type"] == "subscribe":
            return pubsub
        ctl.deadline.check("subscribe confirmation")


def _sink(conn: Any, args: dict[str, Any], ctl: Control) -> None:
    pubsub = _subscribe(conn, args["channel"], ctl)
    counter = SinkCounter(int(args["n"]), int(args["warmup"]), ctl)
    ctl.ready()
    while not counter.done:
        msg = pubsub.get_message(timeout=_POLL)
        if msg is None or msg["type"] != "message":
            if ctl.stop.is_set() or ctl.deadline.expired():
                break  # report the partial count
            continue
        counter.feed(decode(msg["data"])["type"])
    counter.report()
    pubsub.close()


def _source(conn: Any, args: dict[str, Any], ctl: Control) -> None:
    channel = args["channel"]
    conn.ping()
    ctl.ready()

    pipe = conn.pipeline(transaction=False)
    depth = max(1, int(args.get("pipeline", PIPELINE)))
    queued = 0

    def flush() -> None:
        nonlocal queued
        if queued:
            pipe.execute()
            queued = 0

    def send(frame: bytes) -> None:
        nonlocal queued
        pipe.publish(channel, frame)
        queued += 1
        if queued >= depth:
            flush()

    if depth == 1:
        run_source(lambda frame: conn.publish(channel, frame), int(args["n"]), ctl)
    else:
        run_source(send, int(args["n"]), ctl, flush=flush)
    ctl.wait_stop()


def _echo(conn: Any, args: dict[str, Any], ctl: Control) -> None:
    req, rep = args["channel"] + ".req", args["channel"] + ".rep"
    pubsub = _subscribe(conn, req, ctl)
    ctl.ready({"req": req, "rep": rep})
    seq = 0
    while not ctl.stop.is_set() and not ctl.deadline.expired():
        msg = pubsub.get_message(timeout=_POLL)
        if msg is not None and msg["type"] == "message":
            seq += 1
            conn.publish(rep, make_reply(msg["data"], seq))
    pubsub.close()


def _client(conn: Any, args: dict[str, Any], ctl: Control) -> None:
    pubsub = _subscribe(conn, args["server"]["rep"], ctl)
    req = args["server"]["req"]

    def call(frame: bytes) -> bytes:
        conn.publish(req, frame)
        give_up = time.monotonic() + 5.0
        while time.monotonic() < give_up:
            msg = pubsub.get_message(timeout=1.0)
            if msg is not None and msg["type"] == "message":
                return bytes(msg["data"])
        raise TimeoutError("no reply within 5 s")

    run_rtt_client(call, int(args["n"]), int(args["warmup"]), ctl)
    pubsub.close()
