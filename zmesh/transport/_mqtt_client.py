"""The paho-mqtt client of an MQTT node (internal): its network thread, the
hop of every callback onto the node's loop, what the broker has confirmed
(subscriptions, QoS 1/2 publications), and a message as MQTT 5 properties.

paho runs its own thread (``loop_start``): it pings the broker while the
node's loop is busy, and calls back there; each callback is handed to the
loop with ``call_soon_threadsafe``, in order. Calls into paho (publish,
subscribe, ack) are made from the loop; paho takes them from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import math
import time
from collections import deque
from typing import Any, Callable, Final, NamedTuple, Protocol

import msgpack

from ..errors import TransportError
from .wires import PlainMessage

__all__ = ["MqttLink", "LinkOwner", "close_sockets", "import_paho", "UNROUTED_PATIENCE", "NATIVE"]

_packb: Callable[..., bytes] = msgpack.packb
_unpackb: Callable[..., Any] = msgpack.unpackb

#: How a message between zmesh nodes starts when its fields travel in the payload
#: (msgpack ``[headers, body]`` after it) rather than as MQTT 5 user properties, which
#: paho packs and parses at about 130 us a message (see docs/transports.md).
NATIVE: Final = b"\x00zmesh/1\n"
#: MQTT 5's reason code for a publication the broker took and no client subscribes to.
NO_MATCHING_SUBSCRIBERS = 0x10
#: Seconds a QoS 1/2 message to a node is sent again while nobody subscribes to its topic
#: (its node reconnecting to a restarted broker), and between two tries.
UNROUTED_PATIENCE = 10.0
UNROUTED_RETRY = 0.5


class _Unconfirmed(NamedTuple):
    topic: str
    data: PlainMessage | bytes
    qos: int
    retain: bool
    plain_reply: bool
    since: float
    native: bool


def import_paho() -> Any:
    try:
        import paho.mqtt.client as mqtt
    except ImportError:
        raise TransportError(
            "the 'mqtt' transport needs the paho-mqtt client (version 2): pip install 'zmesh-agents[mqtt]'") from None
    if not hasattr(mqtt, "CallbackAPIVersion"):
        raise TransportError("the 'mqtt' transport needs paho-mqtt 2 or later: pip install -U 'zmesh-agents[mqtt]'")
    return mqtt


class LinkOwner(Protocol):
    """What the link reads of its transport, and calls on the node's loop."""

    host: str
    port: int
    username: str | None
    password: str | None
    tls: bool
    tls_context: Any
    keepalive: int
    session_expiry: int
    max_queued: int
    max_in_flight: int
    url: str

    def connected(self) -> None: ...

    def arrived(self, mqtt_topic: str, plain: PlainMessage, qos: int, ack: str, ids: tuple[int, ...]) -> None: ...

    def flushed(self) -> None: ...

    def confirmed_one(self) -> None: ...

    def count(self, reason: str) -> None: ...

    def drop(self, reason: str, where: str) -> None: ...


def _new_properties(packet: str) -> Any:
    """paho's MQTT 5 properties of a ``packet`` (``"PUBLISH"``, ...), to fill in."""
    from paho.mqtt import properties
    from paho.mqtt.packettypes import PacketTypes

    make: Any = properties.Properties
    return make(getattr(PacketTypes, packet))


