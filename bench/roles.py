"""Peer-side loops shared by every system: source, sink and RTT client.

A system module supplies only the transport calls (send a frame, receive a
frame, make a request); these loops do the counting, warm-up and timing the
same way for all systems, so the numbers compare like with like.

Timing uses ``time.monotonic()`` (CLOCK_MONOTONIC, shared by all processes
of the host) so a sender's start and a receiver's end can be subtracted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .control import Control
from .envelope import decode, encode, encode_batch, encode_with_id

__all__ = [
    "INFLIGHT",
    "PACE_EVERY",
    "SinkCounter",
    "make_reply",
    "percentile",
    "run_flood_async",
    "run_inflight_client_async",
    "run_rtt_client",
    "run_rtt_client_async",
    "run_source",
    "run_source_async",
]

#: Warm-up is sent in bursts of this many envelopes, one burst per pause.
WARMUP_BURST = 32
#: Pause between warm-up bursts, so warm-up never builds a backlog.
WARMUP_PAUSE = 0.002
#: How often (in messages) the data loop looks at its deadline and STOP.
CHECK_EVERY = 4096
#: Every asyncio sender pauses (``await asyncio.sleep(0)``) after this many
#: data messages, the same cadence for every system: a client whose send
#: coroutine never suspends (zmesh) or only buffers (nats-py, whose flusher
#: task would otherwise hold up to 2 MiB before its first write) gets its
#: event loop a turn to write, read acks and run heartbeats. The pause is
#: inside the timed phase for every system alike.
PACE_EVERY = 1000
#: Requests kept outstanding by the ``inflight64`` client.
INFLIGHT = 64


class SinkCounter:
    """Counts what a receiver gets; reports WARM after the warm-up and the
    monotonic time of the n-th data envelope."""

    def __init__(self, n: int, warmup: int, ctl: Control) -> None:
        self.n = n
        self.warmup = max(1, warmup)
        self.ctl = ctl
        self.count = 0
        self.warm_seen = 0
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.done = False

    def feed(self, kind: str) -> bool:
        """Count one received envelope by its ``type``; True once n data arrived."""
        if kind == "data":
            self.count += 1
            if self.count == 1:
                self.t_first = time.monotonic()
            if self.count >= self.n:
                self.t_last = time.monotonic()
                self.done = True
        elif kind == "warmup":
            self.warm_seen += 1
            if self.warm_seen == self.warmup:
                self.ctl.warm()
        return self.done

    def report(self) -> None:
        self.ctl.result(
            {"count": self.count, "warm": self.warm_seen, "t_first": self.t_first, "t_last": self.t_last}
        )


def _frames(seq: int, kind: str, batch: int, size: int = 0) -> bytes:
    if batch <= 1:
        return encode(seq, kind, size=size)
    return encode_batch([encode(seq + i, kind, size=size) for i in range(batch)])


def run_source(
    send: Callable[[bytes], None],
    n: int,
    ctl: Control,
    batch: int = 1,
    flush: Callable[[], None] | None = None,
    drain: Callable[[], None] | None = None,
    size: int = 0,
) -> None:
    """Warm up until GO, then send n data envelopes as fast as *send* allows.

    With ``batch > 1`` each frame holds *batch* envelopes (n is rounded up
    to whole frames by the orchestrator). *flush*, if given, is called after
    each warm-up burst and after the last data envelope (for clients that
    buffer, e.g. a Redis pipeline). *drain*, if given (QoS 1 senders), is
    called after the last data envelope and must return once every message
    sent is acknowledged (bounded by the deadline); its end is reported as
    ``t_acked`` and the harness counts the run until then. With *size*,
    every data envelope packs to that many bytes (warm-up stays small).
    """
    seq = 0
    while not ctl.go.is_set():
        if batch > 1:
            send(_frames(seq, "warmup", WARMUP_BURST))
        else:
            for i in range(WARMUP_BURST):
                send(encode(seq + i, "warmup"))
        seq += WARMUP_BURST
        if flush is not None:
            flush()
        ctl.go.wait(WARMUP_PAUSE)
        ctl.deadline.check("waiting for GO during warm-up")
    if ctl.stop.is_set():
        return
    t0 = time.monotonic()
    step = max(1, batch)
    for i in range(0, n, step):
        send(_frames(i, "data", batch, size) if batch > 1 else encode(i, "data", size=size))
        if i % CHECK_EVERY < step:
            ctl.deadline.check("sending")
            if ctl.stop.is_set():
                break
    if flush is not None:
        flush()
    t_sent = time.monotonic()
    out: dict[str, Any] = {"t0": t0, "t_sent": t_sent}
    if drain is not None:
        drain()
        out["t_acked"] = time.monotonic()
    ctl.result(out)


async def run_source_async(
    send: Callable[[bytes], Awaitable[None]],
    n: int,
    ctl: Control,
    drain: Callable[[], Awaitable[None]] | None = None,
    pace_every: int = PACE_EVERY,
    size: int = 0,
) -> None:
    """:func:`run_source` for asyncio clients (one envelope per message).

    The data loop pauses (``await asyncio.sleep(0)``) after every
    *pace_every* messages: :data:`PACE_EVERY` is one cadence for every
    asyncio system; the ``paced`` workload passes 1, so the loop runs after
    every send and each message travels alone. *size* as for :func:`run_source`.
    """
    import asyncio

    seq = 0
    while not ctl.go.is_set():
        for i in range(WARMUP_BURST):
            await send(encode(seq + i, "warmup"))
        seq += WARMUP_BURST
        await asyncio.sleep(WARMUP_PAUSE)
        ctl.deadline.check("waiting for GO during warm-up")
    if ctl.stop.is_set():
        return
    t0 = time.monotonic()
    pace = max(1, pace_every)
    for i in range(n):
        await send(encode(i, "data", size=size))
        if i % pace == pace - 1:
            await asyncio.sleep(0)
        if i % CHECK_EVERY == 0:
            ctl.deadline.check("sending")
            if ctl.stop.is_set():
                break
    t_sent = time.monotonic()
    out: dict[str, Any] = {"t0": t0, "t_sent": t_sent}
    if drain is not None:
        await drain()
        out["t_acked"] = time.monotonic()
    ctl.result(out)


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (q in 0..1)."""
    if not sorted_values:
        raise ValueError("no samples")
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def _summary(samples_ns: list[int]) -> dict[str, Any]:
    us = sorted(s / 1000.0 for s in samples_ns)
    return {
        "n": len(us),
        "p50_us": percentile(us, 0.50),
        "p99_us": percentile(us, 0.99),
        "mean_us": sum(us) / len(us),
        "min_us": us[0],
        "max_us": us[-1],
    }


