"""zmesh.sync: the same surface without await; the loop lives on a background thread."""

from __future__ import annotations

import threading

import pytest

import zmesh
import zmesh.sync as zs

pytestmark = pytest.mark.timeout(30)


def test_blocking_request_delegate_handoff_and_broadcast() -> None:
    with zs.Node("sync-a", transport="inproc") as node:
        a, b, c = node.agent("a"), node.agent("b"), node.agent("c", capabilities=("double",))
        loop_thread = node._thread

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

        async def from_the_loop(msg: zmesh.Message) -> str:
            try:
                a.send("b", "x")
            except RuntimeError as exc:
                return str(exc)
            return "no error"

        b.add_handler("probe", from_the_loop)
        assert "own event loop" in a.request("b", "probe", timeout=5).payload


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
