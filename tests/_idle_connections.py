"""Idle TCP connections for tests/test_hostile_fds.py: plain sockets, to 127.0.0.1 only.

    python -m tests._idle_connections COUNT PORT [PORT ...]

Opens COUNT connections to each port, one after another, and never sends a
byte. A connection counts once the server has said something or closed it,
so it was accepted: where a full accept queue meets SYN cookies, the kernel
drops a connection the client thinks it has, and that one is opened again
(up to COUNT more times in all, and for 15 s at most). Prints JSON lines: ``{"connected": n}``
after every 50, then ``{"done": n, "lost": n, "seconds": s}``; for each line
read on stdin, ``{"closed": n}``, how many the other end has closed. When
stdin closes it closes every connection and exits.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from typing import Any


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        while sock.recv(4096):  # the ZMTP greeting the server sends first
            pass
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def accepted(port: int) -> socket.socket | None:
    """A connection to ``port`` that the server accepted, or None."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        return None
    try:
        sock.settimeout(1.0)
        sock.recv(1, socket.MSG_PEEK)  # its greeting, or b"" if it was shut down at once
        return sock
    except OSError:  # lost, or the server froze
        sock.close()
        return None


def main(count: int, ports: list[int]) -> None:
    sockets: list[socket.socket] = []
    lost = 0
    started = time.monotonic()
    try:
        for port in ports:
            held = 0
            while held < count and lost <= count and time.monotonic() < started + 15:
                sock = accepted(port)
                if sock is None:
                    lost += 1
                    continue
                sockets.append(sock)
                held += 1
                if len(sockets) % 50 == 0:
                    say(connected=len(sockets))
        say(done=len(sockets), lost=lost, seconds=time.monotonic() - started)
        for sock in sockets:
            sock.setblocking(False)
        while sys.stdin.readline():
            say(closed=sum(1 for sock in sockets if closed_by_peer(sock)))
    finally:
        for sock in sockets:
            sock.close()


if __name__ == "__main__":
    main(int(sys.argv[1]), [int(port) for port in sys.argv[2:]])
