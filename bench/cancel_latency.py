"""How long a cancel takes to stop the work at the bottom of a delegate chain.

    python bench/cancel_latency.py [TRIES] [--transport URL] [--stream]   # default 20 tries, zmq

Three processes: this one (``top``), ``middle`` and ``bottom``. ``top``
requests ``middle``, whose ``async def`` handler requests ``bottom``, whose
handler waits for ever. Once ``bottom``'s handler runs, ``top`` cancels its
request and notes the time; ``bottom``'s handler notes when it sees
``CancelledError``. Both read ``time.monotonic()`` (one clock for every
process of a host), so the difference is the cancel's way down two hops.
Prints the median, the lowest and the highest, in milliseconds.

With ``--stream`` it is a relayed stream instead: ``top`` streams from
``middle``, whose handler returns ``bottom``'s stream; ``bottom``'s
generator yields one chunk, then waits. Once ``top`` has that chunk it
closes its stream, and ``bottom``'s generator notes when it sees the cancel.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("ZMESH_INTERFACES", "127.0.0.1")

import zmesh  # noqa: E402


async def hop(role: str, mesh: str, seed: str, transport: str) -> None:
    seeds = [seed] if transport == "zmq" else []
    async with zmesh.Node(mesh, name=role, seeds=seeds, transport=transport, discovery=False) as node:
        me = node.agent(role)

        @me.on("tokens")
        async def tokens(msg: zmesh.Message) -> object:
            if role == "middle":
                return me.stream("bottom", "tokens", msg.payload, timeout=60)  # relayed, not buffered
            return bottom_tokens(msg)

        async def bottom_tokens(msg: zmesh.Message) -> object:
            print("started", msg.payload, flush=True)
            yield "first"
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                print("seen", msg.payload, time.monotonic(), flush=True)
                raise

        if role == "middle":
            @me.on("work")
            async def relay(msg: zmesh.Message) -> object:
                return (await me.request("bottom", "work", msg.payload, timeout=60)).payload
        else:
            @me.on("work")
            async def wait(msg: zmesh.Message) -> None:
                print("started", msg.payload, flush=True)
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    print("seen", msg.payload, time.monotonic(), flush=True)
                    raise
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


async def main(tries: int, transport: str, stream: bool) -> None:
    mesh = f"cancel-{os.getpid()}"
    async with zmesh.Node(mesh, name="top", transport=transport, discovery=False) as node:
        top = node.agent("top")
        seed = node.endpoint if transport == "zmq" else "-"
        children = [subprocess.Popen([sys.executable, __file__, "--hop", role, mesh, seed, transport],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                    for role in ("middle", "bottom")]
        bottom = children[1]
        try:
            for child in children:
                assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            await node.wait_for_agents("middle", "bottom", timeout=20)
            assert bottom.stdout is not None
            loop = asyncio.get_running_loop()
            took = []
            for i in range(tries):
                if stream:
                    chunks = top.stream("middle", "tokens", i, timeout=60)
                    asked = asyncio.ensure_future(chunks.__anext__())
                else:
                    asked = asyncio.ensure_future(top.request("middle", "work", i, timeout=60))
                line = await loop.run_in_executor(None, bottom.stdout.readline)
                assert line.split() == ["started", str(i)], line
                if stream:
                    assert await asked == "first"
                    cancelled_at = time.monotonic()
                    asked = asyncio.ensure_future(chunks.aclose())
                else:
                    cancelled_at = time.monotonic()
                    asked.cancel()
                line = await loop.run_in_executor(None, bottom.stdout.readline)
                word, number, seen_at = line.split()
                assert (word, number) == ("seen", str(i)), line
                took.append((float(seen_at) - cancelled_at) * 1e3)
                await asyncio.gather(asked, return_exceptions=True)
            what = "a relayed stream's cancel" if stream else "cancel"
            print(f"{what} down two hops ({transport}), {tries} tries: median {statistics.median(took):.2f} ms, "
                  f"min {min(took):.2f}, max {max(took):.2f}")
        finally:
            for child in children:
                assert child.stdin is not None
                child.stdin.close()
            for child in children:
                try:
                    child.wait(10)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--hop"]:
        asyncio.run(hop(*sys.argv[2:6]))
    else:
        args = sys.argv[1:]
        streamed = "--stream" in args
        if streamed:
            args.remove("--stream")
        where = "zmq"
        if "--transport" in args:
            at = args.index("--transport")
            where = args[at + 1]
            del args[at:at + 2]
        asyncio.run(main(int(args[0]) if args else 20, where, streamed))
