"""A node's durable state for QoS 1 and 2: ``Node(..., store="path/to/file.db")``.

What it keeps:

* the *outbox*: one-way messages sent with ``qos >= 1`` that the receiving
  node has not acknowledged yet. A node started again with the same store
  sends them again once their sender agent is registered and their target
  is reachable (until their ttl runs out);
* the ids of ``qos = 2`` messages this node's agents handled, so a repeat
  that arrives after a restart is recognised and acknowledged, not handled
  again: each sending agent's newest ``seen_per_sender``, and
  ``seen_limit`` in all (past that, the senders with the most lose their
  oldest first), so one sender's flood neither fills the disk nor pushes
  out another sender's ids.

Writes are buffered and committed, together, before the frames that depend
on them leave the node (a message goes out only once it is in the outbox;
an acknowledgement or a reply only once the id it answers is recorded): one
commit per batch of messages, not one per message. SQLite runs in WAL mode
with ``synchronous=NORMAL``: it survives the process being killed; a power
cut may lose the last commits.

The file is private: created mode 0600 (its ``-wal`` and ``-shm`` take
the database file's mode; an older store readable by others is made
0600), in a directory that only its owner (or root) can write, else
:class:`StoreError`: the outbox holds message payloads.

One store belongs to one node at a time.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
from typing import Protocol, runtime_checkable

from .errors import ZmeshError
from .qos import fair_level

__all__ = ["Store", "SqliteStore", "StoreError", "SEEN_LIMIT", "SEEN_PER_SENDER"]

SEEN_LIMIT = 100_000  # handled qos 2 ids kept in all ...
SEEN_PER_SENDER = 20_000  # ... and per sending agent (a sender within QosLimits has at most 8192 unacknowledged per target)


class StoreError(ZmeshError):
    """The store could not be opened or written."""


@runtime_checkable
class Store(Protocol):
    """What the engine asks of a store. Calls come from the node's loop thread."""

    def put_outbox(self, msg_id: str, item: bytes) -> None: ...

    def delete_outbox(self, msg_id: str) -> None: ...

    def load_outbox(self) -> list[tuple[str, bytes]]: ...

    def put_seen(self, key: str) -> None:
        """Remember a handled qos 2 message: ``key`` is its sending agent and its id,
        joined by a NUL (``"sender\\x00id"``)."""

    def load_seen(self) -> list[str]: ...

    @property
    def dirty(self) -> bool: ...

    def commit(self) -> None: ...

    def close(self) -> None: ...


