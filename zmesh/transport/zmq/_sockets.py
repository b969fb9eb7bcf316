"""The process's ZeroMQ context and socket bookkeeping (internal to the zmq transport).

Every node in a process shares one context (one set of I/O threads); it is
created with the first node and destroyed with the last. Sockets are
counted, so tests can assert that none leaked. Creating the context also
raises the process's soft limit on open files (:func:`raise_fd_limit`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import Any, Iterator

import zmq

from ...errors import TransportError

__all__ = [
    "EVENTS", "NOBLOCK", "POLLIN", "RCVMORE", "SNDMORE", "BYE_LINGER_MS", "FD_LIMIT_CAP",
    "acquire_context", "release_context", "open_socket", "close_socket", "fd_of", "map_zmq_errors",
    "open_sockets", "next_id", "lock", "raise_fd_limit",
]

log = logging.getLogger("zmesh")

# Plain ints: pyzmq's flag enums cost microseconds per operation on the hot path.
NOBLOCK = int(zmq.NOBLOCK)
SNDMORE = int(zmq.SNDMORE)
POLLIN = int(zmq.POLLIN)
EVENTS = int(zmq.EVENTS)
RCVMORE = int(zmq.RCVMORE)

BYE_LINGER_MS = 200
# Far beyond what a node needs, and not the millions some hard limits allow:
# children inherit the soft limit, and code that walks every possible
# descriptor (closing them before exec on some systems) gets slow with it.
FD_LIMIT_CAP = 65536
_OPEN_MAX = 10240  # macOS refuses a soft limit above OPEN_MAX, whatever the hard one

lock = threading.Lock()
_context: zmq.Context[Any] | None = None
_context_users = 0
_open_sockets = 0
_ids = 0


def _forget_the_parents_context() -> None:
    """In a child of fork: the parent's context, its I/O threads and its
    sockets did not come along; the child's first node makes its own."""
    global lock, _context, _context_users, _open_sockets
    lock = threading.Lock()
    _context = None
    _context_users = 0
    _open_sockets = 0


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_the_parents_context)


def open_sockets() -> int:
    """How many sockets zmesh has open in this process (tests assert 0 after each)."""
    return _open_sockets


def next_id() -> int:
    """A number unique in this process (names inproc addresses and ZAP domains)."""
    global _ids
    with lock:
        _ids += 1
        return _ids


@contextlib.contextmanager
def map_zmq_errors(what: str) -> Iterator[None]:
    """Translate ZeroMQ errors into TransportError at the boundary."""
    try:
        yield
    except zmq.ZMQError as exc:
        raise TransportError(f"{what}: {exc.strerror} (errno {exc.errno})") from None


def raise_fd_limit() -> int | None:
    """Raise the soft ``RLIMIT_NOFILE`` toward the hard limit, to at most
    :data:`FD_LIMIT_CAP`; never lower it, never fail. The soft limit now (None: no
    such limit here). Every connection costs a descriptor before it can be told from
    a stranger's, and 1,024 is a common default (docs/security.md)."""
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError) as exc:
        log.debug("zmesh: cannot read the limit on open files: %s", exc)
        return None
    infinite = resource.RLIM_INFINITY
    target = FD_LIMIT_CAP if hard == infinite else min(hard, FD_LIMIT_CAP)
    if soft != infinite and soft < target:
        for want in dict.fromkeys((target, min(target, _OPEN_MAX))):
            if want <= soft:
                break
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            except (OSError, ValueError) as exc:
                log.debug("zmesh: cannot raise the soft limit on open files from %d to %d: %s", soft, want, exc)
                continue
            log.debug("zmesh: raised the soft limit on open files from %d to %d (hard limit %s)",
                      soft, want, "unlimited" if hard == infinite else hard)
            return want
    return soft


def acquire_context() -> zmq.Context[Any]:
    global _context, _context_users
    with lock:
        if _context is None or _context.closed:
            raise_fd_limit()
            _context = zmq.Context()
        _context_users += 1
        return _context


def release_context() -> None:
    global _context, _context_users
    with lock:
        _context_users -= 1
        if _context_users != 0 or _context is None:
            return
        ctx, _context = _context, None
    ctx.destroy(linger=BYE_LINGER_MS)  # bounded: a leaked socket cannot hang close()


def open_socket(ctx: zmq.Context[Any], kind: int) -> zmq.Socket[Any]:
    global _open_sockets
    sock: zmq.Socket[Any] = ctx.socket(kind)
    with lock:
        _open_sockets += 1
    return sock


def close_socket(sock: zmq.Socket[Any], linger: int = 0) -> None:
    global _open_sockets
    if sock.closed:
        return
    sock.close(linger=linger)
    with lock:
        _open_sockets -= 1


def fd_of(sock: zmq.Socket[Any]) -> int:
    return int(sock.getsockopt(zmq.FD))
