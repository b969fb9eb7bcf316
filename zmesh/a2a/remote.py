"""``zmesh.a2a.remote``: an A2A agent reachable over HTTP, as a mesh agent.

``async with zmesh.a2a.remote(node, "weather", "http://127.0.0.1:9000/"):``
reads the agent's card and registers mesh agent ``weather`` on ``node``, a
capability per skill. A mesh request on topic ``<skill>`` becomes an A2A
SendMessage naming that skill (topic :data:`MESSAGE_TOPIC` names none); a
mesh ``stream`` becomes SendStreamingMessage, each artifact update a chunk;
cancelling the stream or the request cancels the A2A task (CancelTask). A task that FAILED
is a HandlerError for the requester, an agent it cannot reach a PeerLost.
See docs/ecosystem.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Iterator
from typing import TYPE_CHECKING, Any

from .._runtime.streams import is_stream_id
from ..errors import HandlerError, PeerLost, Timeout, ZmeshError
from ..message import Message as MeshMessage
from ..node import Node
from ._setup import SKILL_KEY, URL_META, A2ASetupError, require_sdk

if TYPE_CHECKING:
    import httpx
    from a2a.client import Client
    from a2a.types.a2a_pb2 import AgentCard, SendMessageRequest, StreamResponse, Task

    from ..agent import Agent

__all__ = ["MESSAGE_TOPIC", "RemoteAgent", "remote"]

log = logging.getLogger("zmesh.a2a")

#: The mesh topic whose requests go to the A2A agent without naming a skill (the agent picks).
MESSAGE_TOPIC = "message"
_DEFAULT_TIMEOUT = 300.0
_CANCEL_TIMEOUT = 5.0
_CONTEXT_LOOKS = 5  # ListTasks tries for a cancelled request's task: 20, 40, 80 and 160 ms apart


class RemoteAgent:
    """An A2A agent as mesh agent ``name`` on ``node``: ``async with`` reads its
    card (``url`` + ``/.well-known/agent-card.json``) and registers the agent;
    leaving closes it. ``token``: sent as ``Authorization: Bearer``.
    ``timeout``: seconds an A2A call may take when the mesh request has no ttl."""

    def __init__(self, node: Node, name: str, url: str, *, token: str | None = None,
                 timeout: float = _DEFAULT_TIMEOUT) -> None:
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise A2ASetupError(f"timeout must be a positive number of seconds, got {timeout!r}")
        require_sdk()
        self.node = node
        self.name = name
        self.url = url.rstrip("/") + "/"
        self.token = token
        self.timeout = float(timeout)
        #: The agent's card, once started.
        self.card: AgentCard | None = None
        self.agent: Agent | None = None
        self._http: httpx.AsyncClient | None = None
        self._calls: Client | None = None
        self._streams: Client | None = None
        self._cancels: set[asyncio.Future[None]] = set()

    @property
    def skills(self) -> tuple[str, ...]:
        """The card's skill ids (each once, empty ones left out): the mesh agent's capabilities."""
        if self.card is None:
            return ()
        return tuple(dict.fromkeys(skill.id for skill in self.card.skills if skill.id))

    async def start(self) -> RemoteAgent:
        """Read the card and register the mesh agent (A2ASetupError when the card cannot be read)."""
        import httpx
        from a2a.client import (
            A2ACardResolver,
            A2AClientError,
            ClientConfig,
            ClientFactory,
        )

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._http = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(self.timeout, connect=10.0))
        try:
            self.card = await A2ACardResolver(self._http, self.url).get_agent_card()
            self._calls = ClientFactory(ClientConfig(streaming=False, httpx_client=self._http)).create(self.card)
            self._streams = ClientFactory(ClientConfig(streaming=True, httpx_client=self._http)).create(self.card)
        except (A2AClientError, ValueError) as exc:
            await self.close()
            raise A2ASetupError(f"cannot use the A2A agent at {self.url} as {self.name!r}: {exc}") from None
        meta: dict[str, Any] = {URL_META: self.url[:256]}
        if self.card.description:
            meta["description"] = self.card.description[:256]
        try:
            self.agent = self.node.agent(self.name, capabilities=self.skills, meta=meta)
        except BaseException:
            await self.close()
            raise
        for topic in dict.fromkeys((*self.skills, MESSAGE_TOPIC)):
            try:
                self.agent.add_handler(topic, self._handle)
            except ZmeshError as exc:  # a skill id that is no mesh topic: callable through MESSAGE_TOPIC only
                log.warning("zmesh.a2a: skill %r of %s is not a mesh topic (%s); use topic %r", topic, self.url,
                            exc, MESSAGE_TOPIC)
        log.info("zmesh.a2a: the A2A agent at %s is mesh agent %r (skills %s)", self.url, self.name, self.skills)
        return self

    async def close(self) -> None:
        """Unregister the mesh agent, let the A2A tasks being cancelled be, and close the connections."""
        if self.agent is not None:
            agent, self.agent = self.agent, None
            await agent.close()
        if self._cancels:
            await asyncio.gather(*self._cancels, return_exceptions=True)
        for client in (self._calls, self._streams):
            if client is not None:
                await client.close()
        self._calls = self._streams = None
        if self._http is not None:
            http, self._http = self._http, None
            await http.aclose()

    async def __aenter__(self) -> RemoteAgent:  # noqa: PYI034 - as Node and Gateway (typing.Self is 3.11+)
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- a mesh request to the A2A agent -----------------------------------

    def _request(self, msg: MeshMessage) -> SendMessageRequest:
        from a2a.types.a2a_pb2 import Message, Role, SendMessageRequest
        from google.protobuf.json_format import ParseDict
        from google.protobuf.struct_pb2 import Struct

        from ._parts import message_parts

        # A context of its own: a request cancelled before SendMessage answers finds its task by it.
        message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), context_id=f"zmesh-{uuid.uuid4()}",
                          parts=message_parts(msg.payload))
        if msg.topic != MESSAGE_TOPIC:
            message.metadata.CopyFrom(ParseDict({SKILL_KEY: msg.topic}, Struct()))
        return SendMessageRequest(message=message)

    def _deadline(self, msg: MeshMessage) -> float:
        """Seconds the requester still waits (its ttl), else the remote's timeout."""
        if msg.ttl:
            return max(0.05, msg.ttl - max(0.0, self.node.clock.time() - msg.timestamp))
        return self.timeout

    async def _handle(self, msg: MeshMessage) -> Any:
        if is_stream_id(msg.correlation_id):
            return self._stream(msg)  # an async iterator: the mesh relays it chunk by chunk
        try:
            return await asyncio.wait_for(self._call(msg), self._deadline(msg))
        except asyncio.TimeoutError:
            raise Timeout(f"the A2A agent at {self.url} did not answer in time") from None

    async def _call(self, msg: MeshMessage) -> Any:
        from ._parts import payload_of

        assert self._calls is not None
        request = self._request(msg)
        task: Task | None = None
        try:
            async with contextlib.aclosing(self._mapped(self._calls.send_message(request))) as events:
                async for event in events:
                    if event.HasField("message"):
                        return payload_of(event.message)
                    task = event.task
            if task is None:
                raise HandlerError("A2AError", "the A2A agent answered with neither a message nor a task",
                                   agent=self.name)
            return await self._outcome(task, time.monotonic() + self._deadline(msg))
        except asyncio.CancelledError:
            # The requester gave up (a cancel, its timeout): cancel the task, found by id or by its context.
            self._in_background(self._cancel(task.id) if task is not None
                                else self._cancel_context(request.message.context_id))
            raise

    def _in_background(self, cancel: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        """Run a cancel in a task of its own, which close() waits for."""
        running = asyncio.ensure_future(cancel)
        self._cancels.add(running)
        running.add_done_callback(self._cancels.discard)
        return running

    async def _cancel_context(self, context_id: str) -> None:
        """Cancel the tasks of a context that have not ended (a request's, whose task id never came)."""
        from a2a.client import A2AClientError
        from a2a.types.a2a_pb2 import ListTasksRequest, TaskState
        from a2a.utils.errors import A2AError

        pause = 0.02
        for _ in range(_CONTEXT_LOOKS):  # a cancel soon after the request may come before its task is made
            if self._calls is None:
                return
            try:
                found = await asyncio.wait_for(self._calls.list_tasks(ListTasksRequest(context_id=context_id)),
                                               _CANCEL_TIMEOUT)
            except (A2AClientError, A2AError, asyncio.TimeoutError) as exc:
                log.info("zmesh.a2a: finding the task of context %s at %s to cancel it: %s", context_id, self.url,
                         exc)
                return
            running = [task.id for task in found.tasks
                       if task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)]
            for task_id in running:
                await self._cancel(task_id)
            if found.tasks:
                return
            await asyncio.sleep(pause)
            pause *= 2

    async def _outcome(self, task: Task, deadline: float) -> Any:
        """The reply a task gives: its artifacts' parts when COMPLETED (GetTask until then)."""
        from a2a.types.a2a_pb2 import GetTaskRequest, TaskState

        from ._parts import payload_of_parts

        pause = 0.005
        while task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING):
            if time.monotonic() > deadline:
                raise Timeout(f"task {task.id} of the A2A agent at {self.url} did not end in time")
            await asyncio.sleep(pause)  # the agent answered at once and works on: poll, backing off
            pause = min(pause * 2, 0.25)
            assert self._calls is not None
            task = await self._mapped_call(self._calls.get_task(GetTaskRequest(id=task.id)))
        self._raise_unless_completed(task.status.state, task.status.message if task.status.HasField("message")
                                     else None, task.id)
        return payload_of_parts([part for artifact in task.artifacts for part in artifact.parts])

    def _raise_unless_completed(self, state: int, message: Any, task_id: str) -> None:
        from a2a.types.a2a_pb2 import TaskState

        from ._parts import payload_of

        if state == TaskState.TASK_STATE_COMPLETED:
            return
        said = payload_of(message) if message is not None else None
        name = TaskState.Name(state).removeprefix("TASK_STATE_").lower()
        raise HandlerError(f"A2ATask{name.title().replace('_', '')}",
                           f"task {task_id} ended {name}" + (f": {said}" if said else ""), agent=self.name)

    # -- a mesh stream -------------------------------------------------------

    async def _stream(self, msg: MeshMessage) -> AsyncIterator[Any]:
        """Each artifact update a chunk. An agent without streaming answers with one
        message or task instead: that is the one chunk (a task still working, once it ends)."""
        from a2a.types.a2a_pb2 import TaskState

        from ._parts import payload_of, payload_of_parts

        assert self._streams is not None
        deadline = time.monotonic() + self._deadline(msg)
        task: Task | None = None
        task_id = ""
        chunks = 0
        ended = False
        try:
            async with contextlib.aclosing(self._mapped(self._streams.send_message(self._request(msg)))) as events:
                async for event in events:
                    kind = event.WhichOneof("payload")
                    task_id = task_id or _task_id(event)
                    if kind == "message":
                        ended = True
                        yield payload_of(event.message)
                        return
                    if kind == "artifact_update":
                        chunks += 1
                        yield payload_of_parts(event.artifact_update.artifact.parts)
                        continue
                    if kind == "task":
                        task = event.task
                        status = task.status
                    else:
                        status = event.status_update.status
                    if status.state not in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING):
                        ended = True
                        self._raise_unless_completed(status.state, status.message if status.HasField("message")
                                                     else None, task_id)
                        if chunks == 0 and task is not None and task.artifacts:
                            yield await self._outcome(task, deadline)  # a whole task, not streamed
                        return
            if task is not None and chunks == 0:
                reply = await self._outcome(task, deadline)
                ended = True
                yield reply
            ended = True
        finally:
            if not ended and task_id:
                # The mesh reader left (a cancel, a timeout) or the connection broke: cancel the A2A task,
                # from a task of its own that close() waits for (this one may be cancelled again meanwhile).
                await asyncio.shield(self._in_background(self._cancel(task_id)))

    async def _cancel(self, task_id: str) -> None:
        from a2a.client import A2AClientError
        from a2a.types.a2a_pb2 import CancelTaskRequest
        from a2a.utils.errors import A2AError

        if self._calls is None:
            return
        try:
            await asyncio.wait_for(self._calls.cancel_task(CancelTaskRequest(id=task_id)), _CANCEL_TIMEOUT)
        except (A2AClientError, A2AError, asyncio.TimeoutError) as exc:
            log.info("zmesh.a2a: cancelling task %s of %s: %s", task_id, self.url, exc)

    # -- errors --------------------------------------------------------------

    async def _mapped(self, events: AsyncIterator[StreamResponse]) -> AsyncGenerator[StreamResponse, None]:
        """The client's events, its errors as the mesh's (see :meth:`_as_mesh_errors`)."""
        try:
            with self._as_mesh_errors():
                async for event in events:
                    yield event
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:  # the client's SSE stream, left early: its connection is let go now
                await close()

    async def _mapped_call(self, call: Any) -> Any:
        with self._as_mesh_errors():
            return await call

    @contextlib.contextmanager
    def _as_mesh_errors(self) -> Iterator[None]:
        """The client's errors as the mesh's: unreachable PeerLost, slow Timeout, the rest HandlerError."""
        from a2a.client import A2AClientError, A2AClientTimeoutError
        from a2a.utils.errors import A2AError

        try:
            yield
        except A2AClientTimeoutError:
            raise Timeout(f"the A2A agent at {self.url} did not answer in time") from None
        except A2AClientError as exc:
            raise self._client_error(exc) from None
        except A2AError as exc:
            raise HandlerError(type(exc).__name__, str(exc), agent=self.name) from None

    def _client_error(self, exc: Exception) -> ZmeshError:
        import httpx

        if isinstance(exc.__cause__, httpx.RequestError) or "Network communication error" in str(exc):
            return PeerLost(f"the A2A agent at {self.url} cannot be reached: {exc}")
        return HandlerError(type(exc).__name__, str(exc), agent=self.name)


def _task_id(event: StreamResponse) -> str:
    kind = event.WhichOneof("payload")
    if kind == "task":
        return event.task.id
    if kind == "status_update":
        return event.status_update.task_id
    if kind == "artifact_update":
        return event.artifact_update.task_id
    return ""


def remote(node: Node, name: str, url: str, **options: Any) -> RemoteAgent:
    """The A2A agent at ``url`` as mesh agent ``name`` on ``node``:
    ``async with zmesh.a2a.remote(node, "weather", url):``. Options: ``token``,
    ``timeout`` (see :class:`RemoteAgent`)."""
    return RemoteAgent(node, name, url, **options)
