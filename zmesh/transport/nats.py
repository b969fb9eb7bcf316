"""NATS: nodes meet at a nats-server, ``Node("lab", transport="nats://127.0.0.1:4222")``.

Needs the nats-py client (``pip install 'zmesh-agents[nats]'``) and a server
with JetStream (``nats-server -js``), where the mesh's membership is a
key-value bucket. The subjects, headers and bucket (docs/transports.md),
with ``MESH`` the mesh's name as one subject token::

    zmesh.MESH.agent.AGENT.TOPIC   a message to agent AGENT on topic TOPIC
    zmesh.MESH.node.NODE.TOPIC     a message to node NODE itself
    zmesh.MESH.pub.TOPIC           a broadcast on TOPIC
    zmesh.MESH.noresp.NODE.>       NODE's requests come back here when nobody listens
    KV bucket zmesh_MESH           one key per node: its membership record

A message's fields are ``Zmesh-*`` headers and its payload the body, JSON by
default (:class:`~zmesh.transport.wires.PlainWire`), so a plain NATS client
talks to zmesh agents: ``nats req zmesh.lab.agent.echo.math.add '{"x": 1}'``
gets the handler's return value as JSON. Each node puts its record again
every ``heartbeat`` seconds; a record not renewed within ``expiry`` seconds
(a node that died) counts as gone, and the bucket's max age drops it.

A one-way message at QoS 1 or 2 goes through JetStream (:mod:`._nats_queue`):
kept in the mesh's stream until the agent's node acknowledges it, once its
handler ran; what the server has confirmed is not lost when a node dies or
the server restarts. QoS 0, requests, replies and broadcasts are NATS
core's: at most once, in order per sender. A request to an agent whose node
no longer listens gets NATS's no-responders at once, which raises
AgentNotRegistered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Callable, Coroutine

from .._wire.names import NODE_ADDRESS_PREFIX
from ..errors import TransportError
from ..topics import matches
from .base import TransportCapabilities
from ._checks import check_counts, check_liveness, check_seconds
from ._counted import Counted
from .message import MessageHost, MessageTransport, MessageWire
from ._nats_client import connect, import_nats, refused_at_start
from ._nats_names import Subjects, consumer_name
from ._nats_records import NatsRecords
from ._nats_queue import NAK_DELAY, Unconfirmed, ensure_consumer, ensure_stream
from ._ordered import OrderedSteps, Step
from .wires import PlainMessage, PlainWire, not_received

__all__ = ["NatsTransport"]

log = logging.getLogger("zmesh")

#: A plain client's reply subject, as a ``reply_to`` address.
REPLY_PREFIX = "nats:"
#: Seconds an address stays subscribed after its agent left (see ``unlisten``).
LINGER = 2.0


class NatsTransport(Counted, MessageTransport):
    """A node's connection to a NATS server (``url``: ``nats://host:port``,
    credentials as nats-py takes them, in the URL or in ``options``, which go
    to ``nats.connect`` as they are). ``heartbeat``: seconds between renewals
    of this node's record; ``expiry``: seconds after which a record not
    renewed counts as gone; ``connect_wait``: how long ``start`` tries to
    reach the server (later, the client reconnects by itself, forever), and
    how long ``close`` waits for it to confirm the QoS 1/2 messages sent.
    QoS 1/2 (JetStream): ``ack_wait``: seconds before a message delivered
    and not acknowledged is delivered again (a node that died);
    ``max_age``: seconds a message waits in the stream for its agent at
    most; ``max_unconfirmed``: messages kept until the server confirms
    them (more are dropped and counted); ``max_in_flight``: messages
    delivered to one agent and not yet acknowledged."""

    capabilities = TransportCapabilities(level="message", peers_can_vanish=True, discovery="none")
    name = "nats"

    def __init__(self, url: str = "nats://127.0.0.1:4222", *, heartbeat: float = 1.0, expiry: float = 4.0,
                 connect_wait: float = 5.0, ack_wait: float = 10.0, max_age: float = 86400.0,
                 max_unconfirmed: int = 10_000, max_in_flight: int = 1000, **options: Any) -> None:
        if not isinstance(url, str) or not url.startswith(("nats://", "tls://", "ws://", "wss://")):
            raise TransportError(f"a NATS server is named by a nats:// (or tls://) URL, got {url!r}")
        check_seconds(heartbeat=heartbeat, expiry=expiry, connect_wait=connect_wait, ack_wait=ack_wait)
        check_counts(max_unconfirmed=max_unconfirmed, max_in_flight=max_in_flight)
        check_liveness(heartbeat, expiry, max_age)
        import_nats()
        self.url = url
        self.router_endpoint = url
        self.heartbeat = float(heartbeat)
        self.expiry = float(expiry)
        self.connect_wait = float(connect_wait)
        self.ack_wait = float(ack_wait)
        self.max_age = float(max_age)
        self.max_in_flight = max_in_flight
        self._options = options
        self._host: MessageHost | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._nc: Any = None
        self._records: NatsRecords | None = None
        self._node_id = ""
        self._subs: dict[str, list[Any]] = {}  # address or "pub:" pattern -> [its subscription]
        self._patterns: list[str] = []  # sorted: a publication goes to the first that matches
        self._steps: OrderedSteps | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._counters: dict[str, int] = {}
        self._lingering: dict[str, asyncio.TimerHandle] = {}
        self._closing = False
        self._wants_room = False
        self._jsm: Any = None
        self._names = Subjects("", "")
        self._all_confirmed = asyncio.Event()
        self._pubacks = Unconfirmed(self._publish_held, self._count, self._drop, self._confirmed,
                                        max_unconfirmed, max(1.0, heartbeat))

    def make_wire(self, max_payload: int, encoder: Any, decoder: Any) -> MessageWire:
        return PlainWire(max_payload, encoder, decoder, REPLY_PREFIX, lambda: self.max_message)

    def reaches(self, address: str) -> bool:
        return address.startswith(REPLY_PREFIX)

    # -- lifecycle ---------------------------------------------------------

    async def start(self, host: MessageHost, mesh: str, node_id: str, loop: asyncio.AbstractEventLoop) -> None:
        if self._nc is not None or self._closing:
            raise TransportError("this NatsTransport is started already (or closed): give each node its own")
        self._host, self._loop, self._node_id = host, loop, node_id
        self._names = names = Subjects.of(mesh)
        self._nc = await connect(self.url, f"zmesh {node_id}", self._options, self.connect_wait, self._count,
                                 self._reconnected)
        self.max_message = int(self._nc.max_payload)  # the server's limit, headers included
        nc = self._nc

        async def round_trip() -> None:
            await nc.flush(timeout=10)  # the server's PONG: it has all of it

        self._steps = OrderedSteps(loop, round_trip, self._drop, self._count, self._flushed)
        try:
            self._records = await NatsRecords.open(self._nc.jetstream(), names.stream, node_id, self.expiry,
                                                   self._count)
            self._jsm = self._nc.jsm()
            await ensure_stream(self._jsm, self._names, self.max_age)
        except Exception as exc:
            await self._nc.close()
            refused_at_start(self.url, exc)
        self._subscribe("noresp", names.no_responders(node_id), self._on_no_responders)
        self._pubacks.inbox = self._nc.new_inbox() + "."
        self._subscribe("confirm", self._pubacks.inbox + "*", self._on_confirmation)
        self._tasks.append(loop.create_task(self._records.watch(lambda: self._host)))
        self._tasks.append(loop.create_task(self._beat()))

    @property
    def reachable(self) -> bool:
        """The client is connected and the server took this node's record within ``expiry`` seconds
        (a link that went silent is not noticed by the client for minutes; the renewals stop at once)."""
        nc, records = self._nc, self._records
        return (nc is not None and not self._closing and bool(nc.is_connected) and records is not None
                and records.renewed_within(self.expiry))

    def _reconnected(self) -> None:
        self._pubacks.resend_all()  # what the old server had not confirmed
        if self._records is not None and self._loop is not None and not self._closing:
            self._tasks.append(self._loop.create_task(self._records.rewatch()))

    async def withdraw(self) -> None:
        records = self._records
        if records is None or self._closing or records.record is None:
            return
        await self._sent()  # what was asked before goes first (replies, record changes)
        try:
            await records.delete(self.connect_wait)
        except Exception:
            self._count("withdraw_failed")  # the record then expires: the peers hear it later

    async def close(self) -> None:
        if self._nc is None or self._closing:
            return
        self._closing = True  # nothing more is queued
        for timer in self._lingering.values():
            timer.cancel()
        self._lingering.clear()
        records = self._records
        with contextlib.suppress(Exception):
            await self._sent()
            if records is not None and records.record is not None:
                await records.delete(self.connect_wait)
        if self._pubacks:  # a QoS 1/2 message on its way: the server's confirmation, for a while
            self._all_confirmed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._all_confirmed.wait(), self.connect_wait)
            if self._pubacks:
                self._drop("unconfirmed_at_close", f"{len(self._pubacks)} messages")
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        if records is not None:
            await records.stop()
        with contextlib.suppress(Exception):
            await self._nc.close()
        self._host = None

    # -- what goes out: in order, one task at a time -------------------------

    def _queue(self, step: Step, confirm: bool = False) -> None:
        """Run ``step`` after those queued before it; ``confirm``: a change of
        membership (an address, a pattern, the record) that ``is_flushed``
        waits for the server to have."""
        if self._steps is None or self._closing:
            self._count("closed")
            return
        self._steps.add(step, confirm)

    async def _sent(self) -> None:
        """Until everything queued so far has been handed to the client."""
        if self._steps is not None:
            await self._steps.done()

    def is_flushed(self) -> bool:
        return self._steps is None or self._steps.is_flushed()

    def _publish(self, subject: str, data: PlainMessage, reply: str = "") -> None:
        nc = self._nc

        async def publish() -> None:
            await nc.publish(subject, data.body, reply=reply, headers=data.headers)

        self._queue(publish)

    def _publish_held(self, subject: str, data: PlainMessage, reply: str) -> None:
        """A QoS 1/2 message to its stream: kept (and sent again) until confirmed, so a failure is no loss."""
        nc = self._nc

        async def publish() -> None:
            try:
                await nc.publish(subject, data.body, reply=reply, headers=data.headers)
            except Exception:
                self._count("unconfirmed_send_failed")

        self._queue(publish)

    def _flushed(self) -> None:
        if self._host is not None:
            self._host.on_flushed()

    def _confirmed(self) -> None:
        self._all_confirmed.set()
        if self._host is not None:
            self._host.on_flushed()

    def is_confirmed(self) -> bool:
        return not self._pubacks

    def is_held(self, data: PlainMessage) -> bool:
        return bool(data.ack)

    def settle(self, data: PlainMessage, handled: bool) -> bool:
        nc, subject = self._nc, data.ack
        answer = b"+ACK" if handled else b'-NAK {"delay": %d}' % int(NAK_DELAY * 1e9)

        async def settle() -> None:
            await nc.publish(subject, answer)

        self._queue(settle)
        return not handled

    def listen(self, address: str) -> None:
        if self._relisten(address):
            return
        if address.startswith(NODE_ADDRESS_PREFIX):
            self._subscribe(address, self._names.node(address), self._on_direct)
            return
        self._subscribe(address, self._names.agent(address), self._on_direct)
        jsm, names, durable = self._jsm, self._names, consumer_name(address)
        ack_wait, max_in_flight = self.ack_wait, self.max_in_flight

        async def consume() -> None:  # before the subscription below: it receives what the consumer delivers
            await ensure_consumer(jsm, names, address, durable, ack_wait, max_in_flight)

        self._queue(consume, confirm=True)
        self._subscribe("q:" + address, names.deliver(address), self._on_held, queue="zmesh")

    def unlisten(self, address: str) -> None:
        """Stop listening on ``address`` after ``LINGER`` seconds: what was already
        on its way still arrives here, where the node dead-letters (or answers)
        it as for an agent that left, rather than vanishing in the server."""
        holder = self._subs.get(address)
        if holder is None or self._loop is None:
            return
        self._lingering[address] = self._loop.call_later(LINGER, self._stop_listening, address)

    def _stop_listening(self, address: str) -> None:
        self._unsubscribe(address)
        self._unsubscribe("q:" + address)  # the consumer stays: it keeps what waits for the agent

    def _relisten(self, address: str) -> bool:
        timer = self._lingering.pop(address, None)
        if timer is None:
            return False
        timer.cancel()  # listening again before it stopped: the subscription stays
        return True

    def subscribe(self, pattern: str) -> None:
        key = "pub:" + pattern
        if key not in self._subs:
            self._patterns = sorted({*self._patterns, pattern})
            self._subscribe(key, self._names.pub(pattern), self._on_pub(pattern))

    def unsubscribe(self, pattern: str) -> None:
        self._patterns = [p for p in self._patterns if p != pattern]
        self._unsubscribe("pub:" + pattern)

    def _subscribe(self, key: str, subject: str, callback: Callable[[Any], Coroutine[Any, Any, None]],
                   queue: str = "") -> None:
        if key in self._subs:
            return
        holder: list[Any] = [None]  # the subscription, once the server has it
        self._subs[key] = holder
        nc = self._nc

        async def subscribe() -> None:
            if self._subs.get(key) is holder:  # not unsubscribed (nor subscribed again) meanwhile
                holder[0] = await nc.subscribe(subject, queue=queue, cb=callback)

        self._queue(subscribe, confirm=True)

    def _unsubscribe(self, key: str) -> None:
        self._lingering.pop(key, None)
        holder = self._subs.pop(key, None)
        if holder is None:
            return

        async def unsubscribe() -> None:  # runs after its subscribe (the queue is in order)
            if holder[0] is not None:
                await holder[0].unsubscribe()

        self._queue(unsubscribe, confirm=True)

    def send(self, address: str, data: PlainMessage) -> None:
        if address.startswith(REPLY_PREFIX):
            self._publish(address[len(REPLY_PREFIX):], data)
            return
        if address.startswith(NODE_ADDRESS_PREFIX):
            self._publish(self._names.node(address, data.topic), data)
            return
        if data.headers["Zmesh-Qos"] != "0" and not data.headers.get("Zmesh-Correlation-Id"):
            self._pubacks.add(self._names.held(address, data.topic), data, PlainWire.size(data))
            return
        reply = ""
        if data.headers.get("Zmesh-Correlation-Id") and data.headers.get("Zmesh-Type") != "result":
            # a request: NATS tells at once when nobody listens on the agent's subject
            headers = data.headers
            reply = self._names.no_responders(self._node_id, headers.get("Zmesh-Reply-To", ""),
                                              headers["Zmesh-Correlation-Id"], address)
        self._publish(self._names.agent(address, data.topic), data, reply)

    def publish(self, topic: str, data: PlainMessage) -> None:
        self._publish(self._names.pub(topic), data)

    def put_record(self, data: bytes) -> None:
        records = self._records
        if records is None:
            return
        records.record = data  # renewed from now on

        async def put() -> None:
            await records.put(data)

        self._queue(put)  # after the subscriptions queued before it: whoever reads it can reach us

    # -- what comes in ---------------------------------------------------------

    async def _on_direct(self, msg: Any) -> None:
        host = self._host
        if host is None:
            return
        target, topic = self._names.direct(msg.subject)
        host.on_message(PlainMessage(dict(msg.headers or {}), msg.data, target, topic, msg.reply or ""))

    async def _on_held(self, msg: Any) -> None:
        host = self._host
        if host is None or not msg.reply or (msg.headers and "Status" in msg.headers):
            return  # not a delivery (a consumer's heartbeat or flow control, which zmesh does not ask for)
        agent, topic = self._names.held_parts(msg.subject)
        host.on_message(PlainMessage(dict(msg.headers or {}), msg.data, agent, topic, "", msg.reply))

    async def _on_confirmation(self, msg: Any) -> None:
        self._pubacks.on_reply(msg.subject, msg.headers, msg.data)
        if self._wants_room and len(self._pubacks) <= self._pubacks.max_count // 2:
            self._wants_room = False
            if self._host is not None:
                self._host.on_room()

    def has_room(self) -> bool:
        """Room while fewer than 3/4 of ``max_unconfirmed`` wait for the server's confirmation."""
        room = len(self._pubacks) < self._pubacks.max_count * 3 // 4
        self._wants_room = self._wants_room or not room
        return room

    def _on_pub(self, pattern: str) -> Callable[[Any], Coroutine[Any, Any, None]]:
        async def on_pub(msg: Any) -> None:
            host = self._host
            if host is None:
                return
            topic = self._names.pub_topic(msg.subject)
            first = next((p for p in self._patterns if matches(p, topic)), None)
            if first != pattern:  # another of this node's patterns takes it: once per node
                return
            host.on_publication(PlainMessage(dict(msg.headers or {}), msg.data, "", topic))

        return on_pub

    async def _on_no_responders(self, msg: Any) -> None:
        host = self._host
        if host is None or (msg.headers or {}).get("Status") != "503":
            return
        unanswered = self._names.unanswered(msg.subject)
        if unanswered is None:
            return
        reply_to, correlation_id, target = unanswered
        why = f"no node listens for agent {target!r} any more (NATS: no responders)"
        host.on_message(not_received(reply_to, correlation_id, target, why))

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat)
            self._pubacks.tick()
            if self._records is not None:
                self._records.beat(self._host, self.heartbeat)
