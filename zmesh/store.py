"""A node's durable state for QoS 1 and 2: ``Node(..., store="path/to/file.db")``.

What it keeps:

* the *outbox*: one-way messages sent with ``qos >= 1`` that the receiving
  node has not acknowledged yet. A node started again with the same store
  sends them again once their sender agent is registered and their target
  is reachable (until their ttl runs out);
* the ids of ``qos = 2`` messages this node's agents handled (the newest
  ``seen_limit``), so a repeat that arrives after a restart is recognised
  and acknowledged, not handled again.

Writes are buffered and committed before the frames that depend on them
leave the node (a message goes out only once it is in the outbox; an
acknowledgement only once the id it acknowledges is recorded). SQLite runs
in WAL mode with ``synchronous=NORMAL``: it survives the process being
killed; a power cut may lose the last commits.

The file is private: created mode 0600 (its ``-wal`` and ``-shm`` take
the database file's mode; an older store readable by others is made
0600), in a directory that only its owner (or root) can write, else
:class:`StoreError`: the outbox holds message payloads.

One store belongs to one node at a time.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from typing import Protocol, runtime_checkable

from .errors import ZmeshError

__all__ = ["Store", "SqliteStore", "StoreError"]


class StoreError(ZmeshError):
    """The store could not be opened or written."""


@runtime_checkable
class Store(Protocol):
    """What the engine asks of a store. Calls come from the node's loop thread."""

    def put_outbox(self, msg_id: str, item: bytes) -> None: ...

    def delete_outbox(self, msg_id: str) -> None: ...

    def load_outbox(self) -> list[tuple[str, bytes]]: ...

    def put_seen(self, key: str) -> None:
        """Remember a handled qos 2 message (its sender and id, as the engine keys it)."""

    def load_seen(self) -> list[str]: ...

    @property
    def dirty(self) -> bool: ...

    def commit(self) -> None: ...

    def close(self) -> None: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (id TEXT PRIMARY KEY, item BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS seen (id TEXT PRIMARY KEY);
"""


class SqliteStore:
    """The store behind ``Node(store=path)``: one SQLite file (standard library)."""

    def __init__(self, path: str | os.PathLike[str], *, seen_limit: int = 100_000) -> None:
        self.path = os.fspath(path)
        self.seen_limit = seen_limit
        if os.name == "posix" and self.path not in ("", ":memory:"):
            _make_private(self.path)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {self.path!r}: {exc}") from None
        self._outbox: dict[str, bytes | None] = {}  # id -> item to write, or None to delete
        self._seen: list[str] = []
        self._since_prune = 0
        self._closed = False

    def put_outbox(self, msg_id: str, item: bytes) -> None:
        self._outbox[msg_id] = item

    def delete_outbox(self, msg_id: str) -> None:
        self._outbox[msg_id] = None  # the row may be on disk already

    def load_outbox(self) -> list[tuple[str, bytes]]:
        return [(str(i), bytes(b)) for i, b in self._db.execute("SELECT id, item FROM outbox ORDER BY rowid")]

    def put_seen(self, key: str) -> None:
        self._seen.append(key)

    def load_seen(self) -> list[str]:
        return [str(i) for (i,) in self._db.execute("SELECT id FROM seen ORDER BY rowid")]

    @property
    def dirty(self) -> bool:
        return bool(self._outbox or self._seen)

    def commit(self) -> None:
        if self._closed or not (self._outbox or self._seen):
            return
        outbox, self._outbox = self._outbox, {}
        seen, self._seen = self._seen, []
        db = self._db
        try:
            db.execute("BEGIN")
            puts = [(k, v) for k, v in outbox.items() if v is not None]
            if puts:
                db.executemany("INSERT OR REPLACE INTO outbox (id, item) VALUES (?, ?)", puts)
            deletes = [(k,) for k, v in outbox.items() if v is None]
            if deletes:
                db.executemany("DELETE FROM outbox WHERE id = ?", deletes)
            if seen:
                db.executemany("INSERT OR IGNORE INTO seen (id) VALUES (?)", [(i,) for i in seen])
                self._since_prune += len(seen)
                if self._since_prune >= max(1, self.seen_limit // 10):
                    self._since_prune = 0
                    db.execute(
                        "DELETE FROM seen WHERE rowid <= (SELECT max(rowid) FROM seen) - ?", (self.seen_limit,)
                    )
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise StoreError(f"cannot write store {self.path!r}: {exc}") from None

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.commit()
        finally:
            self._closed = True
            self._db.close()


def _make_private(path: str) -> None:
    """Create ``path`` mode 0600 (or make it so) before SQLite opens it, in a
    directory no other user can write: StoreError otherwise."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        st = os.stat(directory)
    except OSError as exc:
        raise StoreError(f"cannot open store {path!r}: {exc.strerror}: {directory!r}") from None
    if st.st_uid not in (os.geteuid(), 0):
        raise StoreError(f"refusing store {path!r}: its directory {directory!r} belongs to another user "
                         f"(uid {st.st_uid}), who could read or replace its files; keep it in a directory of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StoreError(f"refusing store {path!r}: its directory {directory!r} is writable by other users "
                         f"({stat.filemode(st.st_mode)}), who could read or replace its files; keep it in a "
                         f"directory only you can write (chmod go-w {directory!r}, or another directory)")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise StoreError(f"cannot open store {path!r}: {exc.strerror} (a symbolic link is refused)") from None
    try:
        if _too_open(path, os.fstat(fd)):
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    for suffix in ("-wal", "-shm", "-journal"):  # left by an older zmesh, or by SQLite from the file's old mode
        try:
            st = os.lstat(path + suffix)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            raise StoreError(f"refusing store {path!r}: {path + suffix!r} is a symbolic link")
        if _too_open(path + suffix, st):
            os.chmod(path + suffix, 0o600)


def _too_open(path: str, st: os.stat_result) -> bool:
    """Is ``path`` (ours, a regular file, else StoreError) readable or writable by others?"""
    if not stat.S_ISREG(st.st_mode):
        raise StoreError(f"refusing store file {path!r}: not a regular file")
    if st.st_uid != os.geteuid():
        raise StoreError(f"refusing store file {path!r}: it belongs to another user (uid {st.st_uid})")
    return bool(st.st_mode & 0o077)
