"""Control items: join, liveness, credit and acknowledgement, typed. No I/O here.

The engine only ever sees these dataclasses, never the raw msgpack arrays;
:func:`parse_control` checks every field a peer sent before one is built.
:mod:`zmesh._wire.codec` re-exports all of it beside the message items.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Final, Union

import msgpack

from ..errors import FrameError
from ..registry import NodeRecord, parse_record

__all__ = [
    "HELLO", "UPDATE", "ACK", "PING", "PONG", "BYE", "REFUSE", "CREDIT", "BLOCKED", "HANDLED", "DECLINED",
    "Hello", "Update", "Ack", "Ping", "Pong", "Bye", "Refuse", "Credit", "Blocked", "Handled", "Declined",
    "Control", "parse_control", "encode_control",
]

# Item kinds (MSG, 0, lives with the frame layout in frames.py).
HELLO: Final = 1
UPDATE: Final = 2
ACK: Final = 3
PING: Final = 4
PONG: Final = 5
BYE: Final = 6
REFUSE: Final = 7
CREDIT: Final = 8
BLOCKED: Final = 9
HANDLED: Final = 10
DECLINED: Final = 11

_packb: Callable[[Any], bytes] = msgpack.packb


@dataclass(frozen=True, slots=True)
class Hello:
    """Join: the sender's record, its joined peers' router endpoints, and
    whether it wants a HELLO back (it does not know us yet)."""

    record: NodeRecord
    peers: tuple[tuple[str, tuple[str, ...]], ...]
    reply: bool


@dataclass(frozen=True, slots=True)
class Update:
    record: NodeRecord


@dataclass(frozen=True, slots=True)
class Ack:
    seq: int


@dataclass(frozen=True, slots=True)
class Ping:
    want_pong: bool


@dataclass(frozen=True, slots=True)
class Pong:
    pass


@dataclass(frozen=True, slots=True)
class Bye:
    reason: str


@dataclass(frozen=True, slots=True)
class Refuse:
    reason: str
    node_id: str
    endpoints: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Credit:
    """Flow control: ``taken`` (cumulative) of the sender's messages to ``agent`` left its inbox."""

    agent: str
    taken: int


@dataclass(frozen=True, slots=True)
class Blocked:
    """Flow control: the sender waits for credit to ``agent``, having sent ``sent`` (cumulative)."""

    agent: str
    sent: int


@dataclass(frozen=True, slots=True)
class Handled:
    """QoS 1/2: the receiving node handled the messages with these ids."""

    ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Declined:
    """QoS 1/2: the receiving node did not take these (full inbox, agent not
    there); the sender should send them again later."""

    ids: tuple[str, ...]


Control = Union[Hello, Update, Ack, Ping, Pong, Bye, Refuse, Credit, Blocked, Handled, Declined]
_MAX_HANDLED = 65536

_MAX_HELLO_PEERS = 4096
_MAX_ENDPOINTS = 64


def _endpoints(value: Any, what: str) -> tuple[str, ...]:
    if value.__class__ is str:
        value = [value]
    if value.__class__ is not list or any(e.__class__ is not str for e in value):
        raise FrameError("malformed", what)
    return tuple(value[:_MAX_ENDPOINTS])


def parse_control(item: list[Any]) -> Control:
    """Turn a decoded control item into its typed value; FrameError if unusable."""
    kind = item[0]
    n = len(item)
    if kind == HELLO:
        if n != 4 or item[2].__class__ is not list or len(item[2]) > _MAX_HELLO_PEERS:
            raise FrameError("malformed", "hello")
        peers = []
        for entry in item[2]:
            if entry.__class__ is not list or len(entry) != 2 or entry[0].__class__ is not str:
                raise FrameError("malformed", "hello peer list")
            peers.append((entry[0], _endpoints(entry[1], "hello peer list")))
        return Hello(parse_record(item[1]), tuple(peers), item[3] is True)
    if kind == UPDATE:
        if n != 2:
            raise FrameError("malformed", "update")
        return Update(parse_record(item[1]))
    if kind == ACK:
        if n != 2 or item[1].__class__ is not int:
            raise FrameError("malformed", "ack")
        return Ack(item[1])
    if kind == PING:
        return Ping(n == 2 and item[1] is True)
    if kind == PONG:
        return Pong()
    if kind == BYE:
        return Bye(str(item[1])[:256] if n > 1 else "")
    if kind == REFUSE:
        if n not in (3, 4) or item[1].__class__ is not str or item[2].__class__ is not str:
            raise FrameError("malformed", "refuse")
        endpoints = _endpoints(item[3], "refuse") if n == 4 else ()
        return Refuse(item[1][:1024], item[2][:256], endpoints)
    if kind == CREDIT or kind == BLOCKED:
        if (n != 3 or item[1].__class__ is not str or item[2].__class__ is not int or item[2] < 0
                or len(item[1]) > 256):  # an agent id's limit: flow control keeps an entry per agent
            raise FrameError("malformed", "credit" if kind == CREDIT else "blocked")
        return Credit(item[1], item[2]) if kind == CREDIT else Blocked(item[1], item[2])
    if kind == HANDLED or kind == DECLINED:
        what = "handled" if kind == HANDLED else "declined"
        if n != 2 or item[1].__class__ is not list or len(item[1]) > _MAX_HANDLED or any(
            i.__class__ is not str for i in item[1]
        ):
            raise FrameError("malformed", what)
        return Handled(tuple(item[1])) if kind == HANDLED else Declined(tuple(item[1]))
    raise FrameError("unknown_item", str(kind)[:40])


def encode_control(value: Control) -> bytes:
    """Encode a typed control item."""
    if value.__class__ is Hello:
        assert isinstance(value, Hello)
        peers = [[node_id, list(routers)] for node_id, routers in value.peers]
        return _packb([HELLO, value.record.to_wire(), peers, value.reply])
    if value.__class__ is Update:
        assert isinstance(value, Update)
        return _packb([UPDATE, value.record.to_wire()])
    if value.__class__ is Ack:
        assert isinstance(value, Ack)
        return _packb([ACK, value.seq])
    if value.__class__ is Ping:
        assert isinstance(value, Ping)
        return _packb([PING, value.want_pong])
    if value.__class__ is Pong:
        return _packb([PONG])
    if value.__class__ is Credit:
        assert isinstance(value, Credit)
        return _packb([CREDIT, value.agent, value.taken])
    if value.__class__ is Blocked:
        assert isinstance(value, Blocked)
        return _packb([BLOCKED, value.agent, value.sent])
    if value.__class__ is Handled:
        assert isinstance(value, Handled)
        return _packb([HANDLED, list(value.ids)])
    if value.__class__ is Declined:
        assert isinstance(value, Declined)
        return _packb([DECLINED, list(value.ids)])
    if value.__class__ is Bye:
        assert isinstance(value, Bye)
        return _packb([BYE, value.reason])
    assert isinstance(value, Refuse)
    return _packb([REFUSE, value.reason, value.node_id, list(value.endpoints)])
