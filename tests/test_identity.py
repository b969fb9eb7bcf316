"""Keyed mode: identities bound to keys (issue 10, item 3).

A node name and an agent id belong to a public key; a policy limits the
agent ids and topics a key may use. The engine tests give each fake node a
fake public key per frame (what the CurveZMQ transport passes); the zmq
tests use real keys on 127.0.0.1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import zmq

import zmesh
from zmesh._engine import Engine, EngineConfig
from zmesh._engine import effects as fx
from zmesh._engine.identity import MAX_BOUND_NAMES, parse_policy
from zmesh.message import Message
from zmesh.registry import NodeRecord
from zmesh._wire import codec
from zmesh._wire.names import node_address
from zmesh.security import keygen, load_key
from zmesh.transport.base import endpoint_address

from .engine_pair import LIVENESS, WALL, Net, Packet
from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)

FAST = zmesh.LivenessConfig(heartbeat=0.2, evasive_after=0.6, expire_after=1.5)
KEY = {name: f"key-of-{name}" for name in ("a", "b", "c", "x")}  # fake public keys


class KeyedNet(Net):
    """A Net whose frames carry their sender's public key, as the CurveZMQ
    transport passes it: ``keys[node name]`` (change it to restart a node
    with another key)."""

    def __init__(self, *engines: Engine) -> None:
        self.keys = {e.node_id: KEY[e.node_id] for e in engines}
        super().__init__(*engines)

    def deliver(self, packet: Packet) -> None:
        engine = self.engines[packet.dst]
        if packet.kind == "direct":
            engine.receive_direct(packet.key, packet.data, self.now, self.keys[packet.src])
            self.pump(packet.dst)
        elif packet.kind == "pub":
            engine.receive_published(packet.data, self.now, self.keys[packet.src])
            self.pump(packet.dst)
        else:
            super().deliver(packet)

    def public_key(self, name: str) -> str | None:
        return self.keys[name]


def keyed(name: str, *agents: str, inc: str = "0001", key: str | None = None,
          names: dict[str, str] | None = None, policy: dict[str, Any] | None = None) -> Engine:
    engine = Engine(EngineConfig(mesh="lab", node_id=name, incarnation=inc, liveness=LIVENESS,
                                 wall_clock=lambda: WALL, public_key=key or KEY[name],
                                 key_of_name=(names or {}).get, policy=parse_policy(policy)))
    for agent in agents:
        engine.set_agent(agent, ("work",), frozenset({"news.>", "jobs.>"}))
    return engine


def joined_pair(**a_options: Any) -> KeyedNet:
    net = KeyedNet(keyed("a", "a1", **a_options), keyed("b", "b1"))
    net.connect("b", "a")
    net.deliver_all()
    assert net.joined("a", "b")
    return net


def restart(net: KeyedNet, name: str, key: str, *agents: str, inc: str = "0002") -> Engine:
    net.close(name)
    net.deliver_all()
    net.keys[name] = key
    engine = net.restart(keyed(name, *agents, inc=inc, key=key))
    net.connect(name, "a")
    net.deliver_all()
    return engine


def ask(sender: str, target: str, topic: str = "jobs.run", cid: str = "c1") -> Message:
    return Message(type="task", sender=sender, target=target, topic=topic, payload=7,
                   correlation_id=cid, reply_to=sender)


# -- node names -------------------------------------------------------------


def test_a_node_name_stays_with_the_key_that_first_joined_with_it_even_after_it_left() -> None:
    net = joined_pair()
    a = net.engines["a"]
    restart(net, "b", KEY["x"], "x1")  # another trusted key, the same name, after b said BYE
    assert a.dropped["wrong_key"] >= 1
    assert "b" not in a.members.peers and a.registry.node_of("x1") is None
    restart(net, "b", KEY["b"], "b1", inc="0003")  # the key the name belongs to: welcome back
    assert net.joined("a", "b") and a.registry.node_of("b1") == "b"


def test_a_name_the_trusted_directory_binds_is_only_for_its_key() -> None:
    net = KeyedNet(keyed("a", "a1", names={"b": KEY["b"]}), keyed("b", "x1", key=KEY["x"]))
    net.keys["b"] = KEY["x"]
    net.connect("b", "a")
    net.deliver_all()
    a = net.engines["a"]
    assert a.dropped["wrong_key"] >= 1 and a.members.peers == {}  # x came first, but the name is b.key's
    restart(net, "b", KEY["b"], "b1")
    assert net.joined("a", "b")


def test_names_remembered_are_bounded_and_a_name_held_now_is_never_forgotten() -> None:
    net = joined_pair()
    identity = net.engines["a"].identity
    for i in range(MAX_BOUND_NAMES + 10):
        identity.bind(f"k{i}", keyed(f"n{i}", key="k").local_record(), lambda agent: False,
                      net.engines["a"].members.peers)
    assert len(identity.names) == MAX_BOUND_NAMES and identity.names["b"] == KEY["b"]


@pytest.mark.parametrize("forged", ["bye", "reply"])
def test_a_frame_over_a_peers_connection_from_another_key_is_dropped(forged: str) -> None:
    net = joined_pair()
    a, b = net.engines["a"], net.engines["b"]
    net.answer = False
    key = net.request("a", ask("a1", "b1"), deadline=30.0)
    net.deliver_all()
    [(_, request)] = net.unanswered
    if forged == "bye":
        b.close(net.now)
    else:
        b.reply_status(request, "ok", "forged")
    b.flush()
    [frame] = [e[2] for e in b.take_effects() if e[0] == fx.SEND]
    a.receive_direct(b.key, frame, net.now, KEY["x"])  # b's connection, x's key
    assert a.dropped["wrong_key"] == 1
    assert "b" in a.members.peers and key in a.requests.pending
    a.receive_direct(b.key, frame, net.now, KEY["b"])  # the control: from b's key it counts
    assert ("b" in a.members.peers) == (forged != "bye") and key not in a.requests.pending


def test_a_broadcast_published_by_another_key_is_dropped() -> None:
    net = joined_pair()
    a, b = net.engines["a"], net.engines["b"]
    b.broadcast(Message(sender="b1", topic="news.x", payload="hi"))
    b.flush()
    [frame] = [e[1] for e in b.take_effects() if e[0] == fx.PUBLISH]
    a.receive_published(frame, net.now, KEY["x"])  # forged in b's name by another member
    assert a.dropped["wrong_key"] == 1
    assert not [e for e in a.take_effects() if e[0] == fx.DELIVER]
    a.receive_published(frame, net.now, KEY["b"])
    assert [e[1] for e in a.take_effects() if e[0] == fx.DELIVER] == ["a1"]


def test_keyed_a_reply_from_another_joined_node_is_dropped() -> None:
    net = joined_pair()
    a = net.engines["a"]
    c = net.add(keyed("c", "c1"))
    net.keys["c"] = KEY["c"]
    net.connect("c", "a")
    net.deliver_all()
    assert net.joined("a", "c")
    net.answer = False
    key = net.request("a", ask("a1", "b1"), deadline=30.0)
    net.deliver_all()
    c.reply(Message("result", "c1", "a1", "jobs.run", "forged", key[1], status="ok"))  # from c's own key
    net.pump("c")
    net.deliver_all()
    assert a.dropped["spoofed_reply"] == 1 and key in a.requests.pending


# -- agent ids ----------------------------------------------------------------


def test_an_agent_id_belongs_to_the_key_that_first_listed_it() -> None:
    net = joined_pair()
    a = net.engines["a"]
    c = net.add(keyed("c", "b1"))  # b's agent id, from c's key
    net.keys["c"] = KEY["c"]
    net.connect("c", "a")
    net.deliver_all()
    assert a.dropped["agent_taken"] >= 1 and "c" not in a.members.peers
    assert a.registry.node_of("b1") == "b"
    # in an UPDATE too, and for this node's own agents
    c.remove_agent("b1")
    c.set_agent("c1", (), frozenset())
    net.pump("c")
    net.advance(net.now + 2 * LIVENESS.heartbeat)
    assert net.joined("a", "c")
    taken = a.dropped["agent_taken"]
    c.set_agent("a1", (), frozenset())
    net.pump("c")
    net.deliver_all()
    assert a.dropped["agent_taken"] == taken + 1 and a.registry.node_of("a1") == "a"
    assert a.members.peers["c"].record.agents.keys() == {"c1"}


def test_the_same_key_restarted_hosts_its_agents_again() -> None:
    net = joined_pair()
    a = net.engines["a"]
    restart(net, "b", KEY["b"], "b1", "b2")
    assert net.joined("a", "b") and a.registry.node_of("b1") == "b" and a.dropped["agent_taken"] == 0


def test_keyless_engines_bind_nothing() -> None:
    net = Net(Engine(EngineConfig(mesh="lab", node_id="a", incarnation="1", liveness=LIVENESS)),
              Engine(EngineConfig(mesh="lab", node_id="b", incarnation="1", liveness=LIVENESS)))
    net.connect("b", "a")
    net.deliver_all()
    a = net.engines["a"]
    assert net.joined("a", "b") and a.identity.names == {} and a.identity.agents == {}


# -- policy -------------------------------------------------------------------


@pytest.mark.parametrize("entry", [KEY["b"], "b", "*"])
def test_the_policy_limits_the_agent_ids_a_key_may_host(entry: str) -> None:
    policy = {entry: {"agents": ["worker-*"]}}
    net = KeyedNet(keyed("a", "a1", names={"b": KEY["b"]}, policy=policy), keyed("b", "b1"))
    net.connect("b", "a")
    net.deliver_all()
    a = net.engines["a"]
    assert a.dropped["policy"] >= 1 and "b" not in a.members.peers
    restart(net, "b", KEY["b"], "worker-1")
    assert net.joined("a", "b") and a.registry.node_of("worker-1") == "b"


def test_a_name_policy_applies_only_to_the_key_the_directory_binds_it_to() -> None:
    policy = {"b": {"agents": ["worker-*"]}}
    net = KeyedNet(keyed("a", "a1", policy=policy), keyed("b", "b1"))  # no b.key in the directory
    net.connect("b", "a")
    net.deliver_all()
    assert net.joined("a", "b")


def test_a_name_policy_follows_its_key_under_any_other_name() -> None:
    # b.key binds name b to KEY["b"]; the key joins as node "x"
    policy = {"b": {"agents": ["worker-*"], "topics": ["jobs.>"]}}
    net = KeyedNet(keyed("a", "a1", names={"b": KEY["b"]}, policy=policy), keyed("x", "evil", key=KEY["b"]))
    net.keys["x"] = KEY["b"]
    net.connect("x", "a")
    net.deliver_all()
    a = net.engines["a"]
    assert a.dropped["policy"] >= 1 and "x" not in a.members.peers
    restart(net, "x", KEY["b"], "worker-1")
    assert net.joined("a", "x")
    rule = a.members.peers["x"].rule
    assert rule is not None and rule.topic_ok("jobs.run") and not rule.topic_ok("admin.x")


def test_a_key_bound_to_several_names_may_do_what_any_of_them_may() -> None:
    policy = {"b": {"agents": ["w-*"]}, "c": {"agents": ["v-*"]}, "*": {"agents": []}}
    names = {"b": KEY["b"], "c": KEY["b"]}
    identity = keyed("a", names=names, policy=policy).identity
    assert identity.rule_for(KEY["b"], "b").agent_ok("w-1") and not identity.rule_for(KEY["b"], "b").agent_ok("v-1")
    other = identity.rule_for(KEY["b"], "other")
    assert other is not None and other.agent_ok("w-1") and other.agent_ok("v-1") and not other.agent_ok("x")
    stranger = identity.rule_for(KEY["x"], "b")  # a key no entry names gets "*", even under a named name
    assert stranger is not None and not stranger.agent_ok("w-1")


def test_the_policy_limits_the_topics_a_key_may_send_on() -> None:
    net = joined_pair(policy={KEY["b"]: {"topics": ["jobs.>"]}})
    a, b = net.engines["a"], net.engines["b"]
    net.request("b", ask("b1", "a1", topic="jobs.run", cid="ok"), deadline=10.0)
    net.request("b", ask("b1", "a1", topic="admin.wipe", cid="no"), deadline=10.0)
    net.deliver_all()
    delivered = [s.effect[2].topic for s in net.effects("a", fx.DELIVER)]
    assert delivered == ["jobs.run"] and a.dropped["policy"] == 1
    [dead] = net.effects("a", fx.DEAD)
    assert dead.effect[2] == "policy" and dead.effect[1].topic == "admin.wipe"
    replies = {s.effect[2].correlation_id: s.effect[2] for s in net.effects("b", fx.REPLIED)}
    assert replies["ok"].status == "ok"
    assert replies["no"].status == "error" and replies["no"].payload["type"] == "PolicyError"
    # and broadcasts: a1 subscribes to news.> and jobs.>
    for topic in ("news.x", "jobs.done"):
        b.broadcast(Message(sender="b1", topic=topic, payload="hi"))
        net.pump("b")
    net.deliver_all()
    assert [s.effect[2].topic for s in net.effects("a", fx.DELIVER) if s.effect[3]] == ["jobs.done"]
    assert a.dropped["policy"] == 2


def test_the_mesh_own_topics_pass_a_topic_policy_and_stats_does_not() -> None:
    """A key limited to jobs.> may still stream its replies' chunks, move a
    stream's window and cancel what it asked: parts of the primitives it may
    use, each checked where it is taken. zmesh.stats stays the policy's."""
    net = joined_pair(policy={KEY["b"]: {"topics": ["jobs.>"]}})
    a, b = net.engines["a"], net.engines["b"]
    chunk = Message(type="notify", sender="b1", target="a1", topic="zmesh.chunk", payload=[0, "tok"],
                    correlation_id="", reply_to="")
    assert b.send(chunk, now=net.now)
    for topic in ("zmesh.cancel", "zmesh.more", "zmesh.will_done"):
        assert b.send(Message(type="notify", sender=node_address("b"), target=node_address("a"), topic=topic,
                              payload=[["a1", "c1"]]), now=net.now)
    net.pump("b")
    net.request("b", Message(type="task", sender=node_address("b"), target=node_address("a"), topic="zmesh.stats",
                             correlation_id="s1", reply_to=node_address("b")), deadline=10.0)
    net.deliver_all()
    assert [s.effect[2].topic for s in net.effects("a", fx.DELIVER)] == ["zmesh.chunk"]
    assert [s.effect[1].topic for s in net.effects("a", fx.NODE_MSG)] == ["zmesh.cancel", "zmesh.more",
                                                                          "zmesh.will_done"]
    assert a.dropped["policy"] == 1  # the stats request
    [reply] = [s.effect[2] for s in net.effects("b", fx.REPLIED)]
    assert reply.status == "error" and reply.payload["type"] == "PolicyError"


