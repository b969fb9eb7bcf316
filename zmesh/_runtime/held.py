"""QoS 1/2 deliveries a broker holds until they are settled (internal): the
message mesh's half of a transport whose broker keeps a one-way QoS >= 1
message until it is acknowledged (NATS JetStream; see
:meth:`~zmesh.transport.message.MessageTransport.is_held`).

A held message is acknowledged once its handler ran (or was found unable
to run for good: expired, no handler), and given back to the broker when it
could not run here (a full inbox, its agent gone): the broker delivers it
again, wherever its agent is then, so nothing it accepted is lost. (A broker
that cannot give one back acknowledges it instead, and the node deals with
it as with a message nobody sends again: a dead letter.) A
broker delivers again what was not acknowledged in time as well (a node
that died, a handler slower than the broker waits): a redelivery of a
message still held here is left to the first, and one of a message handled
lately is acknowledged again and not handled twice.
"""

from __future__ import annotations

from typing import Any, Callable

from ..message import Message
from ..transport.message import MessageTransport

__all__ = ["HeldDeliveries", "REMEMBERED"]

#: How many handled messages' ids are kept to recognise a redelivery.
REMEMBERED = 16_384


class HeldDeliveries:
    """The deliveries held for this node's agents, by (agent, message id)."""

    def __init__(self, transport: MessageTransport, count: Callable[[str], None]) -> None:
        self._transport = transport
        self._count = count
        self._held: dict[tuple[str, str], Any] = {}
        self._handled: dict[tuple[str, str], None] = {}  # insertion order: the oldest first

    def __len__(self) -> int:
        return len(self._held)

    def arrived(self, msg: Message, data: Any) -> bool:
        """Hold ``data``; False when it is a redelivery settled here (nothing to deliver)."""
        key = (msg.target, msg.id)
        if key in self._held:
            self._count("redelivered_while_held")
            self._held[key] = data  # settled by its latest delivery (a broker may take only that one)
            return False
        if key in self._handled:
            self._count("redelivered_after_handled")
            self._transport.settle(data, True)
            return False
        self._held[key] = data
        return True

    def handled(self, msg: Message) -> bool:
        """Acknowledge ``msg`` if it is held (False: it is not)."""
        key = (msg.target, msg.id)
        data = self._held.pop(key, None)
        if data is None:
            return False
        self._transport.settle(data, True)
        handled = self._handled
        handled[key] = None
        if len(handled) > REMEMBERED:
            del handled[next(iter(handled))]
        return True

    def give_back(self, msg: Message) -> bool:
        """Give ``msg`` back to the broker if it is held and the broker takes
        it back (False: not held, or acknowledged instead: the node deals with
        it as a message nobody delivers again)."""
        data = self._held.pop((msg.target, msg.id), None)
        if data is None:
            return False
        if not self._transport.settle(data, False):
            self._count("not_given_back")
            return False
        self._count("given_back")
        return True
