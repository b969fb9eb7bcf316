"""The protocol engine alone: 2-3 engines on a hand-driven fake network
(tests/engine_pair.py), fake time, no sockets, no asyncio, no sleeps.

Latency is zero, so a time measured here is the protocol's own delay: timer
granularity (a liveness tick every heartbeat/2) and knock backoff.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Callable

import msgpack
import pytest

from zmesh._wire import codec
from zmesh._engine import admission
from zmesh._engine import effects as fx
from zmesh._engine.members import SEED_RETRY, SEED_RETRY_MAX
from zmesh._engine.states import EVENTS, STATES, TRANSITIONS, IllegalTransition, step
from zmesh.errors import PeerLost, Timeout
from zmesh.message import Message
from zmesh.registry import MeshEvent

from .engine_pair import LIVENESS, Net, Packet, make_engine, pub, recording, router

pytestmark = pytest.mark.timeout(10)

HEARTBEAT = LIVENESS.heartbeat
TICK = HEARTBEAT / 2  # an engine's liveness timer period
ONE_SIDED = ("unknown_peer", "unknown_publisher")


def pair() -> Net:
    net = Net(make_engine("a", agents=("a1",)), make_engine("b", agents=("b1",)))
    net.connect("a", "b")
    net.deliver_all()
    assert net.joined("a", "b")
    return net


def ask(sender: str, target: str, cid: str = "c1") -> Message:
    return Message(type="task", sender=sender, target=target, topic="work.do", payload=7,
                   correlation_id=cid, reply_to=sender)


def shout(net: Net, name: str, sender: str) -> int:
    """Broadcast on news.x (every agent here subscribes to news.>); how many it counts."""
    reached = net.engines[name].broadcast(Message(sender=sender, topic="news.x", payload="hi"))
    net.pump(name)
    return reached


def heard_broadcast(net: Net, name: str) -> bool:
    return any(s.effect[3] for s in net.effects(name, fx.DELIVER))


# -- 1. joining --------------------------------------------------------------


def test_join_needs_both_hellos_and_both_ready_signals() -> None:
    net = Net(make_engine("a", agents=("a1",)), make_engine("b", agents=("b1",)))
    a, b = net.engines["a"], net.engines["b"]
    net.connect("a", "b")
    assert net.deliver_all(only=lambda p: p.kind != "ready") == 2  # the knock and its answer
    assert [p.kind for p in net.queue] == ["ready", "ready"]
    assert a.members.peers["b"].state == b.members.peers["a"].state == "connecting"
    assert a.peers == [] and b.peers == []
    # The slow-joiner rule: neither counts the other's agents yet, so a
    # broadcast is not even published.
    assert shout(net, "a", "a1") == 0 and shout(net, "b", "b1") == 0
    assert net.effects("a", fx.PUBLISH) == net.effects("b", fx.PUBLISH) == []
    assert a.registry.node_of("b1") is None and b.registry.node_of("a1") is None

    net.deliver_all(only=lambda p: p.dst == "b")  # A's SUB is attached at B
    assert b.peers == ["a"] and a.peers == []
    assert b.registry.node_of("a1") == "a" and a.registry.node_of("b1") is None
    assert shout(net, "a", "a1") == 0  # A still does not count B ...
    assert shout(net, "b", "b1") == 1  # ... while B's broadcasts reach A's attached SUB
    net.deliver_all(only=lambda p: p.kind != "ready")
    assert heard_broadcast(net, "a") and not heard_broadcast(net, "b")

    net.deliver_all()
    assert a.peers == ["b"] and b.peers == ["a"]
    for engine in (a, b):
        assert {n: i.node_id for n, i in engine.registry.agents().items()} == {"a1": "a", "b1": "b"}
    assert shout(net, "a", "a1") == 1
    net.deliver_all()
    assert heard_broadcast(net, "b")
    assert a.is_settled() and b.is_settled()


def test_a_ready_signal_before_the_hello_is_remembered_not_counted() -> None:
    net = Net(make_engine("a", agents=("a1",)), make_engine("b", agents=("b1",)))
    a, b = net.engines["a"], net.engines["b"]
    net.connect("a", "b")
    net.deliver_all(only=lambda p: p.dst == "b")  # B answers, and its SUB attaches at A ...
    net.deliver_all(only=lambda p: p.kind == "ready")  # ... and that overtakes its HELLO
    assert a.peers == [] and b.key in a.members.ready_keys
    net.deliver_all(only=lambda p: p.kind != "ready")
    assert a.peers == ["b"] and b.peers == []  # B waits for A's SUB
    net.deliver_all()
    assert net.joined("a", "b") and not a.members.ready_keys


# -- 2. liveness -------------------------------------------------------------


def test_liveness_evasive_then_expired_and_pending_requests_fail_at_once() -> None:
    net = pair()
    a = net.engines["a"]
    net.advance(60.0)
    assert net.joined("a", "b")
    assert net.events("a", "peer_evasive") == net.events("b", "peer_evasive") == []
    assert len(net.effects("a", fx.PUBLISH)) >= 60 / HEARTBEAT - 1  # the heartbeats that kept it so

    net.drop_from.add("b")
    key = net.request("a", ask("a1", "b1"), deadline=60.0 + 30.0)
    net.deliver_all()  # B answers, but nothing from B arrives any more
    heard = a.members.peers["b"].last_heard
    net.advance(70.0)
    [(evasive_at, _)] = net.events("a", "peer_evasive")
    [(left_at, left)] = net.events("a", "peer_left")
    assert LIVENESS.evasive_after <= evasive_at - heard <= LIVENESS.evasive_after + TICK
    assert LIVENESS.expire_after <= left_at - heard <= LIVENESS.expire_after + TICK
    assert left == MeshEvent("peer_left", "b", detail="expired")
    assert a.peers == [] and a.registry.node_of("b1") is None
    [failed] = net.effects("a", fx.FAILED)
    assert (failed.time, failed.effect[1]) == (left_at, key)  # at expiry, not at the deadline
    assert isinstance(failed.effect[2], PeerLost)
    assert len(a.requests) == 0


def test_a_broken_link_removes_its_peer_at_once_and_knocks_on_it_again() -> None:
    net = pair()
    a = net.engines["a"]
    net.advance(5.0)
    key = net.request("a", ask("a1", "b1"), deadline=5.0 + 60.0)
    link = a.members.peers["b"].link
    a.link_down(link + 1000, net.now)  # not a peer's link: nothing happens
    assert a.peers == ["b"]
    a.link_down(link, net.now)  # the transport saw the connection break
    net.pump("a")
    assert a.peers == [] and a.registry.node_of("b1") is None
    assert net.events("a", "peer_left") == [(5.0, MeshEvent("peer_left", "b", detail="lost its connection"))]
    [failed] = net.effects("a", fx.FAILED)
    assert (failed.time, failed.effect[1]) == (5.0, key) and isinstance(failed.effect[2], PeerLost)
    knock = a.members.knocks[router("b")]
    assert knock.link == link  # knocked on again, on the same link
    assert a.transitions[("joined", "cut")] == 1
    rejoined = net.advance(30.0, until=lambda: net.joined("a", "b"))  # it was only the connection
    assert rejoined is not None and rejoined <= 5.0 + knock.interval + 2 * HEARTBEAT


def test_messages_queued_for_a_peer_that_breaks_away_are_counted_and_dead_lettered() -> None:
    net = pair()
    a = net.engines["a"]
    a.hold = True  # a flush is due: what is sent now waits in the outbox
    a.send(Message(sender="a1", target="b1", topic="work.note", payload=1))
    a.send(Message(sender="a1", target="b1", topic="work.note", payload=2, qos=1))  # sent again later
    a.link_down(a.members.peers["b"].link, net.now)
    dead = [e for e in a.take_effects() if e[0] == fx.DEAD]
    assert [(d[1].payload, d[2]) for d in dead] == [(1, "peer_lost")]
    assert a.dropped["peer_gone"] == 1
    assert a.reliable.unacked == 1


# -- 3. healing after a cut ----------------------------------------------------


# Nothing crosses a healed link until a knock does: an expired peer gets no
# heartbeats, and the ready signal only follows a HELLO. So the bound is the
# knock interval at the time of the heal, plus two heartbeats of slack. A
# knock retries after 1 s, backing off x1.5 to at most 10 s, so: a heal before
# the first retry (cut 3.5 s, expiry at 3 s) rejoins within 1 s + 2 heartbeats;
# after a long cut (30 s) it may take up to 10 s + 2 heartbeats.
@pytest.mark.parametrize(("cut_for", "knock_interval"), [(3.5, 1.0), (30.0, 10.0)])
def test_healing_after_a_cut_is_bounded_by_the_knock_interval(cut_for: float, knock_interval: float) -> None:
    net = pair()
    a, b = net.engines["a"], net.engines["b"]
    net.advance(10.0)
    net.isolate("b")
    net.advance(10.0 + cut_for)
    assert a.peers == [] and b.peers == []
    assert [e.kind for _, e in net.events("b", since=10.0)] == ["peer_evasive", "agent_left", "peer_left"]
    next_knock = min(a.members.knocks[router("b")].next_try, b.members.knocks[router("a")].next_try)
    heal = net.now
    net.heal("b")
    rejoined = net.advance(heal + 30.0, until=lambda: net.joined("a", "b"))
    assert rejoined is not None
    assert rejoined == next_knock  # the first knock after the heal does it, at zero latency
    assert rejoined - heal <= knock_interval + 2 * HEARTBEAT
    assert (SEED_RETRY, SEED_RETRY_MAX) == (1.0, 10.0)  # the bounds above come from these
    assert net.hellos("a", router("b"), since=heal) and net.hellos("b", router("a"), since=heal)
    assert a.members.knocks == {} and b.members.knocks == {}


# -- 4. a stalled event loop ---------------------------------------------------


@pytest.mark.parametrize("tick_first", [False, True], ids=["frames-first", "tick-first"])
def test_stalled_loop_rejoins_both_sides_within_two_heartbeats(tick_first: bool) -> None:
    net = pair()
    a, b = net.engines["a"], net.engines["b"]
    net.advance(10.0)
    net.stalled.add("b")
    net.advance(15.0)
    assert a.peers == [] and b.peers == ["a"]  # one-sided: B never noticed
    assert any(p.dst == "b" and p.kind == "direct" for p in net.queue)  # held, not lost
    net.stalled.discard("b")
    if tick_first:
        net.tick("b")  # B's overdue timer fires before its socket is read
        assert b.peers == ["a"]  # B was the one that could not watch: A's silence does not count
    rejoined = net.advance(15.0 + 2 * HEARTBEAT, until=lambda: net.joined("a", "b"))
    assert rejoined is not None and rejoined - 15.0 <= 2 * HEARTBEAT
    assert b.transitions[("joined", "silent")] == 0 and b.transitions[("evasive", "silent")] == 0
    assert b.transitions[("joined", "reset")] >= 1  # A knocked while B counted it as joined
    assert net.effects("b", fx.ANNOUNCE, since=15.0)  # so B re-announced its SUB to A
    net.advance(15.0 + 2 * HEARTBEAT)

    def churn() -> dict[str, tuple[int, int]]:  # departures seen, and frames dropped as one-sided
        return {n: (len(net.events(n, "peer_left")), sum(net.engines[n].dropped[r] for r in ONE_SIDED))
                for n in "ab"}

    before = churn()
    net.advance(30.0)
    assert net.joined("a", "b") and churn() == before  # and it stays two-sided


# -- 5. restart --------------------------------------------------------------


def test_restart_replaces_the_old_incarnation_in_one_step() -> None:
    net = Net(make_engine("a", agents=("a1",)), make_engine("b", agents=("b1", "b2")))
    a = net.engines["a"]
    net.connect("a", "b")
    net.advance(5.0)
    net.answer = False
    key = net.request("a", ask("a1", "b1"), deadline=35.0)
    net.deliver_all()
    assert net.unanswered
    net.restart(make_engine("b", inc="0002", agents=("b2", "b3")))
    net.connect("b", "a")
    net.deliver_all()
    # Nothing told a that the old run is gone (no broken connection here): it
    # pings the old run first, and the new one takes the name (its HELLO was
    # kept: no need to knock again) only when the ping stays unanswered
    # (issue 10: a name is not taken from a live node).
    assert a.dropped["claimed_node"] == 1 and a.members.peers["b"].incarnation == "0001"
    restarted = net.advance(5.0 + LIVENESS.expire_after,
                            until=lambda: net.joined("a", "b") and a.members.peers["b"].incarnation == "0002")
    window = admission.claim_window(LIVENESS)
    assert restarted is not None and 5.0 + window <= restarted <= 5.0 + window + LIVENESS.heartbeat / 2
    assert [e for _, e in net.events("a", since=5.0)] == [
        MeshEvent("peer_restarted", "b"), MeshEvent("agent_left", "b", "b1"), MeshEvent("agent_joined", "b", "b3"),
        MeshEvent("subscribed", "b", "b3", "news.>"),  # the new run's agent comes with its subscription
    ]
    assert a.transitions[("joined", "restarted")] == 1
    [failed] = net.effects("a", fx.FAILED)
    assert (failed.time, failed.effect[1]) == (restarted, key) and isinstance(failed.effect[2], PeerLost)
    assert (a.registry.node_of("b1"), a.registry.node_of("b2"), a.registry.node_of("b3")) == (None, "b", "b")


# -- 6. BYE --------------------------------------------------------------------


def test_bye_removes_at_once_and_is_not_knocked_on_again_unlike_expiry() -> None:
    net = Net(*(make_engine(n, agents=(n + "1",)) for n in "abc"))
    net.connect("b", "a")
    net.connect("c", "a")
    net.advance(5.0)
    assert net.joined("a", "b") and net.joined("a", "c") and net.joined("b", "c")
    net.close("b")
    net.isolate("c")
    net.deliver_all()
    assert net.events("a", "peer_left") == [(5.0, MeshEvent("peer_left", "b", detail="left"))]
    assert net.engines["a"].peers == ["c"] and net.engines["a"].transitions[("joined", "bye")] == 1
    net.advance(35.0)
    assert [e.detail for _, e in net.events("a", "peer_left")] == ["left", "expired"]
    assert net.hellos("a", router("b"), since=5.0) == []  # it said BYE: gone for good
    assert len(net.hellos("a", router("c"), since=5.0)) >= 5  # silent: maybe a cut, keep knocking
    assert list(net.engines["a"].members.knocks) == [router("c")]


# -- 7. refusal ----------------------------------------------------------------


def test_refused_knock_stops_retrying() -> None:
    net = Net(make_engine("a", agents=("a1",)), make_engine("x", mesh="other", agents=("x1",)))
    a, x = net.engines["a"], net.engines["x"]
    net.connect("x", "a")
    net.deliver_all()
    assert a.dropped["refused"] == 1
    assert net.events("a") == [(0.0, MeshEvent("peer_refused", "x", detail="mesh 'other' is not 'lab'"))]
    # The refusal tells x a's mesh name (so x can say which mesh to join), not a's node name.
    assert [(e.kind, e.node_id, e.detail) for _, e in net.events("x")] == [
        ("peer_refused", router("a"), "another mesh: 'lab'")]
    assert x.members.knocks[router("a")].state == "refused"
    assert a.members.peers == {} and x.members.peers == {}
    net.advance(30.0)
    assert net.hellos("x", router("a")) == [0.0]  # the first knock, never retried
    assert a.registry.node_of("x1") is None and x.registry.node_of("a1") is None


# -- 8. request deadlines ------------------------------------------------------


def test_request_deadline_runs_on_the_engine_clock() -> None:
    net = pair()
    a, b = net.engines["a"], net.engines["b"]
    net.advance(1.0)
    net.answer = False
    deadline = net.now + TICK / 2  # before the next liveness tick
    key = net.request("a", ask("a1", "b1"), deadline)
    assert a.next_deadline() <= deadline
    net.advance(deadline - 0.01)
    assert net.effects("a", fx.FAILED) == []
    net.advance(deadline)
    [failed] = net.effects("a", fx.FAILED)
    assert (failed.time, failed.effect[1]) == (deadline, key) and isinstance(failed.effect[2], Timeout)
    [(_, msg)] = net.unanswered
    b.reply_status(msg, "ok", "too late")
    net.pump("b")
    net.deliver_all()
    assert a.stats["late_replies"] == 1 and net.effects("a", fx.REPLIED) == []


# -- 9. bad input --------------------------------------------------------------


def _spoofed_hello() -> bytes:
    c = make_engine("c")
    c.start((router("c"),), (pub("c"),), 0.0)
    return codec.join_frame([codec.encode_control(codec.Hello(c.local_record(), (), True))])


BAD_INPUT: dict[str, Callable[[], Packet]] = {
    "malformed": lambda: Packet("direct", "b", "a", "b|0001", b"\xc1"),
    "unknown_version": lambda: Packet("direct", "b", "a", "b|0001", msgpack.packb([2, [codec.PING, True]])),
    "unknown_peer": lambda: Packet("direct", "g", "a", "ghost|0001", codec.join_frame(
        [codec.encode_message(Message(sender="g1", target="a1", topic="x"), 1000)])),
    "spoofed_hello": lambda: Packet("direct", "c", "a", "c|0002", _spoofed_hello()),
    "unknown_publisher": lambda: Packet("pub", "g", "a", "", codec.join_pub_frame("ghost", 0, [])),
}


@pytest.mark.parametrize("reason", list(BAD_INPUT))
def test_bad_input_is_counted_and_changes_nothing(reason: str) -> None:
    net = pair()
    a = net.engines["a"]
    net.advance(1.0)

    def state() -> object:
        return (a.peers, {n: (p.state, p.last_heard, p.record) for n, p in a.members.peers.items()},
                dict(a.members.knocks), dict(a.members.ready_keys), a.registry.nodes(), a.seq,
                a.requests.keys(), Counter(a.transitions), a.next_deadline())

    before, dropped = state(), Counter(a.dropped)
    net.now = 1.1
    net.deliver(BAD_INPUT[reason]())
    assert a.dropped - dropped == Counter({reason: 1})
    assert state() == before and [s for s in net.log if s.time >= 1.1] == []  # and no effect


# -- engine bugs found by these tests ----------------------------------------


def test_a_closed_engine_takes_no_input() -> None:
    # Node.close() awaits (handler tasks, discovery) between engine.close() and
    # transport.close(); a HELLO that arrives then must not bring the node back.
    net = Net(make_engine("a", agents=("a1",)), make_engine("b", agents=("b1",)))
    net.close("b")
    closed_at = len(net.log)
    net.connect("a", "b")  # A knocks (a seed, a discovered endpoint, a lost peer's address)
    net.deliver_all()
    assert [fx.NAMES[s.effect[0]] for s in net.log[closed_at:] if s.node == "b"] == []
    assert net.engines["b"].members.peers == {} and "a" not in net.engines["b"].registry
    assert net.engines["a"].peers == [] and net.engines["a"].registry.node_of("b1") is None


# -- 10. the transition table ----------------------------------------------------


SCENARIOS: list[Callable[[], None]] = [
    test_join_needs_both_hellos_and_both_ready_signals,
    test_a_ready_signal_before_the_hello_is_remembered_not_counted,
    test_liveness_evasive_then_expired_and_pending_requests_fail_at_once,
    lambda: test_healing_after_a_cut_is_bounded_by_the_knock_interval(3.5, 1.0),
    lambda: test_stalled_loop_rejoins_both_sides_within_two_heartbeats(False),
    lambda: test_stalled_loop_rejoins_both_sides_within_two_heartbeats(True),
    test_restart_replaces_the_old_incarnation_in_one_step,
    test_bye_removes_at_once_and_is_not_knocked_on_again_unlike_expiry,
    test_refused_knock_stops_retrying,
]


def test_every_transition_made_is_in_the_table_and_no_other_is_allowed() -> None:
    with recording() as nets:
        for scenario in SCENARIOS:
            scenario()
    seen: Counter[tuple[str, str]] = Counter()
    for net in nets:
        for engine in net.every_engine:
            seen.update(engine.transitions)
    # Members._move calls step() before counting, so a move outside the table
    # would already have raised inside its scenario; here: and the run covers these.
    assert set(seen) <= set(TRANSITIONS)
    assert {
        ("knocking", "answered"), ("knocking", "retry"), ("knocking", "refused"), ("connecting", "ready"),
        ("joined", "ready"), ("joined", "reset"), ("joined", "quiet"),
        ("evasive", "silent"), ("joined", "bye"), ("joined", "restarted"),
    } <= set(seen)
    for state in STATES:
        for event in EVENTS:
            if (state, event) in TRANSITIONS:
                assert step(state, event) in STATES
            else:
                with pytest.raises(IllegalTransition):
                    step(state, event)
    assert not any(state == "gone" for state, _ in TRANSITIONS)  # gone is final


def test_a_seed_is_knocked_on_after_a_long_partition() -> None:
    net = pair()  # A joined through B as its seed
    net.advance(10.0)
    net.isolate("b")
    net.advance(10.0 + 400.0)  # longer than LOST_PATIENCE (300 s)
    assert router("b") in net.engines["a"].members.knocks
    net.heal("b")
    assert net.advance(net.now + SEED_RETRY_MAX + 2 * HEARTBEAT, until=lambda: net.joined("a", "b")) is not None


# -- replies for a requester whose own loop stalled --------------------------


def _stalled_requester() -> tuple[Net, tuple[str, str], Message]:
    """A asks B; while B works on it, A's loop stalls and B expires A."""
    net = Net(make_engine("a", agents=("a1",)), make_engine("b", agents=("b1",)))
    net.connect("a", "b")
    net.advance(5.0)
    net.answer = False
    key = net.request("a", ask("a1", "b1"), deadline=100.0)
    net.deliver_all()
    (_, msg), = net.unanswered
    net.stalled.add("a")
    net.advance(10.0)
    assert net.engines["b"].peers == []  # B counted A as gone
    net.engines["b"].reply_status(msg, "ok", "late but wanted")  # B's handler finishes now
    net.pump("b")
    return net, key, msg


