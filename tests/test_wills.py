"""Last wills: ``node.agent(..., will=(topic, payload))`` is broadcast by one
surviving node when the agent's node goes without a goodbye, and never
after one (an agent or a node closed in good order)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from typing import Any, Callable, Iterator

import pytest

import zmesh
from zmesh._runtime.message_records import GONE_DETAIL
from zmesh._runtime.wills import DONE_MEMORY, TAKE_UP_AFTER, WILL_DONE_TOPIC, Wills
from zmesh._wire.names import node_address
from zmesh.errors import FrameError, InvalidMessage
from zmesh._agent_profile import MAX_WILLS
from zmesh.registry import MAX_WILL_BYTES, MeshEvent, NodeRecord, Registry, parse_record

from .conformance_transports import transport  # noqa: F401 - the fixture
from .helpers import BROKERS, Mesh, wait_for

pytestmark = pytest.mark.timeout(60)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GONE = {"agent": "worker", "state": "gone"}


def record(node: str, inc: str = "1", seq: int = 1, wills: dict[str, tuple[str, Any]] | None = None,
           agents: tuple[str, ...] = ("worker",)) -> NodeRecord:
    return NodeRecord(node, inc, "m", 1, "r", "p", seq, agents={a: () for a in agents}, wills=wills or {})


# -- the registry: which departures make a will due ----------------------------------------


def test_a_record_gone_without_a_goodbye_makes_its_wills_due_before_its_agents_leave() -> None:
    registry = Registry("me")
    registry.merge(record("n1", wills={"worker": ("status.worker", GONE)}, agents=("worker", "plain")))
    events = registry.remove("n1", "lost its connection")
    assert [(e.kind, e.agent_id) for e in events] == [
        ("will", "worker"), ("agent_left", "worker"), ("agent_left", "plain"), ("peer_left", "")]
    assert (events[0].node_id, events[0].detail, events[0].payload) == ("n1", "status.worker", GONE)


def test_a_goodbye_a_closed_agent_or_a_cleared_will_makes_none_due() -> None:
    registry = Registry("me")
    registry.merge(record("n1", wills={"worker": ("status.worker", GONE)}))
    assert [e.kind for e in registry.remove("n1", "left", goodbye=True)] == ["agent_left", "peer_left"]
    registry.merge(record("n2", wills={"worker": ("status.worker", GONE)}))
    assert "will" not in [e.kind for e in registry.merge(record("n2", seq=2, agents=()))]  # the agent closed
    registry.merge(record("n3", wills={"worker": ("status.worker", GONE)}))
    registry.merge(record("n3", seq=2))  # the will cleared (how a node closing over a broker says goodbye)
    assert "will" not in [e.kind for e in registry.remove("n3", "left")]


def test_a_restart_makes_the_old_incarnations_wills_due() -> None:
    registry = Registry("me")
    registry.merge(record("n1", inc="1", wills={"worker": ("status.worker", GONE)}))
    events = registry.merge(record("n1", inc="2", wills={"worker": ("status.worker", {"new": True})}))
    assert [(e.kind, e.payload) for e in events][:2] == [("will", GONE), ("peer_restarted", None)]


def test_wills_travel_in_the_record_and_a_bad_one_is_malformed() -> None:
    rec = record("n1", wills={"worker": ("status.worker", GONE)})
    assert parse_record(rec.to_wire()).wills == {"worker": ("status.worker", GONE)}
    assert "wills" not in record("n2").to_wire()
    for bad in ({"ghost": ["t", 1]}, {"worker": ["t"]}, {"worker": ["a.*", 1]}, {"worker": [5, 1]}, ["worker"],
                {"worker": ["zmesh.stats", 1]}, {"worker": ["t", "x" * MAX_WILL_BYTES]}):
        with pytest.raises(FrameError, match="will"):
            parse_record({**record("n1").to_wire(), "wills": bad})
    assert parse_record({**record("n1").to_wire(), "bye": True}).bye and not parse_record(record("n1").to_wire()).bye
    with pytest.raises(FrameError, match="bye"):
        parse_record({**record("n1").to_wire(), "bye": 1})
    many = record("n1", agents=tuple(f"a{i}" for i in range(MAX_WILLS + 1)),
                   wills={f"a{i}": ("t", i) for i in range(MAX_WILLS + 1)})
    with pytest.raises(FrameError, match="will"):
        parse_record(many.to_wire())


def test_a_bad_will_is_refused_where_the_agent_is_made() -> None:
    node = zmesh.Node("will-rules", transport="inproc")
    for bad in ("status", ("status",), ("a.*", 1), ("zmesh.stats", 1), ("ok", object()),
                ("ok", b"x" * (MAX_WILL_BYTES + 1))):
        with pytest.raises(InvalidMessage):
            node.agent("a", will=bad)  # type: ignore[arg-type]
    payload = {"steps": [1, 2]}
    agent = node.agent("a", will=["status.a", payload])  # type: ignore[arg-type]
    assert agent.will == ("status.a", {"steps": [1, 2]})
    payload["steps"].append(3)  # the caller's object, changed later: not the will
    assert agent.will == ("status.a", {"steps": [1, 2]})
    with pytest.raises(InvalidMessage):
        agent.will = ("bad topic", 1)
    assert agent.will == ("status.a", {"steps": [1, 2]})


# -- who publishes ---------------------------------------------------------------------------


class Cluster:
    """One node's Wills over a registry of nodes ``names``, with what it publishes and tells."""

    def __init__(self, me: str, *names: str) -> None:
        self.registry = Registry(me)
        for node in names:
            self.registry.merge(record(node, agents=(f"agent-{node}",)))
        self.published: list[zmesh.Message] = []
        self.told: list[tuple[str, str, list[Any]]] = []
        self.stats: Counter[str] = Counter()
        self.clock = zmesh.FakeClock()
        self.wills = Wills(me, self.registry, self.publish, lambda *told: self.told.append(told), self.clock,
                           self.stats)

    def publish(self, msg: zmesh.Message) -> int:
        self.published.append(msg)
        return 1

    def gone(self, node: str) -> None:
        self.registry.remove(node, "lost its connection")
        self.wills.on_event(MeshEvent("peer_left", node))


