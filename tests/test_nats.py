"""The NATS transport against a real nats-server: what a plain NATS client
sees and sends, a node that dies, a server that is missing a feature or
goes away, and what it refuses (the shared semantics are test_conformance's)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import zmesh
from zmesh.transport.nats import NatsTransport

from .brokers import NatsServer
from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(60)

HERE = Path(__file__).resolve().parent


@pytest.fixture
def nats(nats_url: str) -> str:
    return nats_url


async def plain_client(url: str) -> Any:
    import nats as nats_py

    return await nats_py.connect(url)


async def test_a_plain_nats_client_requests_sends_and_hears_broadcasts(nats: str) -> None:
    async with Mesh("nats") as m:
        node = await m.node()
        echo, news = node.agent("echo"), node.agent("news")
        got: list[zmesh.Message] = []
        echo.add_handler("math.add", lambda msg: msg.payload["x"] + msg.payload["y"])
        echo.add_handler("note", got.append, inline=True)
        await m.converged()
        client = await plain_client(nats)
        try:
            heard: list[Any] = []

            async def on_news(msg: Any) -> None:
                heard.append(msg)

            await client.subscribe(f"zmesh.{m.name}.pub.news.>", cb=on_news)
            await client.flush()
            # a request, as `nats req zmesh.MESH.agent.echo.math.add '{"x": 1, "y": 2}'` makes it
            reply = await client.request(f"zmesh.{m.name}.agent.echo.math.add", b'{"x": 1, "y": 2}', timeout=5)
            assert json.loads(reply.data) == 3
            assert reply.headers["Zmesh-Sender"] == "echo" and reply.headers["Zmesh-Type"] == "result"
            # a one-way message, text that is not JSON: the handler gets the bytes
            await client.publish(f"zmesh.{m.name}.agent.echo.note", b"plain text")
            await wait_for(lambda: got)
            assert (got[0].payload, got[0].topic, got[0].sender, got[0].type) == (b"plain text", "note", "", "notify")
            # an error reaches the plain client as a status and the error's JSON
            bad = await client.request(f"zmesh.{m.name}.agent.echo.math.add", b'{"x": 1}', timeout=5)
            assert bad.headers["Zmesh-Status"] == "error" and json.loads(bad.data)["type"] == "KeyError"
            assert await news.broadcast("news.today", {"headline": "hi"}) == 0  # no zmesh subscriber
            await wait_for(lambda: heard)
            assert json.loads(heard[0].data) == {"headline": "hi"}
            assert heard[0].headers["Zmesh-Sender"] == "news"
            assert heard[0].headers["Content-Type"] == "application/json"
        finally:
            await client.close()


async def test_what_a_plain_client_sends_badly_is_dropped_and_counted(nats: str) -> None:
    async with Mesh("nats") as m:
        node = await m.node()
        got: list[zmesh.Message] = []
        node.agent("echo").add_handler("note", got.append, inline=True)
        await m.converged()
        client = await plain_client(nats)
        try:
            subject = f"zmesh.{m.name}.agent.echo.note"
            await client.publish(subject, b"{not json", headers={"Content-Type": "application/json"})
            await client.publish(subject, b"1", headers={"Zmesh-Priority": "urgent"})
            await client.publish(subject, b"1", headers={"Zmesh-Qos": "7"})
            await client.publish(subject, b"1", headers={"Zmesh-Type": "shout"})
            await client.publish(subject, b'"fine"')
            await wait_for(lambda: got)
            await wait_for(lambda: node.stats()["dropped"].get("malformed", 0) == 4)
            assert [g.payload for g in got] == ["fine"]
        finally:
            await client.close()


def _child(url: str, mesh: str) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, str(HERE / "_nats_child.py"), url, mesh], stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    return child


@pytest.mark.multiprocess
async def test_a_killed_node_answers_requests_at_once_with_agent_not_registered_then_leaves(nats: str) -> None:
    async with Mesh("nats") as m:
        # Expiry well after the kill, however late the child's last renewal was on a loaded machine:
        # the no-responders answer must come first.
        node = await m.node(transport=NatsTransport(nats, expiry=8.0))
        me = node.agent("me")
        child = await asyncio.get_running_loop().run_in_executor(None, _child, nats, m.name)
        try:
            await node.wait_for_agents("x", timeout=10)
            assert (await me.request("x", "echo", 5, timeout=5)).payload == 5
            child.kill()
            child.wait(10)
            started = time.monotonic()
            with pytest.raises(zmesh.AgentNotRegistered, match="no responders"):
                await me.request("x", "echo", 6, timeout=10)
            assert time.monotonic() - started < 2.0  # NATS said so at once, long before the record expired
            assert node.registry.node_of("x") is not None  # the registry has not noticed yet
            await wait_for(lambda: node.registry.node_of("x") is None, timeout=20, what="the dead node to expire")
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(10)
            assert child.stdout is not None
            child.stdout.close()


async def test_an_agent_that_moves_to_another_node_is_reached_there_at_once(nats: str) -> None:
    # Its old node still listens on its subject for a while (LINGER) and gets what is sent to it too:
    # it must leave the answer to the new node, not race it with "not registered here".
    async with Mesh("nats") as m:
        old, new, asker = await m.node(), await m.node(), await m.node()
        me = asker.agent("me")
        for round_ in range(3):
            here = old.agent("x") if round_ % 2 == 0 else new.agent("x")
            here.add_handler("echo", lambda msg: msg.payload)
            await wait_for(lambda: all(n.registry.node_of("x") == here.node.id for n in (old, new, asker)), 10,
                           "x to be seen where it is")
            for n in range(5):
                assert (await me.request("x", "echo", n, timeout=5)).payload == n
            await here.close()
            await wait_for(lambda: all(n.registry.node_of("x") is None for n in (old, new, asker)), 10,
                           "x to leave")


async def test_a_server_without_jetstream_is_refused_with_what_to_do(tmp_path: Path) -> None:
    pytest.importorskip("nats")
    server = NatsServer(tmp_path, jetstream=False)
    try:
        with pytest.raises(zmesh.TransportError, match="-js"):
            async with zmesh.Node("m", transport=server.url):
                pass
    finally:
        server.stop()


async def test_no_server_is_a_transport_error_naming_the_url(tmp_path: Path) -> None:
    pytest.importorskip("nats")
    server = NatsServer(tmp_path)
    url = server.url
    server.stop()  # nothing listens there now
    with pytest.raises(zmesh.TransportError, match=url.replace(".", r"\.")):
        async with zmesh.Node("m", transport=NatsTransport(url, connect_wait=1)):
            pass


def test_without_nats_py_the_error_names_the_pip_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nats", None)  # as if it were not installed
    with pytest.raises(zmesh.TransportError, match=r"pip install 'zmesh-agents\[nats\]'"):
        zmesh.Node("m", transport="nats://127.0.0.1:4222")


async def test_a_message_over_the_servers_limit_is_refused_at_the_caller(tmp_path: Path) -> None:
    pytest.importorskip("nats")
    server = NatsServer(tmp_path, max_payload=64 * 1024)
    try:
        async with zmesh.Node("m", transport=server.url) as n1, zmesh.Node("m", transport=server.url) as n2:
            a = n1.agent("a")
            got: list[zmesh.Message] = []
            n2.agent("b").add_handler("blob", got.append, inline=True)
            await n1.wait_for_agents("b", timeout=10)
            with pytest.raises(zmesh.InvalidMessage, match="of the broker"):
                await a.send("b", "blob", b"x" * 100_000)  # under the node's 1 MiB, over the server's 64 KiB
            await a.send("b", "blob", b"y" * 1000)
            await wait_for(lambda: got)
            assert [g.payload for g in got] == [b"y" * 1000]
    finally:
        server.stop()


async def test_nodes_carry_on_after_the_server_restarts(tmp_path: Path) -> None:
    pytest.importorskip("nats")
    server = NatsServer(tmp_path)
    try:
        async with zmesh.Node("m", transport=server.url) as n1, zmesh.Node("m", transport=server.url) as n2:
            a = n1.agent("a")
            n2.agent("b").add_handler("echo", lambda msg: msg.payload, inline=True)
            await n1.wait_for_agents("b", timeout=10)
            assert (await a.request("b", "echo", 1, timeout=5)).payload == 1
            server = server.restart()
            async def answered() -> Any:
                while True:  # requests sent while the clients reconnect may be lost: QoS 0 on NATS core
                    try:
                        return (await a.request("b", "echo", 2, timeout=1)).payload
                    except (zmesh.Timeout, zmesh.AgentNotRegistered):
                        continue
            assert await asyncio.wait_for(answered(), 20) == 2
            assert n1.peers == [n2.id]
            # membership flows again at once (not once nats-py's watcher misses its heartbeats, ~20 s on)
            n1.agent("later")
            await wait_for(lambda: "later" in n2.registry.agents(), 3, "the new agent's record at n2")
    finally:
        server.stop()


async def test_a_node_says_whether_its_server_is_reachable(tmp_path: Path) -> None:
    pytest.importorskip("nats")
    server = NatsServer(tmp_path)
    try:
        transport = NatsTransport(server.url, heartbeat=0.2, expiry=1.0)
        async with zmesh.Node("m", transport=transport):
            await wait_for(lambda: transport.reachable, 5, "the first renewal")
            server.process.send_signal(signal.SIGSTOP)  # a silent link: the client notices nothing for minutes
            try:
                await wait_for(lambda: not transport.reachable, 10, "renewals to stop being taken")
            finally:
                server.process.send_signal(signal.SIGCONT)
            await wait_for(lambda: transport.reachable, 10, "renewals taken again")
            server.stop()  # gone: the client sees the connection close
            await wait_for(lambda: not transport.reachable, 10, "the server to be missed")
            server = server.restart()
            await wait_for(lambda: transport.reachable, 20, "the client back on the new server")
        assert not transport.reachable  # closed
    finally:
        server.stop()


def test_zmesh_transport_names_the_default_transport(nats: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZMESH_TRANSPORT", nats)
    assert zmesh.Node("m").transport.name == "nats"
    monkeypatch.setenv("ZMESH_TRANSPORT", "inproc")
    assert zmesh.Node("m").transport.name == "inproc"
    monkeypatch.setenv("ZMESH_TRANSPORT", "mqtt-or-so")
    with pytest.raises(ValueError, match="unknown transport 'mqtt-or-so'"):
        zmesh.Node("m")


@pytest.mark.multiprocess
async def test_the_command_line_requests_over_nats(nats: str) -> None:
    from .cli_process import run_zmesh

    async with Mesh("nats") as m:
        node = await m.node()
        node.agent("echo").add_handler("math.add", lambda msg: msg.payload["x"] + msg.payload["y"])
        await m.converged()
        code, out, err = await run_zmesh("request", "--mesh", m.name, "--transport", nats, "--wait", "5",
                                         "echo", "math.add", '{"x": 1, "y": 2}')
        assert code == 0, err
        assert json.loads(out) == 3
        code, out, err = await run_zmesh("request", "--mesh", m.name, "--transport", "nats://127.0.0.1:1",
                                         "echo", "math.add", "1")
        assert code != 0 and "cannot reach the NATS server at nats://127.0.0.1:1" in err


@pytest.mark.parametrize("name", ["lab", "a.b", "x*y>z", "100%", "ünï:côde", "%2E", "=3D", "host-123_x"])
def test_names_on_the_server_are_one_token_and_come_back(name: str) -> None:
    from zmesh.transport._nats_names import bucket_name, from_kv_key, kv_key, subject_token, unescape

    token = subject_token(name)
    assert not any(c in token for c in ".*> ") and unescape(token) == name
    key = kv_key(name)
    assert all(c.isascii() and (c.isalnum() or c in "-_=") for c in key) and from_kv_key(key) == name
    assert all(c.isascii() and (c.isalnum() or c in "-_") for c in bucket_name(name))
    assert len({bucket_name(n) for n in ("a.b", "a_b", "a_2e_b")}) == 3  # no two meshes share a bucket


async def test_one_transport_object_serves_one_node(nats: str) -> None:
    shared = NatsTransport(nats)
    async with zmesh.Node("m", transport=shared):
        with pytest.raises(zmesh.TransportError, match="give each node its own"):
            async with zmesh.Node("m", transport=shared):
                pass
