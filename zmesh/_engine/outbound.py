"""What leaves an engine, and when (the engine's outbound half).

Batching: items for the same peer queue until :meth:`Outbound.flush` and
then travel as one frame, never bigger than the smallest receiver's frame
limit. While ``hold`` is False (the driver is neither draining nor has a
flush scheduled), the first item for a peer leaves at once, so a lone
request pays no batching delay; the driver sees ``has_queued`` and
schedules a flush for whatever follows. A store's pending writes are
committed before any frame leaves (QoS state is written ahead).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from .._wire import codec
from .._wire.frames import MAX_ITEMS
from ..errors import FrameError, ZmeshError
from . import inbound
from .config import LOCAL
from .effects import DEAD, PUBLISH, SEND, Effect

if TYPE_CHECKING:
    from ..registry import Registry
    from .members import Members
    from .reliable import Reliable

__all__ = ["Outbound"]

log = logging.getLogger("zmesh")


class Outbound:
    # Set by the engine (see core.Engine.__init__).
    node_id: str
    seq: int
    hold: bool
    effects: list[Effect]
    stats: Counter[str]
    dropped: Counter[str]
    logged_drops: set[tuple[str, str]]
    registry: Registry
    members: Members
    reliable: Reliable
    _now: float
    _outbox: dict[str, list[Any]]
    _pub_items: list[bytes]
    _pub_size: int
    #: node id -> (its box, the index and bytes of our UPDATE queued in it, that record's agents)
    _queued_update: dict[str, tuple[list[Any], int, bytes, frozenset[str]]]

    def enqueue(self, node_id: str, item: bytes, size: int = -1) -> None:
        """Queue ``item`` for ``node_id`` (``size``: its length, if the caller has it)."""
        box = self._outbox.get(node_id)
        if box is None:
            if not self.hold and node_id != LOCAL:
                # A lone item leaves at once; what follows it before the next
                # flush is batched until the driver flushes.
                self.hold = True
                self._flush_one(node_id, [item])
                return
            self._outbox[node_id] = [[item], len(item) if size < 0 else size]
            return
        if size < 0:
            size = len(item)
        if box[1] + size > self.registry.frame_limit:  # fits every receiver's limit
            self._flush_one(node_id, box[0])
            box[0] = []
            box[1] = 0
        box[0].append(item)
        box[1] += size

    def enqueue_update(self, node_id: str, item: bytes, agents: frozenset[str]) -> None:
        """Queue our record's UPDATE (``item``, listing ``agents``) for ``node_id``.

        An UPDATE of ours still queued for it is replaced in place, so a node
        that registers a thousand agents in a row sends a few records, not a
        thousand (each whole, and each counted against its quotas by every
        peer). Only when no agent left meanwhile: a message queued between
        the two, from an agent of the old record, is then still from one of
        the new."""
        box = self._outbox.get(node_id)
        queued = self._queued_update.get(node_id)
        if box is not None and queued is not None:
            old_box, index, old_item, old_agents = queued
            items = box[0]
            grown = box[1] + len(item) - len(old_item)
            if (old_box is box and index < len(items) and items[index] is old_item and old_agents <= agents
                    and grown <= self.registry.frame_limit):
                items[index] = item
                box[1] = grown
                self._queued_update[node_id] = (box, index, item, agents)
                return
        self.enqueue(node_id, item)
        box = self._outbox.get(node_id)
        if box is not None and box[0] and box[0][-1] is item:
            self._queued_update[node_id] = (box, len(box[0]) - 1, item, agents)
        else:
            self._queued_update.pop(node_id, None)

    @property
    def has_queued(self) -> bool:
        reliable = self.reliable
        return bool(self._outbox or self._pub_items or reliable.acks or reliable.declines)

    def flush_to(self, node_id: str) -> None:
        """What is queued for ``node_id`` leaves now, as one frame."""
        box = self._outbox.pop(node_id, None)
        if box is not None:
            self._flush_one(node_id, box[0])

    def discard_outbox(self, node_id: str) -> None:
        """The peer left with items still queued for it: what was a message is
        counted and dead-lettered (a pending request fails on its own, a qos
        >= 1 message is sent again)."""
        box = self._outbox.pop(node_id, None)
        if box is not None:
            self._lost_items(node_id, box[0])

    def _lost_items(self, node_id: str, items: list[bytes]) -> None:
        for item in items:
            if item[1:2] != b"\x00":  # not a MSG ([0, ...]): control items die with the peer
                continue
            try:
                msg = codec.message_from_item(codec.decode_item(item))
            except FrameError:
                continue
            if msg.qos or msg.expects_reply:
                continue
            self.dropped["peer_gone"] += 1
            why = f"node {node_id!r} left before it was sent"
            self.effects.append((DEAD, msg, "peer_lost", why, msg.target))

    def publish(self, item: bytes) -> None:
        if self._pub_size + len(item) > self.registry.frame_limit and self._pub_items:
            self._flush_pub()
        self._pub_items.append(item)
        self._pub_size += len(item)

    def out_publish_beat(self) -> None:
        self.effects.append((PUBLISH, codec.join_pub_frame(self.node_id, self.seq, [])))
        self.stats["heartbeats_published"] += 1

    def flush(self) -> None:
        """Send everything queued, one frame per peer."""
        self.hold = False
        if self._queued_update:
            self._queued_update.clear()  # whatever they pointed to leaves now
        if self.reliable.acks or self.reliable.declines:
            self.reliable.flush_acks()
        while self._outbox or self._pub_items:
            if self._pub_items:
                self._flush_pub()
            outbox, self._outbox = self._outbox, {}
            for node_id, box in outbox.items():
                self._flush_one(node_id, box[0])

    def _flush_pub(self) -> None:
        items, self._pub_items, self._pub_size = self._pub_items, [], 0
        for start in range(0, len(items), MAX_ITEMS):  # no receiver takes more in one frame
            frame = codec.join_pub_frame(self.node_id, self.seq, items[start:start + MAX_ITEMS])
            self.effects.append((PUBLISH, frame))
            self.stats["frames_published"] += 1
            self.stats["bytes_published"] += len(frame)

    def _flush_one(self, node_id: str, items: list[bytes]) -> None:
        if not items:
            return
        if len(items) > MAX_ITEMS:  # no receiver takes more in one frame
            for start in range(0, len(items), MAX_ITEMS):
                self._flush_one(node_id, items[start:start + MAX_ITEMS])
            return
        store = self.reliable.store
        if store is not None and store.dirty:
            self.commit_store(store)
        frame = codec.join_frame(items)
        if node_id == LOCAL:
            inbound.direct(self, None, frame)  # type: ignore[arg-type]  # self is the Engine
            return
        peer = self.members.peers.get(node_id)
        if peer is None:
            self.stats["items_to_departed_peers"] += len(items)
            self._lost_items(node_id, items)
            return
        self.effects.append((SEND, peer.link, frame))
        self.stats["frames_sent"] += 1
        self.stats["bytes_sent"] += len(frame)
        peer.last_sent = self._now

    def commit_store(self, store: Any) -> None:
        """Write what the store holds before the frames that depend on it leave."""
        try:
            store.commit()
        except ZmeshError as exc:
            self.stats["store_errors"] += 1
            if ("store", "error") not in self.logged_drops:
                self.logged_drops.add(("store", "error"))
                log.error("zmesh %s: %s (QoS state is not durable now)", self.node_id, exc)
