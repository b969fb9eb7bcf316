"""Eager Task start on Python 3.10 and 3.11, as 3.12's ``eager_start=True`` does it.

A Task made here runs its coroutine's first step at once, inside the Task
(``asyncio.current_task()`` is that Task, in the Task's own copy of the
context), and is scheduled only if the coroutine suspends. A coroutine that
returns without suspending (most message handlers) then costs no loop turn:
on 3.10/3.11 scheduling a C Task costs a Python-level ``call_soon``, a
``Handle`` and a registration in ``asyncio.all_tasks()``' WeakSet, which
was about half of what an ``async def`` handler cost per message.

It is built on the pure-Python Task asyncio keeps as ``asyncio.tasks._PyTask``
(3.10 and 3.11 take security fixes only, so these private names do not move):
after its first step the Task is an ordinary asyncio Task in every way
(cancel, uncancel, done callbacks, ``all_tasks()``). On 3.12+ asyncio's own
eager start is used instead (see :mod:`.handlers`).
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from asyncio import tasks as _asyncio_tasks
from typing import Any, Coroutine

__all__ = ["EagerTask", "AVAILABLE", "current_task_of"]

_PyTask: Any = getattr(_asyncio_tasks, "_PyTask", None)
_current_tasks: Any = getattr(_asyncio_tasks, "_current_tasks", None)
_register_task: Any = getattr(_asyncio_tasks, "_register_task", None)

#: Can this Python's Tasks be started eagerly by :class:`EagerTask`?
AVAILABLE = sys.version_info < (3, 12) and None not in (_PyTask, _current_tasks, _register_task)

_Base: Any = _PyTask if AVAILABLE else asyncio.Task

#: ``current_task_of(loop)``: the Task running on ``loop`` (None: a plain callback). On 3.10 and
#: 3.11 ``asyncio.current_task`` is Python around this dict lookup; on 3.12+ it is C.
current_task_of: Any = _current_tasks.get if AVAILABLE else asyncio.current_task


class EagerTask(_Base):  # type: ignore[misc]
    """A Task that starts at once (3.10/3.11 only)."""

    def __init__(self, coro: Coroutine[Any, Any, Any], loop: asyncio.AbstractEventLoop) -> None:
        # _PyTask.__init__ without its call_soon: what it and _PyFuture.__init__ set
        # (the rest are class attributes), then the first step here and now.
        self._loop = loop
        self._callbacks: list[Any] = []
        self._name = "zmesh-handler"
        self._must_cancel = False
        self._fut_waiter = None
        self._coro = coro
        self._num_cancels_requested = 0
        self._context = context = contextvars.copy_context()
        outer = _current_tasks.pop(loop, None)  # a Task that delivered this one (the in-process transport)
        try:
            context.run(self._Task__step)
        finally:
            if outer is not None:
                _current_tasks[loop] = outer
        if self._state == "PENDING":
            _register_task(self)  # it suspended: asyncio.all_tasks() sees it from now on
