"""A Redis node's connections (internal): redis-py's asyncio client for
commands (pipelined), one connection that blocks reading streams, and the
pub/sub connection (:class:`PubSubLink`), which this module keeps
subscribed through lost connections. redis-py retries nothing here: a
lost connection is seen at once and dealt with as the transport wants."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Any, Callable

from ..errors import TransportError
from ._ordered import OrderedSteps
from ._redis_pipe import RETRY_DELAYS

__all__ = ["PubSubLink", "connect", "import_redis", "shown", "MIN_VERSION"]

#: XAUTOCLAIM came in Redis 6.2.
MIN_VERSION = (6, 2)


def import_redis() -> Any:
    try:
        import redis.asyncio
    except ImportError:
        raise TransportError(
            "the Redis transport needs redis-py: pip install 'zmesh-agents[redis]'") from None
    return redis


def shown(url: str) -> str:
    """``url`` without its password."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.rsplit('@', 1)[-1]}"


async def connect(url: str, options: dict[str, Any], wait: float, name: str) -> tuple[Any, Any]:
    """(commands client, stream-reading client) for ``url``, once the server answers
    (tried for ``wait`` seconds); TransportError when it does not, refuses the
    credentials, or is older than Redis 6.2."""
    redis = import_redis()
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.exceptions import AuthenticationError, ResponseError

    common = {"retry": Retry(NoBackoff(), 0), "socket_connect_timeout": min(wait, 5.0), "client_name": name,
              "socket_keepalive": True}
    try:
        commands = redis.asyncio.Redis.from_url(url, **{**common, "socket_timeout": max(10.0, wait), **options})
        reads = redis.asyncio.Redis.from_url(url, **{**common, "socket_timeout": None, **options},
                                             single_connection_client=True)
    except (ValueError, TypeError) as exc:
        raise TransportError(f"cannot use the Redis URL {shown(url)!r}: {exc}") from None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    failures = 0
    while True:
        try:
            info = await asyncio.wait_for(commands.info("server"), max(0.1, deadline - loop.time()))
            break
        except (AuthenticationError, ResponseError) as exc:
            why = f"the Redis server at {shown(url)} refused this node: {exc}"
        except Exception as exc:
            failures += 1
            if loop.time() < deadline:
                await asyncio.sleep(RETRY_DELAYS[min(failures, len(RETRY_DELAYS)) - 1])
                continue
            why = f"cannot reach the Redis server at {shown(url)} within {wait} s: {type(exc).__name__}: {exc}"
        for client in (commands, reads):
            with contextlib.suppress(Exception):
                await client.aclose()
        raise TransportError(why)
    version = str(info.get("redis_version", "0"))
    try:
        numbers = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        numbers = (0, 0)
    if numbers < MIN_VERSION:
        for client in (commands, reads):
            with contextlib.suppress(Exception):
                await client.aclose()
        raise TransportError(f"the Redis server at {shown(url)} is {version}: zmesh needs Redis 6.2 or later")
    return commands, reads