def test_a_will_on_a_topic_the_key_may_not_use_is_refused_with_its_record() -> None:
    """Another node publishes a will in its own name: a key may not leave one
    on a topic its policy keeps from it."""
    policy = {KEY["b"]: {"topics": ["status.>"]}}
    net = KeyedNet(keyed("a", "a1", policy=policy), keyed("b"))
    b = net.engines["b"]
    b.set_agent("b1", (), frozenset(), will=("orders.cancel_all", 1))
    net.connect("b", "a")
    net.deliver_all()
    a = net.engines["a"]
    assert a.dropped["policy"] >= 1 and "b" not in a.members.peers
    net2 = KeyedNet(keyed("a", "a1", policy=policy), keyed("b"))
    net2.engines["b"].set_agent("b1", (), frozenset(), will=("status.b1", "gone"))
    net2.connect("b", "a")
    net2.deliver_all()
    assert net2.joined("a", "b")
    record = net2.engines["a"].registry.record("b")
    assert record is not None and record.wills == {"b1": ("status.b1", "gone")}


def test_a_bad_policy_is_refused_up_front() -> None:
    for bad in ({"k": {"topics": "jobs.>"}}, {"k": {"topics": ["a..b"]}}, {"k": {"agent": ["x"]}}, {"": {}}):
        with pytest.raises(ValueError):
            parse_policy(bad)
    with pytest.raises(ValueError, match="policy needs keys"):
        zmesh.Node("m", policy={"*": {"topics": ["jobs.>"]}})


