"""The blocking face of a node's dead letters."""

from __future__ import annotations

from typing import Iterator

from ..deadletters import DeadLetter
from ..deadletters import DeadLetters as _AsyncDeadLetters
from ._agent import Wait, copy_docs
from ._loop import LoopThread

__all__ = ["DeadLetters"]


class DeadLetters:
    """The node's dead letters (:class:`zmesh.deadletters.DeadLetters`); ``redeliver`` waits."""

    def __init__(self, ring: _AsyncDeadLetters, loop: LoopThread, wait: Wait) -> None:
        self._ring = ring
        self._loop = loop
        self._wait = wait

    def __iter__(self) -> Iterator[DeadLetter]:
        return iter(self._loop.run(list, self._ring))

    def __len__(self) -> int:
        return self._loop.run(len, self._ring)

    def clear(self) -> None:
        self._loop.run(self._ring.clear)

    def redeliver(self, entry: DeadLetter) -> None:
        self._wait(self._ring.redeliver(entry))


copy_docs(DeadLetters, _AsyncDeadLetters)
