"""The trace id that travels with the code handling a message (internal)."""

from __future__ import annotations

import contextvars

from ..message import new_trace_id

__all__ = ["trace_var", "current_trace_id", "trace_context"]

trace_var: contextvars.ContextVar[str] = contextvars.ContextVar("zmesh_trace_id", default="")


def current_trace_id() -> str:
    """The trace id of the message being handled, or of the enclosing trace_context."""
    return trace_var.get()


class trace_context:
    """``with zmesh.trace_context("abc"):`` makes outgoing messages carry that trace id
    (without one: a new W3C trace-id)."""

    def __init__(self, trace_id: str | None = None) -> None:
        self.trace_id = trace_id or new_trace_id()
        self._token: contextvars.Token[str] | None = None

    def __enter__(self) -> str:
        self._token = trace_var.set(self.trace_id)
        return self.trace_id

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            trace_var.reset(self._token)
