"""QoS 1/2 on a broker that keeps a one-way message until its agent's node
acknowledges it (NATS JetStream, a Redis stream per agent): nothing the
server confirmed is lost when the receiver is killed, its inbox is full or
the server restarts mid-stream; what waits for a server that is away is
bounded. The same tests on each (the brokers' own quirks are in
test_nats_qos.py and test_redis.py)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import pytest

import zmesh
from zmesh.transport import MessageTransport

from .brokers import queued, start_nats, start_redis, until_queued
from .helpers import Mesh, handled_by, start_qos_child, wait_for

pytestmark = pytest.mark.timeout(90)

HERE = Path(__file__).resolve().parent
HOLDING = ["nats", "redis"]
#: The transports whose one-way QoS 1/2 messages wait for their handler (the file bus has no server to restart).
KEEPING = [*HOLDING, "file"]


def transport_of(kind: str, url: str, **options: Any) -> MessageTransport:
    if kind == "file":
        from zmesh.transport.file import FileTransport

        return FileTransport(url, **options)
    if kind == "redis":
        from zmesh.transport.redis import RedisTransport

        return RedisTransport(url, **options)
    from zmesh.transport.nats import NatsTransport

    return NatsTransport(url, **options)


def server_of(kind: str) -> Callable[[Path], Any]:
    return start_redis if kind == "redis" else start_nats


@pytest.fixture(params=KEEPING)
def broker(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(kind, URL) of the session's server of each broker that keeps messages (the file
    bus: the session's directory of buses, one per mesh in it)."""
    kind = str(request.param)
    return kind, str(request.getfixturevalue(f"{kind}_url"))


def url_of(kind: str, url: str, mesh: str) -> str:
    """Where mesh ``mesh``'s nodes meet (on the file bus: its own directory)."""
    return f"{url}/{mesh}" if kind == "file" else url


async def test_a_qos_1_message_waits_at_the_server_until_its_handler_ran(broker: tuple[str, str]) -> None:
    kind, url = broker
    async with Mesh(kind) as m:
        sender, receiver = await m.node(), await m.node()
        tx = sender.agent("tx")
        gate = asyncio.Event()
        got: list[int] = []

        async def job(msg: zmesh.Message) -> None:
            await gate.wait()
            got.append(msg.payload["n"])

        receiver.agent("rx").add_handler("job", job)
        await m.converged()
        for n in range(3):
            await tx.send("rx", "job", {"n": n}, qos=1)
        assert await sender.wait_acked(10)  # the server has all three
        assert await queued(kind, url, m.name) == 3  # and keeps them while the handlers wait
        gate.set()
        await wait_for(lambda: len(got) == 3, 10, "the three handled")
        await until_queued(kind, url, m.name, 0, 10, "the server still holds handled messages")  # acknowledged
        assert sorted(got) == [0, 1, 2]
        assert receiver.dead_letters.total == 0


async def test_what_a_full_inbox_refuses_comes_again_and_is_handled(broker: tuple[str, str]) -> None:
    kind, url = broker
    async with Mesh(kind) as m:
        sender, receiver = await m.node(), await m.node()
        tx = sender.agent("tx")
        gate = asyncio.Event()
        got: list[int] = []

        async def job(msg: zmesh.Message) -> None:
            await gate.wait()
            got.append(msg.payload["n"])

        receiver.agent("rx", concurrency=1, inbox_size=2).add_handler("job", job)
        await m.converged()
        for n in range(20):
            await tx.send("rx", "job", {"n": n}, qos=1)
        await wait_for(lambda: receiver.stats().get("given_back", 0) > 0, 10, "a full inbox to give one back")
        gate.set()
        await wait_for(lambda: len(set(got)) == 20, 30, "all twenty handled")
        assert receiver.dead_letters.total == 0  # nothing dead-lettered "busy": it came again instead
        assert len(got) == 20  # and nothing twice
        await until_queued(kind, url, m.name, 0, 10, "what was given back stays at the server")


