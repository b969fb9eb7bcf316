"""Keys and trust: who may join a mesh (CurveZMQ).

A node with a key (``Node(mesh, key="keys/alice.key_secret", trusted="keys")``)
encrypts every connection with CurveZMQ and admits only the public keys it
trusts, on every socket. See docs/security.md for the threat model.

* :func:`keygen` (``zmesh keygen NAME``) writes ``NAME.key`` (the public
  certificate, to share) and ``NAME.key_secret`` (created mode 0600, to keep),
  in the certificate format of pyzmq's :mod:`zmq.auth`.
* :class:`TrustedKeys` is the set of trusted public keys: from directories of
  ``*.key`` files, ``.key`` files and Z85 keys; it can be changed while the
  mesh runs (:meth:`TrustedKeys.trust`, :meth:`~TrustedKeys.distrust`,
  :meth:`~TrustedKeys.reload`).
* :func:`resolve_security` turns ``Node``'s ``key``/``trusted``/``insecure``
  arguments (or ``ZMESH_KEY``/``ZMESH_TRUSTED``) into a :class:`Security`, and
  :func:`lan_refusal` is the "secure by default" rule: a node reachable from
  other hosts needs keys unless it is told ``insecure=True``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

import zmq
import zmq.auth

from ._keyfiles import write_key_pair
from .errors import SecurityError

__all__ = [
    "KEY_ENV_VAR",
    "TRUSTED_ENV_VAR",
    "KeyPair",
    "Security",
    "TrustedKeys",
    "check_public_key",
    "keygen",
    "lan_refusal",
    "load_key",
    "require_curve",
    "resolve_security",
    "trust_store",
]

KEY_ENV_VAR = "ZMESH_KEY"
"""Path of this node's ``NAME.key_secret``, read when ``Node(key=None)``."""
TRUSTED_ENV_VAR = "ZMESH_TRUSTED"
"""A directory of ``*.key`` files, or comma-separated Z85 public keys, read when ``Node(trusted=None)``."""

log = logging.getLogger("zmesh")

#: What ``trusted=`` accepts: a directory, a ``.key`` file, comma-separated keys, or a list of those.
TrustSpec = Union[str, "os.PathLike[str]", bytes, Iterable[Union[str, "os.PathLike[str]", bytes]]]

_Z85_LENGTH = 40  # a 32-byte Curve25519 key in Z85

HOW_TO_MAKE_KEYS = (
    "make keys with `zmesh keygen NAME --dir DIR` (one per node, or one shared by all) and pass "
    "Node(key='DIR/NAME.key_secret', trusted='DIR') (or ZMESH_KEY / ZMESH_TRUSTED, or --key/--trusted "
    "on the command line)"
)


def require_curve() -> None:
    """SecurityError unless this pyzmq's libzmq was built with CurveZMQ."""
    if not zmq.has("curve"):
        raise SecurityError(
            f"this libzmq ({zmq.zmq_version()}, pyzmq {zmq.__version__}) was built without CurveZMQ, "
            "so keys cannot be used: install pyzmq from its wheels (`pip install --force-reinstall pyzmq`), "
            "which bundle a libzmq with CURVE, or build libzmq with libsodium"
        )


def check_public_key(key: str | bytes, where: str = "public key") -> str:
    """``key`` as Z85 text if it is a 40-character Z85 Curve25519 key; SecurityError otherwise."""
    if isinstance(key, bytes):
        try:
            key = key.decode("ascii")
        except UnicodeDecodeError:
            raise SecurityError(f"bad {where}: not Z85 text") from None
    if not isinstance(key, str):
        raise SecurityError(f"bad {where}: expected a Z85 string, got {type(key).__name__}")
    key = key.strip()
    try:
        raw = zmq.utils.z85.decode(key) if len(key) == _Z85_LENGTH else b""
    except (ValueError, KeyError, TypeError):
        raw = b""
    if len(raw) != 32:
        shown = key if len(key) <= 60 else key[:57] + "..."
        raise SecurityError(
            f"bad {where} {shown!r}: expected 40 Z85 characters (the public-key line of a NAME.key file)"
        )
    return key


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A node's Curve25519 key pair, as Z85 text."""

    public: str
    secret: str = field(repr=False)


def keygen(name: str, directory: str | os.PathLike[str] = ".") -> tuple[Path, Path]:
    """Write ``NAME.key`` and ``NAME.key_secret`` into ``directory``; returns (public, secret) paths.

    The files are pyzmq :mod:`zmq.auth` certificates (``zmq.auth.load_certificate``
    reads them). Each is created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and its
    final mode, 0600 for the secret one and 0644 for the public one, so the secret
    key is never readable by others, not even while it is written, and an existing
    file (or link) is never overwritten. A missing ``directory`` is created, mode
    0700. Refuses (SecurityError), writing nothing, a directory another user could
    change: one owned by someone other than this user or root, or writable by group
    or others without the sticky bit (as ``/tmp`` has); its parents are not
    checked. If writing fails, nothing it created is left.
    """
    require_curve()
    if not name or name in (".", "..") or any(c in name for c in "/\\\0") or not name.isprintable():
        raise SecurityError(f"bad key name {name!r}: use letters, digits, '-', '_' or '.'")
    public, secret = zmq.curve_keypair()
    return write_key_pair(Path(directory), name, public.decode("ascii"), secret.decode("ascii"))


