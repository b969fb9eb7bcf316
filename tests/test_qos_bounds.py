"""What QoS 1 and 2 keep is bounded, per sender, and private (issue 20,
items 5 and 6), at the engine's level (no sockets, no asyncio): duplicate
windows per sending agent; the store's file modes. The attacks themselves
are tests/test_hostile_qos.py's.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path
from typing import Any, Iterator

import pytest

import zmesh

from tests.engine_pair import LIVENESS, WALL, Net, kinds, make_engine
from zmesh._engine import Engine, EngineConfig
from zmesh._engine import dedup
from zmesh._wire import codec
from zmesh._engine import effects as fx
from zmesh._engine.dedup import DONE, RUNNING, Dedup
from zmesh.errors import Backpressure, InvalidMessage
from zmesh.message import Message
from zmesh.store import SqliteStore, StoreError


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dedup, "DEDUP_WINDOW", 100)
    monkeypatch.setattr(dedup, "DEDUP_TOTAL", 1000)
    monkeypatch.setattr(dedup, "REPLY_CACHE_BYTES", 10_000)


def _handled(d: Dedup, sender: str, ids: range | list[str], reply: bytes = DONE) -> None:
    for i in ids:
        assert d.add(sender, str(i)) is None
        d.finish(sender, str(i), reply)


# -- the windows, alone --------------------------------------------------------------


def test_one_senders_flood_forgets_only_its_own_oldest_ids(small: None) -> None:
    d = Dedup()
    _handled(d, "good", ["g1"])
    _handled(d, "bad", range(10_000))
    assert d.add("good", "g1") is DONE  # a repeat, still recognised
    assert len(d.windows["bad"]) <= 100 and d.add("bad", "9999") is DONE and d.add("bad", "0") is None


def test_many_senders_share_a_bounded_total_and_the_biggest_shrink_first(small: None) -> None:
    d = Dedup()
    _handled(d, "good", range(20))
    for s in range(20):  # 20 senders of 100 ids: twice the total
        _handled(d, f"bad-{s}", range(100))
    assert d.count <= 1000 and len(d) <= 1000
    assert all(d.add("good", str(i)) is DONE for i in range(20))  # below the level: nothing lost
    assert max(len(w) for s, w in d.windows.items() if s != "good") < 100


def test_a_sender_per_id_costs_its_window_too(small: None) -> None:
    d = Dedup()
    for s in range(5000):  # one id from each of 5,000 senders
        _handled(d, f"s{s}", ["x"])
    assert d.count <= 1000 and len(d.windows) <= 1000 // dedup.WINDOW_COST


def test_ids_whose_handler_runs_are_never_forgotten(small: None) -> None:
    d = Dedup()
    assert d.add("slow", "running") is None
    _handled(d, "slow", range(1000))
    assert d.add("slow", "running") is RUNNING
    d.forget("slow", "running")  # dropped before its handler ran: its repeat is taken
    assert d.add("slow", "running") is None


def test_replies_are_bounded_and_the_biggest_replier_loses_first(small: None) -> None:
    d = Dedup()
    _handled(d, "good", ["q"], b"r" * 100)
    _handled(d, "bad", range(50), b"R" * 1000)  # 50 kB of replies: five times the cache
    assert d.reply_bytes <= 10_000 and d.add("good", "q") == b"r" * 100
    d.forget("good", "q")  # a repeat: nothing changes
    assert d.replies["good"] == 100 and sum(d.replies.values()) == d.reply_bytes


# -- in the engine ---------------------------------------------------------------------


def test_engine_a_window_that_grew_while_its_handlers_ran_shrinks_when_they_return(small: None) -> None:
    net = Net(make_engine("a", agents=("a1",)), make_engine("b", agents=("b1",)))
    net.connect("a", "b")
    net.deliver_all()
    a, b = net.engines["a"], net.engines["b"]
    for i in range(300):
        a.send(Message(sender="a1", target="b1", topic="work", payload=i, qos=1, timestamp=WALL))
    net.pump("a")
    net.deliver_all()
    assert len(b.reliable.seen) == 300  # all running: none may be forgotten
    for seen in net.effects("b", fx.DELIVER):
        b.handled(seen.effect[4], seen.effect[2])
    assert len(b.reliable.seen) <= 100


def test_engine_a_flood_from_one_node_leaves_another_nodes_repeat_recognised(small: None) -> None:
    net = Net(make_engine("a", agents=("a1",)), make_engine("b", agents=("b1",)), make_engine("c", agents=("c1",)))
    net.connect("b", "a")
    net.connect("c", "a")
    net.deliver_all()
    a, b, c = (net.engines[n] for n in "abc")

    def handle_delivered() -> None:
        for seen in net.effects("a", fx.DELIVER):
            msg = seen.effect[2]
            if msg.id not in handled:
                handled.append(msg.id)
                a.handled(seen.effect[4], msg)
        net.pump("a")
        net.deliver_all()

    handled: list[str] = []
    legit = Message(sender="b1", target="a1", topic="work", payload=0, qos=1)
    b.send(legit)
    net.pump("b")
    net.deliver_all()
    handle_delivered()
    assert b.reliable.unacked == 0
    for i in range(500):
        c.send(Message(sender="c1", target="a1", topic="work", payload=i, qos=1))
        if i % 50 == 49:
            net.pump("c")
            net.deliver_all()
            handle_delivered()
    assert len(handled) == 501 and c.reliable.unacked == 0
    b.send(legit)  # sent again, same id
    net.pump("b")
    net.deliver_all()
    assert a.stats["duplicates"] == 1 and b.reliable.unacked == 0  # acknowledged, not delivered again
    assert [s.effect[2].id for s in net.effects("a", fx.DELIVER)].count(legit.id) == 1


# -- the store's files -----------------------------------------------------------------


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)  # what most systems give a user: files readable by everyone
    try:
        yield
    finally:
        os.umask(old)


def _modes(directory: Path) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in directory.iterdir()}


def test_the_store_and_its_wal_and_shm_are_private(tmp_path: Path, umask_022: None) -> None:
    store = SqliteStore(tmp_path / "node.db")
    try:
        store.put_outbox("m1", b"a payload nobody else may read")
        store.put_seen("sender\x00m0")
        store.commit()
        assert _modes(tmp_path) == {"node.db": 0o600, "node.db-wal": 0o600, "node.db-shm": 0o600}
    finally:
        store.close()


def test_an_older_store_readable_by_others_is_made_private(tmp_path: Path, umask_022: None) -> None:
    db = sqlite3.connect(tmp_path / "node.db")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (x)")
    db.execute("INSERT INTO t VALUES (1)")
    db.commit()  # the -wal and -shm stay while this connection is open
    try:
        assert set(_modes(tmp_path).values()) == {0o644}
        SqliteStore(tmp_path / "node.db").close()
        assert set(_modes(tmp_path).values()) == {0o600}
    finally:
        db.close()


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770], ids=oct)
def test_a_store_in_a_directory_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    with pytest.raises(StoreError, match="directory .* is writable by other users"):
        SqliteStore(shared / "node.db")
    with pytest.raises(StoreError, match="chmod go-w"):
        zmesh.Node("lab", transport="inproc", store=shared / "node.db")
    assert not list(shared.iterdir())  # nothing was created there


def test_a_store_that_is_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere.db").touch()
    (tmp_path / "node.db").symlink_to(tmp_path / "elsewhere.db")
    with pytest.raises(StoreError, match="symbolic link"):
        SqliteStore(tmp_path / "node.db")


# -- what a sender keeps ---------------------------------------------------------------


def _engine(name: str, agents: tuple[str, ...], **limits: float) -> Engine:
    engine = Engine(EngineConfig(mesh="lab", node_id=name, incarnation="0001", liveness=LIVENESS,
                                 wall_clock=lambda: WALL, qos_limits=zmesh.QosLimits(**limits)))  # type: ignore[arg-type]
    for agent in agents:
        engine.set_agent(agent, ("work",), frozenset())
    return engine


def _net(**limits: float) -> Net:
    """a (a1, a2) sends to b (b1, b2), whose handlers never return: nothing is acknowledged."""
    net = Net(_engine("a", ("a1", "a2"), **limits), _engine("b", ("b1", "b2")))
    net.connect("a", "b")
    net.deliver_all()
    return net


def _send(net: Net, sender: str, target: str, n: int = 1, **fields: object) -> None:
    a = net.engines["a"]
    for _ in range(n):
        a.send(Message(sender=sender, target=target, topic="work", payload="x" * 100, qos=1, timestamp=WALL,
                       **fields))  # type: ignore[arg-type]
    net.pump("a")
    net.deliver_all()


def test_engine_unacknowledged_messages_are_capped_per_target_and_per_sender() -> None:
    net = _net(unacked_per_target=10, unacked_per_sender=15)
    a = net.engines["a"]
    _send(net, "a1", "b1", 10)
    with pytest.raises(Backpressure, match=r"10 qos >= 1 messages .* to agent 'b1' .*unacked_per_target=10,"):
        _send(net, "a1", "b1")
    _send(net, "a1", "b2", 5)  # another target: its own count ...
    with pytest.raises(Backpressure, match=r"from agent 'a1' .*unacked_per_sender=15,"):
        _send(net, "a1", "b2")  # ... but the sender's is full
    _send(net, "a2", "b2", 5)  # another sender
    assert a.reliable.unacked == 20 and a.stats["unacked_refused"] == 2
    b = net.engines["b"]
    for seen in net.effects("b", fx.DELIVER)[:3]:  # b1's handler returns three times: room for three
        b.handled(seen.effect[4], seen.effect[2])
    net.pump("b")
    net.deliver_all()
    _send(net, "a2", "b1", 3)
    with pytest.raises(Backpressure):
        _send(net, "a2", "b1")
    assert a.reliable.unacked == 20 and a.stats["unacked_refused"] == 3


def test_engine_the_counts_per_target_are_kept_only_while_much_is_outstanding_and_stay_exact() -> None:
    net = _net(unacked_per_target=10)
    a, b = net.engines["a"], net.engines["b"]
    unacked = a.reliable.unacked_by
    for round in range(3):
        _send(net, "a1", "b1", 9)  # under the smallest limit in all: nothing counted
        assert not unacked.active
        _send(net, "a1", "b2", 1)
        _send(net, "a1", "b1", 1)  # 10 outstanding: counted from now on, the 10 before included
        assert unacked.active and unacked.by_target == {"b1": [10, 1610], "b2": [1, 161]}
        with pytest.raises(Backpressure):
            _send(net, "a1", "b1")
        delivered = [s.effect for s in net.effects("b", fx.DELIVER)][-11:]
        for effect in delivered:  # every handler returns: all acknowledged
            b.handled(effect[4], effect[2])
        net.pump("b")
        net.deliver_all()
        assert a.reliable.unacked == 0 and not unacked.active and not unacked.by_target
    assert a.stats["unacked_refused"] == 3


def test_engine_unacknowledged_bytes_are_capped_too() -> None:
    net = _net(unacked_bytes_per_target=1000)
    a = net.engines["a"]
    _send(net, "a1", "b1", 6)  # 161 bytes each
    with pytest.raises(Backpressure, match="unacked_bytes_per_target=1000"):
        _send(net, "a1", "b1")
    assert a.reliable.unacked == 6


def test_engine_a_qos_ttl_is_bounded() -> None:
    net = _net(max_ttl=60.0)
    a = net.engines["a"]
    with pytest.raises(InvalidMessage, match=r"ttl 61 s is longer than this node's QosLimits.max_ttl \(60 s\)"):
        _send(net, "a1", "b1", ttl=61)
    assert a.reliable.unacked == 0 and not net.effects("b", fx.DELIVER)  # nothing sent
    _send(net, "a1", "b1", ttl=60)
    _send(net, "a1", "b1")  # no ttl: retried for 60 s at most
    net.close("b")  # its taker is gone for good
    net.advance(net.now + 59)
    assert a.reliable.unacked == 2
    net.advance(net.now + 2)
    assert a.reliable.unacked == 0 and a.stats["qos_expired"] == 2
    assert [s.effect[2] for s in net.effects("a", fx.DEAD)] == ["expired", "expired"]


def test_engine_a_received_ttl_past_the_bound_is_cut_to_it() -> None:
    net = Net(_engine("a", ("a1",)), _engine("b", ("b1",), max_ttl=10.0))
    net.connect("a", "b")
    net.deliver_all()
    _send(net, "a1", "b1", ttl=1000)  # a allows it; b keeps it for 10 s at most
    assert [s.effect[2].ttl for s in net.effects("b", fx.DELIVER)] == [10.0]


@pytest.mark.parametrize("bad", [{"max_ttl": 0}, {"max_ttl": float("inf")}, {"max_ttl": True},
                                 {"unacked_per_target": 0}, {"unacked_bytes_per_sender": 1.5}])
def test_qos_limits_must_be_positive(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        zmesh.QosLimits(**bad)  # type: ignore[arg-type]


# -- the store's handled ids -------------------------------------------------------------


def _put(store: SqliteStore, sender: str, ids: range, every: int = 50) -> None:
    for i in ids:
        store.put_seen(f"{sender}\x00{i}")
        if i % every == every - 1:
            store.commit()
    store.commit()


def test_the_stores_handled_ids_are_bounded_per_sender(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "node.db", seen_limit=1000, seen_per_sender=100)
    _put(store, "good", range(10))
    _put(store, "bad" * 80, range(5000))  # a long agent id's flood
    store.close()
    store = SqliteStore(tmp_path / "node.db", seen_limit=1000, seen_per_sender=100)
    try:
        seen = store.load_seen()
        assert seen[:10] == [f"good\x00{i}" for i in range(10)]
        bad = [k.partition("\x00")[2] for k in seen[10:]]
        assert 90 <= len(bad) <= 100 and bad == [str(i) for i in range(5000 - len(bad), 5000)]  # its newest
    finally:
        store.close()


def test_the_stores_handled_ids_are_bounded_in_all_and_the_biggest_senders_lose_first(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "node.db", seen_limit=1000, seen_per_sender=100)
    try:
        _put(store, "good", range(20))
        for s in range(30):
            _put(store, f"bad-{s}", range(100))
        seen = store.load_seen()
        assert len(seen) <= 1000 and seen[:20] == [f"good\x00{i}" for i in range(20)]
    finally:
        store.close()


def test_an_older_stores_handled_ids_are_taken_over(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "node.db")
    db.execute("CREATE TABLE outbox (id TEXT PRIMARY KEY, item BLOB NOT NULL)")
    db.execute("CREATE TABLE seen (id TEXT PRIMARY KEY)")
    keys = [f"s{i % 3}\x00m{i}" for i in range(10)]
    db.executemany("INSERT INTO seen (id) VALUES (?)", [(k,) for k in keys])
    db.commit()
    db.close()
    store = SqliteStore(tmp_path / "node.db")
    try:
        assert store.load_seen() == keys
        store.put_seen("s9\x00new")
        store.commit()
        assert store.load_seen() == keys + ["s9\x00new"]
    finally:
        store.close()


class _Store:
    """A store that records when it was written and what had left the engine by then."""

    def __init__(self, engine: Any) -> None:
        self.engine: Any = engine
        self.seen: list[str] = []
        self.pending: list[str] = []
        self.commits: list[int] = []  # ids written by each commit

    def put_outbox(self, msg_id: str, item: bytes) -> None: ...

    def delete_outbox(self, msg_id: str) -> None: ...

    def load_outbox(self) -> list[tuple[str, bytes]]:
        return []

    def put_seen(self, key: str) -> None:
        self.pending.append(key)

    def load_seen(self) -> list[str]:
        return []

    @property
    def dirty(self) -> bool:
        return bool(self.pending)

    def commit(self) -> None:
        if self.pending:
            assert not self.sent(), "a frame that answers an id left before the id was written"
            self.commits.append(len(self.pending))
            self.seen += self.pending
            self.pending = []

    def close(self) -> None: ...

    def sent(self) -> list[int]:
        """Kinds of the items in the frames the engine has sent and not handed over yet."""
        return [k for e in self.engine.effects if e[0] == fx.SEND for k in kinds(e[2]) if k != codec.PING]


def _with_store(name: str, agent: str) -> tuple[Engine, _Store]:
    engine = Engine(EngineConfig(mesh="lab", node_id=name, incarnation="0001", liveness=LIVENESS,
                                 wall_clock=lambda: WALL, store=None))
    store = _Store(engine)
    engine.reliable.store = store  # type: ignore[assignment]
    engine.set_agent(agent, ("work",), frozenset())
    return engine, store


def test_engine_qos2_ids_handled_in_one_batch_are_written_in_one_commit_before_their_acks_leave() -> None:
    b, store = _with_store("b", "b1")
    net = Net(make_engine("a", agents=("a1",)), b)
    net.connect("a", "b")
    net.deliver_all()
    a = net.engines["a"]
    for i in range(100):
        a.send(Message(sender="a1", target="b1", topic="work", payload=i, qos=2, timestamp=WALL))
    net.pump("a")
    net.deliver_all()
    delivered = [s.effect for s in net.effects("b", fx.DELIVER)]
    assert len(delivered) == 100 and a.reliable.unacked == 100
    b.hold = True  # as in a drain: the handlers of a batch return one after the other
    for effect in delivered:
        b.handled(effect[4], effect[2])
    net.pump("b")  # the flush: one commit, then the HANDLED
    assert store.commits == [100] and len(set(store.seen)) == 100
    net.deliver_all()
    assert a.reliable.unacked == 0


def test_engine_a_qos2_requests_id_is_written_before_its_reply_leaves() -> None:
    b, store = _with_store("b", "b1")
    net = Net(make_engine("a", agents=("a1",)), b)
    net.connect("a", "b")
    net.deliver_all()
    net.request("a", Message("query", "a1", "b1", "work", 1, "c1", "a1", qos=2, timestamp=WALL), 10.0)
    net.deliver_all()  # b answers at once (Net), the reply leaving alone
    assert store.commits == [1] and store.seen == ["a1\x00" + net.effects("b", fx.DELIVER)[0].effect[2].id]
    assert net.effects("a", fx.REPLIED)


def test_engine_what_a_store_kept_counts_against_the_limits() -> None:
    kept = [Message(sender="a1", target="b1", topic="work", payload=i, qos=1, timestamp=WALL) for i in range(5)]

    class Kept(_Store):
        def load_outbox(self) -> list[tuple[str, bytes]]:
            return [(m.id, codec.encode_message(m, 1 << 20)) for m in kept]

    a = _engine("a", ("a1",), unacked_per_target=5)
    a.reliable.store = Kept(a)  # type: ignore[assignment]
    net = Net(a, _engine("b", ("b1",)))  # starting, a takes up what its store kept
    net.connect("a", "b")
    net.deliver_all()
    assert a.reliable.unacked == 5
    with pytest.raises(Backpressure, match="unacked_per_target=5"):
        _send(net, "a1", "b1")
