"""What each peer and each key uses of its quotas (internal; the quotas
themselves are :class:`zmesh.Quotas`).

:class:`Ledger` answers one question per HELLO or UPDATE: is the record
within the quotas of its node and of its key? The members module cuts a
peer off when it is not (see :meth:`.members.Members.cut_off`).
"""

from __future__ import annotations

import msgpack

from ..quotas import RECORD_MIN_COST, Quotas
from ..registry import NodeRecord

__all__ = ["Ledger", "record_size", "MAX_BANNED"]

MAX_BANNED = 4096  # keys (or, keyless, names) remembered as cut off, the oldest forgotten first


def record_size(record: NodeRecord) -> int:
    """``record`` as encoded on the wire, in bytes."""
    return len(msgpack.packb(record.to_wire()))


class Ledger:
    def __init__(self, quotas: Quotas) -> None:
        self.quotas = quotas
        self.sizes: dict[str, int] = {}  # peer node id -> the size of its record
        # peer node id -> [bytes left, when last refilled]
        self._buckets: dict[str, list[float]] = {}
        self._banned: dict[str, float] = {}  # key (keyless: node id) -> refused until

    def banned(self, who: str, now: float) -> bool:
        until = self._banned.get(who)
        if until is None:
            return False
        if now < until:
            return True
        del self._banned[who]
        return False

    def ban(self, who: str, now: float) -> None:
        self._banned.pop(who, None)
        self._banned[who] = now + self.quotas.cooldown
        while len(self._banned) > MAX_BANNED:
            del self._banned[next(iter(self._banned))]

    def over(self, record: NodeRecord, size: int, now: float, is_peer: bool, others: list[str]) -> str | None:
        """Which quota ``record`` (``size`` bytes) goes over, said for a log
        line; None if none. ``is_peer``: its node is a peer already (its rate
        counts); ``others``: the other nodes of its key that are peers."""
        q = self.quotas
        agents = len(record.agents)
        if agents > q.agents_per_node:
            return f"{agents} agents, over agents_per_node={q.agents_per_node}"
        subs = sum(len(p) for p in record.subs.values())
        if subs > q.subscriptions_per_node:
            return f"{subs} subscriptions, over subscriptions_per_node={q.subscriptions_per_node}"
        if len(others) + 1 > q.nodes_per_key:
            return f"{len(others) + 1} nodes of one key, over nodes_per_key={q.nodes_per_key}"
        total = size + sum(self.sizes.get(n, 0) for n in others)
        if total > q.record_bytes_per_key:
            return f"{total} bytes of records of one key, over record_bytes_per_key={q.record_bytes_per_key}"
        if is_peer:
            return self._spend(record.node_id, size, now)
        return None

    def _spend(self, node_id: str, size: int, now: float) -> str | None:
        q = self.quotas
        bucket = self._buckets.get(node_id)
        if bucket is None:
            bucket = self._buckets[node_id] = [float(q.record_bytes_burst), now]
        else:
            elapsed = max(0.0, now - bucket[1])
            bucket[0] = min(float(q.record_bytes_burst), bucket[0] + elapsed * q.record_bytes_per_second)
            bucket[1] = now
        bucket[0] -= max(size, RECORD_MIN_COST)
        if bucket[0] < 0:
            return (f"records faster than record_bytes_per_second={q.record_bytes_per_second:g} "
                    f"(burst {q.record_bytes_burst}; each counts at least {RECORD_MIN_COST} bytes)")
        return None

    def accepted(self, node_id: str, size: int) -> None:
        self.sizes[node_id] = size

    def forget(self, node_id: str) -> None:
        """``node_id`` is no longer a peer."""
        self.sizes.pop(node_id, None)
        self._buckets.pop(node_id, None)
