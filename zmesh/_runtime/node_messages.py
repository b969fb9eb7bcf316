"""What a node says to another node itself (internal): the part of
:class:`~zmesh._runtime.dispatch.Dispatch` that answers messages to its
node address and sends them. A ``zmesh.stats`` request is answered with
the node's ``stats()``; a ``zmesh.retained`` request with its retained
values; ``zmesh.cancel``, ``zmesh.watch`` and ``zmesh.started`` carry
what a requester's node and a handler's node tell each other about a
request (see :mod:`.cancel`); ``zmesh.will_done`` that a will was
published (see :mod:`.wills`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from .._wire.names import NODE_ADDRESS_PREFIX, printable
from ..errors import InvalidMessage, ZmeshError
from ..message import Message
from ..topics import check_pattern
from .cancel import CANCEL_TOPIC, STARTED_TOPIC, WATCH_TOPIC, RequestId, node_message, request_id, request_ids
from .retained import RETAINED_HEADROOM, RETAINED_TOPIC, retained_answer
from .stats import answer
from .streams import MORE_TOPIC, more_items
from .wills import WILL_DONE_TOPIC

if TYPE_CHECKING:
    from .config import RuntimeConfig
    from .delivery import Delivery
    from .port import MeshPort
    from .retained import RetainedStore
    from .routing import Providers
    from .streams import Streams
    from .wills import Wills

__all__ = ["NodeMessages"]

log = logging.getLogger("zmesh")


class NodeMessages:
    """Messages between node addresses, for :class:`~zmesh._runtime.dispatch.Dispatch`."""

    config: RuntimeConfig
    _mesh: MeshPort
    delivery: Delivery
    providers: Providers
    retained: RetainedStore
    streams: Streams
    wills: Wills
    _node_stats: Callable[[], dict[str, Any]]

    if TYPE_CHECKING:
        def dead(self, msg: Message, reason: str, detail: str = "", target: str = "") -> None: ...

    def node_message(self, msg: Message, origin: str) -> None:
        """A message for the node itself: a ``zmesh.stats`` request is answered;
        a cancel, a watch or a started notice about requests carried out."""
        topic = msg.topic
        if topic == CANCEL_TOPIC or topic == WATCH_TOPIC or topic == STARTED_TOPIC or topic == WILL_DONE_TOPIC:
            self._mesh.taken(origin, msg.target)
            ids = request_ids(msg)
            if ids is None or not msg.sender.startswith(NODE_ADDRESS_PREFIX):
                self._mesh.drop("malformed", topic, f"from {printable(msg.sender)}")
                return
            self._about_requests(topic, msg.sender[len(NODE_ADDRESS_PREFIX):], ids)
            return
        if topic == MORE_TOPIC:
            self._mesh.taken(origin, msg.target)
            items = more_items(msg)
            if items is None:
                self._mesh.drop("malformed", topic, f"from {printable(msg.sender)}")
                return
            self.streams.more(msg.sender, items)
            return
        if topic == RETAINED_TOPIC and msg.correlation_id:
            self._mesh.taken(origin, msg.target)
            try:
                pattern = check_pattern(msg.payload)
            except InvalidMessage as exc:
                self._mesh.reply(msg, "error", {"type": "InvalidMessage", "message": str(exc)[:200]})
                return
            registry = self._mesh.registry
            limits = [registry.max_payload(self.config.node_id), registry.max_payload(origin)]
            budget = min(limit for limit in limits if limit is not None) - RETAINED_HEADROOM if any(
                limit is not None for limit in limits) else 1 << 19
            values, left_out = retained_answer(self.retained.matching(pattern, self.config.clock.time()), budget)
            if left_out:
                self._mesh.drop("retained_over_limit", msg.sender, f"{left_out} retained values left out")
            self._mesh.reply(msg, "ok", values)
            return
        answer(self._mesh, self.dead, self._node_stats, self.config.node_id, msg, origin)

    def node_ids(self) -> list[str]:
        """Every node in the registry, this one included."""
        return [record.node_id for record in self._mesh.registry.nodes()]

    def _about_requests(self, topic: str, node: str, ids: list[Any]) -> None:
        if topic == MORE_TOPIC:
            self.streams.more(NODE_ADDRESS_PREFIX + node, ids)
        elif topic == CANCEL_TOPIC:
            self.delivery.cancels.cancel(node, ids)
        elif topic == WATCH_TOPIC:
            self.delivery.cancels.watch(node, ids)
        elif topic == WILL_DONE_TOPIC:
            self.wills.done(node, ids)
        else:
            self.providers.started_notice(ids)

    def tell(self, node: str, topic: str, ids: list[Any]) -> None:
        """Tell node ``node`` (this one included) ``topic`` about requests ``ids``."""
        if node == self.config.node_id:
            self._about_requests(topic, node, ids)
            return
        mesh = self._mesh
        note = node_message(self.config.node_id, node, topic, ids)
        route = mesh.route(note.target)
        if route:
            try:
                mesh.send(note, route, mesh.now())
            except ZmeshError as exc:  # closing, or the mesh cannot carry it now
                log.debug("zmesh %s: could not tell %s %s: %s", self.config.node_id, node, topic, exc)

    def registry_find(self, capability: str) -> list[str]:
        return self._mesh.registry.find(capability)

    def window_open(self, agent_id: str) -> bool:
        """May one more message go to ``agent_id`` now (flow control)?"""
        return bool(self._mesh.admit(agent_id))

    def tell_started(self, node: str, ids: list[RequestId]) -> None:
        self.tell(node, STARTED_TOPIC, ids)

    def cancel_remote(self, msg: Message) -> None:
        """The requester of ``msg`` no longer waits: stop its handler, wherever it runs."""
        node = self._mesh.registry.node_of(msg.target)
        if node is not None and msg.correlation_id:  # (its node left: it stops the handler itself)
            self.tell(node, CANCEL_TOPIC, [request_id(msg)])

    def watch_start(self, msg: Message) -> None:
        """Ask the node hosting ``msg``'s target to say when its handler starts."""
        node = self._mesh.registry.node_of(msg.target)
        if node is not None:
            self.providers.watching.add(request_id(msg))
            self.tell(node, WATCH_TOPIC, [request_id(msg)])
