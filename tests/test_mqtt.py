"""The MQTT transport against a real mosquitto: what a plain MQTT 5 client
sees and sends, a node that dies (its last will), a broker that goes away,
QoS 1 across a killed receiver, and what it refuses (the shared semantics are
test_conformance's)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import zmesh
from zmesh.transport.mqtt import MqttTransport

from .brokers import Mosquitto, start_mosquitto
from .helpers import Mesh, rest_of_output, wait_for

pytestmark = pytest.mark.timeout(60)

HERE = Path(__file__).resolve().parent


class PlainClient:
    """paho-mqtt as a client with no zmesh: what it receives, by topic."""

    def __init__(self, url: str) -> None:
        import paho.mqtt.client as mqtt

        host, port = url.rsplit("/", 1)[1].split(":")
        self.got: list[Any] = []
        self._lock = threading.Lock()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
        self.client.on_message = lambda c, u, message: self._got(message)
        self.client.connect(host, int(port))
        self.client.loop_start()

    def _got(self, message: Any) -> None:
        with self._lock:
            self.got.append(message)

    def on(self, topic: str) -> list[Any]:
        with self._lock:
            return [m for m in self.got if m.topic == topic]

    def subscribe(self, topic_filter: str) -> None:
        """Subscribe, and wait for the broker's SUBACK."""
        acked = threading.Event()
        self.client.on_subscribe = lambda c, u, mid, reasons, props: acked.set()
        self.client.subscribe(topic_filter, qos=1)
        assert acked.wait(5), f"no SUBACK for {topic_filter}"

    def publish(self, topic: str, body: bytes, qos: int = 1, **properties: Any) -> None:
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        props = Properties(PacketTypes.PUBLISH)
        for name, value in properties.items():
            setattr(props, name, value)
        self.client.publish(topic, body, qos=qos, properties=props if properties else None).wait_for_publish(5)

    def close(self) -> None:
        from zmesh.transport._mqtt_client import close_sockets

        self.client.disconnect()
        self.client.loop_stop()
        close_sockets(self.client)


async def test_a_plain_mqtt_client_requests_sends_and_hears_broadcasts(mqtt_url: str) -> None:
    async with Mesh("mqtt") as m:
        node = await m.node()
        echo, news = node.agent("echo"), node.agent("news")
        got: list[zmesh.Message] = []
        echo.add_handler("math.add", lambda msg: msg.payload["x"] + msg.payload["y"])
        echo.add_handler("note", got.append, inline=True)
        await m.converged()
        client = PlainClient(mqtt_url)
        try:
            client.subscribe("answers/#")
            client.subscribe(f"zmesh/{m.name}/pub/news/#")
            # a request, as `mosquitto_rr -t zmesh/MESH/agent/echo/math/add -e answers/1 -m '{"x": 1, "y": 2}'`
            client.publish(f"zmesh/{m.name}/agent/echo/math/add", b'{"x": 1, "y": 2}', ResponseTopic="answers/1",
                           CorrelationData=b"\x00req-1")
            await wait_for(lambda: client.on("answers/1"), 10, "the reply")
            reply = client.on("answers/1")[0]
            assert json.loads(reply.payload) == 3
            assert reply.properties.CorrelationData == b"\x00req-1"  # given back as it came
            assert dict(reply.properties.UserProperty)["Zmesh-Type"] == "result"
            # a one-way message, text that is not JSON: the handler gets the bytes
            client.publish(f"zmesh/{m.name}/agent/echo/note", b"plain text")
            await wait_for(lambda: got)
            assert (got[0].payload, got[0].topic, got[0].sender, got[0].type) == (b"plain text", "note", "", "notify")
            # an error reaches the plain client as a status and the error's JSON
            client.publish(f"zmesh/{m.name}/agent/echo/math/add", b'{"x": 1}', ResponseTopic="answers/2")
            await wait_for(lambda: client.on("answers/2"), 10, "the error")
            bad = client.on("answers/2")[0]
            assert dict(bad.properties.UserProperty)["Zmesh-Status"] == "error"
            assert json.loads(bad.payload)["type"] == "KeyError"
            assert await news.broadcast("news.today", {"headline": "hi"}) == 0  # no zmesh subscriber
            await wait_for(lambda: client.on(f"zmesh/{m.name}/pub/news/today"), 10, "the broadcast")
            heard = client.on(f"zmesh/{m.name}/pub/news/today")[0]
            assert json.loads(heard.payload) == {"headline": "hi"}
            assert heard.properties.ContentType == "application/json"
        finally:
            client.close()