def load_key(path: str | os.PathLike[str]) -> KeyPair:
    """This node's key pair from a ``NAME.key_secret`` file; SecurityError if it cannot be used."""
    require_curve()
    shown = os.fspath(path)
    if not os.path.isfile(path):  # zmq.auth would say "Invalid certificate file"
        raise SecurityError(f"no key file {shown!r}: {'it is a directory' if os.path.isdir(path) else 'it does not exist'}"
                            f"; {HOW_TO_MAKE_KEYS}")
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise SecurityError(f"cannot read the key {shown!r}: {exc}; {HOW_TO_MAKE_KEYS}") from None
    if secret is None:
        raise SecurityError(
            f"{shown!r} holds only a public key: pass the secret certificate (NAME.key_secret), "
            "and give the NAME.key file to the nodes that should trust this one"
        )
    pair = KeyPair(check_public_key(public, f"public key in {shown!r}"), secret.decode("ascii"))
    try:
        if len(zmq.utils.z85.decode(pair.secret)) != 32:
            raise ValueError
    except (ValueError, KeyError):
        raise SecurityError(f"bad secret key in {shown!r}") from None
    if os.name == "posix" and os.stat(path).st_mode & 0o077:
        log.warning("zmesh: the secret key %s is readable by other users: chmod 600 it", shown)
    return pair


def _read_file(path: str, names: dict[str, str]) -> str:
    """The public key in one ``NAME.key`` file; ``names[NAME]`` becomes it (the first file naming NAME wins)."""
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise SecurityError(f"cannot read the trusted key {path!r}: {exc}") from None
    if secret is not None:  # only its public half is used; but a secret should not travel to other nodes
        log.warning("zmesh: the trusted key %s holds a SECRET key: give other nodes only the NAME.key file", path)
    key = check_public_key(public, f"public key in {path!r}")
    name = os.path.basename(path)
    if name.endswith(".key"):
        names.setdefault(name[:-4], key)
    return key


def _read_source(entry: str | os.PathLike[str] | bytes, names: dict[str, str]) -> set[str]:
    """The keys one ``trusted`` entry names: a directory of ``*.key``, one ``.key`` file, or a key.
    Each ``NAME.key`` file also binds node name NAME to its key (into ``names``)."""
    if isinstance(entry, bytes):
        return {check_public_key(entry, "trusted key")}
    text = os.fspath(entry)
    if os.path.isdir(text):
        try:
            files = sorted(f for f in os.listdir(text) if f.endswith(".key"))
        except OSError as exc:
            raise SecurityError(f"cannot read the trusted keys in {text!r}: {exc}") from None
        if not files:  # a wrong path, most likely: this node would trust only its own key
            log.warning("zmesh: the trusted directory %s holds no .key files", text)
        return {_read_file(os.path.join(text, f), names) for f in files}
    if os.path.isfile(text):
        return {_read_file(text, names)}
    if isinstance(entry, str) and "," in text:
        return {check_public_key(k, "trusted key") for k in text.split(",") if k.strip()}
    if isinstance(entry, str) and len(text.strip()) == _Z85_LENGTH:
        return {check_public_key(text, "trusted key")}
    raise SecurityError(
        f"trusted entry {text!r} is neither a directory of .key files, a .key file, nor a Z85 public key"
    )


def _entries(spec: TrustSpec) -> list[str | os.PathLike[str] | bytes]:
    if isinstance(spec, (str, bytes, os.PathLike)):
        return [spec]
    entries = list(spec)
    for entry in entries:
        if not isinstance(entry, (str, bytes, os.PathLike)):
            raise SecurityError(f"trusted entries are paths or Z85 keys, got {entry!r}")
    return entries


