"""Who a frame on our ROUTER comes from (internal to the zmq transport).

A node's DEALER names itself with a routing id ``node|incarnation|tag``;
the engine knows the sender by the part before the tag (its key). The tag
is different for every endpoint a node dials and cannot be guessed (a keyed
hash of the endpoint with a secret of the sending transport), so a node
that receives our routing id cannot use it at a third node.

The ROUTER keeps ``ROUTER_HANDOVER`` on: a DEALER that reconnects while its
old TCP connection is still half-open takes its routing id over (without
it, libzmq would park the new connection for good). Only the DEALER that
knows a routing id can do that.

:class:`Senders` binds each key to the first routing id that speaks for it,
while that routing id is connected: a frame from another routing id
claiming the same key (another connection forging ``bob|incarnation``) is
dropped. Once the owner's connection is gone (``probe`` says it is not
routable), the key is free again: a node that closed its link and opened a
new one is the common case.

In keyed mode a binding also holds the public key the routing id's first
frame was authenticated with (its ZMQ User-Id), so later frames need no
metadata lookup. That is sound because only the DEALER that made a routing
id knows it: the tag is secret, and CURVE encrypts the handshake that
carries it; a reconnection under it (HANDOVER) is the same node, with the
same key.
"""

from __future__ import annotations

import time
from typing import Callable

__all__ = ["Senders", "Sender", "MAX_SENDERS", "hex_id"]

MAX_SENDERS = 4096  # bound keys; a stale one is evicted for a new one
_RECHECK = 1.0  # seconds a refused routing id stays refused before its key's owner is probed again
_MAX_REFUSED = 1024
_EVICT_SCAN = 32


def hex_id(routing_id: bytes) -> str:
    """A routing id that names no node (a stranger's, libzmq's generated one), printable."""
    return "0x" + routing_id.hex()


#: What a routing id speaks for: the engine key, and the public key (keyed mode) or None.
Sender = tuple[str, "str | None"]


class Senders:
    """Routing id -> (engine key, public key) it speaks for; ``by_id`` is the per-frame lookup."""

    def __init__(self, probe: Callable[[bytes], bool], limit: int = MAX_SENDERS) -> None:
        self._probe = probe  # is this routing id connected to our ROUTER now?
        self._limit = limit
        self.by_id: dict[bytes, Sender] = {}
        self._owner: dict[str, bytes] = {}
        self._refused: dict[bytes, float] = {}
        self.refused = 0  # frames dropped: their key belonged to another connection

    def bind(self, routing_id: bytes, public_key: str | None = None) -> Sender | None:
        """What ``routing_id`` speaks for (binding it), or None: drop the
        frame, its key is another connection's. Call when ``by_id`` misses."""
        try:
            text = routing_id.decode()
        except UnicodeDecodeError:
            return hex_id(routing_id), public_key
        if not text.isprintable():
            return hex_id(routing_id), public_key
        key = text.rsplit("|", 1)[0] if text.count("|") == 2 else text
        owner = self._owner.get(key)
        if owner is not None:
            now = time.monotonic()
            if self._refused.get(routing_id, 0.0) > now:
                self.refused += 1
                return None
            if self._probe(owner):
                if len(self._refused) >= _MAX_REFUSED:
                    self._refused.clear()
                self._refused[routing_id] = now + _RECHECK
                self.refused += 1
                return None
            del self.by_id[owner]
        elif len(self._owner) >= self._limit and not self._evict():
            self.refused += 1
            return None
        self._owner[key] = routing_id
        sender = self.by_id[routing_id] = (key, public_key)
        self._refused.pop(routing_id, None)
        return sender

    def _evict(self) -> bool:
        """Free the oldest binding whose connection is gone; False if none of the oldest is."""
        for key, owner in list(self._owner.items())[:_EVICT_SCAN]:
            if not self._probe(owner):
                del self._owner[key]
                del self.by_id[owner]
                return True
        return False