async def test_what_a_plain_client_sends_badly_is_dropped_and_counted(mqtt_url: str) -> None:
    async with Mesh("mqtt") as m:
        node = await m.node()
        got: list[zmesh.Message] = []
        node.agent("echo").add_handler("note", got.append, inline=True)
        await m.converged()
        client = PlainClient(mqtt_url)
        try:
            topic = f"zmesh/{m.name}/agent/echo/note"
            client.publish(topic, b"{not json", ContentType="application/json")
            client.publish(topic, b"1", UserProperty=[("Zmesh-Priority", "urgent")])
            client.publish(topic, b"1", UserProperty=[("Zmesh-Qos", "7")])
            client.publish(topic, b"1", UserProperty=[("Zmesh-Type", "shout")])
            client.publish(f"zmesh/{m.name}/agent/echo", b"1")  # no topic at all
            client.publish(topic, b'"fine"')
            await wait_for(lambda: got, 10)
            await wait_for(lambda: node.stats()["dropped"].get("malformed", 0) == 4, 10)
            assert [g.payload for g in got] == ["fine"]
        finally:
            client.close()


async def test_what_a_full_inbox_refuses_is_published_again_and_handled(mqtt_url: str) -> None:
    async with Mesh("mqtt") as m:
        sender, receiver = await m.node(), await m.node()
        tx = sender.agent("tx")
        gate = asyncio.Event()
        got: list[int] = []

        async def job(msg: zmesh.Message) -> None:
            await gate.wait()
            got.append(msg.payload["n"])

        receiver.agent("rx", concurrency=1, inbox_size=2).add_handler("job", job)
        await m.converged()
        for n in range(12):
            await tx.send("rx", "job", {"n": n}, qos=1)
        await wait_for(lambda: receiver.stats().get("given_back", 0) > 0, 10, "a full inbox to give one back")
        gate.set()
        await wait_for(lambda: len(set(got)) == 12, 30, "all twelve handled")
        assert receiver.dead_letters.total == 0  # nothing dead-lettered "busy": published again instead
        assert len(got) == 12


async def test_a_ttl_is_the_brokers_message_expiry_too(mqtt_url: str) -> None:
    async with Mesh("mqtt") as m:
        node = await m.node()
        news = node.agent("news")
        await m.converged()
        client = PlainClient(mqtt_url)
        try:
            client.subscribe(f"zmesh/{m.name}/pub/#")
            await news.broadcast("alerts.now", "soon stale", ttl=7.5)
            await wait_for(lambda: client.on(f"zmesh/{m.name}/pub/alerts/now"), 10, "the broadcast")
            heard = client.on(f"zmesh/{m.name}/pub/alerts/now")[0]
            assert heard.properties.MessageExpiryInterval in (7, 8)  # what is left of it, in whole seconds
            assert dict(heard.properties.UserProperty)["Zmesh-Ttl"] == "7.5"
        finally:
            client.close()


def _child(url: str, mesh: str, name: str, block_at: int = -1) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, str(HERE / "_mqtt_child.py"), url, mesh, name, str(block_at)],
                             stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    return child


def _stop(child: subprocess.Popen[str] | None) -> list[int]:
    if child is None:
        return []
    if child.poll() is None:
        child.kill()
    return [int(line) for line in rest_of_output(child).split()]


