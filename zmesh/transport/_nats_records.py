"""A NATS node's membership (internal): the mesh's key-value bucket
``zmesh_MESH``, one key per node holding its record, renewed every
``heartbeat`` seconds; a record not renewed within ``expiry`` seconds is a
node that died (the bucket's max age drops it for newcomers)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Callable

from ._checks import blind_time
from .message import MessageHost
from ._nats_names import from_kv_key, kv_key

__all__ = ["NatsRecords"]


class NatsRecords:
    """This node's record in the bucket ``kv`` and what ``watcher`` says of the others'."""

    def __init__(self, kv: Any, watcher: Any, node_id: str, expiry: float, count: Callable[[str], None]) -> None:
        self._kv, self._watcher = kv, watcher
        self._node_id, self._key = node_id, kv_key(node_id)
        self._expiry = expiry
        self._count = count
        self.record: bytes | None = None  # this node's, while it is to be renewed
        self._renewal: asyncio.Future[None] | None = None
        self._heard: dict[str, tuple[float, bytes]] = {}  # node -> (when renewed, its record)
        self._last_beat = time.monotonic()  # a first beat late is late too
        self._renewed = 0.0  # when the server last took this node's record

    @classmethod
    async def open(cls, js: Any, bucket: str, node_id: str, expiry: float,
                   count: Callable[[str], None]) -> NatsRecords:
        from nats.js.errors import BucketNotFoundError

        try:
            kv = await js.key_value(bucket)
        except BucketNotFoundError:
            kv = await js.create_key_value(bucket=bucket, history=1, ttl=expiry * 2)
        return cls(kv, await kv.watchall(), node_id, expiry, count)

    async def put(self, data: bytes) -> None:
        """Keep ``data`` as this node's record (renewed from now on)."""
        self.record = data
        await self._kv.put(self._key, data)
        self._renewed = time.monotonic()

    async def delete(self, wait: float) -> None:
        """Take this node's record away (waiting ``wait`` seconds at most); not renewed any more."""
        self.record = None
        if self._renewal is not None:
            with contextlib.suppress(BaseException):
                await self._renewal  # a renewal landing after the delete would bring the record back
        await asyncio.wait_for(self._kv.delete(self._key), wait)

    async def watch(self, host: Callable[[], MessageHost | None]) -> None:
        """Tell ``host()`` of every record, new, changed or gone (runs until cancelled)."""
        loaded = False
        while True:
            watcher = self._watcher
            async for entry in watcher:
                to = host()
                if to is None:
                    return
                if entry is None:
                    if not loaded:
                        loaded = True
                        to.on_records_loaded()
                    continue
                self._entry(entry, to)
            if watcher is self._watcher:
                return  # stopped, not replaced (see rewatch)

    def _entry(self, entry: Any, to: MessageHost) -> None:
        node_id = from_kv_key(entry.key)
        if node_id == self._node_id:
            return
        if entry.operation in ("DEL", "PURGE") or not entry.value:
            if self._heard.pop(node_id, None) is not None:
                to.on_record(node_id, None)
            return
        if entry.created is not None and time.time() - entry.created.timestamp() > self._expiry:
            return  # not renewed for longer than a node lives without: it died (a watcher's replay of the bucket)
        old = self._heard.get(node_id)
        self._heard[node_id] = (time.monotonic(), bytes(entry.value))
        if old is None or old[1] != entry.value:
            to.on_record(node_id, bytes(entry.value))

    async def rewatch(self) -> None:
        """After a reconnect: watch the bucket anew (a restarted server lost the old
        watcher's consumer, and nats-py's would come back only after its heartbeats
        were missed, many seconds later). What changed meanwhile is told again;
        a node whose record did not come back is gone once it is not renewed."""
        for delay in (0.1, 0.2, 0.5, 1.0, 2.0):
            try:
                fresh = await self._kv.watchall()
                break
            except Exception:
                self._count("rewatch_failed")
                await asyncio.sleep(delay)
        else:
            return
        old, self._watcher = self._watcher, fresh
        with contextlib.suppress(Exception):
            await old.stop()

    def beat(self, host: MessageHost | None, heartbeat: float) -> None:
        """Once a ``heartbeat``: renew this node's record, and count gone what was
        not renewed (unless this beat finds our own loop just woken from a stall:
        their renewals may be unread, and the time we could not look is not theirs)."""
        renewal = self._renewal
        if self.record is not None and (renewal is None or renewal.done()):
            # The same record again, beside the transport's queue (messages never wait behind it).
            self._renewal = asyncio.ensure_future(self._renew(self.record))
        now = time.monotonic()
        blind, self._last_beat = blind_time(self._last_beat, now, heartbeat, self._expiry), now
        if blind:
            self._heard = {n: (min(now, when + blind), record) for n, (when, record) in self._heard.items()}
            return
        for node_id, (when, _) in list(self._heard.items()):
            if now - when > self._expiry and host is not None:
                del self._heard[node_id]
                host.on_record(node_id, None)

    async def _renew(self, record: bytes) -> None:
        try:
            await self._kv.put(self._key, record)
        except Exception:
            self._count("renew_failed")
        else:
            self._renewed = time.monotonic()

    def renewed_within(self, seconds: float) -> bool:
        """Whether the server took this node's record within the last ``seconds``."""
        return time.monotonic() - self._renewed <= seconds

    async def stop(self) -> None:
        if self._renewal is not None:
            self._renewal.cancel()
            with contextlib.suppress(BaseException):
                await self._renewal
        with contextlib.suppress(Exception):
            await self._watcher.stop()
