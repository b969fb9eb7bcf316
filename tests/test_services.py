"""``node.services()`` and ``zmesh services``: each capability's providers,
their requests, errors and average processing time, gathered across nodes."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator

import pytest

import zmesh
from tests.cli_process import run_zmesh
from zmesh._runtime.services import collect

from .conformance_transports import transport  # noqa: F401 - the fixture
from .helpers import Mesh

pytestmark = pytest.mark.timeout(60)


async def test_services_count_each_providers_requests_errors_and_time(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        me = n1.agent("me")
        fast, slow = n1.agent("fast", capabilities=("summarize",)), n2.agent("slow", capabilities=("summarize",))
        n2.agent("poet", capabilities=("verse",))

        @fast.on("sum")
        async def quick(msg: zmesh.Message) -> str:
            if msg.payload == "bad":
                raise ValueError("bad input")
            return "ok"

        @slow.on("sum")
        async def slowly(msg: zmesh.Message) -> AsyncIterator[str]:
            await asyncio.sleep(0.03)
            yield "ok"

        await m.converged()
        for _ in range(3):
            assert (await me.request("fast", "sum", "x", timeout=10)).payload == "ok"
        with pytest.raises(zmesh.HandlerError):
            await me.request("fast", "sum", "bad", timeout=10)
        assert [x async for x in me.stream("slow", "sum", timeout=10)] == ["ok"]

        found = await n1.services()
        assert sorted(found) == ["summarize", "verse"]
        summarize = found["summarize"]
        by_agent = {row["agent"]: row for row in summarize["providers"]}
        assert (by_agent["fast"]["node"], by_agent["slow"]["node"]) == (n1.id, n2.id)
        assert (by_agent["fast"]["requests"], by_agent["fast"]["errors"]) == (4, 1)
        assert (by_agent["slow"]["requests"], by_agent["slow"]["errors"]) == (1, 0)
        assert by_agent["slow"]["average_ms"] >= 25, "the stream's time, not only its first step's"
        assert (summarize["requests"], summarize["errors"]) == (5, 1)
        assert found["verse"]["providers"][0]["requests"] == 0
        assert list(await n2.services("verse")) == ["verse"]
        assert await n2.services("nobody-does-this") == {}
        with pytest.raises(zmesh.InvalidMessage):
            await n1.services("")


async def test_a_provider_whose_node_does_not_answer_is_listed_with_its_error() -> None:
    async with Mesh("inproc") as m:
        node = await m.node()
        node.agent("a", capabilities=("x",))

        async def ask(node_id: str, timeout: float) -> dict[str, Any]:
            raise zmesh.Timeout(f"node {node_id!r} did not answer")

        found = await collect(node.registry, ask, None, 1.0)
        assert found["x"]["providers"] == [{"agent": "a", "node": node.id,
                                            "error": f"Timeout: node {node.id!r} did not answer"}]
        assert (found["x"]["requests"], found["x"]["average_ms"]) == (0, None)


async def test_a_node_with_malformed_figures_gets_an_error_row_not_an_exception() -> None:
    async with Mesh("inproc") as m:
        node = await m.node()
        node.agent("a", capabilities=("x",))
        node.agent("b", capabilities=("x",))

        async def ask(node_id: str, timeout: float) -> dict[str, Any]:
            return {"by_agent": {"a": {"requests": "many"}, "b": None}}

        rows = (await collect(node.registry, ask, "x", 1.0))["x"]["providers"]
        assert [row["error"] for row in rows] == ["InvalidMessage: its node's stats are malformed"] * 2


async def test_zmesh_services_prints_a_table_and_json() -> None:
    mesh = f"services-{asyncio.get_running_loop().time():.0f}"
    async with zmesh.Node(mesh, discovery=False) as node:
        worker, me = node.agent("w1", capabilities=("draft",)), node.agent("me")
        worker.add_handler("draft", lambda msg: "text", inline=True)
        await me.request("w1", "draft", timeout=10)
        code, out, err = await run_zmesh("services", "--mesh", mesh, "--seed", node.endpoint)
        assert code == 0, err
        header, row = out.splitlines()[:2]
        assert header.split()[:5] == ["CAPABILITY", "AGENT", "NODE", "REQUESTS", "ERRORS"]
        assert row.split()[:5] == ["draft", "w1", node.id, "1", "0"]
        code, out, err = await run_zmesh("services", "--mesh", mesh, "--seed", node.endpoint, "draft", "--json")
        assert code == 0, err
        found = json.loads(out)
        assert list(found) == ["draft"] and found["draft"]["providers"][0]["requests"] == 1
        code, out, err = await run_zmesh("services", "--mesh", mesh, "--seed", node.endpoint, "nothing")
        assert code == 0 and "no agent declares capability 'nothing'" in out


def test_the_blocking_facade_has_services() -> None:
    from zmesh import sync

    with sync.Node("sync-services", discovery=False) as node:
        worker, me = node.agent("w", capabilities=("echo",)), node.agent("me")
        worker.add_handler("echo", lambda msg: msg.payload)
        assert me.request("w", "echo", 1, timeout=10).payload == 1
        found = node.services("echo")
        assert found["echo"]["providers"][0]["requests"] == 1


async def test_a_provider_that_answered_nothing_has_no_average_not_zero() -> None:
    async with Mesh("inproc") as m:
        node = await m.node()
        node.agent("idle", capabilities=("x",))
        found = await node.services("x")
        [row] = found["x"]["providers"]
        assert (row["requests"], row["average_ms"], found["x"]["average_ms"]) == (0, None, None)