# Handled ids are kept by sender: a sender's name once (an agent id is up to
# 256 characters), its rows in the order they came (rowid), indexed by sender.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (id TEXT PRIMARY KEY, item BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS senders (sid INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS handled (sid INTEGER NOT NULL, id TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS handled_by_sender ON handled (sid);
"""


_WAL_LIMIT = 8 << 20  # bytes the -wal file is cut back to after a checkpoint


class SqliteStore:
    """The store behind ``Node(store=path)``: one SQLite file (standard library)."""

    def __init__(self, path: str | os.PathLike[str], *, seen_limit: int = SEEN_LIMIT,
                 seen_per_sender: int = SEEN_PER_SENDER) -> None:
        self.path = os.fspath(path)
        self.seen_limit = seen_limit
        self.seen_per_sender = seen_per_sender
        if os.name == "posix" and self.path not in ("", ":memory:"):
            _make_private(self.path)
        self._sids: dict[str, int] = {}  # sender -> its sid
        self._rows: dict[str, int] = {}  # sender -> its handled rows
        self._total = 0
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(f"PRAGMA journal_size_limit={_WAL_LIMIT}")
            self._db.executescript(_SCHEMA)
            self._migrate()
            self._count_rows()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {self.path!r}: {exc}") from None
        self._outbox: dict[str, bytes | None] = {}  # id -> item to write, or None to delete
        self._seen: list[str] = []
        self._closed = False

    def _migrate(self) -> None:
        """An older store's ``seen`` table (one row per ``sender NUL id``) moves to the tables by sender."""
        db = self._db
        if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'seen'").fetchone() is None:
            return
        keys = [str(k) for (k,) in db.execute("SELECT id FROM seen ORDER BY rowid")]
        db.execute("BEGIN")
        self._insert(keys)
        db.execute("DROP TABLE seen")
        db.execute("COMMIT")

    def _count_rows(self) -> None:
        db = self._db
        self._sids = {str(name): int(sid) for sid, name in db.execute("SELECT sid, name FROM senders")}
        names = {sid: name for name, sid in self._sids.items()}
        self._rows = {names[int(sid)]: int(n) for sid, n in db.execute("SELECT sid, count(*) FROM handled GROUP BY sid")}
        self._total = sum(self._rows.values())

    def put_outbox(self, msg_id: str, item: bytes) -> None:
        self._outbox[msg_id] = item

    def delete_outbox(self, msg_id: str) -> None:
        self._outbox[msg_id] = None  # the row may be on disk already

    def load_outbox(self) -> list[tuple[str, bytes]]:
        return [(str(i), bytes(b)) for i, b in self._db.execute("SELECT id, item FROM outbox ORDER BY rowid")]

    def put_seen(self, key: str) -> None:
        self._seen.append(key)

    def load_seen(self) -> list[str]:
        rows = self._db.execute("SELECT s.name, h.id FROM handled h JOIN senders s ON s.sid = h.sid ORDER BY h.rowid")
        return [f"{name}\x00{msg_id}" for name, msg_id in rows]

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
                self._insert(seen)
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            try:
                self._count_rows()  # as they are on disk
            except sqlite3.Error:
                pass
            raise StoreError(f"cannot write store {self.path!r}: {exc}") from None

    def _insert(self, keys: list[str]) -> None:
        """Add handled ids (in a transaction), then forget the oldest of the
        senders past ``seen_per_sender``, and of the biggest senders while
        there are more than ``seen_limit`` in all (each down to 90 %: the
        deletes come once per tenth, not with every row)."""
        db = self._db
        rows = []
        senders = self._rows
        for key in keys:
            sender, _, msg_id = key.partition("\x00")
            sid = self._sids.get(sender)
            if sid is None:
                new = db.execute("INSERT INTO senders (name) VALUES (?)", (sender,)).lastrowid
                assert new is not None
                sid = self._sids[sender] = new
            rows.append((sid, msg_id))
            senders[sender] = senders.get(sender, 0) + 1
        db.executemany("INSERT INTO handled (sid, id) VALUES (?, ?)", rows)
        self._total += len(rows)
        for sender in {key.partition("\x00")[0] for key in keys}:
            if senders[sender] > self.seen_per_sender:
                self._forget(sender, senders[sender] - int(self.seen_per_sender * 0.9))
        if self._total > self.seen_limit:
            sizes = sorted(((n, s) for s, n in senders.items()), reverse=True)
            level = fair_level([n for n, _ in sizes], self._total - int(self.seen_limit * 0.9))
            for n, sender in sizes:
                if n <= level:
                    break
                self._forget(sender, n - level)

    def _forget(self, sender: str, count: int) -> None:
        """Delete ``sender``'s ``count`` oldest handled ids."""
        db = self._db
        sid = self._sids[sender]
        db.execute("DELETE FROM handled WHERE rowid IN (SELECT rowid FROM handled WHERE sid = ? ORDER BY rowid LIMIT ?)",
                   (sid, count))
        self._total -= count
        left = self._rows[sender] - count
        if left > 0:
            self._rows[sender] = left
        else:
            del self._rows[sender], self._sids[sender]
            db.execute("DELETE FROM senders WHERE sid = ?", (sid,))

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
        why = "it is a symbolic link, which is refused" if exc.errno == errno.ELOOP else exc.strerror
        raise StoreError(f"cannot open store {path!r}: {why}") from None
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
