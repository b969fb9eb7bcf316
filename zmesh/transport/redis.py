"""Redis: nodes meet at a Redis server, ``Node("lab", transport="redis://127.0.0.1:6379")``.

Needs the redis-py client, version 5 or later (``pip install
'zmesh-agents[redis]'``), and Redis 6.2 or later. The names
(docs/transports.md), with ``MESH`` the mesh's name::

    zmesh:MESH:agent:AGENT     channel: messages to agent AGENT (QoS 0, requests, replies)
    zmesh:MESH:node:NODE       channel: messages to node NODE itself
    zmesh:MESH:pub:TOPIC       channel: broadcasts on TOPIC (nodes PSUBSCRIBE to their patterns)
    zmesh:MESH:q:AGENT         stream: agent AGENT's one-way QoS 1/2 messages (group ``zmesh``)
    zmesh:MESH:record:NODE     key: NODE's membership record, with an expiry
    zmesh:MESH:records         channel: records as they change, and each node's heartbeat

A plain client publishes the seed design's JSON envelope (or a bare
payload) on an agent's channel, with ``"reply_to": "redis:CHANNEL"`` for a
request, and reads the reply on CHANNEL; broadcasts with a JSON payload are
envelopes too (:mod:`._redis_wire`). QoS 0, requests, replies and
broadcasts are Redis pub/sub: at most once, in order per sender; a request
to an agent no node listens for fails at once with AgentNotRegistered
(Redis says nobody received it). A one-way message at QoS 1 or 2 goes
through the agent's stream (:mod:`._redis_streams`), kept until its handler
ran; what the server has accepted survives a node's death, and a server
restart when the server keeps its data (``appendonly yes``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from .._wire.names import NODE_ADDRESS_PREFIX
from ..errors import FrameError, TransportError
from ..topics import matches
from .base import TransportCapabilities
from ._checks import check_counts, check_liveness, check_seconds
from ._counted import Counted
from .message import MessageHost, MessageTransport, MessageWire
from ._redis_client import PubSubLink, connect, import_redis, shown
from ._redis_names import Keys
from ._redis_pipe import CommandPipe
from ._redis_records import RedisRecords
from ._redis_streams import StreamAdder, StreamReader
from ._redis_wire import REPLY_PREFIX, pack, plain, unpack
from .wires import PlainMessage, PlainWire, not_received

__all__ = ["RedisTransport"]

#: Seconds an address stays subscribed after its agent left (see ``unlisten``).
LINGER = 2.0
#: Seconds before a held message given back (a full inbox) is added to its stream again.
GIVE_BACK_DELAY = 0.2


class RedisTransport(Counted, MessageTransport):
    """A node's connection to a Redis server. ``url``: as redis-py takes it
    (``redis://[[user]:password@]host:port[/db]``, ``rediss://`` for TLS,
    ``unix://``), ``options`` go to ``redis.asyncio.Redis.from_url`` as they
    are (``ssl_ca_certs=``, ``password=``, ...). ``heartbeat``: seconds
    between renewals of this node's record; ``expiry``: seconds after which a
    record not renewed counts as gone; ``connect_wait``: how long ``start``
    tries to reach the server (later, the node reconnects by itself,
    forever), and how long ``close`` waits for it to take the QoS 1/2
    messages sent. QoS 1/2 (streams): ``ack_wait``: seconds before a message
    delivered and not acknowledged (its node died) is claimed by another;
    ``max_age``: seconds a message waits in its stream at most;
    ``max_unconfirmed``: QoS 1/2 messages kept until the server has them
    (more are dropped and counted); ``max_in_flight``: messages read from
    the streams and not yet acknowledged; ``max_queued``: other commands
    waiting to be sent (more are dropped and counted)."""

    capabilities = TransportCapabilities(level="message", peers_can_vanish=True, discovery="none")
    name = "redis"

    def __init__(self, url: str = "redis://127.0.0.1:6379", *, heartbeat: float = 1.0, expiry: float = 4.0,
                 connect_wait: float = 5.0, ack_wait: float = 10.0, max_age: float = 86400.0,
                 max_unconfirmed: int = 10_000, max_in_flight: int = 100, max_queued: int = 10_000,
                 **options: Any) -> None:
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
            raise TransportError(f"a Redis server is named by a redis:// (or rediss://, unix://) URL, got {url!r}")
        check_seconds(heartbeat=heartbeat, expiry=expiry, connect_wait=connect_wait, ack_wait=ack_wait)
        check_counts(max_unconfirmed=max_unconfirmed, max_in_flight=max_in_flight, max_queued=max_queued)
        check_liveness(heartbeat, expiry, max_age)
        import_redis()
        self.url = url
        self.router_endpoint = shown(url)  # no password in what is shown
        self.heartbeat, self.expiry, self.connect_wait = float(heartbeat), float(expiry), float(connect_wait)
        self.ack_wait, self.max_age = float(ack_wait), float(max_age)
        self.max_unconfirmed, self.max_in_flight, self.max_queued = max_unconfirmed, max_in_flight, max_queued
        self._options = options
        self._host: MessageHost | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._keys = Keys("")
        self._node_id = ""
        self._clients: list[Any] = []
        self._pipe: CommandPipe | None = None
        self._link: PubSubLink | None = None
        self._records: RedisRecords | None = None
        self._streams: StreamReader | None = None
        self._listening: set[str] = set()
        self._lingering: dict[str, asyncio.TimerHandle] = {}
        self._patterns: list[str] = []  # sorted: a publication goes to the first that matches
        self._timers: set[asyncio.TimerHandle] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._adder: StreamAdder | None = None
        self._started = False
        self._wants_room = False
        self._closing = False
        self._counters: dict[str, int] = {}

    def make_wire(self, max_payload: int, encoder: Any, decoder: Any) -> MessageWire:
        return PlainWire(max_payload, encoder, decoder, REPLY_PREFIX)

    def reaches(self, address: str) -> bool:
        return address.startswith(REPLY_PREFIX)

    # -- lifecycle ---------------------------------------------------------

    async def start(self, host: MessageHost, mesh: str, node_id: str, loop: asyncio.AbstractEventLoop) -> None:
        if self._clients or self._closing:
            raise TransportError("this RedisTransport is started already (or closed): give each node its own")
        self._host, self._loop, self._node_id = host, loop, node_id
        self._keys = keys = Keys.of(mesh)
        commands, reads = await connect(self.url, self._options, self.connect_wait, f"zmesh-{node_id}")
        self._clients = [commands, reads]
        self._pipe = pipe = CommandPipe(loop, commands, self._drop, self._flushed, self.max_queued, self._sent)
        self._records = RedisRecords(keys, node_id, self.expiry, self._drop)
        self._adder = StreamAdder(pipe, keys, self.max_unconfirmed, self.max_age, self._drop, self._flushed)
        self._link = PubSubLink(commands, loop, self._on_pubsub, self._reconnected, self._flushed, self._drop,
                                self._count)
        self._streams = StreamReader(reads, pipe, keys, node_id, self.ack_wait, self.max_in_flight,
                                     lambda: self._host, self._drop, self._count)
        try:
            await self._link.start(keys.records, self.connect_wait)
        except Exception as exc:
            await self._close_clients()
            raise TransportError(f"cannot subscribe at the Redis server at {self.router_endpoint}: {exc}") from None
        # The records follow once start has returned (the node reads them from then on): the keys
        # are read after the channel was subscribed, so what is told before that is in them.
        self._started = True
        self._tasks = [loop.create_task(self._load_records(first=True)), loop.create_task(self._streams.run()),
                       loop.create_task(self._beat())]

    async def _load_records(self, first: bool = False) -> None:
        """Read every record key (after the records channel is subscribed, so nothing is missed)."""
        assert self._records is not None
        if await self._records.load(self._clients[0], lambda: self._host, self._count) and first:
            assert self._host is not None
            self._host.on_records_loaded()

    def _reconnected(self) -> None:
        """The pub/sub connection is back: what was told meanwhile is lost, so read the keys again."""
        if self._records is not None and self._loop is not None and not self._closing:
            self._records.refresh()
            self._tasks.append(self._loop.create_task(self._load_records()))

    async def withdraw(self) -> None:
        if self._pipe is None or self._closing or self._records is None or self._records.record is None:
            return
        for command in self._records.withdrawal():
            self._pipe.add(*command)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._pipe.done(), self.connect_wait)

    async def close(self) -> None:
        pipe = self._pipe
        if pipe is None or self._closing:
            return
        if self._records is not None and self._records.record is not None:
            for command in self._records.withdrawal():
                pipe.add(*command)
        self._closing = True
        for timer in [*self._timers, *self._lingering.values()]:
            timer.cancel()
        if self._adder is not None:  # a QoS 1/2 message on its way: the server's confirmation, for a while
            await self._adder.confirmed(self.connect_wait)
        pipe.closing = True
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(pipe.done(), self.connect_wait)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        if self._link is not None:
            await self._link.stop()
        await pipe.stop()
        await self._close_clients()
        self._host = None

    async def _close_clients(self) -> None:
        for client in self._clients:
            with contextlib.suppress(Exception):
                await client.aclose()

    # -- addresses and patterns ---------------------------------------------

    def listen(self, address: str) -> None:
        timer = self._lingering.pop(address, None)
        if timer is not None:
            timer.cancel()  # listening again before it stopped: the subscription stays
            return
        if address in self._listening or self._link is None or self._closing:
            return
        self._listening.add(address)
        self._link.subscribe(self._keys.direct(address))
        if not address.startswith(NODE_ADDRESS_PREFIX) and self._streams is not None:
            self._streams.add(address)

    def unlisten(self, address: str) -> None:
        """Stop listening on ``address`` after ``LINGER`` seconds: what was already
        on its way still arrives here, where the node dead-letters (or answers)
        it as for an agent that left, rather than vanishing."""
        if address in self._listening and self._loop is not None and address not in self._lingering:
            self._lingering[address] = self._loop.call_later(LINGER, self._stop_listening, address)

    def _stop_listening(self, address: str) -> None:
        self._lingering.pop(address, None)
        self._listening.discard(address)
        if self._link is not None and not self._closing:
            self._link.unsubscribe(self._keys.direct(address))
        if self._streams is not None:
            self._streams.remove(address)  # the stream and its group stay: they keep what waits for the agent

    def subscribe(self, pattern: str) -> None:
        if pattern in self._patterns or self._link is None or self._closing:
            return
        glob = self._keys.pub_glob(pattern)
        if not any(self._keys.pub_glob(p) == glob for p in self._patterns):
            self._link.subscribe(glob, pattern=True)
        self._patterns = sorted({*self._patterns, pattern})

    def unsubscribe(self, pattern: str) -> None:
        if pattern not in self._patterns or self._link is None:
            return
        self._patterns = [p for p in self._patterns if p != pattern]
        glob = self._keys.pub_glob(pattern)
        if not any(self._keys.pub_glob(p) == glob for p in self._patterns):
            self._link.unsubscribe(glob, pattern=True)

    def has_room(self) -> bool:
        """Room while fewer than 3/4 of ``max_queued`` commands wait to be sent and of
        ``max_unconfirmed`` QoS 1/2 messages for the server."""
        pipe, adder = self._pipe, self._adder
        room = pipe is None or adder is None or (
            len(pipe) < self.max_queued * 3 // 4 and adder.unconfirmed < self.max_unconfirmed * 3 // 4)
        self._wants_room = self._wants_room or not room
        return room

    def _sent(self) -> None:
        """A pipeline went out: senders waiting for room go on once half of it is free."""
        pipe, adder = self._pipe, self._adder
        if self._wants_room and pipe is not None and adder is not None and len(pipe) <= self.max_queued // 2 \
                and adder.unconfirmed <= self.max_unconfirmed // 2:
            self._wants_room = False
            if self._host is not None:
                self._host.on_room()

    def is_flushed(self) -> bool:
        return (self._pipe is None or self._pipe.is_idle()) and (self._link is None or self._link.is_flushed())

    def _flushed(self) -> None:
        if self._host is not None and self.is_flushed():
            self._host.on_flushed()

    # -- what goes out ---------------------------------------------------------

    def send(self, address: str, data: PlainMessage) -> None:
        pipe = self._pipe
        if pipe is None or self._closing:
            self._count("closed")
            return
        if address.startswith(REPLY_PREFIX):
            pipe.add("PUBLISH", address[len(REPLY_PREFIX):], plain(data), done=self._delivered(address))
            return
        headers = data.headers
        correlation_id = headers.get("Zmesh-Correlation-Id")
        if not correlation_id and headers.get("Zmesh-Qos", "0") != "0" and not address.startswith(NODE_ADDRESS_PREFIX):
            assert self._adder is not None
            self._adder.add(address, data)
            return
        if correlation_id and headers.get("Zmesh-Type") != "result":
            done = self._answered(address, data)
        else:
            done = self._delivered(address)
        pipe.add("PUBLISH", self._keys.direct(address), pack(data), done=done)

    def _delivered(self, address: str) -> Any:
        def delivered(reply: Any) -> None:
            if isinstance(reply, Exception):
                self._drop("send_failed", f"{address}: {reply}")
            elif reply == 0:
                self._drop("no_listener", address)

        return delivered

    def _answered(self, address: str, data: PlainMessage) -> Any:
        """A request: when Redis says nobody received it, its caller hears so at once."""
        def answered(reply: Any) -> None:
            host = self._host
            if reply != 0 or host is None:
                if isinstance(reply, Exception):
                    self._drop("send_failed", f"{address}: {reply}")
                return
            why = f"no node listens for agent {address!r} any more (Redis: nobody received it)"
            host.on_message(not_received(data.headers.get("Zmesh-Reply-To", ""),
                                         data.headers["Zmesh-Correlation-Id"], address, why))

        return answered

    def publish(self, topic: str, data: PlainMessage) -> None:
        if self._pipe is None or self._closing:
            self._count("closed")
            return
        self._pipe.add("PUBLISH", self._keys.pub(topic), plain(data))

    def put_record(self, data: bytes) -> None:
        pipe, link, records = self._pipe, self._link, self._records
        if pipe is None or link is None or records is None or self._closing:
            return

        async def subscribed() -> None:  # whoever reads the record can reach this node's agents
            await link.confirmed(self.connect_wait)

        pipe.barrier(subscribed)
        for command in records.put(data):
            pipe.add(*command)

    # -- what comes in -----------------------------------------------------------

    def _on_pubsub(self, kind: bytes, channel: bytes, payload: bytes, glob: bytes | None) -> None:
        host = self._host
        if host is None or self._closing or not self._started:
            return
        name = channel.decode("utf-8", "replace")
        try:
            if glob is not None:
                topic = self._keys.pub_topic(name)
                first = next((p for p in self._patterns if matches(p, topic)), None)
                if first is not None and self._keys.pub_glob(first) == glob.decode("utf-8", "replace"):
                    host.on_publication(unpack(payload, "", topic))  # once per node: the first pattern's copy
                return
            if name == self._keys.records:
                assert self._records is not None
                self._records.told(payload, host, self._fetch_record)
                return
            address = self._keys.address(name)
            if address in self._listening:
                host.on_message(unpack(payload, address))
        except FrameError as exc:
            self._drop("malformed", f"{name[:80]}: {exc}")

    def _fetch_record(self, node_id: str) -> None:
        records, pipe = self._records, self._pipe
        if records is None or pipe is None:
            return

        def fetched(value: Any) -> None:
            if self._host is not None and not isinstance(value, Exception):
                records.read_key(node_id, value, self._host, is_key=False)

        pipe.add("GET", self._keys.record(node_id), done=fetched)

    # -- held deliveries (one-way QoS 1/2) -------------------------------------

    def is_confirmed(self) -> bool:
        return self._adder is None or self._adder.is_confirmed()

    def is_held(self, data: PlainMessage) -> bool:
        return bool(data.ack)

    def settle(self, data: PlainMessage, handled: bool) -> bool:
        """Acknowledge; or give back what a full inbox refused (added again to its stream
        after ``GIVE_BACK_DELAY``, for whoever hosts the agent then). A message for an agent
        that left this node is not given back (it would come back here while the address
        lingers): the node dead-letters it, as on ZeroMQ."""
        streams, loop = self._streams, self._loop
        if streams is None or loop is None:
            return False
        give_back = not handled and not self._closing and data.target in self._listening \
            and data.target not in self._lingering
        return streams.settle(data, not give_back, GIVE_BACK_DELAY, loop)

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat)
            pipe, records, host = self._pipe, self._records, self._host
            if pipe is None or records is None or host is None:
                continue
            for command in records.renewal():
                pipe.add(*command)
            records.sweep(host, self.heartbeat)
            if self._streams is not None:
                self._streams.beat()
