"""Quotas (issue 20, item 2): what one peer and one key may take of a node.

Engine tests, sans-IO: a node over a quota is cut off (told BYE, gone from
the registry with its agents, its key's other nodes too in keyed mode), is
counted and reported, and is refused until the cooldown ends. The attack
over real sockets is in tests/test_hostile_keyed.py.
"""

from __future__ import annotations

import dataclasses
import pytest

import zmesh
from zmesh._engine import Engine, EngineConfig
from zmesh._engine import effects as fx

from .engine_pair import LIVENESS, WALL, Net
from .test_identity import KEY, KeyedNet, keyed

pytestmark = pytest.mark.timeout(30)


def plain(name: str, *agents: str, quotas: zmesh.Quotas | None = None, subs: frozenset[str] = frozenset()) -> Engine:
    engine = Engine(EngineConfig(mesh="lab", node_id=name, incarnation="0001", liveness=LIVENESS,
                                 wall_clock=lambda: WALL, quotas=quotas or zmesh.Quotas()))
    for agent in agents:
        engine.set_agent(agent, ("work",), subs)
    return engine


def _cut_events(net: Net, name: str) -> list[str]:
    return [e.detail for _, e in net.events(name, "peer_refused") if e.detail.startswith("over quota")]


def test_a_node_with_more_agents_than_its_quota_is_refused_then_cooled_down() -> None:
    net = Net(plain("a", "a1", quotas=zmesh.Quotas(agents_per_node=3, cooldown=5.0)), plain("b", *"wxyz"))
    net.connect("b", "a")
    net.deliver_all()
    a = net.engines["a"]
    assert not net.joined("a", "b") and a.dropped["over_quota"] == 1
    assert _cut_events(net, "a") == ["over quota: 4 agents, over agents_per_node=3"]
    net.restart(plain("b", "w"))  # within the cooldown: refused whatever it says
    net.connect("b", "a")
    net.deliver_all()
    assert not net.joined("a", "b") and a.dropped["over_quota"] >= 2
    net.advance(net.now + 6, until=lambda: net.joined("a", "b"))  # it keeps knocking; after 5 s it is in
    assert net.joined("a", "b") and a.registry.node_of("w") == "b"


def test_a_joined_node_whose_update_goes_over_is_cut_off_with_its_agents() -> None:
    net = Net(plain("a", "a1", quotas=zmesh.Quotas(subscriptions_per_node=2)), plain("b", "b1"))
    net.connect("b", "a")
    net.deliver_all()
    assert net.joined("a", "b")
    b = net.engines["b"]
    b.set_agent("b1", ("work",), frozenset({"x.>", "y.>", "z.>"}))
    net.pump("b")
    net.deliver_all()
    a = net.engines["a"]
    assert "b" not in a.members.peers and a.registry.node_of("b1") is None
    assert len(_cut_events(net, "a")) == 1 and any(e.kind == "agent_left" for _, e in net.events("a"))
    byes = [eff for eff in net.effects("a", fx.SEND) if b"over quota" in eff.effect[2]]
    assert byes, "b was not told BYE"
    assert "a" not in b.members.peers  # and it heard it


def test_every_node_of_a_key_is_cut_when_the_key_goes_over() -> None:
    quotas = zmesh.Quotas(nodes_per_key=2)
    a = Engine(EngineConfig(mesh="lab", node_id="a", incarnation="0001", liveness=LIVENESS, wall_clock=lambda: WALL,
                            public_key=KEY["a"], quotas=quotas))
    net = KeyedNet(a, keyed("b", "b1"), keyed("c", "c1"), keyed("x", "x1"))
    net.keys.update(c=KEY["b"], x=KEY["b"])  # one key, three names
    for name in ("b", "c"):
        net.connect(name, "a")
        net.deliver_all()
    assert net.joined("a", "b") and net.joined("a", "c")
    net.connect("x", "a")
    net.deliver_all()
    assert a.members.peers == {} and a.registry.agents() == {}
    assert a.dropped["over_quota"] >= 1
    assert _cut_events(net, "a")[0] == "over quota: 3 nodes of one key, over nodes_per_key=2"


