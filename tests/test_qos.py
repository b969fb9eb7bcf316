"""QoS 1 and 2: acknowledged after the handler, sent again until acknowledged
(also to a new node hosting the target), repeats suppressed, a store that
outlives the process; handoff on QoS 1; error kinds across delegate chains.

Each test would fail on the code before it: qos was carried and ignored,
nothing was acknowledged or sent again, handoff kept a task on timeout that
its target had taken, and a middle hop's PeerLost reached the origin as a
HandlerError.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import zmesh
from zmesh import FakeClock, Message
from zmesh._engine import dedup as dedup_mod
from zmesh._engine import reliable as reliable_mod

from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(params=["inproc", "zmq"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Recorder:
    """A handler that records payloads; holds each message until ``opened`` is set."""

    def __init__(self, hold: bool = False) -> None:
        self.opened = asyncio.Event()
        if not hold:
            self.opened.set()
        self.seen: list[Any] = []

    async def __call__(self, msg: Message) -> Any:
        self.seen.append(msg.payload)
        await self.opened.wait()
        return msg.payload


async def test_qos1_is_acknowledged_after_the_handler_returns(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        handler = Recorder(hold=True)
        b.add_handler("t", handler)
        await m.converged()
        await a.send("b", "t", 1, qos=1)
        await wait_for(lambda: handler.seen == [1])
        assert n1.stats()["unacked"] == 1  # handled, not finished: not acknowledged
        assert not await n1.wait_acked(timeout=0.2)
        handler.opened.set()
        assert await n1.wait_acked(timeout=5)
        assert n1.stats()["unacked"] == 0
        assert n1.stats()["retransmits"] == 0


async def test_qos0_is_not_tracked(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        handler = Recorder(hold=True)
        b.add_handler("t", handler)
        await m.converged()
        await a.send("b", "t", 1)
        await wait_for(lambda: handler.seen == [1])
        assert n1.stats()["unacked"] == 0
        handler.opened.set()


async def test_qos1_goes_to_a_newcomer_that_takes_over_the_agent_id(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        stuck = Recorder(hold=True)
        b.add_handler("t", stuck)
        await m.converged()
        for i in range(5):
            await a.send("b", "t", i, qos=1)
        await wait_for(lambda: len(stuck.seen) == 5)
        await n2.close()  # its handlers never finished: nothing was acknowledged
        await wait_for(lambda: n1.registry.node_of("b") is None)
        assert n1.stats()["unacked"] == 5
        n3 = await m.node()
        taker = Recorder()
        n3.agent("b").add_handler("t", taker)
        assert await n1.wait_acked(timeout=10)
        assert sorted(taker.seen) == [0, 1, 2, 3, 4]
        assert n1.stats()["retransmits"] >= 5


async def test_a_lost_acknowledgement_means_one_retransmission_and_no_second_handling() -> None:
    clock = FakeClock()
    async with Mesh("inproc", clock=clock) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        handler = Recorder()
        b.add_handler("t", handler)
        await m.converged()
        lost = n2._mesh.engine.reliable
        real_flush = lost.flush_acks
        lost.flush_acks = lambda: lost.acks.clear()  # type: ignore[method-assign]
        await a.send("b", "t", "x", qos=1)
        await wait_for(lambda: handler.seen == ["x"])
        await wait_for(lambda: not lost.acks)  # the acknowledgement was sent into the void
        lost.flush_acks = real_flush  # type: ignore[method-assign]
        assert n1.stats()["unacked"] == 1
        clock.advance(reliable_mod.RETRY_HELD + 0.01)
        assert await n1.wait_acked(timeout=5)
        assert handler.seen == ["x"]  # the repeat was recognised, not handled
        assert n2.stats()["duplicates"] == 1
        assert n1.stats()["retransmits"] == 1


async def test_a_qos1_request_repeated_gets_the_remembered_reply_without_running_twice() -> None:
    async with Mesh("inproc") as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        calls = []

        @b.on("work")
        async def work(msg: Message) -> Any:
            calls.append(msg.payload)
            return len(calls)

        await m.converged()
        msg = Message("query", "a", "b", "work", "p", "", "a", 3, 1, None, n1.clock.time(), "t", "ok")
        msg.correlation_id = msg.id
        reply = await n1._dispatch.request(msg, 5, "request")
        assert reply.payload == 1
        n1._mesh.engine.send(msg)  # the very same request again, as a retransmission carries it
        n1._mesh.pump()
        await wait_for(lambda: n1.stats()["late_replies"] == 1, what="the remembered reply")
        assert calls == ["p"]
        assert n2.stats()["duplicates"] == 1


async def test_qos1_without_an_acknowledgement_is_dead_lettered_when_its_ttl_runs_out() -> None:
    clock = FakeClock()
    async with Mesh("inproc", clock=clock) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        b.add_handler("t", Recorder(hold=True))
        await m.converged()
        await a.send("b", "t", "x", qos=1, ttl=5.0)
        await wait_for(lambda: n2.stats()["handled"] == 1)
        await n2.close()
        await wait_for(lambda: n1.registry.node_of("b") is None)
        assert n1.stats()["unacked"] == 1
        clock.advance(5.5)
        assert await n1.wait_acked(timeout=5)
        letters = [d for d in n1.dead_letters if d.reason == "expired"]
        assert [d.message.payload for d in letters] == ["x"]
        assert n1.stats()["qos_expired"] == 1


async def test_closing_without_a_store_dead_letters_what_is_unacknowledged() -> None:
    async with Mesh("inproc") as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        b.add_handler("t", Recorder(hold=True))
        await m.converged()
        await a.send("b", "t", "x", qos=1)
        await wait_for(lambda: n2.stats()["handled"] == 1)
        await n1.close()
        assert [(d.reason, d.message.payload) for d in n1.dead_letters] == [("unacked", "x")]


async def test_a_sender_with_a_store_delivers_after_it_restarts(tmp_path: Path) -> None:
    db = tmp_path / "sender.db"
    async with Mesh("inproc") as m:
        n1, n2 = await m.node(store=db), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        b.add_handler("t", Recorder(hold=True))
        await m.converged()
        for i in range(3):
            await a.send("b", "t", i, qos=1)
        await wait_for(lambda: n2.stats()["handled"] == 3)
        await n2.close()  # the receiver dies before finishing
        await n1.close()  # and so does the sender: its outbox is on disk
        assert not n1.dead_letters.total
        n3 = await m.node(store=db)  # the sender again
        n3.agent("a")
        n4 = await m.node()
        taker = Recorder()
        n4.agent("b").add_handler("t", taker)
        assert await n3.wait_acked(timeout=10)
        assert sorted(taker.seen) == [0, 1, 2]
    reopened = zmesh.store.SqliteStore(db)
    try:
        assert reopened.load_outbox() == []  # acknowledged: gone from the store
    finally:
        reopened.close()


async def test_qos2_repeats_are_recognised_after_the_receiver_restarts(tmp_path: Path) -> None:
    db = tmp_path / "receiver.db"
    async with Mesh("inproc") as m:
        n1 = await m.node()
        a = n1.agent("a")
        n2 = await m.node(store=db)
        first = Recorder()
        n2.agent("b").add_handler("t", first)
        await m.converged()
        msg = await a.send("b", "t", "once", qos=2)
        assert await n1.wait_acked(timeout=5)
        one = await a.send("b", "t", "qos1", qos=1)
        assert await n1.wait_acked(timeout=5)
        await n2.close()
        await wait_for(lambda: n1.registry.node_of("b") is None)
        n3 = await m.node(store=db)  # the receiver, restarted on the same store
        second = Recorder()
        n3.agent("b").add_handler("t", second)
        await m.converged()
        for repeat in (msg, one):  # as a sender that missed the acknowledgements would
            n1._mesh.engine.send(repeat, None, n1.clock.monotonic())
        n1._mesh.pump()
        assert await n1.wait_acked(timeout=5)
        assert first.seen == ["once", "qos1"]
        assert second.seen == ["qos1"]  # qos 1 ids are kept in memory only; qos 2 ids on disk
        assert n3.stats()["duplicates"] == 1


async def test_a_repeat_of_a_message_still_being_handled_is_dropped() -> None:
    async with Mesh("inproc") as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        handler = Recorder(hold=True)
        b.add_handler("t", handler)
        await m.converged()
        msg = await a.send("b", "t", "x", qos=1)
        await wait_for(lambda: handler.seen == ["x"])
        n1._mesh.engine.send(msg, None, n1.clock.monotonic())
        n1._mesh.pump()
        await wait_for(lambda: n2.stats()["duplicates"] == 1)
        handler.opened.set()
        assert await n1.wait_acked(timeout=5)
        assert handler.seen == ["x"]


async def test_the_dedup_window_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dedup_mod, "DEDUP_WINDOW", 100)
    async with Mesh("inproc") as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        b.add_handler("t", Recorder(), inline=False)
        await m.converged()
        for i in range(300):
            await a.send("b", "t", i, qos=1)
        assert await n1.wait_acked(timeout=10)
        assert len(n2._mesh.engine.reliable.seen) <= 100


# -- handoff on QoS 1 -----------------------------------------------------------


async def test_a_target_that_decides_after_the_offer_expired_refuses_and_the_task_stays() -> None:
    async with Mesh("inproc") as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        decided = asyncio.Event()

        @b.on_handoff
        async def slow(offer: zmesh.Handoff) -> bool:
            await asyncio.sleep(0.6)  # the decision takes longer than the offer lives
            decided.set()
            return True

        await m.converged()
        result = await a.handoff("b", "task-1", timeout=0.3)
        assert decided.is_set()
        assert not result.accepted
        assert "expired" in result.reason
        assert a.tasks == {"task-1"} and b.tasks == frozenset()  # exactly one owner


async def test_complete_releases_a_task() -> None:
    async with Mesh("inproc") as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        b.on_handoff(lambda offer: True)
        await m.converged()
        result = await a.handoff("b", "task-2", timeout=5)
        assert result.accepted and b.tasks == {"task-2"} and a.tasks == frozenset()
        assert b.complete("task-2") is True
        assert b.tasks == frozenset()
        assert b.complete("task-2") is False


async def test_a_handoff_offer_reaches_a_new_host_of_the_target() -> None:
    async with Mesh("inproc") as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        offered = asyncio.Event()

        @b.on_handoff
        async def never(offer: zmesh.Handoff) -> bool:
            offered.set()
            await asyncio.Event().wait()
            return True

        await m.converged()
        handoff = asyncio.ensure_future(a.handoff("b", "task-3", timeout=10))
        await offered.wait()
        await n2.close()  # dies before deciding
        n3 = await m.node()
        n3.agent("b").on_handoff(lambda offer: True)
        result = await handoff
        assert result.accepted
        assert a.tasks == frozenset() and n3.agents["b"].tasks == {"task-3"}


# -- error kinds across a delegate chain ----------------------------------------


async def test_a_middle_hops_peer_lost_reaches_the_origin_as_peer_lost(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, n3 = await m.node(), await m.node(), await m.node()
        a, b, c = n1.agent("a"), n2.agent("b1"), n3.agent("c")
        reached = asyncio.Event()

        @c.on("job")
        async def hang(msg: Message) -> Any:
            reached.set()
            await asyncio.Event().wait()

        @b.on("job")
        async def middle(msg: Message) -> Any:
            return await b.delegate("c", msg, timeout=20)

        await m.converged()
        call = asyncio.ensure_future(a.request("b1", "job", 1, timeout=20))
        await reached.wait()
        await n3.close()
        with pytest.raises(zmesh.PeerLost):
            await call


async def test_a_middle_hops_timeout_and_handler_errors_keep_their_kind() -> None:
    async with Mesh("inproc") as m:
        n1, n2, n3 = await m.node(), await m.node(), await m.node()
        a, b, c = n1.agent("a"), n2.agent("b1"), n3.agent("c")

        @c.on("slow")
        async def slow(msg: Message) -> Any:
            await asyncio.sleep(5)

        @c.on("bad")
        async def bad(msg: Message) -> Any:
            raise ValueError("no such row")

        @b.on(">")
        async def middle(msg: Message) -> Any:
            return await b.delegate("c", msg, timeout=0.2)

        await m.converged()
        with pytest.raises(zmesh.Timeout):
            await a.request("b1", "slow", timeout=5)
        with pytest.raises(zmesh.HandlerError) as info:
            await a.request("b1", "bad", timeout=5)
        assert info.value.remote_type == "ValueError"
        assert info.value.agent == "c"


# -- what the receiver holds, and what it declines --------------------------------


async def test_a_long_handler_costs_no_resends_while_its_node_stays() -> None:
    clock = FakeClock()
    async with Mesh("inproc", clock=clock) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        handler = Recorder(hold=True)
        b.add_handler("t", handler)
        await m.converged()
        await a.send("b", "t", "long", qos=1)
        await wait_for(lambda: handler.seen == ["long"])
        for _ in range(10):  # a 20 s model call
            clock.advance(reliable_mod.RETRY_FIRST * 2)
            await asyncio.sleep(0)
        assert n1.stats()["retransmits"] == 0
        handler.opened.set()
        assert await n1.wait_acked(timeout=5)


async def test_what_a_full_inbox_declines_is_sent_again_soon_and_handled_once() -> None:
    clock = FakeClock()
    async with Mesh("inproc", clock=clock) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b", concurrency=1, inbox_size=2)
        handler = Recorder(hold=True)
        b.add_handler("t", handler)
        await m.converged()
        for i in range(10):
            await a.send("b", "t", i, qos=1)
        await wait_for(lambda: n2.stats()["dropped"].get("inbox_full", 0) == 7)  # 1 running, 2 waiting
        handler.opened.set()
        waited = 0.0
        while not await n1.wait_acked(timeout=0.05):
            assert waited < reliable_mod.RETRY_HELD, "declined messages waited for the slow fallback"
            clock.advance(reliable_mod.RETRY_FIRST)
            waited += reliable_mod.RETRY_FIRST
        assert sorted(handler.seen) == list(range(10))
        assert list(n2.dead_letters) == []  # declined, not dead: the sender still owned them


async def test_a_message_held_past_its_ttl_is_settled_by_its_holder_not_expired_by_its_sender() -> None:
    clock = FakeClock()
    async with Mesh("inproc", clock=clock) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b", concurrency=1)
        handler = Recorder(hold=True)
        b.add_handler("t", handler)
        await m.converged()
        await a.send("b", "t", "slow", qos=1, ttl=2.0)  # taken at once, then takes longer than its ttl
        await a.send("b", "t", "late", qos=1, ttl=2.0)  # waits in the inbox past its ttl
        await wait_for(lambda: handler.seen == ["slow"])
        clock.advance(3.0)
        await asyncio.sleep(0.05)
        assert n1.stats()["unacked"] == 2  # a live node holds both: not given up on
        handler.opened.set()
        assert await n1.wait_acked(timeout=5)
        assert handler.seen == ["slow"]  # "late" expired when taken ...
        assert [(d.reason, d.message.payload) for d in n2.dead_letters] == [("expired", "late")]  # ... there
        assert list(n1.dead_letters) == [] and n1.stats()["qos_expired"] == 0


async def test_settled_messages_are_not_kept_for_their_resend_time() -> None:
    async with Mesh("inproc") as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        b.add_handler("t", lambda msg: None, inline=True)
        await m.converged()
        for i in range(5000):
            await a.send("b", "t", i, qos=1)
        assert await n1.wait_acked(timeout=10)
        assert len(n1._mesh.engine.reliable._heap) <= 1025 + 4 * n1.stats()["unacked"]


async def test_a_qos1_ttl_counts_from_the_send_not_from_the_clocks_origin() -> None:
    clock = FakeClock()
    async with Mesh("inproc", clock=clock) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        b.add_handler("t", Recorder())
        await m.converged()
        clock.advance(1000.0)  # long after the node started
        await n2.close()
        await wait_for(lambda: n1.registry.node_of("b") is None)
        n3 = await m.node()
        n3.agent("b").add_handler("t", Recorder(hold=True))
        await m.converged()
        await a.send("b", "t", "x", qos=1, ttl=60.0)
        await n3.close()  # nobody holds it now
        await wait_for(lambda: n1.registry.node_of("b") is None)
        clock.advance(30.0)
        await asyncio.sleep(0.05)
        assert n1.stats()["unacked"] == 1 and list(n1.dead_letters) == []  # half its ttl: still kept
        clock.advance(31.0)
        assert await n1.wait_acked(timeout=5)
        assert [d.reason for d in n1.dead_letters] == ["expired"]


async def test_a_timeout_says_how_long_it_waited() -> None:
    async with Mesh("inproc") as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        b.add_handler("t", Recorder(hold=True))
        await m.converged()
        with pytest.raises(zmesh.Timeout, match=r"within 0\.25 s"):
            await a.request("b", "t", timeout=0.25)


async def test_another_agent_reusing_a_message_id_cannot_make_it_a_repeat(transport: str) -> None:
    """Ids are not secret: a joined node that sends a qos 1 message under the
    id another agent is about to use must not get the real one taken for its
    repeat (acknowledged and never handled)."""
    async with Mesh(transport) as m:
        n1, n2, n3 = await m.node(), await m.node(), await m.node()
        a, evil, b = n1.agent("a"), n2.agent("evil"), n3.agent("b")
        handler = Recorder()
        b.add_handler("t", handler)
        await m.converged()
        first = evil._message("b", "t", "forged first", "notify", 3, 1, None, None)
        await evil._host.send(first, None)
        await wait_for(lambda: handler.seen == ["forged first"])
        real = a._message("b", "t", "real", "notify", 3, 1, None, None)
        real.id = first.id  # the id the intruder guessed
        await a._host.send(real, None)
        assert await n1.wait_acked(timeout=5)
        assert handler.seen == ["forged first", "real"]
        assert n3.stats()["duplicates"] == 0
