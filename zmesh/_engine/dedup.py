"""What a node remembers of the qos >= 1 messages it took, to recognise
repeats (internal): one window of ids per sending agent, so that one
sender's flood cannot push another sender's ids out.

* Each window keeps its sender's newest :data:`DEDUP_WINDOW` ids; past
  that its oldest tenth is forgotten.
* All windows together hold at most :data:`DEDUP_TOTAL` ids, a window
  counting :data:`WINDOW_COST` ids more for itself (what its dict costs).
  Past that, the biggest windows shrink first, all to one level, until a
  tenth is free: a sender that sent less than that level loses nothing.
* The replies kept for repeated requests (a repeat is answered with the
  same reply) hold at most :data:`REPLY_CACHE_BYTES`; past that, the
  senders whose replies take the most lose their oldest first.

An id whose handler still runs is never forgotten. A message is
remembered by its sending agent and its id: ids are not secret, but a
node sends only as its own agents (with keys, agent ids belong to keys),
so a node that guesses another agent's next id cannot make that message
look like a repeat of its own.
"""

from __future__ import annotations

from typing import Any

from ..qos import fair_level

__all__ = ["Dedup", "RUNNING", "DONE", "DEDUP_WINDOW", "DEDUP_TOTAL", "WINDOW_COST", "REPLY_CACHE_BYTES"]

DEDUP_WINDOW = 100_000
DEDUP_TOTAL = 200_000  # about 40 MB at most
WINDOW_COST = 4
REPLY_CACHE_BYTES = 32 << 20

RUNNING: Any = object()  # a seen id whose handler has not finished
DONE = b""  # a seen id that was handled (no reply kept)


class Dedup:
    """The windows, by sender; ``len()`` is how many ids they hold."""

    __slots__ = ("windows", "count", "replies", "reply_bytes", "window_limit", "total_limit")

    def __init__(self) -> None:
        self.windows: dict[str, dict[str, Any]] = {}  # sender -> id -> RUNNING, DONE or the encoded reply
        self.count = 0  # ids, plus WINDOW_COST per window
        self.window_limit = DEDUP_WINDOW
        self.total_limit = DEDUP_TOTAL
        self.replies: dict[str, int] = {}  # sender -> bytes of the replies its window keeps
        self.reply_bytes = 0

    def __len__(self) -> int:
        return self.count - WINDOW_COST * len(self.windows)

    def add(self, sender: str, msg_id: str) -> Any:
        """Remember ``msg_id`` from ``sender`` as running and return None; or,
        for a repeat, return what is remembered (RUNNING, DONE or a reply)."""
        window = self.windows.get(sender)
        if window is None:
            window = self.windows[sender] = {}
            self.count += WINDOW_COST
        else:
            state = window.get(msg_id)
            if state is not None:
                return state
        window[msg_id] = RUNNING
        self.count += 1
        if len(window) > self.window_limit or self.count > self.total_limit:
            self.evict(sender, window)
        return None

    def finish(self, sender: str, msg_id: str, reply: bytes = DONE) -> None:
        """The handler of ``msg_id`` finished; ``reply``: the encoded reply of a request."""
        window = self.windows.get(sender)
        if window is None:
            window = self.windows[sender] = {}
            self.count += WINDOW_COST
        old = window.get(msg_id)
        if old is None:
            self.count += 1
        elif old is not RUNNING and old:
            self._unreply(sender, len(old))
        window[msg_id] = reply
        if reply:
            self.replies[sender] = self.replies.get(sender, 0) + len(reply)
            self.reply_bytes += len(reply)
        if len(window) > self.window_limit or self.count > self.total_limit or self.reply_bytes > REPLY_CACHE_BYTES:
            self.evict(sender, window)

    def forget(self, sender: str, msg_id: str) -> None:
        """``msg_id`` was dropped before its handler ran: its repeat is taken."""
        window = self.windows.get(sender)
        if window is not None and window.get(msg_id) is RUNNING:
            del window[msg_id]
            self.count -= 1
            if not window:
                self._close(sender)

    def restore(self, sender: str, msg_id: str) -> None:
        """A handled id a store kept."""
        if self.add(sender, msg_id) is None:
            self.windows[sender][msg_id] = DONE

    # -- forgetting ----------------------------------------------------------

    def evict(self, sender: str, window: dict[str, Any]) -> None:
        """``sender``'s window, or all of them, grew past their limit: forget."""
        if len(window) > self.window_limit:
            self._trim(sender, window, int(self.window_limit * 0.9))
        if self.count > self.total_limit:
            sizes = sorted(((len(w), s) for s, w in self.windows.items()), reverse=True)
            level = fair_level([n for n, _ in sizes], self.count - int(self.total_limit * 0.9))
            for n, s in sizes:
                if n <= level:
                    break
                self._trim(s, self.windows[s], level)
        if self.reply_bytes > REPLY_CACHE_BYTES:
            sizes = sorted(((n, s) for s, n in self.replies.items()), reverse=True)
            level = fair_level([n for n, _ in sizes], self.reply_bytes - int(REPLY_CACHE_BYTES * 0.9))
            for n, s in sizes:
                if n <= level:
                    break
                self._shed(s, self.windows[s], level)

    def _trim(self, sender: str, window: dict[str, Any], keep: int) -> None:
        """Forget ``sender``'s oldest handled ids until its window holds ``keep``."""
        excess = len(window) - keep
        victims: list[str] = []
        freed = 0
        for msg_id, state in window.items():
            if len(victims) >= excess:
                break
            if state is not RUNNING:
                victims.append(msg_id)
                freed += len(state)
        for msg_id in victims:
            del window[msg_id]
        self.count -= len(victims)
        if freed:
            self._unreply(sender, freed)
        if not window:
            self._close(sender)

    def _shed(self, sender: str, window: dict[str, Any], keep: int) -> None:
        """Forget ``sender``'s oldest answered requests until its replies take ``keep`` bytes."""
        excess = self.replies.get(sender, 0) - keep
        victims: list[str] = []
        freed = 0
        for msg_id, state in window.items():
            if freed >= excess:
                break
            if state is not RUNNING and state:
                victims.append(msg_id)
                freed += len(state)
        for msg_id in victims:
            del window[msg_id]
        self.count -= len(victims)
        self._unreply(sender, freed)
        if not window:
            self._close(sender)

    def _unreply(self, sender: str, size: int) -> None:
        self.reply_bytes -= size
        left = self.replies[sender] - size
        if left:
            self.replies[sender] = left
        else:
            del self.replies[sender]

    def _close(self, sender: str) -> None:
        del self.windows[sender]
        self.count -= WINDOW_COST

