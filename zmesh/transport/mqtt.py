"""MQTT: nodes meet at an MQTT 5 broker, ``Node("lab", transport="mqtt://127.0.0.1:1883")``.

Needs the paho-mqtt client, version 2 (``pip install 'zmesh-agents[mqtt]'``),
and a broker that speaks MQTT 5 (mosquitto 2, say). The topics
(docs/transports.md), with ``MESH`` the mesh's name as one level::

    zmesh/MESH/agent/AGENT/T/O/P/I/C   a message to agent AGENT on topic T.O.P.I.C
    zmesh/MESH/node/NODE/TOPIC          a message to node NODE itself
    zmesh/MESH/pub/T/O/P/I/C            a broadcast on T.O.P.I.C
    zmesh/MESH/record/NODE              NODE's membership record, retained; its last will empties it

A message's fields are MQTT 5 user properties (``Zmesh-Type``, ...), its
content type the content-type property and its payload the body, JSON by
default (:class:`~zmesh.transport.wires.PlainWire`); a plain client's
request sets a response topic (and correlation data), where the reply goes.

QoS 0, 1 and 2 are MQTT's. Each node keeps a session at the broker for
``session_expiry`` seconds, named after the mesh and the node, and
acknowledges a one-way QoS 1/2 message once its handler ran: the broker
keeps what arrives for it while it is away and sends again what was not
acknowledged when it (or a new process with the same node name) comes back. A node that
dies is gone once the broker misses its keep-alive (1.5 x ``keepalive``
seconds): its last will empties its record.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import uuid
from typing import Any
from urllib.parse import unquote, urlsplit

from .._wire.names import NODE_ADDRESS_PREFIX
from ..errors import TransportError
from ..topics import matches
from .base import TransportCapabilities
from .message import MessageHost, MessageTransport, MessageWire
from ._mqtt_client import MqttLink, import_paho
from ._mqtt_names import Topics
from .wires import PlainMessage, PlainWire

__all__ = ["MqttTransport"]

#: A plain client's response topic, as a ``reply_to`` address.
REPLY_PREFIX = "mqtt:"
#: Seconds an address stays subscribed after its agent left (see ``unlisten``).
LINGER = 2.0
#: Seconds after starting during which a message its session kept for an agent the node
#: does not host (yet) waits for that agent (see ``_adopt``).
ADOPT_WAIT = 5.0
#: Seconds a node back at its broker waits for the others to put their records again
#: (beyond 1.5 x keepalive) before it counts gone those it has not heard from.
RECONNECT_GRACE = 3.0
#: Seconds before a held message given back (a full inbox) is published again.
GIVE_BACK_DELAY = 0.2


class MqttTransport(MessageTransport):
    """A node's connection to an MQTT 5 broker. ``url``: ``mqtt://[user:password@]host:port``
    (``mqtts://`` for TLS, with ``tls_context`` or the system's CAs);
    ``keepalive``: seconds between the client's pings, so a node that dies is
    gone after 1.5 times that; ``connect_wait``: how long ``start`` tries to
    reach the broker (later, the client reconnects by itself, forever);
    ``session_expiry``: seconds the broker keeps a node's session (what
    arrives for it) after it went away; ``max_queued``: QoS 1/2 messages
    kept until the broker has them (more are dropped and counted);
    ``max_in_flight``: QoS 1/2 messages on their way to the broker at once,
    no more than the broker's receive maximum (mosquitto's
    ``max_inflight_messages``, 20 by default), beyond which it drops them;
    ``plain_direct``: messages between zmesh nodes carry their fields as
    user properties too, as broadcasts and replies to plain clients always
    do (readable by any MQTT 5 tool, and several times slower to pack and
    parse); by default they travel packed in the payload."""

    capabilities = TransportCapabilities(level="message", peers_can_vanish=True, discovery="none")
    name = "mqtt"

    def __init__(self, url: str = "mqtt://127.0.0.1:1883", *, keepalive: int = 2, connect_wait: float = 5.0,
                 session_expiry: int = 60, max_queued: int = 10_000, max_in_flight: int = 20,
                 tls_context: ssl.SSLContext | None = None, plain_direct: bool = False) -> None:
        if not isinstance(url, str) or not url.startswith(("mqtt://", "mqtts://")):
            raise TransportError(f"an MQTT broker is named by an mqtt:// (or mqtts://) URL, got {url!r}")
        parts = urlsplit(url)
        try:
            port = parts.port or (8883 if parts.scheme == "mqtts" else 1883)
        except ValueError:
            raise TransportError(f"the port in {url!r} is not a number from 1 to 65535") from None
        if not parts.hostname:
            raise TransportError(f"no broker host in {url!r}")
        for what, count, low in (("keepalive", keepalive, 1), ("session_expiry", session_expiry, 0),
                                 ("max_queued", max_queued, 1), ("max_in_flight", max_in_flight, 1)):
            if count.__class__ is not int or not low <= count < 1 << 31:
                raise ValueError(f"{what} must be an int of at least {low}, got {count!r}")
        if connect_wait.__class__ not in (int, float) or not 0 < connect_wait < 3600:
            raise ValueError(f"connect_wait must be a number of seconds above 0, got {connect_wait!r}")
        import_paho()
        self.url = url
        self.router_endpoint = f"{parts.scheme}://{parts.hostname}:{port}"  # no password in what is shown
        self.host, self.port = parts.hostname, port
        self.username = unquote(parts.username) if parts.username else None
        self.password = unquote(parts.password) if parts.password else None
        self.tls = parts.scheme == "mqtts" or tls_context is not None
        self.tls_context = tls_context
        self.keepalive, self.connect_wait = keepalive, float(connect_wait)
        self.session_expiry, self.max_queued, self.max_in_flight = session_expiry, max_queued, max_in_flight
        self.plain_direct = bool(plain_direct)
        self._host: MessageHost | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._link: MqttLink | None = None
        self._topics = Topics("")
        self._node_id = ""
        self._listening: set[str] = set()
        self._patterns: dict[str, int] = {}  # pattern -> its subscription identifier
        self._sorted: list[str] = []  # the patterns, sorted: a publication goes to the first that matches
        self._record: bytes | None = None
        self._known: set[str] = set()  # nodes whose record this node reported
        self._reported: set[str] = set()  # nodes whose record came since the last (re)connect
        self._marker = ""
        self._loaded_once = False
        self._started = False
        self._closing = False
        self._counters: dict[str, int] = {}
        self._timers: set[asyncio.TimerHandle] = set()
        self._lingering: dict[str, asyncio.TimerHandle] = {}
        self._early: dict[str, list[tuple[str, PlainMessage, int, str, tuple[int, ...]]]] = {}
        self._adopt_until = 0.0
        self._wants_room = False

    def make_wire(self, max_payload: int, encoder: Any, decoder: Any) -> MessageWire:
        return PlainWire(max_payload, encoder, decoder, REPLY_PREFIX, lambda: self.max_message)

    def reaches(self, address: str) -> bool:
        return address.startswith(REPLY_PREFIX)

    # -- lifecycle ---------------------------------------------------------

    async def start(self, host: MessageHost, mesh: str, node_id: str, loop: asyncio.AbstractEventLoop) -> None:
        if self._link is not None or self._closing:
            raise TransportError("this MqttTransport is started already (or closed): give each node its own")
        self._host, self._loop, self._node_id = host, loop, node_id
        self._topics = Topics.of(mesh)
        self._link = MqttLink(self, loop, f"zmesh-{mesh}-{node_id}", self._topics.record(node_id))
        self._adopt_until = loop.time() + ADOPT_WAIT
        await self._link.connect(self.connect_wait)
        self._timers.add(loop.call_later(ADOPT_WAIT, self._adopted_or_stale))
        # The records follow once start has returned (the node reads them from then on).
        self._started = True
        loop.call_soon(self.connected)

    # MqttLink calls these on the node's loop.

    def connected(self) -> None:
        """(Re)connected: ask again for everything (the broker may have lost the session), and
        count again which nodes have a record."""
        link, topics = self._link, self._topics
        if link is None or not self._started or self._closing:
            return  # the first connection: start() calls this once it has returned
        self._count("connects")
        self._reported = set()
        self._marker = uuid.uuid4().hex
        link.subscribe(topics.record(), 1)
        link.subscribe(topics.loaded(self._marker), 1)
        for address in self._listening:
            link.subscribe(self._filter(address), 2)
        for pattern, ident in self._patterns.items():
            link.subscribe(topics.pub(pattern), 2, ident)
        if self._record is not None:
            link.publish(topics.record(self._node_id), self._record, 1, retain=True)
        link.publish(topics.loaded(self._marker), b"", 1)  # after the retained records, in the broker's order

    def arrived(self, mqtt_topic: str, plain: PlainMessage, qos: int, ack: str, ids: tuple[int, ...]) -> None:
        host, parsed = self._host, self._topics.parse(mqtt_topic)
        if host is None or parsed is None or self._closing:
            self._settle_now(ack)
            return
        kind, name, topic = parsed
        if kind == "record":
            self._settle_now(ack)
            self._on_record(name, plain.body)
        elif kind == "loaded":
            self._settle_now(ack)
            if name == self._marker:
                self._on_loaded()
        elif kind == "pub":
            self._settle_now(ack)
            first = next((p for p in self._sorted if matches(p, topic)), None)
            if first is not None and self._patterns[first] in ids:  # once per node: the first pattern's copy
                host.on_publication(plain._replace(topic=topic))
        elif name in self._listening:
            one_way = not plain.reply and "Zmesh-Correlation-Id" not in plain.headers
            if not (qos and one_way):
                self._settle_now(ack)
                ack = ""
            host.on_message(plain._replace(target=name, topic=topic, ack=ack))
        else:
            self._adopt(name, (mqtt_topic, plain, qos, ack, ids))

    def _adopt(self, address: str, arrival: tuple[str, PlainMessage, int, str, tuple[int, ...]]) -> None:
        """A message for an agent this node does not host, on a subscription its session had
        before it started (a node of the same name, that died or closed). For ``ADOPT_WAIT``
        seconds after starting it is kept, unacknowledged, for the agent it may yet host (a
        replacement takes over what its predecessor had not handled); after that, or for an
        address it never hosts, the subscription is stale: dropped, and the message
        acknowledged (its agent's node, if any, got its own copy)."""
        loop = self._loop
        if loop is not None and loop.time() < self._adopt_until and not self._closing:
            self._early.setdefault(address, []).append(arrival)
            return
        self._settle_now(arrival[3])
        self.drop("stale_subscription", address)
        if self._link is not None and not address.startswith(NODE_ADDRESS_PREFIX):
            self._link.unsubscribe(self._topics.agent(address))

    def _adopted_or_stale(self) -> None:
        early, self._early = self._early, {}
        for address, arrivals in early.items():
            for arrival in arrivals:
                self._adopt(address, arrival)

    def _on_record(self, node_id: str, body: bytes) -> None:
        host = self._host
        if node_id == self._node_id or host is None:
            return
        if not body:
            if node_id in self._known:
                self._known.discard(node_id)
                host.on_record(node_id, None)
            return
        self._reported.add(node_id)
        self._known.add(node_id)
        host.on_record(node_id, bytes(body))

    def _on_loaded(self) -> None:
        """This node's marker came back: every record retained when it (re)subscribed came before it."""
        host, loop = self._host, self._loop
        if host is None or loop is None:
            return
        if not self._loaded_once:
            self._loaded_once = True
            host.on_records_loaded()
            return
        # Back after a while away: a record that did not come was emptied meanwhile, or the
        # broker restarted without its retained messages and that node has yet to put its
        # record again. Give it the time to reconnect before counting it gone.
        missing = self._known - self._reported
        if missing:
            timer = loop.call_later(self.keepalive * 1.5 + RECONNECT_GRACE, self._forget, missing, self._reported)
            self._timers.add(timer)

    def _forget(self, missing: set[str], reported: set[str]) -> None:
        host = self._host
        for gone in missing - reported:  # ``reported`` has grown meanwhile (the same set, if no reconnect since)
            if gone in self._known and host is not None:
                self._known.discard(gone)
                host.on_record(gone, None)

    def flushed(self) -> None:
        if self._host is not None:
            self._host.on_flushed()

    def has_room(self) -> bool:
        """Room while fewer than 3/4 of ``max_queued`` QoS 1/2 messages wait for the broker."""
        room = self._link is None or self._link.unconfirmed < self.max_queued * 3 // 4
        self._wants_room = self._wants_room or not room
        return room

    def confirmed_one(self) -> None:
        if self._wants_room and self._link is not None and self._link.unconfirmed <= self.max_queued // 2:
            self._wants_room = False
            if self._host is not None:
                self._host.on_room()

    def count(self, reason: str) -> None:
        self._count(reason)

    def drop(self, reason: str, where: str) -> None:
        self._count(reason)
        if self._host is not None:
            self._host.on_transport_drop(reason, where)

    async def withdraw(self) -> None:
        if self._link is None or self._closing or self._record is None:
            return
        self._record = None
        self._link.publish(self._topics.record(self._node_id), b"", 1, retain=True)  # retained: emptied
        await self._link.confirmed(self.connect_wait)

    async def close(self) -> None:
        link = self._link
        if link is None or self._closing:
            return
        if self._record is not None:
            self._record = None
            link.publish(self._topics.record(self._node_id), b"", 1, retain=True)
        self._closing = True
        for timer in [*self._timers, *self._lingering.values()]:
            timer.cancel()
        await link.confirmed(self.connect_wait)  # the QoS 1/2 messages sent, for a while
        if not link.is_confirmed():
            self.drop("unconfirmed_at_close", f"{link.unconfirmed} messages")
        await link.disconnect()
        self._host = None

    # -- what goes out -------------------------------------------------------

    def _filter(self, address: str) -> str:
        if address.startswith(NODE_ADDRESS_PREFIX):
            return self._topics.node(address)
        return self._topics.agent(address)

    def listen(self, address: str) -> None:
        timer = self._lingering.pop(address, None)
        if timer is not None:
            timer.cancel()  # listening again before it stopped: the subscription stays
            return
        if address in self._listening or self._link is None:
            return
        self._listening.add(address)
        self._link.subscribe(self._filter(address), 2)
        early = self._early.pop(address, None)
        if early and self._loop is not None:  # what its session kept for it: once it is set up
            self._loop.call_soon(self._replay, early)

    def _replay(self, arrivals: list[tuple[str, PlainMessage, int, str, tuple[int, ...]]]) -> None:
        for arrival in arrivals:
            self.arrived(*arrival)

    def unlisten(self, address: str) -> None:
        """Stop listening on ``address`` after ``LINGER`` seconds: what was already
        on its way still arrives here, where the node dead-letters (or answers)
        it as for an agent that left, rather than vanishing in the broker."""
        if address in self._listening and self._loop is not None and address not in self._lingering:
            self._lingering[address] = self._loop.call_later(LINGER, self._stop_listening, address)

    def _stop_listening(self, address: str) -> None:
        self._lingering.pop(address, None)
        self._listening.discard(address)
        if self._link is not None and not self._closing:
            self._link.unsubscribe(self._filter(address))

    def subscribe(self, pattern: str) -> None:
        if pattern in self._patterns or self._link is None:
            return
        ident = self._patterns[pattern] = max(self._patterns.values(), default=0) + 1
        self._sorted = sorted(self._patterns)
        self._link.subscribe(self._topics.pub(pattern), 2, ident)

    def unsubscribe(self, pattern: str) -> None:
        if self._patterns.pop(pattern, None) is not None and self._link is not None:
            self._sorted = sorted(self._patterns)
            self._link.unsubscribe(self._topics.pub(pattern))

    def send(self, address: str, data: PlainMessage) -> None:
        link = self._link
        if link is None or self._closing:
            self._count("closed")
            return
        qos = int(data.headers.get("Zmesh-Qos", "0"))
        if address.startswith(REPLY_PREFIX):
            link.publish(address[len(REPLY_PREFIX):], data, qos, plain_reply=True)
        elif address.startswith(NODE_ADDRESS_PREFIX):
            link.publish(self._topics.node(address, data.topic), data, qos, routed_since=time.monotonic(),
                         native=not self.plain_direct)
        else:
            link.publish(self._topics.agent(address, data.topic), data, qos, routed_since=time.monotonic(),
                         native=not self.plain_direct)

    def publish(self, topic: str, data: PlainMessage) -> None:
        if self._link is None or self._closing:
            self._count("closed")
            return
        self._link.publish(self._topics.pub(topic), data, int(data.headers.get("Zmesh-Qos", "0")))

    def put_record(self, data: bytes) -> None:
        self._record = data
        if self._link is not None and not self._closing:
            self._link.publish(self._topics.record(self._node_id), data, 1, retain=True)

    # -- held deliveries (one-way QoS 1/2) -------------------------------------

    def is_held(self, data: PlainMessage) -> bool:
        return bool(data.ack)

    def settle(self, data: PlainMessage, handled: bool) -> bool:
        """Acknowledge; or give back what a full inbox refused: published anew
        (after ``GIVE_BACK_DELAY``) to whoever hosts the agent then, and only
        then acknowledged. A message for an agent that left this node is not
        given back (it would come back here while the address lingers): the
        node dead-letters it, as on ZeroMQ."""
        address = data.target
        if (handled or self._link is None or self._loop is None or self._closing
                or address not in self._listening or address in self._lingering):
            self._settle_now(data.ack)
            return False
        timer: asyncio.TimerHandle

        def again() -> None:  # published anew to whoever hosts the agent then, and only then acknowledged
            self._timers.discard(timer)
            link = self._link
            if link is not None and not self._closing:
                link.publish(self._topics.agent(data.target, data.topic), data._replace(ack=""),
                             int(data.headers.get("Zmesh-Qos", "1")), routed_since=time.monotonic(),
                             native=not self.plain_direct)
            self._settle_now(data.ack)

        timer = self._loop.call_later(GIVE_BACK_DELAY, again)
        self._timers.add(timer)
        return True

    def _settle_now(self, ack: str) -> None:
        if ack and self._link is not None:
            self._link.ack(ack)

    def is_flushed(self) -> bool:
        return self._link is None or self._link.is_flushed()

    def is_confirmed(self) -> bool:
        return self._link is None or self._link.is_confirmed()

    # -- counts ----------------------------------------------------------------

    def _count(self, reason: str) -> None:
        self._counters[reason] = self._counters.get(reason, 0) + 1

    def stats(self) -> dict[str, int]:
        return dict(self._counters)
