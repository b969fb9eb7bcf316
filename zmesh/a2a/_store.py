"""The tasks an agent's A2A server keeps, bounded (internal)."""

from __future__ import annotations

from collections import OrderedDict

from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types.a2a_pb2 import ListTasksRequest, ListTasksResponse, Task, TaskState

__all__ = ["BoundedTaskStore"]

_FINAL = frozenset({TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED,
                    TaskState.TASK_STATE_REJECTED})


class BoundedTaskStore(TaskStore):
    """The SDK's in-memory store, keeping the last ``keep`` tasks that ended
    (GetTask on an older one: task not found); tasks still running are all
    kept. ``forgotten`` counts those let go."""

    def __init__(self, keep: int) -> None:
        self._tasks = InMemoryTaskStore()
        self._keep = keep
        self._ended: OrderedDict[str, ServerCallContext] = OrderedDict()
        self.forgotten = 0

    async def save(self, task: Task, context: ServerCallContext) -> None:
        await self._tasks.save(task, context)
        if task.status.state in _FINAL:
            self._ended[task.id] = context
            self._ended.move_to_end(task.id)
            while len(self._ended) > self._keep:
                task_id, owner = self._ended.popitem(last=False)
                await self._tasks.delete(task_id, owner)
                self.forgotten += 1

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        return await self._tasks.get(task_id, context)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        return await self._tasks.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        self._ended.pop(task_id, None)
        await self._tasks.delete(task_id, context)
