"""The transport interface: what a node needs from the thing that moves frames.

A transport only moves opaque frames (bytes) between nodes; everything that
gives them meaning (HELLO, registry, requests, liveness) lives in the node and
in the pure modules it uses, so every transport has the same semantics.

* ``open_link(router_endpoint)`` returns a one-way channel to a peer's direct
  inbox (ZeroMQ: a DEALER connected to the peer's ROUTER).
* ``publish(frame)`` sends to every subscriber of this node (ZeroMQ: PUB);
  ``subscribe(pub_endpoint)`` attaches this node to a peer's publications
  (ZeroMQ: the SUB connects). Once attached, the *publisher's* host is told via
  ``on_subscriber_ready(key)``, so a node never counts a peer in a broadcast
  before that peer can actually receive it.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Protocol

from .._wire.endpoints import endpoint_address, endpoint_host, endpoint_key, is_loopback_endpoint
from .._wire.frames import Received

__all__ = ["Link", "TransportHost", "Transport", "TransportCapabilities", "endpoint_host",
           "endpoint_address", "endpoint_key", "is_loopback_endpoint"]


@dataclass(frozen=True, slots=True)
class TransportCapabilities:
    """What a transport can do; the node decides from this, never from a name.

    ``level``: ``"frame"`` — the transport moves opaque frames between nodes
    and the node's engine speaks the mesh protocol over them (ZeroMQ,
    in-process); ``"message"`` — the transport routes whole messages itself
    (a broker: MQTT, Redis, NATS, a file bus) and keeps membership its own
    way, so the engine's handshake is not used. This version ships only
    frame-level transports; the node refuses a message-level one with a
    TransportError instead of half-working.

    ``peers_can_vanish``: a peer can die without a word (a killed process),
    so the engine runs heartbeats and expiry. False in-process, where a node
    always says BYE.

    ``discovery``: ``"mdns"`` — the node may advertise and browse mDNS for
    this transport's TCP endpoints (``scope``, ``router_endpoint``,
    ``pub_endpoint``); ``"hub"`` — the transport reports members itself via
    ``on_discovered``; ``"none"``.

    ``keys``: the transport encrypts and authenticates its connections with
    CurveZMQ keys (``Node(key=..., trusted=...)``, and ``$ZMESH_KEY`` /
    ``$ZMESH_TRUSTED`` for a transport the node makes by name).
    """

    level: str = "frame"
    peers_can_vanish: bool = True
    discovery: str = "none"
    keys: bool = False


class Link(Protocol):
    def send(self, frame: bytes) -> None:
        """Queue ``frame`` for the peer; never blocks, never raises for a dead peer."""
        ...

    def close(self) -> None: ...


class TransportHost(Protocol):
    """The callbacks a transport makes into its node (always on the node's loop)."""

    def on_direct_frame(self, key: str, frame: Received, public_key: str | None = None) -> None:
        """A frame from the sender whose key is ``key``. In keyed mode
        ``public_key`` is the public key (Z85) that the connection it came
        on authenticated with; None in keyless mode."""
        ...

    def on_pub_frame(self, frame: Received, public_key: str | None = None) -> None:
        """A broadcast frame; ``public_key`` as for :meth:`on_direct_frame`
        (the publisher's key, which our SUB authenticated)."""
        ...

    def on_drained(self) -> None:
        """Must follow every batch of on_direct_frame/on_pub_frame calls: the
        node sends what they caused (one frame per peer) here."""
        ...

    def on_subscriber_ready(self, key: str, public_key: str | None = None) -> None:
        """A subscriber with node key ``key`` is attached to our publisher
        (keyed mode: ``public_key``, the key its connection authenticated with)."""
        ...

    def on_transport_drop(self, reason: str, where: str) -> None: ...

    def on_link_down(self, link: Link) -> None:
        """The connection under ``link`` broke after it had been up (the peer
        died, froze past the link heartbeat timeout, or the network cut)."""
        ...

    def on_discovered(self, router_endpoint: str) -> None: ...


class Transport(ABC):
    capabilities: TransportCapabilities = TransportCapabilities()
    name: str = "?"
    router_endpoint: str = ""
    pub_endpoint: str = ""
    #: This node's public key (Z85) when the transport authenticates with keys; None: keyless.
    public_key: str | None = None

    @abstractmethod
    async def start(
        self, host: TransportHost, key: str, mesh: str, loop: asyncio.AbstractEventLoop
    ) -> None:
        """Bind; afterwards ``router_endpoint`` and ``pub_endpoint`` are set."""

    @property
    def router_endpoints(self) -> tuple[str, ...]:
        """Every direct endpoint (one per bound address)."""
        return (self.router_endpoint,)

    @property
    def pub_endpoints(self) -> tuple[str, ...]:
        return (self.pub_endpoint,)

    def choose(self, endpoints: tuple[str, ...]) -> str | None:
        """Of a peer's endpoints, the one to dial from here (None: none may be)."""
        return endpoints[0] if endpoints else None

    def check_endpoint(self, endpoint: str) -> None:  # noqa: B027 - optional hook
        """Raise TransportError if ``endpoint`` cannot be an endpoint of this transport.

        The default accepts anything (in-process endpoints are opaque names).
        """

    @abstractmethod
    def open_link(self, router_endpoint: str) -> Link: ...

    @abstractmethod
    def subscribe(self, pub_endpoint: str) -> None: ...

    @abstractmethod
    def unsubscribe(self, pub_endpoint: str) -> None: ...

    @abstractmethod
    def publish(self, frame: bytes) -> None: ...

    @abstractmethod
    def announce(self) -> None:
        """Tell every publisher we are attached to that we are (again): each
        of their hosts gets ``on_subscriber_ready(our key)``. A peer that lost
        us (it expired us while our loop stalled) needs this to count us again.
        """

    def trust_changed(self, admitted: frozenset[str], revoked: frozenset[str]) -> None:  # noqa: B027
        """Keys were added to (``admitted``) or removed from (``revoked``) the
        trusted set: open what waited for the former, cut the latter's
        connections. Only keyed transports have anything to do."""

    @abstractmethod
    async def close(self) -> None: ...

    def stats(self) -> dict[str, int]:
        return {}
