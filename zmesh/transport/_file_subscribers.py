"""Who subscribed to what on the file bus (internal): every agent folder's
``subscriptions/`` (each file holds a topic or a zmesh pattern: the seed's
agents write theirs with ``FileBroker.subscribe``, a zmesh node its own
folder's), read again when a watched folder changed."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..topics import matches
from ._file_layout import BusLayout, from_component
from ._file_watch import DirWatcher

__all__ = ["Subscribers"]


class Subscribers:
    """The subscriptions of every agent folder of ``layout``, by address."""

    def __init__(self, layout: BusLayout) -> None:
        self.layout = layout
        self.by_address: dict[str, set[str]] = {}
        self.stale = True  # a subscription folder changed since they were read
        self.watcher: DirWatcher | None = None

    def add(self, address: str, pattern: str) -> None:
        self.by_address.setdefault(address, set()).add(pattern)

    def discard(self, address: str, pattern: str) -> None:
        self.by_address.get(address, set()).discard(pattern)

    def of(self, topic: str) -> list[str]:
        """The addresses a publication on ``topic`` goes to (read again first if stale)."""
        if self.stale:
            self.refresh()
        return [a for a, patterns in self.by_address.items() if any(_matches(p, topic) for p in patterns)]

    def refresh(self) -> None:
        """Every agent directory's subscriptions (the seed's files hold the topic)."""
        found: dict[str, set[str]] = {}
        self.stale = False
        watcher = self.watcher
        with contextlib.suppress(OSError):
            for agent in os.scandir(self.layout.agents):
                if not agent.is_dir() or agent.name.startswith("."):
                    continue
                folder = Path(agent.path) / "subscriptions"
                if watcher is not None and folder.is_dir():
                    watcher.add(folder, notice=False)  # a file written there from now on is noticed
                patterns: set[str] = set()
                with contextlib.suppress(OSError):
                    for sub in os.scandir(os.path.join(agent.path, "subscriptions")):
                        if not sub.name.startswith("."):
                            with contextlib.suppress(OSError, UnicodeDecodeError):
                                patterns.add(Path(sub.path).read_text(encoding="utf-8").strip())
                if patterns:
                    found[from_component(agent.name)] = patterns
        self.by_address = found


def _matches(pattern: str, topic: str) -> bool:
    """Does a subscription file's topic (a zmesh pattern, or whatever a seed agent wrote) take ``topic``?"""
    if pattern == topic:
        return True
    try:
        return matches(pattern, topic)
    except Exception:
        return False
