"""NATS JetStream: ``nats-server -js`` (started here on 127.0.0.1, store in its temp dir) and nats-py.

QoS 1 on both legs: a publish is acknowledged by the server once the stream
holds it (a PubAck), and the consumer acknowledges every message it gets
(explicit ack), so the server redelivers what is not acknowledged.

* one-way throughput: ``js.publish_async`` (PubAcks collected in the
  background, at most nats-py's default 4,000 outstanding) -> a stream on
  the subject -> a push consumer in one subscriber process, which counts the
  envelope and then ``msg.ack()``s it. The run ends when the publisher has
  every PubAck (``js.publish_async_completed()``) or at the subscriber's
  n-th message, whichever is later;
* RTT: one stream with a request and a reply subject; the client
  ``js.publish_async``es the request and waits for both its PubAck and the
  reply (from its push consumer, acked); the echo server's consumer gets
  the request, publishes the reply into the stream and acks the request.

Streams use JetStream's default file storage in the server's temp dir (no
fsync per message: the server syncs every 2 minutes by default). Each run
makes its own stream (unique name and subject) and deletes it at the end.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, ClassVar

from ..control import BenchTimeout, Control
from ..envelope import decode
from ..harness import HOST
from ..roles import SinkCounter, make_reply, run_rtt_client_async, run_source_async
from .base import BrokerSystem
from .nats import _CONF as _NATS_CONF
from .nats import _connect, _until

__all__ = ["JetStream", "peer"]

_JS_CONF = """\
jetstream {{
  store_dir: "{store}"
  max_memory_store: 268435456
  max_file_store: 2147483648
}}
"""


class JetStream(BrokerSystem):
    key: ClassVar[str] = "jetstream"
    label: ClassVar[str] = "NATS JetStream"
    notes: ClassVar[str] = (
        "nats-server -js + nats-py; js.publish_async with PubAcks, push consumer with explicit ack, "
        "file storage; one-way ends at the last PubAck or the subscriber's n-th message, whichever is later"
    )
    supports: ClassVar[frozenset[str]] = frozenset({"throughput", "rtt"})

    client: ClassVar[str] = "nats"
    client_pip: ClassVar[str] = "nats-py"
    binary: ClassVar[str] = "nats-server"
    binary_apt: ClassVar[str] = "nats-server"

    def server_argv(self, port: int, tmp: Path) -> list[str]:
        store = tmp / "jetstream"
        store.mkdir(exist_ok=True)
        conf = tmp / "nats-js.conf"
        conf.write_text(_NATS_CONF.format(host=HOST, port=port) + _JS_CONF.format(store=store))
        return [self._binary, "-js", "-a", HOST, "-p", str(port), "-c", str(conf)]

    def versions(self) -> dict[str, str]:
        from nats.aio.client import __version__

        out = subprocess.run(
            [self._binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
        return {"nats-py": __version__, "nats-server": out.stdout.strip(), "jetstream": "file storage"}

    def peer_args(self, workload: str) -> dict[str, Any]:
        assert self._server is not None, "setup() first"
        tag = uuid.uuid4().hex[:8]
        return {
            "workload": workload,
            "url": f"nats://{HOST}:{self._server.port}",
            "subject": f"bench.{workload}.{tag}",
            "stream": f"BENCH_{workload.upper()}_{tag}",
        }


# ---------------------------------------------------------------- peer half


def peer(role: str, args: dict[str, Any], ctl: Control) -> None:
    asyncio.run({"sink": _sink, "source": _source, "echo": _echo, "client": _client}[role](args, ctl))


async def _add_stream(js: Any, name: str, subjects: list[str]) -> None:
    from nats.js.api import StorageType, StreamConfig

    await js.add_stream(StreamConfig(name=name, subjects=subjects, storage=StorageType.FILE))


async def _delete_stream(js: Any, name: str) -> None:
    try:
        await js.delete_stream(name)
    except Exception as exc:  # noqa: BLE001 - best effort: the store dir goes at teardown anyway
        print(f"jetstream: delete_stream {name}: {exc!r}", file=sys.stderr)


class _PubAcks:
    """Counts failed async publishes (a future that ends in an error)."""

    def __init__(self) -> None:
        self.failed = 0
        self.first: BaseException | None = None

    def watch(self, fut: asyncio.Future[Any]) -> None:
        fut.add_done_callback(self._done)

    def _done(self, fut: asyncio.Future[Any]) -> None:
        exc = None if fut.cancelled() else fut.exception()
        if fut.cancelled() or exc is not None:
            self.failed += 1
            self.first = self.first or exc

    def check(self) -> None:
        if self.failed:
            raise RuntimeError(f"{self.failed} JetStream publishes failed, first: {self.first!r}")


async def _sink(args: dict[str, Any], ctl: Control) -> None:
    nc = await _connect(args)
    js = nc.jetstream()
    stream, subject = args["stream"], args["subject"]
    await _add_stream(js, stream, [subject])
    counter = SinkCounter(int(args["n"]), int(args["warmup"]), ctl)

    async def on_msg(msg: Any) -> None:
        counter.feed(decode(msg.data)["type"])
        await msg.ack()

    await js.subscribe(subject, stream=stream, cb=on_msg, manual_ack=True)
    await nc.flush(timeout=5)
    ctl.ready()
    await _until(lambda: counter.done, ctl)
    counter.report()
    await _until(lambda: False, ctl)  # keep acking until STOP
    await _delete_stream(js, stream)
    await nc.close()


async def _source(args: dict[str, Any], ctl: Control) -> None:
    nc = await _connect(args)
    js = nc.jetstream()
    subject = args["subject"]
    acks = _PubAcks()
    ctl.ready()

    async def send(frame: bytes) -> None:
        acks.watch(await js.publish_async(subject, frame))

    async def drain() -> None:
        try:
            await asyncio.wait_for(js.publish_async_completed(), max(1.0, ctl.deadline.left()))
        except asyncio.TimeoutError:
            raise BenchTimeout(f"{js.publish_async_pending()} JetStream publishes without PubAck") from None
        acks.check()

    await run_source_async(send, int(args["n"]), ctl, drain)
    await _until(lambda: False, ctl)  # i.e. until STOP
    await nc.close()


async def _echo(args: dict[str, Any], ctl: Control) -> None:
    nc = await _connect(args)
    js = nc.jetstream()
    stream = args["stream"]
    req, rep = args["subject"] + ".req", args["subject"] + ".rep"
    await _add_stream(js, stream, [req, rep])
    acks = _PubAcks()
    seq = 0

    async def on_req(msg: Any) -> None:
        nonlocal seq
        seq += 1
        acks.watch(await js.publish_async(rep, make_reply(msg.data, seq)))
        await msg.ack()

    await js.subscribe(req, stream=stream, cb=on_req, manual_ack=True)
    await nc.flush(timeout=5)
    ctl.ready({"stream": stream, "req": req, "rep": rep})
    await _until(lambda: False, ctl)
    await _delete_stream(js, stream)
    await nc.close()


async def _client(args: dict[str, Any], ctl: Control) -> None:
    nc = await _connect(args)
    js = nc.jetstream()
    server: dict[str, Any] = args["server"]
    replies: asyncio.Queue[Any] = asyncio.Queue()

    async def on_rep(msg: Any) -> None:
        await replies.put(msg)

    await js.subscribe(server["rep"], stream=server["stream"], cb=on_rep, manual_ack=True)
    await nc.flush(timeout=5)

    async def call(frame: bytes) -> bytes:
        puback = await js.publish_async(server["req"], frame)
        msg = await asyncio.wait_for(replies.get(), 5.0)
        await msg.ack()
        await asyncio.wait_for(puback, 5.0)  # the request is stored, too
        return bytes(msg.data)

    await run_rtt_client_async(call, int(args["n"]), int(args["warmup"]), ctl)
    await nc.close()
