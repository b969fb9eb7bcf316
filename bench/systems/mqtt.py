"""MQTT: mosquitto 2 (started here on 127.0.0.1) and paho-mqtt 2.x, QoS 0 (``mqtt``) or 1 (``mqtt-qos1``).

* one-way throughput: publish -> one subscriber process on a topic;
* RTT: the client publishes on a request topic and waits for the echo
  server's answer on a reply topic (MQTT has no built-in request/reply);
* fan-out: publish -> 4 subscriber processes.

Clients use paho's usual threaded network loop (``loop_start``). The broker
config lifts ``max_queued_messages`` (default 1000), which otherwise makes
mosquitto drop QoS 0 messages to a subscriber that falls behind, and sets
TCP_NODELAY on both ends (``set_tcp_nodelay true
``on_socket_open``), as NATS and libzmq do by default.

``mqtt-qos1`` publishes and subscribes with QoS 1 (PUBACK from the broker
to the publisher, and from the subscriber to the broker). Its one-way run
ends when the publisher has every PUBACK (paho's ``on_publish``) or at the
subscriber's n-th message, whichever is later. paho and mosquitto keep their
default in-flight windows (20 unacknowledged QoS 1 messages per direction);
a window of 512 on both (zmesh's credit window) measured no faster here.
"""

from __future__ import annotations

import queue
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any, ClassVar

from ..control import Control
from ..envelope import decode
from ..harness import HOST
from ..roles import SinkCounter, make_reply, run_rtt_client, run_source
from .base import BrokerSystem

__all__ = ["Mqtt", "MqttQos1", "peer"]

_CONF = """\
listener {port} {host}
allow_anonymous true
persistence false
max_queued_messages 0
set_tcp_nodelay true
log_dest stdout
log_type error
log_type warning
"""


class Mqtt(BrokerSystem):
    key: ClassVar[str] = "mqtt"
    label: ClassVar[str] = "MQTT"
    notes: ClassVar[str] = "mosquitto + paho-mqtt 2.x, QoS 0; RTT via request/reply topics"

    client: ClassVar[str] = "paho.mqtt"
    client_pip: ClassVar[str] = "paho-mqtt"
    binary: ClassVar[str] = "mosquitto"
    binary_apt: ClassVar[str] = "mosquitto"

    def server_argv(self, port: int, tmp: Path) -> list[str]:
        conf = tmp / "mosquitto.conf"
        conf.write_text(_CONF.format(host=HOST, port=port))
        return [self._binary, "-c", str(conf)]

    def versions(self) -> dict[str, str]:
        import paho.mqtt

        out = subprocess.run([self._binary, "-h"], capture_output=True, text=True, timeout=10, check=False)
        first = (out.stdout or out.stderr).strip().splitlines()
        return {"paho-mqtt": paho.mqtt.__version__, "mosquitto": first[0] if first else "?"}

    #: QoS of every publish and subscription.
    qos: ClassVar[int] = 0

    def peer_args(self, workload: str) -> dict[str, Any]:
        assert self._server is not None, "setup() first"
        return {
            "workload": workload,
            "port": self._server.port,
            "topic": f"bench/{workload}/{uuid.uuid4().hex[:8]}",
            "qos": self.qos,
        }


class MqttQos1(Mqtt):
    key: ClassVar[str] = "mqtt-qos1"
    label: ClassVar[str] = "MQTT QoS 1"
    notes: ClassVar[str] = (
        "mosquitto + paho-mqtt 2.x, QoS 1 publish and subscribe; one-way ends at the last PUBACK "
        "or the subscriber's n-th message, whichever is later"
    )
    supports: ClassVar[frozenset[str]] = frozenset({"throughput", "rtt"})
    qos: ClassVar[int] = 1


# ---------------------------------------------------------------- peer half


def peer(role: str, args: dict[str, Any], ctl: Control) -> None:
    client = _connect(args, role, ctl)
    try:
        {"sink": _sink, "source": _source, "echo": _echo, "client": _client}[role](client, args, ctl)
    finally:
        client.disconnect()
        client.loop_stop()


