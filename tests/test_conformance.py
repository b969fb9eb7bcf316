"""Conformance: the semantics every transport must give.

Every ``async`` test takes the ``transport`` fixture and so runs on the
in-process transport, on ZeroMQ, and on ZeroMQ waiting for input in a thread
(``zmq-thread``: how it runs on a loop without ``add_reader``, Windows'
default); the results must be the same. Time
is a ``zmesh.FakeClock`` wherever a timeout or a TTL is involved, so nothing
here waits for a real timeout.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any, AsyncIterator, Iterator

import pytest

import zmesh
from zmesh.agent import HANDOFF_GRACE
from zmesh import FakeClock, Message
from zmesh import errors as errors_module

from .conformance_transports import transport  # noqa: F401 - the fixture
from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)


# -- helpers -------------------------------------------------------------


class Inbox:
    """A handler that records what it got, per agent."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def __call__(self, msg: Message) -> None:
        self.messages.append(msg)

    @property
    def payloads(self) -> list[Any]:
        return [m.payload for m in self.messages]

    @property
    def topics(self) -> list[str]:
        return [m.topic for m in self.messages]


class Parked:
    """A handler that answers later: returns DEFERRED and keeps the request."""

    def __init__(self) -> None:
        self.requests: list[Message] = []

    def __call__(self, msg: Message) -> object:
        self.requests.append(msg)
        return zmesh.DEFERRED


async def next_event(events: AsyncIterator[zmesh.MeshEvent]) -> zmesh.MeshEvent:
    return await asyncio.wait_for(events.__anext__(), 5)


async def collect_events(
    events: AsyncIterator[zmesh.MeshEvent], want: set[tuple[str, str, str]]
) -> set[tuple[str, str, str]]:
    """Read events until every (kind, node_id, agent_id) in ``want`` was seen."""
    seen: set[tuple[str, str, str]] = set()
    while not want <= seen:
        event = await next_event(events)
        seen.add((event.kind, event.node_id, event.agent_id))
    return seen


async def start_nodes(m: Mesh, count: int) -> list[zmesh.Node]:
    """Start ``count`` nodes, each joining before the next one starts.

    (Nodes started all at once must converge too: that is
    test_nodes_started_together_converge, kept separate so one join bug does
    not hide every other semantic.)
    """
    nodes = []
    for _ in range(count):
        nodes.append(await m.node())
        await m.converged()
    return nodes


def reasons(node: zmesh.Node) -> list[str]:
    return [entry.reason for entry in node.dead_letters]


# -- public surface (no transport) ---------------------------------------

PUBLIC_NAMES = {
    "AddressInUse", "Agent", "AgentExists", "AgentInfo", "AgentNotRegistered", "Backpressure", "Clock", "DEFERRED",
    "DeadLetter", "DeadLetters", "FakeClock", "GatherReply", "Handoff", "HandoffResult", "HandlerError",
    "InvalidMessage", "LivenessConfig", "MeshEvent", "Message", "NoHandler", "NoProvider", "Node", "QosLimits", "Quotas",
    "NodeClosed", "NodeRecord", "PeerLost", "Receipt", "Registry", "SecurityError", "Stream", "SystemClock", "Timeout",
    "Transport", "TransportError", "ZmeshError", "current_trace_id", "keygen", "new_id", "run", "trace_context",
}

ERRORS = [
    "AgentNotRegistered", "NoProvider", "AgentExists", "NoHandler", "Timeout", "InvalidMessage",
    "HandlerError", "PeerLost", "Backpressure", "TransportError", "AddressInUse", "SecurityError", "NodeClosed",
]


def test_public_names_are_pinned_and_exist() -> None:
    assert len(zmesh.__all__) == len(set(zmesh.__all__))
    assert set(zmesh.__all__) == PUBLIC_NAMES
    for name in zmesh.__all__:
        assert getattr(zmesh, name) is not None, name
    namespace: dict[str, Any] = {}
    exec("from zmesh import *", namespace)
    assert set(namespace) - {"__builtins__"} == PUBLIC_NAMES


def test_every_error_derives_from_zmesh_error() -> None:
    for name in ERRORS:
        error = getattr(zmesh, name)
        assert issubclass(error, zmesh.ZmeshError), name
        assert error is getattr(errors_module, name)
    assert issubclass(zmesh.ZmeshError, Exception)
    assert issubclass(zmesh.Timeout, TimeoutError)
    assert issubclass(zmesh.InvalidMessage, ValueError)
    # Nothing else in zmesh.errors is an error we forgot to list.
    defined = {
        name for name, obj in vars(errors_module).items()
        if isinstance(obj, type) and issubclass(obj, zmesh.ZmeshError) and obj is not zmesh.ZmeshError
    }
    assert defined == set(ERRORS)
    err = zmesh.HandlerError("KeyError", "'x'", agent="b")
    assert (err.remote_type, err.remote_message, err.agent) == ("KeyError", "'x'", "b")
    assert str(err) == "KeyError in agent 'b': 'x'"
    # asyncio.wait_for's TimeoutError has no message: no dangling ": "
    assert str(zmesh.HandlerError("TimeoutError", "", agent="b")) == "TimeoutError in agent 'b'"


