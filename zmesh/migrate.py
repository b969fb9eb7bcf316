"""Moving an app from one bus to another while it runs, after the
``agentipc`` design's dual-track dispatch: a :class:`PolicyFlag` says which
track is live, and a :class:`DualTrackDispatcher` sends each request or
message down the legacy track, the new one, or both (*shadow*).

The two tracks are two zmesh agents, usually on nodes of different
transports (the file bus and the mesh, a broker and ZeroMQ)::

    flag = PolicyFlag("legacy")
    tracks = DualTrackDispatcher(flag, legacy=old_node.agent("app"), new_path=new_node.agent("app"))
    tracks.set_policy("search.>", "shadow")       # mirror these to the new track, answer from the old
    reply = await tracks.request("indexer", "search.query", {"q": "zmesh"})
    tracks.stats()                                 # {"shadow": 1, "match": 1, ...}
    flag.set("new")                                # every topic without a policy of its own moves

In *shadow* the caller gets the legacy track's answer (or its error) as
soon as it comes; the same request goes down the new track at the same
time, and once both have ended the two outcomes are compared: a
:class:`ShadowReceipt` goes to every callback given to
:meth:`DualTrackDispatcher.observe`, and :meth:`DualTrackDispatcher.stats`
counts it (``match``, ``mismatch``, ``legacy_only``, ``new_only``,
``neither``). A one-way message in shadow is sent down both tracks: its
handler runs on both, so shadow only what is safe to do twice, or point
the new track at a deployment of its own.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Final

from .agent import Agent
from .message import Message
from .topics import check_pattern, check_topic, matches

__all__ = ["PolicyFlag", "DualTrackDispatcher", "ShadowReceipt", "TRACKS", "POLICIES", "OUTCOMES"]

log = logging.getLogger("zmesh")

#: What a :class:`PolicyFlag` can say.
TRACKS: Final = ("legacy", "new")
#: What a topic's policy can be.
POLICIES: Final = ("legacy", "shadow", "new")
#: How a shadowed request's two outcomes compare.
OUTCOMES: Final = ("match", "mismatch", "legacy_only", "new_only", "neither")


class PolicyFlag:
    """Which track is live, ``"legacy"`` or ``"new"``; safe to set from any thread."""

    def __init__(self, initial: str = "legacy") -> None:
        self._lock = threading.Lock()
        self._active = self._checked(initial)

    @staticmethod
    def _checked(track: object) -> str:
        if track not in TRACKS:
            raise ValueError(f"a policy flag is 'legacy' or 'new', got {track!r}")
        return str(track)

    def set(self, track: str) -> None:
        checked = self._checked(track)
        with self._lock:
            self._active = checked

    def active(self) -> str:
        with self._lock:
            return self._active

    def is_legacy(self) -> bool:
        return self.active() == "legacy"

    def is_new(self) -> bool:
        return self.active() == "new"

    def __repr__(self) -> str:
        return f"PolicyFlag({self.active()!r})"


@dataclass(frozen=True, slots=True)
class ShadowReceipt:
    """How one shadowed request (or message) went on both tracks.

    ``legacy_latency`` and ``new_latency`` are seconds; ``legacy_error`` and
    ``new_error`` name the error type ("" when that track answered).
    """

    kind: str  # "request" or "send"
    outcome: str  # one of OUTCOMES
    target: str
    topic: str
    legacy_latency: float
    new_latency: float
    legacy_error: str = ""
    new_error: str = ""


class _Outcome:
    __slots__ = ("value", "error", "latency")

    def __init__(self, value: Any, error: BaseException | None, latency: float) -> None:
        self.value, self.error, self.latency = value, error, latency


async def _timed(call: Awaitable[Any]) -> _Outcome:
    started = time.perf_counter()
    try:
        value = await call
    except Exception as exc:
        return _Outcome(None, exc, time.perf_counter() - started)
    return _Outcome(value, None, time.perf_counter() - started)


class DualTrackDispatcher:
    """Requests and messages down the track ``flag`` and the topic's policy say.

    ``legacy`` and ``new_path``: the agent each track sends from. ``shadow``:
    while the flag says ``"legacy"``, mirror what has no policy of its own
    to the new track. ``same(legacy_payload, new_payload)``: do two answers
    match (default ``==``)?
    """

    def __init__(self, flag: PolicyFlag, legacy: Agent, new_path: Agent, shadow: bool = False, *,
                 same: Callable[[Any, Any], bool] | None = None) -> None:
        if not isinstance(flag, PolicyFlag):
            raise TypeError(f"flag must be a PolicyFlag, got {type(flag).__name__}")
        for name, agent in (("legacy", legacy), ("new_path", new_path)):
            if not isinstance(agent, Agent):
                raise TypeError(f"{name} must be a zmesh Agent, got {type(agent).__name__}")
        self.flag = flag
        self.legacy = legacy
        self.new_path = new_path
        self.shadow = bool(shadow)
        self._same = same or (lambda a, b: bool(a == b))
        self._policies: dict[str, str] = {}
        self._observers: list[Callable[[ShadowReceipt], object]] = []
        self._mirrors: set[asyncio.Task[None]] = set()
        self._counts: dict[str, int] = dict.fromkeys((*POLICIES, *OUTCOMES), 0)
        self._latency: dict[str, float] = {"legacy": 0.0, "new": 0.0}

    # -- policy ----------------------------------------------------------------

    def set_shadow(self, shadow: bool) -> None:
        self.shadow = bool(shadow)

    def set_policy(self, pattern: str, policy: str | None) -> None:
        """Topics matching ``pattern`` go by ``policy`` (``"legacy"``,
        ``"shadow"`` or ``"new"``) whatever the flag says; None: by the flag
        again. Where patterns overlap, the longest one that matches decides."""
        check_pattern(pattern)
        if policy is None:
            self._policies.pop(pattern, None)
            return
        if policy not in POLICIES:
            raise ValueError(f"a topic's policy is 'legacy', 'shadow' or 'new', got {policy!r}")
        self._policies[pattern] = policy

    def policy_for(self, topic: str) -> str:
        check_topic(topic)
        chosen = max((p for p in self._policies if matches(p, topic)), key=len, default=None)
        if chosen is not None:
            return self._policies[chosen]
        if self.flag.is_new():
            return "new"
        return "shadow" if self.shadow else "legacy"

    # -- traffic ---------------------------------------------------------------

    async def request(self, target: str, topic: str, payload: Any = None, **options: Any) -> Message:
        """``agent.request`` down the topic's track (in shadow: the legacy answer)."""
        policy = self.policy_for(topic)
        self._counts[policy] += 1
        if policy == "legacy":
            return await self.legacy.request(target, topic, payload, **options)
        if policy == "new":
            return await self.new_path.request(target, topic, payload, **options)
        mirror = asyncio.ensure_future(_timed(self.new_path.request(target, topic, payload, **options)))
        legacy = await self._first(self.legacy.request(target, topic, payload, **options), mirror)
        self._compare_later("request", target, topic, legacy, mirror)
        if legacy.error is not None:
            raise legacy.error
        reply: Message = legacy.value
        return reply

    async def send(self, target: str, topic: str, payload: Any = None, **options: Any) -> Message:
        """``agent.send`` down the topic's track (in shadow: down both; the legacy one's message)."""
        policy = self.policy_for(topic)
        self._counts[policy] += 1
        if policy == "legacy":
            return await self.legacy.send(target, topic, payload, **options)
        if policy == "new":
            return await self.new_path.send(target, topic, payload, **options)
        mirror = asyncio.ensure_future(_timed(self.new_path.send(target, topic, payload, **options)))
        legacy = await self._first(self.legacy.send(target, topic, payload, **options), mirror)
        self._compare_later("send", target, topic, legacy, mirror)
        if legacy.error is not None:
            raise legacy.error
        sent: Message = legacy.value
        return sent

    @staticmethod
    async def _first(call: Awaitable[Any], mirror: asyncio.Future[_Outcome]) -> _Outcome:
        """The legacy track's outcome; a caller cancelled meanwhile cancels the mirror too."""
        try:
            return await _timed(call)
        except asyncio.CancelledError:
            mirror.cancel()
            raise

    def _compare_later(self, kind: str, target: str, topic: str, legacy: _Outcome,
                       mirror: asyncio.Future[_Outcome]) -> None:
        async def compare() -> None:
            new = await mirror
            self._report(kind, target, topic, legacy, new)

        task = asyncio.ensure_future(compare())
        self._mirrors.add(task)
        task.add_done_callback(self._mirrors.discard)

    def _report(self, kind: str, target: str, topic: str, legacy: _Outcome, new: _Outcome) -> None:
        if legacy.error is None and new.error is None:
            outcome = "match"
            if kind == "request" and not self._matches(legacy.value, new.value):
                outcome = "mismatch"
        elif legacy.error is None:
            outcome = "legacy_only"
        elif new.error is None:
            outcome = "new_only"
        else:
            outcome = "neither"
        self._counts[outcome] += 1
        self._latency["legacy"] += legacy.latency
        self._latency["new"] += new.latency
        receipt = ShadowReceipt(kind, outcome, target, topic, legacy.latency, new.latency,
                                type(legacy.error).__name__ if legacy.error is not None else "",
                                type(new.error).__name__ if new.error is not None else "")
        for callback in list(self._observers):
            try:
                callback(receipt)
            except Exception:
                log.exception("zmesh: shadow observer %r raised; receipt %r", callback, receipt)

    def _matches(self, legacy: Message, new: Message) -> bool:
        try:
            return legacy.status == new.status and self._same(legacy.payload, new.payload)
        except Exception:
            log.exception("zmesh: the shadow comparison raised; counted as a mismatch")
            return False

    # -- what it tells ---------------------------------------------------------

    def observe(self, callback: Callable[[ShadowReceipt], object]) -> Callable[[], None]:
        """Call ``callback`` with every :class:`ShadowReceipt`; returns what stops it."""
        self._observers.append(callback)
        return lambda: self._observers.remove(callback) if callback in self._observers else None

    def stats(self) -> dict[str, Any]:
        """How many went down each policy, how the shadowed ones compared, and
        the two tracks' mean latency over the shadowed ones (seconds)."""
        out: dict[str, Any] = dict(self._counts)
        compared = sum(self._counts[o] for o in OUTCOMES)
        out["shadow_pending"] = len(self._mirrors)
        out["mean_latency"] = {track: (total / compared if compared else 0.0) for track, total in self._latency.items()}
        return out

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait until every shadowed request has been compared; False if ``timeout`` ran out first."""
        if not self._mirrors:
            return True
        done, pending = await asyncio.wait(set(self._mirrors), timeout=timeout)
        return not pending

    async def aclose(self) -> None:
        """Stop comparing: the mirrored requests still on their way are cancelled."""
        for task in list(self._mirrors):
            task.cancel()
        for task in list(self._mirrors):
            try:
                await task
            except BaseException:
                pass