@pytest.mark.multiprocess
async def test_a_killed_node_is_gone_by_its_last_will_and_its_request_fails(mqtt_url: str) -> None:
    async with Mesh("mqtt") as m:
        node = await m.node()
        me = node.agent("me")
        child = await asyncio.get_running_loop().run_in_executor(None, _child, mqtt_url, m.name, "victim")
        try:
            await node.wait_for_agents("rx", timeout=10)
            assert (await me.request("rx", "echo", 5, timeout=5)).payload == 5
            pending = asyncio.ensure_future(me.request("rx", "job", {"n": -1}, timeout=30))  # never answered
            await asyncio.sleep(0.2)
            child.kill()
            child.wait(10)
            # The broker misses its keep-alive (1.5 x 2 s), sends its will: its record is emptied.
            await wait_for(lambda: node.registry.node_of("rx") is None, 10, "the will to empty its record")
            with pytest.raises(zmesh.PeerLost):
                await pending
        finally:
            _stop(child)


@pytest.mark.multiprocess
async def test_qos_1_messages_wait_at_the_broker_for_a_node_that_was_away(mqtt_url: str) -> None:
    """The node's session outlives a lost connection: what arrives for it while it is away
    (its process stopped past the keep-alive) comes once it is back, as MQTT QoS 1 does."""
    async with Mesh("mqtt") as m:
        node = await m.node()
        loop = asyncio.get_running_loop()
        child = await loop.run_in_executor(None, _child, mqtt_url, m.name, "worker")
        client = PlainClient(mqtt_url)
        try:
            await node.wait_for_agents("rx", timeout=10)
            child.send_signal(signal.SIGSTOP)
            await wait_for(lambda: node.registry.node_of("rx") is None, 10, "the broker to give up on it")
            for n in range(10):  # nobody hosts rx now, as far as the mesh knows: a plain client sends
                client.publish(f"zmesh/{m.name}/agent/rx/job", json.dumps({"n": n}).encode(), qos=1)
            child.send_signal(signal.SIGCONT)
            assert child.stdout is not None
            got = [int(await asyncio.wait_for(loop.run_in_executor(None, child.stdout.readline), 20))
                   for _ in range(10)]
            assert sorted(got) == list(range(10))
            await node.wait_for_agents("rx", timeout=10)  # and it is back in the registry
        finally:
            client.close()
            if child.poll() is None:
                child.send_signal(signal.SIGCONT)
            _stop(child)


@pytest.mark.multiprocess
async def test_a_replacement_under_the_same_name_takes_over_what_a_killed_node_had_not_handled(
        mqtt_url: str) -> None:
    """Its session at the broker kept what was delivered and not acknowledged, and what came
    after: the new process, with the same node name, resumes it and handles all of it."""
    async with Mesh("mqtt") as m:
        node = await m.node()
        tx = node.agent("tx")
        loop = asyncio.get_running_loop()
        first = await loop.run_in_executor(None, _child, mqtt_url, m.name, "worker", 5)  # stuck at 5
        second = None
        try:
            await node.wait_for_agents("rx", timeout=10)
            for n in range(30):
                await tx.send("rx", "job", {"n": n}, qos=1)
            assert await node.wait_acked(10)
            assert first.stdout is not None
            printed = [int(await asyncio.wait_for(loop.run_in_executor(None, first.stdout.readline), 20))
                       for _ in range(5)]
            first.kill()
            handled_first = printed + _stop(first)
            assert handled_first == [0, 1, 2, 3, 4]
            second = await loop.run_in_executor(None, _child, mqtt_url, m.name, "worker", -1)  # the same name
            assert second.stdout is not None
            rest: list[int] = []
            while not set(range(5, 30)) <= set(rest):
                rest.append(int(await asyncio.wait_for(loop.run_in_executor(None, second.stdout.readline), 20)))
            # At least once: one handled just before the kill, its ack still on its way, may come again.
            assert set(rest) - set(range(5, 30)) <= set(handled_first)
            assert second.poll() is None and node.stats()["dropped"].get("stale_subscription", 0) == 0
        finally:
            _stop(first)
            _stop(second)


