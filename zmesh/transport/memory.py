"""An in-process message-level transport: nodes meet in a :class:`MemoryBroker`.

It does what a broker transport does (addresses, topics, membership
records), in memory, so the runtime's message-level path runs without a
server; the conformance suite runs on it. Deliveries are asynchronous, as
over a network: each is a callback on the receiving node's loop (any
thread's), in the order it was sent.

::

    broker = MemoryBroker()
    async with Node("lab", transport=MemoryTransport(broker)) as a, \\
               Node("lab", transport=MemoryTransport(broker)) as b:
        ...
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import TransportError
from ..topics import matches
from .base import TransportCapabilities
from .message import MessageHost, MessageTransport

__all__ = ["MemoryBroker", "MemoryTransport"]


@dataclass(eq=False)
class _Room:
    """One mesh's state in a broker."""

    listeners: dict[str, MemoryTransport] = field(default_factory=dict)
    records: dict[str, bytes] = field(default_factory=dict)
    members: dict[str, MemoryTransport] = field(default_factory=dict)


class MemoryBroker:
    """Where :class:`MemoryTransport` nodes meet; one per group of meshes (thread-safe)."""

    def __init__(self) -> None:
        self._rooms: dict[str, _Room] = {}
        self.lock = threading.Lock()
        self.closed = False

    def room(self, mesh: str) -> _Room:
        return self._rooms.setdefault(mesh, _Room())

    def close(self) -> None:
        """No node starts on it any more (those started keep working until they close)."""
        self.closed = True


class MemoryTransport(MessageTransport):
    """A node's connection to a :class:`MemoryBroker`."""

    capabilities = TransportCapabilities(level="message", peers_can_vanish=False, discovery="none")
    name = "memory"

    def __init__(self, broker: MemoryBroker) -> None:
        if not isinstance(broker, MemoryBroker):
            raise TypeError(f"broker must be a MemoryBroker, got {broker!r}")
        self.broker = broker
        self.router_endpoint = f"memory://{id(broker):x}"
        self._host: MessageHost | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._room: _Room | None = None
        self._node_id = ""
        self._patterns: set[str] = set()
        self._addresses: set[str] = set()
        self._counters: dict[str, int] = {}

    async def start(self, host: MessageHost, mesh: str, node_id: str, loop: asyncio.AbstractEventLoop) -> None:
        broker = self.broker
        with broker.lock:
            if broker.closed:
                raise TransportError("the memory broker is closed")
            if self._room is not None:
                raise TransportError("this MemoryTransport is started already: give each node its own")
            room = broker.room(mesh)
            if node_id in room.members:
                raise TransportError(f"a node named {node_id!r} is on this broker's mesh {mesh!r} already")
            self._host, self._loop, self._room, self._node_id = host, loop, room, node_id
            room.members[node_id] = self
            known = dict(room.records)
        for other, data in known.items():
            self._call(self.host_on_record, other, data)
        self._call(host.on_records_loaded)

    # -- on the receiving side: callbacks on its loop, in order -------------

    def _call(self, callback: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(self._run, callback, args)

    def _run(self, callback: Callable[..., None], args: tuple[Any, ...]) -> None:
        if self._host is not None:  # not closed meanwhile
            callback(*args)

    def host_on_record(self, node_id: str, data: bytes | None) -> None:
        if self._host is not None:
            self._host.on_record(node_id, data)

    def _on_message(self, data: bytes) -> None:
        if self._host is not None:
            self._host.on_message(data)

    def _on_publication(self, data: bytes) -> None:
        if self._host is not None:
            self._host.on_publication(data)

    def _drop(self, reason: str, where: str) -> None:
        self._counters[reason] = self._counters.get(reason, 0) + 1
        if self._host is not None:
            self._host.on_transport_drop(reason, where)

    # -- MessageTransport --------------------------------------------------

    def _started(self) -> _Room:
        if self._room is None:
            raise TransportError("the memory transport is not started (or is closed)")
        return self._room

    def listen(self, address: str) -> None:
        room = self._started()
        with self.broker.lock:
            room.listeners[address] = self
        self._addresses.add(address)

    def unlisten(self, address: str) -> None:
        room = self._started()
        with self.broker.lock:
            if room.listeners.get(address) is self:
                del room.listeners[address]
        self._addresses.discard(address)

    def send(self, address: str, data: bytes) -> None:
        room = self._room
        target = None if room is None else room.listeners.get(address)
        if target is None:
            self._drop("no_listener", address)
            return
        target._call(target._on_message, data)

    def subscribe(self, pattern: str) -> None:
        self._started()
        self._patterns.add(pattern)

    def unsubscribe(self, pattern: str) -> None:
        self._patterns.discard(pattern)

    def publish(self, topic: str, data: bytes) -> None:
        room = self._started()
        with self.broker.lock:
            members = list(room.members.values())
        for member in members:
            if any(matches(pattern, topic) for pattern in list(member._patterns)):
                member._call(member._on_publication, data)

    def put_record(self, data: bytes) -> None:
        room = self._started()
        with self.broker.lock:
            room.records[self._node_id] = data
            others = [m for m in room.members.values() if m is not self]
        for other in others:
            other._call(other.host_on_record, self._node_id, data)

    async def withdraw(self) -> None:
        room = self._room
        if room is None:
            return
        with self.broker.lock:
            had_record = room.records.pop(self._node_id, None) is not None
            others = [m for m in room.members.values() if m is not self]
        if had_record:
            for other in others:
                other._call(other.host_on_record, self._node_id, None)

    async def close(self) -> None:
        room = self._room
        if room is None:
            return
        with self.broker.lock:
            for address in self._addresses:
                if room.listeners.get(address) is self:
                    del room.listeners[address]
            room.members.pop(self._node_id, None)
            had_record = room.records.pop(self._node_id, None) is not None
            others = list(room.members.values())
        self._room = None
        self._host = None
        self._patterns.clear()
        self._addresses.clear()
        if had_record:
            for other in others:
                other._call(other.host_on_record, self._node_id, None)

    def stats(self) -> dict[str, int]:
        return dict(self._counters)
