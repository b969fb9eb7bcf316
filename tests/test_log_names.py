"""Log lines name peers in printable text: a known peer by its node name,
a stranger's raw ZeroMQ routing id in hex, so ``grep`` reads the output."""

from __future__ import annotations

import logging

import msgpack
import pytest
import zmq

from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)

JUNK = msgpack.packb([1, [0, "message", "before", "hello"]])  # a message from a node that never said HELLO


def _dealer(routing_id: bytes | None = None) -> zmq.Socket:  # type: ignore[type-arg]
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if routing_id is not None:
        sock.setsockopt(zmq.ROUTING_ID, routing_id)
    return sock


def _drop_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "dropped input from" in r.getMessage()]


def _readable(line: str) -> bool:
    """One line of text: printable, no control characters, no stand-in for undecodable bytes."""
    return line.isprintable() and "\ufffd" not in line


async def test_a_stranger_routing_id_is_logged_in_hex(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="zmesh")
    async with Mesh("zmq") as m:
        node = await m.node()
        raw_id = b"\xffk\xe9Eg\x07"  # not UTF-8, with a control character
        strangers = [_dealer(raw_id), _dealer()]  # the second gets libzmq's own id: b"\x00" + 4 bytes
        try:
            for sock in strangers:
                sock.connect(node.endpoint)
                sock.send(JUNK)
            await wait_for(lambda: len(_drop_lines(caplog)) == 2, 5, "both drops to be logged")
        finally:
            for sock in strangers:
                sock.close()
        lines = _drop_lines(caplog)
        assert all(_readable(line) for line in lines), lines
        assert any(f"dropped input from 0x{raw_id.hex()}: unknown_peer" in line for line in lines), lines
        assert any("dropped input from 0x00" in line for line in lines), lines
        assert node.stats()["dropped"]["unknown_peer"] == 2


async def test_a_known_peer_is_logged_by_its_node_name(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="zmesh")
    async with Mesh("zmq") as m:
        node = await m.node()
        key = "fake-node|0001"
        record = {
            "mesh": m.name, "node": "fake-node", "inc": "0001", "v": 1,
            "router": "tcp://127.0.0.1:9", "pub": "tcp://127.0.0.1:9", "seq": 1, "agents": {}, "subs": {},
        }
        dealer = _dealer(key.encode())
        try:
            dealer.connect(node.endpoint)
            dealer.send(msgpack.packb([1, [1, record, [], False]]))  # HELLO: now a known peer
            dealer.send(msgpack.packb([1, [42]]))  # an item kind nobody knows
            await wait_for(lambda: _drop_lines(caplog), 5, "the drop to be logged")
        finally:
            dealer.close()
        (line,) = _drop_lines(caplog)
        assert "dropped input from fake-node: " in line and "|0001" not in line, line
