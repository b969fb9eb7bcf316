"""Streamed replies: a handler that yields, a caller that reads with
``async for``; in order, flow-controlled end to end, ended, failed or
cancelled in band, relayed across hops, on every transport (conformance)."""

from __future__ import annotations

import asyncio
import threading
import time
import tracemalloc
from typing import Any, AsyncIterator, Iterator

import pytest

import zmesh
from zmesh import Message
from zmesh._runtime import stream_writer
from zmesh._runtime.streams import CHUNK_TOPIC, MORE_TOPIC, WINDOW

from .conformance_transports import transport  # noqa: F401 - the fixture
from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(60)


class Tokens:
    """An ``async def`` generator handler: yields ``payload`` numbers (all of them
    without one), counting what it yielded and noticing when it is stopped."""

    def __init__(self, pause: float = 0.0) -> None:
        self.pause = pause
        self.yielded = 0
        self.started = asyncio.Event()
        self.stopped: list[str] = []

    async def __call__(self, msg: Message) -> AsyncIterator[int]:
        return self.tokens(msg)

    async def tokens(self, msg: Message) -> AsyncIterator[int]:
        self.started.set()
        try:
            for i in range(msg.payload if isinstance(msg.payload, int) else 1_000_000):
                self.yielded += 1
                yield i
                if self.pause:
                    await asyncio.sleep(self.pause)
        except asyncio.CancelledError:
            self.stopped.append("cancelled")
            raise
        except GeneratorExit:
            self.stopped.append("closed")
            raise


async def two_nodes(m: Mesh) -> tuple[zmesh.Node, zmesh.Node, zmesh.Agent, zmesh.Agent]:
    n1, n2 = await m.node(), await m.node()
    a, b = n1.agent("a"), n2.agent("b")
    await m.converged()
    return n1, n2, a, b