def _tree(doc: str | None) -> list[str]:
    assert doc is not None
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "ZmeshError")
    tree = [lines[start].strip()]
    for line in lines[start + 1:]:
        match = re.match(r"\s*(│\s*)?([├└])── (\w+)\s+\S", line)
        if not match:
            break
        tree.append(match.group(3))
        if match.group(2) == "└" and not match.group(1):  # the last top-level branch
            break
    return tree


def test_module_docstring_draws_the_error_tree() -> None:
    tree = _tree(zmesh.__doc__)
    assert tree[0] == "ZmeshError"
    assert sorted(tree[1:]) == sorted(ERRORS)
    assert tree == _tree(errors_module.__doc__)
    assert "└── NodeClosed" in (zmesh.__doc__ or "")


# -- send ----------------------------------------------------------------


async def test_send_stamps_sender_target_and_topic(transport: str) -> None:
    clock = FakeClock()
    async with Mesh(transport, clock=clock) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        inbox = Inbox()
        b.add_handler("greet.hello", inbox)
        await m.converged()

        sent = await a.send("b", "greet.hello", {"hi": 1}, priority=1, qos=1)
        await wait_for(lambda: inbox.messages, what="the message")

        [got] = inbox.messages
        assert (got.sender, got.target, got.topic, got.payload) == ("a", "b", "greet.hello", {"hi": 1})
        assert (got.id, got.type, got.priority, got.qos) == (sent.id, "notify", 1, 1)
        assert (got.correlation_id, got.reply_to) == ("", "")
        assert got.timestamp == clock.time() == sent.timestamp
        assert got.trace_id == sent.trace_id != ""  # no trace context: a new trace,
        assert re.fullmatch("[0-9a-f]{32}", got.trace_id)  # with a W3C trace-id
        assert n1.stats()["messages_sent"] == 1
        assert n2.stats()["messages_received"] >= 1


async def test_received_message_round_trips_through_the_envelope(transport: str) -> None:
    async with Mesh(transport) as m:  # the real clock
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        inbox = Inbox()
        b.add_handler("doc.put", inbox)
        await m.converged()
        for i in range(20):
            await a.send("b", "doc.put", {"title": "x", "pages": [1, i]}, ttl=30)
        await wait_for(lambda: len(inbox.messages) == 20)
        for got in inbox.messages:
            envelope = json.loads(json.dumps(got.to_envelope()))
            assert envelope["header"]["sender"] == "a" and envelope["payload"]["title"] == "x"
            assert Message.from_envelope(envelope) == got


async def test_send_to_an_unknown_agent_fails_at_once_and_is_dead_lettered(transport: str) -> None:
    clock = FakeClock()
    async with Mesh(transport, clock=clock) as m:
        n1, n2 = await m.node(), await m.node()
        a = n1.agent("a")
        n2.agent("b")
        await m.converged()

        with pytest.raises(zmesh.AgentNotRegistered):
            await a.send("ghost", "greet.hello", 1)
        with pytest.raises(zmesh.AgentNotRegistered):
            await a.request("ghost", "greet.hello", 2, timeout=10)  # no clock advance needed

        entries = list(n1.dead_letters)
        assert [(e.reason, e.target, e.message.payload, e.message.sender) for e in entries] == [
            ("not_found", "ghost", 1, "a"),
            ("not_found", "ghost", 2, "a"),
        ]
        assert n1.stats().get("messages_sent", 0) == 0
        assert n1.stats().get("requests_sent", 0) == 0
        assert list(n2.dead_letters) == []


INVALID_CASES = {
    "unencodable payload": {"payload": object()},
    "payload over max_payload": {"payload": b"x" * 70_000},
    "priority 6": {"priority": 6},
    "priority -1": {"priority": -1},
    "qos 3": {"qos": 3},
    "negative ttl": {"ttl": -1},
}


@pytest.mark.parametrize("case", list(INVALID_CASES))
async def test_invalid_message_raises_and_sends_nothing(transport: str, case: str) -> None:
    options = dict(INVALID_CASES[case])
    payload = options.pop("payload", "ok")
    async with Mesh(transport, max_payload=65536) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        inbox = Inbox()
        b.add_handler("job.run", inbox)
        await b.subscribe("job.>", inbox)
        await m.converged()

        with pytest.raises(zmesh.InvalidMessage):
            await a.send("b", "job.run", payload, **options)
        with pytest.raises(zmesh.InvalidMessage):
            await a.request("b", "job.run", payload, timeout=5, **options)
        if "qos" not in options:
            with pytest.raises(zmesh.InvalidMessage):
                await a.broadcast("job.run", payload, **options)

        stats = n1.stats()
        assert (stats.get("messages_sent", 0), stats.get("requests_sent", 0), stats.get("broadcasts", 0)) == (0, 0, 0)
        assert stats["pending_requests"] == 0
        # A good message on the same path arrives, and nothing arrived before it.
        await a.send("b", "job.run", "marker")
        await wait_for(lambda: inbox.messages, what="the marker")
        assert inbox.payloads == ["marker"]


