"""Pure units, no sockets: codec, topics, registry merge, liveness settings,
the dead letter ring and FakeClock."""

from __future__ import annotations

import collections
import dataclasses
import enum

import msgpack
import pytest

from zmesh._wire import codec
from zmesh._wire.frames import MAX_ITEMS
from zmesh.clock import FakeClock
from zmesh._wire.codec import FrameError
from zmesh.deadletters import DeadLetter, DeadLetters, approx_size
from zmesh.errors import InvalidMessage
from zmesh.liveness import LivenessConfig
from zmesh.message import Message
from zmesh.registry import MeshEvent, NodeRecord, Registry, parse_record
from zmesh.topics import check_pattern, check_topic, is_pattern, matches

pytestmark = pytest.mark.timeout(10)


# -- codec ---------------------------------------------------------------


def _full_message() -> Message:
    return Message(
        type="task",
        sender="a",
        target="b",
        topic="math.add",
        payload={"x": [1, 2.5, None, True], "blob": b"\x00\xff", "s": "\u00e9"},
        correlation_id="c-1",
        reply_to="a",
        priority=0,
        qos=2,
        ttl=1.5,
        timestamp=1_700_000_000.25,
        trace_id="t-1",
        status="ok",
    )


def test_codec_message_round_trip_through_a_frame() -> None:
    msg = _full_message()
    frame = codec.join_frame([codec.encode_message(msg, 1 << 20)])
    items = codec.decode_frame(frame, 1 << 20)
    assert len(items) == 1 and items[0][0] == codec.MSG
    assert codec.message_from_item(items[0]) == msg


def test_codec_round_trips_every_type_and_status() -> None:
    for mtype in ("task", "result", "query", "notify", "intervene", "heartbeat"):
        for status in ("ok", "error", "no_handler", "not_found", "expired"):
            msg = Message(type=mtype, sender="s", target="t", topic="x", status=status, ttl=None)
            item = codec.decode_frame(codec.join_frame([codec.encode_message(msg, 100)]), 1000)[0]
            back = codec.message_from_item(item)
            assert (back.type, back.status, back.ttl) == (mtype, status, None)


@pytest.mark.parametrize("count", [0, 1, 14, 15, 16, MAX_ITEMS])
def test_codec_batches_of_any_size(count: int) -> None:
    # 15 is the largest fixarray with the version element, 16+ a uint16 header.
    items = [codec.encode_item([codec.ACK, i]) for i in range(count)]
    decoded = codec.decode_frame(codec.join_frame(items), 1 << 30)
    assert decoded == [[codec.ACK, i] for i in range(count)]


@pytest.mark.parametrize("count", [MAX_ITEMS + 1, 70_000])  # 65536+: a uint32 header
def test_codec_a_frame_of_more_items_than_any_node_sends_is_dropped_unread(count: int) -> None:
    items = [codec.encode_item([codec.PING, True])] * count
    with pytest.raises(FrameError, match="too many items"):
        codec.decode_frame(codec.join_frame(items), 1 << 30)
    with pytest.raises(FrameError, match="too many items"):
        codec.decode_pub_frame(codec.join_pub_frame("n", 1, items), 1 << 30)
    assert len(codec.decode_pub_frame(codec.join_pub_frame("n", 1, items[:MAX_ITEMS]), 1 << 30)[2]) == MAX_ITEMS


def test_codec_publish_frame_round_trip() -> None:
    msg = Message(sender="a", topic="news.today", payload="hi")
    items = [codec.encode_message(msg, 100), codec.encode_message(msg, 100)]
    node_id, seq, decoded = codec.decode_pub_frame(codec.join_pub_frame("n1", 7, items), 10_000)
    assert (node_id, seq) == ("n1", 7)
    assert [codec.message_from_item(i) for i in decoded] == [msg, msg]