class PubSubLink:
    """The pub/sub connection of ``client``: SUBSCRIBE and PSUBSCRIBE in the order
    asked, each counted until the server confirms it; every message goes to
    ``on_message(kind, channel, data, pattern)``. A lost connection is made
    again, with everything subscribed again, then ``on_reconnected()``."""

    def __init__(self, client: Any, loop: asyncio.AbstractEventLoop,
                 on_message: Callable[[bytes, bytes, bytes, bytes | None], None],
                 on_reconnected: Callable[[], None], on_flushed: Callable[[], None],
                 drop: Callable[[str, str], None], count: Callable[[str], None]) -> None:
        self._client = client
        self._loop = loop
        self._on_message = on_message
        self._on_reconnected = on_reconnected
        self._on_flushed = on_flushed
        self._count = count
        self._channels: set[str] = set()
        self._globs: set[str] = set()
        self._pending: Counter[str] = Counter()  # names asked of the server and not yet confirmed
        self._all_confirmed = asyncio.Event()
        self._all_confirmed.set()
        self._pubsub: Any = None
        self._steps = OrderedSteps(loop, self._no_round_trip, drop, count, self._maybe_flushed)
        self._reader: asyncio.Task[None] | None = None

    @staticmethod
    async def _no_round_trip() -> None:
        """Confirmations come as messages (see ``_arrived``)."""

    async def start(self, channel: str, wait: float) -> None:
        """Subscribe to ``channel`` and read from then on; returns once the server confirmed it."""
        self._pubsub = self._client.pubsub()
        self._channels.add(channel)
        self._ask(channel)
        await self._pubsub.execute_command("SUBSCRIBE", channel)
        self._reader = self._loop.create_task(self._read())
        await self.confirmed(wait)
        if self._pending:
            raise TransportError(f"the Redis server did not confirm a subscription within {wait} s")

    def subscribe(self, name: str, pattern: bool = False) -> None:
        wanted = self._globs if pattern else self._channels
        if name not in wanted:
            wanted.add(name)
            self._queue("PSUBSCRIBE" if pattern else "SUBSCRIBE", name)

    def unsubscribe(self, name: str, pattern: bool = False) -> None:
        wanted = self._globs if pattern else self._channels
        if name in wanted:
            wanted.discard(name)
            self._queue("PUNSUBSCRIBE" if pattern else "UNSUBSCRIBE", name)

    def _ask(self, name: str) -> None:
        self._pending[name] += 1
        self._all_confirmed.clear()

    def _queue(self, command: str, name: str) -> None:
        self._ask(name)

        async def step() -> None:
            await self._pubsub.execute_command(command, name)

        self._steps.add(step)

    def is_flushed(self) -> bool:
        return not self._pending and self._steps.is_flushed()

    async def confirmed(self, wait: float) -> None:
        """Until the server confirmed every subscription asked so far (``wait`` seconds at most)."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._all_confirmed.wait(), wait)

    def _maybe_flushed(self) -> None:
        if self.is_flushed():
            self._on_flushed()

    async def _read(self) -> None:
        while True:
            try:
                response = await self._pubsub.parse_response(block=True)
            except asyncio.CancelledError:
                raise
            except Exception:
                await self._reconnect()
                continue
            if response:
                self._arrived(response)

    def _arrived(self, response: list[Any]) -> None:
        kind = response[0]
        if kind == b"message":
            self._on_message(kind, response[1], response[2], None)
        elif kind == b"pmessage":
            self._on_message(kind, response[2], response[3], response[1])
        elif kind in (b"subscribe", b"psubscribe", b"unsubscribe", b"punsubscribe"):
            name = response[1].decode("utf-8", "replace") if isinstance(response[1], bytes) else str(response[1])
            if self._pending[name] > 1:
                self._pending[name] -= 1
            else:
                self._pending.pop(name, None)
            if not self._pending:
                self._all_confirmed.set()
                self._maybe_flushed()

    async def _reconnect(self) -> None:
        self._count("pubsub_reconnects")
        failures = 0
        while True:
            with contextlib.suppress(Exception):
                await self._pubsub.aclose()
            self._pubsub = self._client.pubsub()
            self._pending = Counter([*self._channels, *self._globs])
            self._all_confirmed.clear()
            try:
                if self._channels:
                    await self._pubsub.execute_command("SUBSCRIBE", *self._channels)
                if self._globs:
                    await self._pubsub.execute_command("PSUBSCRIBE", *self._globs)
                break
            except Exception:
                failures += 1
                await asyncio.sleep(RETRY_DELAYS[min(failures, len(RETRY_DELAYS)) - 1])
        self._on_reconnected()

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
        with contextlib.suppress(Exception):
            await self._steps.done()
        with contextlib.suppress(Exception):
            await self._pubsub.aclose()
