"""A Redis node's membership (internal): one key per node,
``zmesh:MESH:record:NODE``, holding ``[seq, record]`` (msgpack) with an
expiry of ``expiry`` seconds, set again every ``heartbeat``; and the
channel ``zmesh:MESH:records``, where each node tells ``[node, seq, kind]``
(``kind``: ``put``, with the record after it; ``beat``; ``gone``). ``seq``
grows with every change (it is the time it was made, in ns), so a record
read from its key never replaces a newer one told on the channel. A node
not heard of within ``expiry`` seconds died (its key expires too)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import msgpack

from ._checks import blind_time
from .message import MessageHost
from ._redis_names import Keys

__all__ = ["RedisRecords"]

_packb: Callable[..., bytes] = msgpack.packb
_unpackb: Callable[..., Any] = msgpack.unpackb


class RedisRecords:
    """This node's record, and what it heard of the others'."""

    def __init__(self, keys: Keys, node_id: str, expiry: float, drop: Callable[[str, str], None]) -> None:
        self._keys = keys
        self._node_id = node_id
        self._expiry_ms = int(expiry * 1000)
        self._expiry = expiry
        self._drop = drop
        self.record: bytes | None = None  # this node's, while it is to be renewed
        self.seq = 0
        self._heard: dict[str, tuple[float, int, bytes]] = {}  # node -> (when heard, seq, record)
        self._last_sweep = time.monotonic()  # a first sweep late is late too

    # -- this node's ------------------------------------------------------

    def put(self, record: bytes) -> list[tuple[Any, ...]]:
        """The commands that keep ``record`` as this node's (and tell everyone)."""
        self.record = record
        self.seq = max(time.time_ns(), self.seq + 1)
        return [("SET", self._keys.record(self._node_id), _packb([self.seq, record]), "PX", self._expiry_ms),
                ("PUBLISH", self._keys.records, _packb([self._node_id, self.seq, "put", record]))]

    def renewal(self) -> list[tuple[Any, ...]]:
        """Once a heartbeat: the commands that renew this node's record (none once it is withdrawn)."""
        if self.record is None:
            return []
        return [("SET", self._keys.record(self._node_id), _packb([self.seq, self.record]), "PX", self._expiry_ms),
                ("PUBLISH", self._keys.records, _packb([self._node_id, self.seq, "beat"]))]

    def withdrawal(self) -> list[tuple[Any, ...]]:
        self.record = None
        return [("DEL", self._keys.record(self._node_id)),
                ("PUBLISH", self._keys.records, _packb([self._node_id, self.seq + 1, "gone"]))]

    # -- the others' -------------------------------------------------------

    def told(self, payload: bytes, host: MessageHost, fetch: Callable[[str], None]) -> None:
        """What a node told on the records channel; ``fetch(node)``: read its key (a beat
        of a record this node has not got)."""
        try:
            told = _unpackb(payload, raw=False, use_list=True)
            node_id, seq, kind = told[0], told[1], told[2]
            if node_id.__class__ is not str or seq.__class__ is not int or kind not in ("put", "beat", "gone"):
                raise ValueError("not [node, seq, kind]")
            record = told[3] if kind == "put" else None
            if kind == "put" and record.__class__ is not bytes:
                raise ValueError("a put without a record")
        except Exception as exc:
            self._drop("malformed", f"a record on {self._keys.records}: {type(exc).__name__}")
            return
        if node_id == self._node_id:
            return
        heard = self._heard.get(node_id)
        if kind == "gone":
            if heard is not None and heard[1] < seq:
                del self._heard[node_id]
                host.on_record(node_id, None)
            return
        if kind == "beat":
            if heard is not None and heard[1] == seq:
                self._heard[node_id] = (time.monotonic(), seq, heard[2])
            elif heard is None or heard[1] < seq:
                fetch(node_id)
            return
        assert record is not None
        self.read(node_id, seq, record, host)

    def read(self, node_id: str, seq: int, record: bytes, host: MessageHost) -> None:
        """A record, from the channel or from its key: kept if it is newer than the one known."""
        if node_id == self._node_id:
            return
        heard = self._heard.get(node_id)
        if heard is not None and heard[1] > seq:
            return
        self._heard[node_id] = (time.monotonic(), seq, record)
        if heard is None or heard[2] != record:
            host.on_record(node_id, record)

    def read_key(self, key_or_node: str, value: Any, host: MessageHost, is_key: bool = True) -> None:
        """A record key's value as GET or MGET gave it (None: no such key)."""
        node_id = self._keys.record_node(key_or_node) if is_key else key_or_node
        if value is None:
            return
        try:
            seq, record = _unpackb(value, raw=False, use_list=True)
            if seq.__class__ is not int or record.__class__ is not bytes:
                raise ValueError("not [seq, record]")
        except Exception as exc:
            self._drop("malformed", f"record key of {node_id[:80]}: {type(exc).__name__}")
            return
        self.read(node_id, seq, record, host)

    async def load(self, client: Any, host: Callable[[], MessageHost | None], count: Callable[[str], None]) -> bool:
        """Read every record key (tried until it works); False: the node is closed meanwhile."""
        failures = 0
        while True:
            try:
                found = [key async for key in client.scan_iter(match=self._keys.records_glob(), count=1000)]
                values = await client.mget(found) if found else []
                break
            except Exception:
                failures += 1
                count("records_load_failed")
                await asyncio.sleep(min(1.0, 0.05 * 2 ** failures))
        to = host()
        if to is None:
            return False
        for key, value in zip(found, values):
            self.read_key(key.decode() if isinstance(key, bytes) else key, value, to)
        return True

    def sweep(self, host: MessageHost, heartbeat: float) -> None:
        """Count gone every node not heard of within ``expiry`` seconds (once a
        ``heartbeat``; not on a sweep that finds our own loop just woken from a
        stall: what the others sent meanwhile may be unread)."""
        now = time.monotonic()
        blind, self._last_sweep = blind_time(self._last_sweep, now, heartbeat, self._expiry), now
        if blind:
            self._heard = {n: (min(now, when + blind), seq, rec) for n, (when, seq, rec) in self._heard.items()}
            return
        for node_id, (when, _, _) in list(self._heard.items()):
            if now - when > self._expiry:
                del self._heard[node_id]
                host.on_record(node_id, None)

    def refresh(self) -> None:
        """After a reconnect: every node counts as heard of now (their next beats say if they are still there)."""
        now = time.monotonic()
        self._heard = {n: (now, seq, record) for n, (_, seq, record) in self._heard.items()}
