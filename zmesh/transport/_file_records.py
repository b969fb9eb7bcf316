"""A file-bus node's membership (internal): ``DIR/nodes/NODE.record``, written
under a temporary name and renamed into place, its modification time
touched every heartbeat; a record untouched for ``expiry`` seconds is a node
that died, and one that is gone, a node that closed."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Callable

from .._wire.names import node_address
from .message import MessageHost
from ._file_layout import BusLayout, from_component, write_atomically

__all__ = ["FileRecords"]


class FileRecords:
    """This node's record, and what it read of the others' (``before_news``: called
    before a record that changed is told, so what its node wrote first is read first)."""

    def __init__(self, layout: BusLayout, node_id: str, expiry: float, drop: Callable[[str, str], None],
                 before_news: Callable[[], None]) -> None:
        self._layout = layout
        self._node_id = node_id
        self._expiry_ns = expiry * 1e9
        self._drop = drop
        self._before_news = before_news
        self._heard: dict[str, tuple[int, bytes]] = {}  # node -> (its record's mtime_ns, the record)
        self.record: bytes | None = None  # this node's, while it is to be touched

    def put(self, data: bytes) -> None:
        self.record = data
        path = self._layout.node_record(self._node_id)
        try:
            write_atomically(path, data)
        except OSError as exc:
            self._drop("record_failed", f"{path.name}: {exc}")

    def touch(self) -> None:
        """Once a heartbeat: this node is alive (its record put again if it was taken away)."""
        if self.record is None:
            return
        try:
            os.utime(self._layout.node_record(self._node_id))
        except OSError:
            self.put(self.record)

    def withdraw(self) -> None:
        if self.record is None:
            return
        self.record = None
        try:
            self._layout.node_record(self._node_id).unlink()
        except OSError:
            pass

    def scan(self, host: MessageHost) -> None:
        """Tell ``host`` of every record new, changed or gone since the last scan."""
        now = time.time_ns()
        seen: set[str] = set()
        try:
            entries = list(os.scandir(self._layout.nodes))
        except OSError:
            entries = []
        for entry in entries:
            if not entry.name.endswith(".record") or entry.name.startswith("."):
                continue
            node_id = from_component(entry.name[:-7])
            if node_id == self._node_id:
                continue
            try:
                mtime = entry.stat().st_mtime_ns
                if now - mtime > self._expiry_ns:  # not touched for longer than a node lives without: it died
                    self._clear(node_id, Path(entry.path))
                    continue
                heard = self._heard.get(node_id)
                data = heard[1] if heard is not None and heard[0] == mtime else Path(entry.path).read_bytes()
            except OSError:
                continue
            seen.add(node_id)
            self._heard[node_id] = (mtime, data)
            if heard is None or heard[1] != data:
                self._before_news()
                host.on_record(node_id, data)
        for gone in set(self._heard) - seen:
            del self._heard[gone]
            host.on_record(gone, None)

    def _clear(self, node_id: str, record: Path) -> None:
        """What a node that died left: its record, its own folder (its subscriptions, so
        nothing more is written there) and its agents' records; not its agents' inboxes
        (what waits there is for their next host)."""
        layout = self._layout
        with contextlib.suppress(OSError):
            record.unlink()
        shutil.rmtree(layout.agent(node_address(node_id)), ignore_errors=True)
        with contextlib.suppress(OSError):
            for entry in os.scandir(layout.agents):
                if entry.name.endswith(".json") and entry.is_file():
                    with contextlib.suppress(OSError, ValueError, AttributeError):
                        if json.loads(Path(entry.path).read_bytes()).get("node") == node_id:
                            os.unlink(entry.path)