def _connect(args: dict[str, Any], role: str, ctl: Control) -> Any:
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

    client = mqtt.Client(
        CallbackAPIVersion.VERSION2,
        client_id=f"bench-{role}-{uuid.uuid4().hex[:8]}",
        protocol=MQTTProtocolVersion.MQTTv311,
    )
    connected = threading.Event()
    client.on_connect = lambda c, u, flags, rc, props: connected.set()
    client.on_socket_open = _nodelay
    client.connect(HOST, int(args["port"]), keepalive=60)
    client.loop_start()
    if not connected.wait(min(10.0, ctl.deadline.left())):
        raise TimeoutError("no CONNACK from mosquitto")
    return client


def _nodelay(client: Any, userdata: Any, sock: Any) -> None:
    """TCP_NODELAY on paho's socket, as on the broker's (``set_tcp_nodelay``): without it, QoS 1's
    small back-to-back packets (PUBLISH, PUBACK) wait for delayed ACKs, ~40 ms each."""
    import socket

    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (OSError, AttributeError):
        pass


def _subscribe(client: Any, topic: str, ctl: Control, qos: int = 0) -> None:
    acked = threading.Event()
    client.on_subscribe = lambda c, u, mid, rcs, props: acked.set()
    client.subscribe(topic, qos=qos)
    if not acked.wait(min(10.0, ctl.deadline.left())):
        raise TimeoutError("no SUBACK from mosquitto")


def _sink(client: Any, args: dict[str, Any], ctl: Control) -> None:
    counter = SinkCounter(int(args["n"]), int(args["warmup"]), ctl)
    done = threading.Event()

    def on_message(c: Any, u: Any, msg: Any) -> None:
        if counter.feed(decode(msg.payload)["type"]):
            done.set()

    client.on_message = on_message
    _subscribe(client, args["topic"], ctl, int(args.get("qos", 0)))
    ctl.ready()
    while not done.wait(0.1) and not ctl.stop.is_set() and not ctl.deadline.expired():
        pass
    counter.report()
    if int(args.get("qos", 0)) >= 1:
        ctl.wait_stop()  # keep acking until STOP: the publisher waits for its PUBACKs


def _source(client: Any, args: dict[str, Any], ctl: Control) -> None:
    topic = args["topic"]
    qos = int(args.get("qos", 0))
    published = 0
    acked = 0
    all_acked = threading.Condition()

    def on_publish(c: Any, u: Any, mid: int, rc: Any, props: Any) -> None:
        nonlocal acked
        with all_acked:
            acked += 1
            if acked >= published:
                all_acked.notify_all()

    if qos >= 1:
        client.on_publish = on_publish
    ctl.ready()

    def send(frame: bytes) -> None:
        client.publish(topic, frame, qos=0)

    def send_counted(frame: bytes) -> None:
        nonlocal published
        with all_acked:
            published += 1
        client.publish(topic, frame, qos=qos)

    def drain() -> None:
        with all_acked:
            while acked < published:
                left = ctl.deadline.left()
                if left <= 0 or ctl.stop.is_set():
                    raise TimeoutError(f"{published - acked} of {published} QoS 1 publishes without PUBACK")
                all_acked.wait(min(0.1, left))

    if qos >= 1:
        run_source(send_counted, int(args["n"]), ctl, drain=drain)
    else:
        run_source(send, int(args["n"]), ctl)
    ctl.wait_stop()


def _echo(client: Any, args: dict[str, Any], ctl: Control) -> None:
    req_topic, rep_topic = args["topic"] + "/req", args["topic"] + "/rep"
    qos = int(args.get("qos", 0))
    seq = 0

    def on_message(c: Any, u: Any, msg: Any) -> None:
        nonlocal seq
        seq += 1
        c.publish(rep_topic, make_reply(msg.payload, seq), qos=qos)

    client.on_message = on_message
    _subscribe(client, req_topic, ctl, qos)
    ctl.ready({"req": req_topic, "rep": rep_topic})
    ctl.wait_stop()


def _client(client: Any, args: dict[str, Any], ctl: Control) -> None:
    replies: queue.Queue[bytes] = queue.Queue()
    client.on_message = lambda c, u, msg: replies.put(msg.payload)
    qos = int(args.get("qos", 0))
    _subscribe(client, args["server"]["rep"], ctl, qos)
    req_topic = args["server"]["req"]

    def call(frame: bytes) -> bytes:
        client.publish(req_topic, frame, qos=qos)
        return replies.get(timeout=5.0)

    run_rtt_client(call, int(args["n"]), int(args["warmup"]), ctl)