def due(cluster: Cluster) -> None:
    cluster.wills.on_event(MeshEvent("will", "x", "worker", "status.worker", GONE))


def test_the_first_node_in_order_publishes_at_once_and_tells_the_others() -> None:
    c = Cluster("a", "a", "b", "c")
    due(c)
    assert [(m.sender, m.topic, m.payload) for m in c.published] == [(node_address("a"), "status.worker", GONE)]
    assert c.told == [("b", WILL_DONE_TOPIC, [["x", "worker"]]), ("c", WILL_DONE_TOPIC, [["x", "worker"]])]
    assert c.stats["wills_published"] == 1


def test_the_kth_node_publishes_after_k_turns_unless_told_it_was_done() -> None:
    told, untold = Cluster("c", "a", "b", "c"), Cluster("c", "a", "b", "c")
    for c in (told, untold):
        due(c)
        c.clock.advance(2 * TAKE_UP_AFTER - 0.1)
    told.wills.done("a", [("x", "worker")])
    for c in (told, untold):
        c.clock.advance(0.2)
    assert told.published == [] and told.stats["wills_published"] == 0
    assert [m.payload for m in untold.published] == [GONE]  # "a" and "b" never published it: "c" did


def test_a_node_before_this_one_that_goes_moves_its_turn_up_and_none_publishes_twice() -> None:
    c = Cluster("c", "a", "b", "c")
    due(c)
    c.gone("a")
    assert c.published == []  # "b" is first now
    c.gone("b")
    assert [m.payload for m in c.published] == [GONE]
    c.gone("b")
    c.clock.advance(10 * TAKE_UP_AFTER)
    assert len(c.published) == 1


