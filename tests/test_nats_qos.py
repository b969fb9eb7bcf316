"""QoS 1/2 on NATS's own: a plain JetStream client puts work in an agent's
queue, a malformed message there is dropped, counted and acknowledged, and
the queue's options are checked (what every holding broker does is
test_broker_qos's)."""

from __future__ import annotations

from pathlib import Path

import pytest

import zmesh
from zmesh.transport.nats import NatsTransport

from .brokers import until_queued
from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(90)

HERE = Path(__file__).resolve().parent


async def test_a_plain_jetstream_client_puts_work_in_an_agents_queue(nats_url: str) -> None:
    import nats as nats_py

    async with Mesh("nats") as m:
        node = await m.node()
        got: list[zmesh.Message] = []
        node.agent("worker").add_handler("jobs.new", got.append, inline=True)
        await m.converged()
        client = await nats_py.connect(nats_url)
        try:
            # as `nats pub zmesh.MESH.q.worker.jobs.new '{"job": 7}'` (or `nats req`, for the PubAck)
            ack = await client.jetstream().publish(f"zmesh.{m.name}.q.worker.jobs.new", b'{"job": 7}')
            assert ack.stream == f"zmesh_{m.name}"
        finally:
            await client.close()
        await wait_for(lambda: got, 10, "the plain client's job")
        assert got[0].payload == {"job": 7} and got[0].qos == 1
        await until_queued("nats", nats_url, m.name, 0, 10, "the plain client's job was not acknowledged")


async def test_a_malformed_message_in_the_stream_is_dropped_counted_and_acknowledged(nats_url: str) -> None:
    import nats as nats_py

    async with Mesh("nats") as m:
        node = await m.node()
        got: list[zmesh.Message] = []
        node.agent("worker").add_handler("jobs.new", got.append, inline=True)
        await m.converged()
        client = await nats_py.connect(nats_url)
        try:
            js = client.jetstream()
            await js.publish(f"zmesh.{m.name}.q.worker.jobs.new", b"1", headers={"Zmesh-Priority": "urgent"})
            await js.publish(f"zmesh.{m.name}.q.worker.jobs.new", b'"fine"')
        finally:
            await client.close()
        await wait_for(lambda: got and node.stats()["dropped"].get("malformed", 0) == 1, 10)
        assert [g.payload for g in got] == ["fine"]
        await until_queued("nats", nats_url, m.name, 0, 10, "the malformed message was not acknowledged")


def test_queue_options_are_checked() -> None:
    pytest.importorskip("nats")
    for bad in ({"ack_wait": 0}, {"max_age": 0.5}, {"max_unconfirmed": 0}, {"max_in_flight": 1.5}):
        with pytest.raises(ValueError):
            NatsTransport("nats://127.0.0.1:4222", **bad)  # type: ignore[arg-type]

