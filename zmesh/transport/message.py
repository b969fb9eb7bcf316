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
  whose owner stopped touching it);
* **QoS 1/2 held by the broker** (optional): a transport whose broker keeps
  a one-way QoS >= 1 message until it is acknowledged says, for each one
  that arrives, that it :meth:`MessageTransport.is_held`; the node
  settles it (:meth:`MessageTransport.settle`) once its handler ran (or gives it
  back when it could not run here), and :meth:`MessageTransport.is_confirmed`
  tells when the broker has accepted every one sent.

Everything arrives through the :class:`MessageHost` the node gives to
:meth:`MessageTransport.start`, on the node's event loop; the transport
calls nothing else in the node. Its errors are :class:`~zmesh.TransportError`
(a broker that cannot be reached at start, say): a broker client's own
exceptions never leave the transport. Sending never blocks and never raises
for a peer that is gone: what cannot be delivered is dropped and counted
(``host.on_transport_drop``), as a frame transport does.

A message travels in the transport's :class:`MessageWire`, which the node
gets from :meth:`MessageTransport.make_wire`: by default zmesh's own MSG
item as bytes (:class:`~zmesh.transport.wires.ItemWire`), which a transport
need not look inside; a broker transport that plain clients should read
gives :class:`~zmesh.transport.wires.PlainWire` (headers and a JSON body).
The node encodes with it (so a message that cannot travel is refused at the
caller, before the transport sees it) and decodes with it what arrives. A
membership record is opaque bytes, the node's to write and read.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import Any, Callable, Protocol

from ..message import Message
from .base import TransportCapabilities

__all__ = ["MessageHost", "MessageTransport", "MessageWire"]


class MessageWire(Protocol):
    """How one transport's messages look on its broker."""

    def encode(self, msg: Message, limit: int) -> Any:
        """``msg`` as the transport carries it; InvalidMessage (nothing sent)
        when it cannot travel or is over ``limit`` bytes."""
        ...

    def decode(self, data: Any) -> Message:
        """The Message ``data`` carries; FrameError when it is malformed."""
        ...

    def size(self, data: Any) -> int:
        """About how many bytes ``data`` is (inbox limits count them)."""
        ...


class MessageHost(Protocol):
    """The callbacks a message-level transport makes into its node (on the node's loop)."""

    def on_message(self, data: Any) -> None:
        """A message for one of the addresses this node listens on (in the transport's wire)."""
        ...

    def on_publication(self, data: Any) -> None:
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

    def on_flushed(self) -> None:
        """:meth:`MessageTransport.is_flushed` or :meth:`MessageTransport.is_confirmed` has become true."""
        ...

    def on_room(self) -> None:
        """:meth:`MessageTransport.has_room` has become true again: senders waiting for it go on."""
        ...


class MessageTransport(ABC):
    """A transport that routes whole messages (``capabilities.level == "message"``)."""

    capabilities: TransportCapabilities = TransportCapabilities(level="message", discovery="none")
    name: str = "?"
    #: A node on this transport has no endpoints of its own; ``Node.endpoint`` shows this (the broker's address).
    router_endpoint: str = ""
    pub_endpoint: str = ""
    public_key: str | None = None
    #: The most bytes one message may be on this transport's broker, as its
    #: wire encodes it (known once started; None: no limit but the node's
    #: own). The wire refuses a bigger one at the caller.
    max_message: int | None = None

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
    def send(self, address: str, data: Any) -> None:
        """Deliver ``data`` (made by this transport's wire) to the node that
        listens on ``address``, or to a broker-native address that
        :meth:`reaches`; never blocks."""

    @abstractmethod
    def subscribe(self, pattern: str) -> None:
        """Deliver publications whose topic matches ``pattern`` here."""

    @abstractmethod
    def unsubscribe(self, pattern: str) -> None: ...

    @abstractmethod
    def publish(self, topic: str, data: Any) -> None:
        """Deliver ``data`` to every node subscribed to a pattern matching ``topic``."""

    @abstractmethod
    def put_record(self, data: bytes) -> None:
        """Keep this node's membership record (replacing the last one) where every node sees it."""

    async def withdraw(self) -> None:  # noqa: B027 - optional hook
        """The node is closing: take its record away now, so every peer hears
        it is gone at once, while its handlers may still be finishing
        (``close`` follows). Default: nothing; ``close`` withdraws it."""

    @abstractmethod
    async def close(self) -> None:
        """Withdraw this node's record and addresses, then disconnect."""

    def make_wire(self, max_payload: int, encoder: Callable[[Any], Any] | None,
                  decoder: Callable[[dict[Any, Any]], Any] | None) -> MessageWire:
        """The wire the node encodes and decodes this transport's messages
        with (``encoder``/``decoder``: the node's payload hooks). Default:
        zmesh's MSG item as bytes."""
        from .wires import ItemWire

        return ItemWire(max_payload, encoder, decoder)

    def is_flushed(self) -> bool:
        """Has the broker every address, pattern and record asked of this
        transport so far? (``node.settled()`` and ``subscribe()`` wait for
        it; say so with ``host.on_flushed()``.) Default: yes, at once."""
        return True

    def is_confirmed(self) -> bool:
        """Has the broker accepted every QoS 1/2 message sent so far (kept
        it until it is delivered)? (``node.wait_acked()`` waits for it; say
        so with ``host.on_flushed()``.) Default: yes, at once."""
        return True

    def has_room(self) -> bool:
        """Can it take one more message now? A transport that keeps what it has
        not yet handed to its broker says no while that is over its bound: the
        node's senders then wait (``Backpressure`` at a send's timeout), as for
        a receiver's credit on ZeroMQ, rather than have the message dropped;
        say when there is room again with ``host.on_room()``. Default: yes."""
        return True

    def is_held(self, data: Any) -> bool:
        """Is ``data`` (a message that arrived) one the broker delivers again
        until :meth:`settle` says it was handled? Default: no."""
        return False

    def settle(self, data: Any, handled: bool) -> bool:
        """A held delivery is done with: ``handled``: acknowledge it (the broker
        forgets it); else give it back (the broker delivers it again soon,
        wherever its agent is then). True: given back; False: acknowledged
        (a broker that cannot give this one back: the node dead-letters it)."""
        return False

    def reaches(self, address: str) -> bool:
        """Is ``address`` one this transport delivers to by itself, with no
        node listening (a plain client's reply address)? Default: no."""
        return False

    def check_endpoint(self, endpoint: str) -> None:  # noqa: B027 - optional hook
        """Seeds do not apply to a message-level transport (its broker is the meeting point)."""

    @property
    def reachable(self) -> bool:
        """Whether the broker is reachable now, as far as this transport can tell (default: always).
        A gateway whose broker side is not stands down for another (zmesh.gateway)."""
        return True

    def stats(self) -> dict[str, int]:
        return {}
