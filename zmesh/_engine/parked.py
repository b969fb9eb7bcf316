"""Replies for a peer that went silent (internal).

A peer we expired may only have stalled (its loop blocked by a handler), and
it still waits for replies to its requests. While we knock on it again,
replies for its agents wait here, bounded, until it is back under the same
incarnation (then they go) or we give up on it (then they become dead letters).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..message import Message
from .effects import DEAD

if TYPE_CHECKING:
    from .core import Engine
    from .members import Peer

__all__ = ["Parked", "MAX_PARKED"]

MAX_PARKED = 256  # replies kept for one silent peer


class Parked:
    def __init__(self, engine: Engine) -> None:
        self.e = engine
        self.lost: dict[str, tuple[str, str]] = {}  # agent id -> (node id, incarnation)
        self.boxes: dict[str, list[tuple[bytes, Message]]] = {}  # node id -> replies for it

    @property
    def empty(self) -> bool:
        return not self.lost and not self.boxes

    def expect(self, peer: Peer) -> None:
        """``peer`` went silent and is knocked on again: keep replies for its agents."""
        for agent_id in peer.record.agents:
            self.lost[agent_id] = (peer.node_id, peer.incarnation)

    def park(self, target: str, item: bytes, msg: Message) -> bool:
        """Keep a reply for agent ``target`` if its node may come back; False if not."""
        lost = self.lost.get(target)
        if lost is None:
            return False
        box = self.boxes.setdefault(lost[0], [])
        if len(box) >= MAX_PARKED:
            return False
        box.append((item, msg))
        return True

    def release(self, node_id: str, peer: Peer | None) -> None:
        """``node_id`` is back as ``peer`` (send what waited) or gone for good (None)."""
        incarnation = ""
        for agent_id in [a for a, (n, _) in self.lost.items() if n == node_id]:
            incarnation = self.lost.pop(agent_id)[1]
        box = self.boxes.pop(node_id, ())
        e = self.e
        for item, msg in box:
            if peer is not None and peer.incarnation == incarnation:
                e.enqueue(node_id, item)
            else:
                e.out((DEAD, msg, "not_found", f"the requester's node {node_id!r} did not come back", msg.target))

    def clear(self) -> None:
        self.lost.clear()
        self.boxes.clear()
