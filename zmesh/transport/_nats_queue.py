"""JetStream for a NATS node's one-way QoS 1/2 messages (internal; see
docs/transports.md).

* One stream per mesh, ``zmesh_MESH`` (work-queue retention, file storage,
  ``max_age``), takes the subjects ``zmesh.MESH.q.AGENT.TOPIC``; a message
  stays in it until it is acknowledged.
* One durable push consumer per agent, named after it, delivers that
  agent's messages to ``zmesh.MESH.qd.AGENT`` in queue group ``zmesh``: the
  node that hosts the agent gets them, one delivery at a time per message.
  What was delivered and not acknowledged within ``ack_wait`` seconds (its
  node died) comes again; what the node gives back (a full inbox) comes
  again after ``NAK_DELAY``.
* A publish is confirmed by the server's PubAck on this node's own inbox.
  Until then it is kept (at most ``max_unconfirmed`` messages and
  ``MAX_UNCONFIRMED_BYTES``) and published again every ``resend`` seconds
  and at once after a reconnect, with the message's id as ``Nats-Msg-Id``,
  so the server stores it once however often it comes.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, NamedTuple

from ..errors import TransportError
from ._nats_names import Subjects
from .wires import PlainMessage

__all__ = ["Unconfirmed", "stream_config", "consumer_config", "NAK_DELAY"]

#: Seconds before the server delivers again a message given back.
NAK_DELAY = 0.2
#: The most bytes of messages kept until the server confirms them.
MAX_UNCONFIRMED_BYTES = 64 << 20
#: JetStream's error codes for a stream that is full.
_FULL = frozenset({10077, 10047, 10028})


def stream_config(names: Subjects, max_age: float) -> Any:
    from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

    return StreamConfig(name=names.stream, subjects=[f"{names.prefix}q.>"], retention=RetentionPolicy.WORK_QUEUE,
                        storage=StorageType.FILE, max_age=max_age, discard=DiscardPolicy.NEW,
                        duplicate_window=120.0, description="zmesh: QoS 1/2 messages until acknowledged")


def consumer_config(names: Subjects, agent: str, durable: str, ack_wait: float, max_in_flight: int) -> Any:
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    return ConsumerConfig(durable_name=durable, deliver_subject=names.deliver(agent), deliver_group="zmesh",
                          filter_subject=names.held(agent), ack_policy=AckPolicy.EXPLICIT,
                          deliver_policy=DeliverPolicy.ALL, ack_wait=ack_wait, max_ack_pending=max_in_flight,
                          description=f"zmesh: agent {agent[:200]}")


async def ensure_stream(jsm: Any, names: Subjects, max_age: float) -> None:
    """The mesh's stream, made if missing (another node's, as it is, if it differs)."""
    from nats.js.errors import NotFoundError

    try:
        await jsm.stream_info(names.stream)
        return
    except NotFoundError:
        pass
    try:
        await jsm.add_stream(stream_config(names, max_age))
    except Exception as exc:
        try:  # another node made it meanwhile
            await jsm.stream_info(names.stream)
        except Exception:
            raise TransportError(f"NATS: cannot make the stream {names.stream!r} for QoS 1/2 messages: "
                                 f"{exc}") from None


async def ensure_consumer(jsm: Any, names: Subjects, agent: str, durable: str, ack_wait: float,
                          max_in_flight: int) -> None:
    """Agent ``agent``'s consumer, made if missing, made again if another
    version of it delivers elsewhere (what it has not delivered stays in the
    work queue for the new one)."""
    config = consumer_config(names, agent, durable, ack_wait, max_in_flight)
    try:
        await jsm.add_consumer(names.stream, config)
        return
    except Exception:
        info = await jsm.consumer_info(names.stream, durable)
        if info.config.deliver_subject == config.deliver_subject and info.config.filter_subject == config.filter_subject:
            return
    await jsm.delete_consumer(names.stream, durable)
    await jsm.add_consumer(names.stream, config)


class _Out(NamedTuple):
    subject: str
    data: PlainMessage
    size: int
    expires: float  # time.time() after which sending it again is no use (inf: no ttl)


class Unconfirmed:
    """Published, not yet confirmed by the server: sent again until it is."""

    def __init__(self, publish: Callable[[str, PlainMessage, str], None], count: Callable[[str], None],
                 drop: Callable[[str, str], None], on_confirmed: Callable[[], None], max_count: int,
                 resend: float) -> None:
        self._publish = publish
        self._count = count
        self._drop = drop
        self._on_confirmed = on_confirmed
        self.max_count = max_count
        self.resend = resend
        self.inbox = ""  # "_INBOX.xyz.": set once subscribed
        self._out: dict[int, _Out] = {}
        self._sent_at: dict[int, float] = {}  # seq -> time.monotonic() it last went out
        self._bytes = 0
        self._seq = 0

    def __len__(self) -> int:
        return len(self._out)

    def add(self, subject: str, data: PlainMessage, size: int) -> None:
        if len(self._out) >= self.max_count or self._bytes + size > MAX_UNCONFIRMED_BYTES:
            self._drop("unconfirmed_full", subject)
            return
        ttl = data.headers.get("Zmesh-Ttl")
        headers = {**data.headers, "Nats-Msg-Id": data.headers["Zmesh-Id"]}
        self._seq += 1
        entry = _Out(subject, data._replace(headers=headers), size,
                     time.time() + float(ttl) if ttl else float("inf"))
        self._out[self._seq] = entry
        self._bytes += size
        self._send(self._seq, entry)

    def _send(self, seq: int, entry: _Out) -> None:
        self._sent_at[seq] = time.monotonic()
        self._publish(entry.subject, entry.data, f"{self.inbox}{seq}")

    def _done(self, seq: int) -> None:
        entry = self._out.pop(seq, None)
        self._sent_at.pop(seq, None)
        if entry is not None:
            self._bytes -= entry.size
            if not self._out:
                self._on_confirmed()

    def on_reply(self, subject: str, headers: dict[str, str] | None, body: bytes) -> None:
        """The server's answer to publish ``subject``'s sequence number."""
        try:
            seq = int(subject[len(self.inbox):])
        except ValueError:
            return
        if seq not in self._out:
            return  # confirmed before (an answer to a resend)
        if headers and headers.get("Status") == "503":
            self._count("no_stream")  # JetStream not ready (a restarting server): sent again on the next tick
            self._sent_at[seq] = 0.0
            return
        try:
            answer = json.loads(body)
        except ValueError:
            answer = {}
        error = answer.get("error") if isinstance(answer, dict) else None
        if error is None:
            self._done(seq)
            return
        code = error.get("err_code") if isinstance(error, dict) else None
        self._drop("queue_full" if code in _FULL else "refused_by_server", self._out[seq].subject)
        self._done(seq)

    def tick(self) -> None:
        """Send again what waited ``resend`` seconds; drop what expired meanwhile."""
        now, wall = time.monotonic(), time.time()
        for seq, sent in list(self._sent_at.items()):
            if now - sent < self.resend:
                continue
            entry = self._out[seq]
            if wall > entry.expires:
                self._drop("expired_unconfirmed", entry.subject)
                self._done(seq)
                continue
            self._count("resent")
            self._send(seq, entry)

    def resend_all(self) -> None:
        for seq in self._sent_at:
            self._sent_at[seq] = 0.0
        self.tick()
