"""In-process transport figures: sends/s and requests/s with a ~200-byte payload.

    python -m bench.inproc [--sends 200000] [--requests 20000] [--repeat 3]

Two in-process nodes of one mesh in this process; a sender agent on one, a
receiver on the other. Sends are fire-and-forget, counted when the receiver
has handled them all; requests are awaited one at a time. Prints each run and
the median, next to the targets (200k sends/s, 40k requests/s).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import msgpack

import zmesh

PAYLOAD = {"text": "x" * 150, "n": 1, "tags": ["bench", "inproc"]}
TARGET_SENDS = 200_000
TARGET_REQUESTS = 40_000


async def measure(sends: int, requests: int) -> tuple[float, float]:
    async with zmesh.Node("bench-inproc", transport="inproc") as n1, zmesh.Node(
        "bench-inproc", transport="inproc"
    ) as n2:
        src, dst = n1.agent("src"), n2.agent("dst")
        done = asyncio.Event()
        seen = 0

        def count(msg: zmesh.Message) -> None:
            nonlocal seen
            seen += 1
            if seen == sends:
                done.set()

        dst.add_handler("one", count, inline=True)
        dst.add_handler("echo", lambda msg: msg.payload, inline=True)
        await n1.wait_for_agents("dst", timeout=5)
        for _ in range(2000):  # warm-up
            await src.request("dst", "echo", PAYLOAD)
        seen = 0

        started = time.perf_counter()
        for i in range(sends):
            await src.send("dst", "one", PAYLOAD)
            if i % 1000 == 999:
                await asyncio.sleep(0)  # let deliveries run, as a real sender would
        await asyncio.wait_for(done.wait(), 60)
        send_rate = sends / (time.perf_counter() - started)

        started = time.perf_counter()
        for _ in range(requests):
            await src.request("dst", "echo", PAYLOAD)
        request_rate = requests / (time.perf_counter() - started)
        return send_rate, request_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=200_000)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"payload {len(msgpack.packb(PAYLOAD))} bytes encoded; {args.repeat} runs")
    results = []
    for run in range(args.repeat):
        sends, requests = asyncio.run(measure(args.sends, args.requests))
        results.append((sends, requests))
        print(f"  run {run + 1}: {sends:10,.0f} sends/s  {requests:8,.0f} requests/s")
    send_med = statistics.median(r[0] for r in results)
    req_med = statistics.median(r[1] for r in results)
    print(f"median:  {send_med:10,.0f} sends/s  {req_med:8,.0f} requests/s")
    print(f"targets: {TARGET_SENDS:10,} sends/s  {TARGET_REQUESTS:8,} requests/s  "
          f"-> {send_med / TARGET_SENDS:.2f}x and {req_med / TARGET_REQUESTS:.2f}x of target")


if __name__ == "__main__":
    main()