def test_codec_limit_is_on_the_whole_encoded_message() -> None:
    msg = Message(payload=b"x" * 300)
    limit = len(codec.encode_message(msg, 1 << 20))
    codec.encode_message(msg, limit)  # exactly at the limit: fine
    with pytest.raises(InvalidMessage, match="over the limit"):
        codec.encode_message(msg, limit - 1)


def test_codec_limit_counts_the_trace_id_not_only_the_payload() -> None:
    msg = Message(payload="small", trace_id="t" * 5000)
    with pytest.raises(InvalidMessage, match=r"message is \d+ bytes encoded, over the limit of 4096 bytes"):
        codec.encode_message(msg, 4096)


@pytest.mark.parametrize("payload", [object(), {1j: 2}, 2**70, {"f": lambda: None}])
def test_codec_unencodable_payload_is_invalid_message(payload: object) -> None:
    with pytest.raises(InvalidMessage) as info:
        codec.encode_message(Message(payload=payload), 1 << 20)
    assert isinstance(info.value, ValueError)


def test_codec_unknown_type_is_invalid_message() -> None:
    with pytest.raises(InvalidMessage):
        codec.encode_message(Message(type="shout"), 1 << 20)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xc1", "malformed"),  # never-used msgpack byte
        (b"", "malformed"),
        (msgpack.packb({"a": 1}), "malformed"),
        (msgpack.packb([]), "malformed"),
        (msgpack.packb([99, [0]]), "unknown_version"),
        (b"\x00" * 101, "oversized"),
    ],
)
def test_codec_rejects_bad_direct_frames(data: bytes, reason: str) -> None:
    with pytest.raises(FrameError) as info:
        codec.decode_frame(data, 100)
    assert info.value.reason == reason


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (msgpack.packb([1, "n1"]), "malformed"),
        (msgpack.packb([1, 5, 0]), "malformed"),
        (msgpack.packb([1, "n1", "seq"]), "malformed"),
        (msgpack.packb([2, "n1", 0]), "unknown_version"),
        (b"\x00" * 101, "oversized"),
    ],
)
def test_codec_rejects_bad_publish_frames(data: bytes, reason: str) -> None:
    with pytest.raises(FrameError) as info:
        codec.decode_pub_frame(data, 100)
    assert info.value.reason == reason


GOOD = codec.encode_item([codec.ACK, 1])


@pytest.mark.parametrize(
    "bad",
    [
        msgpack.packb("not an item"),
        msgpack.packb([]),
        msgpack.packb(["kind"]),
        msgpack.packb(7),
        msgpack.packb([codec.ACK, {(1, 2): 3}]),  # a tuple key: the receiver cannot hash it
        b"\x81\x92\x01\x02\x03",  # the same by hand: a map whose key is [1, 2]
        msgpack.packb([codec.ACK, "\udcff"], unicode_errors="surrogatepass"),  # not UTF-8
    ],
)
def test_codec_one_bad_item_costs_only_itself(bad: bytes) -> None:
    items = codec.decode_frame(codec.join_frame([GOOD, bad, GOOD]), 1000)
    assert items[0] == items[2] == [codec.ACK, 1]
    assert items[1][:2] == [codec.BAD, "malformed"] and items[1][3] is None
    node_id, seq, items = codec.decode_pub_frame(codec.join_pub_frame("n1", 3, [GOOD, bad, GOOD]), 1000)
    assert (node_id, seq, items[0], items[2], items[1][0]) == ("n1", 3, [codec.ACK, 1], [codec.ACK, 1], codec.BAD)


def test_codec_a_bad_message_keeps_its_header_for_an_error_reply() -> None:
    msg = _full_message()
    good = codec.encode_message(msg, 1 << 20)
    fields = msgpack.unpackb(good)
    fields[-1] = {(1, 2): "tuple key"}  # what a sender without the check would send
    items = codec.decode_frame(codec.join_frame([good, msgpack.packb(fields), good]), 10_000)
    assert codec.message_from_item(items[0]) == codec.message_from_item(items[2]) == msg
    kind, reason, detail, header = items[1]
    assert (kind, reason) == (codec.BAD, "malformed") and "unhashable" in detail
    back = codec.message_from_item(header)
    assert (back.id, back.sender, back.correlation_id, back.payload) == (msg.id, "a", "c-1", None)