async def test_an_async_generator_handler_streams_its_chunks_in_order(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, a, b = await two_nodes(m)

        @b.on("count")
        async def count(msg: Message) -> AsyncIterator[dict[str, int]]:
            for i in range(msg.payload):
                yield {"i": i}

        stream = a.stream("b", "count", 300, timeout=30)
        assert isinstance(stream, zmesh.Stream) and stream.sender == ""
        assert [chunk["i"] async for chunk in stream] == list(range(300))
        assert stream.sender == "b" and stream.received == 300
        assert n2.stats()["chunks_sent"] == 300 and n1.stats()["chunks_received"] == 300
        assert n1.stats()["chunks_dropped"] == 0
        assert [x async for x in a.stream("b", "count", 0)] == [], "a stream may be empty"


async def test_a_plain_generator_runs_in_the_worker_pool(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, a, b = await two_nodes(m)
        threads: set[str] = set()

        @b.on("lines")
        def lines(msg: Message) -> Iterator[str]:
            for i in range(msg.payload):
                threads.add(threading.current_thread().name)
                yield f"line {i}"

        assert [x async for x in a.stream("b", "lines", 50)] == [f"line {i}" for i in range(50)]
        assert threads and all(name.startswith("zmesh-handler") for name in threads), threads


async def test_a_plain_answer_to_a_streamed_request_is_one_chunk_and_a_request_to_a_stream_gets_a_list(
        transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, a, b = await two_nodes(m)

        @b.on("one")
        async def one(msg: Message) -> str:
            return "whole"

        @b.on("many")
        async def many(msg: Message) -> AsyncIterator[int]:
            for i in range(5):
                yield i

        @b.on("later")
        def later(msg: Message) -> Any:
            threading.Thread(target=lambda: n2_loop.call_soon_threadsafe(
                asyncio.ensure_future, b.reply(msg, "deferred"))).start()
            return zmesh.DEFERRED

        n2_loop = asyncio.get_running_loop()
        assert [x async for x in a.stream("b", "one")] == ["whole"]
        assert (await a.request("b", "many", timeout=10)).payload == [0, 1, 2, 3, 4]
        assert [x async for x in a.stream("b", "later")] == ["deferred"]
        assert (await a.request("b", "one", timeout=10)).payload == "whole", "plain requests as before"


async def test_an_error_mid_stream_comes_after_the_chunks_sent_before_it(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, a, b = await two_nodes(m)

        @b.on("flaky")
        async def flaky(msg: Message) -> AsyncIterator[int]:
            for i in range(10):
                yield i
            raise ValueError("the model went away")

        got: list[int] = []
        with pytest.raises(zmesh.HandlerError) as caught:
            async for chunk in a.stream("b", "flaky"):
                got.append(chunk)
        assert got == list(range(10))
        assert caught.value.remote_type == "ValueError" and "went away" in str(caught.value)
        assert n2.stats()["handler_errors"] == 1
        assert [d.reason for d in n2.dead_letters] == ["handler_error"]

        with pytest.raises(zmesh.NoHandler):
            async for _ in a.stream("b", "nobody.handles.this"):
                pass


async def test_a_reader_that_stops_early_stops_the_generator(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, a, b = await two_nodes(m)
        tokens = Tokens(pause=0.001)
        b.add_handler("tokens", tokens)
        async with a.stream("b", "tokens", timeout=30) as stream:
            async for chunk in stream:
                if chunk == 20:
                    break
        await wait_for(lambda: tokens.stopped, 10, "the generator to be stopped")
        assert tokens.stopped == ["cancelled"]
        await wait_for(lambda: n2.stats()["cancelled_running"] == 1, 5, "the cancel to be counted")
        assert n2.stats()["handler_errors"] == 0 and list(n2.dead_letters) == []
        assert tokens.yielded < 20 + 2 * WINDOW, "the producer ran at most a window ahead"


async def test_a_stopped_plain_generator_sees_msg_cancelled_then_is_closed() -> None:
    async with Mesh("zmq") as m:
        n1, n2, a, b = await two_nodes(m)
        seen: list[str] = []
        in_step = threading.Event()

        @b.on("lines")
        def lines(msg: Message) -> Iterator[str]:
            try:
                yield "first"
                in_step.set()
                deadline = time.monotonic() + 20
                while not msg.cancelled and time.monotonic() < deadline:  # a blocking step that polls
                    time.sleep(0.005)
                seen.append(f"step saw cancelled={msg.cancelled}")
                yield "never read"
            finally:
                seen.append(f"closed with cancelled={msg.cancelled}")

        async with a.stream("b", "lines", timeout=30) as stream:
            assert await stream.__anext__() == "first"
            await asyncio.get_running_loop().run_in_executor(None, in_step.wait, 10)
        await wait_for(lambda: len(seen) == 2, 10, "the generator to stop")
        assert seen == ["step saw cancelled=True", "closed with cancelled=True"]


async def test_a_plain_step_that_outlasts_the_close_wait_still_sees_msg_cancelled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The stream stops waiting for a step still running in its thread after
    CLOSE_WAIT, and its request ends; the step must go on seeing it should stop."""
    monkeypatch.setattr(stream_writer, "CLOSE_WAIT", 0.1)
    async with Mesh("zmq") as m:
        n1, n2, a, b = await two_nodes(m)
        seen: list[str] = []
        in_step, go_on = threading.Event(), threading.Event()

        @b.on("lines")
        def lines(msg: Message) -> Iterator[str]:
            try:
                yield "first"
                in_step.set()
                go_on.wait(20)  # a step that blocks past CLOSE_WAIT without polling
                seen.append(f"step saw cancelled={msg.cancelled}")
                yield "never read"
            finally:
                seen.append(f"closed with cancelled={msg.cancelled}")

        async with a.stream("b", "lines", timeout=30) as stream:
            assert await stream.__anext__() == "first"
            await asyncio.get_running_loop().run_in_executor(None, in_step.wait, 10)
        await wait_for(lambda: n2.stats()["cancelled_running"] == 1 and n2.stats()["by_agent"]["b"]["running"] == 0,
                       10, "the request to end while its step still runs")
        go_on.set()
        await wait_for(lambda: len(seen) == 2, 10, "the generator to stop")
        assert seen == ["step saw cancelled=True", "closed with cancelled=True"]
        await wait_for(lambda: not zmesh.message.CANCELLED_REQUESTS, 5, "the flag to be forgotten after the step")


async def test_cancelling_the_reading_task_stops_the_generator(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, a, b = await two_nodes(m)
        tokens = Tokens(pause=0.002)
        b.add_handler("tokens", tokens)
        seen: list[int] = []

        async def read() -> None:
            async for chunk in a.stream("b", "tokens", timeout=30):
                seen.append(chunk)

        reading = asyncio.ensure_future(read())
        await wait_for(lambda: len(seen) >= 5, 10, "the first chunks")
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        await wait_for(lambda: tokens.stopped, 10, "the generator to see the cancel")
        assert tokens.stopped == ["cancelled"]


async def test_the_readers_node_closing_stops_the_generator(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, a, b = await two_nodes(m)
        tokens = Tokens(pause=0.002)
        b.add_handler("tokens", tokens)
        seen: list[int] = []

        async def read() -> None:
            async for chunk in a.stream("b", "tokens", timeout=30):
                seen.append(chunk)

        reading = asyncio.ensure_future(read())
        await wait_for(lambda: len(seen) >= 5, 10, "the first chunks")
        await n1.close()
        await asyncio.gather(reading, return_exceptions=True)
        await wait_for(lambda: tokens.stopped, 10, "the generator to be stopped once its reader's node left")


async def test_a_slow_reader_slows_the_producer(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, a, b = await two_nodes(m)
        tokens = Tokens()
        b.add_handler("tokens", tokens)
        ahead: list[int] = []
        async with a.stream("b", "tokens", 400, timeout=50) as stream:
            async for chunk in stream:
                ahead.append(tokens.yielded - stream.received)
                if chunk % 50 == 0:
                    await asyncio.sleep(0.02)  # the reader lags: the producer must wait for it
        assert stream.received == 400
        assert max(ahead) <= WINDOW + 1, f"the producer ran {max(ahead)} chunks ahead of its reader"


async def test_a_planner_relays_a_workers_stream_and_a_cancel_goes_down_every_hop(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, n3 = await m.node(), await m.node(), await m.node()
        ui, planner, worker = n1.agent("ui"), n2.agent("planner"), n3.agent("worker")
        await m.converged()
        tokens = Tokens(pause=0.001)
        worker.add_handler("tokens", tokens)

        @planner.on("answer")
        async def answer(msg: Message) -> zmesh.Stream:
            return planner.stream("worker", "tokens", msg.payload, timeout=30)

        @planner.on("answer.delegated")
        async def delegated(msg: Message) -> Message:
            return await planner.delegate("worker", msg, topic="tokens")

        assert [x async for x in ui.stream("planner", "answer", 200)] == list(range(200))
        relayed = ui.stream("planner", "answer.delegated", 30)
        assert [x async for x in relayed] == list(range(30)) and relayed.sender == "planner"

        async with ui.stream("planner", "answer", timeout=30) as stream:
            async for chunk in stream:
                if chunk == 10:
                    break
        await wait_for(lambda: tokens.stopped, 10, "the worker's generator to be stopped, two hops down")
        assert tokens.stopped == ["cancelled"]
        assert n3.stats()["handler_errors"] == 0 and n2.stats()["handler_errors"] == 0


async def test_a_stream_that_runs_past_its_timeout_raises_timeout_and_stops_the_handler(transport: str) -> None:
    clock = zmesh.FakeClock()
    async with Mesh(transport, clock=clock) as m:
        n1, n2, a, b = await two_nodes(m)
        hold = asyncio.Event()

        @b.on("stall")
        async def stall(msg: Message) -> AsyncIterator[int]:
            yield 1
            try:
                await hold.wait()
            except asyncio.CancelledError:
                stopped.set()
                raise
            yield 2

        stopped = asyncio.Event()
        got: list[int] = []

        async def read() -> None:
            async for chunk in a.stream("b", "stall", timeout=5):
                got.append(chunk)

        reading = asyncio.ensure_future(read())
        await wait_for(lambda: got == [1], 10, "the first chunk")
        clock.advance(6)
        with pytest.raises(zmesh.Timeout):
            await reading
        await asyncio.wait_for(stopped.wait(), 10)


async def test_stream_any_fails_over_before_the_first_chunk(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, n3 = await m.node(), await m.node(), await m.node()
        me = n1.agent("me")
        n2.agent("empty", capabilities=("draft",))  # declares it, has no handler for the topic
        good = n3.agent("good", capabilities=("draft",))

        @good.on("draft")
        async def draft(msg: Message) -> AsyncIterator[str]:
            for word in ("one", "two", "three"):
                yield word

        await m.converged()
        for _ in range(3):
            stream = me.stream_any("draft", "draft", timeout=20)
            assert [x async for x in stream] == ["one", "two", "three"] and stream.sender == "good"
        with pytest.raises(zmesh.NoProvider):
            async for _ in me.stream_any("nobody-can", "draft"):
                pass


async def test_bad_chunks_are_counted_drops_never_a_crash(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, a, b = await two_nodes(m)
        tokens = Tokens(pause=0.005)
        b.add_handler("tokens", tokens)
        stray, junk, forger = n2.agent("stray"), n2.agent("junk"), n2.agent("forger")
        await m.converged()
        injected = [chunk_of(stray, "~" + "0" * 28, [0, "nobody reads"])]  # no such stream
        await wait_for(lambda: n1.stats()["chunks_dropped"] == 1, 10, "the stray chunk to be dropped")
        async with a.stream("b", "tokens", timeout=30) as stream:
            async for chunk in stream:
                if chunk == 0:
                    injected += [chunk_of(junk, stream.request_id, "junk"),  # not [seq, chunk]
                                 chunk_of(forger, stream.request_id, [1, "forged"])]  # not from its producer
                if chunk == 40:
                    break
        await wait_for(lambda: n1.stats()["chunks_dropped"] >= 3, 10, "the bad chunks to be dropped")
        assert n1.stats()["chunks_dropped"] == 3
        assert {"stream_gone", "malformed", "spoofed_sender"} <= set(n1.stats()["dropped"])
        for sending in injected:
            sending.cancel()
        await asyncio.gather(*injected, return_exceptions=True)


def chunk_of(agent: zmesh.Agent, correlation_id: str, payload: Any) -> asyncio.Future[Message]:
    """A message that looks like a chunk of stream ``correlation_id`` to agent ``a``,
    sent by ``agent`` (an envelope with a correlation id is a request: its sending never ends)."""
    return asyncio.ensure_future(agent.send_envelope({"header": {
        "target": "a", "topic": CHUNK_TOPIC, "correlation_id": correlation_id}, "payload": payload}, timeout=30))


async def test_a_generator_handler_for_a_one_way_message_is_an_error_not_silence(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, a, b = await two_nodes(m)
        tokens = Tokens()
        b.add_handler("tokens", tokens)
        await a.send("b", "tokens", 3)
        await wait_for(lambda: list(n2.dead_letters), 10, "the dead letter")
        letter = list(n2.dead_letters)[0]
        assert letter.reason == "handler_error" and "only a request" in letter.detail
        assert tokens.yielded == 0


def test_the_sync_facade_reads_a_stream_as_an_iterator() -> None:
    from zmesh import sync

    with sync.Node("sync-streams", discovery=False) as node:
        worker, me = node.agent("worker"), node.agent("me")

        @worker.on("count")
        def count(msg: Message) -> Iterator[int]:
            yield from range(msg.payload)

        assert list(me.stream("worker", "count", 100, timeout=20)) == list(range(100))
        chunks = me.stream("worker", "count", 10_000, timeout=20)
        assert [next(chunks) for _ in range(3)] == [0, 1, 2]
        chunks.close()  # stops the rest


async def test_ten_thousand_chunks_to_a_slow_reader_keep_memory_flat() -> None:
    async with Mesh("zmq") as m:
        n1, n2, a, b = await two_nodes(m)
        tokens = Tokens()
        b.add_handler("tokens", tokens)
        total = 10_000
        buffered: list[int] = []
        tracemalloc.start()
        try:
            sizes: dict[int, int] = {}
            async with a.stream("b", "tokens", total, timeout=120) as stream:
                async for chunk in stream:
                    buffered.append(tokens.yielded - stream.received)
                    if chunk % 500 == 0:
                        await asyncio.sleep(0.005)  # slow: the producer keeps waiting for it
                    if chunk in (2_000, 9_999):
                        sizes[chunk] = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert stream.received == total
        assert max(buffered) <= WINDOW + 1
        growth = sizes[9_999] - sizes[2_000]
        assert growth < 256 * 1024, f"memory grew {growth} bytes over 8,000 chunks"


def test_more_messages_are_checked() -> None:
    from zmesh._runtime.streams import more_items

    def note(payload: Any, corr: str = "") -> Message:
        return Message("notify", "zmesh.node.x", "zmesh.node.y", MORE_TOPIC, payload, corr)

    assert more_items(note([["a", "~1", 3]])) == [("a", "~1", 3)]
    for bad in ([["a", "~1"]], [["a", "~1", -1]], [["a", "~1", "3"]], [["", "~1", 3]], "x", [["a", 1, 3]],
                [["a", "~1", True]]):
        assert more_items(note(bad)) is None, bad
    assert more_items(note([["a", "~1", 3]], corr="c")) is None
    assert more_items(note([["a", "~1", 1]] * 257)) is None


async def test_the_observer_records_a_stream() -> None:
    async with Mesh("inproc") as m:
        n1, n2, a, b = await two_nodes(m)
        b.add_handler("tokens", Tokens())
        receipts: list[zmesh.Receipt] = []
        n1.observe(receipts.append)
        assert len([x async for x in a.stream("b", "tokens", 100)]) == 100
        assert [(r.kind, r.outcome) for r in receipts] == [("stream", "success")], "one receipt, not one a chunk"



async def test_streams_cancelled_at_any_moment_leave_no_slot_taken() -> None:
    async with Mesh("zmq") as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b", concurrency=1)
        await m.converged()

        @b.on("count")
        async def count(msg: Message) -> AsyncIterator[int]:
            for i in range(10):
                yield i
                await asyncio.sleep(0.01)

        for attempt in range(60):  # the cancel lands before, with, or after the request's first step
            reading = asyncio.ensure_future(a.stream("b", "count", timeout=5).__anext__())
            for _ in range(attempt % 6):
                await asyncio.sleep(0)
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
        await wait_for(lambda: n2.stats()["by_agent"]["b"]["running"] == 0, 10, "every slot back")
        assert [x async for x in a.stream("b", "count", timeout=10)] == list(range(10))
        assert n2.stats()["handler_errors"] == 0


async def test_a_stream_answered_by_reply_from_inside_its_handler_can_be_cancelled() -> None:
    async with Mesh("inproc") as m:
        n1, n2, a, b = await two_nodes(m)
        closed = asyncio.Event()

        async def numbers() -> AsyncIterator[int]:
            try:
                for i in range(100_000):
                    yield i
                    await asyncio.sleep(0.001)
            finally:
                closed.set()

        @b.on("count")
        async def count(msg: Message) -> Any:
            await b.reply(msg, numbers())
            return zmesh.DEFERRED

        async with a.stream("b", "count", timeout=30) as stream:
            async for _ in stream:
                break
        await asyncio.wait_for(closed.wait(), 10)


async def test_a_stream_dropped_unread_is_forgotten_and_stops_its_producer() -> None:
    import gc

    async with Mesh("inproc") as m:
        n1, n2, a, b = await two_nodes(m)
        tokens = Tokens(pause=0.001)
        b.add_handler("tokens", tokens)
        async for _ in a.stream("b", "tokens", timeout=30):
            break  # no async with: the garbage collector ends it
        gc.collect()
        await wait_for(lambda: tokens.stopped, 10, "the producer to be stopped")
        await wait_for(lambda: not n1._dispatch.streams.readers, 10, "the reader to be forgotten")


async def test_a_stream_has_one_reader_at_a_time() -> None:
    async with Mesh("inproc") as m:
        n1, n2, a, b = await two_nodes(m)
        gate = asyncio.Event()

        @b.on("later")
        async def later(msg: Message) -> AsyncIterator[str]:
            await gate.wait()
            yield "x"

        async with a.stream("b", "later", timeout=10) as stream:
            first = asyncio.ensure_future(stream.__anext__())
            await asyncio.sleep(0)
            with pytest.raises(RuntimeError, match="one reader"):
                await stream.__anext__()
            gate.set()
            assert await first == "x"
