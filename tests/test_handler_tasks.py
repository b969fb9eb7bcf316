"""Handlers run as ordinary asyncio Tasks, and whatever they raise is contained.

An ``async def`` handler runs inside its own Task from its first line, so
``asyncio.timeout``, ``TaskGroup``, contextvars, anyio and httpx work there as
anywhere else. A handler that raises (``CancelledError``, ``KeyboardInterrupt``
and ``SystemExit`` included) leaves its node serving and its caller's loop
running; the requester gets ``HandlerError`` at once. Every test runs on both
transports, with the requester and the handler on two different nodes. The
containment tests run their own ``asyncio.run`` so that an exception escaping
it fails one test instead of interrupting pytest.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import logging
import sys
import time
from typing import Any, AsyncIterator, Callable

import anyio
import httpx
import pytest

import zmesh
from zmesh import Message

from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(60)

needs_311 = pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout and TaskGroup are 3.11+")

Handler = Callable[[Message], Any]

_seen: contextvars.ContextVar[Any] = contextvars.ContextVar("test_handler_tasks_seen", default=None)


@contextlib.asynccontextmanager
async def pair(transport: str, handlers: dict[str, Handler]) -> AsyncIterator[tuple[zmesh.Agent, zmesh.Node]]:
    """Agent "a" on one node; agent "b", serving ``handlers``, on another (yielded too)."""
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        for topic, handler in handlers.items():
            b.add_handler(topic, handler)
        await m.converged()
        yield a, n2


async def ask(a: zmesh.Agent, topic: str, payload: Any = None, **kwargs: Any) -> Any:
    return (await a.request("b", topic, payload, timeout=10, **kwargs)).payload


@contextlib.asynccontextmanager
async def http_server(answer: bool) -> AsyncIterator[str]:
    """An HTTP server on 127.0.0.1 that answers "hello" and closes, or holds every connection open."""
    held: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not answer:
            held.append(writer)  # accepted, never answered; closed on exit
            return
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.close()
        for writer in held:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        await server.wait_closed()


# -- the handler is a Task ------------------------------------------------


async def test_an_async_handler_is_one_task_across_its_awaits(transport: str) -> None:
    tasks: list[asyncio.Task[Any] | None] = []

    async def where(msg: Message) -> str:
        tasks.append(asyncio.current_task())
        await asyncio.sleep(0)
        tasks.append(asyncio.current_task())
        return "here"

    async with pair(transport, {"where": where}) as (a, _):
        assert await ask(a, "where") == "here"
    assert len(tasks) == 2 and tasks[0] is not None
    assert tasks[0] is tasks[1]
    assert tasks[0] is not asyncio.current_task()


async def test_a_handler_that_never_suspends_still_answers(transport: str) -> None:
    async def at_once(msg: Message) -> list[Any]:
        return [msg.payload + 1, asyncio.current_task() is not None]

    async with pair(transport, {"at.once": at_once}) as (a, _):
        replies = await asyncio.gather(*(ask(a, "at.once", i) for i in range(20)))
    assert replies == [[i + 1, True] for i in range(20)]


@needs_311
async def test_asyncio_timeout_works_in_a_handler(transport: str) -> None:
    async def bounded(msg: Message) -> list[str]:
        outcomes = []
        async with asyncio.timeout(5):
            await asyncio.sleep(0)
            outcomes.append("in time")
        try:
            async with asyncio.timeout(0.01):
                await asyncio.Event().wait()
        except TimeoutError:
            outcomes.append("timed out")
        return outcomes

    async with pair(transport, {"bounded": bounded}) as (a, _):
        assert await ask(a, "bounded") == ["in time", "timed out"]


async def test_asyncio_wait_for_works_in_a_handler(transport: str) -> None:
    async def bounded(msg: Message) -> list[str]:
        outcomes = [await asyncio.wait_for(asyncio.sleep(0, result="in time"), 5)]
        try:
            await asyncio.wait_for(asyncio.Event().wait(), 0.01)
        except asyncio.TimeoutError:
            outcomes.append("timed out")
        return outcomes

    async with pair(transport, {"bounded": bounded}) as (a, _):
        assert await ask(a, "bounded") == ["in time", "timed out"]


async def double(x: int) -> int:
    await asyncio.sleep(0)
    return 2 * x


@needs_311
async def test_a_task_group_works_in_a_handler(transport: str) -> None:
    async def grouped(msg: Message) -> list[int]:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(double(x)) for x in msg.payload]
        return [t.result() for t in tasks]

    async with pair(transport, {"grouped": grouped}) as (a, _):
        assert await ask(a, "grouped", [1, 2]) == [2, 4]


async def test_gather_of_sub_tasks_works_in_a_handler(transport: str) -> None:
    async def gathered(msg: Message) -> list[int]:
        return list(await asyncio.gather(double(msg.payload[0]), double(msg.payload[1])))

    async with pair(transport, {"gathered": gathered}) as (a, _):
        assert await ask(a, "gathered", [1, 2]) == [2, 4]


async def test_a_context_var_set_in_a_handler_does_not_leak(transport: str) -> None:
    async def remember(msg: Message) -> Any:
        before = _seen.get()
        _seen.set(msg.payload)
        await asyncio.sleep(0)
        return [before, _seen.get()]

    async with pair(transport, {"remember": remember}) as (a, _):
        assert await ask(a, "remember", "first") == [None, "first"]
        assert await ask(a, "remember", "second") == [None, "second"]
    assert _seen.get() is None


async def test_a_handler_that_waited_in_the_inbox_does_not_see_the_previous_ones_context(transport: str) -> None:
    """With the agent's one slot taken, the next request waits and starts as the first ends,
    from the node's context, not from the context of the handler that ended."""
    gate = asyncio.Event()

    async def job(msg: Message) -> Any:
        before = _seen.get()
        _seen.set(f"set by job {msg.payload}")
        await gate.wait()
        return before

    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b", concurrency=1)
        b.add_handler("job", job)
        await m.converged()
        asks = [asyncio.ensure_future(a.request("b", "job", i, timeout=10)) for i in range(3)]
        await wait_for(lambda: n2.stats()["by_agent"]["b"]["inbox"] == 2, 10, "two requests waiting")
        gate.set()
        replies = await asyncio.gather(*asks)
    assert [r.payload for r in replies] == [None, None, None]


