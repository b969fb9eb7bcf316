"""The interface of a message-level transport: one that routes whole messages
itself (a broker such as MQTT, Redis or NATS, or a file bus) and keeps the
mesh's membership its own way.

A node on such a transport runs no mesh handshake: the transport carries

* **messages to an address**: every agent a node hosts, and the node itself
  (``zmesh.node.<node id>``), is an address the node *listens* on;
  :meth:`MessageTransport.send` delivers bytes to whichever node listens on
  an address (NATS: a subject; MQTT: a topic per address; Redis: a stream
  or a list per address; files: a directory per address);
* **publications on a topic**: :meth:`MessageTransport.publish` reaches every
  node that subscribed to a pattern matching the topic (zmesh's patterns:
  ``*`` one segment, ``>`` the rest); a node gets each publication once,
  however many of its patterns match;
* **membership records**: each node puts one record (opaque bytes) under
  its node id with :meth:`MessageTransport.put_record`; the transport tells
  every node of every record, and of a record that is gone (its node closed,
  or died and its record expired: an MQTT retained message with a last
  will, a Redis key with a TTL, a NATS KV entry with a max age, a file
  whose owner stopped touching it).

Everything arrives through the :class:`MessageHost` the node gives to
:meth:`MessageTransport.start`, on the node's event loop; the transport
calls nothing else in the node. Its errors are :class:`~zmesh.TransportError`
(a broker that cannot be reached at start, say): a broker client's own
exceptions never leave the transport. Sending never blocks and never raises
for a peer that is gone: what cannot be delivered is dropped and counted
(``host.on_transport_drop``), as a frame transport does.

The bytes are zmesh's: a node encodes messages and records, and checks what
it decodes; a transport need not look inside them.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import Protocol

from .base import TransportCapabilities

__all__ = ["MessageHost", "MessageTransport"]


class MessageHost(Protocol):
    """The callbacks a message-level transport makes into its node (on the node's loop)."""

    def on_message(self, data: bytes) -> None:
        """A message for one of the addresses this node listens on."""
        ...

    def on_publication(self, data: bytes) -> None:
        """A publication on a topic that one of this node's patterns matches (once per publication)."""
        ...

    def on_record(self, node_id: str, data: bytes | None) -> None:
        """Node ``node_id``'s membership record, new or changed; None: it is gone."""
        ...

    def on_records_loaded(self) -> None:
        """Every record there was when this node started has been reported
        (the node counts as joining until then)."""
        ...

    def on_transport_drop(self, reason: str, where: str) -> None:
        """Something was dropped and counted (``reason``), about ``where``."""
        ...


class MessageTransport(ABC):
    """A transport that routes whole messages (``capabilities.level == "message"``)."""

    capabilities: TransportCapabilities = TransportCapabilities(level="message", discovery="none")
    name: str = "?"
    #: A node on this transport has no endpoints of its own; ``Node.endpoint`` shows this (the broker's address).
    router_endpoint: str = ""
    pub_endpoint: str = ""
    public_key: str | None = None

    @abstractmethod
    async def start(self, host: MessageHost, mesh: str, node_id: str, loop: asyncio.AbstractEventLoop) -> None:
        """Connect for node ``node_id`` of ``mesh``; TransportError if it cannot.
        Records of the nodes already there follow, then ``on_records_loaded``."""

    @abstractmethod
    def listen(self, address: str) -> None:
        """Deliver what is sent to ``address`` here (an agent id or a node address)."""

    @abstractmethod
    def unlisten(self, address: str) -> None: ...

    @abstractmethod
    def send(self, address: str, data: bytes) -> None:
        """Deliver ``data`` to the node that listens on ``address``; never blocks."""

    @abstractmethod
    def subscribe(self, pattern: str) -> None:
        """Deliver publications whose topic matches ``pattern`` here."""

    @abstractmethod
    def unsubscribe(self, pattern: str) -> None: ...

    @abstractmethod
    def publish(self, topic: str, data: bytes) -> None:
        """Deliver ``data`` to every node subscribed to a pattern matching ``topic``."""

    @abstractmethod
    def put_record(self, data: bytes) -> None:
        """Keep this node's membership record (replacing the last one) where every node sees it."""

    @abstractmethod
    async def close(self) -> None:
        """Withdraw this node's record and addresses, then disconnect."""

    def check_endpoint(self, endpoint: str) -> None:  # noqa: B027 - optional hook
        """Seeds do not apply to a message-level transport (its broker is the meeting point)."""

    def stats(self) -> dict[str, int]:
        return {}
