"""Noticing new files in directories (internal): inotify where the system
has it (Linux: a file renamed into a watched directory is seen at once),
else polling every ``poll`` seconds; with inotify every directory is also
looked at every ``SAFETY_POLL`` seconds (what an overflowing event queue
lost is found then)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import struct
import sys
from pathlib import Path
from typing import Any, Callable

__all__ = ["DirWatcher", "SAFETY_POLL", "inotify_available"]

#: Seconds between looks at every watched directory when inotify tells of changes.
SAFETY_POLL = 1.0
_IN_CLOSE_WRITE, _IN_MOVED_TO, _IN_CREATE, _IN_Q_OVERFLOW = 0x8, 0x80, 0x100, 0x4000
_IN_NONBLOCK, _IN_CLOEXEC = 0o4000, 0o2000000
_EVENT = struct.Struct("iIII")


def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1  # noqa: B018 - present?
        return libc
    except (OSError, AttributeError):
        return None


def inotify_available() -> bool:
    return _libc() is not None


class DirWatcher:
    """Calls ``on_change(directory)`` on ``loop`` when a file may have come into a watched directory."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_change: Callable[[Path], None], poll: float,
                 use_inotify: bool = True) -> None:
        self._loop = loop
        self._on_change = on_change
        self._dirs: dict[Path, int] = {}  # directory -> its inotify watch (-1: polled)
        self._by_watch: dict[int, Path] = {}
        self._fd = -1
        self._libc: Any = _libc() if use_inotify else None
        if self._libc is not None:
            fd = self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
            if fd >= 0:
                self._fd = fd
                loop.add_reader(fd, self._read)
        self.poll = SAFETY_POLL if self._fd >= 0 else poll
        self._task = loop.create_task(self._poll())

    @property
    def inotify(self) -> bool:
        return self._fd >= 0

    def add(self, directory: Path, notice: bool = True) -> None:
        """Watch ``directory`` (``notice``: and call ``on_change`` for what is there already)."""
        if directory in self._dirs:
            return
        watch = -1
        if self._fd >= 0:
            watch = self._libc.inotify_add_watch(self._fd, os.fsencode(directory),
                                                 _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE)
            if watch >= 0:
                self._by_watch[watch] = directory
        self._dirs[directory] = watch
        if notice:
            self._loop.call_soon(self._on_change, directory)

    def remove(self, directory: Path) -> None:
        watch = self._dirs.pop(directory, -1)
        if watch >= 0:
            self._by_watch.pop(watch, None)
            self._libc.inotify_rm_watch(self._fd, watch)

    def _read(self) -> None:
        try:
            data = os.read(self._fd, 1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        changed: set[Path] = set()
        offset = 0
        while offset + _EVENT.size <= len(data):
            watch, mask, _, length = _EVENT.unpack_from(data, offset)
            offset += _EVENT.size + length
            if mask & _IN_Q_OVERFLOW:
                changed.update(self._dirs)
            elif watch in self._by_watch:
                changed.add(self._by_watch[watch])
        for directory in changed:
            self._on_change(directory)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll)
            for directory in list(self._dirs):
                self._on_change(directory)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
        self._dirs.clear()
        self._by_watch.clear()
