"""MQTT: mosquitto 2 (started here on 127.0.0.1) and paho-mqtt 2.x, QoS 0.

* one-way throughput: publish -> one subscriber process on a topic;
* RTT: the client publishes on a request topic and waits for the echo
  server's answer on a reply topic (MQTT has no built-in request/reply);
* fan-out: publish -> 4 subscriber processes.

Clients use paho's usual threaded network loop (``loop_start``). The broker
config lifts ``max_queued_messages`` (default 1000), which otherwise makes
mosquitto drop QoS 0 messages to a subscriber that falls behind.
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

__all__ = ["Mqtt", "peer"]

_CONF = """\
listener {port} {host}
allow_anonymous true
persistence false
max_queued_messages 0
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

    def peer_args(self, workload: str) -> dict[str, Any]:
        assert self._server is not None, "setup() first"
        return {
            "workload": workload,
            "port": self._server.port,
            "topic": f"bench/{workload}/{uuid.uuid4().hex[:8]}",
        }


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
    client.connect(HOST, int(args["port"]), keepalive=60)
    client.loop_start()
    if not connected.wait(min(10.0, ctl.deadline.left())):
        raise TimeoutError("no CONNACK from mosquitto")
    return client


def _subscribe(client: Any, topic: str, ctl: Control) -> None:
    acked = threading.Event()
    client.on_subscribe = lambda c, u, mid, rcs, props: acked.set()
    client.subscribe(topic, qos=0)
    if not acked.wait(min(10.0, ctl.deadline.left())):
        raise TimeoutError("no SUBACK from mosquitto")


def _sink(client: Any, args: dict[str, Any], ctl: Control) -> None:
    counter = SinkCounter(int(args["n"]), int(args["warmup"]), ctl)
    done = threading.Event()

    def on_message(c: Any, u: Any, msg: Any) -> None:
        if counter.feed(decode(msg.payload)["type"]):
            done.set()

    client.on_message = on_message
    _subscribe(client, args["topic"], ctl)
    ctl.ready()
    while not done.wait(0.1) and not ctl.stop.is_set() and not ctl.deadline.expired():
        pass
    counter.report()


def _source(client: Any, args: dict[str, Any], ctl: Control) -> None:
    topic = args["topic"]
    ctl.ready()

    def send(frame: bytes) -> None:
        client.publish(topic, frame, qos=0)

    run_source(send, int(args["n"]), ctl)
    ctl.wait_stop()


def _echo(client: Any, args: dict[str, Any], ctl: Control) -> None:
    req_topic, rep_topic = args["topic"] + "/req", args["topic"] + "/rep"
    seq = 0

    def on_message(c: Any, u: Any, msg: Any) -> None:
        nonlocal seq
        seq += 1
        c.publish(rep_topic, make_reply(msg.payload, seq), qos=0)

    client.on_message = on_message
    _subscribe(client, req_topic, ctl)
    ctl.ready({"req": req_topic, "rep": rep_topic})
    ctl.wait_stop()


def _client(client: Any, args: dict[str, Any], ctl: Control) -> None:
    replies: queue.Queue[bytes] = queue.Queue()
    client.on_message = lambda c, u, msg: replies.put(msg.payload)
    _subscribe(client, args["server"]["rep"], ctl)
    req_topic = args["server"]["req"]

    def call(frame: bytes) -> bytes:
        client.publish(req_topic, frame, qos=0)
        return replies.get(timeout=5.0)

    run_rtt_client(call, int(args["n"]), int(args["warmup"]), ctl)
