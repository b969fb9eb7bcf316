"""The nats-py client of a NATS node (internal): importing it, connecting
with zmesh's options, and nats-py's errors at start as TransportErrors."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, NoReturn

from ..errors import TransportError

__all__ = ["import_nats", "connect", "refused_at_start"]


def import_nats() -> Any:
    try:
        import nats
    except ImportError:
        raise TransportError(
            "the 'nats' transport needs the nats-py client: pip install 'zmesh-agents[nats]'") from None
    return nats


async def connect(url: str, name: str, options: dict[str, Any], wait: float, count: Callable[[str], None],
                  on_reconnect: Callable[[], None]) -> Any:
    """A connection to ``url`` within ``wait`` seconds (TransportError
    otherwise); later the client reconnects by itself, forever."""
    nats = import_nats()
    options = {"name": name, "connect_timeout": 5, "max_reconnect_attempts": -1,
               "reconnect_time_wait": 0.5, "allow_reconnect": True, **options}

    async def quiet(exc: Exception) -> None:  # nats-py logs every error itself otherwise
        count("client_errors")

    theirs: Callable[[], Awaitable[None]] | None = options.get("reconnected_cb")

    async def reconnected() -> None:
        count("reconnects")
        on_reconnect()
        if theirs is not None:
            await theirs()

    options.setdefault("error_cb", quiet)
    options["reconnected_cb"] = reconnected
    try:
        # nats-py tries the first connection as often as later ones (forever, by these
        # options): the node gives it ``wait`` seconds, then says so.
        return await asyncio.wait_for(nats.connect(url, **options), wait)
    except asyncio.TimeoutError:
        raise TransportError(f"cannot reach the NATS server at {url} within {wait} s "
                             "(is nats-server running there?)") from None
    except Exception as exc:
        raise TransportError(f"cannot reach the NATS server at {url}: {type(exc).__name__}: {exc}") from None


def refused_at_start(url: str, exc: Exception) -> NoReturn:
    """What the server's JetStream said when the node opened its bucket and stream, as a TransportError."""
    if isinstance(exc, TransportError):
        raise exc
    if "jetstream not enabled" in str(exc).lower() or type(exc).__name__ in ("NoRespondersError",
                                                                             "ServiceUnavailableError"):
        raise TransportError(f"the NATS server at {url} has no JetStream (start it with -js): "
                             "zmesh keeps the mesh's membership in a key-value bucket") from None
    raise TransportError(f"NATS at {url}: cannot open the membership bucket: {exc!r}") from None
