"""Cancellation that stops the work: a request its requester cancelled, or
gave up on, stops its handler on every transport (conformance), hop by hop
down a delegate chain, and when the requester's node goes."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import pytest

import zmesh
from zmesh import FakeClock, Message
from zmesh._runtime.cancel import EARLY_TTL, MAX_EARLY, Cancellations

from .conformance_transports import transport  # noqa: F401 - the fixture
from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)


class Stoppable:
    """An ``async def`` handler that waits until cancelled, and says so."""

    def __init__(self) -> None:
        self.started: list[Message] = []
        self.cancelled: list[Message] = []

    async def __call__(self, msg: Message) -> str:
        self.started.append(msg)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.append(msg)
            raise
        return "never"


async def two_nodes(m: Mesh) -> tuple[zmesh.Node, zmesh.Node, zmesh.Agent, zmesh.Agent]:
    n1, n2 = await m.node(), await m.node()
    a, b = n1.agent("a"), n2.agent("b")
    await m.converged()
    return n1, n2, a, b


async def test_a_cancelled_request_stops_its_async_handler(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, a, b = await two_nodes(m)
        handler = Stoppable()
        b.add_handler("work", handler)
        at_b: list[zmesh.Receipt] = []
        n2.observe(at_b.append)
        task = asyncio.ensure_future(a.request("b", "work", "x", timeout=20))
        await wait_for(lambda: handler.started, 10, "the handler to start")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await wait_for(lambda: handler.cancelled, 10, "the handler to see the cancel")
        await wait_for(lambda: at_b, 5, "the cancel receipt")
        assert [(r.kind, r.outcome, r.sender, r.target, r.topic) for r in at_b] == [
            ("cancel", "success", "a", "b", "work")]
        assert at_b[0].correlation_id == handler.started[0].correlation_id
        assert n2.stats()["handler_errors"] == 0 and list(n2.dead_letters) == []
        assert n1.stats()["late_replies"] == 0, "a cancelled handler sends no reply"
        assert not handler.started[0].cancelled, "the flag is cleared once the handler ended"


async def test_a_cancelled_request_to_an_agent_of_the_same_node_stops_its_handler(transport: str) -> None:
    async with Mesh(transport) as m:
        node = await m.node()
        a, b = node.agent("a"), node.agent("b")
        handler = Stoppable()
        b.add_handler("work", handler)
        task = asyncio.ensure_future(a.request("b", "work", None, timeout=20))
        await wait_for(lambda: handler.started, 10, "the handler to start")
        task.cancel()
        await wait_for(lambda: handler.cancelled, 10, "the handler to see the cancel")
        assert node.stats()["cancelled_running"] == 1


async def test_a_request_that_timed_out_stops_its_handler(transport: str) -> None:
    clock = FakeClock()
    async with Mesh(transport, clock=clock) as m:
        n1, n2, a, b = await two_nodes(m)
        handler = Stoppable()
        b.add_handler("work", handler)
        task = asyncio.ensure_future(a.request("b", "work", "x", timeout=5))
        await wait_for(lambda: handler.started, 10, "the handler to start")
        clock.advance(6)
        with pytest.raises(zmesh.Timeout):
            await task
        await wait_for(lambda: handler.cancelled, 10, "the handler to see the requester give up")


async def test_a_plain_handler_polls_msg_cancelled(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, a, b = await two_nodes(m)
        started, saw = threading.Event(), threading.Event()

        def work(msg: Message) -> str:  # runs in the worker pool: it cannot be interrupted, it can look
            started.set()
            deadline = time.monotonic() + 20
            while not msg.cancelled and time.monotonic() < deadline:
                time.sleep(0.005)
            if msg.cancelled:
                saw.set()
            return "stopped early"

        b.add_handler("work", work)
        task = asyncio.ensure_future(a.request("b", "work", None, timeout=20))
        await wait_for(started.is_set, 10, "the handler to start")
        task.cancel()
        await wait_for(saw.is_set, 10, "the handler to see msg.cancelled")
        await wait_for(lambda: n2.stats()["by_agent"]["b"]["running"] == 0, 10, "the handler to end")
        assert n1.stats()["late_replies"] == 0, "what a cancelled handler returns goes nowhere"


async def test_a_cancelled_request_still_in_the_inbox_never_runs(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b", concurrency=1)
        await m.converged()
        handler = Stoppable()
        b.add_handler("work", handler)
        first = asyncio.ensure_future(a.request("b", "work", 1, timeout=20))
        await wait_for(lambda: handler.started, 10, "the first to start")
        second = asyncio.ensure_future(a.request("b", "work", 2, timeout=20))
        await wait_for(lambda: n2.stats()["by_agent"]["b"]["inbox"] == 1, 10, "the second to wait in the inbox")
        second.cancel()
        await wait_for(lambda: n2.stats()["cancels_received"] == 1, 10, "the cancel to arrive")
        first.cancel()
        await wait_for(lambda: len(handler.cancelled) == 1, 10, "the first to be cancelled")
        await wait_for(lambda: n2.stats()["cancelled_waiting"] == 1, 10, "the second to be taken and dropped")
        await asyncio.gather(first, second, return_exceptions=True)
        assert [msg.payload for msg in handler.started] == [1], "the cancelled second request never ran"
        assert n2.stats()["by_agent"]["b"]["inbox"] == 0


async def test_a_cancel_stops_every_hop_of_a_delegate_chain(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, n3 = await m.node(), await m.node(), await m.node()
        top, middle, bottom = n1.agent("top"), n2.agent("middle"), n3.agent("bottom")
        await m.converged()
        handler = Stoppable()
        bottom.add_handler("work", handler)
        middle_cancelled: list[bool] = []

        @middle.on("work")
        async def relay(msg: Message) -> object:
            try:
                return (await middle.request("bottom", "work", msg.payload, timeout=20)).payload
            except asyncio.CancelledError:
                middle_cancelled.append(True)
                raise

        task = asyncio.ensure_future(top.request("middle", "work", "deep", timeout=20))
        await wait_for(lambda: handler.started, 10, "the bottom handler to start")
        task.cancel()
        await wait_for(lambda: handler.cancelled, 10, "the bottom handler to see the cancel")
        assert middle_cancelled == [True]


async def test_the_requesters_node_closing_stops_what_it_asked() -> None:
    async with Mesh("zmq") as m:
        n1, n2, a, b = await two_nodes(m)
        handler = Stoppable()
        b.add_handler("work", handler)
        task = asyncio.ensure_future(a.request("b", "work", None, timeout=20))
        await wait_for(lambda: handler.started, 10, "the handler to start")
        await n1.close()  # its goodbye: n2 knows at once nobody waits any more
        await asyncio.gather(task, return_exceptions=True)
        await wait_for(lambda: handler.cancelled, 10, "the handler to be cancelled")


# -- who may cancel, and what is kept ---------------------------------------


HOSTS = {"a": "n1", "x": "n9"}


TOLD: list[tuple[str, list[tuple[str, str]]]] = []


def _cancellations() -> tuple[Cancellations, list[tuple[str, str]], list[float]]:
    now = [100.0]
    receipts: list[tuple[str, str]] = []
    TOLD.clear()
    return Cancellations(HOSTS.get, lambda: now[0], lambda kind, outcome, *_: receipts.append((kind, outcome)),
                         Counter(), lambda node, ids: TOLD.append((node, ids))), receipts, now


def test_only_the_requesters_node_may_cancel() -> None:
    cancels, receipts, _ = _cancellations()
    msg = Message("query", "a", "b", "work", None, "c1", "a")
    task_like = object()
    cancels.started(msg, task_like, "n1")
    cancels.cancel("n3", [("b", "c1")])
    assert not msg.cancelled and cancels.stats["cancel_refused"] == 1
    cancels.cancel("n1", [("b", "c1")])
    assert msg.cancelled
    assert cancels.ended(msg) and not msg.cancelled and receipts == [("cancel", "success")]


def test_a_cancel_that_came_first_stops_the_request_when_it_comes() -> None:
    cancels, _, now = _cancellations()
    msg = Message("query", "a", "b", "work", None, "c2", "a")
    cancels.cancel("n1", [("b", "c2")])
    assert not cancels.cancelled_before_start(msg, "n3"), "another node's request with that id runs"
    cancels.cancel("n1", [("b", "c2")])
    assert cancels.cancelled_before_start(msg, "n1")
    cancels.cancel("n1", [("b", "c3")])
    now[0] += EARLY_TTL + 1
    assert not cancels.cancelled_before_start(Message("query", "a", "b", "w", None, "c3", "a"), "n1")
    for i in range(MAX_EARLY + 10):
        cancels.cancel("n1", [("b", f"id{i}")])
    assert len(cancels.early) == MAX_EARLY and cancels.stats["cancel_forgotten"] >= 10


def test_a_node_that_left_has_its_requests_stopped() -> None:
    cancels, _, _ = _cancellations()
    mine = Message("query", "a", "b", "work", None, "c4", "a")
    other = Message("query", "x", "b", "work", None, "c5", "x")
    cancels.started(mine, object(), "n1")
    cancels.started(other, object(), "n9")
    cancels.departed("n1", "expired")
    assert not mine.cancelled, "a peer that went silent may be stalled: it gets its reply when back"
    cancels.departed("n1", "left")
    assert mine.cancelled and not other.cancelled
    cancels.ended(mine)
    cancels.ended(other)


def test_ctrl_c_in_a_blocking_request_stops_the_remote_handler() -> None:
    import os
    import signal

    import zmesh.sync as zs

    with zs.Node("cancel-sync", transport="inproc") as node:
        a, b = node.agent("a"), node.agent("b")
        started, cancelled = threading.Event(), threading.Event()

        @b.on("work")
        async def work(msg: Message) -> None:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise

        interrupter = threading.Thread(target=lambda: started.wait(10) and os.kill(os.getpid(), signal.SIGINT))
        interrupter.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                a.request("b", "work", None, timeout=20)
        finally:
            interrupter.join(10)
        assert cancelled.wait(10), "the handler went on after the caller's Ctrl-C"  # (the node still runs)


def test_a_watch_is_answered_when_the_request_starts_or_at_once_if_it_runs() -> None:
    cancels, _, now = _cancellations()
    queued = Message("query", "a", "b", "work", None, "w1", "a")
    cancels.watch("n1", [("b", "w1")])
    assert TOLD == []
    cancels.starting(queued)
    assert TOLD == [("n1", [("b", "w1")])]
    running = Message("query", "a", "b", "work", None, "w2", "a")
    cancels.started(running, object(), "n1")
    cancels.watch("n3", [("b", "w2")])  # not the requester's node: not told
    cancels.watch("n1", [("b", "w2")])
    assert TOLD[1:] == [("n1", [("b", "w2")])]
    cancels.watch("n1", [("b", "w3")])
    now[0] += EARLY_TTL + 1
    cancels.starting(Message("query", "a", "b", "work", None, "w3", "a"))
    assert len(TOLD) == 2, "a watch kept past its time is not answered"


async def test_a_planner_cancels_the_work_it_delegated_by_the_request_id(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, n3 = await m.node(), await m.node(), await m.node()
        ui, planner, worker = n1.agent("ui"), n2.agent("planner"), n3.agent("worker")
        await m.converged()
        handler = Stoppable()
        worker.add_handler("work", handler)
        stopped_at_planner: list[BaseException] = []

        @planner.on("work")
        async def plan(msg: Message) -> object:
            try:
                return await planner.delegate("worker", msg, timeout=20)
            except asyncio.CancelledError as exc:
                stopped_at_planner.append(exc)
                return "stopped"

        @planner.on("stop")
        async def stop(msg: Message) -> bool:
            return await planner.cancel(msg.payload)

        asked = asyncio.ensure_future(ui.request("planner", "work", "job", timeout=20))
        await wait_for(lambda: handler.started, 10, "the worker to start")
        job_id = handler.started[0].correlation_id  # the ui's request id, kept down the delegate chain
        assert (await ui.request("planner", "stop", job_id, timeout=10)).payload is True
        await wait_for(lambda: handler.cancelled, 10, "the worker to be stopped")
        assert (await asked).payload == "stopped" and len(stopped_at_planner) == 1
        assert (await ui.request("planner", "stop", job_id, timeout=10)).payload is False, "nothing pending now"
        with pytest.raises(zmesh.InvalidMessage):
            await planner.cancel(42)  # type: ignore[arg-type]


async def test_a_delegate_on_the_same_node_is_its_own_request_to_cancel(transport: str) -> None:
    """A delegate keeps its request's correlation id: planner and worker on one node run two
    requests with one id, and a cancel of the first reaches both (the second through the first)."""
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        ui, planner, worker = n1.agent("ui"), n2.agent("planner"), n2.agent("worker")
        await m.converged()
        handler = Stoppable()
        worker.add_handler("work", handler)
        planner_stopped: list[bool] = []

        @planner.on("work")
        async def plan(msg: Message) -> object:
            try:
                return await planner.delegate("worker", msg, timeout=20)
            except asyncio.CancelledError:
                planner_stopped.append(True)
                raise

        task = asyncio.ensure_future(ui.request("planner", "work", None, timeout=20))
        await wait_for(lambda: handler.started, 10, "the worker to start")
        task.cancel()
        await wait_for(lambda: handler.cancelled and planner_stopped, 10, "both to be stopped")
        assert n2.stats()["cancel_refused"] == 0


async def test_a_cancel_in_the_same_batch_as_its_request_frees_the_agents_slot() -> None:
    """On 3.10/3.11 a handler's Task starts a loop turn later: a cancel that came with
    the request stops it before its first step, and its concurrency slot still comes back."""
    from zmesh.message import CANCELLED_REQUESTS

    async with Mesh("inproc") as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b", concurrency=1)
        await m.converged()

        @b.on("work")
        async def work(msg: Message) -> object:
            if msg.payload == 1:
                await asyncio.Event().wait()
            return msg.payload

        delivery = n2._dispatch.delivery  # one batch of arrivals at n2: the request, then its cancel
        delivery.deliver("b", Message("query", "a", "b", "work", 1, "c-batch", "a"), False, n1.id, 100)
        delivery.cancels.cancel(n1.id, [("b", "c-batch")])
        assert (await a.request("b", "work", 2, timeout=5)).payload == 2, "the slot came back"
        await wait_for(lambda: not delivery.cancels.running and ("b", "c-batch") not in CANCELLED_REQUESTS, 5,
                       "the cancelled request to be forgotten")