@pytest.mark.parametrize(
    ("tail", "detail"),
    [(b"", "item: OutOfData"), (GOOD + b"\xc1", "bytes after the last item")],
)
def test_codec_a_truncated_frame_keeps_the_items_before_the_cut(tail: bytes, detail: str) -> None:
    frame = codec.join_frame([GOOD, GOOD, GOOD])
    frame = frame[: len(frame) - len(GOOD)] + tail
    items = codec.decode_frame(frame, 1000)
    assert items[:2] == [[codec.ACK, 1], [codec.ACK, 1]]
    assert items[-1][0] == codec.BAD and items[-1][2] == detail


def test_codec_refuses_a_payload_a_receiver_could_not_decode() -> None:
    grouped = {("a", 1): 10, ("b", 2): 20}  # pandas groupby(...).to_dict()
    with pytest.raises(InvalidMessage, match=r"tuple key \('a', 1\)"):
        codec.encode_message(Message(payload={"rows": [grouped]}), 1 << 20)
    # tuples as values still travel (as lists); so do subclasses of the built-in types
    ok = {"point": (1, 2), "nested": [(3, (4,))], "ordered": collections.OrderedDict(a=1),
          "enum": Colour.RED, "flag": Level.HIGH, "bool": True}
    item = codec.decode_frame(codec.join_frame([codec.encode_message(Message(payload=ok), 1 << 20)]), 1000)[0]
    assert codec.message_from_item(item).payload == {
        "point": [1, 2], "nested": [[3, [4]]], "ordered": {"a": 1}, "enum": "red", "flag": 2, "bool": True}


class Colour(str, enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 2


def _item(**changes: object) -> list[object]:
    item = codec.decode_frame(codec.join_frame([codec.encode_message(_full_message(), 1000)]), 10_000)[0]
    names = ["kind", "id", "type", "sender", "target", "topic", "corr", "reply_to",
             "priority", "qos", "ttl", "stamp", "trace", "status", "payload"]
    for name, value in changes.items():
        item[names.index(name)] = value
    return item


@pytest.mark.parametrize(
    "changes",
    [{"type": 99}, {"status": "ok"}, {"sender": 5}, {"priority": "3"}, {"ttl": "1"},
     {"stamp": None}, {"trace": None}, {"id": b"raw"}],
)
def test_codec_rejects_malformed_message_items(changes: dict[str, object]) -> None:
    with pytest.raises(FrameError) as info:
        codec.message_from_item(_item(**changes))
    assert info.value.reason == "malformed"


def test_codec_rejects_wrong_field_count() -> None:
    with pytest.raises(FrameError):
        codec.message_from_item(_item()[:-1])


# -- topics --------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "topic", "expected"),
    [
        ("research.found", "research.found", True),
        ("research.found", "research.lost", False),
        ("research.*", "research.found", True),
        ("research.*", "research.found.paper", False),
        ("research.*", "research", False),
        ("research.>", "research.found", True),
        ("research.>", "research.found.paper", True),
        ("research.>", "research", False),
        ("*", "a", True),
        ("*", "a.b", False),
        (">", "a", True),
        (">", "a.b.c", True),
        ("a.*.c", "a.b.c", True),
        ("a.*.c", "a.b.d", False),
        ("a.*.>", "a.b", False),
        ("a.*.>", "a.b.c.d", True),
        ("*.b", "a.b", True),
        ("a.b", "a.b.c", False),
        ("a.b.c", "a.b", False),
    ],
)
def test_topic_matching(pattern: str, topic: str, expected: bool) -> None:
    assert matches(pattern, topic) is expected


@pytest.mark.parametrize("topic", ["", "a..b", ".a", "a.", "a.*", "a.>", "*", 5, None])
def test_bad_topics_are_invalid(topic: object) -> None:
    with pytest.raises(InvalidMessage):
        check_topic(topic)  # type: ignore[arg-type]


