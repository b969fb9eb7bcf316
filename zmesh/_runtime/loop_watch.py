"""A watchdog for handlers that block the event loop (internal).

An ``async def`` handler that makes a blocking call (``time.sleep``, a sync
SDK, CPU work) stops every other handler, reply and heartbeat of its node,
and nothing says so: asyncio warns only in debug mode. A node therefore keeps
a beat on its loop (a timer every half threshold) and a thread that looks at
the beat. When the beat is late by more than the threshold, the thread
samples the loop thread's stack (``sys._current_frames``); if a handler is
running there, the next beat logs one warning naming that handler, with how
long the loop was blocked. Each handler is named once per process.

Nothing is added to the path of a message: the cost is one timer callback on
the loop and one thread wake-up per half threshold, per event loop (nodes on
one loop share a watchdog).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import sysconfig
import threading
import time
from types import CodeType, FrameType

__all__ = ["watch_loop", "unwatch_loop", "DEFAULT_BLOCK_WARNING"]

log = logging.getLogger("zmesh")

#: Seconds a handler may block its node's loop before it is warned about (``Node(block_warning=)``).
DEFAULT_BLOCK_WARNING = 0.1

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # zmesh/, not _runtime/
#: The standard library's own frames (the pool's submit, Task creation) are never a user's handler;
#: installed packages (which may lie under it) can be.
_STDLIB = os.path.join(os.path.realpath(sysconfig.get_paths()["stdlib"]), "")
_INSTALLED = tuple({os.path.join(os.path.realpath(sysconfig.get_paths()[p]), "") for p in ("purelib", "platlib")})
#: zmesh's frames that call a handler: the frame they call is the handler's.
_CALLERS = frozenset({"_guarded", "_start", "run_handler", "finish", "_call_plain", "_run"})
_named: set[CodeType] = set()  # handlers already warned about, in this process
_named_lock = threading.Lock()


def _handler_frame(frame: FrameType | None) -> FrameType | None:
    """The frame of the handler zmesh called, on the stack ending at ``frame`` (None: not in a handler)."""
    stack: list[FrameType] = []
    while frame is not None:
        stack.append(frame)
        frame = frame.f_back
    called = False
    for outer_first in reversed(stack):
        code = outer_first.f_code
        in_zmesh = code.co_filename.startswith(_PACKAGE)
        if in_zmesh and code.co_name in _CALLERS:
            called = True
        elif in_zmesh:
            called = False  # zmesh's own work around a handler (a reply it sends): not the handler
        elif called:
            if not code.co_filename.startswith(_STDLIB) or code.co_filename.startswith(_INSTALLED):
                return outer_first  # the first frame past zmesh's that called it (wrappers included)
            # zmesh was handing the handler on (a thread, a Task): not running it here,
            # unless a zmesh caller further in runs it (an eager Task's first step on 3.10/3.11)
            called = False
    return None


class _Watchdog:
    """One event loop's beat and the thread that watches it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, owner: object, threshold: float) -> None:
        self.loop = loop
        self.thresholds = {owner: threshold}  # changed under _lock only
        #: The smallest owner's threshold: a plain float, read by both threads.
        self.threshold = threshold
        self.loop_thread = threading.get_ident()
        self.beat = time.monotonic()
        self.suspect: tuple[CodeType, int] | None = None  # (code, line) of the blocking handler
        self.stop = threading.Event()
        self.timer: asyncio.TimerHandle | None = None
        self.thread = threading.Thread(target=self._watch, name="zmesh-loop-watch", daemon=True)

    def start(self) -> None:
        self._on_beat()
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        if self.timer is not None:
            self.timer.cancel()
        if self.thread.is_alive() and threading.get_ident() != self.thread.ident:
            self.thread.join(1.0)

    def _on_beat(self) -> None:
        now = time.monotonic()
        suspect, self.suspect = self.suspect, None
        if suspect is not None:
            self._warn(suspect, now - self.beat)
        self.beat = now
        if not self.stop.is_set():
            self.timer = self.loop.call_later(self.threshold / 2, self._on_beat)

    def _warn(self, suspect: tuple[CodeType, int], blocked: float) -> None:
        code, line = suspect
        with _named_lock:
            if code in _named:
                return
            _named.add(code)
        name = getattr(code, "co_qualname", code.co_name)
        log.warning(
            "zmesh: handler %s (%s:%d) blocked the event loop for %.2f s (more than %.3g s): nothing else "
            "on this node ran meanwhile (other handlers, replies, heartbeats). A blocking call (time.sleep, "
            "a sync SDK, CPU work) belongs in a plain def handler, which runs in a worker thread, or in "
            "'await asyncio.to_thread(...)'; Node(block_warning=None) turns this warning off",
            name, code.co_filename, line, blocked, self.threshold,
        )

    def _watch(self) -> None:
        while not self.stop.wait(self.threshold / 2):
            if self.loop.is_closed():
                return  # its nodes were never closed: nobody beats any more
            if self.suspect is not None or time.monotonic() - self.beat <= self.threshold:
                continue
            handler = _handler_frame(sys._current_frames().get(self.loop_thread))
            if handler is not None:
                self.suspect = (handler.f_code, handler.f_lineno)


_watchdogs: dict[asyncio.AbstractEventLoop, _Watchdog] = {}
_lock = threading.Lock()


def watch_loop(owner: object, threshold: float) -> None:
    """Watch the running loop for handlers blocking it longer than ``threshold`` s, on ``owner``'s behalf."""
    loop = asyncio.get_running_loop()
    with _lock:
        watchdog = _watchdogs.get(loop)
        if watchdog is not None:
            watchdog.thresholds[owner] = threshold
            watchdog.threshold = min(watchdog.thresholds.values())
            return
        watchdog = _watchdogs[loop] = _Watchdog(loop, owner, threshold)
    watchdog.start()


def unwatch_loop(owner: object) -> None:
    """``owner`` no longer asks for the watch; the last one to leave a loop stops its watchdog."""
    with _lock:
        for loop, watchdog in list(_watchdogs.items()):
            if watchdog.thresholds.pop(owner, None) is None:
                continue
            if watchdog.thresholds:
                watchdog.threshold = min(watchdog.thresholds.values())
                return
            del _watchdogs[loop]
            break
        else:
            return
    watchdog.close()