def _correlation_text(data: bytes) -> str:
    """A plain client's correlation data as a correlation id (``hex:...`` unless it is printable text)."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        text = ""
    if text.isprintable() and not text.startswith("hex:") and 0 < len(text) <= 128:
        return text
    return "hex:" + data.hex()


def _correlation_bytes(text: str) -> bytes:
    if text.startswith("hex:"):
        try:
            return bytes.fromhex(text[4:])
        except ValueError:
            pass
    return text.encode()


class MqttLink:
    """One paho client for one node."""

    def __init__(self, owner: LinkOwner, loop: asyncio.AbstractEventLoop, client_id: str, will_topic: str) -> None:
        self._owner, self._loop = owner, loop
        self._client_id, self._will_topic = client_id, will_topic
        self._mqtt = import_paho()
        self._client: Any = None
        self._first: asyncio.Future[None] = loop.create_future()
        # Connections so far, counted on paho's thread: a message id is only good on its own connection.
        self._generation = 0
        self._subscribing: set[int] = set()
        # QoS 1/2 publications the broker has not confirmed: mid -> what to send again if it
        # says nobody subscribes (a message to a node, after a broker restart, before it is back).
        self._publishing: dict[int, _Unconfirmed | None] = {}
        self._retrying = 0
        self._confirmed = asyncio.Event()
        self._handed: deque[tuple[Any, tuple[Any, ...]]] = deque()  # paho's callbacks, for the loop
        self._waking = False

    # -- connection ----------------------------------------------------------

    def _new_client(self, manual_ack: bool) -> Any:
        mqtt, owner = self._mqtt, self._owner
        client = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2, client_id=self._client_id,
                             protocol=mqtt.MQTTv5, manual_ack=manual_ack)
        if owner.username is not None:
            client.username_pw_set(owner.username, owner.password)
        if owner.tls:
            client.tls_set_context(owner.tls_context)
        return client

    def _hop(self, callback: Any, *args: Any) -> None:
        """Run ``callback(*args)`` on the node's loop, after those handed over before it
        (from paho's thread). One wake-up of the loop carries every callback handed over
        meanwhile: at thousands of messages a second, a wake-up per message was most of
        the cost of receiving one."""
        self._handed.append((callback, args))
        if not self._waking:
            self._waking = True
            try:
                self._loop.call_soon_threadsafe(self._run_handed)
            except RuntimeError:  # the loop is closed: nothing runs any more
                self._waking = False

    def _run_handed(self) -> None:
        handed = self._handed
        self._waking = False  # before taking: what paho hands over from now on wakes the loop again
        while handed:
            callback, args = handed.popleft()
            callback(*args)

    async def connect(self, wait: float) -> None:
        owner = self._owner
        client = self._new_client(True)
        client.will_set(self._will_topic, b"", qos=1, retain=True)  # a node that dies: its record emptied
        client.max_queued_messages_set(owner.max_queued)
        client.max_inflight_messages_set(owner.max_in_flight)
        client.reconnect_delay_set(1, 2)
        hop = self._hop
        def on_connect(c: Any, u: Any, flags: Any, reason: Any, props: Any) -> None:  # paho's thread
            if not reason.is_failure:
                self._generation += 1  # before any message of this connection is read
                # paho does not keep to the broker's receive maximum by itself, and a broker
                # (mosquitto) drops, unsaid, the QoS 1/2 messages sent beyond it: say so.
                if int(getattr(props, "ReceiveMaximum", 65535)) < owner.max_in_flight:
                    hop(owner.drop, "receive_maximum_below_max_in_flight", str(props.ReceiveMaximum))
            hop(self._on_connect, reason.is_failure, str(reason))

        def no_delay(c: Any, u: Any, sock: Any) -> None:
            # Without it a QoS 1 request waits out Nagle and the broker's delayed ACK (~40 ms).
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        client.on_socket_open = no_delay
        client.on_connect = on_connect
        client.on_disconnect = lambda c, u, flags, reason, props: hop(owner.count, "disconnects")
        client.on_message = lambda c, u, message: hop(self._on_message, message, self._generation)
        client.on_subscribe = lambda c, u, mid, reasons, props: hop(self._on_subscribed, mid, reasons)
        client.on_unsubscribe = lambda c, u, mid, reasons, props: hop(self._subscribing.discard, mid)
        client.on_publish = lambda c, u, mid, reason, props: hop(self._on_published, mid, reason)
        properties = _new_properties("CONNECT")
        properties.SessionExpiryInterval = owner.session_expiry
        self._client = client
        try:
            # The node's session, never started clean: what arrives while it is away (or
            # dead, for a node of the same name to take over) waits for it at the broker, for
            # session_expiry seconds; and a broker (mosquitto) keeps only such sessions across
            # its restarts. What a node of the same name left subscribed: mqtt.py's adopt().
            client.connect_async(owner.host, owner.port, owner.keepalive, clean_start=False, properties=properties)
            client.loop_start()
            await asyncio.wait_for(asyncio.shield(self._first), wait)
        except asyncio.TimeoutError:
            await self.disconnect()
            raise TransportError(f"cannot reach the MQTT broker at {owner.url} within {wait} s "
                                 "(is mosquitto running there?)") from None
        except BaseException:
            await self.disconnect()
            raise

    def _on_connect(self, failed: bool, reason: str) -> None:
        if failed:
            self._owner.count("connect_refused")
            if not self._first.done():
                self._first.set_exception(TransportError(f"the MQTT broker at {self._owner.url} refused the "
                                                         f"connection: {reason}"))
            return
        self._subscribing.clear()  # asked again below, on this connection
        self._owner.connected()
        if not self._first.done():
            self._first.set_result(None)

    async def disconnect(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        client.disconnect()  # a clean goodbye: no last will
        await self._loop.run_in_executor(None, client.loop_stop)
        close_sockets(client)

    # -- out -------------------------------------------------------------------

    def subscribe(self, topic_filter: str, qos: int, ident: int = 0) -> None:
        from paho.mqtt.subscribeoptions import SubscribeOptions

        properties = None
        if ident:
            properties = _new_properties("SUBSCRIBE")
            properties.SubscriptionIdentifier = ident
        rc, mid = self._client.subscribe(topic_filter, options=SubscribeOptions(qos=qos), properties=properties)
        if rc == 0:
            self._subscribing.add(mid)  # else not connected: asked again on connecting

    def unsubscribe(self, topic_filter: str) -> None:
        rc, mid = self._client.unsubscribe(topic_filter)
        if rc == 0:
            self._subscribing.add(mid)

    def publish(self, topic: str, data: PlainMessage | bytes, qos: int, retain: bool = False,
                plain_reply: bool = False, routed_since: float | None = None, native: bool = False) -> None:
        """Publish; ``routed_since``: a message to a node (an agent's or a node's address),
        sent again for ``UNROUTED_PATIENCE`` seconds from then while the broker says no
        client subscribes to it (monotonic time; None: never). ``native``: the fields
        and the body packed in the payload (``NATIVE``), no properties."""
        if isinstance(data, bytes):
            body, properties = data, None
        elif native:
            body, properties = NATIVE + _packb([data.headers, data.body]), None
        else:
            body, properties = data.body, self._properties(data, plain_reply)
        try:
            info = self._client.publish(topic, body, qos=qos, retain=retain, properties=properties)
        except ValueError as exc:  # a topic paho refuses
            self._owner.drop("send_failed", f"{topic[:80]}: {exc}")
            return
        if info.rc == self._mqtt.MQTT_ERR_QUEUE_SIZE:
            self._owner.drop("queue_full", topic[:80])
        elif qos:  # kept by paho while not connected, sent on connecting
            again = None
            if routed_since is not None:
                again = _Unconfirmed(topic, data, qos, retain, plain_reply, routed_since, native)
            self._publishing[info.mid] = again
            self._confirmed.clear()
        elif info.rc != 0:
            self._owner.drop("not_connected", topic[:80])

    def _properties(self, data: PlainMessage, plain_reply: bool) -> Any:
        properties = _new_properties("PUBLISH")
        headers = data.headers
        properties.UserProperty = [(k, v) for k, v in headers.items() if k != "Content-Type"]
        if "Content-Type" in headers:
            properties.ContentType = headers["Content-Type"]
        ttl = headers.get("Zmesh-Ttl")
        if ttl:
            properties.MessageExpiryInterval = max(1, math.ceil(float(ttl)))
        if plain_reply and headers.get("Zmesh-Correlation-Id"):
            properties.CorrelationData = _correlation_bytes(headers["Zmesh-Correlation-Id"])
        return properties

    def ack(self, handle: str) -> None:
        generation, mid, qos = (int(part) for part in handle.split("/"))
        if generation == self._generation and self._client is not None:
            self._client.ack(mid, qos)  # else the broker sends it again on the new connection

    # -- in --------------------------------------------------------------------

    def _on_message(self, message: Any, generation: int) -> None:
        props = message.properties
        payload = bytes(message.payload)
        if payload.startswith(NATIVE) and not getattr(props, "UserProperty", None):
            self._on_native(message, generation, payload)
            return
        headers: dict[str, str] = {}
        for key, value in getattr(props, "UserProperty", None) or ():
            headers[key] = value
        content_type = getattr(props, "ContentType", None)
        if content_type:
            headers["Content-Type"] = content_type
        reply = getattr(props, "ResponseTopic", None) or ""
        correlation = getattr(props, "CorrelationData", None)
        if reply and correlation and "Zmesh-Correlation-Id" not in headers:
            headers["Zmesh-Correlation-Id"] = _correlation_text(correlation)
        ids = tuple(getattr(props, "SubscriptionIdentifier", None) or ())
        ack = f"{generation}/{message.mid}/{message.qos}" if message.qos else ""
        try:
            topic = message.topic
        except UnicodeDecodeError:
            self._owner.drop("malformed", "a topic that is not UTF-8")
            if ack:
                self.ack(ack)
            return
        self._owner.arrived(topic, PlainMessage(headers, payload, reply=reply), message.qos, ack, ids)

    def _on_native(self, message: Any, generation: int, payload: bytes) -> None:
        ack = f"{generation}/{message.mid}/{message.qos}" if message.qos else ""
        try:
            headers, body = _unpackb(payload[len(NATIVE):], raw=False, use_list=True)
            topic = message.topic
            if headers.__class__ is not dict or body.__class__ is not bytes or not all(
                    k.__class__ is str and v.__class__ is str for k, v in headers.items()):
                raise ValueError("not [headers, body]")
        except Exception as exc:
            self._owner.drop("malformed", f"a zmesh payload: {type(exc).__name__}")
            if ack:
                self.ack(ack)
            return
        self._owner.arrived(topic, PlainMessage(headers, body), message.qos, ack, ())

    def _on_subscribed(self, mid: int, reasons: Any) -> None:
        if any(getattr(r, "is_failure", False) for r in reasons or ()):
            self._owner.drop("subscribe_refused", str(reasons)[:120])
        self._subscribing.discard(mid)
        if not self._subscribing:
            self._owner.flushed()

    def _on_published(self, mid: int, reason: Any) -> None:
        again = self._publishing.pop(mid, None)
        if getattr(reason, "is_failure", False):
            self._owner.drop("refused_by_broker", str(reason)[:120])
        elif getattr(reason, "value", 0) == NO_MATCHING_SUBSCRIBERS and again is not None:
            if time.monotonic() - again.since < UNROUTED_PATIENCE and self._client is not None:
                self._retrying += 1
                self._loop.call_later(UNROUTED_RETRY, self._again, again)
            else:
                self._owner.drop("no_subscribers", again.topic[:80])
        self._check_confirmed()

    def _again(self, again: _Unconfirmed) -> None:
        self._retrying -= 1
        if self._client is not None:
            self._owner.count("resent_unrouted")
            self.publish(again.topic, again.data, again.qos, again.retain, again.plain_reply, again.since,
                         again.native)
        self._check_confirmed()

    def _check_confirmed(self) -> None:
        self._owner.confirmed_one()
        if not self._publishing and not self._retrying:
            self._confirmed.set()
            self._owner.flushed()

    # -- what it tells ---------------------------------------------------------

    def is_flushed(self) -> bool:
        return not self._subscribing

    def is_confirmed(self) -> bool:
        return not self._publishing and not self._retrying

    @property
    def unconfirmed(self) -> int:
        return len(self._publishing) + self._retrying

    async def confirmed(self, wait: float) -> None:
        """Until the broker has every QoS 1/2 publication, ``wait`` seconds at most."""
        if not self.is_confirmed():
            try:
                await asyncio.wait_for(self._confirmed.wait(), wait)
            except asyncio.TimeoutError:
                pass


def close_sockets(client: Any) -> None:
    """Close what paho leaves open after ``loop_stop()``: the socket pair that
    ``loop_start()`` made to wake its thread (paho 2 closes it only in
    ``reinitialise``; left to the garbage collector, two sockets per client
    stay open until then, and warn)."""
    reset = getattr(client, "_reset_sockets", None)
    if reset is not None:
        with contextlib.suppress(Exception):
            reset()
