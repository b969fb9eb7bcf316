"""What an agent shows the mesh of itself (internal): :class:`zmesh.Agent`
has its ``capabilities``, ``meta`` and ``will`` from :class:`PresenceProperties`;
each assignment republishes the agent's node record."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from ._wire.names import check_capabilities
from .errors import NodeClosed
from .registry import Will, check_meta, check_will

if TYPE_CHECKING:
    from ._runtime.agent_port import AgentHost

__all__ = ["PresenceProperties"]


class PresenceProperties:
    """``capabilities``, ``meta`` and ``will``."""

    id: str
    _host: AgentHost
    _closed: bool
    _capabilities: tuple[str, ...]
    _meta: Mapping[str, Any]
    _will: Will | None

    @property
    def capabilities(self) -> tuple[str, ...]:
        """What this agent says it can do, in the registry (``registry.find``).

        Assigning new ones (any iterable of non-empty strings) republishes the
        agent's record to every peer at once: a worker that switches model
        can say so. ``await node.settled()`` waits until every peer has it.
        """
        return self._capabilities

    @capabilities.setter
    def capabilities(self, capabilities: Iterable[str]) -> None:
        caps = check_capabilities(capabilities)
        if self._closed:
            raise NodeClosed(f"agent {self.id!r} is closed")
        if caps != self._capabilities:
            self._capabilities = caps
            self._host.changed(self)

    @property
    def meta(self) -> Mapping[str, Any]:
        """What this agent shows the mesh of itself (``registry.agents()[id].meta``).
        Assigning a new map republishes it, as for :attr:`capabilities`."""
        return self._meta

    @meta.setter
    def meta(self, meta: Mapping[str, Any] | None) -> None:
        checked = check_meta(dict(meta) if meta is not None else None)
        if self._closed:
            raise NodeClosed(f"agent {self.id!r} is closed")
        if checked != dict(self._meta):
            self._meta = MappingProxyType(checked)
            self._host.changed(self)

    @property
    def will(self) -> Will | None:
        """The ``(topic, payload)`` broadcast for this agent if its node goes
        without a goodbye (``node.agent(..., will=...)``); None: no will.
        Assigning one republishes it, as for :attr:`capabilities`."""
        return self._will

    @will.setter
    def will(self, will: tuple[str, Any] | None) -> None:
        checked = check_will(will)
        if self._closed:
            raise NodeClosed(f"agent {self.id!r} is closed")
        if checked != self._will:
            self._will = checked
            self._host.changed(self)


for _name in ("capabilities", "meta", "will"):
    for _accessor in (getattr(PresenceProperties, _name).fget, getattr(PresenceProperties, _name).fset):
        _accessor.__qualname__ = f"Agent.{_name}"
