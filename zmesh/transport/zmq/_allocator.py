"""glibc's allocator, tuned once a process moves large frames (internal).

A 1 MiB frame costs a fresh 1 MiB buffer on each side: the joined frame the
sender hands to ZeroMQ without copying (freed later by ZeroMQ's own thread),
and ZeroMQ's buffer on the receiving side (freed by the loop's thread). With
glibc's default thresholds each of them is mapped and unmapped anew or
trimmed off the heap's top, so every large message pays about 256 page
faults per MiB, more than the copies themselves (measured: 285 faults and
1.1 ms of CPU per 1 MiB message on the sending side, 60 and 0.66 ms with the
thresholds below; docs/performance.md).

So once this process sends or receives a frame of at least
:data:`LARGE_FRAME` bytes, buffers up to twice the largest frame seen (at
least 4 MiB, at most 32 MiB: glibc's own dynamic threshold stops there too)
come from the heap, and a heap keeps twice that free at its top. A process
that never moves a large frame is untouched. It is process-wide, so it is
skipped when the process set either threshold itself
(``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` in the
environment), with ``ZMESH_MALLOC_TUNE=0``, and on any C library but glibc.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from typing import Callable

__all__ = ["LARGE_FRAME", "large_frame", "tuned"]

log = logging.getLogger("zmesh")

#: Frames at least this long are large.
LARGE_FRAME = 65536
_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3
MIN_MMAP_THRESHOLD = 4 << 20
MAX_MMAP_THRESHOLD = 32 << 20


class _Tuning:
    """What this process set (one per process: the allocator is the process's)."""

    def __init__(self) -> None:
        self.mallopt: Callable[[int, int], int] | None = None
        self.checked = False
        self.mmap_threshold = 0  # 0: never set

    def grow(self, size: int) -> None:
        if not self.checked:
            self.checked = True
            self.mallopt = _glibc_mallopt()
        if self.mallopt is None:
            return
        want = min(max(MIN_MMAP_THRESHOLD, 2 * size), MAX_MMAP_THRESHOLD)
        if want <= self.mmap_threshold:
            return
        if self.mallopt(_M_MMAP_THRESHOLD, want) and self.mallopt(_M_TRIM_THRESHOLD, 2 * want):
            self.mmap_threshold = want
            log.debug("zmesh: large frames: glibc mmap threshold %d, trim threshold %d", want, 2 * want)
        else:
            self.mallopt = None  # refused: leave it alone from now on


_tuning = _Tuning()


def large_frame(size: int) -> None:
    """A frame of ``size`` bytes (at least LARGE_FRAME) is moving: tune the
    allocator for it, if it was not tuned for one this large already."""
    if size > _tuning.mmap_threshold // 2:
        _tuning.grow(size)


def tuned() -> int:
    """glibc's mmap threshold as this module set it (0: it did not)."""
    return _tuning.mmap_threshold


def _glibc_mallopt() -> Callable[[int, int], int] | None:
    if not sys.platform.startswith("linux") or os.environ.get("ZMESH_MALLOC_TUNE", "1") == "0":
        return None
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  # glibc only: musl has no mallopt of this meaning
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt
