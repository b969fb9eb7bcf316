"""The Redis transport against a real redis-server: what a plain Redis client
(redis-py with no zmesh, and redis-cli) sees and sends, QoS 1/2 on streams
(held until the handler ran, given back, claimed from a node that died, kept
across a server restart), a node that dies, and what it refuses (the shared
semantics are test_conformance's)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import zmesh
from zmesh.transport.redis import RedisTransport

from .brokers import start_redis, until_queued
from .helpers import Mesh, handled_by, start_qos_child, wait_for

pytestmark = pytest.mark.timeout(90)

HERE = Path(__file__).resolve().parent


def plain_client(url: str) -> Any:
    """redis-py's own synchronous client: no zmesh in it."""
    import redis

    return redis.Redis.from_url(url)


def subscribed(client: Any, *channels: str, patterns: tuple[str, ...] = ()) -> Any:
    """A plain pub/sub connection, once the server confirmed its subscriptions."""
    pubsub = client.pubsub()
    if channels:
        pubsub.subscribe(*channels)
    if patterns:
        pubsub.psubscribe(*patterns)
    for _ in range(len(channels) + len(patterns)):
        assert pubsub.get_message(timeout=5)["type"] in ("subscribe", "psubscribe")
    return pubsub


async def next_message(pubsub: Any, within: float = 10.0) -> dict[str, Any]:
    """The next message ``pubsub`` receives (read in a thread: the nodes run on this loop)."""
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        message = await loop.run_in_executor(None, lambda: pubsub.get_message(timeout=0.2))
        if message and message["type"] in ("message", "pmessage"):
            return dict(message)
    raise AssertionError(f"nothing arrived within {within} s")


async def test_a_plain_redis_client_requests_sends_and_hears_broadcasts(redis_url: str) -> None:
    async with Mesh("redis") as m:
        node = await m.node()
        echo, news = node.agent("echo"), node.agent("news")
        got: list[zmesh.Message] = []
        echo.add_handler("math.add", lambda msg: msg.payload["x"] + msg.payload["y"])
        echo.add_handler("note", got.append, inline=True)
        await m.converged()
        with plain_client(redis_url) as client:
            answers = subscribed(client, "answers.1", "answers.2", patterns=(f"zmesh:{m.name}:pub:news.*",))
            # a request: the seed's envelope with a reply channel
            request = {"header": {"type": "query", "topic": "math.add", "reply_to": "redis:answers.1",
                                  "correlation_id": "req-1"}, "payload": {"x": 1, "y": 2}}
            assert client.publish(f"zmesh:{m.name}:agent:echo", json.dumps(request)) == 1
            reply = json.loads((await next_message(answers))["data"])
            assert reply["payload"] == 3
            assert reply["header"]["type"] == "result" and reply["header"]["correlation_id"] == "req-1"
            assert reply["header"]["sender"] == "echo" and reply["header"]["status"] == "ok"
            # a bare payload is a one-way message on the topic the envelope would name ("" here)
            client.publish(f"zmesh:{m.name}:agent:echo", json.dumps({"header": {"topic": "note"},
                                                                        "payload": "plain"}))
            await wait_for(lambda: got)
            assert (got[0].payload, got[0].topic, got[0].sender, got[0].type) == ("plain", "note", "", "notify")
            # an error reaches the plain client as a status and the error's JSON
            bad = {"header": {"topic": "math.add", "reply_to": "redis:answers.2"}, "payload": {"x": 1}}
            client.publish(f"zmesh:{m.name}:agent:echo", json.dumps(bad))
            error = json.loads((await next_message(answers))["data"])
            assert error["header"]["status"] == "error" and error["payload"]["type"] == "KeyError"
            assert await news.broadcast("news.today", {"headline": "hi"}, ttl=7.5) == 0  # no zmesh subscriber
            heard = await next_message(answers)
            assert heard["channel"] == f"zmesh:{m.name}:pub:news.today".encode()
            envelope = json.loads(heard["data"])
            assert envelope["payload"] == {"headline": "hi"}
            assert (envelope["header"]["topic"], envelope["header"]["sender"], envelope["header"]["ttl"]) == (
                "news.today", "news", 7.5)
            assert zmesh.Message.from_envelope(envelope).payload == {"headline": "hi"}  # the seed's envelope
            answers.close()


