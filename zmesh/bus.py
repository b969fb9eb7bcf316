"""The seed design's ``MessageBus``, over a zmesh node: code written against
the seed's interface runs unchanged, on any transport, and moves from stage
to stage by changing one constructor::

    bus = FileBus("/tmp/bus")                  # stage 1-2: the file bus (or MQTTBus, RedisBus, NatsBus, MeshBus)
    bus.subscribe("agent_sub", "research.paper")
    bus.publish("research.paper", envelope)    # the seed's JSON envelope
    for envelope in bus.consume("agent_sub"):  # what came for it since the last call, read once
        ...

``publish(topic, envelope)`` sends the envelope to its ``target``, or
without one broadcasts it on ``topic``; with a ``correlation_id`` it is a
request, and the reply is consumed by its ``sender`` like any envelope. An
agent that consumed a request answers it by publishing a ``result``
envelope with the same ``correlation_id``. Each method has an ``async``
twin (``apublish``, ``asubscribe``, ``aconsume``) for code on an event loop.
The node runs on a loop of its own, in a background thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Coroutine, TypeVar

from ._runtime.handlers import DEFERRED
from .agent import Agent
from .errors import InvalidMessage, ZmeshError
from .message import Message
from .node import Node
from .transport import MessageTransport, Transport

__all__ = ["MessageBus", "FileBus", "MQTTBus", "RedisBus", "NatsBus", "MeshBus"]

T = TypeVar("T")

#: Seconds a call waits for the bus's own loop at most.
CALL_TIMEOUT = 60.0


class MessageBus:
    """The seed's bus over a node on ``transport`` (a name, a URL or a
    transport; the faces below pick one). ``mesh``: the mesh's name;
    ``max_buffered``: envelopes kept per agent until consumed (older ones
    are dropped and counted in ``stats()["dropped"]``); ``node_options`` go
    to :class:`zmesh.Node`."""

    default_transport: ClassVar[str | None] = None

    def __init__(self, transport: str | Path | Transport | MessageTransport | None = None, *, mesh: str = "bus",
                 max_buffered: int = 10_000, **node_options: Any) -> None:
        if max_buffered.__class__ is not int or max_buffered < 1:
            raise ValueError(f"max_buffered must be an int of at least 1, got {max_buffered!r}")
        where = transport if transport is not None else self.default_transport
        if isinstance(where, Path):
            where = where.absolute().as_uri()
        self.max_buffered = max_buffered
        self._buffers: dict[str, deque[Message]] = {}
        self._requests: dict[tuple[str, str], Message] = {}  # (agent, correlation id) -> a request consumed
        self._agents: dict[str, Agent] = {}
        self._dropped = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="zmesh-bus", daemon=True)
        self._thread.start()
        if where is not None:
            node_options["transport"] = where
        self._node = Node(mesh, **node_options)
        try:
            self._call(self._node.start())
        except BaseException:
            self._stop_loop()
            raise

    # -- the seed's interface ------------------------------------------------

    def publish(self, topic: str, envelope: dict[str, Any]) -> None:
        self._call(self._publish(topic, envelope))

    def subscribe(self, agent_id: str, topic: str) -> None:
        self._call(self._subscribe(agent_id, topic))

    def consume(self, agent_id: str) -> list[dict[str, Any]]:
        return self._call(self._consume(agent_id))

    async def apublish(self, topic: str, envelope: dict[str, Any]) -> None:
        await self._acall(self._publish(topic, envelope))

    async def asubscribe(self, agent_id: str, topic: str) -> None:
        await self._acall(self._subscribe(agent_id, topic))

    async def aconsume(self, agent_id: str) -> list[dict[str, Any]]:
        return await self._acall(self._consume(agent_id))

    # -- the rest --------------------------------------------------------------

    @property
    def node(self) -> Node:
        """The node underneath (its loop is the bus's own: call it from there)."""
        return self._node

    def stats(self) -> dict[str, Any]:
        return {"dropped": self._dropped, "buffered": {a: len(b) for a, b in self._buffers.items()},
                "node": self._call(self._node_stats())}

    def close(self) -> None:
        if not self._loop.is_running():
            return
        try:
            self._call(self._node.close())
        finally:
            self._stop_loop()

    def __enter__(self) -> MessageBus:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- on the bus's loop -------------------------------------------------------

    async def _publish(self, topic: str, envelope: dict[str, Any]) -> None:
        if not isinstance(envelope, dict) or not isinstance(envelope.get("header"), dict):
            raise InvalidMessage("an envelope is a dict {'header': {...}, 'payload': ...}")
        header = {**envelope["header"], "topic": topic}
        header.setdefault("msg_id", "")
        if not header["msg_id"]:
            del header["msg_id"]
        sender = str(header.get("sender") or "bus")
        agent = self._agent(sender)
        if header.get("type") == "result" and header.get("correlation_id"):
            request = self._requests.pop((sender, str(header["correlation_id"])), None)
            if request is None:
                raise InvalidMessage(f"agent {sender!r} has consumed no request with correlation id "
                                     f"{header['correlation_id']!r}")
            await agent.reply(request, envelope.get("payload"))
            return
        envelope = {**envelope, "header": {"msg_id": Message().id, **header}}
        if header.get("correlation_id"):
            self._loop.create_task(self._request(agent, envelope))  # the reply is the sender's to consume
            return
        await agent.send_envelope(envelope)

    async def _request(self, agent: Agent, envelope: dict[str, Any]) -> None:
        try:
            reply = await agent.send_envelope(envelope)
        except ZmeshError as exc:
            reply = Message("result", str(envelope["header"].get("target", "")), agent.id,
                            str(envelope["header"].get("topic", "")),
                            {"type": type(exc).__name__, "message": str(exc)},
                            str(envelope["header"]["correlation_id"]), status="error")
        self._keep(agent.id, reply)

    async def _subscribe(self, agent_id: str, topic: str) -> None:
        await self._agent(agent_id).subscribe(topic, self._collector(agent_id), inline=True)

    async def _consume(self, agent_id: str) -> list[dict[str, Any]]:
        self._agent(agent_id)
        buffer = self._buffers[agent_id]
        out = [m.to_envelope() for m in buffer]
        buffer.clear()
        return out

    async def _node_stats(self) -> dict[str, Any]:
        return self._node.stats()

    def _agent(self, agent_id: str) -> Agent:
        agent = self._agents.get(agent_id)
        if agent is None:
            agent = self._agents[agent_id] = self._node.agent(agent_id)
            self._buffers[agent_id] = deque()
            agent.add_handler(">", self._collector(agent_id), inline=True)
        return agent

    def _collector(self, agent_id: str) -> Any:
        def collect(msg: Message) -> Any:
            self._keep(agent_id, msg)
            if msg.expects_reply:
                self._requests[(agent_id, msg.correlation_id)] = msg
                return DEFERRED  # answered when the agent publishes its result
            return None

        return collect

    def _keep(self, agent_id: str, msg: Message) -> None:
        buffer = self._buffers.setdefault(agent_id, deque())
        if len(buffer) >= self.max_buffered:
            old = buffer.popleft()
            self._requests.pop((agent_id, old.correlation_id), None)
            self._dropped += 1
        buffer.append(msg)

    # -- calls across threads ------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a MessageBus's blocking methods cannot be called on its own loop; use the a* twins")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(CALL_TIMEOUT)

    async def _acall(self, coro: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


class FileBus(MessageBus):
    """The seed's ``FileBus``: the file transport in directory ``path`` (no dependency)."""

    def __init__(self, path: str | Path = "temp/message_bus", **options: Any) -> None:
        super().__init__(Path(path), **options)


class MQTTBus(MessageBus):
    """The seed's ``MQTTBus``: an MQTT 5 broker (``pip install 'zmesh-agents[mqtt]'``)."""

    default_transport = "mqtt://127.0.0.1:1883"


class RedisBus(MessageBus):
    """The seed's ``RedisBus``: a Redis server (``pip install 'zmesh-agents[redis]'``)."""

    default_transport = "redis://127.0.0.1:6379"


class NatsBus(MessageBus):
    """A NATS server with JetStream (``pip install 'zmesh-agents[nats]'``)."""

    default_transport = "nats://127.0.0.1:4222"


class MeshBus(MessageBus):
    """zmesh's own mesh, no broker: ZeroMQ, peers found by mDNS or seeds."""

    default_transport = "zmq"
