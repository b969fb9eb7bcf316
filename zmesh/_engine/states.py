"""Every state an engine keeps for another node, and every way between them.

One table for the whole handshake and liveness, in the spirit of h11's
``_state.py``. An *endpoint* we dial but do not know yet is knocked on; once
its node answers with a HELLO it becomes a *peer*::

    knocking --answered--> connecting --ready--> joined --quiet--> evasive
       |  ^                   |  ^                  ^  \\              |
       |  |                   |  +--hello/reset-----+   +--heard/hello--+
       |  |                   |
       |  +----------(expired or cut: knock again, with backoff)-------+
       +--refused--> refused        any peer state --silent/bye/restarted--> gone
       +--give_up--> gone

``connecting``: its HELLO arrived and we dialled it back, but its SUB is not
attached to our publisher yet (so it would miss a broadcast). ``ready`` is
that attachment being seen. ``reset``: a peer we count as joined knocked
again (it lost us, e.g. after a stall); we re-announce our own attachment so
it can count us again. ``quiet`` fires after ``evasive_after`` seconds of
silence (we ping), ``silent`` after ``expire_after``; ``cut`` when the
transport reports the link's connection broken (a killed process, a frozen
one or a cut network, seen by ZMTP heartbeats). After ``silent`` or ``cut``
we drop the peer and knock on its address again; after ``bye`` we do not.

Anything not in :data:`TRANSITIONS` is a bug in the engine, not in the peer:
:func:`step` raises.
"""

from __future__ import annotations

from typing import Final

__all__ = ["STATES", "EVENTS", "TRANSITIONS", "step", "IllegalTransition", "markdown_table"]

STATES: Final = ("knocking", "refused", "connecting", "joined", "evasive", "gone")
EVENTS: Final = (
    "retry", "answered", "refused", "give_up",
    "hello", "ready", "reset", "quiet", "heard", "silent", "cut", "bye", "restarted", "evicted",
)

TRANSITIONS: Final[dict[tuple[str, str], str]] = {
    ("knocking", "retry"): "knocking",
    ("knocking", "answered"): "connecting",
    ("knocking", "refused"): "refused",
    ("knocking", "give_up"): "gone",
    ("refused", "give_up"): "gone",
    ("connecting", "hello"): "connecting",
    ("connecting", "reset"): "connecting",
    ("connecting", "ready"): "joined",
    ("connecting", "silent"): "gone",
    ("connecting", "cut"): "gone",
    ("connecting", "bye"): "gone",
    ("connecting", "restarted"): "gone",
    ("connecting", "evicted"): "gone",
    ("joined", "hello"): "joined",
    ("joined", "reset"): "joined",
    ("joined", "ready"): "joined",
    ("joined", "quiet"): "evasive",
    ("joined", "silent"): "gone",
    ("joined", "cut"): "gone",
    ("joined", "bye"): "gone",
    ("joined", "restarted"): "gone",
    ("evasive", "hello"): "joined",
    ("evasive", "reset"): "joined",
    ("evasive", "heard"): "joined",
    ("evasive", "ready"): "evasive",
    ("evasive", "silent"): "gone",
    ("evasive", "cut"): "gone",
    ("evasive", "bye"): "gone",
    ("evasive", "restarted"): "gone",
}


class IllegalTransition(RuntimeError):
    """The engine tried a move the table does not have (an engine bug)."""


def step(state: str, event: str) -> str:
    """The state after ``event`` in ``state``; IllegalTransition if there is none."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(f"no transition from {state!r} on {event!r}") from None


def markdown_table() -> str:
    """The transition table as Markdown: rows are states, columns events.

    docs/protocol.md embeds it verbatim (a test keeps the two the same).
    """
    used = [e for e in EVENTS if any(ev == e for _, ev in TRANSITIONS)]
    lines = ["| state | " + " | ".join(used) + " |", "|---" * (len(used) + 1) + "|"]
    for state in STATES:
        cells = [TRANSITIONS.get((state, event), "") for event in used]
        lines.append(f"| **{state}** | " + " | ".join(cells) + " |")
    return "\n".join(lines)

