"""Peer-side control channel: line messages over the peer's stdin/stdout.

The orchestrator writes ``PEERS <json>`` (the ready infos of the peers this
one must reach), ``GO`` and ``STOP`` lines to a peer's stdin; the peer
writes ``READY <json>``, ``WARM``, ``RESULT <json>`` and ``ERROR <text>``
lines to its stdout. End of stdin counts as ``STOP``, so a peer whose
orchestrator died stops too. Every peer also has a hard deadline.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, TextIO

__all__ = ["BenchTimeout", "Control", "Deadline"]


class BenchTimeout(RuntimeError):
    """A bounded wait ran out of time."""


class Deadline:
    """A point in monotonic time, with helpers for bounded loops."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.at

    def check(self, what: str) -> None:
        if self.expired():
            raise BenchTimeout(f"timed out: {what}")


class Control:
    """What a peer role function gets: its events, its deadline, and its output."""

    def __init__(self, timeout: float, stdin: TextIO | None = None, stdout: TextIO | None = None) -> None:
        self.deadline = Deadline(timeout)
        self.go = threading.Event()
        self.stop = threading.Event()
        self._peers = threading.Event()
        self._peers_info: Any = None
        self._out = stdout or sys.stdout
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, args=(stdin or sys.stdin,), daemon=True)
        self._reader.start()

    def _read(self, stream: TextIO) -> None:
        for line in stream:
            word = line.strip()
            if word.startswith("PEERS "):
                self._peers_info = json.loads(word[6:])
                self._peers.set()
            elif word == "GO":
                self.go.set()
            elif word == "STOP":
                break
        self.go.set()  # never leave a waiter hanging on GO once stopped
        self.stop.set()

    def _emit(self, line: str) -> None:
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()

    def ready(self, info: dict[str, Any] | None = None) -> None:
        self._emit("READY " + json.dumps(info or {}))

    def warm(self) -> None:
        self._emit("WARM")

    def result(self, data: dict[str, Any]) -> None:
        self._emit("RESULT " + json.dumps(data))

    def error(self, text: str) -> None:
        self._emit("ERROR " + text.replace("\n", " | "))

    def wait_peers(self) -> Any:
        """Block until the orchestrator sends the PEERS line; return its JSON value."""
        while not self._peers.wait(0.05):
            if self.stop.is_set():
                raise BenchTimeout("stopped before PEERS")
            self.deadline.check("no PEERS from the orchestrator")
        return self._peers_info

    def wait_go(self) -> None:
        """Block until GO (or STOP); raise if the deadline passes first."""
        if not self.go.wait(self.deadline.left()):
            raise BenchTimeout("no GO from the orchestrator")
        if self.stop.is_set():
            raise BenchTimeout("stopped before GO")

    def wait_stop(self) -> None:
        """Block until STOP, end of stdin, or the deadline."""
        self.stop.wait(self.deadline.left())
