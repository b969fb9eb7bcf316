"""Raw pyzmq: the ceiling the other systems are compared with.

* one-way throughput and RTT: DEALER -> ROUTER over tcp://127.0.0.1,
  one envelope per frame;
* ``zmq-batch32``: the same DEALER -> ROUTER stream with 32 envelopes
  packed into each frame (throughput only), to show what batching buys;
* fan-out: PUB (binds) -> 4 SUB processes (connect), high-water marks off
  so nothing is dropped;
* ``paced``: the same DEALER -> ROUTER stream from an asyncio sender
  (``zmq.asyncio``) that yields to its event loop (``await asyncio.sleep(0)``)
  after every send, as the zmesh ``paced`` sender does;
* ``payload-64k``, ``payload-1m``: the one-way stream with envelopes of that
  size, the high-water marks at about 8 MiB queued per socket.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from ..control import Control
from ..envelope import decode, decode_batch
from ..harness import HOST, free_port
from ..roles import SinkCounter, make_reply, run_rtt_client, run_source, run_source_async
from .base import BASIC, PAYLOADS, PeerSystem, module_available

__all__ = ["RawZmq", "RawZmqBatch", "peer"]

BATCH = 32
_POLL_MS = 100  # how long a blocking recv waits before looking at STOP/deadline


class RawZmq(PeerSystem):
    key: ClassVar[str] = "zmq"
    label: ClassVar[str] = "raw pyzmq"
    notes: ClassVar[str] = "DEALER->ROUTER, 1 envelope/frame; fan-out PUB->SUB; paced: zmq.asyncio, sleep(0) per send"
    supports: ClassVar[frozenset[str]] = frozenset({*BASIC, "paced", *PAYLOADS})

    def available(self) -> tuple[bool, str]:
        return module_available("zmq", "pyzmq")

    def versions(self) -> dict[str, str]:
        import zmq

        return {"pyzmq": zmq.__version__, "libzmq": zmq.zmq_version()}

    def peer_args(self, workload: str) -> dict[str, Any]:
        args: dict[str, Any] = {"workload": workload, "batch": 1}
        if workload == "fanout":
            args["endpoint"] = f"tcp://{HOST}:{free_port()}"  # PUB binds, SUBs connect
        return args


class RawZmqBatch(RawZmq):
    key: ClassVar[str] = "zmq-batch32"
    label: ClassVar[str] = "raw pyzmq x32 batch"
    notes: ClassVar[str] = f"DEALER->ROUTER, {BATCH} envelopes packed per frame (throughput only)"
    supports: ClassVar[frozenset[str]] = frozenset({"throughput"})

    def peer_args(self, workload: str) -> dict[str, Any]:
        return {"workload": workload, "batch": BATCH}

    def throughput(self, n: int) -> float | None:
        return super().throughput(math.ceil(n / BATCH) * BATCH)


# ---------------------------------------------------------------- peer half


def peer(role: str, args: dict[str, Any], ctl: Control) -> None:
    import zmq

    ctx = zmq.Context()
    try:
        {"sink": _sink, "source": _source, "echo": _echo, "client": _client}[role](ctx, args, ctl)
    finally:
        ctx.destroy(linger=0)


#: Bytes a socket may queue in the payload workloads (its high-water mark, in messages).
_QUEUE_BYTES = 8 << 20


def _hwm(args: dict[str, Any]) -> int | None:
    """The high-water mark for large envelopes (None: libzmq's default)."""
    size = int(args.get("size", 0))
    return max(4, _QUEUE_BYTES // size) if size > 4096 else None


def _sink(ctx: Any, args: dict[str, Any], ctl: Control) -> None:
    import zmq

    if args["workload"] == "fanout":
        sock = ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(args["endpoint"])
        info: dict[str, Any] = {}
    else:
        sock = ctx.socket(zmq.ROUTER)
        hwm = _hwm(args)
        if hwm is not None:
            sock.setsockopt(zmq.RCVHWM, hwm)
        port = sock.bind_to_random_port(f"tcp://{HOST}")
        info = {"endpoint": f"tcp://{HOST}:{port}"}
    sock.setsockopt(zmq.RCVTIMEO, _POLL_MS)
    counter = SinkCounter(int(args["n"]), int(args["warmup"]), ctl)
    batch = int(args.get("batch", 1))
    ctl.ready(info)
    while not counter.done:
        try:
            payload = sock.recv_multipart()[-1]
        except zmq.Again:
            if ctl.stop.is_set() or ctl.deadline.expired():
                break  # report the partial count
            continue
        if batch > 1:
            for env in decode_batch(payload):
                counter.feed(env["type"])
        else:
            counter.feed(decode(payload)["type"])
    counter.report()


def _source(ctx: Any, args: dict[str, Any], ctl: Control) -> None:
    import zmq

    if args["workload"] == "paced":
        _paced_source(args, ctl)
        return
    if args["workload"] == "fanout":
        sock = ctx.socket(zmq.PUB)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.bind(args["endpoint"])
    else:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.SNDTIMEO, 10_000)  # a stalled receiver fails the run, not hangs it
        hwm = _hwm(args)
        if hwm is not None:
            sock.setsockopt(zmq.SNDHWM, hwm)
        sock.connect(args["sinks"][0]["endpoint"])
    ctl.ready()
    run_source(sock.send, int(args["n"]), ctl, batch=int(args.get("batch", 1)), size=int(args.get("size", 0)))
    ctl.wait_stop()


def _paced_source(args: dict[str, Any], ctl: Control) -> None:
    """DEALER from an asyncio sender that yields to its loop after every send."""
    import asyncio

    import zmq
    import zmq.asyncio

    async def main() -> None:
        actx = zmq.asyncio.Context()
        sock = actx.socket(zmq.DEALER)
        try:
            sock.setsockopt(zmq.SNDTIMEO, 10_000)
            sock.connect(args["sinks"][0]["endpoint"])
            ctl.ready()

            async def send(frame: bytes) -> None:
                await sock.send(frame)

            await run_source_async(send, int(args["n"]), ctl, pace_every=1)
            while not ctl.stop.is_set() and not ctl.deadline.expired():
                await asyncio.sleep(0.01)
        finally:
            sock.close(linger=0)
            actx.term()

    asyncio.run(main())


def _echo(ctx: Any, args: dict[str, Any], ctl: Control) -> None:
    import zmq

    sock = ctx.socket(zmq.ROUTER)
    port = sock.bind_to_random_port(f"tcp://{HOST}")
    sock.setsockopt(zmq.RCVTIMEO, _POLL_MS)
    ctl.ready({"endpoint": f"tcp://{HOST}:{port}"})
    seq = 0
    while not ctl.stop.is_set() and not ctl.deadline.expired():
        try:
            ident, request = sock.recv_multipart()
        except zmq.Again:
            continue
        sock.send_multipart([ident, make_reply(request, seq)])
        seq += 1


def _client(ctx: Any, args: dict[str, Any], ctl: Control) -> None:
    import zmq

    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.RCVTIMEO, 5_000)
    sock.setsockopt(zmq.SNDTIMEO, 5_000)
    sock.connect(args["server"]["endpoint"])

    def call(frame: bytes) -> bytes:
        sock.send(frame)
        return bytes(sock.recv())

    run_rtt_client(call, int(args["n"]), int(args["warmup"]), ctl)