async def test_the_requesters_context_vars_do_not_reach_a_handler(transport: str) -> None:
    async def peek(msg: Message) -> Any:
        return _seen.get()

    async with pair(transport, {"peek": peek}) as (a, _):
        token = _seen.set("the requester's")
        try:
            assert await ask(a, "peek") is None  # the same on every transport: nothing travels but the message
        finally:
            _seen.reset(token)


async def test_a_sender_on_the_same_node_does_not_pass_its_context_vars(transport: str) -> None:
    """Agents of one node: neither the API caller's nor a sending handler's context variables
    reach the handler (the guide: each starts from the node's context, never the sender's)."""
    async with Mesh(transport) as m:
        node = await m.node()
        client, front, back = node.agent("client"), node.agent("front"), node.agent("back")

        async def peek(msg: Message) -> Any:
            return _seen.get()

        async def ask(msg: Message) -> Any:
            if msg.payload == "after an await":
                await asyncio.sleep(0)
            _seen.set("front's")
            return (await front.request("back", "peek", None, timeout=5)).payload

        back.add_handler("peek", peek)
        front.add_handler("ask", ask)
        for when in ("in its first step", "after an await"):
            assert (await client.request("front", "ask", when, timeout=5)).payload is None, when
        token = _seen.set("the caller's")
        try:
            assert (await client.request("back", "peek", None, timeout=5)).payload is None
        finally:
            _seen.reset(token)


async def test_the_trace_id_is_current_in_a_handler(transport: str) -> None:
    async def traced(msg: Message) -> list[str]:
        first = zmesh.current_trace_id()
        await asyncio.sleep(0)
        return [first, zmesh.current_trace_id()]

    async with pair(transport, {"traced": traced}) as (a, _):
        assert await ask(a, "traced", trace_id="t-handler-1") == ["t-handler-1", "t-handler-1"]
        assert await ask(a, "traced", trace_id="t-handler-2") == ["t-handler-2", "t-handler-2"]


async def test_anyio_works_in_a_handler(transport: str) -> None:
    async def with_anyio(msg: Message) -> list[int]:
        await anyio.sleep(0)
        results: list[int] = []

        async def add(x: int) -> None:
            await anyio.sleep(0)
            results.append(x)

        async with anyio.create_task_group() as group:
            for x in msg.payload:
                group.start_soon(add, x)
        return sorted(results)

    async with pair(transport, {"anyio": with_anyio}) as (a, _):
        assert await ask(a, "anyio", [3, 1, 2]) == [1, 2, 3]


async def test_httpx_works_in_a_handler(transport: str) -> None:
    async with http_server(answer=True) as url:

        async def fetch(msg: Message) -> list[str]:
            async with httpx.AsyncClient(trust_env=False) as client:
                direct = await client.get(url)  # in the handler's own Task
                bounded = await asyncio.wait_for(client.get(url), 5)  # in a Task of wait_for's
            return [direct.text, bounded.text]

        async with pair(transport, {"fetch": fetch}) as (a, _):
            assert await ask(a, "fetch") == ["hello", "hello"]


