"""The node's wire: batching what goes out, decoding and checking what comes in.

Items queued for the same peer during one event-loop iteration leave as one
frame; a lone item (a request, say) leaves at once. Every inbound frame is
decoded and validated here; anything unusable is dropped, counted and logged
once per peer and reason (see docs/protocol.md).
"""

from __future__ import annotations

import logging
import time

from . import codec
from .codec import FrameError
from .errors import ZmeshError
from .nodestate import NodeState

__all__ = ["WireMixin", "LOCAL", "BATCH_BYTES", "MAX_LOGGED_DROPS"]

log = logging.getLogger("zmesh")

LOCAL = "\x00local"  # outbox key of this node's own agents
BATCH_BYTES = 256 * 1024  # a batch is flushed early once it reaches this size
MAX_LOGGED_DROPS = 1024  # bounds the memory that logging "once per peer and reason" takes


class WireMixin(NodeState):
    """Outbound batching and inbound frame handling of a node."""

    # -- outbound --------------------------------------------------------

    def _enqueue(self, node_id: str, item: bytes) -> None:
        box = self._outbox.get(node_id)
        if box is None:
            if not (self._flush_scheduled or self._in_drain or self._hot) and node_id != LOCAL:
                # A lone message (a request, say) leaves at once. What follows it
                # before the next flush or drain is batched until the end of the
                # loop iteration, so bursts still travel many to a frame.
                self._hot = True
                self._flush_one(node_id, [item])
                return
            self._outbox[node_id] = [[item], len(item)]
        else:
            if box[1] + len(item) > BATCH_BYTES:
                self._flush_one(node_id, box[0])
                box[0] = []
                box[1] = 0
            box[0].append(item)
            box[1] += len(item)
        self._schedule_flush()

    def _publish(self, item: bytes) -> None:
        if self._pub_size + len(item) > BATCH_BYTES and self._pub_items:
            self._flush_pub()
        self._pub_items.append(item)
        self._pub_size += len(item)
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        """Flush at the end of this loop iteration (a drain flushes when it ends)."""
        if not (self._flush_scheduled or self._in_drain) and self._loop is not None:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        self._hot = False
        if self._pub_items:
            self._flush_pub()
        outbox, self._outbox = self._outbox, {}
        for node_id, box in outbox.items():
            self._flush_one(node_id, box[0])

    def _flush_pub(self) -> None:
        items, self._pub_items, self._pub_size = self._pub_items, [], 0
        frame = codec.join_pub_frame(self.id, self._seq, items)
        self.transport.publish(frame)
        self._stats["frames_published"] += 1
        self._stats["bytes_published"] += len(frame)

    def _flush_one(self, node_id: str, items: list[bytes]) -> None:
        if not items:
            return
        frame = codec.join_frame(items)
        if node_id == LOCAL:
            self._handle_frame(None, frame)
            return
        peer = self._peers.get(node_id)
        if peer is None:
            self._stats["items_to_departed_peers"] += len(items)
            return
        peer.link.send(frame)
        self._stats["frames_sent"] += 1
        self._stats["bytes_sent"] += len(frame)
        if peer.liveness is not None:
            peer.liveness.sent(time.monotonic())

    def _route(self, target: str) -> str | None:
        """Outbox key for an agent id, or None when no node hosts it."""
        if target in self._agents:
            return LOCAL
        node_id = self.registry.node_of(target)
        if node_id is None:
            # A peer whose HELLO arrived but whose SUB is not attached yet can
            # already send us requests; its replies must still find it.
            for peer in self._peers.values():
                if not peer.joined and target in peer.record.agents:
                    return peer.node_id
        return node_id

    # -- inbound ---------------------------------------------------------

    def on_transport_drop(self, reason: str, where: str) -> None:
        self._drop(reason, where)

    def _drop(self, reason: str, where: str, detail: str = "") -> None:
        self._dropped[reason] += 1
        key = (where, reason)
        if key not in self._logged_drops and len(self._logged_drops) < MAX_LOGGED_DROPS:
            self._logged_drops.add(key)
            log.warning(
                "zmesh %s: dropped input from %s: %s%s (logged once per peer and reason)",
                self.id,
                where or "unknown",
                reason,
                f" ({detail})" if detail else "",
            )

    def on_direct_frame(self, key: str, frame: bytes) -> None:
        self._in_drain = True
        self._stats["bytes_received"] += len(frame)
        self._handle_frame(key, frame)

    def on_drained(self) -> None:
        """Transport callback after a batch of frames: send what they caused."""
        self._in_drain = False
        self._hot = False
        if self._outbox or self._pub_items:
            self._flush()

    def _handle_frame(self, key: str | None, frame: bytes) -> None:
        """Handle a direct frame; ``key`` is None for this node's own loopback."""
        where = key or self.id
        try:
            items = codec.decode_frame(frame, self.max_frame)
        except FrameError as exc:
            self._drop(exc.reason, where, exc.detail)
            return
        peer = None
        if key is not None:
            peer = self._peers_by_key.get(key)
            if peer is not None and peer.liveness is not None:
                peer.liveness.heard(time.monotonic())
        self._stats["frames_received"] += 1
        for item in items:
            try:
                kind = item[0]
                if kind == codec.MSG:
                    if key is None:
                        self._on_message(codec.message_from_item(item), None)
                    elif peer is None:
                        raise FrameError("unknown_peer", "message before hello")
                    else:
                        self._on_message(codec.message_from_item(item), peer)
                elif key is None:
                    raise FrameError("malformed", "control item on loopback")
                elif kind == codec.HELLO:
                    self._on_hello(key, item)
                    peer = self._peers_by_key.get(key)
                elif kind == codec.REFUSE:
                    self._on_refuse(key, item)
                elif peer is None:
                    raise FrameError("unknown_peer", f"item kind {kind} before hello")
                else:
                    self._on_control(peer, kind, item)
            except FrameError as exc:
                self._drop(exc.reason, where, exc.detail)
            except ZmeshError as exc:
                self._drop("rejected", where, str(exc))

    def on_pub_frame(self, frame: bytes) -> None:
        self._in_drain = True
        self._stats["bytes_received"] += len(frame)
        try:
            node_id, seq, items = codec.decode_pub_frame(frame, self.max_frame)
        except FrameError as exc:
            self._drop(exc.reason, "publisher")
            return
        peer = self._peers.get(node_id)
        if peer is None or not peer.joined:
            self._drop("unknown_publisher", node_id)
            return
        if peer.liveness is not None:
            peer.liveness.heard(time.monotonic())
        self._stats["frames_received"] += 1
        for item in items:
            try:
                if item[0] != codec.MSG:
                    raise FrameError("unknown_item", "only messages are published")
                msg = codec.message_from_item(item)
                if msg.target:
                    raise FrameError("malformed", "published message with a target")
                if msg.sender not in peer.record.agents and seq <= peer.record.seq:
                    raise FrameError("spoofed_sender", msg.sender)
                self._fan_out(msg)
            except FrameError as exc:
                self._drop(exc.reason, node_id, exc.detail)
