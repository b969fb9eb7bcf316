"""What travels as what (the table in docs/guide.md, "What travels as what"):
datetime as msgpack's Timestamp, date/UUID/Decimal/Enum by value, other
types through the node's encoder/decoder hooks, and a clear error at the
caller for what cannot travel. Both transports; a local receiver too (its
messages go through the same codec)."""

from __future__ import annotations

import dataclasses
import enum
import uuid
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgpack
import pytest

import zmesh
from zmesh._wire import codec
from zmesh.message import Message
from tests.helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)

CEST = timezone(timedelta(hours=2))
WHEN = datetime(2024, 5, 1, 14, 30, 15, 123456, tzinfo=CEST)
ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


class Colour(enum.Enum):
    RED = "red"
    TEAL = (0, 128, 128)


class Level(enum.IntEnum):
    HIGH = 2


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Opaque:
    """A type zmesh does not carry and the test encoder does not know."""


SENT = {
    "when": WHEN,
    "oldest": datetime(1, 1, 1, tzinfo=timezone.utc),
    "newest": datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc),
    "before_1970": datetime(1969, 7, 20, 20, 17, 40, 1, tzinfo=timezone.utc),
    "day": date(2024, 5, 1),
    "id": ID,
    "price": Decimal("19.90"),
    "colour": Colour.RED,
    "teal": Colour.TEAL,
    "level": Level.HIGH,
    "pair": (1, 2),
    "plain": {"s": "x", "b": b"\x00", "n": None, "f": 1.5, "t": True},
}
RECEIVED = {
    "when": datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=timezone.utc),  # the same instant, in UTC
    "oldest": datetime(1, 1, 1, tzinfo=timezone.utc),
    "newest": datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc),
    "before_1970": datetime(1969, 7, 20, 20, 17, 40, 1, tzinfo=timezone.utc),
    "day": "2024-05-01",
    "id": "12345678-1234-5678-1234-567812345678",
    "price": "19.90",
    "colour": "red",
    "teal": [0, 128, 128],
    "level": 2,
    "pair": [1, 2],
    "plain": {"s": "x", "b": b"\x00", "n": None, "f": 1.5, "t": True},
}


def _exactly(got: Any, want: Any) -> None:
    """Equal, with the same types all the way down (a datetime in UTC, not an equal instant elsewhere)."""
    assert type(got) is type(want), (got, want)
    if isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            _exactly(got[key], want[key])
    elif isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _exactly(g, w)
    elif isinstance(want, datetime):
        assert got == want and got.tzinfo == timezone.utc and got.microsecond == want.microsecond
    else:
        assert got == want


def encode(obj: object) -> object:
    """A user's encoder: dataclasses and Pydantic-like models as tagged dicts."""
    if isinstance(obj, Point):
        if obj.x < 0:
            raise ValueError("negative x")
        return {"__type__": "Point", **dataclasses.asdict(obj)}
    if hasattr(obj, "model_dump"):
        return {"__type__": type(obj).__name__, **obj.model_dump()}
    if isinstance(obj, frozenset):
        return Opaque()  # an encoder that returns something zmesh cannot send either
    raise TypeError(f"no encoding for {type(obj).__name__}")


def decode(d: dict[Any, Any]) -> Any:
    """The matching decoder (``json.loads(object_hook=)`` style)."""
    kind = d.get("__type__")
    if kind == "Point":
        return Point(d["x"], d["y"])
    if kind == "Broken":
        raise KeyError("no such type")
    return d


# -- each type travels as documented -----------------------------------------


