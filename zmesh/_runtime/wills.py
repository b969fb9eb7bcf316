"""Last wills (internal): the broadcast an agent leaves for when its node
goes without a goodbye (``node.agent(..., will=(topic, payload))``).

An agent's will rides in its node's record. When a record goes without a
goodbye (over frames: no BYE came; over a broker: a node that closes in
good order first puts its record without wills), or is replaced by a new
incarnation's, the registry of every node that held it reports a ``will``
event. The nodes its registry holds then (itself included, the gone one
not) take turns, in order of id: the first publishes it at once and tells
the others it did (``zmesh.will_done`` to their node addresses); the k-th
publishes it after k × :data:`TAKE_UP_AFTER` seconds unless told first.
A node that goes while it is the first moves everyone after it up a turn.
So a will that its first node never publishes (that node died as well,
joined too late to have held the record, or cannot publish it) is published
by the next; while nodes' views of the mesh differ for a moment, it may
come twice.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Callable

from .._wire.names import node_address, printable
from ..clock import Clock, TimerHandle
from ..message import Message
from ..registry import MeshEvent, Registry

__all__ = ["Wills", "WILL_DONE_TOPIC", "TAKE_UP_AFTER", "MAX_PENDING", "DONE_MEMORY"]

log = logging.getLogger("zmesh")

#: The topic of "I published these wills" (payload: ``[[gone node, agent], ...]``), node address to node address.
WILL_DONE_TOPIC = "zmesh.will_done"
#: Seconds each node waits, per node before it in the order, for word that a will was published.
TAKE_UP_AFTER = 2.0
#: Wills this node waits to see published at most (beyond: the oldest is forgotten); and
#: wills it heard were published before it saw them due, kept for DONE_MEMORY s.
MAX_PENDING = 10_000
DONE_MEMORY = 30.0

WillKey = tuple[str, str]  # (the gone node, its agent)


class _Pending:
    __slots__ = ("topic", "payload", "out", "timer")

    def __init__(self, topic: str, payload: Any, out: set[str]) -> None:
        self.topic = topic
        self.payload = payload
        self.out = out  # nodes that will not publish it: the gone one, and those gone since
        self.timer: TimerHandle | None = None


class Wills:
    """The wills due for nodes gone without a goodbye, and whose turn it is to publish each."""

    def __init__(self, node_id: str, registry: Registry, publish: Callable[[Message], int],
                 tell: Callable[[str, str, list[Any]], None], clock: Clock, stats: Counter[str]) -> None:
        self._node_id = node_id
        self._registry = registry
        self._publish = publish
        self._tell = tell
        self._clock = clock
        self._stats = stats
        self._pending: dict[WillKey, _Pending] = {}
        self._done_early: dict[WillKey, float] = {}  # published, said before we saw them due -> until when
        self.closed = False

    def close(self) -> None:
        self.closed = True
        for key in list(self._pending):
            self._forget(key)

    def on_event(self, event: MeshEvent) -> None:
        kind = event.kind
        if kind == "will":
            key = (event.node_id, event.agent_id)
            until = self._done_early.pop(key, None)
            if until is not None and until >= self._clock.monotonic():
                return  # another node published it, and said so before this one saw it go
            if not self.closed:
                self._due(key, _Pending(event.detail, event.payload, {event.node_id}))
        elif (kind == "peer_left" or kind == "peer_restarted") and self._pending and event.node_id < self._node_id:
            for key, pending in list(self._pending.items()):  # a node before this one went: its turn moves up
                if event.node_id not in pending.out:
                    pending.out.add(event.node_id)
                    self._due(key, pending)

    def done(self, node: str, keys: list[tuple[str, str]]) -> None:
        """Node ``node`` says it published the wills ``keys`` (perhaps before
        this node has seen them due: then it remembers, for DONE_MEMORY s)."""
        for key in keys:
            pending = self._pending.get(key)
            if pending is not None:
                if node not in pending.out:
                    self._forget(key)
            elif node != key[0] and not self.closed:
                early = self._done_early
                early.pop(key, None)
                while len(early) >= MAX_PENDING:
                    early.pop(next(iter(early)))
                early[key] = self._clock.monotonic() + DONE_MEMORY

    def _due(self, key: WillKey, pending: _Pending) -> None:
        order = self._order(pending)
        turn = order.index(self._node_id) if self._node_id in order else 0
        if turn == 0:
            self._forget(key)
            self._publish_now(key, pending, [n for n in order if n != self._node_id])
            return
        if pending.timer is not None:
            pending.timer.cancel()
        stored = self._pending
        if key not in stored:
            while len(stored) >= MAX_PENDING:
                self._forget(next(iter(stored)))
            stored[key] = pending
        pending.timer = self._clock.call_later(turn * TAKE_UP_AFTER, lambda: self._turn_came(key, pending))

    def _turn_came(self, key: WillKey, pending: _Pending) -> None:
        if self._pending.get(key) is pending and not self.closed:
            del self._pending[key]
            self._publish_now(key, pending, [n for n in self._order(pending) if n != self._node_id])

    def _order(self, pending: _Pending) -> list[str]:
        """The nodes that take turns on ``pending``, in order of id (the registry's own order)."""
        return [r.node_id for r in self._registry.nodes() if r.node_id not in pending.out]

    def _forget(self, key: WillKey) -> None:
        pending = self._pending.pop(key, None)
        if pending is not None and pending.timer is not None:
            pending.timer.cancel()

    def _publish_now(self, key: WillKey, pending: _Pending, others: list[str]) -> None:
        gone, agent_id = key
        msg = Message("notify", node_address(self._node_id), "", pending.topic, pending.payload)
        try:
            self._publish(msg)
        except Exception as exc:  # closing, or over a peer's limit: said here, not raised into the mesh
            self._stats["wills_failed"] += 1
            log.warning("zmesh %s: the will of agent %s (node %s went without a goodbye) was not published: %s",
                        self._node_id, printable(agent_id), printable(gone), exc)
            return
        self._stats["wills_published"] += 1
        log.info("zmesh %s: published the will of agent %s on %s (node %s went without a goodbye)",
                 self._node_id, printable(agent_id), printable(pending.topic), printable(gone))
        for node in others:
            self._tell(node, WILL_DONE_TOPIC, [[gone, agent_id]])
