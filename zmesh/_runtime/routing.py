"""Requests by capability (internal): ``request_any`` (one provider, the
least busy, another on failure) and ``gather`` (every provider at once).

``request_any`` picks, among the agents that declare the capability, one
whose window from this node is open, with the fewest of this node's
``request_any`` requests outstanding (ties at random). It asks the
provider's node to say when the handler starts (``zmesh.watch``, see
:mod:`.cancel`). When the request fails with PeerLost, Backpressure,
AgentNotRegistered or NoHandler it goes to another provider, within the
same deadline: always if its handler had not started, and if it had, only
when the caller said it may run twice (``idempotent``); otherwise that
PeerLost is the caller's.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import TYPE_CHECKING, AsyncIterator, Callable

from ..errors import (AgentNotRegistered, Backpressure, InvalidMessage, NoHandler, NoProvider, PeerLost, Timeout,
                      ZmeshError)
from ..message import GatherReply, Message

if TYPE_CHECKING:
    from .dispatch import Dispatch

__all__ = ["Providers", "request_any", "gather_iter", "send_any"]

#: Errors after which ``request_any`` asks another provider.
_ANOTHER = (PeerLost, Backpressure, AgentNotRegistered, NoHandler)


class Providers:
    """This node's side of ``request_any``: outstanding requests per provider, and start notices."""

    def __init__(self) -> None:
        self.outstanding: Counter[str] = Counter()
        #: Correlation ids of requests whose start we asked to hear of, and those we heard of.
        self.watching: set[tuple[str, str]] = set()
        self.started: set[tuple[str, str]] = set()

    def started_notice(self, ids: list[tuple[str, str]]) -> None:
        for corr in ids:
            if corr in self.watching:
                self.started.add(corr)

    def done(self, corr: tuple[str, str]) -> bool:
        """Forget request ``corr``; had its handler started?"""
        self.watching.discard(corr)
        if corr in self.started:
            self.started.discard(corr)
            return True
        return False

    def pick(self, candidates: list[str], is_open: Callable[[str], bool]) -> str:
        """The provider to ask: an open window first, then the fewest outstanding, then chance."""
        outstanding = self.outstanding
        return min(candidates, key=lambda a: (not is_open(a), outstanding[a], random.random()))


def _providers(dispatch: Dispatch, capability: str) -> list[str]:
    if not isinstance(capability, str) or not capability:
        raise InvalidMessage(f"capability must be a non-empty string, got {capability!r}")
    return dispatch.registry_find(capability)


def _next_provider(dispatch: Dispatch, capability: str, tried: set[str], last: ZmeshError | None) -> str:
    """The provider to try next (not one tried already); the last error, or NoProvider, when none is left."""
    candidates = [a for a in _providers(dispatch, capability) if a not in tried]
    if not candidates:
        if last is not None:
            raise last
        raise NoProvider(f"no agent in mesh {dispatch.config.mesh!r} has capability {capability!r}")
    return dispatch.providers.pick(candidates, dispatch.window_open)


async def request_any(dispatch: Dispatch, capability: str, make: Callable[[str], Message], timeout: float,
                      idempotent: bool, kind: str = "request", answered: Callable[[], bool] | None = None,
                      ) -> Message:
    """Ask one provider of ``capability`` (``make(agent_id)`` builds the request), failing over.
    ``answered`` (a stream's): has the caller had part of its answer already? Then no failover."""
    providers = dispatch.providers
    clock = dispatch.config.clock
    deadline = clock.monotonic() + timeout
    tried: set[str] = set()
    last: ZmeshError | None = None
    while True:
        target = _next_provider(dispatch, capability, tried, last)
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            raise Timeout(f"no provider of {capability!r} answered within {timeout} s"
                          + (f" (the last: {type(last).__name__}: {last})" if last is not None else ""))
        msg = make(target)
        dispatch.watch_start(msg)
        providers.outstanding[target] += 1
        try:
            return await dispatch.request(msg, remaining, kind)
        except _ANOTHER as exc:
            started = providers.done((msg.target, msg.correlation_id))
            if answered is not None and answered():
                raise
            if started and not idempotent and isinstance(exc, PeerLost):
                raise PeerLost(f"{exc}; its handler had started on {target!r}, so it is not asked again "
                               "elsewhere (idempotent=True allows it)") from None
            tried.add(target)
            last = exc
        finally:
            providers.done((msg.target, msg.correlation_id))
            providers.outstanding[target] -= 1
            if providers.outstanding[target] <= 0:
                del providers.outstanding[target]


async def send_any(dispatch: Dispatch, capability: str, make: Callable[[str], Message],
                   timeout: float | None) -> Message:
    """Send to one provider of ``capability``; another if it cannot take it."""
    tried: set[str] = set()
    last: ZmeshError | None = None
    while True:
        target = _next_provider(dispatch, capability, tried, last)
        msg = make(target)
        try:
            await dispatch.send(msg, timeout)
            return msg
        except (AgentNotRegistered, Backpressure) as exc:
            tried.add(target)
            last = exc


async def gather_iter(dispatch: Dispatch, capability: str, make: Callable[[str], Message], timeout: float,
                      want: int | None) -> AsyncIterator[GatherReply]:
    """Ask every provider at once; yield each answer as it comes, then a Timeout for each still silent."""
    targets = _providers(dispatch, capability)
    if not targets:
        raise NoProvider(f"no agent in mesh {dispatch.config.mesh!r} has capability {capability!r}")
    asked: dict[asyncio.Task[Message], str] = {}
    for target in targets:
        asked[asyncio.ensure_future(dispatch.request(make(target), timeout, "request"))] = target
    got = 0
    try:
        pending = set(asked)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=lambda t: asked[t]):
                error = task.exception()
                if error is not None and not isinstance(error, Exception):
                    raise error  # KeyboardInterrupt, SystemExit: not a provider's answer
                if error is None:
                    got += 1
                    yield GatherReply(asked[task], task.result())
                else:
                    yield GatherReply(asked[task], None, error)
                if want is not None and got >= want:
                    return
    finally:
        for task in asked:
            if not task.done():
                task.cancel()  # want reached, or the caller stopped reading: their handlers stop too
        await asyncio.gather(*asked, return_exceptions=True)