async def test_an_httpx_timeout_in_a_handler_reaches_the_requester(transport: str) -> None:
    async with http_server(answer=False) as url:

        async def fetch(msg: Message) -> str:
            async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(5.0, read=0.2)) as client:
                return (await client.get(url)).text

        async with pair(transport, {"fetch": fetch}) as (a, _):
            started = time.monotonic()
            with pytest.raises(zmesh.HandlerError) as info:
                await ask(a, "fetch")
            assert time.monotonic() - started < 5
    assert info.value.remote_type == "ReadTimeout"


# -- whatever a handler raises is contained -------------------------------

STYLES = ["def", "async def", "async def, after an await"]


def raising(style: str, exc: BaseException) -> Handler:
    """A handler of ``style`` that raises ``exc``."""
    if style == "def":

        def handler(msg: Message) -> None:
            raise exc

    elif style == "async def":

        async def handler(msg: Message) -> None:  # type: ignore[misc]
            raise exc

    else:

        async def handler(msg: Message) -> None:  # type: ignore[misc]
            await asyncio.sleep(0)
            raise exc

    return handler


def assert_contained(transport: str, handler: Handler, remote_type: str, remote_message: str = "") -> None:
    """The requester gets HandlerError at once and the node still serves.

    Runs under its own ``asyncio.run``: an exception escaping the node would
    end it, and fails the test here rather than interrupting the whole run.
    """

    async def scenario() -> None:
        async with pair(transport, {"fail.now": handler, "ok.now": lambda msg: "still here"}) as (a, _):
            started = time.monotonic()
            with pytest.raises(zmesh.HandlerError) as info:
                await ask(a, "fail.now")
            assert time.monotonic() - started < 5, "the requester waited for its timeout"
            assert (info.value.remote_type, info.value.remote_message) == (remote_type, remote_message)
            assert await ask(a, "ok.now") == "still here"

    try:
        asyncio.run(asyncio.wait_for(scenario(), 30))
    except (KeyboardInterrupt, SystemExit) as exc:
        pytest.fail(f"{exc!r} escaped the handler and ended asyncio.run")


@pytest.mark.parametrize("style", ["def", "async def"])
def test_cancelled_error_raised_before_the_first_await_is_contained(transport: str, style: str) -> None:
    assert_contained(transport, raising(style, asyncio.CancelledError()), "CancelledError")


def test_cancelled_error_raised_after_an_await_is_contained(transport: str) -> None:
    handler = raising("async def, after an await", asyncio.CancelledError())
    assert_contained(transport, handler, "CancelledError")


@pytest.mark.parametrize("style", STYLES)
def test_keyboard_interrupt_in_a_handler_is_contained(transport: str, style: str) -> None:
    assert_contained(transport, raising(style, KeyboardInterrupt()), "KeyboardInterrupt")


@pytest.mark.parametrize("style", STYLES)
def test_system_exit_in_a_handler_is_contained(transport: str, style: str) -> None:
    assert_contained(transport, raising(style, SystemExit(3)), "SystemExit", "3")


