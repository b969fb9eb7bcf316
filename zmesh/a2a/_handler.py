"""The A2A SDK's request handler for one mesh agent, checking a message's
skill before any task exists, and cancelling a stream its client left (internal)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    Message,
    SendMessageRequest,
    Task,
    TaskState,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import A2AError, InvalidParamsError
from google.protobuf.json_format import MessageToDict

from ..registry import AgentInfo
from ._executor import message_metadata
from ._parts import pick_skill

__all__ = ["MeshRequestHandler"]

log = logging.getLogger("zmesh.a2a")

_ENDED = frozenset({TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED,
                    TaskState.TASK_STATE_REJECTED, TaskState.TASK_STATE_INPUT_REQUIRED,
                    TaskState.TASK_STATE_AUTH_REQUIRED})


def _task_of(event: Event) -> tuple[str, bool]:
    """(the task an event is of, whether it ends the stream)."""
    if isinstance(event, Message):
        return event.task_id, True
    if isinstance(event, Task):
        return event.id, event.status.state in _ENDED
    if isinstance(event, TaskStatusUpdateEvent):
        return event.task_id, event.status.state in _ENDED
    return str(getattr(event, "task_id", "")), False


class MeshRequestHandler(DefaultRequestHandler):
    """One mesh agent's handler: InvalidParamsError (naming the skills there
    are) for a message no skill of the agent's takes; a client that closes
    a stream before it ended cancels its task, and so the mesh request."""

    def __init__(self, agent_id: str, lookup: Callable[[str], AgentInfo | None], **options: Any) -> None:
        super().__init__(**options)
        self._agent_id = agent_id
        self._lookup = lookup
        self._cancels: set[asyncio.Task[Any]] = set()
        self._closing = False  # aclose() cancels every task itself

    def _check(self, params: SendMessageRequest) -> None:
        agent = self._lookup(self._agent_id)
        if agent is None:
            raise InvalidParamsError(message=f"agent {self._agent_id!r} is not in the mesh (any more)")
        pick_skill(agent, message_metadata(MessageToDict(params.metadata), params.message))

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Message | Task:
        self._check(params)
        result: Message | Task = await super().on_message_send(params, context)
        return result

    async def on_message_send_stream(self, params: SendMessageRequest,
                                     context: ServerCallContext) -> AsyncGenerator[Event, None]:
        self._check(params)
        task_id, ended = "", False
        try:
            async with contextlib.aclosing(super().on_message_send_stream(params, context)) as events:
                async for event in events:
                    of, ended = _task_of(event)
                    task_id = task_id or of
                    yield event
        finally:
            # A stream ends with a final event. Without one, its client left: this generator was closed,
            # or cancelled, which the SDK's own stream takes for its end (it returns). Cancel from a task
            # of its own, which awaiting here could not finish.
            if not ended and task_id and not self._closing:
                cancel = asyncio.ensure_future(self._cancel_left(task_id, context))
                self._cancels.add(cancel)
                cancel.add_done_callback(self._cancels.discard)

    async def _cancel_left(self, task_id: str, context: ServerCallContext) -> None:
        try:
            await self.on_cancel_task(CancelTaskRequest(id=task_id), context)
        except A2AError as exc:  # it ended meanwhile
            log.debug("zmesh.a2a: task %s of a closed stream was not cancelled: %s", task_id, exc)
        except Exception:  # the SDK's own trouble: say so, and let the other cancels go on
            log.exception("zmesh.a2a: cancelling task %s of a closed stream failed", task_id)

    async def aclose(self) -> None:
        """Wait for the cancels of streams their clients left, then drain the SDK's tasks."""
        self._closing = True
        if self._cancels:
            await asyncio.gather(*self._cancels, return_exceptions=True)
        await super().aclose()
