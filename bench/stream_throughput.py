"""A streamed reply's throughput against one-way sends of the same chunks.

    python bench/stream_throughput.py [CHUNKS] [--size BYTES] [--rounds N] [--transport NAME]

Two nodes in this process (zmq by default). Each round, interleaved (the
order alternates): ``stream``, one ``agent.stream()`` of CHUNKS chunks of
BYTES bytes from an ``async def`` generator; ``sends``, the same number of
``agent.send()`` of the same payload to an inline handler, timed until the
last arrived. Prints, per measure, the median chunks/s and bytes/s, and
the median of stream/sends per round with the lowest and highest.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import AsyncIterator

os.environ.setdefault("ZMESH_INTERFACES", "127.0.0.1")

import zmesh  # noqa: E402


async def measure(chunks: int, size: int, rounds: int, transport: str) -> None:
    mesh = f"stream-bench-{os.getpid()}"
    payload = "x" * size
    async with zmesh.Node(mesh, transport=transport, discovery=False) as n1, \
            zmesh.Node(mesh, transport=transport, discovery=False,
                       seeds=[n1.endpoint] if transport == "zmq" else []) as n2:
        reader, producer = n1.agent("reader"), n2.agent("producer")
        arrived = 0
        all_in = asyncio.Event()

        @producer.on("tokens")
        async def tokens(msg: zmesh.Message) -> AsyncIterator[str]:
            for _ in range(msg.payload):
                yield payload

        @reader.on("chunk", inline=True)
        def chunk(msg: zmesh.Message) -> None:
            nonlocal arrived
            arrived += 1
            if arrived == chunks:
                all_in.set()

        await n1.wait_for_agents("producer", timeout=20)
        await n2.wait_for_agents("reader", timeout=20)

        async def streamed() -> float:
            start = time.perf_counter()
            got = 0
            async for _ in reader.stream("producer", "tokens", chunks, timeout=600):
                got += 1
            assert got == chunks
            return time.perf_counter() - start

        async def sent() -> float:
            nonlocal arrived
            arrived = 0
            all_in.clear()
            start = time.perf_counter()
            for _ in range(chunks):
                await producer.send("reader", "chunk", payload)
            await asyncio.wait_for(all_in.wait(), 600)
            return time.perf_counter() - start

        await streamed()  # warm up both
        await sent()
        took: dict[str, list[float]] = {"stream": [], "sends": []}
        for r in range(rounds):
            order = [("stream", streamed), ("sends", sent)]
            for name, run in order if r % 2 == 0 else order[::-1]:
                took[name].append(await run())
        for name, times in took.items():
            rate = chunks / statistics.median(times)
            print(f"{name}: {rate:,.0f} chunks/s, {rate * size / 1e6:,.1f} MB/s "
                  f"({chunks} x {size} B, {transport}, median of {rounds})")
        ratios = [s / o for s, o in zip(took["sends"], took["stream"])]
        print(f"stream/sends throughput: median {statistics.median(ratios):.2f} "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chunks", nargs="?", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--transport", default="zmq")
    args = parser.parse_args()
    asyncio.run(measure(args.chunks, args.size, args.rounds, args.transport))