@pytest.mark.parametrize("pattern", ["", "a..b", "a.>.b", ">.a", None])
def test_bad_patterns_are_invalid(pattern: object) -> None:
    with pytest.raises(InvalidMessage):
        check_pattern(pattern)  # type: ignore[arg-type]


def test_good_topics_and_patterns() -> None:
    assert check_topic("a.b-c.d_e") == "a.b-c.d_e"
    assert check_pattern("a.*.>") == "a.*.>"
    assert [is_pattern(p) for p in ("a.b", "a.*", "a.>", "a*.b")] == [False, True, True, False]


# -- registry ------------------------------------------------------------


def _rec(
    node: str,
    seq: int = 1,
    agents: dict[str, tuple[str, ...]] | None = None,
    subs: dict[str, frozenset[str]] | None = None,
    inc: str = "0001",
) -> NodeRecord:
    return NodeRecord(node, inc, "m", 1, f"tcp://{node}:1", f"tcp://{node}:2", seq,
                      agents or {}, subs or {})


def test_registry_merge_new_node_emits_peer_and_agent_joined() -> None:
    reg = Registry("local")
    events = reg.merge(_rec("n1", agents={"a": (), "b": ("math",)}))
    assert events == [
        MeshEvent("peer_joined", "n1"),
        MeshEvent("agent_joined", "n1", "a"),
        MeshEvent("agent_joined", "n1", "b"),
    ]
    assert reg.node_of("a") == "n1" and "n1" in reg


def test_registry_ignores_stale_records() -> None:
    reg = Registry("local")
    reg.merge(_rec("n1", seq=5, agents={"a": ()}))
    assert reg.merge(_rec("n1", seq=5, agents={})) == []
    assert reg.merge(_rec("n1", seq=4, agents={})) == []
    assert reg.node_of("a") == "n1"


def test_registry_newer_record_diffs_agents() -> None:
    reg = Registry("local")
    reg.merge(_rec("n1", seq=1, agents={"a": (), "b": ()}))
    events = reg.merge(_rec("n1", seq=2, agents={"b": (), "c": ()}))
    assert events == [MeshEvent("agent_left", "n1", "a"), MeshEvent("agent_joined", "n1", "c")]
    assert (reg.node_of("a"), reg.node_of("c")) == (None, "n1")


def test_registry_restart_replaces_record_in_one_step() -> None:
    reg = Registry("local")
    reg.merge(_rec("n1", seq=9, agents={"a": (), "b": ()}, inc="0001"))
    events = reg.merge(_rec("n1", seq=1, agents={"b": ()}, inc="0002"))
    assert events == [MeshEvent("peer_restarted", "n1"), MeshEvent("agent_left", "n1", "a")]
    # A late record of the old incarnation is ignored, whatever its seq.
    assert reg.merge(_rec("n1", seq=99, agents={"z": ()}, inc="0001")) == []
    assert set(reg.agents()) == {"b"}


def test_registry_remove() -> None:
    reg = Registry("local")
    reg.merge(_rec("n1", agents={"a": (), "b": ()}))
    assert reg.remove("n1", "left") == [
        MeshEvent("agent_left", "n1", "a"),
        MeshEvent("agent_left", "n1", "b"),
        MeshEvent("peer_left", "n1", detail="left"),
    ]
    assert reg.remove("n1") == []
    assert reg.agents() == {} and reg.nodes() == [] and reg.node_of("a") is None


