"""The message model: ids, the JSON envelope, option checks. Pure, no sockets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

import zmesh
from zmesh import message as message_module
from zmesh.message import ENVELOPE_VERSION, Message, check_options, new_id, new_trace_id

pytestmark = pytest.mark.timeout(10)

HEADER_KEYS = {
    "msg_id", "type", "version", "sender", "sender_type", "target", "target_type", "topic",
    "priority", "qos", "timestamp", "ttl", "correlation_id", "reply_to", "trace_id", "status",
}


def _request_message(timestamp: float = 1_700_000_000.5) -> Message:
    return Message(
        type="query",
        sender="a",
        target="b",
        topic="math.add",
        payload={"x": 1, "y": [2, 3], "note": "caf\u00e9"},
        correlation_id="corr-1",
        reply_to="a",
        priority=1,
        qos=1,
        ttl=2.5,
        timestamp=timestamp,
        trace_id="t-1",
    )


# -- ids -----------------------------------------------------------------


def test_ids_are_unique_and_sort_in_creation_order() -> None:
    ids = [new_id() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    assert sorted(ids) == ids
    assert all(len(i) == 28 and int(i, 16) >= 0 for i in ids)
    messages = [Message() for _ in range(100)]
    assert len({m.id for m in messages}) == 100
    assert sorted(m.id for m in messages) == [m.id for m in messages]


def test_ids_sort_by_time_first(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1_700_000_000_000_000_000]  # nanoseconds
    monkeypatch.setattr(message_module, "_time_ns", lambda: now[0])
    early = new_id()
    now[0] = 1_700_000_000_001_000_000
    later = new_id()
    now[0] = 1_700_000_005_000_000_000
    much_later = new_id()
    assert early < later < much_later
    assert int(early[:12], 16) == 1_700_000_000_000
    assert int(much_later[:12], 16) == 1_700_000_005_000


def test_trace_ids_are_w3c_random_and_unique() -> None:
    ids = [new_trace_id() for _ in range(5_000)]  # several of the batches they are made in
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 32 and i == i.lower() and int(i, 16) != 0 for i in ids)
    ones = sum(bin(int(i, 16)).count("1") for i in ids)
    assert abs(ones / (128 * len(ids)) - 0.5) < 0.01  # every bit random, none fixed


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_a_forked_child_makes_trace_ids_of_its_own() -> None:
    """Trace ids are made ahead in batches: a child of fork must not reuse
    the ones its parent has left (run in a fresh interpreter with no threads)."""
    script = (
        "import os\n"
        "from zmesh.message import new_trace_id\n"
        "new_trace_id()\n"  # the parent now holds a batch made ahead
        "r, w = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.write(w, new_trace_id().encode()); os._exit(0)\n"
        "os.close(w); child = os.read(r, 64).decode(); os.waitpid(pid, 0)\n"
        "print(child, new_trace_id())\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=True)
    child, parent = out.stdout.split()
    assert len(child) == 32 and child != parent


# -- envelope ------------------------------------------------------------


def test_envelope_has_the_header_fields_and_is_json_ready() -> None:
    msg = _request_message()
    env = msg.to_envelope()
    assert set(env) == {"header", "payload"}
    header = env["header"]
    assert set(header) == HEADER_KEYS
    assert header["msg_id"] == msg.id
    assert header["version"] == ENVELOPE_VERSION == "1.0"
    assert (header["type"], header["sender"], header["target"], header["topic"]) == (
        "query", "a", "b", "math.add")
    assert (header["sender_type"], header["target_type"]) == ("agent", "agent")
    assert (header["priority"], header["qos"], header["ttl"]) == (1, 1, 2.5)
    assert (header["correlation_id"], header["reply_to"], header["trace_id"]) == ("corr-1", "a", "t-1")
    assert header["status"] == "ok"
    assert header["timestamp"] == "2023-11-14T22:13:20.5Z"
    assert env["payload"] == {"x": 1, "y": [2, 3], "note": "caf\u00e9"}
    text = json.dumps(env)
    assert json.loads(text) == env


def test_envelope_of_a_broadcast_targets_a_topic() -> None:
    header = Message(sender="a", topic="news.today").to_envelope()["header"]
    assert (header["target"], header["target_type"]) == ("", "topic")


def test_envelope_round_trip() -> None:
    msg = _request_message()
    assert Message.from_envelope(msg.to_envelope()) == msg
    assert Message.from_envelope(json.loads(json.dumps(msg.to_envelope()))) == msg


def test_envelope_round_trip_of_a_real_timestamp() -> None:
    # Messages sent with the system clock carry time.time(), which has more
    # precision than an ISO timestamp's microseconds.
    for i in range(50):
        msg = _request_message(timestamp=time.time() + i / 7)
        back = Message.from_envelope(json.loads(json.dumps(msg.to_envelope())))
        assert back == msg, f"timestamp {msg.timestamp!r} came back as {back.timestamp!r}"


def test_envelope_written_by_hand_gets_defaults() -> None:
    msg = Message.from_envelope({"header": {"msg_id": "m1", "timestamp": 12.5}, "payload": [1]})
    assert msg == Message(id="m1", timestamp=12.5, payload=[1])


def test_envelope_accepts_an_iso_timestamp() -> None:
    envelope = {"header": {"msg_id": "m1", "timestamp": "2023-11-14T22:13:20.500000+00:00"}}
    assert Message.from_envelope(envelope).timestamp == 1_700_000_000.5


#: The seed design's example envelope, exactly as it is written there (its comments left out).
SEED_ENVELOPE = """{
  "header": {
    "msg_id": "msg_20260512_001",
    "type": "task",
    "version": "1.0",
    "sender": "agent_main",
    "sender_type": "orchestrator",
    "target": "agent_sub_search",
    "target_type": "worker",
    "topic": "research.paper.search",
    "priority": 3,
    "qos": 1,
    "timestamp": "2026-05-12T10:30:00Z",
    "ttl": 300,
    "correlation_id": "task_0817",
    "reply_to": "agent_main/result"
  },
  "payload": {
    "action": "search_papers",
    "query": "transformer architecture 2025",
    "max_results": 10
  }
}"""


def test_the_seed_designs_envelope_is_read_as_written_and_given_back() -> None:
    seed = json.loads(SEED_ENVELOPE)
    msg = Message.from_envelope(seed)
    assert (msg.id, msg.type, msg.sender, msg.target, msg.topic) == (
        "msg_20260512_001", "task", "agent_main", "agent_sub_search", "research.paper.search")
    assert (msg.sender_type, msg.target_type) == ("orchestrator", "worker")
    assert (msg.priority, msg.qos, msg.ttl) == (3, 1, 300)
    assert msg.timestamp == 1_778_581_800.0  # 2026-05-12T10:30:00Z, read on every Python (3.10 has no "Z")
    assert (msg.correlation_id, msg.reply_to) == ("task_0817", "agent_main/result")
    assert msg.payload == seed["payload"]
    back = msg.to_envelope()
    assert {k: v for k, v in back["header"].items() if k in seed["header"]} == seed["header"]
    assert set(back["header"]) - set(seed["header"]) == {"trace_id", "status"}
    assert back["payload"] == seed["payload"]
    assert Message.from_envelope(json.loads(json.dumps(back))) == msg


@pytest.mark.parametrize("version", [1, 1.0, "1", "1.0"])
def test_every_spelling_of_version_one_is_read(version: Any) -> None:
    envelope = _env(version=version)
    assert Message.from_envelope(envelope) == Message.from_envelope({**envelope, "header": {
        **envelope["header"], "version": "1.0"}})


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2026-05-12T10:30:00Z", 1_778_581_800.0),
        ("2026-05-12T10:30:00", 1_778_581_800.0),  # no offset: UTC
        ("2026-05-12T12:30:00+02:00", 1_778_581_800.0),
        ("2026-05-12T05:30:00-0500", 1_778_581_800.0),
        ("2026-05-12 10:30:00.25Z", 1_778_581_800.25),
        ("2023-11-14T22:13:20.500000+00:00", 1_700_000_000.5),
        ("1970-01-01T00:00:00Z", 0.0),
    ],
)
def test_iso_timestamps_are_read_on_every_python(text: str, seconds: float) -> None:
    assert Message.from_envelope({"header": {"msg_id": "m", "timestamp": text}}).timestamp == seconds


def test_roles_that_are_the_default_are_not_kept() -> None:
    """``agent`` (and ``topic`` for a broadcast's target) is what an envelope
    without roles means, so a message keeps only another role."""
    msg = Message.from_envelope(_env(sender_type="agent", target_type="agent"))
    assert (msg.sender_type, msg.target_type) == ("", "")
    header = Message.from_envelope(_env(target="", target_type="topic")).to_envelope()["header"]
    assert header["target_type"] == "topic"
    assert Message.from_envelope(_env(target_type="topic")).target_type == "topic"  # a direct message to a "topic"


def _env(**header: Any) -> dict[str, Any]:
    env = _request_message().to_envelope()
    for key, value in header.items():
        if value is ...:
            del env["header"][key]
        else:
            env["header"][key] = value
    return env


@pytest.mark.parametrize(
    "envelope",
    [
        None,
        [],
        "header",
        {},
        {"payload": 1},
        {"header": "not a map"},
        {"header": None},
        _env(msg_id=...),
        _env(version=2),
        _env(version="2.0"),
        _env(version=True),
        _env(version=None),
        _env(sender_type=7),
        _env(target_type="x" * 65),
        _env(sender_type="line\nbreak"),
        _env(timestamp="2026-13-12T10:30:00Z"),
        _env(timestamp="2026-05-12 the morning"),
        _env(type="shout"),
        _env(status="great"),
        _env(priority=9),
        _env(priority=-1),
        _env(priority="1"),
        _env(priority=True),
        _env(qos=3),
        _env(ttl=-1),
        _env(ttl="soon"),
        _env(timestamp="yesterday"),
        _env(timestamp=None),
    ],
)
def test_bad_envelope_is_invalid_message(envelope: Any) -> None:
    with pytest.raises(zmesh.InvalidMessage):
        Message.from_envelope(envelope)


# -- options -------------------------------------------------------------


@pytest.mark.parametrize(
    ("priority", "qos", "ttl"),
    [(6, 0, None), (-1, 0, None), (2.0, 0, None), (True, 0, None), (3, 3, None), (3, -1, None),
     (3, 1.0, None), (3, 0, -0.5), (3, 0, float("nan")), (3, 0, "1"), (3, 0, True)],
)
def test_options_out_of_range_are_invalid(priority: Any, qos: Any, ttl: Any) -> None:
    with pytest.raises(zmesh.InvalidMessage):
        check_options(priority, qos, ttl)


@pytest.mark.parametrize(("priority", "qos", "ttl"), [(0, 0, None), (5, 2, 0), (3, 1, 0.25), (1, 0, 10)])
def test_options_in_range_pass(priority: int, qos: int, ttl: float | None) -> None:
    check_options(priority, qos, ttl)


def test_expiry_and_reply_flags() -> None:
    msg = Message(timestamp=100.0, ttl=1.0)
    assert (msg.expired(101.0), msg.expired(101.01)) == (False, True)
    assert Message(timestamp=100.0).expired(1e12) is False
    request = Message(type="query", correlation_id="c")
    reply = Message(type="result", correlation_id="c")
    assert (request.expects_reply, request.is_reply) == (True, False)
    assert (reply.expects_reply, reply.is_reply) == (False, True)
    assert (Message().expects_reply, Message().is_reply) == (False, False)