class TrustedKeys:
    """The public keys a node admits, safe to read from any thread.

    The set is: the keys its sources name (re-read by :meth:`reload`), plus
    this node's own key, plus keys added by :meth:`trust`, minus keys removed
    by :meth:`distrust` (until trusted again). ``keys`` is a frozenset that
    is replaced whole on every change, so readers need no lock.
    """

    def __init__(self, spec: TrustSpec | None, own: str | None = None) -> None:
        self._lock = threading.Lock()
        self._sources = _entries(spec) if spec is not None else []
        self._own = own
        self._added: set[str] = set()
        self._removed: set[str] = set()
        self._from_sources: set[str] = set()
        #: Node name -> the key its ``NAME.key`` file holds (replaced whole on :meth:`reload`):
        #: in keyed mode only that key may join with that name (docs/security.md, *Identities*).
        self.names: Mapping[str, str] = {}
        names: dict[str, str] = {}
        for entry in self._sources:
            self._from_sources |= _read_source(entry, names)
        self.names = names
        self.keys: frozenset[str] = frozenset()
        self._update()

    def key_of_name(self, node_id: str) -> str | None:
        """The key the trusted ``NAME.key`` files bind node name ``node_id`` to, if any."""
        return self.names.get(node_id)

    def _update(self) -> None:
        found = self._from_sources | self._added
        if self._own is not None:
            found.add(self._own)
        self.keys = frozenset(found - self._removed)

    def __contains__(self, key: object) -> bool:
        return key in self.keys

    def trust(self, *keys: str | bytes) -> frozenset[str]:
        """Admit these public keys from now on; returns the ones that were not trusted before."""
        checked = [check_public_key(k, "key to trust") for k in keys]
        with self._lock:
            before = self.keys
            self._added.update(checked)
            self._removed.difference_update(checked)
            self._update()
            return self.keys - before

    def distrust(self, *keys: str | bytes) -> frozenset[str]:
        """Stop admitting these keys (even if a source names them, until trusted again);
        returns the ones that were trusted before."""
        checked = [check_public_key(k, "key to distrust") for k in keys]
        with self._lock:
            before = self.keys
            self._added.difference_update(checked)
            self._removed.update(checked)
            self._update()
            return before - self.keys

    def reload(self) -> tuple[frozenset[str], frozenset[str]]:
        """Read the sources again (a key file added to or deleted from the
        directory); returns (keys now trusted, keys no longer trusted)."""
        fresh: set[str] = set()
        names: dict[str, str] = {}
        for entry in self._sources:
            fresh |= _read_source(entry, names)
        with self._lock:
            before = self.keys
            self._from_sources = fresh
            self.names = names
            self._update()
            return self.keys - before, before - self.keys


@dataclass(frozen=True)
class Security:
    """How a node secures its sockets: keys and trust (``key is None``: keyless)."""

    key: KeyPair | None = None
    trusted: TrustedKeys | None = None
    insecure: bool = False

    @property
    def keyed(self) -> bool:
        return self.key is not None


def trust_store(security: Security) -> TrustedKeys:
    """The trusted set of a keyed node; SecurityError for a keyless one."""
    if security.trusted is None:
        raise SecurityError(f"this node has no key, so it trusts no keys: {HOW_TO_MAKE_KEYS}")
    return security.trusted


def resolve_security(
    key: str | os.PathLike[str] | None,
    trusted: TrustSpec | None,
    insecure: bool,
    environ: Mapping[str, str] | None = None,
) -> Security:
    """``Node``'s ``key``, ``trusted`` and ``insecure`` arguments, with
    ``ZMESH_KEY``/``ZMESH_TRUSTED`` for the ones left None.

    ``trusted`` without a key is an error (there is nothing to check it
    with); a key without ``trusted`` trusts only itself, so nodes that share
    one key pair admit each other.
    """
    if not isinstance(insecure, bool):
        raise TypeError(f"insecure must be True or False, got {insecure!r}")
    env = os.environ if environ is None else environ
    from_env = key is None and bool(env.get(KEY_ENV_VAR, "").strip())
    if key is None:
        key = env.get(KEY_ENV_VAR, "").strip() or None
    if trusted is None:
        trusted = env.get(TRUSTED_ENV_VAR, "").strip() or None
    if key is None:
        if trusted is not None:
            raise SecurityError(f"trusted keys are given but no key for this node: {HOW_TO_MAKE_KEYS}")
        return Security(insecure=insecure)
    if not isinstance(key, (str, os.PathLike)):
        raise TypeError(f"key must be the path of a NAME.key_secret file, got {key!r}")
    try:
        pair = load_key(key)
    except SecurityError as exc:
        if from_env:
            raise SecurityError(f"{KEY_ENV_VAR}: {exc}") from None
        raise
    return Security(pair, TrustedKeys(trusted, own=pair.public), insecure)


def lan_refusal(local_only: bool, keyed: bool, insecure: bool, addresses: Iterable[str] = ()) -> str | None:
    """Why a node may not start (None: it may): secure by default, like mosquitto 2.

    A node whose sockets only listen on loopback may run without keys; one
    that other hosts can reach needs keys, unless told ``insecure=True``.
    """
    if local_only or keyed or insecure:
        return None
    where = ", ".join(addresses) or "a non-loopback address"
    return (
        f"refusing to listen on {where} without keys: any host on that network could join the mesh, "
        f"read its broadcasts and speak for its agents. To secure it, {HOW_TO_MAKE_KEYS}. "
        "To run unauthenticated anyway (a lab network you trust), pass insecure=True (--insecure)"
    )