# -- real keys, real sockets ----------------------------------------------------


def _key(root: Path, name: str) -> Path:
    return keygen(name, root)[1]


async def test_zmq_a_trusted_key_cannot_take_a_name_another_key_joined_with(tmp_path: Path) -> None:
    trusted = tmp_path / "trusted"
    a_key, b_key, x_key = _key(trusted, "a"), _key(trusted, "bee"), _key(trusted, "x")
    async with Mesh("zmq", liveness=FAST, trusted=trusted) as m:
        a = await m.node(key=a_key)
        b = await m.node(key=b_key, name="worker")
        await a.wait_until(lambda: "worker" in a.peers, 10, "worker to join")
        await b.close()
        await a.wait_until(lambda: "worker" not in a.peers, 10, "worker to leave")
        impostor = await m.node(key=x_key, name="worker")
        impostor.agent("fake")
        await wait_for(lambda: a.stats()["dropped"].get("wrong_key", 0) >= 1, 10, "the impostor's HELLO dropped")
        assert "worker" not in a.peers and a.registry.node_of("fake") is None
        # a name its NAME.key binds: only that key may use it, even first
        thief = await m.node(key=x_key, name="bee")
        await wait_for(lambda: a.stats()["dropped"].get("wrong_key", 0) >= 2, 10, "the thief's HELLO dropped")
        assert "bee" not in a.peers
        real = await m.node(key=b_key, name="bee")  # the control: its own key joins
        await a.wait_until(lambda: "bee" in a.peers, 10, "bee to join")
        assert real.id == "bee" and thief.peers == []


