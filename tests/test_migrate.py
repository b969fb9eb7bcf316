"""Dual-track migration (zmesh.migrate): the flag and each topic's policy pick
the track; in shadow the caller gets the legacy answer while the new track's
is compared with it, reported and counted. The two tracks are agents on nodes
of two transports (an in-memory broker and the in-process frame mesh)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any, AsyncIterator

import pytest

import zmesh
from zmesh.migrate import DualTrackDispatcher, PolicyFlag, ShadowReceipt

from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)


class Tracks:
    def __init__(self, legacy: zmesh.Agent, new: zmesh.Agent, old_worker: zmesh.Agent,
                 new_worker: zmesh.Agent) -> None:
        self.legacy, self.new, self.old_worker, self.new_worker = legacy, new, old_worker, new_worker
        self.ran: list[str] = []


@contextlib.asynccontextmanager
async def two_tracks() -> AsyncIterator[Tracks]:
    async with Mesh("memory") as old, Mesh("inproc") as new:
        a, b = await old.node(), await old.node()
        c, d = await new.node(), await new.node()
        t = Tracks(a.agent("app"), c.agent("app"), b.agent("worker"), d.agent("worker"))
        for name, worker in (("legacy", t.old_worker), ("new", t.new_worker)):
            def answer(msg: zmesh.Message, name: str = name) -> Any:
                t.ran.append(name)
                return {"n": msg.payload["n"] * 2}

            worker.add_handler("calc.double", answer, inline=True)
            worker.add_handler("note", lambda msg, name=name: t.ran.append(name), inline=True)
        await old.converged()
        await new.converged()
        yield t


async def test_the_flag_picks_the_track() -> None:
    async with two_tracks() as tracks:
        flag = PolicyFlag()
        d = DualTrackDispatcher(flag, tracks.legacy, tracks.new)
        assert (await d.request("worker", "calc.double", {"n": 2}, timeout=5)).payload == {"n": 4}
        assert tracks.ran == ["legacy"]
        flag.set("new")
        assert flag.is_new() and not flag.is_legacy()
        await d.request("worker", "calc.double", {"n": 3}, timeout=5)
        assert tracks.ran == ["legacy", "new"]
        assert d.stats()["legacy"] == 1 and d.stats()["new"] == 1 and d.stats()["shadow"] == 0


async def test_in_shadow_the_caller_gets_the_legacy_answer_and_both_are_compared() -> None:
    async with two_tracks() as tracks:
        d = DualTrackDispatcher(PolicyFlag("legacy"), tracks.legacy, tracks.new, shadow=True)
        receipts: list[ShadowReceipt] = []
        d.observe(receipts.append)
        reply = await d.request("worker", "calc.double", {"n": 5}, timeout=5)
        assert reply.payload == {"n": 10} and reply.sender == "worker"
        assert await d.drain(5)
        assert sorted(tracks.ran) == ["legacy", "new"]
        (receipt,) = receipts
        assert (receipt.kind, receipt.outcome, receipt.topic, receipt.target) == ("request", "match", "calc.double",
                                                                                   "worker")
        assert receipt.legacy_latency > 0 and receipt.new_latency > 0
        assert d.stats()["match"] == 1 and d.stats()["shadow"] == 1


async def test_a_different_answer_is_a_mismatch_and_a_failing_track_is_named() -> None:
    async with two_tracks() as tracks:
        tracks.new_worker.add_handler("calc.double", lambda msg: {"n": -1}, inline=True)
        tracks.new_worker.add_handler("calc.fail", lambda msg: {}[msg.payload], inline=True)
        tracks.old_worker.add_handler("calc.fail", lambda msg: "fine", inline=True)
        tracks.old_worker.add_handler("calc.broken", lambda msg: {}[msg.payload], inline=True)
        tracks.new_worker.add_handler("calc.broken", lambda msg: "fixed", inline=True)
        d = DualTrackDispatcher(PolicyFlag(), tracks.legacy, tracks.new, shadow=True)
        receipts: list[ShadowReceipt] = []
        d.observe(receipts.append)
        assert (await d.request("worker", "calc.double", {"n": 1}, timeout=5)).payload == {"n": 2}
        assert (await d.request("worker", "calc.fail", "x", timeout=5)).payload == "fine"
        with pytest.raises(zmesh.HandlerError):  # the legacy track's error is the caller's
            await d.request("worker", "calc.broken", "x", timeout=5)
        await d.drain(5)
        got = {r.topic: (r.outcome, r.legacy_error, r.new_error) for r in receipts}
        assert got == {"calc.double": ("mismatch", "", ""), "calc.fail": ("legacy_only", "", "HandlerError"),
                       "calc.broken": ("new_only", "HandlerError", "")}
        stats = d.stats()
        assert (stats["mismatch"], stats["legacy_only"], stats["new_only"], stats["match"]) == (1, 1, 1, 0)


async def test_the_caller_does_not_wait_for_the_new_track() -> None:
    async with two_tracks() as tracks:
        gate = asyncio.Event()

        async def slow(msg: zmesh.Message) -> Any:
            await gate.wait()
            return {"n": msg.payload["n"] * 2}

        tracks.new_worker.add_handler("calc.double", slow)
        d = DualTrackDispatcher(PolicyFlag(), tracks.legacy, tracks.new, shadow=True)
        reply = await d.request("worker", "calc.double", {"n": 1}, timeout=5)
        assert reply.payload == {"n": 2}  # answered while the new track's handler still waits
        assert d.stats()["shadow_pending"] == 1
        gate.set()
        assert await d.drain(5)
        assert d.stats()["match"] == 1 and d.stats()["shadow_pending"] == 0


async def test_a_topics_policy_beats_the_flag_and_the_longest_pattern_wins() -> None:
    async with two_tracks() as tracks:
        flag = PolicyFlag("legacy")
        d = DualTrackDispatcher(flag, tracks.legacy, tracks.new)
        d.set_policy("calc.>", "new")
        d.set_policy("calc.double", "shadow")
        assert d.policy_for("calc.double") == "shadow" and d.policy_for("calc.other") == "new"
        assert d.policy_for("note") == "legacy"
        flag.set("new")
        assert d.policy_for("note") == "new"
        d.set_policy("calc.>", None)
        flag.set("legacy")
        assert d.policy_for("calc.other") == "legacy"
        with pytest.raises(ValueError):
            d.set_policy("calc.>", "both")
        with pytest.raises(zmesh.InvalidMessage):
            d.set_policy("calc..x", "new")


async def test_a_shadowed_message_goes_down_both_tracks() -> None:
    async with two_tracks() as tracks:
        d = DualTrackDispatcher(PolicyFlag(), tracks.legacy, tracks.new)
        d.set_policy("note", "shadow")
        receipts: list[ShadowReceipt] = []
        d.observe(receipts.append)
        sent = await d.send("worker", "note", {"hi": 1})
        assert sent.sender == "app"
        await d.drain(5)
        await wait_for(lambda: len(tracks.ran) == 2, 5, "the message handled on both tracks")
        assert sorted(tracks.ran) == ["legacy", "new"]
        assert [(r.kind, r.outcome) for r in receipts] == [("send", "match")]


async def test_a_cancelled_caller_cancels_the_mirror_and_aclose_stops_the_rest() -> None:
    async with two_tracks() as tracks:
        gate = asyncio.Event()

        async def never(msg: zmesh.Message) -> Any:
            await gate.wait()

        tracks.old_worker.add_handler("calc.wait", never)
        tracks.new_worker.add_handler("calc.wait", never)
        d = DualTrackDispatcher(PolicyFlag(), tracks.legacy, tracks.new, shadow=True)
        call = asyncio.ensure_future(d.request("worker", "calc.wait", None, timeout=20))
        for _ in range(100):
            await asyncio.sleep(0)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert d.stats()["shadow_pending"] == 0  # nothing left comparing
        tracks.old_worker.add_handler("calc.wait", lambda msg: "now", inline=True)
        assert (await d.request("worker", "calc.wait", None, timeout=5)).payload == "now"
        assert d.stats()["shadow_pending"] == 1  # the new track's handler still waits
        await d.aclose()
        assert d.stats()["shadow_pending"] == 0
        gate.set()


def test_the_flag_is_checked_and_safe_from_many_threads() -> None:
    with pytest.raises(ValueError):
        PolicyFlag("both")
    flag = PolicyFlag()
    with pytest.raises(ValueError):
        flag.set("task_fabric")

    def flip(track: str) -> None:
        for _ in range(2000):
            flag.set(track)
            assert flag.active() in ("legacy", "new")

    threads = [threading.Thread(target=flip, args=(t,)) for t in ("legacy", "new", "legacy", "new")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert flag.active() in ("legacy", "new") and repr(flag).startswith("PolicyFlag(")


async def test_what_is_not_an_agent_or_a_flag_is_refused() -> None:
    async with two_tracks() as tracks:
        with pytest.raises(TypeError):
            DualTrackDispatcher("legacy", tracks.legacy, tracks.new)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            DualTrackDispatcher(PolicyFlag(), tracks.legacy, "new")  # type: ignore[arg-type]
