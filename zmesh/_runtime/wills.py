"""Last wills (internal): the broadcast an agent leaves for when its node
goes without a goodbye (``node.agent(..., will=(topic, payload))``).

An agent's will rides in its node's record. When a record goes without a
goodbye (over frames: no BYE came; over a broker: a node that closes in
good order first puts its record without wills), or is replaced by a new
incarnation's, the registry of every node that held it reports a ``will``
event. One node publishes it: the one with the smallest id among the
nodes its registry holds then, itself included. The others remember, for
a while, which node they took for it: if that one goes too (two nodes
died together), the next one takes the will up. While nodes' views of the
mesh differ (for a moment, as a node joins or goes), a will may be
published twice; when they agree, once.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Callable

from .._wire.names import node_address, printable
from ..clock import Clock
from ..message import Message
from ..registry import MeshEvent, Registry

__all__ = ["Wills", "TAKE_UP_WINDOW", "MAX_PENDING"]

log = logging.getLogger("zmesh")

#: Seconds a will another node was to publish is taken up here if that node goes too.
TAKE_UP_WINDOW = 60.0
#: Wills other nodes are to publish that this node remembers at most (beyond: the oldest is forgotten).
MAX_PENDING = 10_000


class Wills:
    """The wills this node publishes for nodes gone without a goodbye."""

    def __init__(self, node_id: str, registry: Registry, publish: Callable[[Message], int], clock: Clock,
                 stats: Counter[str]) -> None:
        self._node_id = node_id
        self._registry = registry
        self._publish = publish
        self._clock = clock
        self._stats = stats
        #: (gone node, agent) -> (the node to publish it, topic, payload, until when it may be taken up).
        self._pending: dict[tuple[str, str], tuple[str, str, Any, float]] = {}
        self.closed = False

    def on_event(self, event: MeshEvent) -> None:
        kind = event.kind
        if kind == "will":
            self._due(event.node_id, event.agent_id, event.detail, event.payload, {event.node_id})
        elif kind == "peer_left" or kind == "peer_restarted":
            if self._pending:
                self._take_up(event.node_id)

    def _due(self, gone: str, agent_id: str, topic: str, payload: Any, out: set[str]) -> None:
        if self.closed:
            return
        publisher = min((r.node_id for r in self._registry.nodes() if r.node_id not in out), default=self._node_id)
        if publisher != self._node_id:
            pending = self._pending
            pending.pop((gone, agent_id), None)
            while len(pending) >= MAX_PENDING:
                pending.pop(next(iter(pending)))
            pending[(gone, agent_id)] = (publisher, topic, payload, self._clock.monotonic() + TAKE_UP_WINDOW)
            return
        self._pending.pop((gone, agent_id), None)
        msg = Message("notify", node_address(self._node_id), "", topic, payload)
        try:
            self._publish(msg)
        except Exception as exc:  # closing, or the payload is over a peer's limit: said, not raised into the mesh
            self._stats["wills_failed"] += 1
            log.warning("zmesh %s: the will of agent %s (node %s went without a goodbye) was not published: %s",
                        self._node_id, printable(agent_id), printable(gone), exc)
            return
        self._stats["wills_published"] += 1
        log.info("zmesh %s: published the will of agent %s on %s (node %s went without a goodbye)",
                 self._node_id, printable(agent_id), printable(topic), printable(gone))

    def _take_up(self, gone: str) -> None:
        """Node ``gone`` left or restarted: the wills it was to publish are due again."""
        now = self._clock.monotonic()
        for key, (publisher, topic, payload, until) in list(self._pending.items()):
            if until < now:
                del self._pending[key]
            elif publisher == gone:
                self._due(key[0], key[1], topic, payload, {key[0], gone})
