"""Raw pyzmq: the ceiling the other systems are compared with.

* one-way throughput and RTT: DEALER -> ROUTER over tcp://127.0.0.1,
  one envelope per frame;
* ``zmq-batch32``: the same DEALER -> ROUTER stream with 32 envelopes
  packed into each frame (throughput only), to show what batching buys;
* fan-out: PUB (binds) -> 4 SUB processes (connect), high-water marks off
  so nothing is dropped.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from ..control import Control
from ..envelope import decode, decode_batch
from ..harness import HOST, free_port
from ..roles import SinkCounter, make_reply, run_rtt_client, run_source
from .base import PeerSystem, module_available

__all__ = ["RawZmq", "RawZmqBatch", "peer"]

BATCH = 32
_POLL_MS = 100  # how long a blocking recv waits before looking at STOP/deadline


class RawZmq(PeerSystem):
    key: ClassVar[str] = "zmq"
    label: ClassVar[str] = "raw pyzmq"
    notes: ClassVar[str] = "DEALER->ROUTER, 1 envelope/frame; fan-out PUB->SUB"

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

    if args["workload"] == "fanout":
        sock = ctx.socket(zmq.PUB)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.bind(args["endpoint"])
    else:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.SNDTIMEO, 10_000)  # a stalled receiver fails the run, not hangs it
        sock.connect(args["sinks"][0]["endpoint"])
    ctl.ready()
    run_source(sock.send, int(args["n"]), ctl, batch=int(args.get("batch", 1)))
    ctl.wait_stop()


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