def test_registry_queries() -> None:
    reg = Registry("n0")
    reg.merge(_rec("n2", agents={"c": ("math", "web")}, subs={"c": frozenset({"news.>"})}))
    reg.merge(_rec("n1", agents={"b": ("math",), "a": ()}, subs={"a": frozenset({"news.*", "x"})}))
    agents = reg.agents()
    assert set(agents) == {"a", "b", "c"}
    assert (agents["c"].node_id, agents["c"].capabilities) == ("n2", ("math", "web"))
    assert agents["a"].subscriptions == frozenset({"news.*", "x"})
    assert agents["b"].subscriptions == frozenset()
    assert [r.node_id for r in reg.nodes()] == ["n1", "n2"]
    assert reg.find("math") == ["b", "c"]
    assert reg.find("web") == ["c"]
    assert reg.find("nothing") == []
    assert sorted(reg.subscribers("news.today")) == [("a", "n1"), ("c", "n2")]
    assert reg.subscribers("news.today.late") == (("c", "n2"),)
    assert reg.subscriptions("n1") == {"a": frozenset({"news.*", "x"})}


def test_registry_subscriber_cache_follows_changes() -> None:
    reg = Registry("n0")
    reg.merge(_rec("n1", seq=1, agents={"a": ()}))
    assert reg.subscribers("news.today") == ()
    reg.merge(_rec("n1", seq=2, agents={"a": ()}, subs={"a": frozenset({"news.*"})}))
    assert reg.subscribers("news.today") == (("a", "n1"),)
    reg.remove("n1")
    assert reg.subscribers("news.today") == ()


@pytest.mark.parametrize("local_first", [True, False])
def test_registry_local_agent_wins_a_duplicate_claim(local_first: bool) -> None:
    reg = Registry("local")
    records = [_rec("local", agents={"x": ()}), _rec("remote", agents={"x": ()})]
    for rec in records if local_first else reversed(records):
        reg.merge(rec)
    assert reg.node_of("x") == "local"


def test_record_wire_round_trip() -> None:
    rec = _rec("n1", seq=3, agents={"a": ("m", "n"), "b": ()}, subs={"a": frozenset({"x.*", "y"})})
    assert parse_record(msgpack.unpackb(msgpack.packb(rec.to_wire()))) == rec


def test_record_carries_the_node_limit_and_an_old_record_means_the_default() -> None:
    rec = dataclasses.replace(_rec("n1", agents={"a": ()}), max_payload=4096)
    wire = msgpack.unpackb(msgpack.packb(rec.to_wire()))
    assert wire["max_payload"] == 4096 and parse_record(wire) == rec
    del wire["max_payload"]  # a node of an earlier version
    assert parse_record(wire).max_payload == 1 << 20


def test_registry_floor_is_the_smallest_limit_of_its_nodes() -> None:
    reg = Registry("n0", frame_cap=65536)
    assert reg.frame_limit == 65536  # nobody to fit yet
    reg.merge(_rec("n0"))
    assert reg.floor == 1 << 20 and reg.max_payload("n0") == 1 << 20 and reg.max_payload("nx") is None
    assert reg.frame_limit == 65536
    reg.merge(dataclasses.replace(_rec("n1", seq=1), max_payload=4096))
    assert (reg.floor, reg.frame_limit, reg.max_payload("n1")) == (4096, 4096, 4096)
    reg.merge(dataclasses.replace(_rec("n1", seq=2), max_payload=8192))
    assert (reg.floor, reg.frame_limit) == (8192, 8192)
    reg.remove("n1")
    assert (reg.floor, reg.frame_limit) == (1 << 20, 65536)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda w: [w],
        lambda w: {k: v for k, v in w.items() if k != "seq"},
        lambda w: {**w, "seq": "3"},
        lambda w: {**w, "agents": []},
        lambda w: {**w, "agents": {"a": "m"}},
        lambda w: {**w, "agents": {"a": [5]}},
        lambda w: {**w, "subs": {"ghost": ["x"]}},
        lambda w: {**w, "node": "n" * 257},
        lambda w: {**w, "router": 5},
        lambda w: {**w, "max_payload": "1MiB"},
        lambda w: {**w, "max_payload": 0},
        lambda w: {**w, "max_payload": True},
    ],
)
def test_parse_record_rejects_malformed(mangle: object) -> None:
    wire = _rec("n1", agents={"a": ()}).to_wire()
    with pytest.raises(FrameError) as info:
        parse_record(mangle(wire))  # type: ignore[operator]
    assert info.value.reason == "malformed"