async def test_zmq_a_trusted_key_cannot_host_an_agent_id_another_key_owns(tmp_path: Path) -> None:
    trusted = tmp_path / "trusted"
    a_key, x_key = _key(trusted, "a"), _key(trusted, "x")
    async with Mesh("zmq", liveness=FAST, trusted=trusted) as m:
        a = await m.node(key=a_key)
        a.agent("billing").add_handler("pay", lambda msg: "paid by a")
        x = zmesh.Node(m.name, key=x_key, trusted=trusted, liveness=FAST, discovery=False, seeds=[a.endpoint])
        m.nodes.append(x)
        x.agent("billing").add_handler("pay", lambda msg: "paid by x")  # a's agent id, before x joins
        await x.start()
        await wait_for(lambda: a.stats()["dropped"].get("agent_taken", 0) >= 1, 10, "x's HELLO refused")
        assert x.id not in a.peers and a.registry.node_of("billing") == a.id
        reply = await a.agent("client").request("billing", "pay", None, timeout=5)
        assert reply.payload == "paid by a"


async def test_zmq_the_policy_blocks_a_topic(tmp_path: Path) -> None:
    trusted = tmp_path / "trusted"
    a_key, w_key = _key(trusted, "a"), _key(trusted, "worker")
    policy = {"worker": {"agents": ["w-*"], "topics": ["jobs.>"]}}
    async with Mesh("zmq", liveness=FAST, trusted=trusted) as m:
        a = await m.node(key=a_key, policy=policy)
        boss = a.agent("boss")
        boss.add_handler("jobs.>", lambda msg: "job ok")
        boss.add_handler("admin.>", lambda msg: "wiped")
        w = await m.node(key=w_key, name="worker")
        await w.wait_for_agents("boss", timeout=10)
        client = w.agent("w-1")
        assert (await client.request("boss", "jobs.run", None, timeout=5)).payload == "job ok"
        with pytest.raises(zmesh.HandlerError, match="policy"):
            await client.request("boss", "admin.wipe", None, timeout=5)
        assert a.stats()["dropped"].get("policy") == 1
        assert [d.reason for d in a.dead_letters] == ["policy"]