async def test_a_subscription_a_node_of_the_same_name_left_is_dropped(mqtt_url: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The first incarnation hosted ``old``; the second does not: what comes for ``old`` on
    the subscription the session kept is acknowledged, counted, and the subscription dropped."""
    from zmesh.transport import mqtt as mqtt_module

    monkeypatch.setattr(mqtt_module, "ADOPT_WAIT", 0.5)
    name = f"same-{os.getpid()}"
    async with Mesh("mqtt") as m:
        sender = await m.node()
        first = await m.node(name=name)
        first.agent("old")
        await m.converged()
        client = PlainClient(mqtt_url)
        try:
            await first.close()  # its session stays at the broker, subscribed to old's topics
            second = await m.node(name=name)
            client.publish(f"zmesh/{m.name}/agent/old/job", b"1", qos=1)  # to the session, as nobody hosts old
            await wait_for(lambda: second.stats()["dropped"].get("stale_subscription", 0) == 1, 10,
                           "the stale subscription noticed")
            assert await second.settled(10)  # the broker has the unsubscribe
            client.publish(f"zmesh/{m.name}/agent/old/job", b"2", qos=1)
            second.agent("probe").add_handler("ping", lambda msg: "pong", inline=True)
            await m.converged()
            assert (await sender.agent("s").request("probe", "ping", timeout=5)).payload == "pong"
            assert second.stats()["dropped"]["stale_subscription"] == 1  # unsubscribed: the second went nowhere
        finally:
            client.close()


async def test_nodes_carry_on_after_the_broker_restarts(tmp_path: Path) -> None:
    """A broker that keeps its sessions (mosquitto's ``persistence``) across a restart: the
    nodes reconnect by themselves, and the QoS 1 messages on their way arrive."""
    server = start_mosquitto(tmp_path, persistent=True)
    try:
        async with zmesh.Node("m", transport=server.url) as n1, zmesh.Node("m", transport=server.url) as n2:
            a = n1.agent("a")
            got: list[int] = []
            b = n2.agent("b")
            b.add_handler("echo", lambda msg: msg.payload, inline=True)
            b.add_handler("job", lambda msg: got.append(msg.payload), inline=True)
            await n1.wait_for_agents("b", timeout=10)
            assert (await a.request("b", "echo", 1, timeout=5)).payload == 1
            loop = asyncio.get_running_loop()
            for n in range(50):
                await a.send("b", "job", n, qos=1)
            # At once, with some of them on their way: the broker saves b's session (its
            # subscriptions, what waits for it); a's client sends again what was not confirmed.
            # (As it shuts down, mosquitto sends every node's last will: the registry empties
            # until the nodes are back and put their records again.)
            server = await loop.run_in_executor(None, server.restart)

            async def answered() -> Any:
                while True:  # requests sent while the clients reconnect may be lost: QoS 0
                    try:
                        return (await a.request("b", "echo", 2, timeout=1)).payload
                    except zmesh.Timeout:
                        continue
                    except (zmesh.AgentNotRegistered, zmesh.PeerLost):  # the registry empties meanwhile
                        await n1.wait_for_agents("b", timeout=20)

            assert await asyncio.wait_for(answered(), 30) == 2
            assert n1.peers == [n2.id]
            await wait_for(lambda: sorted(set(got)) == list(range(50)), 20, "what was on its way")
            assert n1.stats()["transport"]["connects"] >= 2
    finally:
        server.stop()


async def test_no_broker_is_a_transport_error_naming_the_url(tmp_path: Path) -> None:
    server = start_mosquitto(tmp_path)
    url = server.url
    server.stop()  # nothing listens there now
    with pytest.raises(zmesh.TransportError, match=url.replace(".", r"\.") + ".*mosquitto"):
        async with zmesh.Node("m", transport=MqttTransport(url, connect_wait=1)):
            pass


def test_without_paho_the_error_names_the_pip_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "paho.mqtt.client", None)  # as if it were not installed
    with pytest.raises(zmesh.TransportError, match=r"pip install 'zmesh-agents\[mqtt\]'"):
        zmesh.Node("m", transport="mqtt://127.0.0.1:1883")


def test_urls_and_options_are_checked() -> None:
    pytest.importorskip("paho.mqtt.client")
    transport = MqttTransport("mqtt://user:s3cret@127.0.0.1:1884")
    assert (transport.username, transport.password, transport.port) == ("user", "s3cret", 1884)
    assert "s3cret" not in transport.router_endpoint
    assert MqttTransport("mqtts://127.0.0.1").port == 8883 and MqttTransport("mqtts://127.0.0.1").tls
    for url in ("tcp://127.0.0.1:1883", "mqtt://127.0.0.1:99999", "mqtt://:1883"):
        with pytest.raises(zmesh.TransportError):
            MqttTransport(url)
    for bad in ({"keepalive": 0}, {"session_expiry": -1}, {"max_queued": 0}, {"max_in_flight": 1.5},
                {"connect_wait": 0}):
        with pytest.raises(ValueError):
            MqttTransport("mqtt://127.0.0.1:1883", **bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["lab", "a/b", "x+y#z", "100%", "ünï:côde", "%2F", "$SYS"])
def test_names_on_the_broker_are_one_level_and_come_back(name: str) -> None:
    from zmesh.transport._mqtt_names import Topics, level, unlevel

    one = level(name)
    assert not any(c in one for c in "/+#") and unlevel(one) == name
    topics = Topics.of(name)
    assert topics.parse(topics.agent("x", "a.b")) == ("agent", "x", "a.b")
    assert topics.parse(topics.agent(name, f"w.{name}")) == ("agent", name, f"w.{name}")


def test_zmesh_transport_names_mqtt(mqtt_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZMESH_TRANSPORT", mqtt_url)
    assert zmesh.Node("m").transport.name == "mqtt"


async def test_one_transport_object_serves_one_node(mqtt_url: str) -> None:
    shared = MqttTransport(mqtt_url)
    async with zmesh.Node("m", transport=shared):
        with pytest.raises(zmesh.TransportError, match="give each node its own"):
            async with zmesh.Node("m", transport=shared):
                pass


_ = Mosquitto


@pytest.mark.parametrize("plain_direct", [False, True])
async def test_messages_between_nodes_are_packed_unless_plain_direct(mqtt_url: str, plain_direct: bool) -> None:
    from zmesh.transport._mqtt_client import NATIVE

    async with Mesh("mqtt") as m:
        node = await m.node(transport=MqttTransport(mqtt_url, plain_direct=plain_direct))
        got: list[zmesh.Message] = []
        node.agent("rx").add_handler("job", got.append, inline=True)
        await m.converged()
        client = PlainClient(mqtt_url)
        try:
            client.subscribe(f"zmesh/{m.name}/agent/rx/#")
            await node.agent("tx").send("rx", "job", {"n": 1})
            await wait_for(lambda: got and client.on(f"zmesh/{m.name}/agent/rx/job"), 10)
            seen = client.on(f"zmesh/{m.name}/agent/rx/job")[0]
            assert got[0].payload == {"n": 1}
            assert seen.payload.startswith(NATIVE) is not plain_direct
            if plain_direct:
                assert json.loads(seen.payload) == {"n": 1} and dict(seen.properties.UserProperty)["Zmesh-Sender"] == "tx"
        finally:
            client.close()


async def test_the_nodes_connection_sends_without_delay(mqtt_url: str) -> None:
    """TCP_NODELAY: without it (and the broker's set_tcp_nodelay) each QoS 1 request
    waited out Nagle and a delayed ACK, ~44 ms (docs/transports.md)."""
    import socket

    async with zmesh.Node("m", transport=MqttTransport(mqtt_url)) as node:
        sock = node.transport._link._client.socket()  # type: ignore[attr-defined]
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


async def test_a_closed_node_leaves_no_paho_socket_open(mqtt_url: str) -> None:
    """paho's loop_start() makes a socket pair that its loop_stop() leaves open."""
    async with zmesh.Node("m", transport=MqttTransport(mqtt_url)) as node:
        client = node.transport._link._client  # type: ignore[attr-defined]
        assert client._sockpairR is not None
    assert client._sockpairR is None and client._sockpairW is None