def test_a_publisher_that_said_it_was_done_and_then_leaves_is_not_followed_by_another() -> None:
    c = Cluster("b", "a", "b", "c")
    due(c)
    c.wills.done("a", [("x", "worker")])
    c.gone("a")  # a clean close 20 s later, say: the will was published already
    c.clock.advance(10 * TAKE_UP_AFTER)
    assert c.published == []


def test_word_from_a_node_out_of_the_order_is_not_taken() -> None:
    c = Cluster("b", "a", "b")
    due(c)
    c.wills.done("x", [("x", "worker")])  # the gone node itself
    c.clock.advance(TAKE_UP_AFTER + 0.1)
    assert [m.payload for m in c.published] == [GONE]


def test_a_closed_node_publishes_nothing() -> None:
    c = Cluster("b", "a", "b")
    due(c)
    c.wills.close()
    c.clock.advance(10 * TAKE_UP_AFTER)
    assert c.published == []


# -- every transport: a will goes with the record, a goodbye publishes none -------------------


async def watcher(node: zmesh.Node, name: str) -> list[zmesh.Message]:
    got: list[zmesh.Message] = []
    agent = node.agent(name)

    @agent.on("status.>", inline=True)
    def seen(msg: zmesh.Message) -> None:
        got.append(msg)

    await agent.subscribe("status.>")
    return got


async def no_will_before_a_marker(nodes: list[zmesh.Node], seen: list[list[zmesh.Message]]) -> None:
    """Every node broadcasts a marker; each watcher gets them all, and got no will before."""
    for node in nodes:
        await node.agents[f"watch-{node.id}"].broadcast("status.marker", node.id)
    await wait_for(lambda: all(sum(m.topic == "status.marker" for m in got) == len(nodes) - 1 for got in seen),
                   10, "every marker")
    assert [[m.topic for m in got if m.topic != "status.marker"] for got in seen] == [[] for _ in seen]


async def test_a_will_is_in_every_record_and_a_goodbye_publishes_none(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2, n3 = await m.node(), await m.node(), await m.node()
        seen = [await watcher(n, f"watch-{n.id}") for n in (n1, n2)]
        worker = n3.agent("worker", will=("status.worker", GONE))
        closer = n3.agent("closer", will=("status.closer", "gone"))
        await m.converged()
        seen_by_n1, seen_by_n2 = n1.registry.record(n3.id), n2.registry.record(n3.id)
        assert seen_by_n1 is not None and seen_by_n2 is not None
        assert seen_by_n1.wills == {"worker": ("status.worker", GONE), "closer": ("status.closer", "gone")}
        worker.will = ("status.worker", "changed")
        await n3.settled(10)
        changed = ("status.worker", "changed")
        await wait_for(lambda: getattr(n2.registry.record(n3.id), "wills", {})["worker"] == changed, 10,
                       "the changed will")
        await closer.close()
        await wait_for(lambda: "closer" not in n1.registry.agents() and "closer" not in n2.registry.agents(), 10,
                       "the closed agent to leave")
        await n3.close()
        await wait_for(lambda: n3.id not in n1.registry and n3.id not in n2.registry, 10, "the closed node to leave")
        await no_will_before_a_marker([n1, n2], seen)
        assert n1.stats()["wills_published"] == 0


async def test_a_node_that_closes_is_seen_to_leave_not_to_die(transport: str) -> None:
    """Over a broker a node's record going says nothing of why: the goodbye
    record it puts last does, so a monitor tells a close from a crash."""
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        n2.agent("plain")
        await m.converged()
        departures: list[str] = []
        events = n1.events()  # its queue exists from here: nothing after is missed

        async def pump() -> None:
            async for event in events:
                if event.kind == "peer_left" and event.node_id == n2.id:
                    departures.append(event.detail)

        pumping = asyncio.ensure_future(pump())
        try:
            await n2.close()
            await wait_for(lambda: bool(departures), 10, "the peer_left event")
            assert departures == ["left"]
        finally:
            pumping.cancel()
            await asyncio.gather(pumping, return_exceptions=True)


# -- processes killed: the will is published once, by the smallest survivor ------------------


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait(10)
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()


def start_child(children: list[subprocess.Popen[str]], mesh: str, where: str) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-m", "tests._will_child", mesh, where, "worker", "status.worker"],
                             cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "ZMESH_INTERFACES": "127.0.0.1"})
    children.append(child)
    return child