async def test_zmq_keyed_a_trusted_key_cannot_take_over_another_nodes_routing_id(tmp_path: Path) -> None:
    trusted = tmp_path / "trusted"
    a_key, b_key, x_key = _key(trusted, "a"), _key(trusted, "b"), _key(trusted, "x")
    ctx: zmq.Context[Any] = zmq.Context()
    forger = ctx.socket(zmq.DEALER)
    try:
        async with Mesh("zmq", liveness=FAST, trusted=trusted) as m:
            a = await m.node(key=a_key)
            b = await m.node(key=b_key)
            a.agent("echo").add_handler("x", lambda msg: msg.payload)
            await b.wait_for_agents("echo", timeout=10)
            # b seeing a is not a having accepted b: wait for both, or "b not
            # in a.peers" below holds before the forgery and proves nothing.
            await wait_for(lambda: b.id in a.peers, 10, "a accepts b")
            x = load_key(x_key)
            forger.setsockopt(zmq.LINGER, 0)
            forger.curve_serverkey = a.public_key.encode()  # type: ignore[union-attr]
            forger.curve_publickey, forger.curve_secretkey = x.public.encode(), x.secret.encode()
            forger.setsockopt(zmq.ROUTING_ID, b.key.encode())  # b's node key: no secret
            forger.connect(endpoint_address(a.endpoint))
            forger.send(codec.join_frame([codec.encode_control(codec.Bye("closed"))]))

            def refused() -> int:
                stats = a.stats()
                return int(stats["transport"].get("identity_taken", 0) + stats["dropped"].get("unknown_peer", 0)
                           + stats["dropped"].get("wrong_key", 0))

            await wait_for(lambda: refused() >= 1 or b.id not in a.peers, 10, "the forged BYE")
            assert b.id in a.peers
            assert (await b.agent("c").request("echo", "x", 3, timeout=5)).payload == 3
    finally:
        forger.close(0)
        ctx.term()


