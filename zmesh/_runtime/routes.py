"""Which of an agent's handlers takes a message (internal).

Two tables, kept apart: the ``on()`` handlers (by exact topic, then by
pattern in the order added), which take direct messages and requests; and
the subscriptions (pattern -> the handler given to ``subscribe``, or None
to leave broadcasts to the ``on()`` handlers), which take broadcasts.
"""

from __future__ import annotations

from typing import Any, Callable

from ..topics import is_pattern, matches

__all__ = ["Routes", "Entry"]

#: A handler and where it runs ("async", "thread" or "inline", see zmesh._runtime.handlers).
Entry = tuple[Callable[..., Any], str]


class Routes:
    __slots__ = ("_exact", "_patterns", "subscriptions")

    def __init__(self) -> None:
        self._exact: dict[str, Entry] = {}
        self._patterns: list[tuple[str, Entry]] = []
        #: pattern -> the handler given to subscribe (None: the on() handlers take them)
        self.subscriptions: dict[str, Entry | None] = {}

    # -- on() handlers: direct messages and requests ------------------------

    def add(self, topic: str, entry: Entry) -> None:
        if is_pattern(topic):
            self._patterns = [(p, e) for p, e in self._patterns if p != topic]
            self._patterns.append((topic, entry))
        else:
            self._exact[topic] = entry

    def remove(self, topic: str) -> None:
        self._exact.pop(topic, None)
        self._patterns = [(p, e) for p, e in self._patterns if p != topic]

    def handler_entry(self, topic: str) -> Entry | None:
        """The ``on()`` handler that takes ``topic``: an exact one first, else the first matching pattern."""
        entry = self._exact.get(topic)
        if entry is not None:
            return entry
        for pattern, entry in self._patterns:
            if matches(pattern, topic):
                return entry
        return None

    # -- subscriptions: broadcasts -------------------------------------------

    def broadcast_routes(self, topic: str) -> list[str]:
        """Which subscriptions take a broadcast on ``topic``: each matching
        pattern that has a handler of its own, and ``""`` once for all the
        matching ones that leave it to the ``on()`` handlers."""
        routes: list[str] = []
        to_on_handlers = False
        for pattern, entry in self.subscriptions.items():
            if matches(pattern, topic):
                if entry is None:
                    to_on_handlers = True
                else:
                    routes.append(pattern)
        if to_on_handlers:
            routes.append("")
        return routes

    def still_routed(self, route: str, topic: str) -> bool:
        """Does ``route`` still take ``topic``? (Not if it was unsubscribed
        while the broadcast waited in the inbox.)"""
        if route:
            return self.subscriptions.get(route) is not None
        return any(entry is None and matches(p, topic) for p, entry in self.subscriptions.items())

    def broadcast_entry(self, route: str, topic: str) -> Entry | None:
        """The handler for a broadcast on ``topic`` by ``route``."""
        if not route:
            return self.handler_entry(topic)
        return self.subscriptions.get(route)