async def read_line(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    return (await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 20)).strip()


KINDS = ["zmq", "nats", "mqtt", "redis", "file"]


@pytest.mark.multiprocess
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ending", ["sigkill", "goodbye"])
async def test_a_killed_nodes_will_is_published_once_and_a_closed_ones_never(
    kind: str, ending: str, children: list[subprocess.Popen[str]], request: pytest.FixtureRequest
) -> None:
    if kind != "zmq":
        request.getfixturevalue(f"{kind}_url")
    async with Mesh(kind) as m:
        n1, n2 = await m.node(), await m.node()
        seen = [await watcher(n, f"watch-{n.id}") for n in (n1, n2)]
        await m.converged()
        departures: list[str] = []
        events = n1.events()

        async def pump() -> None:
            async for event in events:
                if event.kind == "peer_left" and event.node_id == "dying":
                    departures.append(event.detail)

        pumping = asyncio.ensure_future(pump())
        request.addfinalizer(pumping.cancel)
        where = n1.endpoint if kind == "zmq" else (f"{BROKERS['file']}/{m.name}" if kind == "file" else BROKERS[kind])
        child = start_child(children, m.name, where)
        assert await read_line(child) == "ready"
        await n1.wait_for_agents("worker", timeout=10)
        await n2.wait_for_agents("worker", timeout=10)
        assert child.stdin is not None
        if ending == "goodbye":
            child.stdin.write("close\n")
            child.stdin.flush()
            assert await read_line(child) == "closed"
        else:
            child.send_signal(signal.SIGKILL)
        await wait_for(lambda: "worker" not in n1.registry.agents() and "worker" not in n2.registry.agents(), 30,
                       "the child's agent to leave")
        # A monitor tells a crash from a close: over a broker by the goodbye record a closing node puts last.
        killed = "lost its connection" if kind == "zmq" else GONE_DETAIL
        await wait_for(lambda: bool(departures), 10, "the peer_left event")
        assert departures == ["left" if ending == "goodbye" else killed]
        if ending == "goodbye":
            await no_will_before_a_marker([n1, n2], seen)
            return
        await wait_for(lambda: all(any(msg.topic == "status.worker" for msg in got) for got in seen), 10,
                       "the will at every watcher")
        publisher = min(n1.id, n2.id)
        for got in seen:
            wills = [msg for msg in got if msg.topic == "status.worker"]
            assert [(msg.sender, msg.payload) for msg in wills] == [(node_address(publisher), GONE)]
        await no_will_before_a_marker_again([n1, n2], seen)
        published = {n.id: n.stats()["wills_published"] for n in (n1, n2)}
        assert published == {n1.id: int(n1.id == publisher), n2.id: int(n2.id == publisher)}


async def no_will_before_a_marker_again(nodes: list[zmesh.Node], seen: list[list[zmesh.Message]]) -> None:
    """After markers from every node, each watcher still holds exactly one will."""
    for node in nodes:
        await node.agents[f"watch-{node.id}"].broadcast("status.marker", node.id)
    await wait_for(lambda: all(sum(m.topic == "status.marker" for m in got) == len(nodes) - 1 for got in seen),
                   10, "every marker")
    assert [sum(m.topic == "status.worker" for m in got) for got in seen] == [1] * len(seen)