async def test_default_payload_limit_is_one_mebibyte(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        inbox = Inbox()
        b.add_handler("blob.put", inbox)
        await m.converged()
        assert n1.max_payload == 1 << 20
        with pytest.raises(zmesh.InvalidMessage):
            await a.send("b", "blob.put", b"x" * (1 << 20))
        assert n2.registry.record(n1.id).max_payload == 1 << 20  # announced in its record
        fits = b"y" * ((1 << 20) - 5 - 200)  # bin32 header: 5 bytes; the other fields: under 200
        await a.send("b", "blob.put", fits)
        await wait_for(lambda: inbox.messages, what="the large message")
        assert inbox.payloads == [fits]


# -- request -------------------------------------------------------------


async def test_request_gets_its_reply_by_correlation_id(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        seen = Inbox()

        @b.on("math.add")
        async def add(msg: Message) -> int:
            seen(msg)
            return int(msg.payload["x"] + msg.payload["y"])

        await m.converged()
        reply = await a.request("b", "math.add", {"x": 1, "y": 2}, timeout=5)
        assert reply.payload == 3
        assert (reply.type, reply.sender, reply.target, reply.status) == ("result", "b", "a", "ok")
        assert reply.correlation_id == seen.messages[0].correlation_id != ""
        assert seen.messages[0].reply_to == "a"


async def test_concurrent_requests_each_get_their_own_answer(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        parked = Parked()
        b.add_handler("calc.square", parked)
        await m.converged()

        gathered = asyncio.ensure_future(
            asyncio.gather(*(a.request("b", "calc.square", i, timeout=10) for i in range(50)))
        )
        await wait_for(lambda: len(parked.requests) == 50, what="50 requests")
        for request in reversed(parked.requests):  # answer out of order
            await b.reply(request, request.payload ** 2)
        replies = await gathered
        assert [r.payload for r in replies] == [i * i for i in range(50)]
        assert len({r.correlation_id for r in replies}) == 50
        assert n1.stats()["pending_requests"] == 0


async def test_a_request_still_queued_when_its_requester_stops_waiting_is_never_handled(transport: str) -> None:
    clock = FakeClock()
    async with Mesh(transport, clock=clock) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b", concurrency=1)
        started: list[int] = []
        release = asyncio.Event()

        async def slow(msg: Message) -> str:
            started.append(msg.payload)
            await release.wait()
            return "done"

        b.add_handler("slow.op", slow)
        await m.converged()

        first = asyncio.ensure_future(a.request("b", "slow.op", 1, timeout=60))
        await wait_for(lambda: started, what="the first request to hold b's only slot")
        second = asyncio.ensure_future(a.request("b", "slow.op", 2, timeout=10))
        await wait_for(lambda: n2.stats()["by_agent"]["b"]["inbox"] == 1, what="the second to wait in b's inbox")
        clock.advance(10)
        with pytest.raises(zmesh.Timeout):
            await second
        clock.advance(0.001)  # past its ttl (the timeout and the ttl end at the same instant)
        release.set()  # the slot frees: the second would start now
        assert (await first).payload == "done"
        await wait_for(lambda: "expired" in reasons(n2), what="the second to expire at b")
        assert started == [1]  # nobody waited for the second any more: never handled
        [expired] = [e for e in n2.dead_letters if e.reason == "expired"]
        assert (expired.message.payload, expired.message.ttl) == (2, 10)


async def test_request_timeout_then_late_reply(transport: str) -> None:
    clock = FakeClock()
    async with Mesh(transport, clock=clock) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        parked = Parked()
        b.add_handler("slow.op", parked)
        await m.converged()

        task = asyncio.ensure_future(a.request("b", "slow.op", 7, timeout=10))
        await wait_for(lambda: parked.requests, what="the handler to see the request")
        clock.advance(9.5)
        assert reasons(n1) == [] and n1.stats()["pending_requests"] == 1
        clock.advance(0.5)
        with pytest.raises(zmesh.Timeout) as info:
            await task
        assert isinstance(info.value, zmesh.ZmeshError)
        assert isinstance(info.value, TimeoutError)
        [entry] = n1.dead_letters
        assert (entry.reason, entry.target, entry.message.payload) == ("timeout", "b", 7)
        assert n1.stats()["pending_requests"] == 0

        await b.reply(parked.requests[0], "too late")
        await wait_for(lambda: n1.stats().get("late_replies", 0) == 1, what="the late reply")
        assert reasons(n1) == ["timeout"]


async def test_request_to_a_topic_without_handler_is_no_handler(transport: str) -> None:
    clock = FakeClock()
    async with Mesh(transport, clock=clock) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        b.add_handler("known.topic", lambda msg: "fine")
        await m.converged()
        with pytest.raises(zmesh.NoHandler):
            await a.request("b", "unknown.topic", timeout=10)
        assert [(e.reason, e.target) for e in n2.dead_letters] == [("no_handler", "b")]
        assert (await a.request("b", "known.topic", timeout=10)).payload == "fine"


@pytest.mark.parametrize("style", ["sync", "async"])
async def test_handler_error_is_contained(transport: str, style: str, caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()  # never advanced: the error must come back at once
    async with Mesh(transport, clock=clock) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")

        if style == "sync":
            def boom(msg: Message) -> None:
                raise ValueError(f"boom {msg.payload}")
        else:
            async def boom(msg: Message) -> None:  # type: ignore[misc]
                await asyncio.sleep(0)  # really suspends: runs as a task
                raise ValueError(f"boom {msg.payload}")

        b.add_handler("fail.now", boom)
        b.add_handler("ok.now", lambda msg: "still here")
        await m.converged()

        with caplog.at_level(logging.ERROR, logger="zmesh"):
            with pytest.raises(zmesh.HandlerError) as info:
                await a.request("b", "fail.now", 42, timeout=10)
        assert (info.value.remote_type, info.value.remote_message) == ("ValueError", "boom 42")
        assert info.value.agent == "b"
        assert (await a.request("b", "ok.now", timeout=10)).payload == "still here"
        logged = [r for r in caplog.records if r.name == "zmesh" and r.levelno >= logging.ERROR]
        assert any("boom 42" in r.getMessage() for r in logged), [r.getMessage() for r in logged]
        assert [(e.reason, e.target) for e in n2.dead_letters] == [("handler_error", "b")]
        assert n2.stats()["handler_errors"] == 1


# -- delegate ------------------------------------------------------------


async def test_delegate_keeps_the_correlation_id_end_to_end(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, n3 = await start_nodes(m, 3)
        a, b, c = n1.agent("a"), n2.agent("b"), n3.agent("c")
        at_b, at_c, back_at_b = Inbox(), Inbox(), Inbox()

        @b.on("plan.solve")
        async def route(msg: Message) -> Message:
            at_b(msg)
            answer = await b.delegate("c", msg, timeout=10)
            back_at_b(answer)
            return answer

        @c.on("plan.solve")
        def solve(msg: Message) -> dict[str, Any]:
            at_c(msg)
            return {"answer": msg.payload["q"] * 2, "by": "c"}

        await m.converged()
        reply = await a.request("b", "plan.solve", {"q": 21}, timeout=10)

        assert reply.payload == {"answer": 42, "by": "c"}
        assert reply.sender == "b"
        [seen_c] = at_c.messages
        assert (seen_c.sender, seen_c.target, seen_c.reply_to) == ("b", "c", "b")
        assert seen_c.payload == {"q": 21}
        assert at_b.messages[0].sender == "a"
        assert reply.correlation_id == at_b.messages[0].correlation_id == seen_c.correlation_id
        [answer] = back_at_b.messages
        assert (answer.sender, answer.payload) == ("c", {"answer": 42, "by": "c"})
        assert answer.correlation_id == reply.correlation_id


# -- handoff -------------------------------------------------------------


async def test_handoff_accepted_moves_ownership(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        offers: list[zmesh.Handoff] = []

        @b.on_handoff
        def take(offer: zmesh.Handoff) -> bool:
            offers.append(offer)
            return True

        await m.converged()
        a.claim("task-1")
        assert a.tasks == {"task-1"}
        result = await a.handoff("b", "task-1", {"step": 3}, artifacts=["s3://bucket/notes.md"], timeout=5)
        assert (result.task_id, result.target, result.accepted) == ("task-1", "b", True)
        assert (a.tasks, b.tasks) == (frozenset(), frozenset({"task-1"}))
        [offer] = offers
        assert (offer.task_id, offer.sender, offer.context) == ("task-1", "a", {"step": 3})
        assert offer.artifacts == ("s3://bucket/notes.md",)


@pytest.mark.parametrize(("answer", "reason"), [(False, "refused"), ("busy until noon", "busy until noon")])
async def test_handoff_refused_leaves_ownership(transport: str, answer: object, reason: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        b.on_handoff(lambda offer: answer)
        await m.converged()
        a.claim("task-2")
        result = await a.handoff("b", "task-2", timeout=5)
        assert (result.accepted, result.reason) == (False, reason)
        assert (a.tasks, b.tasks) == (frozenset({"task-2"}), frozenset())


async def test_handoff_without_handler_is_refused(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        await m.converged()
        a.claim("task-3")
        result = await a.handoff("b", "task-3", timeout=5)
        assert result.accepted is False
        assert "takes no handoffs" in result.reason
        assert (a.tasks, b.tasks) == (frozenset({"task-3"}), frozenset())


async def test_handoff_handler_error_is_contained(transport: str, caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()  # never advanced: the error must come back at once
    async with Mesh(transport, clock=clock) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")

        @b.on_handoff
        def choke(offer: zmesh.Handoff) -> bool:
            raise KeyError(f"no room for {offer.task_id}")

        b.add_handler("ok.now", lambda msg: "still here")
        await m.converged()
        a.claim("task-5")
        with caplog.at_level(logging.ERROR, logger="zmesh"):
            with pytest.raises(zmesh.HandlerError) as info:
                await a.handoff("b", "task-5", timeout=10)
        assert info.value.remote_type == "KeyError"
        assert "no room for task-5" in info.value.remote_message
        assert (a.tasks, b.tasks) == (frozenset({"task-5"}), frozenset())
        assert (await a.request("b", "ok.now", timeout=10)).payload == "still here"
        assert [(e.reason, e.target) for e in n2.dead_letters] == [("handler_error", "b")]
        logged = [r.getMessage() for r in caplog.records if r.name == "zmesh" and r.levelno >= logging.ERROR]
        assert any("no room for task-5" in line for line in logged), logged


async def test_handoff_timeout_leaves_ownership(transport: str) -> None:
    clock = FakeClock()
    async with Mesh(transport, clock=clock) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        offers: list[zmesh.Handoff] = []
        never = asyncio.Event()

        @b.on_handoff
        async def ponder(offer: zmesh.Handoff) -> bool:
            offers.append(offer)
            await never.wait()
            return True

        await m.converged()
        a.claim("task-4")
        task = asyncio.ensure_future(a.handoff("b", "task-4", timeout=10))
        await wait_for(lambda: offers, what="the offer")
        clock.advance(10)  # the offer's ttl: the offerer still waits for a late answer
        await asyncio.sleep(0.05)
        assert not task.done()
        clock.advance(HANDOFF_GRACE)
        with pytest.raises(zmesh.Timeout):
            await task
        assert (a.tasks, b.tasks) == (frozenset({"task-4"}), frozenset())


# -- pub/sub -------------------------------------------------------------


async def test_broadcast_wildcards_across_three_nodes(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, n3 = await start_nodes(m, 3)
        p, local = n1.agent("p"), n1.agent("local")
        s1, s2 = n2.agent("s1"), n3.agent("s2")
        inbox = {name: Inbox() for name in ("p", "local", "s1", "s2")}
        await m.converged()
        await p.subscribe("research.>", inbox["p"], inline=True)  # a sender never gets its own broadcast
        await local.subscribe("research.>", inbox["local"], inline=True)
        await s1.subscribe("research.*", inbox["s1"], inline=True)
        await s2.subscribe("*.found", inbox["s2"], inline=True)
        for agent in (local, s1, s2):
            await agent.subscribe("sync.done", inbox[agent.id], inline=True)
        assert s2.subscriptions == {"*.found", "sync.done"}

        counts = [
            await p.broadcast("research.found", 1),
            await p.broadcast("research.found.paper", 2),
            await p.broadcast("x.found", 3),
            await p.broadcast("research", 4),
            await p.broadcast("other.lost", 5),
        ]
        assert counts == [3, 1, 1, 0, 0]
        assert await p.broadcast("sync.done") == 3
        await wait_for(lambda: all("sync.done" in inbox[a].topics for a in ("local", "s1", "s2")))

        assert inbox["local"].payloads == [1, 2, None]
        assert inbox["s1"].payloads == [1, None]
        assert inbox["s2"].payloads == [1, 3, None]
        assert inbox["p"].messages == []
        got = inbox["s2"].messages[0]
        assert (got.sender, got.target, got.topic) == ("p", "", "research.found")


async def test_subscribe_twice_is_one_subscription_and_unsubscribe_drops_it(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        p, s = n1.agent("p"), n2.agent("s")
        alerts, sync = Inbox(), Inbox()
        await m.converged()
        await s.subscribe("alerts.*", alerts)
        await s.subscribe("alerts.*", alerts)
        await s.subscribe("sync.done", sync)
        assert s.subscriptions == {"alerts.*", "sync.done"}

        assert await p.broadcast("alerts.fire", "one") == 1
        await p.broadcast("sync.done")
        await wait_for(lambda: sync.messages)
        assert alerts.payloads == ["one"]

        await s.unsubscribe("alerts.*")
        assert s.subscriptions == {"sync.done"}
        assert await p.broadcast("alerts.fire", "two") == 0
        await p.broadcast("sync.done")
        await wait_for(lambda: len(sync.messages) == 2)
        assert alerts.payloads == ["one"]


async def test_failing_subscriber_is_dead_lettered_and_fan_out_goes_on(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, n3 = await start_nodes(m, 3)
        p = n1.agent("p")
        bad, good1 = n2.agent("bad"), n2.agent("good1")  # bad comes first on its node
        good2 = n3.agent("good2")
        inbox1, inbox2 = Inbox(), Inbox()

        def explode(msg: Message) -> None:
            raise RuntimeError("subscriber exploded")

        await m.converged()
        await bad.subscribe("news.*", explode)
        await good1.subscribe("news.*", inbox1)
        await good2.subscribe("news.*", inbox2)

        assert await p.broadcast("news.today", "n1") == 3
        await wait_for(lambda: inbox1.messages and inbox2.messages)
        await wait_for(lambda: len(n2.dead_letters) == 1)
        [entry] = n2.dead_letters
        assert (entry.reason, entry.target, entry.message.payload) == ("handler_error", "bad", "n1")
        assert (inbox1.payloads, inbox2.payloads) == (["n1"], ["n1"])
        # ...and the failing subscriber did not stop later broadcasts either.
        assert await p.broadcast("news.today", "n2") == 3
        await wait_for(lambda: inbox1.payloads == ["n1", "n2"] and inbox2.payloads == ["n1", "n2"])
        await wait_for(lambda: len(n2.dead_letters) == 2)


# -- dead letters --------------------------------------------------------


async def test_dead_letters_are_a_bounded_ring(transport: str) -> None:
    clock = FakeClock()
    async with Mesh(transport, clock=clock, dead_letter_capacity=3) as m:
        n1 = await m.node()
        a = n1.agent("a")
        for i in range(5):
            with pytest.raises(zmesh.AgentNotRegistered):
                await a.send(f"ghost{i}", "lost.item", i)
            clock.advance(1)
        entries = list(n1.dead_letters)
        assert [e.target for e in entries] == ["ghost2", "ghost3", "ghost4"]
        assert (len(n1.dead_letters), n1.dead_letters.evicted) == (3, 2)
        first = entries[0]
        assert (first.reason, first.message.payload, first.message.sender) == ("not_found", 2, "a")
        assert first.time == clock.time() - 3
        assert first.trace_id == first.message.trace_id != ""
        assert n1.stats()["dead_letters"] == 5
        n1.dead_letters.clear()
        assert list(n1.dead_letters) == [] and len(n1.dead_letters) == 0


async def test_redeliver_reaches_a_target_registered_later(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a = n1.agent("a")
        await m.converged()
        with pytest.raises(zmesh.AgentNotRegistered):
            await a.send("late", "job.run", "hello")
        [entry] = n1.dead_letters

        late = n2.agent("late")
        inbox = Inbox()
        late.add_handler("job.run", inbox)
        await m.converged()
        await n1.dead_letters.redeliver(entry)
        await wait_for(lambda: inbox.messages, what="the redelivered message")
        assert [(msg.sender, msg.topic, msg.payload) for msg in inbox.messages] == [("a", "job.run", "hello")]
        assert list(n1.dead_letters) == []


async def test_failed_redelivery_leaves_the_ring_as_it_was(transport: str) -> None:
    async with Mesh(transport) as m:
        n1 = await m.node()
        a = n1.agent("a")
        with pytest.raises(zmesh.AgentNotRegistered):
            await a.send("late", "job.run", "hello")
        [entry] = n1.dead_letters
        with pytest.raises(zmesh.AgentNotRegistered):
            await n1.dead_letters.redeliver(entry)
        assert list(n1.dead_letters) == [entry]


async def test_redeliver_a_dead_letter_recorded_at_the_receiving_node(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, n3 = await start_nodes(m, 3)
        a, x = n1.agent("a"), n2.agent("x")
        await m.converged()
        await a.send("x", "job.run", "hello")
        await x.close()  # x leaves before n2 gets to the message
        await wait_for(lambda: reasons(n2) == ["not_found"], what="the dead letter at n2")
        [entry] = n2.dead_letters

        x_again = n3.agent("x")
        inbox = Inbox()
        x_again.add_handler("job.run", inbox)
        await m.converged()
        # n2 cannot send as a's node (n3 would rightly drop it as spoofed):
        # a clear error, and the entry stays for a retry from the right place.
        with pytest.raises(zmesh.InvalidMessage, match="not hosted here"):
            await n2.dead_letters.redeliver(entry)
        assert list(n2.dead_letters) == [entry]
        assert inbox.messages == []
        # Redelivered from the sender's own node, it arrives intact.
        n1.dead_letters.add(entry)
        await n1.dead_letters.redeliver(entry)
        await wait_for(lambda: inbox.messages, what="the redelivered message")
        assert [(msg.sender, msg.payload) for msg in inbox.messages] == [("a", "hello")]


# -- observer ------------------------------------------------------------


async def test_one_receipt_per_interaction(transport: str) -> None:
    clock = FakeClock()
    async with Mesh(transport, clock=clock) as m:
        n1, n2 = await m.node(), await m.node()
        a, b, c = n1.agent("a"), n2.agent("b"), n2.agent("c")
        parked = Parked()
        b.add_handler("echo.it", lambda msg: msg.payload)
        b.add_handler("fail.now", lambda msg: 1 / 0)
        b.add_handler("slow.op", parked)
        c.add_handler("echo.it", lambda msg: ("c", msg.payload))

        @b.on("pass.on")
        async def pass_on(msg: Message) -> Message:
            return await b.delegate("c", msg, topic="echo.it", timeout=10)

        b.on_handoff(lambda offer: True)
        await c.subscribe("news.*", Inbox())
        await m.converged()
        at_n1: list[zmesh.Receipt] = []
        at_n2: list[zmesh.Receipt] = []
        n1.observe(at_n1.append)
        n2.observe(at_n2.append)

        def last() -> tuple[Any, ...]:
            r = at_n1[-1]
            return (r.kind, r.outcome, r.sender, r.target, r.topic, r.error, r.latency)

        await a.send("b", "echo.it", 1)
        assert len(at_n1) == 1 and last() == ("send", "success", "a", "b", "echo.it", "", 0.0)

        with pytest.raises(zmesh.AgentNotRegistered):
            await a.send("ghost", "echo.it")
        assert len(at_n1) == 2 and last()[:2] == ("send", "not_found")

        reply = await a.request("b", "echo.it", 2, timeout=10)
        assert len(at_n1) == 3 and last() == ("request", "success", "a", "b", "echo.it", "", 0.0)
        assert at_n1[-1].correlation_id == reply.correlation_id

        with pytest.raises(zmesh.HandlerError):
            await a.request("b", "fail.now", timeout=10)
        assert len(at_n1) == 4 and last()[:2] == ("request", "failure")
        assert at_n1[-1].error == "HandlerError"

        task = asyncio.ensure_future(a.request("b", "slow.op", timeout=10))
        await wait_for(lambda: parked.requests)
        clock.advance(10)
        with pytest.raises(zmesh.Timeout):
            await task
        assert len(at_n1) == 5 and last() == ("request", "timeout", "a", "b", "slow.op", "Timeout", 10.0)

        reply = await a.request("b", "pass.on", 3, timeout=10)
        assert reply.payload == ["c", 3]
        assert len(at_n1) == 6 and last()[:2] == ("request", "success")

        result = await a.handoff("b", "task-9", timeout=10)
        assert result.accepted
        assert len(at_n1) == 7 and last()[:5] == ("handoff", "success", "a", "b", "zmesh.handoff")

        assert await a.broadcast("news.today", 4) == 1
        assert len(at_n1) == 8 and last()[:5] == ("broadcast", "success", "a", "", "news.today")
        assert at_n1[-1].reached == 1

        # The delegation was b's interaction, recorded by b's node only.
        assert [(r.kind, r.outcome, r.sender, r.target, r.topic) for r in at_n2] == [
            ("delegate", "success", "b", "c", "echo.it")
        ]
        assert at_n2[0].correlation_id == reply.correlation_id


async def test_a_cancelled_request_is_a_cancelled_receipt_and_no_dead_letter(transport: str) -> None:
    clock = FakeClock()
    async with Mesh(transport, clock=clock) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        parked = Parked()
        b.add_handler("slow.op", parked)
        await m.converged()
        receipts: list[zmesh.Receipt] = []
        n1.observe(receipts.append)

        task = asyncio.ensure_future(a.request("b", "slow.op", timeout=10))
        await wait_for(lambda: parked.requests)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        clock.advance(60)  # the request's timer is gone too
        assert [(r.kind, r.outcome, r.error) for r in receipts] == [("request", "cancelled", "CancelledError")]
        assert list(n1.dead_letters) == []
        assert n1.stats()["pending_requests"] == 0
        # A reply to the cancelled request (a handler that answers later, so no Task to cancel) is a late reply.
        await b.reply(parked.requests[0], "whatever")
        await wait_for(lambda: n1.stats().get("late_replies", 0) == 1)
        assert len(receipts) == 1


# -- trace ids -----------------------------------------------------------


async def test_trace_id_follows_the_whole_chain(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, n3 = await start_nodes(m, 3)
        a, b, c, d = n1.agent("a"), n2.agent("b"), n3.agent("c"), n3.agent("d")
        seen: dict[str, tuple[str, str]] = {}

        @b.on("trace.start")
        async def start(msg: Message) -> Any:
            seen["b"] = (zmesh.current_trace_id(), msg.trace_id)
            step = await b.request("c", "trace.step", timeout=10)
            seen["b after await"] = (zmesh.current_trace_id(), step.trace_id)
            try:
                await b.send("ghost", "trace.lost")
            except zmesh.AgentNotRegistered:
                pass
            return (await b.delegate("d", msg, timeout=10)).payload

        @c.on("trace.step")
        def step(msg: Message) -> str:
            seen["c"] = (zmesh.current_trace_id(), msg.trace_id)
            return "stepped"

        @d.on("trace.start")
        def finish(msg: Message) -> str:
            seen["d"] = (zmesh.current_trace_id(), msg.trace_id)
            return "done"

        await m.converged()
        with zmesh.trace_context("t-1") as trace_id:
            assert trace_id == "t-1" == zmesh.current_trace_id()
            reply = await a.request("b", "trace.start", timeout=10)
            with pytest.raises(zmesh.AgentNotRegistered):
                await a.send("ghost", "trace.lost")
        assert zmesh.current_trace_id() == ""

        assert reply.payload == "done" and reply.trace_id == "t-1"
        assert seen == {hop: ("t-1", "t-1") for hop in ("b", "b after await", "c", "d")}
        assert [(e.reason, e.trace_id) for e in n1.dead_letters] == [("not_found", "t-1")]
        assert [(e.reason, e.trace_id) for e in n2.dead_letters] == [("not_found", "t-1")]

        # Outside any trace context a request starts a new trace: a new W3C trace-id.
        await a.request("b", "trace.start", timeout=10)
        assert seen["b"][0] == seen["b"][1] == seen["d"][1] != "t-1"


# -- TTL -----------------------------------------------------------------


async def test_expired_message_is_dead_lettered_at_the_receiver(transport: str) -> None:
    clock = FakeClock()
    async with Mesh(transport, clock=clock) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        inbox = Inbox()
        b.add_handler("ttl.check", inbox)
        await m.converged()

        await a.send("b", "ttl.check", "stale", ttl=1)
        clock.advance(2)  # before the receiver gets to run
        await a.send("b", "ttl.check", "fresh", ttl=1)
        await wait_for(lambda: inbox.messages, what="the fresh message")
        assert inbox.payloads == ["fresh"]
        [entry] = n2.dead_letters
        assert (entry.reason, entry.target, entry.message.payload) == ("expired", "b", "stale")
        assert entry.time == clock.time()
        assert list(n1.dead_letters) == []


async def test_expired_request_fails_at_once(transport: str) -> None:
    ahead = FakeClock()
    ahead.advance(2)  # the receiver's clock is 2 s past the sender's
    async with Mesh(transport) as m:
        n1, n2 = await m.node(clock=FakeClock()), await m.node(clock=ahead)
        a, b = n1.agent("a"), n2.agent("b")
        inbox = Inbox()
        b.add_handler("ttl.check", inbox)
        await m.converged()
        with pytest.raises(zmesh.Timeout):
            await a.request("b", "ttl.check", "stale", ttl=1, timeout=10)
        assert inbox.messages == []
        assert reasons(n2) == ["expired"]
        reply = await a.request("b", "ttl.check", "fresh", ttl=5, timeout=10)
        assert reply.status == "ok" and inbox.payloads == ["fresh"]


# -- registry ------------------------------------------------------------


async def test_registry_views_agree_on_every_node(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, n3 = await start_nodes(m, 3)
        n1.agent("a", capabilities=("math.add",))
        n2.agent("b", capabilities=("math.add", "web.search"))
        n3.agent("c")
        await m.converged()
        for node in (n1, n2, n3):
            agents = node.registry.agents()
            assert set(agents) == {"a", "b", "c"}
            assert agents["b"].capabilities == ("math.add", "web.search")
            assert agents["c"].node_id == n3.id
            assert [r.node_id for r in node.registry.nodes()] == sorted([n1.id, n2.id, n3.id])
            assert node.registry.find(capability="math.add") == ["a", "b"]
            assert node.registry.find(capability="web.search") == ["b"]
            assert node.registry.find(capability="nothing") == []
            assert [node.registry.node_of(x) for x in ("a", "b", "c", "ghost")] == [n1.id, n2.id, n3.id, None]
        assert list(n1.agents) == ["a"]


async def test_nodes_started_together_converge(transport: str) -> None:
    async with Mesh(transport) as m:
        nodes = [await m.node() for _ in range(3)]  # no waiting in between
        for i, node in enumerate(nodes):
            node.agent(f"x{i}")
        await m.converged()
        for node in nodes:
            assert sorted(node.peers) == sorted(n.id for n in nodes if n is not node)
            assert set(node.registry.agents()) == {"x0", "x1", "x2"}


def test_default_node_names_are_unique() -> None:
    # The default name is the node's id in the mesh; two nodes of one process
    # with the same default name refuse each other ("hello from our own id").
    names = {zmesh.Node("m", transport="inproc").id for _ in range(5000)}
    assert len(names) == 5000


async def test_agent_id_is_unique_across_the_mesh(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a = n1.agent("a")
        await m.converged()
        with pytest.raises(zmesh.AgentExists):
            n1.agent("a")
        with pytest.raises(zmesh.AgentExists):
            n2.agent("a")
        assert n1.agents == {"a": a} and n2.agents == {}
        await a.close()
        await wait_for(lambda: n2.registry.node_of("a") is None)
        assert n2.agent("a").id == "a"  # free again once its owner let it go


async def test_events_report_joins_and_leaves(transport: str) -> None:
    async with Mesh(transport) as m:
        n1 = await m.node()
        events = n1.events()
        try:
            n2 = await m.node()
            n2.agent("b")
            await m.converged()
            seen = await collect_events(events, {("peer_joined", n2.id, ""), ("agent_joined", n2.id, "b")})
            assert {kind for kind, _, _ in seen} <= set(zmesh.registry.EVENT_KINDS)

            await n2.close()
            await collect_events(events, {("agent_left", n2.id, "b"), ("peer_left", n2.id, "")})
        finally:
            await events.aclose()  # type: ignore[attr-defined]


async def test_a_node_closing_while_its_handler_runs_tells_the_requester_at_once(transport: str) -> None:
    """The requester hears PeerLost when the node starts closing, not when the
    handler it waits for ends (a plain handler in a thread runs on a while)."""
    import threading

    async with Mesh(transport) as m:
        n1, n2 = await start_nodes(m, 2)
        a, c = n1.agent("a"), n2.agent("c")
        started, release = threading.Event(), threading.Event()

        def slow(msg: Message) -> str:  # a blocking call in a worker thread
            started.set()
            release.wait(10)
            return "done"

        c.add_handler("slow.op", slow)
        await m.converged()
        task = asyncio.ensure_future(a.request("c", "slow.op", timeout=20))
        await wait_for(started.is_set)
        closing = asyncio.ensure_future(n2.close())
        try:
            with pytest.raises(zmesh.PeerLost):
                await asyncio.wait_for(task, 5)  # the handler is still blocked
            assert not release.is_set()
        finally:
            release.set()
            await closing


async def test_closing_a_node_removes_its_agents_and_fails_requests_to_it(transport: str) -> None:
    clock = FakeClock()  # never advanced: the failure is not a timeout
    async with Mesh(transport, clock=clock) as m:
        n1, n2, n3 = await start_nodes(m, 3)
        a = n1.agent("a")
        n2.agent("b")
        c = n3.agent("c")
        parked = Parked()
        c.add_handler("slow.op", parked)
        await m.converged()

        task = asyncio.ensure_future(a.request("c", "slow.op", timeout=10))
        await wait_for(lambda: parked.requests)
        await n3.close()
        with pytest.raises(zmesh.PeerLost) as info:
            await task
        assert not isinstance(info.value, TimeoutError)
        assert reasons(n1) == ["peer_lost"]

        def forgotten() -> bool:
            return all(
                "c" not in node.registry.agents() and n3.id not in node.registry
                for node in (n1, n2)
            )

        await wait_for(forgotten, what="c to leave every registry")
        assert set(n2.registry.agents()) == {"a", "b"}
        with pytest.raises(zmesh.AgentNotRegistered):
            await a.send("c", "slow.op")
