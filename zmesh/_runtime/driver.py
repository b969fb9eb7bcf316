"""The asyncio driver of one node's engine (internal).

It is the transport's host: frames, subscriber-ready signals and drops come
in here and go to the engine with the time on the node's clock. Then it
carries out what the engine returns (:mod:`zmesh._engine.effects`): frames
to send on links it opens and closes, publications and subscriptions,
handlers to run and requests to resolve (through its sink, see :mod:`.port`), events. All
protocol timers are one timer on the node's clock at ``engine.earliest``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import TYPE_CHECKING, Any, Callable

from .._engine import Engine
from .._engine import effects as fx
from .._wire.frames import Received
from ..clock import Clock, SystemClock, TimerHandle
from ..transport.base import Link, Transport
from .watch import Watch

if TYPE_CHECKING:
    from ..discovery.mdns import MdnsDiscovery
    from .port import MeshSink

__all__ = ["Driver"]

log = logging.getLogger("zmesh")

_SEND, _DELIVER, _REPLIED, _FAILED = fx.SEND, fx.DELIVER, fx.REPLIED, fx.FAILED


class Driver:
    """Feeds one engine and carries out its effects, on the node's event loop."""

    def __init__(self, engine: Engine, transport: Transport, clock: Clock, watch: Watch) -> None:
        self.engine = engine
        self.transport = transport
        self.clock = clock
        # The system clock's monotonic() is time.monotonic: call it directly on the hot path.
        self.now: Callable[[], float] = time.monotonic if type(clock) is SystemClock else clock.monotonic
        self.watch = watch
        #: Where the API effects go; :class:`~zmesh._runtime.frame_mesh.FrameMesh` makes it.
        self.sink: MeshSink
        self.max_frame = engine.max_frame  # the transport sizes its receive limit from it
        liveness = engine.liveness
        #: (interval, timeout) of the transport's own link heartbeats, read by the transport.
        self.link_heartbeat: tuple[float, float] | None = (
            (liveness.link_heartbeat, liveness.link_timeout)
            if liveness is not None and liveness.link_heartbeat is not None else None
        )
        self.loop: asyncio.AbstractEventLoop | None = None
        self.discovery: MdnsDiscovery | None = None
        self.in_drain = False
        self.running = False
        #: When (``time.monotonic()``, whatever the node's clock) the node started.
        self.started_at = -math.inf
        self.tasks: set[asyncio.Task[Any]] = set()
        self._links: dict[int, Link] = {}
        self._timer: TimerHandle | None = None
        self._timer_at = math.inf
        self.flush_scheduled = False  # a flush is due at the loop's next turn
        self._refreshing = False

    def drive(self, loop: asyncio.AbstractEventLoop) -> None:
        """The transport is started on ``loop``: timers run from now on."""
        self.loop = loop
        self.running = True
        self.started_at = time.monotonic()

    def stop(self) -> None:
        """No more timers; links are closed by :meth:`close_links`."""
        self.running = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close_links(self) -> None:
        for link in self._links.values():
            link.close()
        self._links.clear()

    # -- carrying out effects ----------------------------------------------

    def pump(self) -> None:
        """Carry out everything the engine asked for, then arm its timer."""
        engine = self.engine
        while engine.effects:
            effects, engine.effects = engine.effects, []
            links, sink = self._links, self.sink
            deliver = sink.deliver
            for effect in effects:
                op = effect[0]
                if op == _SEND:
                    link = links.get(effect[1])
                    if link is not None:
                        link.send(effect[2])
                elif op == _DELIVER:
                    deliver(effect[1], effect[2], effect[3], effect[4], effect[5])
                elif op == _REPLIED:
                    sink.resolved(effect[1], effect[2], None)
                elif op == _FAILED:
                    sink.resolved(effect[1], None, effect[2])
                else:
                    self._rare_effect(op, effect)
        if not self.flush_scheduled and not self.in_drain and engine.has_queued and self.loop is not None:
            self.flush_scheduled = True
            engine.hold = True
            self.loop.call_soon(self._flush)
        if engine.earliest < self._timer_at:
            self._arm()

    def _arm(self) -> None:
        """The engine's next deadline moved earlier: move the timer."""
        if not self.running:
            return
        engine = self.engine
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = engine.earliest
        self._timer = self.clock.call_later(max(0.0, engine.earliest - self.clock.monotonic()), self._on_timer)

    def handler_ended(self) -> None:
        """A handler ended (and the next ones started) outside a drain: carry
        out what that asked of the engine, such as a credit report to a
        blocked sender or waking a local one, instead of leaving it for the
        next unrelated pump."""
        engine = self.engine
        if not self.in_drain and (engine.effects or (engine.has_queued and not self.flush_scheduled)):
            self.pump()

    def _rare_effect(self, op: int, effect: tuple[Any, ...]) -> None:
        if op == fx.PUBLISH:
            self.transport.publish(effect[1])
        elif op == fx.OPEN:
            self._links[effect[1]] = self.transport.open_link(effect[2])
        elif op == fx.CLOSE:
            link = self._links.pop(effect[1], None)
            if link is not None:
                link.close()
        elif op == fx.SUBSCRIBE:
            self.transport.subscribe(effect[1])
        elif op == fx.UNSUBSCRIBE:
            self.transport.unsubscribe(effect[1])
        elif op == fx.ANNOUNCE:
            self.transport.announce()
        elif op == fx.EVENT:
            self.watch.emit(effect[1])
        elif op == fx.ACKED:
            self.watch.wake()
        elif op == fx.CREDIT:
            self.sink.credit(effect[2])
        elif op == fx.DEAD:
            self.sink.dead(effect[1], effect[2], effect[3], effect[4])
        elif op == fx.NODE_MSG:
            self.sink.node_message(effect[1], effect[2])
        elif op == fx.REDISCOVER:
            refresh = getattr(self.discovery, "refresh", None)
            if refresh is not None and self.loop is not None and self.running and not self._refreshing:
                self._refreshing = True  # one at a time: K peers expiring at once ask K times
                task = self.loop.create_task(refresh())
                self.tasks.add(task)
                task.add_done_callback(self._refresh_done)
        else:  # pragma: no cover - an engine/driver mismatch
            raise AssertionError(f"unknown effect {effect!r}")

    def _refresh_done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        self._refreshing = False
        if not task.cancelled() and task.exception() is not None:
            log.warning("zmesh %s: mDNS refresh failed: %r", self.engine.node_id, task.exception())

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = math.inf
        if not self.running:
            return
        self.engine.tick(self.clock.monotonic())
        self.pump()

    def _flush(self) -> None:
        self.flush_scheduled = False
        self.engine.flush()
        self.pump()

    # -- transport callbacks (TransportHost) -------------------------------

    # A drain feeds frames in a batch. What each frame causes (handlers to
    # run) is carried out as it arrives, so a credit report (which leaves at
    # once) reaches a waiting sender while the rest of the batch is handled;
    # what handlers send (replies) leaves once, when the batch ends.

    def on_direct_frame(self, key: str, frame: Received, public_key: str | None = None) -> None:
        self.in_drain = True
        engine = self.engine
        engine.hold = True
        engine.receive_direct(key, frame, self.now(), public_key)
        if engine.effects:
            self.pump()

    def on_pub_frame(self, frame: Received, public_key: str | None = None) -> None:
        self.in_drain = True
        engine = self.engine
        engine.hold = True
        engine.receive_published(frame, self.now(), public_key)
        if engine.effects:
            self.pump()

    def on_drained(self) -> None:
        """After a batch of frames: run what they caused, then send, one frame per peer."""
        engine = self.engine
        if engine.effects:
            self.pump()
        self.in_drain = False
        if not self.flush_scheduled:
            engine.flush()
            if engine.effects:
                self.pump()
        if engine.earliest < self._timer_at:
            self._arm()  # input that set a timer without any effect (a DECLINED, say)

    def on_subscriber_ready(self, key: str, public_key: str | None = None) -> None:
        self.engine.subscriber_ready(key, self.clock.monotonic(), public_key)
        self.pump()

    def on_transport_drop(self, reason: str, where: str) -> None:
        self.engine.drop(reason, where)

    def on_link_down(self, link: Link) -> None:
        for link_id, known in self._links.items():
            if known is link:
                self.engine.link_down(link_id, self.clock.monotonic())
                self.pump()
                return

    def on_discovered(self, router_endpoint: str) -> None:
        """A member may live at this endpoint (the transport's hub, or mDNS)."""
        if not self.running or router_endpoint == self.transport.router_endpoint:
            return
        self.engine.discovered(router_endpoint, self.clock.monotonic())
        self.pump()
