"""What reading one message off a ROUTER costs in pyzmq, by way of reading.

    python bench/zmq_receive_cost.py MODE N

A DEALER queues N 200-byte messages at a ROUTER on 127.0.0.1, then the
ROUTER reads them all in MODE:

* ``events-rcvmore``: ask ZMQ_EVENTS before each message, read the routing
  id and the body as bytes, ask ZMQ_RCVMORE after each (zmesh before
  efd8075);
* ``events-frame``: ZMQ_EVENTS before each message, the body as a
  ``zmq.Frame`` and its ``.more`` (zmesh now);
* ``again-frame``: no ZMQ_EVENTS, read until ``zmq.Again``;
* ``multipart``: ``recv_multipart`` until ``zmq.Again``.

Count instructions with callgrind at two sizes and take the difference per
message (what the docs quote)::

    for n in 1000 3000; do
      valgrind --tool=callgrind --callgrind-out-file=/tmp/zr.$n python bench/zmq_receive_cost.py events-frame $n
    done   # then (Ir at 3000 - Ir at 1000) / 2000

pyzmq's getsockopt makes a ``SocketOption`` enum of its option in Python on
every call, which is why the fewer of them the better.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

import zmq

__all__ = ["MODES", "main"]

_EVENTS, _POLLIN, _RCVMORE, _NOBLOCK = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.RCVMORE), int(zmq.NOBLOCK)


def _events_rcvmore(sock: zmq.Socket[Any]) -> int:
    n, opt, recv = 0, sock.getsockopt, sock.recv
    while opt(_EVENTS) & _POLLIN:  # type: ignore[operator]
        recv(_NOBLOCK)
        opt(_RCVMORE)
        recv(_NOBLOCK)
        opt(_RCVMORE)
        n += 1
    return n


def _events_frame(sock: zmq.Socket[Any]) -> int:
    n, opt, recv = 0, sock.getsockopt, sock.recv
    while opt(_EVENTS) & _POLLIN:  # type: ignore[operator]
        recv(_NOBLOCK)
        frame = recv(_NOBLOCK, copy=False)
        frame.bytes
        if frame.more:
            raise AssertionError("one frame per message")
        n += 1
    return n


def _again_frame(sock: zmq.Socket[Any]) -> int:
    n, recv = 0, sock.recv
    try:
        while True:
            recv(_NOBLOCK)
            frame = recv(_NOBLOCK, copy=False)
            frame.bytes
            n += 1
    except zmq.Again:
        return n


def _multipart(sock: zmq.Socket[Any]) -> int:
    n, recv = 0, sock.recv_multipart
    try:
        while True:
            recv(_NOBLOCK)
            n += 1
    except zmq.Again:
        return n


MODES: dict[str, Callable[[zmq.Socket[Any]], int]] = {
    "events-rcvmore": _events_rcvmore, "events-frame": _events_frame,
    "again-frame": _again_frame, "multipart": _multipart,
}


def main(argv: list[str]) -> int:
    mode, n = MODES[argv[0]], int(argv[1])
    ctx = zmq.Context()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    router.rcvhwm = dealer.sndhwm = 0
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealer.connect(f"tcp://127.0.0.1:{port}")
    for _ in range(n):
        dealer.send(b"x" * 200)
    deadline = time.monotonic() + 10
    while not router.poll(100) and time.monotonic() < deadline:
        pass
    time.sleep(0.5)  # a bench, not a test: let the last of N reach the ROUTER's queue
    got = mode(router)
    dealer.close(0)
    router.close(0)
    ctx.term()
    print(f"{argv[0]}: {got} of {n} read")
    return 0 if got == n else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