async def test_a_message_that_expires_at_the_server_is_dead_lettered_and_acknowledged(
        broker: tuple[str, str]) -> None:
    kind, url = broker
    async with Mesh(kind) as m:
        sender, receiver = await m.node(), await m.node()
        tx = sender.agent("tx")
        gate = asyncio.Event()
        got: list[int] = []

        async def job(msg: zmesh.Message) -> None:
            await gate.wait()
            got.append(msg.payload["n"])

        receiver.agent("rx", concurrency=1).add_handler("job", job)
        await m.converged()
        await tx.send("rx", "job", {"n": 0}, qos=1)
        sent = time.time()
        await tx.send("rx", "job", {"n": 1}, qos=1, ttl=0.3)
        await wait_for(lambda: time.time() > sent + 0.4, 5, "the ttl to run out")
        gate.set()
        await wait_for(lambda: receiver.dead_letters.total == 1, 10, "the expired one dead-lettered")
        assert [d.reason for d in receiver.dead_letters] == ["expired"]
        assert got == [0]
        await until_queued(kind, url, m.name, 0, 10, "the expired message was not acknowledged")


async def read_lines(child: subprocess.Popen[str], count: int) -> list[int]:
    """The first ``count`` numbers ``child`` prints, as it prints them."""
    assert child.stdout is not None
    seen: list[int] = []
    loop = asyncio.get_running_loop()
    while len(seen) < count:
        line = await asyncio.wait_for(loop.run_in_executor(None, child.stdout.readline), 20)
        assert line, "the child ended early"
        seen.append(int(line))
    return seen


@pytest.mark.multiprocess
async def test_a_killed_receivers_unacknowledged_messages_go_to_its_replacement(broker: tuple[str, str]) -> None:
    kind, url = broker
    async with Mesh(kind) as m:
        url = url_of(kind, url, m.name)
        node = await m.node(transport=transport_of(kind, url, expiry=30.0))
        tx = node.agent("tx")
        loop = asyncio.get_running_loop()
        first = await loop.run_in_executor(None, start_qos_child, url, m.name, 5)  # its handler never ends at 5
        second = None
        try:
            await node.wait_for_agents("rx", timeout=10)
            for n in range(20):
                await tx.send("rx", "job", {"n": n}, qos=1)
            assert await node.wait_acked(10)
            # 0-4 handled; 5 stuck in its handler; 6-19 in its inbox, delivered and unacknowledged
            printed = await read_lines(first, 5)
            # 0-4 acknowledged (an ack still on its way at a kill is that message's one chance of a second run)
            await until_queued(kind, url, m.name, 15, 10, "0-4 acknowledged")
            first.kill()
            handled_first = printed + handled_by(first)
            # a node of another name: what the first had (ack_wait 1 s) comes to it
            second = await loop.run_in_executor(None, start_qos_child, url, m.name, -1)
            await until_queued(kind, url, m.name, 0, 30, "the replacement did not get what the first left")
            second.terminate()
            handled_second = handled_by(second)
            assert handled_first == [0, 1, 2, 3, 4]
            assert sorted(handled_second) == list(range(5, 20))  # nothing lost, nothing twice
        finally:
            for child in (first, second):
                if child is not None and child.poll() is None:
                    child.kill()
                    child.wait(10)