async def test_the_redis_cli_lines_of_the_docs_work(redis_url: str) -> None:
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.skip("redis-cli is not installed: apt-get install redis-tools")
    port = redis_url.rsplit(":", 1)[1]
    async with Mesh("redis") as m:
        node = await m.node()
        got: list[zmesh.Message] = []
        node.agent("worker").add_handler("jobs.run", got.append, inline=True)
        node.agent("echo").add_handler("note", got.append, inline=True)
        await m.converged()

        def run(*args: str) -> str:
            return subprocess.run([cli, "-h", "127.0.0.1", "-p", port, *args], capture_output=True, text=True,
                                  timeout=10, check=True).stdout.strip()

        assert run("PUBLISH", f"zmesh:{m.name}:agent:echo",
                   '{"header": {"topic": "note"}, "payload": {"hello": 1}}') == "1"
        run("XADD", f"zmesh:{m.name}:q:worker", "*", "Zmesh-Topic", "jobs.run", "body", '{"job": 7}')
        await wait_for(lambda: len(got) == 2, 10, "both")
        assert sorted((g.topic, json.dumps(g.payload)) for g in got) == [
            ("jobs.run", '{"job": 7}'), ("note", '{"hello": 1}')]
        assert [g.qos for g in got if g.topic == "jobs.run"] == [1]
        await until_queued("redis", redis_url, m.name, 0, 10, "the plain client's job was not acknowledged")
        assert run("EXISTS", f"zmesh:{m.name}:record:{node.id}") == "1"


async def test_what_a_plain_client_sends_badly_is_dropped_and_counted(redis_url: str) -> None:
    async with Mesh("redis") as m:
        node = await m.node()
        got: list[zmesh.Message] = []
        node.agent("echo").add_handler("note", got.append, inline=True)
        await m.converged()
        channel = f"zmesh:{m.name}:agent:echo"
        with plain_client(redis_url) as client:
            client.publish(channel, b"\x00zmesh/1\nnot msgpack")
            client.publish(channel, json.dumps({"header": {"topic": "note", "priority": "urgent"}, "payload": 1}))
            client.publish(channel, json.dumps({"header": {"topic": "note", "qos": 7}, "payload": 1}))
            client.publish(channel, json.dumps({"header": {"topic": "note", "type": "shout"}, "payload": 1}))
            client.publish(f"zmesh:{m.name}:records", b"junk")
            client.xadd(f"zmesh:{m.name}:q:echo", {"Zmesh-Topic": "note", "Zmesh-Priority": "high", "body": "1"})
            client.publish(channel, json.dumps({"header": {"topic": "note"}, "payload": "fine"}))
        await wait_for(lambda: got, 10)
        await wait_for(lambda: node.stats()["dropped"].get("malformed", 0) == 6, 10)
        assert [g.payload for g in got] == ["fine"]
        await until_queued("redis", redis_url, m.name, 0, 10, "a malformed entry stays in the stream")


async def test_a_handler_slower_than_ack_wait_keeps_its_message(redis_url: str) -> None:
    """A message still being handled is claimed again by its own node every
    heartbeat, so the server never counts it idle and nobody runs it twice."""
    async with Mesh("redis") as m:
        sender = await m.node()
        receiver = await m.node(transport=RedisTransport(redis_url, ack_wait=0.5, heartbeat=0.2, expiry=4.0))
        tx = sender.agent("tx")
        gate, started_handling = asyncio.Event(), asyncio.Event()
        got: list[int] = []

        async def job(msg: zmesh.Message) -> None:
            started_handling.set()
            await gate.wait()
            got.append(msg.payload["n"])

        receiver.agent("rx").add_handler("job", job)
        await m.converged()
        await tx.send("rx", "job", {"n": 1}, qos=1)
        await asyncio.wait_for(started_handling.wait(), 10)
        started = time.monotonic()
        await wait_for(lambda: time.monotonic() - started > 2.0, 5, "four times ack_wait")
        gate.set()
        await wait_for(lambda: got, 10)
        await until_queued("redis", redis_url, m.name, 0, 10, "not acknowledged")
        transport_stats = receiver.stats()["transport"]
        assert got == [1]
        assert transport_stats.get("claimed", 0) == 0, transport_stats
        assert receiver.stats().get("redelivered_while_held", 0) == 0


@pytest.mark.multiprocess
async def test_a_killed_node_fails_requests_at_once_then_leaves(redis_url: str) -> None:
    async with Mesh("redis") as m:
        node = await m.node()
        me = node.agent("me")
        child = await asyncio.get_running_loop().run_in_executor(None, start_qos_child, redis_url, m.name, -1)
        try:
            await node.wait_for_agents("rx", timeout=10)
            child.kill()
            handled_by(child)
            started = time.monotonic()
            with pytest.raises(zmesh.AgentNotRegistered, match="nobody received it"):
                await me.request("rx", "job", {"n": 1}, timeout=20)
            assert time.monotonic() - started < 5  # Redis said nobody received it: no waiting for a timeout
            await wait_for(lambda: "rx" not in node.registry.agents(), 40, "its record to expire")
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(10)


