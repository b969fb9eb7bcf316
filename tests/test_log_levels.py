"""Log lines that match what happened: a cancellation or deadline somebody
asked for is INFO without a traceback, a crash is an ERROR with one, and a
handler that blocks the event loop is named in one WARNING."""

from __future__ import annotations

import asyncio
import logging
import os
import sysconfig
import threading
import types

import pytest

import zmesh
from zmesh._runtime import loop_watch as _loop_watch

from .helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(30)


def _block(seconds: float) -> None:
    """Hold the calling thread, as a blocking call (a sync SDK, CPU work) does."""
    threading.Event().wait(seconds)


def _zmesh_lines(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "zmesh" and text in r.getMessage()]


@pytest.mark.parametrize("ending", ["cancelled", "asyncio.timeout", "wait_for"])
async def test_a_handler_ended_by_a_cancellation_or_deadline_is_info_without_a_traceback(
    ending: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with Mesh("inproc") as m:
        node = await m.node()
        a, b = node.agent("a"), node.agent("b")

        @b.on("work")
        async def work(msg: zmesh.Message) -> None:
            if ending == "cancelled":
                task = asyncio.current_task()
                assert task is not None
                task.cancel()  # a "stop" handler elsewhere did this
                await asyncio.sleep(1)
            elif ending == "asyncio.timeout":
                async with asyncio.timeout(0.01) if hasattr(asyncio, "timeout") else _wait_for_block():
                    await asyncio.Event().wait()
            else:
                await asyncio.wait_for(asyncio.Event().wait(), 0.01)

        with caplog.at_level(logging.INFO, logger="zmesh"):
            with pytest.raises(zmesh.HandlerError):
                await a.request("b", "work", timeout=5)
        [line] = _zmesh_lines(caplog, "handler of agent 'b'")
        assert line.levelno == logging.INFO and line.exc_info is None
        assert ("CancelledError" if ending == "cancelled" else "TimeoutError") in line.getMessage()
        assert node.stats()["handler_errors"] == 1  # still counted and dead-lettered


class _wait_for_block:
    """asyncio.timeout for Python 3.10, which lacks it: the same TimeoutError from wait_for."""

    async def __aenter__(self) -> None:
        await asyncio.wait_for(asyncio.Event().wait(), 0.01)

    async def __aexit__(self, *exc: object) -> None:
        return None


async def test_a_handler_that_crashes_is_an_error_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    async with Mesh("inproc") as m:
        node = await m.node()
        a, b = node.agent("a"), node.agent("b")
        b.add_handler("work", lambda msg: 1 / 0)
        with caplog.at_level(logging.INFO, logger="zmesh"), pytest.raises(zmesh.HandlerError):
            await a.request("b", "work", timeout=5)
        [line] = _zmesh_lines(caplog, "handler of agent 'b'")
        assert line.levelno == logging.ERROR and line.exc_info is not None


@pytest.mark.parametrize("kind", ["async", "inline"])
async def test_a_handler_that_blocks_the_loop_is_named_once(
    kind: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_loop_watch, "_named", set())  # once per process: this run starts afresh
    async with Mesh("inproc") as m:
        node = await m.node()
        a, b = node.agent("a"), node.agent("b")

        async def summarize_async(msg: zmesh.Message) -> str:
            _block(msg.payload)  # the blocking call in an async def handler
            return "done"

        def summarize_inline(msg: zmesh.Message) -> str:
            _block(msg.payload)
            return "done"

        async def then_this_one(msg: zmesh.Message) -> None:
            _block(0.4)

        if kind == "async":
            b.add_handler("summarize", summarize_async)
        else:
            b.add_handler("summarize", summarize_inline, inline=True)
        b.add_handler("quick", lambda msg: "fast", inline=True)
        b.add_handler("other", then_this_one)
        with caplog.at_level(logging.WARNING, logger="zmesh"):
            assert (await a.request("b", "quick", timeout=5)).payload == "fast"
            for _ in range(2):
                assert (await a.request("b", "summarize", 0.4, timeout=5)).payload == "done"
            # Another blocking handler: once it is named, the second block above has been judged too.
            await a.request("b", "other", timeout=5)
            await wait_for(lambda: len(_zmesh_lines(caplog, "blocked the event loop")) >= 2, 5, "the warnings")
        lines = [r.getMessage() for r in _zmesh_lines(caplog, "blocked the event loop")]
        name = "summarize_async" if kind == "async" else "summarize_inline"
        assert len(lines) == 2 and name in lines[0] and "then_this_one" in lines[1], lines
        assert "test_log_levels.py" in lines[0] and "quick" not in " ".join(lines)


async def test_block_warning_none_turns_the_watch_off(caplog: pytest.LogCaptureFixture) -> None:
    async with Mesh("inproc") as m:
        node = await m.node(block_warning=None)
        a, b = node.agent("a"), node.agent("b")

        async def hog(msg: zmesh.Message) -> None:
            _block(0.3)

        b.add_handler("hog", hog)
        assert "zmesh-loop-watch" not in {t.name for t in threading.enumerate()}  # nothing watches
        with caplog.at_level(logging.WARNING, logger="zmesh"):
            await a.request("b", "hog", timeout=5)
        assert _zmesh_lines(caplog, "blocked the event loop") == []


def test_block_warning_must_be_positive_seconds_or_none() -> None:
    for bad in (0, -1, "0.1", True, float("nan")):
        with pytest.raises(ValueError, match="block_warning"):
            zmesh.Node("m", transport="inproc", block_warning=bad)  # type: ignore[arg-type]


def _stack(*where: tuple[str, str]) -> types.SimpleNamespace:
    """A fake frame chain, outermost first, as (file, function) pairs: what the watchdog reads."""
    frame = None
    for filename, name in where:
        frame = types.SimpleNamespace(f_code=types.SimpleNamespace(co_filename=filename, co_name=name),
                                      f_back=frame)
    assert frame is not None
    return frame


def test_the_watchdog_names_the_users_handler_never_the_standard_librarys_frames() -> None:
    zmesh_dir = os.path.dirname(zmesh.__file__)
    stdlib = sysconfig.get_paths()["stdlib"]
    installed = sysconfig.get_paths()["purelib"]
    loop = (os.path.join(stdlib, "asyncio", "base_events.py"), "_run_once")
    start = (os.path.join(zmesh_dir, "_delivery.py"), "_start")
    run_handler = (os.path.join(zmesh_dir, "handlers.py"), "run_handler")
    mine = ("/srv/app/agents.py", "summarize")
    # A plain handler being handed to its pool: the stall is in the pool's submit, not in a handler.
    handing_on = _stack(loop, start, run_handler, (os.path.join(zmesh_dir, "handlers.py"), "submit"),
                        (os.path.join(stdlib, "concurrent", "futures", "thread.py"), "submit"))
    assert _loop_watch._handler_frame(handing_on) is None  # type: ignore[arg-type]
    blocking = _stack(loop, start, run_handler, mine, (os.path.join(stdlib, "socket.py"), "recv_into"))
    assert _loop_watch._handler_frame(blocking).f_code.co_name == "summarize"  # type: ignore[arg-type,union-attr]
    from_a_package = _stack(loop, start, (os.path.join(installed, "agentkit", "tools.py"), "search"))
    assert _loop_watch._handler_frame(from_a_package).f_code.co_name == "search"  # type: ignore[arg-type,union-attr]
    assert _loop_watch._handler_frame(_stack(loop, mine)) is None  # type: ignore[arg-type]  # not under zmesh


def test_the_watchdog_looks_into_an_eager_first_step_but_not_into_zmesh_sending_a_reply() -> None:
    zmesh_dir = os.path.dirname(zmesh.__file__)
    stdlib = sysconfig.get_paths()["stdlib"]
    installed = sysconfig.get_paths()["purelib"]
    runtime = os.path.join(zmesh_dir, "_runtime")
    # 3.10/3.11: finish() starts the handler's Task through asyncio's pure-Python Task step.
    first_step = [(os.path.join(stdlib, "asyncio", "base_events.py"), "_run_once"),
                  (os.path.join(runtime, "delivery.py"), "_start"),
                  (os.path.join(runtime, "handlers.py"), "run_handler"),
                  (os.path.join(runtime, "handlers.py"), "finish"),
                  (os.path.join(runtime, "eager.py"), "__init__"),
                  (os.path.join(stdlib, "asyncio", "tasks.py"), "__step"),
                  (os.path.join(runtime, "handlers.py"), "_guarded")]
    blocking = _stack(*first_step, ("/srv/app/agents.py", "summarize"), (os.path.join(stdlib, "time.py"), "sleep"))
    assert _loop_watch._handler_frame(blocking).f_code.co_name == "summarize"  # type: ignore[arg-type,union-attr]
    # The handler returned: zmesh sends its reply through pyzmq (an installed package), which is no handler.
    replying = _stack(*first_step, (os.path.join(runtime, "delivery.py"), "_handler_done"),
                      (os.path.join(runtime, "dispatch.py"), "reply"),
                      (os.path.join(installed, "zmq", "sugar", "socket.py"), "send"))
    assert _loop_watch._handler_frame(replying) is None  # type: ignore[arg-type]
