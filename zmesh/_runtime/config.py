"""What the runtime knows of its node (internal)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from .._wire.names import check_agent_id, check_capabilities, check_name
from ..clock import Clock
from ..registry import MIN_MAX_PAYLOAD

__all__ = ["RuntimeConfig", "check_node_options", "check_agent_options"]


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """What the runtime knows of its node."""

    node_id: str
    mesh: str
    clock: Clock
    #: How long a send without a timeout waits for a target the mesh is still learning of.
    settle_timeout: float
    dead_letter_capacity: int
    #: Threads for plain handlers: None, a pool per agent; N, one pool of N.
    workers: int | None


def check_node_options(
    mesh: str, name: str | None, max_payload: object, workers: object, block_warning: object,
    encoder: object, decoder: object,
) -> None:
    """ValueError or TypeError, naming the argument, for a bad :class:`zmesh.Node` option."""
    check_name("mesh", mesh)
    if name is not None:
        check_name("node", name)
    if not isinstance(max_payload, int) or isinstance(max_payload, bool) or max_payload < MIN_MAX_PAYLOAD:
        raise ValueError(f"max_payload must be a number of bytes of at least {MIN_MAX_PAYLOAD} (64 KiB), "
                         f"got {max_payload!r}: peers refuse a node that takes less")
    if workers is not None:
        _check_count("workers", workers)
    if block_warning is not None and (
        block_warning.__class__ not in (int, float) or not 0 < block_warning < float("inf")
    ):
        raise ValueError(f"block_warning must be a positive number of seconds or None, got {block_warning!r}")
    for hook, what in ((encoder, "encoder"), (decoder, "decoder")):
        if hook is not None and not callable(hook):
            raise TypeError(f"{what} must be callable or None, got {hook!r}")


def check_agent_options(
    agent_id: str, capabilities: Iterable[str], concurrency: object, inbox_size: object, inbox_bytes: object
) -> tuple[str, ...]:
    """Check ``node.agent()``'s arguments; the capabilities, checked."""
    _check_count("concurrency", concurrency)
    _check_count("inbox_size", inbox_size)
    _check_count("inbox_bytes", inbox_bytes)
    check_agent_id(agent_id)
    return check_capabilities(capabilities)


def _check_count(what: str, value: Any) -> None:
    if value.__class__ is not int or value < 1:
        raise ValueError(f"{what} must be a positive int, got {value!r}")
