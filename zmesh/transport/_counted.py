"""What a broker transport counts (internal): ``stats()`` and drops, each
told to its node (``host.on_transport_drop``), as every one of them does."""

from __future__ import annotations

from .message import MessageHost

__all__ = ["Counted"]


class Counted:
    """A mixin: ``self._counters`` and ``self._host`` are the transport's own."""

    _counters: dict[str, int]
    _host: MessageHost | None

    def _count(self, reason: str) -> None:
        self._counters[reason] = self._counters.get(reason, 0) + 1

    def _drop(self, reason: str, where: str) -> None:
        self._count(reason)
        if self._host is not None:
            self._host.on_transport_drop(reason, where)

    def stats(self) -> dict[str, int]:
        return dict(self._counters)