async def test_each_type_travels_as_the_guide_says(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, local, b = n1.agent("a"), n1.agent("local"), n2.agent("b")
        got: dict[str, list[Any]] = {"local": [], "b": []}
        for agent in (local, b):
            agent.add_handler("job.put", lambda msg, who=agent.id: got[who].append(msg.payload))
            agent.add_handler("job.echo", lambda msg: msg.payload)
            agent.add_handler("job.make", lambda msg: SENT)  # a handler's result is converted the same way
            await agent.subscribe("news.*", lambda msg, who=agent.id: got[who].append(msg.payload))
        await m.converged()
        for target in ("local", "b"):
            await a.send(target, "job.put", SENT)
            _exactly((await a.request(target, "job.echo", SENT, timeout=5)).payload, RECEIVED)
            _exactly((await a.request(target, "job.make", None, timeout=5)).payload, RECEIVED)
        assert await a.broadcast("news.today", SENT) == 2
        await wait_for(lambda: len(got["local"]) == 2 and len(got["b"]) == 2, what="sends and broadcasts")
        for payload in got["local"] + got["b"]:
            _exactly(payload, RECEIVED)
        assert n1.stats()["dropped_total"] == n2.stats()["dropped_total"] == 0


def test_a_datetime_is_msgpacks_timestamp_extension_on_the_wire() -> None:
    item = codec.encode_message(Message(payload=WHEN), 1 << 20)
    stamp = msgpack.unpackb(item, timestamp=0)[-1]  # what another msgpack implementation sees
    assert isinstance(stamp, msgpack.Timestamp)
    assert stamp == msgpack.Timestamp.from_datetime(WHEN)
    assert stamp.nanoseconds == 123456000


def test_a_timestamp_out_of_datetimes_range_costs_only_its_own_item() -> None:
    # Another implementation may send what Python's datetime cannot hold.
    good = codec.encode_message(Message(payload="ok"), 1 << 20)
    far = msgpack.packb([0, *msgpack.unpackb(good)[1:-1], msgpack.Timestamp(2**40, 0)])
    items = codec.decode_frame(codec.join_frame([far, good]), 1 << 20)
    assert items[0][0] == codec.BAD and "OverflowError" in items[0][2]
    assert items[0][3] is not None  # the header decodes: a request would be answered with an error
    assert codec.message_from_item(items[1]).payload == "ok"


# -- what cannot travel fails at the caller -----------------------------------


async def test_a_naive_datetime_is_refused_at_the_caller(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        got: list[Any] = []
        b.add_handler("job.put", lambda msg: got.append(msg.payload))
        b.add_handler("job.when", lambda msg: datetime(2024, 5, 1, 12, 0))
        await m.converged()
        naive = {"job": {"when": datetime(2024, 5, 1, 12, 0)}}
        for call in (a.send("b", "job.put", naive), a.request("b", "job.put", naive, timeout=5),
                     a.broadcast("job.put", naive)):
            with pytest.raises(zmesh.InvalidMessage, match=r"payload\['job'\]\['when'\] is a naive datetime") as info:
                await call
            assert "timezone.utc" in str(info.value)
        # A handler that returns one: the requester hears why at once, not a timeout.
        with pytest.raises(zmesh.HandlerError, match="naive datetime") as error:
            await a.request("b", "job.when", None, timeout=20)
        assert error.value.remote_type == "InvalidMessage"
        await a.send("b", "job.put", {"when": WHEN})
        await wait_for(lambda: got, what="the aware datetime")
        assert got == [{"when": WHEN}]
        assert n1.stats()["dropped_total"] == 0


async def test_an_unknown_type_without_an_encoder_is_refused_at_the_caller(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(), await m.node()
        a, b = n1.agent("a"), n2.agent("b")
        got: list[Any] = []
        b.add_handler("job.put", lambda msg: got.append(msg.payload))
        await m.converged()
        for payload, where, name in (
            ({"points": [Point(1, 2)]}, r"payload\['points'\]\[0\]", "tests.test_payload_types.Point"),
            ([{1, 2}], r"payload\[0\]", "set"),
            (Opaque(), "payload", "tests.test_payload_types.Opaque"),
        ):
            with pytest.raises(zmesh.InvalidMessage, match=f"{where} is of type {name}, which zmesh does not "
                                                           r"send without an encoder.*Node\(\.\.\., encoder=fn\)"):
                await a.send("b", "job.put", payload)
        await a.send("b", "job.put", "still works")
        await wait_for(lambda: got, what="the next message")
        assert got == ["still works"]
        assert n1.stats()["dropped_total"] == n2.stats()["dropped_total"] == 0


def test_a_hook_that_is_not_callable_is_refused_at_once() -> None:
    with pytest.raises(TypeError, match="encoder must be callable"):
        zmesh.Node("lab", transport="inproc", encoder=dataclasses.asdict(Point(1, 2)))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="decoder must be callable"):
        zmesh.Node("lab", transport="inproc", decoder="json")  # type: ignore[arg-type]


# -- the encoder and decoder hooks --------------------------------------------


async def test_with_an_encoder_a_dataclass_and_a_pydantic_model_travel(transport: str) -> None:
    pydantic = pytest.importorskip("pydantic")

    class Reading(pydantic.BaseModel):  # type: ignore[misc, name-defined]
        sensor: str
        at: datetime
        tags: list[str]

    def decode_reading(d: dict[Any, Any]) -> Any:
        if d.get("__type__") == "Reading":
            return Reading.model_validate({k: v for k, v in d.items() if k != "__type__"})
        return decode(d)

    reading = Reading(sensor="t1", at=WHEN, tags=["lab"])
    async with Mesh(transport) as m:
        n1 = await m.node(encoder=encode)
        n2 = await m.node()  # no decoder: gets what the encoder made
        n3 = await m.node(decoder=decode_reading, encoder=encode)
        a, plain, typed = n1.agent("a"), n2.agent("plain"), n3.agent("typed")
        plain.add_handler("echo", lambda msg: msg.payload)
        typed.add_handler("echo", lambda msg: msg.payload)
        got: list[Any] = []
        typed.add_handler("put", lambda msg: got.append(msg.payload))
        await m.converged()
        payload = {"points": [Point(1, 2), Point(3, 4)], "reading": reading}
        reply = await a.request("plain", "echo", payload, timeout=5)
        assert reply.payload == {
            "points": [{"__type__": "Point", "x": 1, "y": 2}, {"__type__": "Point", "x": 3, "y": 4}],
            "reading": {"__type__": "Reading", "sensor": "t1", "at": WHEN, "tags": ["lab"]},
        }
        assert reply.payload["reading"]["at"].tzinfo == timezone.utc  # the model's datetime: a Timestamp
        await a.send("typed", "put", payload)
        await wait_for(lambda: got, what="the typed message")
        assert got == [payload]
        assert isinstance(got[0]["points"][0], Point) and isinstance(got[0]["reading"], Reading)
        # typed's reply leaves through n3's encoder; n1 has no decoder: tagged dicts.
        echoed = (await a.request("typed", "echo", payload, timeout=5)).payload
        assert echoed["points"][1] == {"__type__": "Point", "x": 3, "y": 4}


async def test_an_encoder_that_fails_is_a_clear_error_at_the_caller(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(encoder=encode), await m.node(encoder=encode)
        a, b = n1.agent("a"), n2.agent("b")
        got: list[Any] = []
        b.add_handler("put", lambda msg: got.append(msg.payload))
        b.add_handler("bad.result", lambda msg: Point(-1, 0))
        await m.converged()
        for call in (a.send("b", "put", {"p": Point(-5, 0)}), a.request("b", "put", {"p": Point(-5, 0)}, timeout=5),
                     a.broadcast("put", [Point(-5, 0)])):
            with pytest.raises(zmesh.InvalidMessage, match=r"is of type tests.test_payload_types.Point, and the "
                                                           "node's encoder raised on it: ValueError: negative x") as info:
                await call
            assert isinstance(info.value.__cause__, ValueError)  # the encoder's own traceback stays reachable
        with pytest.raises(zmesh.InvalidMessage, match=r"payload\[0\] is of type tests.test_payload_types.Opaque.*"
                                                       "encoder raised on it: TypeError: no encoding for Opaque"):
            await a.send("b", "put", [Opaque()])
        with pytest.raises(zmesh.InvalidMessage, match=r"payload is of type frozenset, and the node's encoder "
                                                       "returned a value of type tests.test_payload_types.Opaque"):
            await a.send("b", "put", frozenset())
        # The handler's result fails at its node's encoder: the requester hears it at once.
        with pytest.raises(zmesh.HandlerError, match="negative x") as error:
            await a.request("b", "bad.result", None, timeout=20)
        assert error.value.remote_type == "InvalidMessage"
        await a.send("b", "put", {"p": Point(5, 0)})  # the node keeps working
        await wait_for(lambda: got, what="the good message")
        assert got == [{"p": {"__type__": "Point", "x": 5, "y": 0}}]
        assert n1.stats()["dropped_total"] == 0
        assert n2.stats()["dropped"] == {"unencodable_reply": 1}


async def test_a_decoder_that_fails_answers_the_sender_and_the_node_keeps_working(transport: str) -> None:
    async with Mesh(transport) as m:
        n1, n2 = await m.node(decoder=decode), await m.node(decoder=decode)
        a, b = n1.agent("a"), n2.agent("b")
        got: list[Any] = []
        b.add_handler("put", lambda msg: got.append(msg.payload))
        b.add_handler("echo", lambda msg: msg.payload)
        b.add_handler("broken.result", lambda msg: {"__type__": "Broken"})
        await b.subscribe("news.*", lambda msg: got.append(msg.payload))
        await m.converged()
        broken = {"items": [{"__type__": "Broken"}]}
        # A request: the error comes back at once, naming the decoder.
        with pytest.raises(zmesh.HandlerError, match=f"could not be decoded at node '{n2.id}'.*decoder raised "
                                                     "KeyError") as info:
            await a.request("b", "echo", broken, timeout=20)
        assert info.value.remote_type == "InvalidMessage"
        # A reply the requester's own decoder fails on fails that request.
        with pytest.raises(zmesh.HandlerError, match=f"could not be decoded at node '{n1.id}'"):
            await a.request("b", "broken.result", None, timeout=20)
        # One-way and broadcast: counted and logged at the receiver, not handled; a
        # one-way message is dead-lettered there as it arrived, and a qos 1 one
        # acknowledged (sending it again would fail the same way).
        await a.send("b", "put", broken)
        await a.send("b", "put", broken, qos=1)
        await a.broadcast("news.x", broken)
        await wait_for(lambda: n2.stats()["dropped"].get("decoder_error") == 4, what="the drops")
        assert await n1.wait_acked(timeout=10)
        letters = [e for e in n2.dead_letters if e.message.topic == "put"]
        assert [(e.reason, e.target, e.message.qos, e.message.payload) for e in letters] == [
            ("handler_error", "b", 0, broken), ("handler_error", "b", 1, broken)]
        assert "decoder raised KeyError" in letters[0].detail
        assert list(n1.dead_letters) == []
        await a.send("b", "put", {"p": {"__type__": "Point", "x": 1, "y": 2}})
        await wait_for(lambda: got, what="the good message")
        assert got == [{"p": Point(1, 2)}]
        assert n1.stats()["dropped"] == {"decoder_error": 1}
        assert n1.stats()["pending_requests"] == 0


def test_the_decoder_sees_every_dict_innermost_first() -> None:
    seen: list[Any] = []

    def hook(d: dict[Any, Any]) -> Any:
        seen.append(dict(d))
        return ("decoded", d.get("k"))

    payload = {"k": 0, "a": [{"k": 1, "b": {"k": 2}}, "s"], "c": {"k": 3}}
    assert codec.decode_payload(payload, hook) == ("decoded", 0)
    assert [d["k"] for d in seen] == [2, 1, 3, 0]
    assert seen[-1] == {"k": 0, "a": [("decoded", 1), "s"], "c": ("decoded", 3)}
    assert codec.decode_payload([1, "x", [b"y"]], hook) == [1, "x", [b"y"]]
    assert payload == {"k": 0, "a": [{"k": 1, "b": {"k": 2}}, "s"], "c": {"k": 3}}  # new containers

    def failing(d: dict[Any, Any]) -> Any:
        if d.get("k") == 3:
            raise ValueError("bad")
        return "replaced"

    with pytest.raises(ValueError):
        codec.decode_payload(payload, failing)
    assert payload == {"k": 0, "a": [{"k": 1, "b": {"k": 2}}, "s"], "c": {"k": 3}}  # as it arrived


async def test_the_guides_encoder_and_decoder_work_as_shown() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Reading(pydantic.BaseModel):  # type: ignore[misc, name-defined]
        sensor: str
        at: datetime

    guide = (Path(__file__).resolve().parent.parent / "docs" / "guide.md").read_text()
    block = guide.split("**Teaching the encoder.**", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    setup = "\n".join(line for line in block.splitlines() if not line.startswith("node = "))
    namespace: dict[str, Any] = {"Point": Point, "Reading": Reading}
    exec(setup, namespace)
    payload = {"p": Point(1, 2), "r": Reading(sensor="t1", at=WHEN), "when": WHEN}
    async with Mesh("inproc") as m:
        n1 = await m.node(encoder=namespace["encode"], decoder=namespace["decode"])
        n2 = await m.node(encoder=namespace["encode"], decoder=namespace["decode"])
        a, b = n1.agent("a"), n2.agent("b")
        b.add_handler("echo", lambda msg: msg.payload)
        await m.converged()
        assert (await a.request("b", "echo", payload, timeout=5)).payload == payload
        with pytest.raises(zmesh.InvalidMessage, match="encoder raised on it: TypeError: no encoding for Opaque"):
            await a.send("b", "echo", Opaque())