def test_record_bytes_per_key_add_up_over_its_nodes() -> None:
    quotas = zmesh.Quotas(record_bytes_per_key=6000)
    a = Engine(EngineConfig(mesh="lab", node_id="a", incarnation="0001", liveness=LIVENESS, wall_clock=lambda: WALL,
                            public_key=KEY["a"], quotas=quotas))
    many = [f"agent-{i:04d}" for i in range(150)]  # about 3 KB of record each
    net = KeyedNet(a, keyed("b", *many[:75]), keyed("c", *many[75:]))
    net.keys["c"] = KEY["b"]
    net.connect("b", "a")
    net.deliver_all()
    assert net.joined("a", "b")
    net.connect("c", "a")
    net.deliver_all()
    assert a.members.peers == {} and a.dropped["over_quota"] >= 1
    assert "bytes of records of one key" in _cut_events(net, "a")[0]


def test_a_peer_that_sends_records_too_fast_is_cut_off_and_a_steady_one_is_not() -> None:
    quotas = zmesh.Quotas(record_bytes_per_second=10 * 1024, record_bytes_burst=20 * 1024)  # 10 small records/s
    net = Net(plain("a", "a1", quotas=quotas), plain("b", "b1"), plain("c", "c1"))
    for name in ("b", "c"):
        net.connect(name, "a")
        net.deliver_all()
    a, b, c = net.engines["a"], net.engines["b"], net.engines["c"]
    for i in range(40):  # c: 40 changes over 8 s, within 10/s
        net.now += 0.2
        c.set_agent("c1", ("work",), frozenset({f"t{i}.>"}))
        net.pump("c")
        net.deliver_all()
    assert net.joined("a", "c")
    for i in range(40):  # b: 40 changes at once, each in its own frame
        b.set_agent("b1", ("work",), frozenset({f"t{i}.>"}))
        net.pump("b")
        b.flush()
        net.pump("b")
    net.deliver_all()
    assert "b" not in a.members.peers and net.joined("a", "c")
    assert "records faster than record_bytes_per_second=10240" in _cut_events(net, "a")[0]
    assert any(e.kind == "peer_refused" and e.detail.startswith("over quota: records faster")
               for _, e in net.events("b"))  # b hears why it was cut off
    assert b.dropped["cut_off"] == 1


def test_a_node_that_subscribes_per_job_as_fast_as_it_can_is_not_cut_off() -> None:
    net = Net(plain("a", "a1"), plain("b", "b1"))  # the default quotas
    net.connect("b", "a")
    net.deliver_all()
    b = net.engines["b"]
    for job in range(3000):  # subscribe and unsubscribe a topic per job, each its own frame
        for subs in (frozenset({f"job.{job}.>"}), frozenset()):
            b.set_agent("b1", ("work",), subs)
            b.flush()
            net.pump("b")
        if job % 100 == 0:
            net.deliver_all()
    net.deliver_all()
    assert net.joined("a", "b") and net.engines["a"].dropped["over_quota"] == 0


def test_quotas_are_checked_up_front() -> None:
    with pytest.raises(ValueError, match="nodes_per_key"):
        zmesh.Quotas(nodes_per_key=0)
    with pytest.raises(ValueError, match="cooldown"):
        zmesh.Quotas(cooldown=float("inf"))
    assert dataclasses.replace(zmesh.Quotas(), agents_per_node=5).agents_per_node == 5


def test_a_burst_of_record_changes_sends_a_few_updates_not_one_each() -> None:
    from zmesh._wire import codec
    from zmesh._wire.control import UPDATE

    quotas = zmesh.Quotas(record_bytes_burst=200 * 1024, record_bytes_per_second=1024)  # one UPDATE each: ~10 MB
    net = Net(plain("a", "a1", quotas=quotas), plain("b", "b1"))
    net.connect("b", "a")
    net.deliver_all()
    b = net.engines["b"]
    since = net.now
    for i in range(1000):  # as a loop registering agents would, between two flushes
        b.set_agent(f"w{i}", ("work",), frozenset())
    b.flush()
    net.pump("b")
    updates = [item for seen in net.effects("b", fx.SEND, since)
               for item in codec.decode_frame(seen.effect[2], 1 << 30) if item[0] == UPDATE]
    assert len(updates) <= 3  # the first leaves at once; the rest wait for the flush, as one
    b.remove_agent("w5")  # an agent left: not merged into the UPDATE queued before it
    b.set_agent("w1000", ("work",), frozenset())
    b.flush()
    net.pump("b")
    net.deliver_all()
    assert net.joined("a", "b") and a_sees(net, "w999") and not a_sees(net, "w5") and a_sees(net, "w1000")


def a_sees(net: Net, agent: str) -> bool:
    return net.engines["a"].registry.node_of(agent) == "b"
