"""QoS 1/2 on Redis streams (internal): one stream per agent,
``zmesh:MESH:q:AGENT``, read by the consumer group ``zmesh`` (one consumer
per node, named after it). A one-way QoS 1/2 message is ``XADD``-ed to its
agent's stream; the node that hosts the agent reads it (``XREADGROUP``),
and acknowledges and deletes it once its handler ran (``XACK``, ``XDEL``).
An entry delivered and not acknowledged within ``ack_wait`` seconds (its
node died) is claimed by a node that hosts the agent (``XAUTOCLAIM``); one
still being handled is claimed again by its own node every heartbeat, so
nobody else takes it. An entry given back (a full inbox) is added again and
the first one acknowledged, in one step (a script)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Callable

from ..errors import FrameError
from .message import MessageHost
from ._redis_names import Keys
from ._redis_pipe import RETRY_DELAYS, CommandPipe
from ._redis_wire import fields, from_fields
from .wires import PlainMessage

__all__ = ["StreamAdder", "StreamReader", "GROUP"]

GROUP = "zmesh"
#: Milliseconds one read waits for an entry (a change of the streams read cuts it short).
BLOCK_MS = 5000
#: Add an entry again and acknowledge the first, atomically.
_GIVE_BACK = """
redis.call('XADD', KEYS[1], '*', unpack(ARGV, 2))
redis.call('XACK', KEYS[1], 'zmesh', ARGV[1])
redis.call('XDEL', KEYS[1], ARGV[1])
return 1
"""


class StreamAdder:
    """What this node adds to streams: tried again until the server has it (a
    duplicate is recognised by its id where it is handled), at most
    ``max_unconfirmed`` at a time; entries older than ``max_age`` are trimmed."""

    def __init__(self, pipe: CommandPipe, keys: Keys, max_unconfirmed: int, max_age: float,
                 drop: Callable[[str, str], None], on_confirmed: Callable[[], None]) -> None:
        self._pipe, self._keys = pipe, keys
        self._max_unconfirmed, self._max_age_ms = max_unconfirmed, int(max_age * 1000)
        self._drop, self._on_confirmed = drop, on_confirmed
        self._unconfirmed = 0
        self._all_confirmed = asyncio.Event()

    def add(self, agent: str, data: PlainMessage) -> None:
        if self._unconfirmed >= self._max_unconfirmed:
            self._drop("unconfirmed_full", agent)
            return
        self._unconfirmed += 1
        oldest = max(0, int(time.time() * 1000) - self._max_age_ms)
        pairs = [x for kv in fields(data).items() for x in kv]
        self._pipe.add("XADD", self._keys.queue(agent), "MINID", "~", oldest, "*", *pairs,
                       done=self._added(agent), held=True)

    def _added(self, agent: str) -> Callable[[Any], None]:
        def added(reply: Any) -> None:
            self._unconfirmed -= 1
            if isinstance(reply, Exception):
                self._drop("send_failed", f"{agent}: {reply}")
            if not self._unconfirmed:
                self._all_confirmed.set()
                self._on_confirmed()

        return added

    def is_confirmed(self) -> bool:
        return not self._unconfirmed

    @property
    def unconfirmed(self) -> int:
        return self._unconfirmed

    async def confirmed(self, wait: float) -> None:
        """Until the server has every message added (``wait`` seconds at most; then what
        it has not is dropped and counted)."""
        if self._unconfirmed:
            self._all_confirmed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._all_confirmed.wait(), wait)
        if self._unconfirmed:
            self._drop("unconfirmed_at_close", f"{self._unconfirmed} messages")


class StreamReader:
    """Reads the streams of the agents this node hosts, on a connection of its own (``client``)."""

    def __init__(self, client: Any, pipe: CommandPipe, keys: Keys, consumer: str, ack_wait: float,
                 max_in_flight: int, host: Callable[[], MessageHost | None],
                 drop: Callable[[str, str], None], count: Callable[[str], None]) -> None:
        self._client = client
        self._pipe = pipe
        self._keys = keys
        self._consumer = consumer
        self._ack_wait_ms = int(ack_wait * 1000)
        self._max_in_flight = max_in_flight
        self._host = host
        self._drop, self._count = drop, count
        self._streams: dict[str, bool] = {}  # stream -> its group is made and its own pending entries read
        self._unsettled: dict[tuple[str, str], float] = {}  # (stream, entry id) -> when delivered
        self._changed = asyncio.Event()
        self._room = asyncio.Event()
        self._client_id: int | None = None
        self._stale = False  # the streams changed since the read that is waiting was sent

    def add(self, agent: str) -> None:
        stream = self._keys.queue(agent)
        if stream not in self._streams:
            self._streams[stream] = False
            self._changed_now()

    def remove(self, agent: str) -> None:
        if self._streams.pop(self._keys.queue(agent), None) is not None:
            self._changed_now()

    def _changed_now(self) -> None:
        self._changed.set()
        self._stale = True
        self._unblock()

    def _unblock(self) -> None:
        if self._client_id is not None:
            self._pipe.add("CLIENT", "UNBLOCK", self._client_id)

    # -- reading ---------------------------------------------------------------

    async def run(self) -> None:
        """Read until cancelled (through lost connections)."""
        failures = 0
        while True:
            try:
                self._client_id = int(await self._client.execute_command("CLIENT", "ID"))
                failures = 0
                await self._read_forever()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._client_id = None
                if "NOGROUP" in str(exc):  # the server lost the groups (restarted without its data)
                    self._count("group_lost")
                    self._streams = dict.fromkeys(self._streams, False)
                    continue
                failures += 1
                self._count("stream_read_failed")
                await asyncio.sleep(RETRY_DELAYS[min(failures, len(RETRY_DELAYS)) - 1])

    async def _read_forever(self) -> None:
        while True:
            if not self._streams:
                self._changed.clear()
                await self._changed.wait()
                continue
            for stream in [s for s, ready in self._streams.items() if not ready]:
                await self._prepare(stream)
            room = self._max_in_flight - len(self._unsettled)
            if room <= 0:
                self._room.clear()
                await self._room.wait()
                continue
            self._changed.clear()
            self._stale = False
            streams = list(self._streams)
            reply = await self._client.execute_command(
                "XREADGROUP", "GROUP", GROUP, self._consumer, "COUNT", room, "BLOCK", BLOCK_MS,
                "STREAMS", *streams, *(">" for _ in streams))
            self._deliver_all(reply)

    async def _prepare(self, stream: str) -> None:
        """Make the stream's group if there is none, and take this consumer's own pending
        entries (a process of the same node name that died had them)."""
        try:
            await self._client.execute_command("XGROUP", "CREATE", stream, GROUP, "0", "MKSTREAM")
        except Exception as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        reply = await self._client.execute_command(
            "XREADGROUP", "GROUP", GROUP, self._consumer, "COUNT", self._max_in_flight, "STREAMS", stream, "0")
        if stream in self._streams:
            self._streams[stream] = True
        self._deliver_all(reply)

    def _deliver_all(self, reply: Any) -> None:
        if not reply:
            return
        if isinstance(reply, dict):  # RESP3 (protocol=3 in the options): {stream: [entries]}
            items = [(stream, found[0] if found else []) for stream, found in reply.items()]
        else:  # RESP2: [[stream, entries]]
            items = reply
        for stream, entries in items:
            self.deliver(_text(stream), entries)

    def deliver(self, stream: str, entries: Any) -> None:
        host = self._host()
        if host is None:
            return
        agent = self._keys.queued_agent(stream)
        now = time.monotonic()
        for entry_id, entry in entries or ():
            entry_id = _text(entry_id)
            if not entry:  # deleted meanwhile (acknowledged by another node)
                continue
            try:
                data = from_fields(entry, agent, f"{entry_id} {stream}")
            except FrameError as exc:
                self._drop("malformed", f"{stream[:80]} {entry_id}: {exc}")
                self._acknowledge(stream, entry_id)
                continue
            self._unsettled[(stream, entry_id)] = now
            host.on_message(data)

    # -- settling ---------------------------------------------------------------

    def settle(self, data: PlainMessage, handled: bool, give_back_delay: float,
               loop: asyncio.AbstractEventLoop) -> bool:
        entry_id, _, stream = data.ack.partition(" ")
        if self._unsettled.pop((stream, entry_id), None) is not None:
            self._room.set()
        if handled:
            self._acknowledge(stream, entry_id)
            return False
        loop.call_later(give_back_delay, self._give_back, stream, entry_id, data)
        return True

    def _acknowledge(self, stream: str, entry_id: str) -> None:
        self._pipe.add("XACK", stream, GROUP, entry_id)
        self._pipe.add("XDEL", stream, entry_id)

    def _give_back(self, stream: str, entry_id: str, data: PlainMessage) -> None:
        pairs = [x for kv in fields(data).items() for x in kv]
        self._pipe.add("EVAL", _GIVE_BACK, 1, stream, entry_id, *pairs, held=True)

    # -- claiming (once a heartbeat) ----------------------------------------------

    def beat(self) -> None:
        """Claim what nodes that died had not acknowledged, and keep what this
        node is still handling its own; send a lost unblock again."""
        if self._stale:
            self._unblock()
        now = time.monotonic()
        mine: dict[str, list[str]] = {}
        for (stream, entry_id), when in self._unsettled.items():
            if now - when > self._ack_wait_ms / 3000:
                mine.setdefault(stream, []).append(entry_id)
        for stream, ids in mine.items():
            self._pipe.add("XCLAIM", stream, GROUP, self._consumer, 0, *ids, "JUSTID")
        for stream, ready in list(self._streams.items()):
            if ready:
                self._pipe.add("XAUTOCLAIM", stream, GROUP, self._consumer, self._ack_wait_ms, "0-0", "COUNT",
                               max(1, self._max_in_flight - len(self._unsettled)),
                               done=self._claimed(stream))

    def _claimed(self, stream: str) -> Callable[[Any], None]:
        def claimed(reply: Any) -> None:
            if isinstance(reply, Exception) or not isinstance(reply, list) or len(reply) < 2:
                return
            fresh = [(i, e) for i, e in reply[1] or () if (stream, _text(i)) not in self._unsettled]
            if fresh:
                self._count("claimed")
                self.deliver(stream, fresh)

        return claimed


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