# -- subscriber-ready markers ---------------------------------------------------


def test_a_ready_marker_counts_only_for_a_node_of_the_key_that_sent_it() -> None:
    net = joined_pair()
    a = net.engines["a"]
    c = keyed("c", "c1")
    a.subscriber_ready(c.key, net.now, KEY["b"])  # b's connection says c is attached, before c's HELLO
    net.keys["c"] = KEY["c"]
    net.add(c)
    net.connect("c", "a")
    net.deliver_all(only=lambda p: p.kind != "ready")  # c's own SUB does not attach yet
    assert "c" in a.members.peers and not a.members.peers["c"].joined and a.registry.node_of("c1") is None
    net.deliver_all()  # now it does, with c's key
    assert net.joined("a", "c") and a.registry.node_of("c1") == "c"


def test_ready_markers_are_bounded_per_key_and_forgotten_in_time() -> None:
    from zmesh._engine.config import MAX_READY_PER_KEY, READY_PATIENCE

    net = joined_pair()
    a = net.engines["a"]
    for i in range(100):
        a.subscriber_ready(f"n{i}|0001", net.now, KEY["b"])
    assert len(a.members.ready_keys) == MAX_READY_PER_KEY and a.dropped["too_many_ready"] == 100 - MAX_READY_PER_KEY
    a.subscriber_ready("other|0001", net.now, KEY["c"])  # another key still has room
    assert "other|0001" in a.members.ready_keys
    a.subscriber_ready("b|0001", net.now, KEY["c"])  # a name bound to b's key: not c's to mark
    assert a.dropped["wrong_key"] == 1
    a.tick(net.now + READY_PATIENCE + 1)
    assert a.members.ready_keys == {}


def test_a_big_record_against_a_full_claims_table_looks_at_each_claim_once() -> None:
    from zmesh._engine.identity import MAX_CLAIMED_AGENTS

    net = joined_pair()
    identity = net.engines["a"].identity
    identity.agents = {f"old-{i}": "k-old" for i in range(MAX_CLAIMED_AGENTS)}
    asked: list[str] = []

    def held(agent_id: str) -> bool:
        asked.append(agent_id)
        return not agent_id.endswith("7")  # a tenth of the old ids are hosted no more

    big = NodeRecord("n", "0001", "lab", 1, "tcp://n:1", "tcp://n:2", agents={f"new-{i}": () for i in range(10_000)})
    identity.bind("k", big, held, {})
    assert len(asked) <= MAX_CLAIMED_AGENTS  # one pass, not one per new id
    assert len(identity.agents) == MAX_CLAIMED_AGENTS
    assert sum(1 for k in identity.agents.values() if k == "k") == sum(1 for i in range(MAX_CLAIMED_AGENTS)
                                                                         if str(i).endswith("7"))
