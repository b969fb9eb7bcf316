"""zmesh.sync: the same surface without await; the loop lives on a background thread."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import zmesh
import zmesh.sync as zs

pytestmark = pytest.mark.timeout(30)


def test_blocking_request_delegate_handoff_and_broadcast() -> None:
    with zs.Node("sync-a", transport="inproc") as node:
        a, b, c = node.agent("a"), node.agent("b"), node.agent("c", capabilities=("double",))
        loop_thread = node._loop.thread

        @c.on("double")
        def double(msg: zmesh.Message) -> int:
            assert threading.current_thread() is not loop_thread  # plain handlers run in the pool
            return int(msg.payload) * 2

        @b.on("double")
        def via_c(msg: zmesh.Message) -> int:
            # a blocking call from inside a handler must not deadlock the node
            return int(b.delegate("c", msg, timeout=5).payload) + 1

        assert a.request("b", "double", 20, timeout=5).payload == 41
        assert node.registry.find("double") == ["c"]

        got: list[object] = []
        c.subscribe("news.*", lambda msg: got.append(msg.payload))
        assert a.broadcast("news.today", "hello") == 1

        @b.on_handoff
        def take(offer: zmesh.Handoff) -> bool:
            return offer.task_id == "t-1"

        assert a.handoff("b", "t-1", {"x": 1}, timeout=5).accepted is True
        assert b.tasks == frozenset({"t-1"}) and a.tasks == frozenset()
        assert a.handoff("b", "t-2", timeout=5).accepted is False
        assert a.tasks == frozenset({"t-2"})
        node.settled()
        assert got == ["hello"]


def test_errors_surface_as_zmesh_errors() -> None:
    clock = zmesh.FakeClock()
    with zs.Node("sync-b", transport="inproc", clock=clock) as node:
        a, b = node.agent("a"), node.agent("b")
        b.add_handler("boom", lambda msg: 1 / 0)
        with pytest.raises(zmesh.HandlerError) as info:
            a.request("b", "boom", timeout=5)  # the fake clock never moves: an answer comes at once
        assert info.value.remote_type == "ZeroDivisionError"
        with pytest.raises(zmesh.AgentNotRegistered):
            a.send("nobody", "x")
        assert [d.reason for d in node.dead_letters] == ["handler_error", "not_found"]
        with pytest.raises(zmesh.AgentExists):
            node.agent("a")


def test_calling_from_the_nodes_own_loop_is_refused_not_deadlocked() -> None:
    with zs.Node("sync-c", transport="inproc") as node:
        a, b = node.agent("a"), node.agent("b")

        async def from_the_loop(msg: zmesh.Message) -> list[str]:
            said = []
            for call in (lambda: a.send("b", "x"), node.close):  # close() too: it used to stop the loop under us
                try:
                    call()
                    said.append("no error")
                except RuntimeError as exc:
                    said.append(str(exc))
            return said

        b.add_handler("probe", from_the_loop)
        said, closing = a.request("b", "probe", timeout=5).payload
        assert said.startswith("zmesh.sync.Agent.send called from the node's own event loop thread"), said
        assert "`await agent.async_agent.send(...)`" in said and "worker thread, where the sync API works" in said
        assert closing.startswith("zmesh.sync.Node.close called from") and "`await node.async_node.close(...)`" in closing
        assert a.request("b", "probe", timeout=5).payload[0] == said  # the node still works
        assert node.stats()["node_id"] == node.id  # a plain call on the async side: no wait, no refusal


def test_a_waiting_call_from_another_running_event_loop_warns_that_it_blocks_it() -> None:
    with zs.Node("sync-other-loop", transport="inproc") as node:
        a, b = node.agent("a"), node.agent("b")
        b.add_handler("echo", lambda msg: msg.payload)

        async def users_own_asyncio_code() -> Any:
            with pytest.warns(zs.BlockingCallWarning, match="zmesh.sync.Agent.request called from a running") as got:
                reply = a.request("b", "echo", 7, timeout=5)
            assert got[0].filename == __file__  # points at the call, not into zmesh
            assert node.stats()["node_id"] == node.id  # no wait for the mesh, no warning (warnings are errors)
            return reply.payload

        assert asyncio.run(users_own_asyncio_code()) == 7


def test_a_plain_handler_may_close_its_own_node() -> None:
    node = zs.Node("sync-self-close", transport="inproc")
    a, b = node.agent("a"), node.agent("b")
    outcome: list[str] = []
    finished = threading.Event()

    def close_my_node(msg: zmesh.Message) -> None:
        try:
            node.close()
            outcome.append("closed")
        except BaseException as exc:
            outcome.append(repr(exc))
        finished.set()

    b.add_handler("close", close_my_node)
    a.send("b", "close")
    assert finished.wait(10)
    assert outcome == ["closed"] and node.async_node.closed
    assert not [t for t in threading.enumerate() if t.name == "zmesh-loop-sync-self-close"]  # close() joined it


def test_close_stops_the_loop_thread_and_the_pool() -> None:
    before = set(threading.enumerate())
    node = zs.Node("sync-d", transport="inproc")
    node.agent("a").add_handler("x", lambda msg: None)
    node.close()
    node.close()  # idempotent
    assert set(threading.enumerate()) <= before
    with pytest.raises(zmesh.NodeClosed):
        node.agent("late")


def test_peer_stats_without_await() -> None:
    with zs.Node("sync-stats", name="one", transport="inproc") as one, \
            zs.Node("sync-stats", name="two", transport="inproc") as two:
        worker = two.agent("worker")
        worker.add_handler("job", lambda msg: msg.payload)
        caller = one.agent("caller")
        one.wait_for_agents("worker")
        for i in range(3):
            caller.request("worker", "job", i, timeout=5)
        stats = one.peer_stats("two")
        assert stats["node_id"] == "two" and stats["by_agent"]["worker"]["handled"] == 3
        assert stats["by_agent"] == two.stats()["by_agent"]