# -- liveness ------------------------------------------------------------
# The per-peer state machine is the engine's (tests/test_engine.py); this
# module only keeps its settings.


def test_liveness_config_needs_heartbeat_below_evasive_below_expiry() -> None:
    LivenessConfig(heartbeat=0.5, evasive_after=1.5, expire_after=3.0)
    for bad in ((0, 1, 2), (1, 1, 2), (0.5, 3, 3), (0.5, 3, 2)):
        with pytest.raises(ValueError):
            LivenessConfig(*bad)
    LivenessConfig(link_heartbeat=None)
    for ivl, timeout in ((0, 1.0), (2.0, 2.0), (3.0, 2.0)):
        with pytest.raises(ValueError, match="link_heartbeat"):
            LivenessConfig(link_heartbeat=ivl, link_timeout=timeout)


def _dead(i: int) -> DeadLetter:
    msg = Message(sender="a", target=f"t{i}", topic="x", payload=i)
    return DeadLetter("not_found", msg, msg.target, f"trace{i}", 100.0 + i)


async def test_dead_letter_ring_is_bounded() -> None:
    resent: list[Message] = []

    async def resend(msg: Message) -> None:
        resent.append(msg)

    ring = DeadLetters(3, resend)
    for i in range(5):
        ring.add(_dead(i))
    assert [e.target for e in ring] == ["t2", "t3", "t4"]
    assert (len(ring), ring.evicted, ring.total, ring.capacity) == (3, 2, 5, 3)
    first = next(iter(ring))
    assert (first.reason, first.trace_id, first.time, first.message.payload) == ("not_found", "trace2", 102.0, 2)

    # Iteration is a snapshot: redelivering while iterating is safe.
    for entry in ring:
        await ring.redeliver(entry)
    assert [m.payload for m in resent] == [2, 3, 4]
    assert len(ring) == 0 and ring.total == 5


async def test_dead_letter_failed_redelivery_keeps_the_entry() -> None:
    async def resend(msg: Message) -> None:
        raise InvalidMessage("still broken")

    ring = DeadLetters(2, resend)
    entry = _dead(1)
    ring.add(entry)
    with pytest.raises(InvalidMessage):
        await ring.redeliver(entry)
    assert list(ring) == [entry]
    ring.clear()
    assert list(ring) == [] and len(ring) == 0 and ring.total == 1


async def test_dead_letters_are_bounded_in_bytes_too() -> None:
    async def resend(msg: Message) -> None:
        return None

    ring = DeadLetters(1000, resend, max_bytes=1 << 20)

    def big(i: int, size: int = 100_000) -> DeadLetter:
        msg = Message(sender="a", target=f"t{i}", topic="x", payload={"blob": b"x" * size, "n": [i] * 10})
        return DeadLetter("no_handler", msg, msg.target, "", 0.0)

    for i in range(30):
        ring.add(big(i))
    assert (1 << 20) - 110_000 < ring.bytes <= 1 << 20
    assert len(ring) == 10 and ring.evicted == 20 and [e.target for e in ring][0] == "t20"
    each = ring.bytes // 10
    await ring.redeliver(next(iter(ring)))
    assert len(ring) == 9 and ring.bytes == 9 * each
    ring.add(big(99, 3 << 20))  # larger than the bound: kept, alone
    assert [e.target for e in ring] == ["t99"] and ring.bytes > 3 << 20 and ring.evicted == 29
    ring.clear()
    assert ring.bytes == 0


def test_dead_letter_sizes_are_estimated_cheaply_for_any_payload() -> None:
    assert 10_000 < approx_size(b"x" * 10_000) < 10_100
    many = list(range(1_000_000))
    assert 8_000_000 < approx_size(many) < 64_000_000  # a sample, scaled
    nested = {"k": [{"a": "x" * 1000}] * 1000}
    assert 1_000_000 < approx_size(nested) < 2_000_000
    assert approx_size(object()) > 0


