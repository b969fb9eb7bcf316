"""One GenericAgent sub-agent folder as the bridge drives it (internal):
its state, the table of how that state moves, and a round asked and
awaited.

    state     event             next      what it means
    absent    launched          running   round 0 runs on the request's text
    absent    adopted_running   running   a process found mid-round
    absent    adopted_waiting   waiting   a process found polling for reply.txt
    running   round_ended       waiting   the output ends with [ROUND END]
    running   exited            absent    died mid-round: PeerLost to its requester
    waiting   replied           running   reply.txt written: the next round
    waiting   exited            absent    ended (300 polls, ~600 s, without a reply)

Rounds of one folder run one at a time (they are one conversation);
requests beyond ``max_queued`` waiting get :class:`~zmesh.Backpressure`.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import time
from pathlib import Path
from typing import Any

from ..errors import Backpressure, InvalidMessage, PeerLost
from . import _files as files
from ._process import alive, find_subagents, launch, started_at, MAX_ARG_INPUT

__all__ = ["State", "SubAgent", "TRANSITIONS"]


class State(enum.Enum):
    ABSENT = "absent"
    RUNNING = "running"
    WAITING = "waiting"


TRANSITIONS: dict[tuple[State, str], State] = {
    (State.ABSENT, "launched"): State.RUNNING,
    (State.ABSENT, "adopted_running"): State.RUNNING,
    (State.ABSENT, "adopted_waiting"): State.WAITING,
    (State.RUNNING, "round_ended"): State.WAITING,
    (State.RUNNING, "exited"): State.ABSENT,
    (State.WAITING, "replied"): State.RUNNING,
    (State.WAITING, "exited"): State.ABSENT,
}


class SubAgent:
    """The folder ``root/temp/name``: ``spawnable`` if a request may launch a process for it."""

    def __init__(self, root: Path, name: str, *, spawnable: bool, python: str, launch_args: tuple[str, ...],
                 poll: float, check_every: float, max_queued: int, launch_timeout: float) -> None:
        self.root = root
        self.name = name
        self.folder = root / "temp" / name
        self.spawnable = spawnable
        self.state = State.ABSENT
        self.pid: int | None = None
        self.round = -1
        self.counts: collections.Counter[str] = collections.Counter()  # events, and "lost", "launched"
        self._python = python
        self._launch_args = launch_args
        self._poll = poll
        self._check_every = check_every
        self._max_queued = max_queued
        self._launch_timeout = launch_timeout
        self._lock = asyncio.Lock()
        self._queued = 0

    def _move(self, event: str) -> None:
        self.state = TRANSITIONS[(self.state, event)]  # a KeyError here is a bug in this module
        self.counts[event] += 1

    @property
    def busy(self) -> bool:
        """A request holds the folder: it, not :meth:`observe`, moves the state."""
        return self._lock.locked()

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "state": self.state.value, "pid": self.pid, "round": self.round,
                "queued": self._queued, "spawnable": self.spawnable}

    def observe(self, found_pid: int | None) -> None:
        """Bring the state up to date with the folder and the process (``found_pid``:
        a worker of this task seen in /proc). Only while no request holds it."""
        if self.pid is not None and not alive(self.pid):
            self.pid = None
            self._move("exited")
        if self.pid is None and found_pid is not None:
            self._adopt(found_pid)
        if self.state is State.RUNNING:
            now = files.read_round(files.output_file(self.folder, self.round))
            if now is not None and now.done:
                self._move("round_ended")

    def _adopt(self, pid: int) -> None:
        self.pid = pid
        since = started_at(pid)
        self.round = max(files.latest_round(self.folder, since=None if since is None else since - 1), 0)
        now = files.read_round(files.output_file(self.folder, self.round))
        self._move("adopted_waiting" if now is not None and now.done else "adopted_running")

    async def ask(self, text: str) -> str:
        """Run ``text`` as this sub-agent's next round; its text once it ended."""
        if not text.strip():
            raise InvalidMessage("a GenericAgent round needs some text (the sub-agent ignores an empty reply.txt)")
        waiting = self._queued - (1 if self.busy else 0)
        if self.busy and waiting >= self._max_queued:
            raise Backpressure(f"sub-agent {self.name!r} is running a round and has {waiting} "
                               f"round{'s' if waiting != 1 else ''} waiting behind it")
        self._queued += 1
        try:
            async with self._lock:
                try:
                    return await self._ask(text)
                except asyncio.CancelledError:
                    # The requester gave up (cancelled, timed out, its node gone): stop the round it
                    # started, so the model stops spending and the next request does not wait long.
                    if self.state is State.RUNNING and self.pid is not None and alive(self.pid):
                        files.write_control(self.folder, "stop", "")
                        self.counts["stopped_for_requester"] += 1
                    raise
        finally:
            self._queued -= 1

    async def _ask(self, text: str) -> str:
        self.observe(None)
        if self.state is State.RUNNING:  # an adopted round that no request of ours asked for
            try:
                await self._await_round(self.round)
            except PeerLost:
                pass
        if self.state is State.WAITING:
            self.round += 1
            files.remove(files.output_file(self.folder, self.round))  # a stale one would pass for this round's
            files.write_reply(self.folder, text)
            self._move("replied")
            try:
                return await self._await_round(self.round)
            except PeerLost:
                if not (self.spawnable and files.remove(self.folder / "reply.txt")):
                    raise
                # It ended (its 300 polls ran out) before taking the reply: a new process takes it.
        if self.pid is None and not self.spawnable:
            raise PeerLost(f"sub-agent {self.name!r} has no running process (the bridge launches one only "
                           "for folders it may spawn: --spawn)")
        return await self._launch(text)

    async def _launch(self, text: str) -> str:
        running = find_subagents(self.root).get(self.name)
        if running is not None:  # started by someone else since we looked: do not clobber it
            self._adopt(running)
            return await self._ask(text)
        self.folder.mkdir(parents=True, exist_ok=True)
        files.clean_for_launch(self.folder)
        if len(text.encode("utf-8")) > MAX_ARG_INPUT or "\0" in text:
            files.write_atomic(files.input_file(self.folder), text)
        launching = asyncio.ensure_future(launch(self.root, self.name, text, python=self._python,
                                                 extra_args=self._launch_args, timeout=self._launch_timeout))
        try:
            launched = await asyncio.shield(launching)
        except asyncio.CancelledError:
            # The launcher still starts the worker: know its pid, or the next request launches a second one.
            launching.add_done_callback(self._launched_after_all)
            raise
        self.pid = launched.pid
        self.round = 0
        self._move("launched")
        return await self._await_round(0)

    def _launched_after_all(self, launching: asyncio.Future[Any]) -> None:
        if launching.cancelled() or launching.exception() is not None or self.pid is not None:
            return
        self.pid = launching.result().pid
        self.round = 0
        self._move("launched")
        files.write_control(self.folder, "stop", "")  # nobody waits for its first round any more

    async def _await_round(self, round_no: int) -> str:
        path = files.output_file(self.folder, round_no)
        check_at = time.monotonic() + self._check_every
        while True:
            now = files.read_round(path)
            if now is not None and now.done:
                self._move("round_ended")
                return now.text
            if time.monotonic() >= check_at:
                if self.pid is None or not alive(self.pid):
                    last = files.read_round(path)  # it may have ended the round as it exited
                    if last is not None and last.done:
                        self._move("round_ended")
                        return last.text
                    pid, self.pid = self.pid, None
                    self._move("exited")
                    self.counts["lost"] += 1
                    raise PeerLost(f"sub-agent {self.name!r} (pid {pid}) exited without ending round {round_no}"
                                   + self._stderr_tail())
                check_at = time.monotonic() + self._check_every
            await asyncio.sleep(self._poll)

    def _stderr_tail(self) -> str:
        try:
            lines = (self.folder / "stderr.log").read_text(encoding="utf-8", errors="replace").strip().splitlines()
        except OSError:
            return ""
        return f"; stderr.log ends: {' | '.join(lines[-3:])}" if lines else ""

    def control(self, kind: str, text: str) -> dict[str, Any]:
        """Write ``_stop``, ``_keyinfo`` or ``_intervene``; at once, even while a round runs."""
        if self.pid is None or not alive(self.pid):
            if kind == "stop":
                return {"stopped": False, "state": State.ABSENT.value}
            raise PeerLost(f"sub-agent {self.name!r} has no running process: its {kind} would never be read")
        if kind == "stop":
            if self.state is not State.RUNNING:  # written while idle, it would cancel the next round instead
                return {"stopped": False, "state": self.state.value}
            files.write_control(self.folder, kind, "")
            return {"stopped": True, "round": self.round}
        if not text.strip():
            raise InvalidMessage(f"{kind} needs some text")
        files.write_control(self.folder, kind, text)
        return {"written": files.CONTROL_FILES[kind], "round": self.round, "state": self.state.value}
