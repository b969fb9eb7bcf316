"""Following what nodes see of their meshes (internal): the gateway and the
MCP server bring their own state in line after every change, and at least
every few seconds (what no event says: a lost race, a takeover to retry)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence

from .errors import NodeClosed
from .node import Node

__all__ = ["follow"]


async def follow(nodes: Sequence[Node], interval: float, step: Callable[[], Awaitable[bool]]) -> None:
    """``await step()`` at once (what changed before this ran), then after each event any of ``nodes``
    sees (several at once: once), and at least every ``interval`` seconds, until it returns False or this
    is cancelled."""
    changed = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def watch(node: Node) -> None:
        async for _event in node.events():
            changed.set()

    watchers = [loop.create_task(watch(node)) for node in nodes]
    try:
        if not await step():
            return
        while True:
            # A timer, not asyncio.wait_for: before 3.12 wait_for can swallow the cancel that ends this.
            timer = loop.call_later(interval, changed.set)
            try:
                await changed.wait()
            finally:
                timer.cancel()
            changed.clear()
            if not await step():
                return
    finally:
        for watcher in watchers:
            watcher.cancel()
        for watcher in watchers:
            with contextlib.suppress(asyncio.CancelledError, NodeClosed):
                await watcher
