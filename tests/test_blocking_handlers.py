"""What the guide's warning on blocking handlers rests on: an ``async def``
handler runs on the node's loop thread (a blocking call there stops the
node), a plain ``def`` one in the worker pool, and ``asyncio.to_thread``
moves the blocking part of an async handler off the loop."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

import zmesh

from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guide.md"


async def test_where_a_blocking_call_runs_by_handler_kind(transport: str) -> None:
    async with Mesh(transport) as m:
        node = await m.node()
        a, b = node.agent("a"), node.agent("b")
        loop_thread = threading.get_ident()
        ran_on: dict[str, int] = {}

        @b.on("async")
        async def in_async(msg: zmesh.Message) -> None:
            ran_on["async"] = threading.get_ident()  # where a blocking call here would run

        @b.on("plain")
        def in_plain(msg: zmesh.Message) -> None:
            ran_on["plain"] = threading.get_ident()

        @b.on("to_thread")
        async def in_thread(msg: zmesh.Message) -> None:
            ran_on["to_thread"] = await asyncio.to_thread(threading.get_ident)

        for topic in ("async", "plain", "to_thread"):
            await a.request("b", topic, timeout=5)
        assert ran_on["async"] == loop_thread
        assert ran_on["plain"] != loop_thread and ran_on["to_thread"] != loop_thread


def test_the_guide_warns_against_blocking_in_async_handlers() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index("**Warning: never make a blocking call in an `async def` handler.**")
    warning = text[start:text.index("Where a handler runs", start)]
    assert "event loop" in warning and "plain `def`" in warning and "asyncio.to_thread" in warning


async def test_a_plain_handler_runs_as_many_calls_at_once_as_its_agents_concurrency() -> None:
    # More than any machine's default pool (min(32, CPUs + 4)): each agent has threads of its own.
    concurrency = 40
    barrier = threading.Barrier(concurrency, timeout=10)
    async with Mesh("inproc") as m:
        node = await m.node()
        a, worker = node.agent("a"), node.agent("w", concurrency=concurrency)

        @worker.on("llm.call")
        def call(msg: zmesh.Message) -> int:  # a sync SDK call that waits on the network
            return barrier.wait()  # BrokenBarrierError unless all 40 run at once

        replies = await asyncio.gather(*(a.request("w", "llm.call", timeout=20) for _ in range(concurrency)))
        assert sorted(r.payload for r in replies) == list(range(concurrency))


async def test_load_reports_handlers_waiting_for_a_thread_apart_from_running_ones() -> None:
    release = threading.Event()
    async with Mesh("inproc") as m:
        node = await m.node(workers=2)  # one shared pool of two threads
        a, worker = node.agent("a"), node.agent("w", concurrency=4)

        @worker.on("slow")
        def slow(msg: zmesh.Message) -> None:
            release.wait(10)

        requests = [asyncio.ensure_future(a.request("w", "slow", timeout=20)) for _ in range(4)]

        def load() -> tuple[int, int]:
            figures = node.stats()["by_agent"]["w"]
            return figures["running"], figures["waiting_for_thread"]

        try:
            await wait_for(lambda: load() == (2, 2), 10, "two running, two waiting for a thread")
        finally:
            release.set()
        await asyncio.gather(*requests)
        assert load() == (0, 0)