def test_a_closing_node_over_a_broker_keeps_its_wills_withdrawn_whatever_its_agents_change() -> None:
    """A handler still running while the node closes may change its agent
    (meta, subscriptions): its will must not come back into the record."""
    from zmesh._engine import EngineConfig
    from zmesh._runtime.message_records import Records
    from zmesh.transport.memory import MemoryBroker, MemoryTransport

    records = Records(EngineConfig(mesh="m", node_id="n", incarnation="1"), MemoryTransport(MemoryBroker()),
                      None, lambda *dropped: None)  # type: ignore[arg-type]
    records.set_agent("w", (), frozenset(), None, ("status.w", 1))
    assert records.record().wills == {"w": ("status.w", 1)}
    assert records.say_goodbye() and records.record().wills == {} and records.record().bye
    records.set_agent("w", (), frozenset({"jobs.>"}), {"model": "x"}, ("status.w", 1))
    assert records.record().wills == {} and records.record().meta == {"w": {"model": "x"}}
    assert not records.say_goodbye()  # none left to withdraw


def test_the_blocking_facade_takes_and_changes_a_will() -> None:
    import zmesh.sync as zs

    with zs.Node("sync-will", name="one", transport="inproc") as one, \
            zs.Node("sync-will", name="two", transport="inproc") as two:
        agent = one.agent("worker", will=("status.worker", GONE))
        assert agent.will == ("status.worker", GONE)
        agent.will = ("status.worker", "changed")
        assert agent.will == ("status.worker", "changed")
        two.wait_for_agents("worker", timeout=10)
        one.settled(10)
        seen = two.registry.record(one.id)
        assert seen is not None and seen.wills == {"worker": ("status.worker", "changed")}


@pytest.mark.multiprocess
@pytest.mark.parametrize("kind", ["zmq", "nats", "redis"])
async def test_a_node_whose_loop_stalled_past_expiry_does_not_take_its_peers_for_dead(
    kind: str, children: list[subprocess.Popen[str]], request: pytest.FixtureRequest
) -> None:
    """A GC pause or a starved CPU blinds a node, not its peers: on waking it
    must not count their renewals, still unread, as missing (no leave, no will)."""
    if kind != "zmq":
        request.getfixturevalue(f"{kind}_url")
    async with Mesh(kind) as m:
        survivor = await m.node()
        seen = [await watcher(survivor, f"watch-{survivor.id}")]
        left: list[zmesh.MeshEvent] = []

        async def watch_events() -> None:
            async for event in survivor.events():
                if event.kind in ("peer_left", "will", "agent_left"):
                    left.append(event)

        watching = asyncio.ensure_future(watch_events())
        try:
            where = survivor.endpoint if kind == "zmq" else BROKERS[kind]
            child = start_child(children, m.name, where)
            assert await read_line(child) == "ready"
            await survivor.wait_for_agents("worker", timeout=10)
            time.sleep(6.0)  # the fault: this node's loop blocked past the peers' expiry (4 s)
            deadline = time.monotonic() + 3.0  # then two heartbeats and more, watched throughout
            while time.monotonic() < deadline:
                assert "worker" in survivor.registry.agents() and not left, left
                await asyncio.sleep(0.05)
            assert survivor.stats()["wills_published"] == 0 and seen == [[]]
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)


def test_word_that_a_will_was_published_before_this_node_saw_it_due_is_remembered() -> None:
    """The first node's notice can come before this node notices the death itself."""
    c = Cluster("b", "a", "b", "x")
    c.wills.done("a", [("x", "worker")])
    c.gone("x")
    due(c)
    c.clock.advance(10 * TAKE_UP_AFTER)
    assert c.published == []
    later = Cluster("b", "a", "b")  # the memory lasts DONE_MEMORY s: a later death is another's will
    later.wills.done("a", [("x", "worker")])
    later.clock.advance(DONE_MEMORY + 1)
    due(later)
    later.clock.advance(TAKE_UP_AFTER + 0.1)
    assert [m.payload for m in later.published] == [GONE]
    gone_itself = Cluster("b", "a", "b")
    gone_itself.wills.done("x", [("x", "worker")])  # the gone node cannot say its own will was published
    due(gone_itself)
    gone_itself.clock.advance(TAKE_UP_AFTER + 0.1)
    assert len(gone_itself.published) == 1
