"""An A2A request to a mesh agent as a zmesh request or stream (internal).

SendMessage is a zmesh ``request`` whose reply comes back as an agent
message; SendStreamingMessage (or SendMessage with ``return_immediately``)
is a task: SUBMITTED, WORKING, one artifact the chunks of a zmesh
``stream`` are appended to, COMPLETED. A mesh error ends the task FAILED
with the error as its status message. Cancelling the execution (CancelTask,
a closed SSE stream) cancels the mesh request: its handler sees the cancel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import Message, Part, Role, Task, TaskState, TaskStatus
from google.protobuf.json_format import MessageToDict

from ..agent import Agent
from ..errors import ZmeshError
from ..registry import AgentInfo
from ._parts import ReplyNotCarried, parts_of, payload_of, pick_skill, topic_of

__all__ = ["ARTIFACT_NAME", "MeshExecutor", "message_metadata"]

#: The name of the artifact a task's reply (or stream) is put in.
ARTIFACT_NAME = "reply"


def message_metadata(request_metadata: Mapping[str, Any], message: Message | None) -> dict[str, Any]:
    """The request's metadata, then the message's over it (either may name the skill)."""
    merged = dict(request_metadata)
    if message is not None:
        merged.update(MessageToDict(message.metadata))
    return merged


def _agent_text(text: str, context_id: str, task_id: str) -> Message:
    return Message(role=Role.ROLE_AGENT, parts=[Part(text=text)], message_id=f"{task_id}-status",
                   context_id=context_id, task_id=task_id)


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class MeshExecutor(AgentExecutor):
    """Runs A2A requests for one mesh agent, from the gateway's own agent."""

    def __init__(self, gateway: Agent, agent_id: str, lookup: Callable[[str], AgentInfo | None],
                 timeout: float) -> None:
        self._gateway = gateway
        self._agent_id = agent_id
        self._lookup = lookup
        self._timeout = timeout
        self._running: set[str] = set()
        self._cancelled: set[str] = set()  # running tasks CancelTask ended: their execution adds nothing more

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        message = context.message
        streaming = context.call_context.state.get("method") == "SendStreamingMessage"
        as_task = streaming or bool(context.configuration and context.configuration.return_immediately)
        self._running.add(task_id)
        try:
            agent = self._lookup(self._agent_id)
            if agent is None:
                raise ZmeshError(f"agent {self._agent_id!r} is no longer in the mesh")
            skill = pick_skill(agent, message_metadata(context.metadata, message))
            topic = topic_of(agent, skill)
            payload = payload_of(message) if message is not None else None
            if as_task:
                await self._run_task(context, event_queue, topic, payload, streaming)
            else:
                reply = await self._gateway.request(self._agent_id, topic, payload, timeout=self._timeout)
                await event_queue.enqueue_event(Message(role=Role.ROLE_AGENT, parts=parts_of(reply.payload),
                                                        message_id=f"{task_id}-reply", context_id=context_id))
        except (ZmeshError, ReplyNotCarried) as exc:
            if task_id in self._cancelled:
                return
            if as_task:
                await TaskUpdater(event_queue, task_id, context_id).failed(
                    _agent_text(_failure(exc), context_id, task_id))
            else:
                status = TaskStatus(state=TaskState.TASK_STATE_FAILED,
                                    message=_agent_text(_failure(exc), context_id, task_id))
                await event_queue.enqueue_event(Task(id=task_id, context_id=context_id, status=status,
                                                     history=[message] if message is not None else []))
        finally:
            self._running.discard(task_id)
            self._cancelled.discard(task_id)

    async def _run_task(self, context: RequestContext, event_queue: EventQueue, topic: str, payload: Any,
                        streaming: bool) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        if context.current_task is None:
            await event_queue.enqueue_event(Task(
                id=task_id, context_id=context_id, status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                history=[context.message] if context.message is not None else []))
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.start_work()
        artifact_id = f"{task_id}-{ARTIFACT_NAME}"
        if streaming:
            chunks = 0
            async with self._gateway.stream(self._agent_id, topic, payload, timeout=self._timeout) as stream:
                async for chunk in stream:
                    if task_id in self._cancelled:
                        return
                    await updater.add_artifact(parts_of(chunk), artifact_id=artifact_id, name=ARTIFACT_NAME,
                                               append=chunks > 0)
                    chunks += 1
        else:
            reply = await self._gateway.request(self._agent_id, topic, payload, timeout=self._timeout)
            if task_id in self._cancelled:
                return
            await updater.add_artifact(parts_of(reply.payload), artifact_id=artifact_id, name=ARTIFACT_NAME)
        if task_id not in self._cancelled:
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """CancelTask: the task is CANCELED at once; the SDK then cancels the
        execution, which cancels the mesh request (its handler sees it)."""
        task_id = context.task_id or ""
        if task_id in self._running:
            self._cancelled.add(task_id)
        await TaskUpdater(event_queue, task_id, context.context_id or "").cancel()
