"""The ``transport`` fixture of the conformance tests: each test that takes
it runs on the in-process transport, on ZeroMQ (and on ZeroMQ waiting for
input in a thread, ``zmq-thread``: how it runs on a loop without
``add_reader``, Windows' default), on the memory broker, and on NATS, MQTT,
Redis and the file bus (each against a server the session starts)."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from zmesh.transport.zmq import POLLER_ENV_VAR
from zmesh.transport.zmq._reader_thread import ThreadReaders

__all__ = ["transport", "TRANSPORTS"]

TRANSPORTS = ["inproc", "zmq", "zmq-thread", "memory", "nats", "mqtt", "redis", "file"]


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run the test once per transport (and ZeroMQ once per way of waiting for input)."""
    if request.param in ("nats", "mqtt", "redis", "file"):
        request.getfixturevalue(f"{request.param}_url")  # its server for the session (skips without one)
    if request.param != "zmq-thread":
        monkeypatch.delenv(POLLER_ENV_VAR, raising=False)
        yield str(request.param)
        return
    monkeypatch.setenv(POLLER_ENV_VAR, "thread")
    started: list[ThreadReaders] = []
    original_init = ThreadReaders.__init__

    def counting_init(self: ThreadReaders, *args: Any) -> None:
        started.append(self)
        original_init(self, *args)

    monkeypatch.setattr(ThreadReaders, "__init__", counting_init)
    yield "zmq"
    assert started, "the zmq-thread run never waited for input in a thread"