def _check_reply(reply: dict[str, Any], msg_id: str) -> None:
    if reply.get("type") != "reply" or reply.get("correlation_id") != msg_id:
        raise RuntimeError(f"unexpected reply {reply.get('type')!r} for {msg_id}")


def run_rtt_client(call: Callable[[bytes], bytes], n: int, warmup: int, ctl: Control) -> None:
    """Do warmup + n awaited round trips, one at a time; report p50/p99 of the n.

    Each sample runs from just before the request is encoded to just after
    the reply is decoded. *call* must bound its own wait.
    """
    samples: list[int] = []
    for i in range(warmup + n):
        t = time.perf_counter_ns()
        msg_id, frame = encode_with_id(i, "request")
        reply = decode(call(frame))
        dt = time.perf_counter_ns() - t
        _check_reply(reply, msg_id)
        if i >= warmup:
            samples.append(dt)
        if ctl.stop.is_set():
            raise RuntimeError("stopped during round trips")
        if i % 256 == 0:
            ctl.deadline.check("round trips")
    ctl.result(_summary(samples))


async def run_rtt_client_async(
    call: Callable[[bytes], Awaitable[bytes]], n: int, warmup: int, ctl: Control
) -> None:
    """:func:`run_rtt_client` for asyncio clients."""
    samples: list[int] = []
    for i in range(warmup + n):
        t = time.perf_counter_ns()
        msg_id, frame = encode_with_id(i, "request")
        reply = decode(await call(frame))
        dt = time.perf_counter_ns() - t
        _check_reply(reply, msg_id)
        if i >= warmup:
            samples.append(dt)
        if ctl.stop.is_set():
            raise RuntimeError("stopped during round trips")
        if i % 256 == 0:
            ctl.deadline.check("round trips")
    ctl.result(_summary(samples))


async def run_inflight_client_async(
    call: Callable[[bytes], Awaitable[bytes]], n: int, warmup: int, ctl: Control, window: int = INFLIGHT
) -> None:
    """Requests with *window* outstanding: warmup of them, then n timed; report requests/s.

    *window* workers each send a request, await its reply (checking its
    correlation id) and send the next, until n have been sent in all; the
    time runs from the first timed request to the last reply.
    """
    import asyncio

    async def batch(count: int, first: int) -> None:
        issued = 0

        async def worker() -> None:
            nonlocal issued
            while issued < count:
                i = first + issued
                issued += 1
                msg_id, frame = encode_with_id(i, "request")
                _check_reply(decode(await call(frame)), msg_id)
                if ctl.stop.is_set():
                    raise RuntimeError("stopped during requests in flight")
                if i % 256 == 0:
                    ctl.deadline.check("requests in flight")

        await asyncio.gather(*(worker() for _ in range(max(1, min(window, count)))))

    await batch(warmup, 0)
    t0 = time.monotonic()
    await batch(n, warmup)
    elapsed = time.monotonic() - t0
    ctl.result({"n": n, "window": window, "elapsed": elapsed, "rate": n / elapsed})


async def run_flood_async(send: Callable[[bytes], Awaitable[None]], ctl: Control) -> None:
    """After GO, send data envelopes as fast as *send* allows until STOP (or the deadline).

    Paced like every asyncio source (:data:`PACE_EVERY`); says WARM once the
    first :data:`PACE_EVERY` are sent, and at STOP reports how many it sent
    and over how long (``rate``: the flood the other measurement ran under).
    """
    import asyncio

    while not ctl.go.is_set():
        await asyncio.sleep(0.005)
        ctl.deadline.check("waiting for GO")
    t0 = time.monotonic()
    i = 0
    while not ctl.stop.is_set() and not ctl.deadline.expired():
        await send(encode(i, "data"))
        i += 1
        if i % PACE_EVERY == 0:
            await asyncio.sleep(0)
            if i == PACE_EVERY:
                ctl.warm()
    elapsed = time.monotonic() - t0
    ctl.result({"sent": i, "elapsed": elapsed, "rate": i / elapsed if elapsed > 0 else 0.0})


def make_reply(request: bytes, seq: int) -> bytes:
    """What every echo server does: decode the request, build and pack its reply."""
    req = decode(request)
    return encode(seq, "reply", str(req["msg_id"]))
