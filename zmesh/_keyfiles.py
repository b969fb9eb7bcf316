"""Writing a key pair's two certificate files (internal; :func:`zmesh.security.keygen`).

The files are in the format of pyzmq's :mod:`zmq.auth` (its
``_write_key_file``), so ``zmq.auth.load_certificate`` reads them. Each is
created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and its final mode, 0600 for
the secret, in the directory that was checked, opened once: no moment where
another user could read the secret, no file or link put there beforehand
taken over, no directory swapped in between the check and the write.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import stat
from pathlib import Path

from .errors import SecurityError

__all__ = ["certificate", "write_key_pair"]

_SECRET_BANNER = """#   ****  Generated on {0} by zmesh  ****
#   ZeroMQ CURVE **Secret** Certificate
#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.

"""
_PUBLIC_BANNER = """#   ****  Generated on {0} by zmesh  ****
#   ZeroMQ CURVE Public Certificate
#   Exchange securely, or use a secure mechanism to verify the contents
#   of this file after exchange. Store public certificates in your home
#   directory, in the .curve subdirectory.

"""
_POSIX = os.name == "posix"
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def certificate(public: str, secret: str | None = None) -> str:
    """A ``zmq.auth`` certificate: the public key, and the secret one if given."""
    text = (_SECRET_BANNER if secret else _PUBLIC_BANNER).format(datetime.datetime.now())
    text += f'metadata\ncurve\n    public-key = "{public}"\n'
    if secret:
        text += f'    secret-key = "{secret}"\n'
    return text


def write_key_pair(directory: Path, name: str, public: str, secret: str) -> tuple[Path, Path]:
    """``NAME.key`` (0644) and ``NAME.key_secret`` (0600) in ``directory``, created
    0700 if missing; SecurityError if it is not safe (see ``keygen``), if either
    file exists, or if writing fails, and then nothing it made is left."""
    paths = directory / f"{name}.key", directory / f"{name}.key_secret"
    made_directory = _make_directory(directory)
    dir_fd = None
    made: list[str] = []
    try:
        if _POSIX:
            dir_fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)
            if made_directory:
                os.fchmod(dir_fd, 0o700)  # exactly: the umask may have taken bits off
            _check_directory(directory, os.fstat(dir_fd))
        names = [path.name if dir_fd is not None else os.fspath(path) for path in paths]
        for path, where in zip(paths, names):
            if _exists(where, dir_fd):  # both, before writing either (O_EXCL also refuses, later)
                raise SecurityError(f"{path} already exists: delete it first, or choose another name")
        for path, where, text, mode in ((paths[1], names[1], certificate(public, secret), 0o600),
                                        (paths[0], names[0], certificate(public), 0o644)):
            try:
                fd = os.open(where, _CREATE, mode, dir_fd=dir_fd)
            except FileExistsError:
                raise SecurityError(f"{path} already exists: delete it first, or choose another name") from None
            made.append(where)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                if _POSIX:
                    os.fchmod(f.fileno(), mode)  # exactly: the umask may have taken bits off
                f.write(text)
    except BaseException as exc:
        for where in made:
            with contextlib.suppress(OSError):
                os.unlink(where, dir_fd=dir_fd)
        if made_directory:
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        if isinstance(exc, OSError):
            raise SecurityError(f"cannot write the key {name!r} in {directory}: {exc.strerror or exc}") from None
        raise
    finally:
        if dir_fd is not None:
            os.close(dir_fd)
    return paths


def _make_directory(directory: Path) -> bool:
    """Create ``directory`` (0700) and its missing parents; whether it was missing."""
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(directory, 0o700)
    except FileExistsError:
        return False
    except OSError as exc:
        raise SecurityError(f"cannot create the key directory {directory}: {exc.strerror or exc}") from None
    return True


def _exists(where: str, dir_fd: int | None) -> bool:
    try:
        os.lstat(where, dir_fd=dir_fd)  # a dangling link too
    except FileNotFoundError:
        return False
    return True


def _check_directory(directory: Path, st: os.stat_result) -> None:
    """SecurityError unless only we (or root) can change what ``directory`` holds."""
    if not stat.S_ISDIR(st.st_mode):
        raise SecurityError(f"cannot write keys in {directory}: it is not a directory")
    if st.st_uid not in (os.geteuid(), 0):
        raise SecurityError(
            f"refusing to write keys in {directory}: it belongs to another user (uid {st.st_uid}), "
            "who could replace them; use a directory of your own"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        raise SecurityError(
            f"refusing to write keys in {directory}: other users may write to it (mode "
            f"{stat.S_IMODE(st.st_mode):04o}), so they could replace them; `chmod go-w` it, or use a "
            "directory only you can change"
        )