async def test_closing_a_node_cancels_its_running_handler_quietly(
    transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    running, cancelled = asyncio.Event(), asyncio.Event()

    async def forever(msg: Message) -> None:
        running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async with pair(transport, {"forever": forever}) as (a, n2):
        request = asyncio.ensure_future(ask(a, "forever"))
        await running.wait()
        await n2.close()
        assert cancelled.is_set()
        with pytest.raises(zmesh.PeerLost):  # guide: "the target's node left" -> PeerLost
            await request
    gc.collect()  # a Task whose exception nobody retrieved logs it when collected
    errors = [r.getMessage() for r in caplog.records if r.name.split(".")[0] in ("zmesh", "asyncio")]
    assert errors == []


async def test_a_handler_can_close_its_own_node(transport: str) -> None:
    closed = asyncio.Event()

    async def shut_down(msg: Message) -> str:
        await node.close()  # must return: this handler is not cancelled by its own close
        closed.set()
        return "bye"

    async with pair(transport, {"shut_down": shut_down}) as (a, node):
        with pytest.raises(zmesh.PeerLost):  # the node left before its reply could go out
            await a.request("b", "shut_down", timeout=10)
        await asyncio.wait_for(closed.wait(), 5)
        assert node.closed


async def test_closing_a_node_that_is_closing_waits_until_its_handlers_are_stopped(transport: str) -> None:
    """zmesh.run closes nodes from a task of its own on SIGTERM, then main's ``async with``
    closes again: that close must not return (and let main tear down an SDK client)
    while the first is still saying goodbye and the handlers run."""
    started, stopped = asyncio.Event(), asyncio.Event()

    async def hold(msg: Message) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopped.set()
            raise
        return "never"

    async with pair(transport, {"hold": hold}) as (a, node):
        request = asyncio.ensure_future(a.request("b", "hold", timeout=10))
        await asyncio.wait_for(started.wait(), 5)
        first = asyncio.ensure_future(node.close())
        await asyncio.sleep(0)  # one turn: the first close takes its first step, to its goodbye
        assert node.closed
        assert not stopped.is_set(), "the first close is still saying goodbye"
        await node.close()  # (not in wait_for: its own Task would give the first close time to end)
        assert stopped.is_set(), "the second close returned before the handler was stopped"
        await asyncio.wait_for(first, 5)
        with pytest.raises(zmesh.PeerLost):
            await request


async def test_a_handler_task_the_application_cancels_fails_its_request_and_frees_its_slot(transport: str) -> None:
    # The "stop generation" pattern: a control handler cancels a running job's Task.
    jobs: dict[str, asyncio.Task[Any]] = {}
    started = asyncio.Event()

    async def job(msg: Message) -> str:
        task = asyncio.current_task()
        assert task is not None
        jobs[msg.payload] = task
        started.set()
        await asyncio.Event().wait()
        return "never"

    def stop(msg: Message) -> bool:
        jobs.pop(msg.payload).cancel()
        return True

    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b", concurrency=2)
        b.add_handler("job", job)
        b.add_handler("stop", stop, inline=True)
        b.add_handler("ping", lambda msg: "pong", inline=True)
        await m.converged()
        for round_ in range(3):  # a lost slot per cancel would leave none by the third round
            started.clear()
            running = asyncio.ensure_future(a.request("b", "job", f"j{round_}", timeout=20))
            await started.wait()
            assert (await a.request("b", "stop", f"j{round_}", timeout=5)).payload is True
            t0 = time.monotonic()
            with pytest.raises(zmesh.HandlerError) as info:
                await running
            assert time.monotonic() - t0 < 5, "the requester waited for its timeout"
            assert info.value.remote_type == "CancelledError"
        assert (await a.request("b", "ping", timeout=5)).payload == "pong"
        assert n2.stats()["handler_errors"] == 3


async def test_an_inline_handler_of_a_one_way_stream_is_contained_and_never_keeps_a_slot(
    transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One-way qos 0 messages to an inline handler take the shortest path
    (no reply, nothing owed): still, one that raises is logged, counted and
    dead-lettered, the rest are handled in order, a coroutine it returns is
    awaited, and no run keeps one of the agent's slots (concurrency 1)."""
    handled: list[int] = []
    awaited: list[int] = []

    def work(msg: Message) -> Any:
        if msg.payload == 3:
            raise ValueError("bad item 3")
        handled.append(msg.payload)
        if msg.payload == 5:
            async def later() -> None:
                await asyncio.sleep(0)
                awaited.append(msg.payload)
            return later()
        return None

    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b", concurrency=1)
        b.add_handler("work", work, inline=True)
        await m.converged()
        with caplog.at_level(logging.ERROR, logger="zmesh"):
            for i in range(200):
                await a.send("b", "work", i)
            await wait_for(lambda: len(handled) == 199 and awaited == [5], what="every message handled")
        assert handled == [i for i in range(200) if i != 3]
        assert [(e.reason, e.target, e.message.payload) for e in n2.dead_letters] == [("handler_error", "b", 3)]
        assert "bad item 3" in caplog.text
        stats = n2.stats()
        assert stats["handler_errors"] == 1
        await wait_for(lambda: n2.stats()["by_agent"]["b"]["running"] == 0, what="no slot kept")
        assert n2.stats()["by_agent"]["b"]["handled"] == 200
        assert (await a.request("b", "work", 7, timeout=5)).payload is None  # the one slot is free


async def test_closing_with_handlers_not_yet_started_leaves_no_unawaited_coroutine() -> None:
    """A node closed while its async handlers' Tasks have not taken a first
    step (Python < 3.12 starts them later): their coroutines are closed, so
    Python never warns that one was never awaited."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with Mesh("inproc") as m:
            node = await m.node()
            a, slow = node.agent("a"), node.agent("slow", concurrency=4)
            started = asyncio.Event()

            async def handler(msg: Message) -> None:
                started.set()

            slow.add_handler("t", handler)
            for i in range(50):
                await a.send("slow", "t", i)
            await started.wait()
            await node.close()
        gc.collect()
    never = [str(w.message) for w in caught if "never awaited" in str(w.message)]
    assert not never, never
