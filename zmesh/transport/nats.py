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

Delivery is NATS core's: at most once, in order per sender. A request to an
agent whose node no longer listens gets NATS's no-responders at once, which
raises AgentNotRegistered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from typing import Any, Callable, Coroutine

from .._wire.names import NODE_ADDRESS_PREFIX, node_address
from ..errors import TransportError
from ..topics import matches
from .base import TransportCapabilities
from .message import MessageHost, MessageTransport, MessageWire
from ._nats_names import bucket_name, from_kv_key, kv_key, subject_token, unescape
from .wires import JSON, PlainMessage, PlainWire

__all__ = ["NatsTransport"]

log = logging.getLogger("zmesh")

#: A plain client's reply subject, as a ``reply_to`` address.
REPLY_PREFIX = "nats:"
#: Seconds an address stays subscribed after its agent left (see ``unlisten``).
LINGER = 2.0


def _import_nats() -> Any:
    try:
        import nats
    except ImportError:
        raise TransportError(
            "the 'nats' transport needs the nats-py client: pip install 'zmesh-agents[nats]'") from None
    return nats


class NatsTransport(MessageTransport):
    """A node's connection to a NATS server (``url``: ``nats://host:port``,
    credentials as nats-py takes them, in the URL or in ``options``, which go
    to ``nats.connect`` as they are). ``heartbeat``: seconds between renewals
    of this node's record; ``expiry``: seconds after which a record not
    renewed counts as gone; ``connect_wait``: how long ``start`` tries to
    reach the server (later, the client reconnects by itself, forever)."""

    capabilities = TransportCapabilities(level="message", peers_can_vanish=True, discovery="none")
    name = "nats"

    def __init__(self, url: str = "nats://127.0.0.1:4222", *, heartbeat: float = 1.0, expiry: float = 4.0,
                 connect_wait: float = 5.0, **options: Any) -> None:
        if not isinstance(url, str) or not url.startswith(("nats://", "tls://", "ws://", "wss://")):
            raise TransportError(f"a NATS server is named by a nats:// (or tls://) URL, got {url!r}")
        for what, value in (("heartbeat", heartbeat), ("expiry", expiry), ("connect_wait", connect_wait)):
            if value.__class__ not in (int, float) or not 0 < value < 3600:
                raise ValueError(f"{what} must be a number of seconds above 0, got {value!r}")
        if expiry <= heartbeat:
            raise ValueError(f"expiry ({expiry} s) must be longer than heartbeat ({heartbeat} s)")
        _import_nats()
        self.url = url
        self.router_endpoint = url
        self.heartbeat = float(heartbeat)
        self.expiry = float(expiry)
        self.connect_wait = float(connect_wait)
        self._options = options
        self._host: MessageHost | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._nc: Any = None
        self._kv: Any = None
        self._prefix = ""
        self._node_id = ""
        self._key = ""
        self._record: bytes | None = None
        self._subs: dict[str, list[Any]] = {}  # address or "pub:" pattern -> [its subscription]
        self._patterns: list[str] = []  # sorted: a publication goes to the first that matches
        self._out: deque[Callable[[], Coroutine[Any, Any, None]]] = deque()
        self._flusher: asyncio.Task[None] | None = None
        self._watcher: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self._heard: dict[str, tuple[float, bytes]] = {}  # node -> (when renewed, its record)
        self._counters: dict[str, int] = {}
        self._lingering: dict[str, asyncio.TimerHandle] = {}
        self._unconfirmed = False
        self._renewal: asyncio.Future[None] | None = None
        self._closing = False

    def make_wire(self, max_payload: int, encoder: Any, decoder: Any) -> MessageWire:
        return PlainWire(max_payload, encoder, decoder, REPLY_PREFIX, lambda: self.max_message)

    def reaches(self, address: str) -> bool:
        return address.startswith(REPLY_PREFIX)

    # -- lifecycle ---------------------------------------------------------

    async def start(self, host: MessageHost, mesh: str, node_id: str, loop: asyncio.AbstractEventLoop) -> None:
        if self._nc is not None or self._closing:
            raise TransportError("this NatsTransport is started already (or closed): give each node its own")
        nats = _import_nats()
        from nats.js.errors import BucketNotFoundError

        self._host, self._loop, self._node_id = host, loop, node_id
        self._prefix = f"zmesh.{subject_token(mesh)}."
        self._key = kv_key(node_id)
        options = {"name": f"zmesh {node_id}", "connect_timeout": 5, "max_reconnect_attempts": -1,
                   "reconnect_time_wait": 0.5, "allow_reconnect": True, **self._options}

        async def quiet(exc: Exception) -> None:  # nats-py logs every error itself otherwise
            self._count("client_errors")

        options.setdefault("error_cb", quiet)
        try:
            # nats-py tries the first connection as often as later ones (forever, by these
            # options): the node gives it connect_wait seconds, then says so.
            self._nc = await asyncio.wait_for(nats.connect(self.url, **options), self.connect_wait)
        except asyncio.TimeoutError:
            raise TransportError(f"cannot reach the NATS server at {self.url} within {self.connect_wait} s "
                                 "(is nats-server running there?)") from None
        except Exception as exc:
            raise TransportError(f"cannot reach the NATS server at {self.url}: {type(exc).__name__}: {exc}") from None
        self.max_message = int(self._nc.max_payload)  # the server's limit, headers included
        try:
            js = self._nc.jetstream()
            bucket = bucket_name(mesh)
            try:
                self._kv = await js.key_value(bucket)
            except BucketNotFoundError:
                self._kv = await js.create_key_value(bucket=bucket, history=1, ttl=self.expiry * 2)
            self._watcher = await self._kv.watchall()
        except Exception as exc:
            await self._nc.close()
            if "jetstream not enabled" in str(exc).lower() or type(exc).__name__ in ("NoRespondersError",
                                                                                         "ServiceUnavailableError"):
                raise TransportError(f"the NATS server at {self.url} has no JetStream (start it with -js): "
                                     "zmesh keeps the mesh's membership in a key-value bucket") from None
            raise TransportError(f"NATS at {self.url}: cannot open the membership bucket: {exc!r}") from None
        self._subscribe("noresp", f"{self._prefix}noresp.{subject_token(node_id)}.>", self._on_no_responders)
        self._tasks.append(loop.create_task(self._watch()))
        self._tasks.append(loop.create_task(self._beat()))

    async def withdraw(self) -> None:
        if self._kv is None or self._closing or self._record is None:
            return
        self._record = None  # not renewed any more
        if self._renewal is not None:
            with contextlib.suppress(BaseException):
                await self._renewal  # a renewal landing after the delete would bring the record back
        await self._sent()  # what was asked before goes first (replies, record changes)
        try:
            await self._kv.delete(self._key)
        except Exception:
            self._count("withdraw_failed")  # the record then expires: the peers hear it later

    async def close(self) -> None:
        if self._nc is None or self._closing:
            return
        self._closing = True  # nothing more is queued
        for timer in self._lingering.values():
            timer.cancel()
        self._lingering.clear()
        with contextlib.suppress(Exception):
            await self._sent()
            if self._record is not None:
                await self._kv.delete(self._key)
        tasks = [*self._tasks, *([self._renewal] if self._renewal is not None else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        with contextlib.suppress(Exception):
            await self._watcher.stop()
        with contextlib.suppress(Exception):
            await self._nc.close()
        self._host = None

    # -- what goes out: in order, one task at a time -------------------------

    def _queue(self, step: Callable[[], Coroutine[Any, Any, None]], confirm: bool = False) -> None:
        """Run ``step`` after those queued before it; ``confirm``: a change of
        membership (an address, a pattern, the record) that ``is_flushed``
        waits for the server to have."""
        if self._nc is None or self._closing:
            self._count("closed")
            return
        self._out.append(step)
        self._unconfirmed = self._unconfirmed or confirm
        if self._flusher is None:
            self._flusher = self._loop.create_task(self._drain_out())  # type: ignore[union-attr]

    async def _drain_out(self) -> None:
        try:
            while self._out:
                while self._out:
                    step = self._out.popleft()
                    try:
                        await step()
                    except Exception as exc:  # the server refused it, or the connection is gone
                        self._drop("send_failed", f"{type(exc).__name__}")
                if self._unconfirmed:
                    self._unconfirmed = False
                    try:
                        await self._nc.flush(timeout=10)  # the server's PONG: it has all of it
                    except Exception:
                        self._count("flush_failed")
        finally:
            self._flusher = None
        if self._host is not None and not self._out:
            self._host.on_flushed()

    async def _sent(self) -> None:
        """Until everything queued so far has been handed to the client."""
        while self._flusher is not None:
            await asyncio.shield(self._flusher)

    def is_flushed(self) -> bool:
        return not self._out and self._flusher is None and not self._unconfirmed

    def _publish(self, subject: str, data: PlainMessage, reply: str = "") -> None:
        nc = self._nc

        async def publish() -> None:
            await nc.publish(subject, data.body, reply=reply, headers=data.headers)

        self._queue(publish)

    def listen(self, address: str) -> None:
        if self._relisten(address):
            return
        if address.startswith(NODE_ADDRESS_PREFIX):
            subject = f"{self._node_subject(address)}.>"
        else:
            subject = f"{self._prefix}agent.{address}.>"
        self._subscribe(address, subject, self._on_direct)

    def unlisten(self, address: str) -> None:
        """Stop listening on ``address`` after ``LINGER`` seconds: what was already
        on its way still arrives here, where the node dead-letters (or answers)
        it as for an agent that left, rather than vanishing in the server."""
        holder = self._subs.get(address)
        if holder is None or self._loop is None:
            return
        self._lingering[address] = self._loop.call_later(LINGER, self._unsubscribe, address)

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
            self._subscribe(key, f"{self._prefix}pub.{pattern}", self._on_pub(pattern))

    def unsubscribe(self, pattern: str) -> None:
        self._patterns = [p for p in self._patterns if p != pattern]
        self._unsubscribe("pub:" + pattern)

    def _subscribe(self, key: str, subject: str, callback: Callable[[Any], Coroutine[Any, Any, None]]) -> None:
        if key in self._subs:
            return
        holder: list[Any] = [None]  # the subscription, once the server has it
        self._subs[key] = holder
        nc = self._nc

        async def subscribe() -> None:
            if self._subs.get(key) is holder:  # not unsubscribed (nor subscribed again) meanwhile
                holder[0] = await nc.subscribe(subject, cb=callback)

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
            self._publish(f"{self._node_subject(address)}.{data.topic}", data)
            return
        reply = ""
        if data.headers.get("Zmesh-Correlation-Id") and data.headers.get("Zmesh-Type") != "result":
            # a request: NATS tells at once when nobody listens on the agent's subject
            reply = (f"{self._prefix}noresp.{subject_token(self._node_id)}."
                     f"{subject_token(data.headers.get('Zmesh-Reply-To', ''))}."
                     f"{subject_token(data.headers['Zmesh-Correlation-Id'])}.{subject_token(address)}")
        self._publish(f"{self._prefix}agent.{address}.{data.topic}", data, reply)

    def _node_subject(self, address: str) -> str:
        """``zmesh.MESH.node.NODE`` for node address ``zmesh.node.NODE``."""
        return f"{self._prefix}node.{subject_token(address[len(NODE_ADDRESS_PREFIX):])}"

    def publish(self, topic: str, data: PlainMessage) -> None:
        self._publish(f"{self._prefix}pub.{topic}", data)

    def put_record(self, data: bytes) -> None:
        self._record = data
        kv, key = self._kv, self._key

        async def put() -> None:
            await kv.put(key, data)

        self._queue(put)  # after the subscriptions queued before it: whoever reads it can reach us

    # -- what comes in ---------------------------------------------------------

    async def _on_direct(self, msg: Any) -> None:
        host = self._host
        if host is None:
            return
        rest = msg.subject[len(self._prefix):]
        kind, _, rest = rest.partition(".")
        name, _, topic = rest.partition(".")
        target = name if kind == "agent" else node_address(unescape(name))
        host.on_message(PlainMessage(dict(msg.headers or {}), msg.data, target, topic, msg.reply or ""))

    def _on_pub(self, pattern: str) -> Callable[[Any], Coroutine[Any, Any, None]]:
        cut = len(self._prefix) + len("pub.")

        async def on_pub(msg: Any) -> None:
            host = self._host
            if host is None:
                return
            topic = msg.subject[cut:]
            first = next((p for p in self._patterns if matches(p, topic)), None)
            if first != pattern:  # another of this node's patterns takes it: once per node
                return
            host.on_publication(PlainMessage(dict(msg.headers or {}), msg.data, "", topic))

        return on_pub

    async def _on_no_responders(self, msg: Any) -> None:
        host = self._host
        if host is None or (msg.headers or {}).get("Status") != "503":
            return
        parts = msg.subject[len(self._prefix):].split(".")
        if len(parts) != 5:
            return
        _, _, reply_to, correlation_id, target = (unescape(p) for p in parts)
        why = f"no node listens for agent {target!r} any more (NATS: no responders)"
        headers = {"Zmesh-Type": "result", "Zmesh-Correlation-Id": correlation_id, "Zmesh-Status": "not_found",
                   "Zmesh-Sender": target, "Content-Type": JSON}
        host.on_message(PlainMessage(headers, json.dumps(why).encode(), reply_to, ""))

    async def _watch(self) -> None:
        loaded = False
        async for entry in self._watcher:
            host = self._host
            if host is None:
                return
            if entry is None:
                if not loaded:
                    loaded = True
                    host.on_records_loaded()
                continue
            node_id = from_kv_key(entry.key)
            if node_id == self._node_id:
                continue
            if entry.operation in ("DEL", "PURGE") or not entry.value:
                if self._heard.pop(node_id, None) is not None:
                    host.on_record(node_id, None)
                continue
            if not loaded and entry.created is not None and (
                    time.time() - entry.created.timestamp() > self.expiry):
                continue  # not renewed for longer than a node lives without: it died
            old = self._heard.get(node_id)
            self._heard[node_id] = (time.monotonic(), bytes(entry.value))
            if old is None or old[1] != entry.value:
                host.on_record(node_id, bytes(entry.value))

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat)
            renewal = self._renewal
            if self._record is not None and (renewal is None or renewal.done()):
                # The same record again, beside the queue (messages never wait behind it).
                self._renewal = asyncio.ensure_future(self._renew(self._record))
            now = time.monotonic()
            host = self._host
            for node_id, (when, _) in list(self._heard.items()):
                if now - when > self.expiry and host is not None:
                    del self._heard[node_id]
                    host.on_record(node_id, None)

    async def _renew(self, record: bytes) -> None:
        try:
            await self._kv.put(self._key, record)
        except Exception:
            self._count("renew_failed")

    # -- counts ----------------------------------------------------------------

    def _count(self, reason: str) -> None:
        self._counters[reason] = self._counters.get(reason, 0) + 1

    def _drop(self, reason: str, where: str) -> None:
        self._count(reason)
        if self._host is not None:
            self._host.on_transport_drop(reason, where)

    def stats(self) -> dict[str, int]:
        return dict(self._counters)