def test_a_reply_waits_for_a_requester_that_stalled_and_reaches_it() -> None:
    net, key, _ = _stalled_requester()
    assert not net.effects("b", fx.DEAD)  # kept for A, not dead-lettered
    net.stalled.discard("a")
    replied = net.advance(10.0 + 4 * HEARTBEAT,
                          until=lambda: any(s.effect[1] == key for s in net.effects("a", fx.REPLIED)))
    assert replied is not None
    assert not net.effects("a", fx.FAILED)
    assert net.engines["b"].members.parked.empty


def test_a_reply_kept_for_a_requester_that_never_comes_back_becomes_a_dead_letter() -> None:
    net, _, msg = _stalled_requester()
    net.isolate("a")  # it stays away past the patience for a lost peer
    net.advance(10.0 + 400.0)
    dead = [s.effect for s in net.effects("b", fx.DEAD)]
    assert [(d[1].correlation_id, d[2]) for d in dead] == [(msg.correlation_id, "not_found")]
    assert net.engines["b"].members.parked.empty


def test_a_reply_from_an_agent_that_left_while_its_handler_ran_still_answers() -> None:
    net = pair()
    a, b = net.engines["a"], net.engines["b"]
    net.advance(1.0)
    net.answer = False
    key = net.request("a", ask("a1", "b1"), net.now + 10)
    net.deliver_all()
    [(_, msg)] = net.unanswered
    b.remove_agent("b1")  # the node says so (a record update) before the handler answers
    net.pump("b")
    net.deliver_all()
    assert a.registry.node_of("b1") is None
    b.reply_status(msg, "ok", "done anyway")
    net.pump("b")
    net.deliver_all()
    [replied] = net.effects("a", fx.REPLIED)
    assert replied.effect[1] == key and replied.effect[2].payload == "done anyway"
    assert a.dropped["spoofed_sender"] == 0