@pytest.mark.parametrize("qos", [1, 2])
@pytest.mark.parametrize("kind", HOLDING)
async def test_nothing_is_lost_when_the_server_restarts_mid_stream(tmp_path: Path, kind: str, qos: int) -> None:
    server = server_of(kind)(tmp_path)
    try:
        def transport() -> MessageTransport:
            return transport_of(kind, server.url, expiry=60.0)  # the registry outlives the restart

        async with zmesh.Node("m", transport=transport()) as n1, zmesh.Node("m", transport=transport()) as n2:
            tx = n1.agent("tx")
            got: list[int] = []
            n2.agent("rx").add_handler("job", lambda msg: got.append(msg.payload["n"]), inline=True)
            await n1.wait_for_agents("rx", timeout=10)
            await n2.settled()
            total = 300
            loop = asyncio.get_running_loop()
            for n in range(total):
                if n == 100:
                    # SIGKILLed in the middle of a burst: what it had read and not stored is gone with it
                    killer = loop.run_in_executor(None, server.kill)
                if n == 200:
                    await killer
                    server = await loop.run_in_executor(None, server.restart)  # the same port and store
                await tx.send("rx", "job", {"n": n}, qos=qos)
                if n % 10 == 0:
                    await asyncio.sleep(0.001)
            assert await n1.wait_acked(30)
            await wait_for(lambda: len(set(got)) == total, 30, "every message handled")
            assert sorted(set(got)) == list(range(total))
            if qos == 2:
                assert len(got) == total  # handled once each
            def reconnected() -> bool:  # counted by the client's callback, which may run after the deliveries
                counts = n2.stats()["transport"]
                return counts.get("reconnects", 0) + counts.get("pubsub_reconnects", 0) >= 1

            await wait_for(reconnected, 10, "the reconnect to be counted")
            # and a request goes through again
            assert (await n1.agent("asker").request("rx", "job", {"n": -1}, timeout=10)).payload is None
    finally:
        server.stop()


@pytest.mark.parametrize("kind", HOLDING)
async def test_while_the_server_is_away_senders_wait_at_the_bound(tmp_path: Path, kind: str) -> None:
    server = server_of(kind)(tmp_path)
    try:
        transport = transport_of(kind, server.url, expiry=60.0, max_unconfirmed=40, connect_wait=0.5)
        async with zmesh.Node("m", transport=transport) as n1:
            tx = n1.agent("tx")
            n1.agent("rx").add_handler("job", lambda msg: None, inline=True)
            await n1.settled()
            server.stop()
            refused: list[int] = []
            for n in range(50):
                try:
                    await tx.send("rx", "job", {"n": n}, qos=1, timeout=0.05)
                except zmesh.Backpressure:
                    refused.append(n)
            assert refused[0] == 30, refused  # 3/4 of the bound kept; the rest waited, then said so
            assert n1.stats()["dropped"].get("unconfirmed_full", 0) == 0
            assert not await n1.wait_acked(0.2)
    finally:
        server.stop()


@pytest.mark.parametrize("kind", ["nats", "redis", "mqtt"])
async def test_a_burst_over_the_transports_bound_waits_rather_than_drops(kind: str,
                                                                           request: pytest.FixtureRequest) -> None:
    url = str(request.getfixturevalue(f"{kind}_url"))
    bound = {"mqtt": {"max_queued": 40}, "redis": {"max_queued": 40, "max_unconfirmed": 40},
             "nats": {"max_unconfirmed": 40}}[kind]
    if kind == "mqtt":
        from zmesh.transport.mqtt import MqttTransport

        sending: MessageTransport = MqttTransport(url, **bound)  # type: ignore[arg-type]
    else:
        sending = transport_of(kind, url, **bound)
    async with Mesh(kind) as m:
        sender, receiver = await m.node(transport=sending), await m.node()
        got: list[int] = []
        receiver.agent("rx").add_handler("job", lambda msg: got.append(msg.payload), inline=True)
        await m.converged()
        tx = sender.agent("tx")
        total = 600
        for n in range(total):
            await tx.send("rx", "job", n, qos=1)
        assert await sender.wait_acked(30)
        await wait_for(lambda: len(set(got)) == total, 30, "every message handled")
        assert sender.stats()["backpressure_waits"] > 0  # it did wait
        assert sender.stats()["dropped"] == {} and receiver.dead_letters.total == 0