def test_dead_letter_capacity_must_be_positive() -> None:
    async def resend(msg: Message) -> None:
        return None

    with pytest.raises(ValueError):
        DeadLetters(0, resend)


# -- FakeClock -----------------------------------------------------------


def test_fake_clock_runs_due_timers_in_order() -> None:
    clock = FakeClock(start=1000.0)
    fired: list[tuple[str, float]] = []

    def note(name: str) -> None:
        fired.append((name, clock.monotonic()))

    clock.call_later(3, note, "three")
    clock.call_later(1, note, "one-a")
    clock.call_later(1, note, "one-b")  # same time: scheduling order
    cancelled = clock.call_later(2, note, "two")
    cancelled.cancel()
    assert clock.pending_timers == 3
    clock.advance(0.999)
    assert fired == []
    clock.advance(1.5)
    # Each callback sees the time it was due at, not the end of the advance.
    assert fired == [("one-a", 1.0), ("one-b", 1.0)]
    assert clock.monotonic() == pytest.approx(2.499)
    assert clock.time() == pytest.approx(1002.499)
    clock.advance(1)
    assert fired[-1] == ("three", 3.0)
    assert clock.pending_timers == 0


def test_fake_clock_timers_scheduled_by_timers_fall_in_the_same_advance() -> None:
    clock = FakeClock()
    fired: list[float] = []

    def tick() -> None:
        fired.append(clock.monotonic())
        if len(fired) < 5:
            clock.call_later(1, tick)

    clock.call_later(1, tick)
    clock.advance(10)
    assert fired == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_fake_clock_basics() -> None:
    clock = FakeClock()
    assert (clock.time(), clock.monotonic()) == (1_700_000_000.0, 0.0)
    fired: list[int] = []
    clock.call_later(-5, fired.append, 1)  # negative delay: due now
    clock.advance(0)
    assert fired == [1]
    with pytest.raises(ValueError):
        clock.advance(-1)
    assert clock.monotonic() == 0.0


def test_protocol_doc_embeds_the_transition_table_as_generated() -> None:
    from pathlib import Path

    from zmesh._engine.states import markdown_table

    doc = (Path(__file__).parent.parent / "docs" / "protocol.md").read_text()
    embedded = doc.split("<!-- transitions:begin -->\n", 1)[1].split("\n<!-- transitions:end -->", 1)[0]
    assert embedded == markdown_table(), "regenerate with: python -c 'from zmesh._engine.states import markdown_table as t; print(t())'"


def test_registry_index_kept_incrementally_matches_a_full_rebuild() -> None:
    import random

    from zmesh.registry import NodeRecord, Registry

    rng = random.Random(7)
    registry = Registry("n0")
    seqs: dict[str, int] = {}
    incs: dict[str, str] = {}
    for _ in range(3000):
        node = f"n{rng.randrange(6)}"
        if rng.random() < 0.2 and node != "n0":
            registry.remove(node)
            seqs.pop(node, None)
            continue
        if node not in seqs or rng.random() < 0.1:  # a new incarnation now and then
            incs[node] = f"{rng.randrange(1 << 30):010d}"
            seqs[node] = 0
        seqs[node] += 1
        agents = {f"a{rng.randrange(8)}": () for _ in range(rng.randrange(4))}  # ids often claimed twice
        registry.merge(NodeRecord(node, incs[node], "m", 1, "r", "p", seqs[node], agents))
        expected: dict[str, str] = {}
        for rec in registry._records.values():
            if rec.node_id != "n0":
                for agent_id in rec.agents:
                    expected.setdefault(agent_id, rec.node_id)
        local = registry.record("n0")
        for agent_id in local.agents if local else ():
            expected[agent_id] = "n0"
        assert {a: registry.node_of(a) for a in expected} == expected
        assert all(registry.node_of(f"a{i}") is None for i in range(8) if f"a{i}" not in expected)
