"""The ZeroMQ transport on event loops without ``add_reader`` (Windows' default).

Windows' Proactor loop cannot be built here, so ``NoReaderLoop`` is a selector
loop whose public ``add_reader``/``remove_reader`` raise NotImplementedError
as the Proactor loop's do (asyncio itself uses the private ``_add_reader``).
The whole conformance suite also runs with the reader thread
(tests/test_conformance.py, ``zmq-thread``).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any, Awaitable, Callable, TypeVar

import pytest
import zmq

import zmesh
from zmesh.errors import TransportError
from zmesh.transport import zmq as zmq_transport
from zmesh.transport.zmq._reader_thread import ThreadReaders
from zmesh.transport.zmq import POLLER_ENV_VAR, ZmqTransport

from .helpers import wait_for

pytestmark = pytest.mark.timeout(30)

T = TypeVar("T")
READER_THREAD = "zmesh-zmq-reader"


class NoReaderLoop(asyncio.SelectorEventLoop):
    """A loop without reader callbacks, like asyncio.ProactorEventLoop."""

    def add_reader(self, fd: Any, callback: Callable[..., object], *args: Any) -> None:
        raise NotImplementedError

    def remove_reader(self, fd: Any) -> bool:
        raise NotImplementedError


def run_on(loop: asyncio.AbstractEventLoop, main: Callable[[], Awaitable[T]], deadline: float = 20.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(main(), deadline)

    try:
        return loop.run_until_complete(bounded())
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


def reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == READER_THREAD and t.is_alive()]


async def two_nodes(mesh: str, **options: Any) -> tuple[zmesh.Node, zmesh.Node]:
    a = zmesh.Node(mesh, name="a-node", discovery=False, transport=ZmqTransport(**options))
    await a.start()
    b = zmesh.Node(mesh, name="b-node", discovery=False, transport=ZmqTransport(**options), seeds=[a.endpoint])
    await b.start()
    return a, b


async def exercise(a: zmesh.Node, b: zmesh.Node) -> None:
    """Request/reply both ways and a broadcast, over ZeroMQ."""
    alice, bob = a.agent("alice"), b.agent("bob")
    bob.add_handler("add", lambda msg: msg.payload["x"] + msg.payload["y"])
    alice.add_handler("echo", lambda msg: msg.payload)
    heard: list[Any] = []
    await bob.subscribe("news.*", lambda msg: heard.append(msg.payload))
    await a.wait_for_agents("bob", timeout=5)
    await b.wait_for_agents("alice", timeout=5)
    await wait_for(lambda: a.registry.subscribers("news.x"), what="bob's subscription to reach a")
    assert (await alice.request("bob", "add", {"x": 1, "y": 2}, timeout=5)).payload == 3
    assert (await bob.request("alice", "echo", "hi", timeout=5)).payload == "hi"
    assert await alice.broadcast("news.x", 42) == 1
    await wait_for(lambda: heard == [42], what="the broadcast")


def test_a_loop_without_add_reader_runs_the_mesh_through_the_reader_thread() -> None:
    async def main() -> None:
        a, b = await two_nodes("no-reader")
        try:
            assert isinstance(a.transport, ZmqTransport) and a.transport.poller_in_use == "thread"
            assert len(reader_threads()) == 2
            await exercise(a, b)
        finally:
            await b.close()
            await a.close()
        assert reader_threads() == []

    run_on(NoReaderLoop(), main)
    assert zmq_transport.open_sockets() == 0


def test_the_reader_thread_carries_link_monitors_a_closed_peer_is_lost_at_once() -> None:
    """Link monitors (ZMTP heartbeats) are read through the thread too: a
    peer whose sockets vanish without a goodbye is noticed by the link."""

    async def main() -> None:
        a, b = await two_nodes("no-reader-links")
        try:
            await wait_for(lambda: "b-node" in a.peers, what="a to know b")
            await b.transport.close()  # no BYE: as if b's process were killed
            await wait_for(lambda: "b-node" not in a.peers, timeout=3, what="a to notice b's link break")
        finally:
            await b.close()
            await a.close()

    run_on(NoReaderLoop(), main)


def test_poller_thread_can_be_chosen_on_a_loop_with_add_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(POLLER_ENV_VAR, "Thread")

    async def main() -> None:
        a, b = await two_nodes("env-thread")
        try:
            assert isinstance(a.transport, ZmqTransport) and a.transport.poller_in_use == "thread"
            await exercise(a, b)
        finally:
            await b.close()
            await a.close()

    asyncio.run(asyncio.wait_for(main(), 20))
    assert reader_threads() == []


def test_the_default_on_a_selector_loop_is_the_loops_own_add_reader() -> None:
    async def main() -> None:
        a, b = await two_nodes("default-loop")
        try:
            assert isinstance(a.transport, ZmqTransport) and a.transport.poller_in_use == "loop"
            assert reader_threads() == []
        finally:
            await b.close()
            await a.close()

    asyncio.run(asyncio.wait_for(main(), 20))


def test_poller_loop_on_a_loop_without_add_reader_is_a_clear_error() -> None:
    async def main() -> None:
        node = zmesh.Node("no-reader-refused", discovery=False, transport=ZmqTransport(poller="loop"))
        with pytest.raises(TransportError, match="NoReaderLoop has no add_reader: use poller='thread'"):
            await node.start()
        await node.close()

    run_on(NoReaderLoop(), main)
    assert zmq_transport.open_sockets() == 0


@pytest.mark.parametrize("value", ["threads", "select"])
def test_a_bad_poller_setting_is_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    with pytest.raises(TransportError, match=rf"bad poller='{value}': expected one of 'auto', 'loop', 'thread'"):
        ZmqTransport(poller=value)
    monkeypatch.setenv(POLLER_ENV_VAR, value)
    with pytest.raises(TransportError, match=rf"bad {POLLER_ENV_VAR}='{value}'"):
        zmesh.Node("bad-poller", discovery=False)


# -- ThreadReaders on its own ------------------------------------------------


def test_thread_readers_call_back_on_the_loop_until_removed_and_close_joins() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        readers = ThreadReaders(loop)
        left, right = socket.socketpair()
        left.setblocking(False)
        got: list[bytes] = []
        arrived = asyncio.Event()
        callback_threads: set[int] = set()

        def on_readable() -> None:
            callback_threads.add(threading.get_ident())
            got.append(left.recv(100))
            arrived.set()

        try:
            readers.add_reader(left.fileno(), on_readable)
            for chunk in (b"one", b"two"):
                arrived.clear()
                right.send(chunk)
                await asyncio.wait_for(arrived.wait(), 5)
            assert got == [b"one", b"two"]
            assert callback_threads == {threading.get_ident()}  # on the loop, not the reader thread
            readers.remove_reader(left.fileno())
            right.send(b"unread")
            # The next wake of the reader thread runs after it saw the removal:
            # an unrelated reader that fires proves the thread polled again.
            other_left, other_right = socket.socketpair()
            other = asyncio.Event()
            readers.add_reader(other_left.fileno(), lambda: (other_left.recv(100), other.set()))
            other_right.send(b"x")
            await asyncio.wait_for(other.wait(), 5)
            assert got == [b"one", b"two"]
            readers.remove_reader(other_left.fileno())
            other_left.close()
            other_right.close()
        finally:
            readers.close()
            readers.close()  # idempotent
            left.close()
            right.close()
        assert reader_threads() == []

    asyncio.run(asyncio.wait_for(main(), 10))


def test_a_close_between_the_threads_poll_and_its_hand_over_does_not_wait_for_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """close() runs on the loop and joins the thread. A thread whose poll
    returned just before the close must not then hand the input over and
    wait for the loop to run it: the loop is in close(), so that would be a
    5 s stall (the join timeout) and a leaked socket pair."""
    left, right = socket.socketpair()
    at_gate = threading.Event()
    gated: list[ThreadReaders] = []

    class PollerReturningAsCloseStarts(zmq.Poller):
        def poll(self, timeout: int | None = None) -> list[tuple[Any, int]]:
            events = super().poll(timeout)
            if gated and any(fd == left.fileno() for fd, _ in events):
                readers = gated.pop()
                at_gate.set()
                deadline = time.monotonic() + 5
                while not readers._closing and time.monotonic() < deadline:
                    time.sleep(0.001)  # polls a condition with a deadline
            return events

    monkeypatch.setattr(zmq, "Poller", PollerReturningAsCloseStarts)

    async def main() -> float:
        readers = ThreadReaders(asyncio.get_running_loop())
        gated.append(readers)
        readers.add_reader(left.fileno(), lambda: None)
        right.send(b"x")
        await wait_for(at_gate.is_set, what="the thread's poll to return")
        started = time.monotonic()
        readers.close()
        return time.monotonic() - started

    try:
        took = asyncio.run(asyncio.wait_for(main(), 20))
    finally:
        left.close()
        right.close()
    assert took < 1.0


@pytest.mark.parametrize("poller", ["loop", "thread"])
def test_a_node_whose_peer_vanished_closes_without_lingering(poller: str) -> None:
    """A BYE queued to a peer whose connection broke cannot leave; the link
    must not linger 200 ms over it (which held up the context's release,
    and every test and CLI command that closed the last node)."""

    async def main() -> float:
        a, b = await two_nodes(f"vanished-{poller}", poller=poller)
        try:
            await wait_for(lambda: "b-node" in a.peers, what="a to know b")
            await b.transport.close()  # b's sockets vanish without a BYE
            (link,) = a.transport._links  # type: ignore[attr-defined]
            # Block (not run the loop) until a's I/O thread saw the disconnect.
            assert link._watcher._pair.poll(2000), "the disconnect never reached a's link monitor"
            started = time.monotonic()
            await a.close()  # sends b a BYE that cannot leave
            return time.monotonic() - started
        finally:
            await b.close()
            await a.close()

    took = asyncio.run(asyncio.wait_for(main(), 20))
    assert took < 0.1
