"""zmesh.bus: the seed design's MessageBus (publish, subscribe, consume) as
the seed writes it, sync and async, over each transport; one program moves
from the file bus to a broker by changing its constructor."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Callable

import pytest

import zmesh
from zmesh.bus import FileBus, MeshBus, MessageBus, MQTTBus, NatsBus, RedisBus

pytestmark = pytest.mark.timeout(60)


def envelope(msg_id: str, **header: Any) -> dict[str, Any]:
    return {"header": {"msg_id": msg_id, "type": "task", "sender": "agent_main", **header}, "payload": {"n": msg_id}}


def consumed(bus: MessageBus, agent_id: str, count: int, within: float = 10.0) -> list[dict[str, Any]]:
    """What ``bus.consume(agent_id)`` gives, called until ``count`` envelopes came (a deadline)."""
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + within
    while len(got) < count:
        assert time.monotonic() < deadline, f"consume({agent_id!r}) got {len(got)} of {count}"
        got += bus.consume(agent_id)
        time.sleep(0.01)  # a poll of consume, bounded by the deadline
    return got


@pytest.fixture(params=["file", "mqtt", "redis", "nats", "mesh"])
def make_bus(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], MessageBus]:
    """A constructor of the seed's bus on each transport: only it changes."""
    kind = str(request.param)
    if kind == "file":
        return lambda: FileBus(tmp_path / "message_bus")
    if kind == "mesh":
        return lambda: MeshBus(mesh=f"bus-{tmp_path.name}")
    url = str(request.getfixturevalue(f"{kind}_url"))
    face = {"mqtt": MQTTBus, "redis": RedisBus, "nats": NatsBus}[kind]
    return lambda: face(url, mesh=f"bus-{tmp_path.name}")


def test_the_seeds_program_runs_on_every_bus(make_bus: Callable[[], MessageBus]) -> None:
    with make_bus() as bus:
        bus.subscribe("agent_sub", "research.paper")
        bus.subscribe("agent_sub2", "research.*")
        assert bus.consume("agent_sub") == []
        bus.publish("research.paper", envelope("m1"))  # no target: every subscriber's
        bus.publish("research.paper", envelope("m2", target="agent_sub"))  # its target's only
        first = consumed(bus, "agent_sub", 2)
        assert sorted(e["header"]["msg_id"] for e in first if e["header"]["target"] == "agent_sub") == ["m2"]
        assert {e["payload"]["n"] for e in first} == {"m1", "m2"}
        assert all(e["header"]["version"] == "1.0" and e["header"]["sender"] == "agent_main" for e in first)
        second = consumed(bus, "agent_sub2", 1)
        assert [e["payload"]["n"] for e in second] == ["m1"]
        assert bus.consume("agent_sub") == [] and bus.consume("agent_sub2") == []  # read once


def test_a_request_and_its_result_go_through_the_bus(make_bus: Callable[[], MessageBus]) -> None:
    with make_bus() as bus:
        bus.consume("worker")  # the worker is there (the registry has it)
        bus.publish("jobs.run", envelope("r1", target="worker", correlation_id="task_1", reply_to="agent_main"))
        [request] = consumed(bus, "worker", 1)
        assert request["header"]["correlation_id"] == "task_1"
        bus.publish("jobs.run", {"header": {"type": "result", "sender": "worker", "target": "agent_main",
                                            "correlation_id": "task_1"}, "payload": {"done": True}})
        [result] = consumed(bus, "agent_main", 1)
        assert result["header"]["type"] == "result" and result["payload"] == {"done": True}
        assert result["header"]["correlation_id"] == "task_1"
        with pytest.raises(zmesh.InvalidMessage, match="no request"):
            bus.publish("jobs.run", {"header": {"type": "result", "sender": "worker", "correlation_id": "nope"},
                                     "payload": None})


async def test_the_async_twins(tmp_path: Path) -> None:
    bus = FileBus(tmp_path / "bus")
    try:
        await bus.asubscribe("a", "x.y")
        await bus.apublish("x.y", envelope("e1"))
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + 10
        while not got:
            assert time.monotonic() < deadline
            got = await bus.aconsume("a")
            await asyncio.sleep(0.01)
        assert got[0]["payload"] == {"n": "e1"}
    finally:
        await asyncio.get_running_loop().run_in_executor(None, bus.close)


def test_bad_envelopes_are_refused_and_a_full_buffer_drops_the_oldest(tmp_path: Path) -> None:
    with FileBus(tmp_path / "bus", max_buffered=3) as bus:
        with pytest.raises(zmesh.InvalidMessage):
            bus.publish("x", {"payload": 1})  # no header
        with pytest.raises(zmesh.InvalidMessage):
            bus.publish("x", envelope("bad", priority=99))
        bus.subscribe("a", "x")
        for n in range(5):
            bus.publish("x", envelope(f"m{n}"))
        deadline = time.monotonic() + 10
        while bus.stats()["dropped"] < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)  # a poll, bounded by the deadline
        assert [e["payload"]["n"] for e in bus.consume("a")] == ["m2", "m3", "m4"]
    with pytest.raises(ValueError):
        FileBus(tmp_path / "bus2", max_buffered=0)
