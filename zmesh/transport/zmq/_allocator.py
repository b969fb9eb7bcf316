"""glibc's allocator, tuned once a process moves large frames (internal).

A 1 MiB frame costs a fresh 1 MiB buffer on each side: the joined frame the
sender hands to ZeroMQ without copying (freed later by ZeroMQ's own thread),
and ZeroMQ's buffer on the receiving side (freed by the loop's thread). With
glibc's default thresholds each of them is mapped and unmapped anew or
trimmed off the heap's top, so every large message pays about 256 page
faults per MiB, more than the copies themselves (measured: 285 faults and
1.1 ms of CPU per 1 MiB message on the sending side, 60 and 0.66 ms with the
thresholds below; docs/performance.md).

So the first time this process sends or receives a frame of at least
:data:`LARGE_FRAME` bytes, buffers up to 4 MiB come from the heap and a heap
keeps up to 8 MiB free at its top. glibc's own dynamic thresholds grow to
32 MiB, so these stay within what it may choose itself; a process that never
moves a large frame is untouched. It is process-wide, so it is skipped when
the process set either threshold itself (``MALLOC_MMAP_THRESHOLD_`` or
``MALLOC_TRIM_THRESHOLD_`` in the environment), with
``ZMESH_MALLOC_TUNE=0``, and on any C library but glibc.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

__all__ = ["LARGE_FRAME", "large_frame", "tuned"]

log = logging.getLogger("zmesh")

#: Frames at least this long are large (also where sending stops copying).
LARGE_FRAME = 65536
_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 4 << 20
TRIM_THRESHOLD = 8 << 20

_state = {"done": False, "tuned": False}


def large_frame() -> None:
    """A large frame is moving: tune the allocator, once per process."""
    if _state["done"]:
        return
    _state["done"] = True
    _state["tuned"] = _tune()


def tuned() -> bool:
    """Did :func:`large_frame` change glibc's thresholds in this process?"""
    return _state["tuned"]


def _tune() -> bool:
    if not sys.platform.startswith("linux") or os.environ.get("ZMESH_MALLOC_TUNE", "1") == "0":
        return False
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  # glibc only: musl has no mallopt of this meaning
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if done:
        log.debug("zmesh: large frames: glibc mmap threshold %d, trim threshold %d", MMAP_THRESHOLD,
                  TRIM_THRESHOLD)
    return done
