"""Fuzzing the frame decoder and the engine's receive path (Hypothesis).

The decoder's contract (zmesh/_wire/frames.py, docs/protocol.md *Validation*):
any bytes, whole or cut anywhere, decode to items or raise
:class:`zmesh.errors.FrameError`, never anything else; every item is a list
whose first element is its kind (an int), or a *bad item* ``[BAD, reason,
detail, header]`` standing for one that did not decode. The typed layer
(``parse_control``, ``message_from_item``) takes any decoded item to a value
or FrameError. And the engine takes any frame on any path without an
exception escaping, counting what it drops. As h11's fuzzing does: whole
inputs, inputs cut into pieces, and real frames with bytes changed.

Bounded: a few hundred examples per property, fixed (derandomized) so every
run tries the same inputs, and no example database is written.
"""

from __future__ import annotations

from typing import Any

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.engine_pair import Net, make_engine
from zmesh._wire import codec
from zmesh.errors import FrameError
from zmesh.message import MESSAGE_TYPES, STATUSES, Message
from zmesh.registry import NodeRecord

FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LIMIT = 1 << 20

# -- real items, to start from ----------------------------------------------------------

names = st.text(min_size=1, max_size=12)
ids = st.text(max_size=30)
payloads = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text(max_size=40)
    | st.binary(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=12,
)


@st.composite
def messages(draw: st.DrawFn) -> bytes:
    msg = Message(
        type=draw(st.sampled_from(MESSAGE_TYPES)), sender=draw(names), target=draw(ids), topic=draw(names),
        payload=draw(payloads), correlation_id=draw(ids), reply_to=draw(ids),
        priority=draw(st.integers(0, 5)), qos=draw(st.integers(0, 2)),
        ttl=draw(st.none() | st.floats(0, 1e6)), timestamp=draw(st.floats(0, 2e9)),
        trace_id=draw(ids), status=draw(st.sampled_from(STATUSES)), id=draw(ids),
    )
    return codec.encode_message(msg, LIMIT)


@st.composite
def records(draw: st.DrawFn) -> NodeRecord:
    agents = draw(st.dictionaries(names, st.lists(names, max_size=3).map(tuple), max_size=4))
    subs = {a: frozenset(draw(st.lists(names, max_size=2))) for a in agents if draw(st.booleans())}
    return NodeRecord(draw(names), draw(ids), draw(names), draw(st.integers(0, 3)), "tcp://127.0.0.1:1",
                      "tcp://127.0.0.1:2", draw(st.integers(0, 2**40)), agents, subs,
                      max_payload=draw(st.integers(1, 2**40)))


controls = st.one_of(
    st.builds(codec.Hello, records(), st.lists(st.tuples(names, st.lists(ids, max_size=2).map(tuple)),
                                                   max_size=3).map(tuple), st.booleans()),
    st.builds(codec.Update, records()),
    st.builds(codec.Ack, st.integers(0, 2**40)),
    st.builds(codec.Ping, st.booleans()),
    st.just(codec.Pong()),
    st.builds(codec.Bye, ids),
    st.builds(codec.Refuse, ids, ids, st.lists(ids, max_size=2).map(tuple)),
    st.builds(codec.Credit, names, st.integers(0, 2**40)),
    st.builds(codec.Blocked, names, st.integers(0, 2**40)),
    st.builds(codec.Handled, st.lists(ids, max_size=4).map(tuple)),
    st.builds(codec.Declined, st.lists(ids, max_size=4).map(tuple)),
).map(codec.encode_control)

items = st.lists(messages() | controls, max_size=6)


direct_frames = items.map(codec.join_frame)
pub_frames = st.builds(codec.join_pub_frame, names, st.integers(0, 2**40), st.lists(messages(), max_size=6))
real_frames = direct_frames | pub_frames


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A real frame with bytes flipped, cut, inserted, dropped or repeated."""
    data = bytearray(draw(real_frames))
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.integers(0, len(data)))
        how = draw(st.sampled_from(("flip", "cut", "insert", "delete", "repeat")))
        if how == "flip" and where < len(data):
            data[where] ^= draw(st.integers(1, 255))
        elif how == "cut":
            del data[where:]
        elif how == "insert":
            data[where:where] = draw(st.binary(min_size=1, max_size=8))
        elif how == "delete":
            del data[where:where + draw(st.integers(1, 8))]
        elif how == "repeat":
            data[where:where] = data[where:where + draw(st.integers(1, 16))]
    return bytes(data)


structured = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(inner.filter(lambda k: not isinstance(k, (list, dict))),
                                                                inner, max_size=4),
    max_leaves=20,
).map(lambda value: msgpack.packb(value))  # any msgpack value, most of them not a frame

anything = st.one_of(st.binary(max_size=512), mutated(), real_frames, structured)

# -- the contract ---------------------------------------------------------------------------


def _check_items(decoded: Any) -> None:
    assert isinstance(decoded, list)
    for item in decoded:
        assert isinstance(item, list) and item
        if item[0] == codec.BAD:
            assert len(item) == 4 and isinstance(item[1], str) and isinstance(item[2], str)
            assert item[3] is None or (isinstance(item[3], list) and len(item[3]) == codec.MSG_FIELDS)
            continue
        assert item[0].__class__ is int
        try:  # the typed layer: a value or FrameError
            if item[0] == codec.MSG:
                codec.message_from_item(item)
            else:
                codec.parse_control(item)
        except FrameError:
            pass


def _decode(data: bytes) -> None:
    """Every decoder on ``data``: items or FrameError, nothing else."""
    for decode in (lambda d: codec.decode_frame(d, LIMIT), lambda d: codec.decode_pub_frame(d, LIMIT)[2]):
        try:
            decoded = decode(data)
        except FrameError:
            continue
        _check_items(decoded)
    try:
        opening = codec.decode_opening(data, LIMIT, frozenset((codec.HELLO, codec.REFUSE)))
    except FrameError:
        opening = None
    if opening is not None:
        _check_items([opening])
    try:
        _check_items([codec.decode_item(data)])
    except FrameError:
        pass


@FUZZ
@given(anything)
def test_any_bytes_decode_to_items_or_a_frame_error(data: bytes) -> None:
    _decode(data)


@FUZZ
@given(st.one_of(real_frames, mutated()), st.data())
def test_a_frame_cut_anywhere_decodes_to_items_or_a_frame_error(frame: bytes, data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(frame)), max_size=3)))
    pieces = [frame[a:b] for a, b in zip([0, *cuts], [*cuts, len(frame)])]
    for piece in pieces:
        _decode(piece)
    _decode(b"".join(reversed(pieces)))


@FUZZ
@given(direct_frames, pub_frames)
def test_a_real_frame_decodes_to_its_items(direct: bytes, published: bytes) -> None:
    for decoded in (codec.decode_frame(direct, LIMIT), codec.decode_pub_frame(published, LIMIT)[2]):
        assert not [i for i in decoded if i[0] == codec.BAD]
        _check_items(decoded)


# -- the engine's receive path ----------------------------------------------------------------


@FUZZ
@given(st.lists(anything, min_size=1, max_size=4))
def test_the_engine_takes_any_frame_on_any_path_and_counts_what_it_drops(frames: list[bytes]) -> None:
    net = Net(make_engine("a", agents=("a1",)), make_engine("b", agents=("b1",)))
    net.connect("a", "b")
    net.deliver_all()
    a = net.engines["a"]
    for frame in frames:
        for path in ("peer", "stranger", "published"):
            dropped = sum(a.dropped.values())
            try:
                codec.decode_frame(frame, a.max_frame)
                garbage = False
            except FrameError:
                garbage = True
            if path == "peer":
                a.receive_direct("b|0001", frame, net.now)
            elif path == "stranger":
                a.receive_direct("stranger|0001", frame, net.now)
            else:
                a.receive_published(frame, net.now)
            net.pump("a")
            if garbage and path == "peer":
                assert sum(a.dropped.values()) > dropped  # a frame that does not decode is counted
    net.advance(net.now + 5.0)  # and its timers still run
