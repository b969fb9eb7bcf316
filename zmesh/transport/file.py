"""The file bus: nodes on one host meet in a directory, ``Node("lab", transport="file:///tmp/bus")``.

Standard library only. The layout is the seed design's ``FileBroker``
(:mod:`._file_layout`, docs/transports.md): a message is a JSON envelope
file in its agent's ``inbox``, written under a temporary name and renamed
into place; its reader deletes it once read (QoS 0, requests, replies) or
once its handler ran (one-way QoS 1/2, so a node that dies leaves it for
the agent's next host). A broadcast is a file in the inbox of every
subscriber (each node's own directory, ``agents/zmesh.node.NODE``, and
the seed's agents, which subscribe with a file), written by its sender:
no broker process is needed. What a seed ``FileBroker`` publishes in
``topics/`` is routed by the first node that claims it (a rename).

New files are noticed with inotify on Linux (at once), else by polling
every ``poll`` seconds; ``topics/`` is looked at every ``topic_poll``
seconds. Each node's record is ``nodes/NODE.record``, touched every
``heartbeat``; one untouched for ``expiry`` seconds is a node that died.
One mesh per directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from .._wire.names import NODE_ADDRESS_PREFIX, node_address
from ..errors import TransportError
from ..message import Message, iso_timestamp, new_id
from .base import TransportCapabilities
from ._checks import check_liveness, check_seconds
from ._counted import Counted
from .message import MessageHost, MessageTransport, MessageWire
from ._file_layout import ENVELOPE, BusLayout, write_atomically
from ._file_records import FileRecords
from ._file_subscribers import Subscribers
from ._file_watch import DirWatcher
from ._file_wire import MAX_FILE, Arrival, EnvelopeWire

__all__ = ["FileTransport"]

#: Seconds an address is still read after its agent left (see ``unlisten``).
LINGER = 2.0
#: Seconds before a held message given back (a full inbox) is read again.
GIVE_BACK_DELAY = 0.2
#: Seconds a file that is not (yet) an envelope is left for its writer to finish
#: (the seed's FileBroker writes in place); after that it is dropped, counted.
WRITE_WINDOW = 2.0


class FileTransport(Counted, MessageTransport):
    """A node on the file bus in directory ``url`` (``file:///path``, or a
    path). ``heartbeat``: seconds between touches of this node's record;
    ``expiry``: seconds after which an untouched record is a node that died;
    ``poll``: seconds between looks at an inbox where inotify is not to be
    had (or ``use_inotify=False``); ``topic_poll``: seconds between looks at
    ``topics/`` (what a seed ``FileBroker`` publishes)."""

    capabilities = TransportCapabilities(level="message", peers_can_vanish=True, discovery="none")
    name = "file"

    def __init__(self, url: str | os.PathLike[str], *, heartbeat: float = 1.0, expiry: float = 4.0,
                 poll: float = 0.05, topic_poll: float = 0.2, use_inotify: bool = True) -> None:
        text = os.fspath(url)
        if not isinstance(text, str) or not text:
            raise TransportError(f"a file bus is named by a file:// URL or a directory, got {url!r}")
        if text.startswith("file://"):
            parts = urlsplit(text)
            if parts.netloc not in ("", "localhost"):
                raise TransportError(f"a file bus is on this host: file:///path, got {text!r}")
            text = unquote(parts.path)
        check_seconds(heartbeat=heartbeat, expiry=expiry, poll=poll, topic_poll=topic_poll)
        check_liveness(heartbeat, expiry)
        self.root = Path(text).absolute()
        self.router_endpoint = self.root.as_uri()
        self.heartbeat, self.expiry = float(heartbeat), float(expiry)
        self.poll, self.topic_poll, self.use_inotify = float(poll), float(topic_poll), bool(use_inotify)
        self.layout = BusLayout(self.root)
        self._host: MessageHost | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._node_id = ""
        self._watcher: DirWatcher | None = None
        self._listening: dict[Path, str] = {}  # inbox -> its address
        self._lingering: dict[str, asyncio.TimerHandle] = {}
        self._held: set[str] = set()  # files delivered and not yet settled
        self._patterns: set[str] = set()
        self._subscribers = Subscribers(self.layout)
        self._records: FileRecords | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._timers: set[asyncio.TimerHandle] = set()
        self._closing = False
        self._counters: dict[str, int] = {}

    def make_wire(self, max_payload: int, encoder: Any, decoder: Any) -> MessageWire:
        return EnvelopeWire(max_payload, encoder, decoder)

    def reaches(self, address: str) -> bool:
        """An agent of the seed's (no zmesh node's): its inbox or subscriptions folder is there."""
        agent = self.layout.agent(address)
        return (agent / "inbox").is_dir() or (agent / "subscriptions").is_dir()

    # -- lifecycle ---------------------------------------------------------

    async def start(self, host: MessageHost, mesh: str, node_id: str, loop: asyncio.AbstractEventLoop) -> None:
        if self._host is not None or self._closing:
            raise TransportError("this FileTransport is started already (or closed): give each node its own")
        try:
            self.layout.make()
        except OSError as exc:
            raise TransportError(f"cannot use {self.root} as a file bus: {exc}") from None
        self._host, self._loop, self._node_id = host, loop, node_id
        self._records = FileRecords(self.layout, node_id, self.expiry, self._drop, self._subscribers.refresh)
        self._watcher = DirWatcher(loop, self._changed, self.poll, self.use_inotify)
        self._subscribers.watcher = self._watcher
        self._watcher.add(self.layout.nodes)
        self._watcher.add(self.layout.agents, notice=False)  # a new agent folder (a seed agent subscribing)
        self._subscribers.refresh()
        self._tasks = [loop.create_task(self._beat()), loop.create_task(self._route_topics())]
        loop.call_soon(self._first_scan)

    def _first_scan(self) -> None:
        self._scan_records()
        if self._host is not None:
            self._host.on_records_loaded()

    async def withdraw(self) -> None:
        if self._records is not None:
            self._records.withdraw()

    async def close(self) -> None:
        if self._host is None or self._closing:
            return
        if self._records is not None:
            self._records.withdraw()
        self._closing = True
        for timer in [*self._timers, *self._lingering.values()]:
            timer.cancel()
        for address in list(self._listening.values()):
            self._stop_listening(address)
        for pattern in list(self._patterns):
            self.unsubscribe(pattern)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        if self._watcher is not None:
            await self._watcher.close()
        self._host = None

    # -- membership ----------------------------------------------------------

    def put_record(self, data: bytes) -> None:
        if self._records is not None and not self._closing:
            self._records.put(data)

    def _scan_records(self) -> None:
        if self._host is not None and self._records is not None:
            self._records.scan(self._host)

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat)
            if self._records is not None:
                self._records.touch()
            self._scan_records()
            self._subscribers.refresh()

    # -- addresses and patterns ---------------------------------------------

    def listen(self, address: str) -> None:
        timer = self._lingering.pop(address, None)
        if timer is not None:
            timer.cancel()
            return
        inbox = self.layout.inbox(address)
        if inbox in self._listening or self._watcher is None:
            return
        try:
            inbox.mkdir(parents=True, exist_ok=True)
            if not address.startswith(NODE_ADDRESS_PREFIX):
                record = {"agent_id": address, "node": self._node_id, "transport": "zmesh", "pid": os.getpid(),
                          "since": iso_timestamp(time.time())}
                write_atomically(self.layout.agent_record(address), json.dumps(record).encode())
        except OSError as exc:
            self._drop("listen_failed", f"{address}: {exc}")
            return
        self._listening[inbox] = address
        self._watcher.add(inbox)

    def unlisten(self, address: str) -> None:
        """Read ``address`` for ``LINGER`` seconds more: what was already on its way
        is dead-lettered (or answered) at this node, as for an agent that left."""
        if self.layout.inbox(address) in self._listening and self._loop is not None \
                and address not in self._lingering:
            self._lingering[address] = self._loop.call_later(LINGER, self._stop_listening, address)

    def _stop_listening(self, address: str) -> None:
        self._lingering.pop(address, None)
        inbox = self.layout.inbox(address)
        if self._listening.pop(inbox, None) is None:
            return
        if self._watcher is not None:
            self._watcher.remove(inbox)
        if not self._is_ours(address):
            return  # another node hosts it now: its record and its inbox are that node's
        with contextlib.suppress(OSError):
            self.layout.agent_record(address).unlink()
        with contextlib.suppress(OSError):  # empty: nobody waits there (what is left waits for its next host)
            inbox.rmdir()
            self.layout.agent(address).rmdir()

    def _is_ours(self, address: str) -> bool:
        """Is ``address`` this node's own, or an agent whose record names this node (or none)?"""
        if address.startswith(NODE_ADDRESS_PREFIX):
            return True
        try:
            return bool(json.loads(self.layout.agent_record(address).read_bytes()).get("node") == self._node_id)
        except FileNotFoundError:
            return True
        except (OSError, ValueError, AttributeError):
            return False

    def subscribe(self, pattern: str) -> None:
        if pattern in self._patterns or self._closing:
            return
        address = node_address(self._node_id)
        path = self.layout.subscription(address, pattern)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.layout.inbox(address).mkdir(parents=True, exist_ok=True)
            write_atomically(path, pattern.encode())
        except OSError as exc:
            self._drop("subscribe_failed", f"{pattern}: {exc}")
            return
        self._patterns.add(pattern)
        self._subscribers.add(address, pattern)

    def unsubscribe(self, pattern: str) -> None:
        if pattern not in self._patterns:
            return
        self._patterns.discard(pattern)
        address = node_address(self._node_id)
        self._subscribers.discard(address, pattern)
        with contextlib.suppress(OSError):
            self.layout.subscription(address, pattern).unlink()

    # -- what goes out ---------------------------------------------------------

    def _write(self, path: Path, data: bytes, reason: str) -> bool:
        try:
            write_atomically(path, data)
            return True
        except OSError as exc:
            self._drop(reason, f"{path.name}: {exc}")
            return False

    def send(self, address: str, data: Arrival) -> None:
        if self._closing:
            self._count("closed")
            return
        inbox = self.layout.inbox(address)
        if not inbox.is_dir():
            if not (self.layout.subscriptions(address)).is_dir():
                self._unreachable(address, data)
                return
            with contextlib.suppress(OSError):
                inbox.mkdir(exist_ok=True)  # a seed agent that has only subscribed: as its route() does
        self._write(inbox / self.layout.envelope_name(data.msg_id or new_id()), data.data, "send_failed")

    def _unreachable(self, address: str, data: Arrival) -> None:
        """No inbox for ``address``: dropped and counted; a request's caller hears so at once."""
        self._drop("no_listener", address)
        host = self._host
        header = (data.envelope or {}).get("header") or {}
        if host is None or not header.get("correlation_id") or header.get("type") == "result":
            return
        why = f"no node listens for agent {address!r} any more (its inbox is gone)"
        reply = Message("result", address, header.get("reply_to") or header.get("sender", ""), header.get("topic", ""),
                        why, header["correlation_id"], status="not_found", id=new_id(), timestamp=time.time())
        envelope = reply.to_envelope()
        host.on_message(Arrival(json.dumps(envelope).encode(), envelope))

    def publish(self, topic: str, data: Arrival) -> None:
        if self._closing:
            self._count("closed")
            return
        name = self.layout.envelope_name(data.msg_id or new_id())
        for address in self._subscribers.of(topic):
            inbox = self.layout.inbox(address)
            with contextlib.suppress(OSError):
                inbox.mkdir(parents=True, exist_ok=True)  # a seed agent's, as its FileBroker.route does
            self._write(inbox / name, data.data, "send_failed")

    # -- what comes in -----------------------------------------------------------

    def _changed(self, directory: Path) -> None:
        if directory == self.layout.nodes:
            self._scan_records()
            return
        if directory == self.layout.agents or directory.name == "subscriptions":
            self._subscribers.stale = True
            return
        address = self._listening.get(directory)
        if address is None or self._host is None or self._closing:
            return
        if address in self._lingering and not self._is_ours(address):
            self._stop_listening(address)  # its agent's new node reads it from now on
            return
        try:
            names = sorted(n for n in os.listdir(directory) if n.endswith(ENVELOPE) and not n.startswith("."))
        except OSError:
            return
        for name in names:
            path = os.path.join(directory, name)
            if path in self._held:
                continue
            self._arrived(address, path)

    def _arrived(self, address: str, path: str) -> None:
        host = self._host
        if host is None:
            return
        try:
            with open(path, "rb") as source:
                data = source.read(MAX_FILE + 1)
        except OSError:
            return  # taken meanwhile
        if len(data) > MAX_FILE:
            with contextlib.suppress(OSError):
                os.unlink(path)
            self._drop("too_big", path)
            return
        envelope: Any = None
        try:
            envelope = json.loads(data)
            header = envelope.get("header", {})
            publication = address.startswith(NODE_ADDRESS_PREFIX) and header.get("target", "") != address
            held = (not publication and int(header.get("qos", 0) or 0) > 0 and not header.get("correlation_id")
                    and header.get("type") != "result")
        except (ValueError, AttributeError, TypeError, UnicodeDecodeError):
            if _still_written(path):
                return  # a writer that does not rename (the seed's FileBroker): read once it is done
            envelope, header, held, publication = None, {}, False, False
        if not held:  # read, then deleted (the seed's acknowledgement); by one reader only
            taken = os.path.join(os.path.dirname(path), f".taken-{os.getpid()}-{os.path.basename(path)}")
            try:
                os.rename(path, taken)
            except OSError:
                return  # another reader took it first
            with contextlib.suppress(OSError):
                os.unlink(taken)
        else:
            self._held.add(path)
        arrival = Arrival(data, envelope if isinstance(envelope, dict) else None, path if held else "",
                          "" if publication else address)
        if publication:
            host.on_publication(arrival)  # a broadcast this node subscribed to
        else:
            host.on_message(arrival)

    def is_held(self, data: Arrival) -> bool:
        return bool(data.path)

    def settle(self, data: Arrival, handled: bool) -> bool:
        path = data.path
        if handled or self._closing or self._loop is None:
            self._held.discard(path)
            with contextlib.suppress(OSError):
                os.unlink(path)
            return False
        timer: asyncio.TimerHandle

        def again() -> None:  # left where it is: read again, by whoever hosts the agent then
            self._timers.discard(timer)
            self._held.discard(path)
            directory = Path(path).parent
            if directory in self._listening:
                self._changed(directory)

        timer = self._loop.call_later(GIVE_BACK_DELAY, again)
        self._timers.add(timer)
        return True

    async def _route_topics(self) -> None:
        """What a seed FileBroker published in ``topics/``: claimed (renamed) by one node,
        then delivered to its target, or to the subscribers of its topic."""
        while True:
            await asyncio.sleep(self.topic_poll)
            for folder, _, files in os.walk(self.layout.topics):
                for name in files:
                    if name.endswith(ENVELOPE) and not name.startswith("."):
                        self._route_one(os.path.join(folder, name))

    def _route_one(self, path: str) -> None:
        claimed = f"{path}.claimed-{os.getpid()}"
        try:
            os.rename(path, claimed)
            with open(claimed, "rb") as source:
                data = source.read(MAX_FILE + 1)
        except OSError:
            return  # another node took it
        envelope: Any = None
        try:
            envelope = json.loads(data)
            header = envelope["header"]
            target, topic = str(header.get("target") or ""), str(header.get("topic") or "")
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            if _still_written(claimed):
                with contextlib.suppress(OSError):
                    os.rename(claimed, path)  # its writer is not done: another pass takes it
                return
            target, topic = "", ""
        if len(data) > MAX_FILE or not (target or topic):
            self._drop("malformed", f"{Path(path).name} in topics/")
        elif target:
            self.send(target, Arrival(data, envelope))
        else:
            self.publish(topic, Arrival(data, envelope))
        with contextlib.suppress(OSError):
            os.unlink(claimed)



def _still_written(path: str) -> bool:
    """Was ``path`` changed within ``WRITE_WINDOW`` seconds (a writer may not be done with it)?"""
    try:
        return time.time() - os.path.getmtime(path) < WRITE_WINDOW
    except OSError:
        return False