async def test_while_the_server_is_away_qos_0_senders_wait_at_the_bound(tmp_path: Path) -> None:
    server = start_redis(tmp_path)
    try:
        transport = RedisTransport(server.url, expiry=60.0, max_queued=20)
        async with zmesh.Node("m", transport=transport) as n1:
            tx = n1.agent("tx")
            n1.agent("rx").add_handler("job", lambda msg: None, inline=True)
            await n1.settled()
            server.stop()
            sent = 0
            with pytest.raises(zmesh.Backpressure):
                for n in range(200):
                    await tx.send("rx", "job", {"n": n}, timeout=0.05)  # QoS 0
                    sent += 1
            # one pipeline failed as the server went (dropped, counted: it may have reached it);
            # then 3/4 of max_queued waited for the server, and the next send said so
            assert sent <= 20 + 15, sent
            assert n1.stats()["dropped"].get("send_failed", 0) <= sent - 15
    finally:
        server.stop()


async def test_no_server_is_a_transport_error_naming_the_url(tmp_path: Path) -> None:
    server = start_redis(tmp_path)
    url = server.url
    server.stop()  # nothing listens there now
    with pytest.raises(zmesh.TransportError, match="cannot reach the Redis server at " + url.replace(".", r"\.")):
        async with zmesh.Node("m", transport=RedisTransport(url, connect_wait=0.5)):
            pass


async def test_a_wrong_password_is_refused_at_once(redis_url: str) -> None:
    with plain_client(redis_url) as client:
        client.acl_setuser("zmesh-test", enabled=True, passwords=["+right"], commands=["+@all"], keys=["*"],
                           channels=["*"])
    try:
        url = redis_url.replace("redis://", "redis://zmesh-test:wrong@")
        started = time.monotonic()
        with pytest.raises(zmesh.TransportError, match="refused") as caught:
            async with zmesh.Node("m", transport=RedisTransport(url, connect_wait=5)):
                pass
        assert time.monotonic() - started < 3 and "wrong" not in str(caught.value)
        good = redis_url.replace("redis://", "redis://zmesh-test:right@")
        async with zmesh.Node("m", transport=good) as node:
            assert node.transport.name == "redis" and "right" not in node.endpoint
    finally:
        with plain_client(redis_url) as client:
            client.acl_deluser("zmesh-test")


def test_without_redis_py_the_error_names_the_pip_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis.asyncio", None)  # as if it were not installed
    with pytest.raises(zmesh.TransportError, match=r"pip install 'zmesh-agents\[redis\]'"):
        zmesh.Node("m", transport="redis://127.0.0.1:6379")


def test_urls_and_options_are_checked() -> None:
    pytest.importorskip("redis")
    assert "s3cret" not in RedisTransport("redis://user:s3cret@127.0.0.1:6380").router_endpoint
    for url in ("tcp://127.0.0.1:6379", "127.0.0.1:6379"):
        with pytest.raises(zmesh.TransportError):
            RedisTransport(url)
    for bad in ({"heartbeat": 0}, {"expiry": 0.5}, {"ack_wait": 0}, {"max_age": 0.5}, {"max_unconfirmed": 0},
                {"max_in_flight": 1.5}, {"max_queued": 0}):
        with pytest.raises(ValueError):
            RedisTransport("redis://127.0.0.1:6379", **bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("topic", ["news.today", "a[1].b", "w?.x", "back\\slash.y"])
async def test_a_pattern_matches_topics_with_glob_characters_literally(redis_url: str, topic: str) -> None:
    async with Mesh("redis") as m:
        sender, receiver = await m.node(), await m.node()
        got: list[str] = []
        first = topic.split(".")[0]
        await receiver.agent("rx").subscribe(f"{first}.*", lambda msg: got.append(msg.topic), inline=True)
        await m.converged()
        news = sender.agent("news")
        await news.broadcast(f"{first[:-1] or 'q'}x.other", 0)  # near, but another first word
        assert await news.broadcast(topic, 1) == 1
        await wait_for(lambda: got, 10)
        assert got == [topic]


def test_zmesh_transport_names_redis(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZMESH_TRANSPORT", redis_url)
    assert zmesh.Node("m").transport.name == "redis"


async def test_one_transport_object_serves_one_node(redis_url: str) -> None:
    shared = RedisTransport(redis_url)
    async with zmesh.Node("m", transport=shared):
        with pytest.raises(zmesh.TransportError, match="give each node its own"):
            async with zmesh.Node("m", transport=shared):
                pass


async def test_messages_between_nodes_are_packed(redis_url: str) -> None:
    from zmesh.transport._redis_wire import NATIVE

    async with Mesh("redis") as m:
        node = await m.node()
        got: list[zmesh.Message] = []
        node.agent("rx").add_handler("job", got.append, inline=True)
        await m.converged()
        with plain_client(redis_url) as client:
            watch = subscribed(client, f"zmesh:{m.name}:agent:rx")
            await node.agent("tx").send("rx", "job", {"n": 1})
            seen = await next_message(watch)
            await wait_for(lambda: got)
            assert got[0].payload == {"n": 1} and seen["data"].startswith(NATIVE)
            watch.close()