def test_a_reply_nobody_asked_that_agent_for_is_still_spoofed() -> None:
    net = pair()
    a, b = net.engines["a"], net.engines["b"]
    net.advance(1.0)
    net.answer = False
    net.request("a", ask("a1", "b1"), net.now + 10)
    net.deliver_all()
    [(_, msg)] = net.unanswered
    for sender, cid in (("b9", msg.correlation_id), ("b9", "nope")):  # not b's agent; the request went to b1
        forged = Message(type="result", sender=sender, target="a1", topic=msg.topic, payload="forged",
                         correlation_id=cid, reply_to="a1")
        b.send(forged)
        net.pump("b")
        net.deliver_all()
    assert a.dropped["spoofed_sender"] == 2 and net.effects("a", fx.REPLIED) == []


def test_a_drop_from_a_raw_routing_id_is_logged_printably(caplog: pytest.LogCaptureFixture) -> None:
    engine = make_engine("a")
    engine.start((router("a"),), (pub("a"),), 0.0)
    frame = codec.join_frame([codec.encode_control(codec.Ping(True))])
    with caplog.at_level("WARNING", logger="zmesh"):
        engine.receive_direct("\x00k\ufffdEg", frame, 1.0)  # ZeroMQ's made-up id for a handed-over pipe
    assert engine.dropped["unknown_peer"] == 1
    (line,) = [r.getMessage() for r in caplog.records if "unknown_peer" in r.getMessage()]
    assert line.isprintable() and "\\x00k\\ufffdEg" in line


def test_a_frame_in_flight_from_a_peer_that_left_is_counted_but_not_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    net = pair()
    a = net.engines["a"]
    key = a.members.peers["b"].key
    a.link_down(a.members.peers["b"].link, net.now)  # b closed; its last frames are still on their way
    net.pump("a")
    frame = codec.join_frame([codec.encode_control(codec.Ping(False))])
    with caplog.at_level(logging.DEBUG, logger="zmesh"):
        a.receive_direct(key, frame, net.now)
        a.receive_direct("stranger|1|x", frame, net.now)
    assert a.dropped["unknown_peer"] == 2
    levels = {r.getMessage().split("dropped input from ")[1].split(":")[0]: r.levelno
              for r in caplog.records if "dropped input from" in r.getMessage()}
    assert levels == {key: logging.DEBUG, "stranger|1|x": logging.WARNING}, levels
