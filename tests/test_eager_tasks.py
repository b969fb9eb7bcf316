"""An ``async def`` handler's Task starts eagerly on every supported Python.

On 3.12+ asyncio's ``eager_start=True`` does it; on 3.10 and 3.11
``zmesh._runtime.eager.EagerTask`` does the same: the handler's first step
runs at its delivery, inside its own Task and context, and a handler that
returns without suspending has ended before ``run_handler`` returns (no loop
turn, no done callback). One that suspends is an ordinary Task from then on.
With the backport switched off (``ZMESH_EAGER_BACKPORT=0``), a Task cancelled
before its first step still reports the handler as failed.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import sys
import warnings
import weakref
from typing import Any

import pytest

from zmesh._runtime import handlers
from zmesh._runtime.handlers import ASYNC, HandlerTasks, run_handler

from .helpers import wait_for

pytestmark = pytest.mark.timeout(30)

_var: contextvars.ContextVar[str] = contextvars.ContextVar("test_eager_tasks_var", default="outside")


class Outcome:
    def __init__(self) -> None:
        self.done: list[Any] = []
        self.failed: list[BaseException] = []

    def on_done(self, result: Any, extra: Any) -> None:
        self.done.append((result, extra))

    def on_failed(self, exc: BaseException, extra: Any) -> None:
        self.failed.append(exc)


async def test_a_handler_that_never_suspends_ends_inside_its_own_task_before_run_handler_returns() -> None:
    seen: list[Any] = []

    async def handler(arg: int) -> int:
        seen.append((asyncio.current_task(), _var.get()))
        _var.set("inside")
        return arg + 1

    outcome, tasks, me = Outcome(), HandlerTasks(), asyncio.current_task()
    running = run_handler(handler, 41, outcome.on_done, outcome.on_failed, tasks, "x", ASYNC)
    assert running is None, "nothing still runs"
    assert outcome.done == [(42, "x")] and outcome.failed == [], "ended with no loop turn"
    (task, value), = seen
    assert task is not None and task is not me, "the handler ran in a Task of its own"
    assert value == "outside", "its context is a copy of the caller's"
    assert _var.get() == "outside", "what it set stays in its own context"
    assert asyncio.current_task() is me, "the caller's Task is current again"


async def test_a_handler_that_suspends_is_one_ordinary_task_that_can_be_cancelled() -> None:
    gate = asyncio.Event()
    tasks_seen: list[Any] = []

    async def handler(arg: int) -> int:
        tasks_seen.append(asyncio.current_task())
        await gate.wait()
        tasks_seen.append(asyncio.current_task())
        return arg

    outcome, tasks = Outcome(), HandlerTasks()
    first = run_handler(handler, 1, outcome.on_done, outcome.on_failed, tasks, None, ASYNC)
    second = run_handler(handler, 2, outcome.on_done, outcome.on_failed, tasks, None, ASYNC)
    assert first is not None and second is not None and not first.done()
    assert tasks_seen == [first, second], "current_task() is the handler's Task from its first line"
    assert {first, second} <= asyncio.all_tasks(), "a suspended handler is in asyncio.all_tasks()"
    assert set(tasks.running()) == {first, second}
    assert second.cancel()
    gate.set()
    await asyncio.wait([first, second], timeout=5)  # type: ignore[list-item]
    assert tasks_seen[2:] == [first], "the same Task after its await"
    assert outcome.done == [(1, None)]
    assert len(outcome.failed) == 1 and isinstance(outcome.failed[0], asyncio.CancelledError)
    assert tasks.running() == []


async def test_cancel_all_stops_a_suspended_eager_handler_and_reports_nothing() -> None:
    async def handler(arg: int) -> None:
        await asyncio.Event().wait()

    outcome, tasks = Outcome(), HandlerTasks()
    running = run_handler(handler, 1, outcome.on_done, outcome.on_failed, tasks, None, ASYNC)
    assert running is not None
    await asyncio.wait_for(tasks.cancel_all(), 5)
    assert running.cancelled() and outcome.done == [] and outcome.failed == []


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12+ starts every Task eagerly: none is unstarted")
async def test_without_the_backport_a_task_cancelled_before_its_first_step_reports_the_handler_failed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handlers, "_BACKPORT", False)
    ran: list[int] = []

    async def handler(arg: int) -> None:
        ran.append(arg)

    outcome, tasks = Outcome(), HandlerTasks()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        running = run_handler(handler, 1, outcome.on_done, outcome.on_failed, tasks, "x", ASYNC)
        assert running is not None and outcome.done == [], "without the backport it starts on the next turn"
        assert running.cancel()
        await asyncio.wait([running], timeout=5)  # type: ignore[list-item]
        await wait_for(lambda: outcome.failed, 5, "the report of its done callback")
        gc.collect()
    assert ran == [] and len(outcome.failed) == 1 and isinstance(outcome.failed[0], asyncio.CancelledError)
    assert not [w for w in caught if "never awaited" in str(w.message)]
    assert tasks.running() == []


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the backport is for 3.10 and 3.11")
def test_the_backport_is_on_where_it_is_needed() -> None:
    from zmesh._runtime import eager

    assert eager.AVAILABLE, "asyncio's private _PyTask, _current_tasks or _register_task moved"


async def test_a_suspended_handler_is_held_while_it_waits_on_a_future_nobody_else_holds() -> None:
    """The loop holds Tasks weakly: a one-way handler waiting on such a future must not be collected."""
    held: weakref.WeakSet[asyncio.Future[None]] = weakref.WeakSet()

    async def handler(arg: int) -> None:
        future = asyncio.get_running_loop().create_future()
        held.add(future)
        await future

    outcome, tasks = Outcome(), HandlerTasks()
    running = run_handler(handler, 1, outcome.on_done, outcome.on_failed, tasks, None, ASYNC)
    assert running is not None
    task = weakref.ref(running)
    del running
    gc.collect()
    assert task() is not None and len(held) == 1, "the Task and its future are still alive"
    assert outcome.failed == [] and outcome.done == []
    await asyncio.wait_for(tasks.cancel_all(), 5)
    assert outcome.failed == [] and tasks.running() == []
